"""Ground-truth cases: transformers' own models for every model type batchfit reads.

Each case is a config.json dict (what a user points ``--model`` at, shrunk so a real CPU
step takes a second or two) and a training configuration. The same dict goes to
transformers (``hf_measure.measure_hf``) and to batchfit's reader
(``planner.models.hf_config.spec_from_hf_config``), so a case checks the reader too.

Shapes keep the proportions that decide which term dominates: vocabulary 16-64 times
the hidden size (Llama 3: 128256 / 4096 = 31), GQA, a few layers.

``FITTED`` names the cases the estimator's modelling choices were tuned on while
developing it; every other case is held out (docs/BENCHMARKS.md reports both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.memory.training import LoraSpec, TrainingSetup
from planner.models.hf_config import spec_from_hf_config
from planner.models.spec import ModelSpec

_LLAMA_BODY = {'hidden_size': 128, 'intermediate_size': 352, 'num_hidden_layers': 3,
               'num_attention_heads': 4, 'num_key_value_heads': 2, 'head_dim': 32,
               'vocab_size': 4096, 'max_position_embeddings': 1024,
               'tie_word_embeddings': False}
CONFIGS: dict[str, dict[str, Any]] = {
    'llama': {'model_type': 'llama', **_LLAMA_BODY},
    'mistral': {'model_type': 'mistral', **_LLAMA_BODY, 'num_hidden_layers': 2,
                'vocab_size': 3000, 'sliding_window': None},
    'mixtral': {'model_type': 'mixtral', **_LLAMA_BODY, 'num_hidden_layers': 2,
                'intermediate_size': 128, 'num_local_experts': 4, 'num_experts_per_tok': 2,
                'vocab_size': 2048, 'sliding_window': None},
    'qwen2': {'model_type': 'qwen2', **_LLAMA_BODY, 'num_hidden_layers': 2,
              'vocab_size': 5000, 'tie_word_embeddings': True, 'use_sliding_window': False},
    'qwen2_moe': {'model_type': 'qwen2_moe', **_LLAMA_BODY, 'num_hidden_layers': 2,
                  'vocab_size': 2048, 'num_experts': 8, 'num_experts_per_tok': 2,
                  'moe_intermediate_size': 64, 'shared_expert_intermediate_size': 128,
                  'decoder_sparse_step': 1, 'mlp_only_layers': [],
                  'use_sliding_window': False},
    'qwen3': {'model_type': 'qwen3', **_LLAMA_BODY, 'num_hidden_layers': 2,
              'head_dim': 64, 'vocab_size': 4096, 'tie_word_embeddings': True,
              'use_sliding_window': False},
    'qwen3_moe': {'model_type': 'qwen3_moe', **_LLAMA_BODY, 'num_hidden_layers': 2,
                  'vocab_size': 2048, 'num_experts': 8, 'num_experts_per_tok': 2,
                  'moe_intermediate_size': 64, 'decoder_sparse_step': 1,
                  'mlp_only_layers': [], 'use_sliding_window': False},
    'gpt_oss': {'model_type': 'gpt_oss', **_LLAMA_BODY, 'num_hidden_layers': 2,
                'intermediate_size': 64, 'num_local_experts': 8, 'num_experts_per_tok': 2,
                'vocab_size': 2048, 'attention_bias': True, 'sliding_window': 64,
                'layer_types': ['sliding_attention', 'full_attention'],
                'rope_scaling': {'rope_type': 'yarn', 'factor': 32.0, 'beta_fast': 32.0,
                                 'beta_slow': 1.0, 'original_max_position_embeddings': 4096,
                                 'truncate': False}},
    'gemma': {'model_type': 'gemma', **_LLAMA_BODY, 'num_hidden_layers': 2,
              'num_key_value_heads': 1, 'head_dim': 64, 'vocab_size': 4096,
              'tie_word_embeddings': True, 'hidden_activation': 'gelu_pytorch_tanh'},
    'gemma2': {'model_type': 'gemma2', **_LLAMA_BODY, 'num_hidden_layers': 2,
               'num_attention_heads': 4, 'head_dim': 64, 'vocab_size': 8192,
               'tie_word_embeddings': True, 'hidden_activation': 'gelu_pytorch_tanh',
               'final_logit_softcapping': 30.0, 'attn_logit_softcapping': 50.0,
               'query_pre_attn_scalar': 64, 'sliding_window': 4096},
    'gemma3_text': {'model_type': 'gemma3_text', **_LLAMA_BODY, 'num_hidden_layers': 2,
                    'num_attention_heads': 4, 'head_dim': 64, 'vocab_size': 8192,
                    'tie_word_embeddings': True, 'hidden_activation': 'gelu_pytorch_tanh',
                    'query_pre_attn_scalar': 64, 'sliding_window': 4096,
                    'final_logit_softcapping': None, 'attn_logit_softcapping': None},
    'gpt2': {'model_type': 'gpt2', 'n_embd': 128, 'n_layer': 3, 'n_head': 4,
             'n_positions': 1024, 'vocab_size': 4096, 'attn_pdrop': 0.1,
             'resid_pdrop': 0.1, 'embd_pdrop': 0.1},
    'gpt_neox': {'model_type': 'gpt_neox', 'hidden_size': 128, 'intermediate_size': 512,
                 'num_hidden_layers': 3, 'num_attention_heads': 4, 'vocab_size': 4096,
                 'max_position_embeddings': 1024, 'rotary_pct': 0.25,
                 'use_parallel_residual': True, 'hidden_act': 'gelu',
                 'tie_word_embeddings': False, 'attention_dropout': 0.0,
                 'hidden_dropout': 0.0},
    'phi3': {'model_type': 'phi3', **_LLAMA_BODY, 'num_hidden_layers': 2,
             'vocab_size': 4096, 'resid_pdrop': 0.0, 'embd_pdrop': 0.0,
             'attention_dropout': 0.0, 'pad_token_id': 0, 'sliding_window': None},
    'olmo2': {'model_type': 'olmo2', **_LLAMA_BODY, 'num_hidden_layers': 2,
              'vocab_size': 4096},
}
# Dropout variants: GPT-2's defaults (0.1 everywhere); Phi-3 with resid_pdrop.
CONFIGS['gpt2-nodrop'] = {**CONFIGS['gpt2'], 'attn_pdrop': 0.0, 'resid_pdrop': 0.0,
                          'embd_pdrop': 0.0}
CONFIGS['phi3-drop'] = {**CONFIGS['phi3'], 'resid_pdrop': 0.1}
CONFIGS['gpt_neox-seq'] = {**CONFIGS['gpt_neox'], 'use_parallel_residual': False}
CONFIGS['llama-wide-vocab'] = {**CONFIGS['llama'], 'vocab_size': 8192,
                               'num_hidden_layers': 2}


@dataclass(frozen=True)
class HfCase:
    """A config.json dict and a training configuration; ``id`` names it in reports."""

    id: str
    config_name: str
    seq_len: int
    micro_batch: int
    precision: str
    attention: str  # 'sdpa' or 'eager' (transformers' attn_implementation)
    checkpointing: bool = False
    loop: str = 'keep-outputs'
    lora: LoraSpec | None = None

    @property
    def config(self) -> dict[str, Any]:
        return CONFIGS[self.config_name]

    @property
    def model_type(self) -> str:
        return self.config['model_type']

    def spec(self) -> ModelSpec:
        """batchfit's reading of the case's config.json."""
        return spec_from_hf_config(self.config, name=self.config_name)

    def setup(self) -> TrainingSetup:
        """The same configuration as batchfit's input."""
        return TrainingSetup(seq_len=self.seq_len, micro_batch=self.micro_batch,
                             precision=self.precision,
                             attention='flash' if self.attention == 'sdpa' else 'eager',
                             recompute='full' if self.checkpointing else 'none',
                             loop=self.loop, lora=self.lora)

    def measure(self):
        """The real CPU run (imports torch and transformers)."""
        from tests.groundtruth.hf_measure import measure_hf

        return measure_hf(self.config, seq_len=self.seq_len, micro_batch=self.micro_batch,
                          precision=self.precision, attention=self.attention,
                          checkpointing=self.checkpointing, loop=self.loop, lora=self.lora)


