"""The shape of a decoder-only transformer, its exact parameter count and FLOPs.

A :class:`ModelSpec` is what every estimate starts from. It comes from a preset
(``planner.models.presets``), a Hugging Face ``config.json`` (``planner.models.hf_config``) or
a bare size (``planner.models.size_rule``). Counts follow the layer shapes of Narayanan
et al. 2021 §3, generalised to GQA and gated MLPs, and reproduce the published
checkpoints exactly (see ``tests/planner/test_model_spec.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from planner.errors import InputError

Activation = Literal['gelu', 'gelu_tanh', 'silu', 'relu', 'relu2']
NormKind = Literal['layernorm', 'rmsnorm']
PositionKind = Literal['rotary', 'learned', 'none']

ACTIVATIONS: tuple[str, ...] = ('gelu', 'gelu_tanh', 'silu', 'relu', 'relu2')
NORMS: tuple[str, ...] = ('layernorm', 'rmsnorm')
POSITIONS: tuple[str, ...] = ('rotary', 'learned', 'none')


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts MLP replacing the dense MLP in (most) layers.

    Attributes:
        num_experts: routed experts per MoE layer (E).
        top_k: routed experts each token visits (k).
        expert_ffn_size: inner width of one routed expert.
        shared_experts: experts every token visits (DeepSeek/Qwen-MoE style).
        shared_ffn_size: inner width of one shared expert (0: same as routed).
        first_dense_layers: leading layers that keep the dense MLP.
        router_bias: the router's linear layer has a bias (GPT-OSS).
    """

    num_experts: int
    top_k: int
    expert_ffn_size: int
    shared_experts: int = 0
    shared_ffn_size: int = 0
    first_dense_layers: int = 0
    router_bias: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, as far as memory and FLOPs are concerned.

    Sizes are element counts. ``head_dim * num_heads`` need not equal
    ``hidden_size`` (Gemma); ``num_kv_heads < num_heads`` is GQA, 1 is MQA.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    gated_mlp: bool = True  # SwiGLU / GeGLU: gate, up and down projections
    activation: Activation = 'silu'
    tied_embeddings: bool = False
    position_embedding: PositionKind = 'rotary'
    max_position_embeddings: int = 4096
    norm: NormKind = 'rmsnorm'
    norms_per_layer: int = 2  # Gemma-2 has 4 (pre and post norms)
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, OLMo-2)
    qkv_bias: bool = False
    attn_out_bias: bool = False
    mlp_bias: bool = False
    attention_sinks: bool = False  # one learned logit per head in the softmax (GPT-OSS)
    clamped_glu: bool = False  # GPT-OSS's clamped (up + 1)·gate·σ(α·gate) expert activation
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0  # residual and embedding dropout
    moe: MoESpec | None = None
    # How the Hugging Face module computes, which decides what autograd saves:
    fused_qkv: bool = False  # one qkv projection (GPT-2, GPT-NeoX, Phi-3)
    fused_gate_up: bool = False  # one gate_up projection (Phi-3)
    python_gelu: bool = False  # GELU written as Python ops (HF "gelu_new"): saves 4 tensors
    softmax_fp32: bool = True  # eager softmax upcast to fp32 (HF Llama family; not GPT-2)
    norm_fp32: bool = False  # RMSNorm multiplies by its weight in fp32 (Gemma, OLMo-2)
    qk_norm_full_width: bool = False  # q/k norms span all heads (OLMo-2), not one head
    attn_softcap: bool = False  # tanh soft-capping of attention scores (Gemma-2)
    final_logit_softcap: bool = False  # tanh soft-capping of the logits (Gemma-2)
    parallel_residual: bool = False  # attention and MLP read one input (GPT-NeoX)
    rotary_cat: bool = False  # rotary applied by torch.cat (Phi-3, GPT-NeoX partial rotary)
    attention_masks: int = 1  # distinct eager (b,1,s,s) masks (2: Gemma-2/3's sliding window)
    source: str = ''  # where the shape comes from, in words
    # What a launcher must be told to build the same model (None: not known here):
    rope_base: float | None = None  # RoPE theta (HF rope_theta / rotary_emb_base)
    rope_scaling_factor: float | None = None  # Llama-3.x RoPE scaling (HF rope_type llama3)
    rotary_fraction: float = 1.0  # share of each head's dims rotated (HF partial_rotary_factor)
    norm_eps: float | None = None  # RMSNorm/LayerNorm epsilon (HF rms_norm_eps ...)
    # The Hugging Face config's model_type, which decides the transformers class that builds
    # the model and which kernels a library patches into it (Liger's fused linear
    # cross-entropy: planner.stacks.catalog LIGER_MODEL_TYPES); '' when not known.
    hf_model_type: str = ''

    def __post_init__(self) -> None:
        positive = ('num_layers', 'hidden_size', 'num_heads', 'num_kv_heads', 'head_dim',
                    'ffn_size', 'vocab_size', 'max_position_embeddings', 'norms_per_layer')
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(name, f'must be a positive integer, got {value!r}')
        if self.num_heads % self.num_kv_heads:
            raise InputError('num_kv_heads', f'{self.num_kv_heads} does not divide '
                             f'num_heads={self.num_heads}', 'a divisor of num_heads')
        for name, allowed in (('activation', ACTIVATIONS), ('norm', NORMS),
                              ('position_embedding', POSITIONS)):
            if getattr(self, name) not in allowed:
                raise InputError(name, f'unknown value {getattr(self, name)!r}',
                                 ', '.join(allowed))
        for name in ('attention_dropout', 'hidden_dropout'):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise InputError(name, f'must be a probability in [0, 1), got {p!r}')
        for name, low, high in (('rope_base', 0.0, math.inf),
                                ('rope_scaling_factor', 0.0, math.inf),
                                ('norm_eps', 0.0, 1.0)):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not low < v < high):
                raise InputError(name, f'must be a number in ({low}, {high}), got {v!r}')
        if not isinstance(self.hf_model_type, str):
            raise InputError('hf_model_type', f'must be text, got {self.hf_model_type!r}')
        f = self.rotary_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 < f <= 1.0:
            raise InputError('rotary_fraction', f'must be in (0, 1], got {f!r}')
        if self.moe is not None:
            m = self.moe
            if m.num_experts < 1 or not 1 <= m.top_k <= m.num_experts:
                raise InputError('moe', 'needs num_experts >= 1 and 1 <= top_k <= num_experts')
            if m.expert_ffn_size < 1 or not 0 <= m.first_dense_layers <= self.num_layers:
                raise InputError('moe', 'expert_ffn_size must be positive and '
                                 'first_dense_layers at most num_layers')

    # ---- shapes -----------------------------------------------------------------
    @property
    def q_size(self) -> int:
        """Width of the query projection output, heads x head_dim."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of each of the key and value projection outputs."""
        return self.num_kv_heads * self.head_dim

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return 0 if self.moe is None else self.num_layers - self.moe.first_dense_layers

    @property
    def dense_layers(self) -> int:
        """Layers with the dense MLP."""
        return self.num_layers - self.moe_layers

    # ---- parameter counts ---------------------------------------------------------
    def norm_params(self) -> int:
        """Parameters of one normalisation layer over the hidden size."""
        return 2 * self.hidden_size if self.norm == 'layernorm' else self.hidden_size

    def attention_params(self) -> int:
        """Parameters of one attention block (projections, biases, q/k norms)."""
        h, q, kv = self.hidden_size, self.q_size, self.kv_size
        n = h * q + 2 * h * kv + q * h
        if self.qkv_bias:
            n += q + 2 * kv
        if self.attn_out_bias:
            n += h
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.attention_sinks:
            n += self.num_heads
        return n

    def mlp_params(self, ffn_size: int | None = None) -> int:
        """Parameters of one dense MLP of inner width ``ffn_size``."""
        f = self.ffn_size if ffn_size is None else ffn_size
        h = self.hidden_size
        if self.gated_mlp:
            return 3 * h * f + ((2 * f + h) if self.mlp_bias else 0)
        return 2 * h * f + ((f + h) if self.mlp_bias else 0)

    def expert_params(self) -> int:
        """Parameters of one routed expert (0 for a dense model)."""
        return 0 if self.moe is None else self.mlp_params(self.moe.expert_ffn_size)

    def moe_mlp_params(self) -> tuple[int, int]:
        """(total, active per token) parameters of one MoE MLP block, router included."""
        m = self.moe
        if m is None:
            return self.mlp_params(), self.mlp_params()
        router = (self.hidden_size + m.router_bias) * m.num_experts
        shared = m.shared_experts * self.mlp_params(m.shared_ffn_size or m.expert_ffn_size)
        total = m.num_experts * self.expert_params() + router + shared
        active = m.top_k * self.expert_params() + router + shared
        return total, active

    def layer_params(self, moe_layer: bool = False) -> int:
        """Parameters of one transformer layer (dense, or MoE when ``moe_layer``)."""
        mlp = self.moe_mlp_params()[0] if moe_layer else self.mlp_params()
        return self.attention_params() + mlp + self.norms_per_layer * self.norm_params()

    def embedding_params(self) -> int:
        """Input token embedding plus learned positions (if any)."""
        n = self.vocab_size * self.hidden_size
        if self.position_embedding == 'learned':
            n += self.max_position_embeddings * self.hidden_size
        return n

    def head_params(self) -> int:
        """Output projection to the vocabulary: 0 when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    def total_params(self) -> int:
        """Exact parameter count, every weight and bias."""
        return (self.dense_layers * self.layer_params(False)
                + self.moe_layers * self.layer_params(True)
                + self.norm_params() + self.embedding_params() + self.head_params())

    def active_params(self) -> int:
        """Parameters touched by one token (routed experts counted top_k times)."""
        if self.moe is None:
            return self.total_params()
        inactive = self.moe_mlp_params()[0] - self.moe_mlp_params()[1]
        return self.total_params() - self.moe_layers * inactive

    # ---- FLOPs ----------------------------------------------------------------------
    def matmul_params_per_token(self) -> int:
        """Weights used in matmuls by one token: active non-embedding weights + output head.

        The input lookup costs no FLOPs; the output projection always does, tied or not
        (PaLM appendix B).
        """
        h, m = self.hidden_size, self.moe
        attn = 2 * h * self.q_size + 2 * h * self.kv_size
        dense_mlp = (3 if self.gated_mlp else 2) * h * self.ffn_size
        n = self.dense_layers * (attn + dense_mlp)
        if m is not None:
            expert = (3 if self.gated_mlp else 2) * h * m.expert_ffn_size
            shared = (3 if self.gated_mlp else 2) * h * (m.shared_ffn_size or m.expert_ffn_size)
            n += self.moe_layers * (attn + m.top_k * expert + m.shared_experts * shared
                                    + h * m.num_experts)
        return n + self.vocab_size * h

    def forward_flops_per_token(self, seq_len: int, causal: bool = True) -> float:
        """Forward FLOPs for one token of a ``seq_len`` sequence.

        2 per multiply-add for every weight, plus the attention core QK^T and AV:
        4·s·(heads·head_dim) per layer, halved when the kernel skips the masked half.
        """
        core = 4.0 * seq_len * self.q_size * self.num_layers
        if causal:
            core /= 2.0
        return 2.0 * self.matmul_params_per_token() + core

    def training_flops_per_token(self, seq_len: int, recompute: str = 'none',
                                 causal: bool = True) -> float:
        """FLOPs per token for forward + backward (backward = 2x forward).

        ``recompute='full'`` re-runs every layer's forward (the head is not
        recomputed); ``'selective'`` re-runs only the attention core, as Megatron does;
        ``'half'`` re-runs half the layers' forward.
        These are the FLOPs the hardware executes (HFU); MFU uses ``recompute='none'``.
        """
        fwd = self.forward_flops_per_token(seq_len, causal)
        total = 3.0 * fwd
        if recompute == 'full':
            total += fwd - 2.0 * self.vocab_size * self.hidden_size
        elif recompute == 'selective':
            total += fwd - 2.0 * self.matmul_params_per_token()
        elif recompute == 'half':
            total += 0.5 * (fwd - 2.0 * self.vocab_size * self.hidden_size)
        elif recompute != 'none':
            raise InputError('recompute', f'unknown mode {recompute!r}',
                             'none, selective, full, half')
        return total

    def with_changes(self, **changes: object) -> ModelSpec:
        """A copy with some fields replaced (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]
