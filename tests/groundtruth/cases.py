"""Training configurations measured with MemTracker and estimated by batchfit.

Shared by ``test_estimator_vs_memtracker.py`` (which enforces the tolerance) and
``benchmarks/memory_accuracy.py`` (which reports the errors beside llm-analysis's).
Shapes are small so each measurement takes about a second on a CPU, but their
proportions vary (vocabulary against hidden size, GQA ratio, sequence length) so
that every term of the estimate is exercised.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.memory.training import LoraSpec, TrainingSetup
from planner.models.spec import ModelSpec

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
# LoRA shrinks the model states and the saved activations, so the loss no longer hides the
# layers' own moments with a big vocabulary: with a small one, the peak moves into the
# forward (PEFT's fp32 copies), a layer's recomputation or the MLP's backward.
LLAMA_GQA_V256 = replace(LLAMA_GQA, name='llama-gqa-v256', vocab_size=256)
# GPT-2 with 256 positions: its causal-mask buffers (max_positions² bytes a layer, which
# no configuration knob decides) stay small beside a LoRA step's memory.
GPT2_DROPOUT_P256 = replace(GPT2_DROPOUT, name='gpt2-dropout-p256', max_position_embeddings=256)
GPT2_P256 = replace(GPT2, name='gpt2-p256', max_position_embeddings=256)
QV = ('q', 'v')
ALL_LINEAR = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')


@dataclass(frozen=True)
class Case:
    """One model and configuration; ``id`` names it in test reports."""

    id: str
    model: ModelSpec
    setup: TrainingSetup


def _case(model: ModelSpec, **setup: object) -> Case:
    # the reference harness's loop drops the model output, as the HF Trainer does
    s = TrainingSetup(loop='trainer', **setup)  # type: ignore[arg-type]
    bits = [model.name, s.precision, s.attention, f'b{s.micro_batch}', f's{s.seq_len}']
    if s.recompute != 'none':
        bits.append(f'recompute-{s.recompute}')
    if s.grad_accum > 1:
        bits.append(f'accum{s.grad_accum}')
    if s.optimizer != 'adamw':
        bits.append(s.optimizer)
    if not s.foreach:
        bits.append('for-loop')
    if s.lora is not None:
        targets = 'all' if set(s.lora.targets) == set(ALL_LINEAR) else ''.join(s.lora.targets)
        bits.append(f'lora{s.lora.base_bits}-r{s.lora.rank}-{targets}')
    return Case('-'.join(bits), model, s)


def _lora(rank: int, targets: tuple[str, ...], base_bits: int) -> LoraSpec:
    return LoraSpec(rank=rank, targets=targets, base_bits=base_bits)


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
    # LoRA (PEFT) on a frozen base: base_bits 16 is a bf16 base (also without autocast,
    # under 'fp32', where PEFT casts each adapter's input to fp32), 32 an fp32 base,
    # 4 QLoRA (bitsandbytes NF4, emulated). Adapters are fp32.
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='amp-bf16', lora=_lora(8, QV, 16)),
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='amp-bf16', recompute='full',
          lora=_lora(16, ALL_LINEAR, 16)),
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='amp-bf16',
          lora=_lora(16, ALL_LINEAR, 4)),
    _case(LLAMA_GQA, seq_len=1024, micro_batch=1, precision='amp-bf16', recompute='full',
          lora=_lora(8, QV, 4)),
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='fp32', lora=_lora(8, QV, 32)),
    _case(LLAMA_GQA, seq_len=512, micro_batch=2, precision='fp32', recompute='full',
          lora=_lora(16, ALL_LINEAR, 16)),
    _case(LLAMA_GQA, seq_len=256, micro_batch=3, precision='fp32', attention='eager',
          lora=_lora(16, ALL_LINEAR, 4)),
    _case(LLAMA_GQA, seq_len=256, micro_batch=3, precision='amp-bf16', attention='eager',
          grad_accum=2, lora=_lora(8, QV, 16)),
    _case(QWEN_TIED, seq_len=512, micro_batch=2, precision='amp-bf16', lora=_lora(8, QV, 16)),
    _case(QWEN_TIED, seq_len=512, micro_batch=4, precision='amp-bf16', recompute='full',
          lora=_lora(16, ALL_LINEAR, 16)),
    _case(QWEN_TIED, seq_len=512, micro_batch=2, precision='amp-bf16',
          lora=_lora(16, ALL_LINEAR, 4)),
    _case(QWEN_TIED, seq_len=512, micro_batch=2, precision='fp32', recompute='full',
          lora=_lora(8, QV, 4)),
    _case(QWEN_TIED, seq_len=256, micro_batch=2, precision='amp-bf16', attention='eager',
          lora=_lora(8, ALL_LINEAR, 32)),
    _case(LLAMA_GQA_V256, seq_len=256, micro_batch=3, precision='amp-bf16',
          lora=_lora(16, ALL_LINEAR, 16)),
    _case(LLAMA_GQA_V256, seq_len=256, micro_batch=3, precision='amp-bf16', recompute='full',
          lora=_lora(16, ALL_LINEAR, 16)),
    _case(LLAMA_GQA_V256, seq_len=256, micro_batch=3, precision='fp32', lora=_lora(16, QV, 4)),
    _case(LLAMA_GQA_V256, seq_len=256, micro_batch=3, precision='fp32', recompute='full',
          lora=_lora(16, ALL_LINEAR, 16)),
    _case(LLAMA_GQA_V256, seq_len=64, micro_batch=3, precision='amp-bf16', recompute='full',
          lora=_lora(64, ('k', 'gate', 'down'), 4)),
    _case(GPT2_DROPOUT_P256, seq_len=256, micro_batch=2, precision='amp-bf16',
          attention='eager', lora=_lora(8, QV, 16)),
    _case(GPT2_P256, seq_len=256, micro_batch=2, precision='fp32', recompute='full',
          lora=_lora(8, ALL_LINEAR, 4)),
)


def measure(case: Case):
    """MemTracker's peak for a case (imports torch: call only where it is installed)."""
    from tests.groundtruth.measure import measure_training_peak

    s = case.setup
    return measure_training_peak(
        case.model, seq_len=s.seq_len, micro_batch=s.micro_batch, precision=s.precision,
        attention='sdpa' if s.attention == 'flash' else 'eager',
        checkpointing=s.recompute == 'full', optimizer=s.optimizer, foreach=s.foreach,
        grad_accum=s.grad_accum, lora=s.lora)
