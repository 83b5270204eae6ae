"""Reference decoder-only language models, built from a :class:`ModelSpec`, for memory ground truth.

These are small, readable re-implementations of Hugging Face transformers' causal LMs,
written op for op where memory is concerned: which tensors exist, in which dtype, and
which ones autograd saves for backward is decided by the code that runs, so the code
here follows the transformers source rather than the maths.

Two styles:

* ``'gpt2'`` (``GPT2LMHeadModel``): ``Conv1D`` projections (``addmm`` on the flattened
  input), one fused ``c_attn`` for q, k and v (MHA), LayerNorm with bias, learned
  positions, the MLP ``c_fc -> act -> c_proj`` with GPT-2's ``gelu_new`` written out in
  Python (``NewGELUActivation``: several saved intermediates, unlike a fused GELU),
  dropout on the embeddings, the attention probabilities, the attention output and the
  MLP output. Eager attention masks twice as transformers does: ``torch.where`` with the
  boolean ``bias`` buffer (max_pos² bytes per layer), then the additive float mask from
  ``create_causal_mask``; softmax runs in the scores' dtype, then ``.type(value.dtype)``.
* ``'llama'`` (``LlamaForCausalLM``; ``Qwen2`` with ``qkv_bias``, ``Qwen3`` with
  ``qk_norm``): separate ``nn.Linear`` q, k, v, o; ``LlamaRMSNorm`` (fp32 upcast); RoPE
  with cos/sin computed in fp32 every forward and ``rotate_half``; GQA by ``repeat_kv``
  (expand + reshape) in eager attention, ``enable_gqa`` in SDPA (transformers'
  ``use_gqa_in_sdpa``); eager attention adds the float mask, then softmax in fp32 and a
  cast back to the query dtype; SwiGLU ``down(act(gate(x)) * up(x))``.

Both styles take norm, positions, gating, activation, biases and dropout from the spec, so
a spec's parameter count is the model's (``tests/groundtruth/test_harness.py`` checks it).
Dropout: transformers' Llama has attention dropout only; ``hidden_dropout > 0`` in a
Llama-style spec is applied where GPT-2 applies it (an extension, documented here).
Dropout runs ``torch.native_dropout``, the fused kernel CUDA uses, which saves a 1-byte
mask; CPU's composite dropout would save an fp32 noise tensor instead, and the
measurements stand in for a CUDA run (as ``measure.CudaAutocastPolicy`` does for dtypes).

Attention: ``'eager'`` (explicit matmuls, the s² scores materialised) or ``'sdpa'``
(``F.scaled_dot_product_attention(..., is_causal=True)``; no mask tensor is built, as
transformers skips it when there is no padding). On CPU, SDPA runs the flash kernel
(saving the fp32 log-sum-exp) unless attention dropout is on, when PyTorch falls back to
the math path, which materialises the scores; CUDA kernels differ.

Activation checkpointing wraps each decoder layer in
``torch.utils.checkpoint.checkpoint(layer, ..., use_reentrant=False)``, as transformers'
``GradientCheckpointingLayer`` does in training mode.

The loss is transformers' ``ForCausalLMLoss`` (``src/transformers/loss/loss_utils.py``):
``logits.float()``, labels padded with -100 and shifted, ``cross_entropy`` with
``reduction='sum'`` divided by ``num_items_in_batch`` when given (the Trainer passes it),
else ``'mean'``. The model returns the logits too, as transformers does; a training loop
that keeps them alive through backward holds V·b·s more elements.

LoRA (``build_model(..., lora=LoraSpec(...))``) follows PEFT (``peft/tuners/lora``):
every parameter of the base is frozen and each targeted projection is wrapped in
:class:`LoraLinear`, PEFT's ``lora.Linear``: ``base(x) + lora_B(lora_A(dropout(x))) *
scaling`` with fp32 adapters (PEFT's ``autocast_adapter_dtype``), ``lora_dropout = 0``
(``nn.Identity``) and the input cast to the adapters' dtype first. The base is built in
whatever default dtype the caller sets (``measure`` sets ``LoraSpec.frozen_bytes``'s:
bf16 for ``base_bits=16``, fp32 for 32). Targets name projections as
``LoraSpec.adapted`` does: on a fused GPT-2 ``c_attn`` any of q, k, v adapts it (PEFT's
``target_modules=['c_attn']``), ``up``/``down`` are ``c_fc``/``c_proj`` in a plain MLP.
With ``base_bits=4`` every projection of the decoder layers (not the head, which
bitsandbytes leaves alone) becomes a :class:`Linear4bit`, an emulation of bitsandbytes'
NF4 layer: packed uint8 weight and double-quantized block statistics, a dequantized copy
made in forward and again in backward inside :class:`MatMul4Bit`, which, as
bitsandbytes' does, keeps only the packed weight for backward; the adapters then follow
PEFT's ``lora.bnb.Linear4bit`` (a defensive ``clone`` of the base output, no input cast
under autocast). With gradient checkpointing the embedding output is made to require
grad, as PEFT's and TRL's ``enable_input_require_grads`` calls do.

Not modelled: MoE, Gemma-2's four norms per layer, sliding windows, padding masks, KV
caches. Those specs raise ``NotImplementedError``.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F  # noqa: N812 - the usual name
from torch import nn
from torch.utils.checkpoint import checkpoint, noop_context_fn

from planner.memory.training import LoraSpec
from planner.models.spec import ModelSpec

Style = Literal['gpt2', 'llama']
AttentionImpl = Literal['eager', 'sdpa']
TanhGelu = Literal['gelu_new', 'gelu_pytorch_tanh']

STYLES: tuple[str, ...] = ('gpt2', 'llama')
ATTENTION_IMPLS: tuple[str, ...] = ('eager', 'sdpa')
IGNORE_INDEX = -100
LAYERNORM_EPS = 1e-5  # GPT2Config.layer_norm_epsilon
RMSNORM_EPS = 1e-6  # LlamaConfig.rms_norm_eps
ROPE_THETA = 10000.0
INIT_STD = 0.02
LORA_ALPHA = 8  # PEFT's default lora_alpha; scaling = alpha / r
NF4_BLOCK = 64  # bitsandbytes' 4-bit blocksize
NF4_ABSMAX_BLOCK = 256  # the block of the second (double) quantization


# ---- the loss ---------------------------------------------------------------------------
def fixed_cross_entropy(source: torch.Tensor, target: torch.Tensor,
                        num_items_in_batch: torch.Tensor | int | None = None,
                        ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """transformers' ``fixed_cross_entropy``: sum / num_items when given, else mean."""
    reduction = 'sum' if num_items_in_batch is not None else 'mean'
    loss = F.cross_entropy(source, target, ignore_index=ignore_index, reduction=reduction)
    if reduction == 'sum':
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return loss