def _case(config_name: str, precision: str, attention: str = 'sdpa', *, b: int = 2,
          s: int = 128, ckpt: bool = False, loop: str = 'keep-outputs',
          lora: LoraSpec | None = None) -> HfCase:
    bits = [config_name, precision, attention, f'b{b}', f's{s}']
    if ckpt:
        bits.append('ckpt')
    if loop != 'keep-outputs':
        bits.append(loop)
    if lora is not None:
        bits.append(f'lora{lora.base_bits}-r{lora.rank}-{"".join(lora.targets)}')
    return HfCase('-'.join(bits), config_name, s, b, precision, attention, ckpt, loop, lora)


QV = ('q', 'v')
ALL = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')

HF_CASES: tuple[HfCase, ...] = (
    # Llama: every axis once
    _case('llama', 'fp32'),
    _case('llama', 'amp-bf16'),
    _case('llama', 'bf16'),
    _case('llama', 'fp32', 'eager'),
    _case('llama', 'amp-bf16', 'eager'),
    _case('llama', 'amp-bf16', ckpt=True, b=4),
    _case('llama', 'fp32', 'eager', ckpt=True),
    _case('llama', 'fp32', loop='trainer'),
    _case('llama', 'amp-bf16', loop='trainer'),
    _case('llama', 'amp-bf16', lora=LoraSpec(rank=8, targets=QV, base_bits=16)),
    _case('llama', 'fp32', lora=LoraSpec(rank=16, targets=ALL, base_bits=32)),
    _case('llama-wide-vocab', 'bf16', s=256),
    # Mistral
    _case('mistral', 'amp-bf16'),
    _case('mistral', 'fp32', 'eager'),
    _case('mistral', 'bf16', ckpt=True),
    # Mixtral (router logits, expert dispatch)
    _case('mixtral', 'fp32'),
    _case('mixtral', 'amp-bf16'),
    _case('mixtral', 'bf16', 'eager'),
    _case('mixtral', 'amp-bf16', ckpt=True),
    # Qwen2 (q/k/v bias, tied)
    _case('qwen2', 'amp-bf16'),
    _case('qwen2', 'fp32', 'eager'),
    _case('qwen2', 'bf16', loop='trainer'),
    _case('qwen2', 'amp-bf16', lora=LoraSpec(rank=16, targets=ALL, base_bits=16)),
    # Qwen2-MoE (shared expert with its gate)
    _case('qwen2_moe', 'fp32'),
    _case('qwen2_moe', 'amp-bf16'),
    _case('qwen2_moe', 'bf16', ckpt=True),
    # Qwen3 (q/k norms)
    _case('qwen3', 'fp32'),
    _case('qwen3', 'amp-bf16', 'eager'),
    _case('qwen3', 'bf16'),
    _case('qwen3', 'amp-bf16', ckpt=True),
    # Qwen3-MoE
    _case('qwen3_moe', 'amp-bf16'),
    _case('qwen3_moe', 'fp32', 'eager'),
    _case('qwen3_moe', 'bf16'),
    # GPT-OSS (attention sinks, biased batched experts and router, sliding window)
    _case('gpt_oss', 'amp-bf16', 'eager'),
    _case('gpt_oss', 'bf16', 'eager'),
    _case('gpt_oss', 'fp32', 'eager'),
    # Gemma (tanh GeLU, 256-wide heads, scaled embedding)
    _case('gemma', 'fp32'),
    _case('gemma', 'amp-bf16'),
    _case('gemma', 'bf16', 'eager'),
    # Gemma-2 (final-logit and attention soft-capping, four norms a layer)
    _case('gemma2', 'fp32', 'eager'),
    _case('gemma2', 'amp-bf16', 'eager'),
    _case('gemma2', 'bf16', 'eager'),
    # (transformers 5.23 refuses SDPA for Gemma-2: its soft-capping needs eager or
    # flash-attn's softcap argument)
    _case('gemma2', 'fp32', 'eager', ckpt=True),
    _case('gemma2', 'amp-bf16', 'eager', loop='trainer'),
    # Gemma-3 (q/k norms, four norms)
    _case('gemma3_text', 'fp32'),
    _case('gemma3_text', 'amp-bf16', 'eager'),
    _case('gemma3_text', 'bf16', ckpt=True),
    # GPT-2 (learned positions, fused c_attn, gelu_new, dropout 0.1 by default)
    _case('gpt2', 'fp32', 'eager'),
    _case('gpt2', 'amp-bf16', 'eager'),
    _case('gpt2', 'bf16', 'eager'),
    _case('gpt2', 'amp-bf16'),
    _case('gpt2', 'fp32', ckpt=True),
    _case('gpt2-nodrop', 'fp32', 'eager'),
    _case('gpt2-nodrop', 'amp-bf16'),
    # GPT-NeoX (parallel residual, partial rotary, fused qkv)
    _case('gpt_neox', 'fp32'),
    _case('gpt_neox', 'amp-bf16', 'eager'),
    _case('gpt_neox', 'bf16'),
    _case('gpt_neox-seq', 'amp-bf16'),
    # Phi-3 (fused qkv_proj and gate_up_proj)
    _case('phi3', 'fp32'),
    _case('phi3', 'amp-bf16', 'eager'),
    _case('phi3-drop', 'amp-bf16'),
    _case('phi3', 'bf16', ckpt=True),
    # OLMo-2 (q/k norms over all heads, post-norms)
    _case('olmo2', 'fp32'),
    _case('olmo2', 'amp-bf16'),
    _case('olmo2', 'bf16', 'eager'),
)

