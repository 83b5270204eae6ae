"""Training configurations measured with MemTracker and estimated by batchfit.

Shared by ``test_estimator_vs_memtracker.py`` (which enforces the tolerance) and
``benchmarks/memory_accuracy.py`` (which reports the errors beside llm-analysis's).
Shapes are small so each measurement takes about a second on a CPU, but their
proportions vary (vocabulary against hidden size, GQA ratio, sequence length) so
that every term of the estimate is exercised.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.model_spec import ModelSpec
from planner.training import TrainingSetup

LLAMA_GQA = ModelSpec('llama-gqa', num_layers=3, hidden_size=384, num_heads=6, num_kv_heads=2,
                      head_dim=64, ffn_size=1024, vocab_size=4096, max_position_embeddings=1024)
LLAMA_MHA = ModelSpec('llama-mha', num_layers=2, hidden_size=256, num_heads=4, num_kv_heads=4,
                      head_dim=64, ffn_size=704, vocab_size=2048, max_position_embeddings=1024)
QWEN_TIED = ModelSpec('qwen-tied', num_layers=2, hidden_size=512, num_heads=8, num_kv_heads=2,
                      head_dim=64, ffn_size=1408, vocab_size=6000, qkv_bias=True,
                      tied_embeddings=True, max_position_embeddings=1024)
# HF GPT2LMHeadModel: fused c_attn, Python gelu_new, softmax in the scores' dtype.
GPT2_DROPOUT = ModelSpec('gpt2-dropout', num_layers=3, hidden_size=384, num_heads=6,
                         num_kv_heads=6, head_dim=64, ffn_size=1536, vocab_size=5000,
                         gated_mlp=False, activation='gelu_tanh', tied_embeddings=True,
                         position_embedding='learned', max_position_embeddings=1024,
                         norm='layernorm', qkv_bias=True, attn_out_bias=True, mlp_bias=True,
                         attention_dropout=0.1, hidden_dropout=0.1, fused_qkv=True,
                         python_gelu=True, softmax_fp32=False)
# CPU SDPA with attention dropout falls back to the math kernel (CUDA's flash kernel does
# not), so SDPA cases of GPT-2 turn attention dropout off.
GPT2 = replace(GPT2_DROPOUT, name='gpt2', attention_dropout=0.0, hidden_dropout=0.0)


@dataclass(frozen=True)
class Case:
    """One model and configuration; ``id`` names it in test reports."""

    id: str
    model: ModelSpec
    setup: TrainingSetup


def _case(model: ModelSpec, **setup: object) -> Case:
    s = TrainingSetup(**setup)  # type: ignore[arg-type]
    bits = [model.name, s.precision, s.attention, f'b{s.micro_batch}', f's{s.seq_len}']
    if s.recompute != 'none':
        bits.append(f'recompute-{s.recompute}')
    if s.grad_accum > 1:
        bits.append(f'accum{s.grad_accum}')
    if s.optimizer != 'adamw':
        bits.append(s.optimizer)
    if not s.foreach:
        bits.append('for-loop')
    return Case('-'.join(bits), model, s)


CASES: tuple[Case, ...] = (
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='fp32'),
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='amp-bf16'),
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='bf16'),
    _case(LLAMA_GQA, seq_len=256, micro_batch=3, precision='fp32', attention='eager'),
    _case(LLAMA_GQA, seq_len=256, micro_batch=3, precision='amp-bf16', attention='eager'),
    _case(LLAMA_GQA, seq_len=256, micro_batch=4, precision='amp-bf16', grad_accum=3),
    _case(LLAMA_GQA, seq_len=1024, micro_batch=1, precision='amp-bf16', recompute='full'),
    _case(LLAMA_GQA, seq_len=512, micro_batch=4, precision='fp32', recompute='full',
          attention='eager'),
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='fp32', optimizer='sgd-momentum'),
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='fp32', foreach=False),
    _case(LLAMA_GQA, seq_len=64, micro_batch=1, precision='fp32'),
    _case(QWEN_TIED, seq_len=512, micro_batch=2, precision='amp-bf16'),
    _case(QWEN_TIED, seq_len=512, micro_batch=4, precision='amp-bf16', recompute='full'),
    _case(QWEN_TIED, seq_len=256, micro_batch=2, precision='bf16', attention='eager'),
    _case(LLAMA_MHA, seq_len=512, micro_batch=4, precision='fp32', attention='eager'),
    _case(LLAMA_MHA, seq_len=512, micro_batch=4, precision='amp-bf16', grad_accum=2),
    _case(GPT2_DROPOUT, seq_len=512, micro_batch=2, precision='fp32', attention='eager'),
    _case(GPT2_DROPOUT, seq_len=512, micro_batch=2, precision='amp-bf16', attention='eager'),
    _case(GPT2_DROPOUT, seq_len=256, micro_batch=4, precision='bf16', attention='eager'),
    _case(GPT2_DROPOUT, seq_len=256, micro_batch=4, precision='fp32', attention='eager',
          grad_accum=2),
    _case(GPT2_DROPOUT, seq_len=512, micro_batch=2, precision='amp-bf16', attention='eager',
          recompute='full'),
    _case(GPT2, seq_len=512, micro_batch=2, precision='amp-bf16'),
    _case(GPT2, seq_len=512, micro_batch=4, precision='fp32', recompute='full'),
)


def measure(case: Case):
    """MemTracker's peak for a case (imports torch: call only where it is installed)."""
    from tests.groundtruth.measure import measure_training_peak

    s = case.setup
    return measure_training_peak(
        case.model, seq_len=s.seq_len, micro_batch=s.micro_batch, precision=s.precision,
        attention='sdpa' if s.attention == 'flash' else 'eager',
        checkpointing=s.recompute == 'full', optimizer=s.optimizer, foreach=s.foreach,
        grad_accum=s.grad_accum)