def for_causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                       num_items_in_batch: torch.Tensor | int | None = None,
                       ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """transformers' ``ForCausalLMLoss``: fp32 logits, labels shifted by padding."""
    # Upcast to float (a no-op on fp32 logits; a full fp32 copy of bf16 ones).
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()
    logits = logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1).to(logits.device)
    return fixed_cross_entropy(logits, shift_labels, num_items_in_batch, ignore_index)


class CausalLMOutput(NamedTuple):
    """What ``*ForCausalLM.forward`` returns, reduced to what matters here."""

    loss: torch.Tensor | None
    logits: torch.Tensor


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout as CUDA runs it: the fused kernel, saving a bool mask for backward."""
    if not training or p == 0.0:
        return x
    return torch.native_dropout(x, p, True)[0]


class Dropout(nn.Module):
    """``nn.Dropout`` through :func:`dropout` (the CUDA kernel's saved tensors)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


# ---- building blocks ----------------------------------------------------------------------
class Conv1D(nn.Module):
    """transformers' ``pytorch_utils.Conv1D``: a linear layer with a transposed weight."""

    def __init__(self, nf: int, nx: int, bias: bool = True) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf)) if bias else None
        nn.init.normal_(self.weight, std=INIT_STD)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = (*x.size()[:-1], self.nf)
        flat = x.view(-1, x.size(-1))
        if self.bias is None:
            out = torch.mm(flat, self.weight)
        else:
            out = torch.addmm(self.bias, flat, self.weight)
        return out.view(size_out)