# The cases each new term of the estimator was derived on (worked out by hand from
# transformers' source, then checked against the case's measured residue), one or two
# per mechanism; every other case is held out. No numeric constant is fitted: each term
# is a count of saved tensors.
FITTED: frozenset[str] = frozenset({
    'llama-fp32-sdpa-b2-s128',  # the loop's held logits
    'gemma-bf16-eager-b2-s128',  # norms that multiply in fp32
    'gemma2-fp32-eager-b2-s128',  # soft-capping, post-norms
    'qwen3-fp32-sdpa-b2-s128', 'qwen3-amp-bf16-eager-b2-s128',  # q/k norms
    'mixtral-fp32-sdpa-b2-s128', 'mixtral-amp-bf16-sdpa-b2-s128',  # router, grouped_mm
    'gpt2-fp32-eager-b2-s128', 'gpt2-amp-bf16-sdpa-b2-s128',  # CUDA's dropout masks
    'gpt_neox-amp-bf16-eager-b2-s128',  # parallel residual
    'phi3-fp32-sdpa-b2-s128',  # fused qkv held by SDPA's v
    # the clamped expert activation, the sink column, the softmax in the logits' dtype
    'gpt_oss-fp32-eager-b2-s128', 'gpt_oss-amp-bf16-eager-b2-s128',
})