class RMSNorm(nn.Module):
    """``LlamaRMSNorm``: upcast to fp32, variance, rsqrt, cast back, times the weight."""

    def __init__(self, size: int, eps: float = RMSNORM_EPS) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def make_norm(spec: ModelSpec, size: int | None = None) -> nn.Module:
    """The spec's normalisation over ``size`` (default the hidden size)."""
    size = spec.hidden_size if size is None else size
    if spec.norm == 'layernorm':
        return nn.LayerNorm(size, eps=LAYERNORM_EPS)
    return RMSNorm(size)


class NewGELUActivation(nn.Module):
    """transformers' ``gelu_new`` (GPT-2): the tanh approximation written out in Python."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                           * (x + 0.044715 * torch.pow(x, 3.0))))


class ReLUSquared(nn.Module):
    """transformers' ``relu2``: relu, then square."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.square(F.relu(x))


def make_activation(spec: ModelSpec, tanh_gelu: TanhGelu) -> nn.Module:
    """The module transformers' ``ACT2FN`` would give for the spec's activation."""
    if spec.activation == 'gelu_tanh':
        return NewGELUActivation() if tanh_gelu == 'gelu_new' else nn.GELU(approximate='tanh')
    return {'gelu': nn.GELU, 'silu': nn.SiLU, 'relu': nn.ReLU,
            'relu2': ReLUSquared}[spec.activation]()


def linear(style: Style, fan_in: int, fan_out: int, bias: bool) -> nn.Module:
    """A projection as the style writes it: GPT-2's ``Conv1D`` or ``nn.Linear``."""
    if style == 'gpt2':
        return Conv1D(fan_out, fan_in, bias=bias)
    layer = nn.Linear(fan_in, fan_out, bias=bias)
    nn.init.normal_(layer.weight, std=INIT_STD)
    return layer


class RotaryEmbedding(nn.Module):
    """``LlamaRotaryEmbedding`` (default rope): cos and sin in fp32, every forward."""

    def __init__(self, head_dim: int, theta: float = ROPE_THETA) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64)
                                    .float() / head_dim))
        self.register_buffer('inv_freq', inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(
            position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):  # force fp32
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos()
            sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotate half the hidden dims of the input (transformers' ``rotate_half``)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                         sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb`` with ``unsqueeze_dim=1``."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(b, g, s, d) -> (b, g·n_rep, s, d) by expand + reshape (a copy), as transformers does."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(
        batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_causal_mask(batch: int, seq_len: int, dtype: torch.dtype,
                      device: torch.device) -> torch.Tensor:
    """The additive (b, 1, s, s) float mask ``create_causal_mask`` builds for eager attention."""
    allowed = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))
    allowed = allowed[None, None, :, :].expand(batch, -1, -1, -1)
    zero = torch.tensor(0.0, device=device, dtype=dtype)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


def sdpa_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                   value: torch.Tensor, dropout: float) -> torch.Tensor:
    """transformers' ``sdpa_attention_forward`` with no mask: is_causal, GQA in the kernel."""
    extra = {'enable_gqa': True} if module.num_key_value_groups > 1 else {}
    attn_output = F.scaled_dot_product_attention(
        query, key, value, attn_mask=None, dropout_p=dropout, scale=module.scaling,
        is_causal=query.shape[2] > 1, **extra)
    return attn_output.transpose(1, 2).contiguous()


class _AttentionBase(nn.Module):
    """Shapes, dropout and the q/k norms shared by both styles."""

    def __init__(self, spec: ModelSpec, attention: AttentionImpl) -> None:
        super().__init__()
        self.attention = attention
        self.num_heads = spec.num_heads
        self.num_key_value_heads = spec.num_kv_heads
        self.num_key_value_groups = spec.num_heads // spec.num_kv_heads
        self.head_dim = spec.head_dim
        self.q_size = spec.q_size
        self.kv_size = spec.kv_size
        self.scaling = spec.head_dim ** -0.5
        self.attention_dropout = spec.attention_dropout
        self.rotary = spec.position_embedding == 'rotary'
        if spec.qk_norm:  # Qwen3: RMSNorm over head_dim, before the transpose
            self.q_norm = make_norm(spec, spec.head_dim)
            self.k_norm = make_norm(spec, spec.head_dim)
        else:
            self.q_norm = self.k_norm = None
        self.resid_dropout = Dropout(spec.hidden_dropout)

    def _heads(self, x: torch.Tensor, norm: nn.Module | None) -> torch.Tensor:
        x = x.view(*x.shape[:-1], -1, self.head_dim)
        if norm is not None:
            x = norm(x)
        return x.transpose(1, 2)

    def _dropout_p(self) -> float:
        return self.attention_dropout if self.training else 0.0


class GPT2Attention(_AttentionBase):
    """``GPT2Attention``: fused ``c_attn`` (or separate q/k/v Conv1D), ``c_proj``."""

    def __init__(self, spec: ModelSpec, attention: AttentionImpl, fused_qkv: bool) -> None:
        super().__init__(spec, attention)
        h = spec.hidden_size
        self.fused_qkv = fused_qkv
        if fused_qkv:
            self.c_attn = Conv1D(self.q_size + 2 * self.kv_size, h, bias=spec.qkv_bias)
        else:
            self.q_attn = Conv1D(self.q_size, h, bias=spec.qkv_bias)
            self.k_attn = Conv1D(self.kv_size, h, bias=spec.qkv_bias)
            self.v_attn = Conv1D(self.kv_size, h, bias=spec.qkv_bias)
        self.c_proj = Conv1D(h, self.q_size, bias=spec.attn_out_bias)
        self.attn_dropout = Dropout(spec.attention_dropout)
        max_positions = spec.max_position_embeddings
        self.register_buffer(
            'bias', torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool))
            .view(1, 1, max_positions, max_positions), persistent=False)

    def _eager(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None) -> torch.Tensor:
        """GPT-2's ``eager_attention_forward``."""
        key = repeat_kv(key, self.num_key_value_groups)
        value = repeat_kv(value, self.num_key_value_groups)
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full(
            [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.full([], torch.finfo(attn_weights.dtype).min,
                                dtype=attn_weights.dtype, device=attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask[:, :, :, : key.shape[-2]]
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)  # no-op unless mixed precision
        attn_weights = self.attn_dropout(attn_weights)
        attn_output = torch.matmul(attn_weights, value)
        return attn_output.transpose(1, 2)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        if self.fused_qkv:
            query, key, value = self.c_attn(hidden_states).split(
                [self.q_size, self.kv_size, self.kv_size], dim=2)
        else:
            query = self.q_attn(hidden_states)
            key = self.k_attn(hidden_states)
            value = self.v_attn(hidden_states)
        query = self._heads(query, self.q_norm)
        key = self._heads(key, self.k_norm)
        value = self._heads(value, None)
        if self.rotary:
            query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        if self.attention == 'sdpa':
            attn_output = sdpa_attention(self, query, key, value, self._dropout_p())
        else:
            attn_output = self._eager(query, key, value, attention_mask)
        attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()
        attn_output = self.c_proj(attn_output)
        return self.resid_dropout(attn_output)


class LlamaAttention(_AttentionBase):
    """``LlamaAttention`` (``Qwen2Attention`` with qkv bias, ``Qwen3`` with q/k norms)."""

    def __init__(self, spec: ModelSpec, attention: AttentionImpl) -> None:
        super().__init__(spec, attention)
        h = spec.hidden_size
        self.q_proj = linear('llama', h, self.q_size, spec.qkv_bias)
        self.k_proj = linear('llama', h, self.kv_size, spec.qkv_bias)
        self.v_proj = linear('llama', h, self.kv_size, spec.qkv_bias)
        self.o_proj = linear('llama', self.q_size, h, spec.attn_out_bias)

    def _eager(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Llama's ``eager_attention_forward``: fp32 softmax, cast back to the query dtype."""
        key_states = repeat_kv(key, self.num_key_value_groups)
        value_states = repeat_kv(value, self.num_key_value_groups)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * self.scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        attn_weights = dropout(attn_weights, self._dropout_p(), self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        return attn_output.transpose(1, 2).contiguous()

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        input_shape = hidden_states.shape[:-1]
        query = self._heads(self.q_proj(hidden_states), self.q_norm)
        key = self._heads(self.k_proj(hidden_states), self.k_norm)
        value = self._heads(self.v_proj(hidden_states), None)
        if self.rotary:
            query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        if self.attention == 'sdpa':
            attn_output = sdpa_attention(self, query, key, value, self._dropout_p())
        else:
            attn_output = self._eager(query, key, value, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.resid_dropout(self.o_proj(attn_output))


class MLP(nn.Module):
    """``GPT2MLP`` (``c_fc -> act -> c_proj``) or the gated ``LlamaMLP``."""

    def __init__(self, spec: ModelSpec, style: Style, tanh_gelu: TanhGelu) -> None:
        super().__init__()
        h, f, bias = spec.hidden_size, spec.ffn_size, spec.mlp_bias
        self.gated = spec.gated_mlp
        self.act_fn = make_activation(spec, tanh_gelu)
        if self.gated:
            self.gate_proj = linear(style, h, f, bias)
            self.up_proj = linear(style, h, f, bias)
            self.down_proj = linear(style, f, h, bias)
        else:
            self.c_fc = linear(style, h, f, bias)
            self.c_proj = linear(style, f, h, bias)
        self.dropout = Dropout(spec.hidden_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            out = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        else:
            out = self.c_proj(self.act_fn(self.c_fc(x)))
        return self.dropout(out)


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)) (GPT2Block, LlamaDecoderLayer)."""

    def __init__(self, spec: ModelSpec, style: Style, attention: AttentionImpl,
                 fused_qkv: bool, tanh_gelu: TanhGelu) -> None:
        super().__init__()
        self.input_layernorm = make_norm(spec)
        if style == 'gpt2':
            self.self_attn: nn.Module = GPT2Attention(spec, attention, fused_qkv)
        else:
            self.self_attn = LlamaAttention(spec, attention)
        self.post_attention_layernorm = make_norm(spec)
        self.mlp = MLP(spec, style, tanh_gelu)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, attention_mask, position_embeddings)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class CausalLM(nn.Module):
    """A decoder-only LM with its head and transformers' causal-LM loss.

    Build it with :func:`build_model`. ``forward(input_ids, labels, num_items_in_batch)``
    returns :class:`CausalLMOutput` (loss, logits).
    """

    def __init__(self, spec: ModelSpec, style: Style, attention: AttentionImpl,
                 checkpointing: bool, fused_qkv: bool, tanh_gelu: TanhGelu) -> None:
        super().__init__()
        self.spec = spec
        self.style = style
        self.attention = attention
        self.gradient_checkpointing = checkpointing
        # ``checkpoint(..., context_fn=)``: (forward, recompute) context managers.
        self.checkpoint_context_fn = noop_context_fn
        h = spec.hidden_size
        self.embed_tokens = nn.Embedding(spec.vocab_size, h)
        nn.init.normal_(self.embed_tokens.weight, std=INIT_STD)
        if spec.position_embedding == 'learned':
            self.embed_positions = nn.Embedding(spec.max_position_embeddings, h)
            nn.init.normal_(self.embed_positions.weight, std=INIT_STD)
        else:
            self.embed_positions = None
        self.rotary_emb = (RotaryEmbedding(spec.head_dim)
                           if spec.position_embedding == 'rotary' else None)
        self.embed_dropout = Dropout(spec.hidden_dropout)
        self.layers = nn.ModuleList(DecoderLayer(spec, style, attention, fused_qkv, tanh_gelu)
                                    for _ in range(spec.num_layers))
        self.norm = make_norm(spec)
        self.lm_head = nn.Linear(h, spec.vocab_size, bias=False)
        if spec.tied_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        else:
            nn.init.normal_(self.lm_head.weight, std=INIT_STD)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                num_items_in_batch: torch.Tensor | int | None = None) -> CausalLMOutput:
        batch, seq_len = input_ids.shape
        if self.embed_positions is not None and seq_len > self.spec.max_position_embeddings:
            raise ValueError(f'seq_len {seq_len} exceeds max_position_embeddings '
                             f'{self.spec.max_position_embeddings}')
        hidden_states = self.embed_tokens(input_ids)
        cache_position = torch.arange(seq_len, device=input_ids.device)
        position_ids = cache_position.unsqueeze(0)
        if self.embed_positions is not None:
            hidden_states = hidden_states + self.embed_positions(position_ids)
        attention_mask = None
        if self.attention == 'eager':
            attention_mask = eager_causal_mask(batch, seq_len, hidden_states.dtype,
                                               hidden_states.device)
        position_embeddings = (self.rotary_emb(hidden_states, position_ids)
                               if self.rotary_emb is not None else None)
        hidden_states = self.embed_dropout(hidden_states)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                hidden_states = checkpoint(layer, hidden_states, attention_mask,
                                           position_embeddings, use_reentrant=False,
                                           context_fn=self.checkpoint_context_fn)
            else:
                hidden_states = layer(hidden_states, attention_mask, position_embeddings)
        hidden_states = self.norm(hidden_states)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = for_causal_lm_loss(logits, labels, self.spec.vocab_size, num_items_in_batch)
        return CausalLMOutput(loss, logits)


# ---- LoRA (PEFT) and 4-bit base layers (bitsandbytes) ---------------------------------------
class MatMul4Bit(torch.autograd.Function):
    """bitsandbytes' ``MatMul4Bit``: dequantize, matmul; keep only the packed weight.

    As in ``bitsandbytes/autograd/_functions.py``: the forward dequantizes the weight
    to the input's dtype for one ``linear`` and drops it; ``ctx.tensors = (None, B)``
    (the packed parameter, no new memory) when an input needs grad; the backward
    dequantizes again for ``grad_A`` and never computes a weight gradient.
    """

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                layer: Linear4bit) -> torch.Tensor:
        output = F.linear(a, layer.dequantize(a.dtype), bias)
        ctx.layer = layer
        ctx.dtype_bias = None if bias is None else bias.dtype
        ctx.tensors = (None, b) if any(ctx.needs_input_grad[:2]) else (None, None)
        return output

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        req_grad_a, _, req_grad_bias, _ = ctx.needs_input_grad
        grad_a = grad_bias = None
        if req_grad_bias:
            grad_bias = grad_output.sum(0, dtype=ctx.dtype_bias)
        if req_grad_a:
            grad_a = torch.matmul(grad_output, ctx.layer.dequantize(grad_output.dtype))
        return grad_a, None, grad_bias, None


class Linear4bit(nn.Module):
    """bitsandbytes' ``Linear4bit`` (NF4, blocksize 64, ``compress_statistics=True``).

    Storage as ``Params4bit`` keeps it: the weight packed two to a byte in a uint8
    ``(in·out/2, 1)`` parameter; the quant state's absmax double-quantized (a uint8 code
    per 64 weights, an fp32 scale per 256 codes, an fp32 offset), held here as buffers so
    that they are counted. The forward follows ``Linear4bit.forward``: the compute dtype
    is the input's (``set_compute_type`` for fp32/bf16 inputs), then ``matmul_4bit``.

    :meth:`dequantize` stands in for bitsandbytes' CUDA kernels by their allocations
    only: the fp32 absmax of ``dequantize_blockwise`` and the dequantized matrix in the
    dtype the weight was quantized from (the values are zeros; memory is what is
    emulated).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        n = in_features * out_features
        blocks = math.ceil(n / NF4_BLOCK)
        self.weight = nn.Parameter(torch.empty(n // 2, 1, dtype=torch.uint8),
                                   requires_grad=False)
        self.register_buffer('absmax', torch.zeros(blocks, dtype=torch.uint8),
                             persistent=False)
        self.register_buffer('absmax_scale', torch.ones(math.ceil(blocks / NF4_ABSMAX_BLOCK),
                                                        dtype=torch.float32), persistent=False)
        self.register_buffer('absmax_offset', torch.zeros((), dtype=torch.float32),
                             persistent=False)
        self.bias = (nn.Parameter(torch.zeros(out_features, dtype=dtype), requires_grad=False)
                     if bias else None)
        self.quant_dtype = dtype  # what dequantization returns (the dtype quantized from)
        self.compute_dtype: torch.dtype | None = None

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """The (out, in) weight in ``dtype``, allocated as bitsandbytes' kernels do."""
        absmax = self.absmax.to(torch.float32)  # dequantize_blockwise's output
        absmax.add_(self.absmax_offset)
        weight = torch.zeros(self.out_features, self.in_features, dtype=self.quant_dtype,
                             device=self.weight.device)
        del absmax
        return weight.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.compute_dtype is None:
            self.compute_dtype = x.dtype
        inp_dtype = x.dtype
        x = x.to(self.compute_dtype)
        bias = None if self.bias is None else self.bias.to(self.compute_dtype)
        return MatMul4Bit.apply(x, self.weight, bias, self).to(inp_dtype)


def _autocast_enabled() -> bool:
    """PEFT's ``torch.is_autocast_enabled()`` (CUDA's), for the CPU autocast used here."""
    return torch.is_autocast_enabled('cpu') or torch.is_autocast_enabled('cuda')


class LoraLinear(nn.Module):
    """PEFT's ``lora.Linear`` (``lora.bnb.Linear4bit`` over a :class:`Linear4bit`).

    ``lora_A`` (r x in) and ``lora_B`` (out x r) are fp32 ``nn.Linear`` without bias;
    ``lora_dropout`` is ``nn.Identity`` (PEFT's default p = 0). The 16/32-bit layer casts
    the input to the adapters' dtype (``_cast_input_dtype``) and the result back to the
    base output's dtype; the 4-bit layer clones the base output and casts only when
    autocast is off.
    """

    def __init__(self, base_layer: nn.Module, in_features: int, out_features: int,
                 rank: int) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.lora_dropout = nn.Identity()
        self.lora_A = nn.Linear(in_features, rank, bias=False, dtype=torch.float32)
        self.lora_B = nn.Linear(rank, out_features, bias=False, dtype=torch.float32)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = LORA_ALPHA / rank
        self.quantized = isinstance(base_layer, Linear4bit)

    def _cast_input_dtype(self, x: torch.Tensor) -> torch.Tensor:
        dtype = self.lora_A.weight.dtype
        return x if x.dtype == dtype else x.to(dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quantized:
            result = self.base_layer(x).clone()  # "defensively clone" (PEFT, for 4-bit)
            requires_conversion = not _autocast_enabled()
            if requires_conversion:
                expected_dtype = result.dtype
                x = self._cast_input_dtype(x)
            output = self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
            if requires_conversion:
                output = output.to(expected_dtype)
            return result + output
        result = self.base_layer(x)
        torch_result_dtype = result.dtype
        x = self._cast_input_dtype(x)
        result = result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
        return result.to(torch_result_dtype)


# Projection attributes of the attention block and the MLP, and the LoRA target each is.
_ATTENTION_TARGETS = {'q_proj': 'q', 'k_proj': 'k', 'v_proj': 'v', 'o_proj': 'o',
                      'c_attn': 'qkv', 'q_attn': 'q', 'k_attn': 'k', 'v_attn': 'v',
                      'c_proj': 'o'}
_MLP_TARGETS = {'gate_proj': 'gate', 'up_proj': 'up', 'down_proj': 'down', 'c_fc': 'up',
                'c_proj': 'down'}


def _fans(layer: nn.Module) -> tuple[int, int]:
    if isinstance(layer, Conv1D):
        nx, nf = layer.weight.shape
        return nx, nf
    return layer.in_features, layer.out_features


def apply_lora(model: CausalLM, lora: LoraSpec) -> CausalLM:
    """Freeze ``model``, quantize its layers' projections if asked, wrap the targets.

    The model's parameters are in the frozen dtype already; adapters are fp32.
    """
    dtype = model.embed_tokens.weight.dtype
    for p in model.parameters():
        p.requires_grad_(False)
    targets = set(lora.targets)
    for layer in model.layers:
        for parent, names in ((layer.self_attn, _ATTENTION_TARGETS),
                              (layer.mlp, _MLP_TARGETS)):
            for attr, target in names.items():
                base = getattr(parent, attr, None)
                if not isinstance(base, (nn.Linear, Conv1D)):
                    continue
                fan_in, fan_out = _fans(base)
                if lora.quantized:
                    if lora.base_bits != 4:
                        raise NotImplementedError('only 4-bit bases are emulated')
                    base = Linear4bit(fan_in, fan_out, base.bias is not None, dtype)
                wanted = (targets & {'q', 'k', 'v'}) if target == 'qkv' else target in targets
                if wanted:
                    base = LoraLinear(base, fan_in, fan_out, lora.rank)
                setattr(parent, attr, base)
    return model


def _make_inputs_require_grad(_module: nn.Module, _inputs: object,
                              output: torch.Tensor) -> None:
    """transformers' ``enable_input_require_grads`` hook on the input embedding."""
    output.requires_grad_(True)


def default_style(spec: ModelSpec) -> Style:
    """GPT-2 for LayerNorm with a plain MLP, Llama otherwise."""
    return 'gpt2' if spec.norm == 'layernorm' and not spec.gated_mlp else 'llama'


def build_model(spec: ModelSpec, *, style: Style | None = None,
                attention: AttentionImpl = 'eager', checkpointing: bool = False,
                fused_qkv: bool | None = None, tanh_gelu: TanhGelu | None = None,
                lora: LoraSpec | None = None) -> CausalLM:
    """The reference model for ``spec``, in training mode, in the default dtype.

    Args:
        spec: the shape; its ``total_params()`` is the model's parameter count.
        style: ``'gpt2'`` or ``'llama'``; default :func:`default_style`.
        attention: ``'eager'`` or ``'sdpa'``.
        checkpointing: checkpoint every decoder layer (non-reentrant).
        fused_qkv: GPT-2 style only: one ``c_attn`` (default, needs MHA) or three.
        tanh_gelu: for ``activation='gelu_tanh'``: ``'gelu_new'`` (GPT-2's Python
            formula; default for the GPT-2 style) or ``'gelu_pytorch_tanh'`` (one
            fused op, as in Gemma; default for the Llama style).
        lora: PEFT LoRA adapters on the frozen model (see the module docstring); with
            ``checkpointing`` the embedding output is made to require grad.
    """
    style = default_style(spec) if style is None else style
    if style not in STYLES:
        raise ValueError(f'unknown style {style!r}; allowed: {", ".join(STYLES)}')
    if attention not in ATTENTION_IMPLS:
        raise ValueError(f'unknown attention {attention!r}; '
                         f'allowed: {", ".join(ATTENTION_IMPLS)}')
    if spec.moe is not None:
        raise NotImplementedError('mixture-of-experts specs are not modelled')
    if spec.norms_per_layer != 2:
        raise NotImplementedError('only two norms per layer are modelled')
    if fused_qkv is None:
        fused_qkv = style == 'gpt2' and spec.num_kv_heads == spec.num_heads
    if fused_qkv and style != 'gpt2':
        raise ValueError('fused_qkv is a GPT-2-style option')
    if tanh_gelu is None:
        tanh_gelu = 'gelu_new' if style == 'gpt2' else 'gelu_pytorch_tanh'
    model = CausalLM(spec, style, attention, checkpointing, fused_qkv, tanh_gelu)
    if lora is not None:
        apply_lora(model, lora)
        if checkpointing:
            model.embed_tokens.register_forward_hook(_make_inputs_require_grad)
    return model.train()
