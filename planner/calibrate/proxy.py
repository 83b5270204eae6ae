"""A trainable stand-in of the target model: its widths, fewer layers.

The proxy keeps everything that decides the cost of one layer and of the model's
edges (hidden size, heads, KV heads, head size, FFN width and gating, vocabulary,
norm, positions, biases, tied head, attention kind) and takes only ``num_layers``
layers, so it fits on one device. Timing it at two depths separates the per-layer
cost from the fixed one (embedding, head, loss), which extrapolates to the full
depth (CALIBRATION.md §8).

The model is built from stock ``torch.nn`` modules held in an ``nn.ModuleDict`` and
run by :func:`proxy_loss`, a plain function: no ``nn.Module`` subclass is needed, so
``torch`` is imported inside the functions and this module stays importable without
it (the ruff rule ``TID253`` bans module-level torch imports in ``planner/``).
Only the calibration child process calls these functions.

A mixture-of-experts model is proxied by a dense MLP as wide as the experts one
token visits (``top_k`` routed plus the shared ones): the same FLOPs per token,
without the routing and the experts' memory.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

from planner.models.spec import ModelSpec

# The proxy's step (probes.train_step) keeps only the loss, as the HF Trainer does: its
# estimates count no held model output (planner/memory/model_outputs.py).
PROXY_LOOP = 'trainer'

# Precision recipes the proxy can run (plain PyTorch; Megatron's bf16-mixed and
# Transformer Engine's fp8 need their frameworks).
PROXY_PRECISIONS: tuple[str, ...] = ('fp32', 'tf32', 'amp-bf16', 'amp-fp16', 'bf16')
INIT_STD = 0.02
ROPE_THETA = 10_000.0
NORM_EPS = 1e-5


@dataclass
class Proxy:
    """A built proxy: its modules and how to run them.

    Attributes:
        modules: every parameter, as stock modules (``embed``, ``layers``, ``final_norm``,
            ``head`` and ``positions`` where the spec has them).
        spec: the target model's shape (its ``num_layers`` is the full depth).
        num_layers: layers this proxy has.
        attention: ``flash`` (SDPA, causal) or ``eager`` (explicit scores and softmax).
        rope: precomputed ``(cos, sin)`` for rotary positions, or None.
    """

    modules: Any
    spec: ModelSpec
    num_layers: int
    attention: str
    rope: tuple[Any, Any] | None


def mlp_width(spec: ModelSpec) -> int:
    """FFN width of one layer; for a mixture of experts, what one token visits."""
    if spec.moe is None:
        return spec.ffn_size
    m = spec.moe
    return m.top_k * m.expert_ffn_size + m.shared_experts * (m.shared_ffn_size
                                                             or m.expert_ffn_size)


def param_dtype_name(precision: str) -> str:
    """The dtype the parameters live in: bf16 for pure bf16, fp32 otherwise."""
    return 'bfloat16' if precision == 'bf16' else 'float32'


def build_proxy(spec: ModelSpec, num_layers: int, *, seq_len: int, attention: str,
                precision: str, device: str = 'cpu') -> Proxy:
    """Build the proxy on ``device`` (also inside ``FakeTensorMode``).

    Args:
        spec: the target model.
        num_layers: layers of the proxy (1 or 2 in a calibration).
        seq_len: tokens per sequence (sizes learned positions and the rotary table).
        attention: ``flash`` or ``eager``.
        precision: a :data:`PROXY_PRECISIONS` key; pure ``bf16`` builds bf16 parameters.
        device: ``cpu`` or ``cuda``.
    """
    import torch
    from torch import nn

    dtype = getattr(torch, param_dtype_name(precision))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # ``.to()`` cannot retype fake parameters
    try:
        with torch.device(device):
            modules = _modules(nn, spec, num_layers, seq_len)
            rope = _rope_table(torch, spec, seq_len) if spec.position_embedding == 'rotary' \
                else None
    finally:
        torch.set_default_dtype(previous)
    return Proxy(modules=modules, spec=spec, num_layers=num_layers, attention=attention,
                 rope=rope)


def _linear(nn: Any, fan_in: int, fan_out: int, bias: bool) -> Any:
    layer = nn.Linear(fan_in, fan_out, bias=bias)
    nn.init.normal_(layer.weight, std=INIT_STD)
    return layer


def _norm(nn: Any, spec: ModelSpec, size: int) -> Any:
    if spec.norm == 'layernorm' or not hasattr(nn, 'RMSNorm'):  # RMSNorm: torch >= 2.4
        return nn.LayerNorm(size, eps=NORM_EPS)
    return nn.RMSNorm(size, eps=NORM_EPS)


def _modules(nn: Any, spec: ModelSpec, num_layers: int, seq_len: int) -> Any:
    h, q, kv, f = spec.hidden_size, spec.q_size, spec.kv_size, mlp_width(spec)
    layers = []
    for _ in range(num_layers):
        layer = {'norm1': _norm(nn, spec, h), 'norm2': _norm(nn, spec, h),
                 'o': _linear(nn, q, h, spec.attn_out_bias)}
        if spec.fused_qkv:
            layer['qkv'] = _linear(nn, h, q + 2 * kv, spec.qkv_bias)
        else:
            layer.update(q=_linear(nn, h, q, spec.qkv_bias), k=_linear(nn, h, kv, spec.qkv_bias),
                         v=_linear(nn, h, kv, spec.qkv_bias))
        if spec.qk_norm:
            layer.update(q_norm=_norm(nn, spec, spec.head_dim),
                         k_norm=_norm(nn, spec, spec.head_dim))
        if spec.gated_mlp:
            layer.update(gate=_linear(nn, h, f, spec.mlp_bias), up=_linear(nn, h, f, spec.mlp_bias))
        else:
            layer['up'] = _linear(nn, h, f, spec.mlp_bias)
        layer['down'] = _linear(nn, f, h, spec.mlp_bias)
        layers.append(nn.ModuleDict(layer))
    parts = {'embed': nn.Embedding(spec.vocab_size, h), 'layers': nn.ModuleList(layers),
             'final_norm': _norm(nn, spec, h)}
    nn.init.normal_(parts['embed'].weight, std=INIT_STD)
    if spec.position_embedding == 'learned':
        parts['positions'] = nn.Embedding(max(seq_len, spec.max_position_embeddings), h)
    if not spec.tied_embeddings:
        parts['head'] = _linear(nn, h, spec.vocab_size, False)
    return nn.ModuleDict(parts)


def _rope_table(torch: Any, spec: ModelSpec, seq_len: int) -> tuple[Any, Any]:
    d = spec.head_dim - spec.head_dim % 2
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate(x: Any, cos: Any, sin: Any) -> Any:
    import torch

    d = cos.shape[-1]
    x_rot, x_pass = x[..., :d], x[..., d:]
    half = d // 2
    rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    out = x_rot * cos.to(x.dtype) + rotated * sin.to(x.dtype)
    return torch.cat((out, x_pass), dim=-1) if x_pass.shape[-1] else out


def _activation(spec: ModelSpec, x: Any) -> Any:
    import torch.nn.functional as F  # noqa: N812 - the usual name

    if spec.activation == 'silu':
        return F.silu(x)
    if spec.activation == 'gelu':
        return F.gelu(x)
    if spec.activation == 'gelu_tanh':
        return F.gelu(x, approximate='tanh')
    if spec.activation == 'relu':
        return F.relu(x)
    return F.relu(x).square()  # relu2


def _attention(p: Proxy, layer: Any, x: Any) -> Any:
    import torch
    import torch.nn.functional as F  # noqa: N812

    spec = p.spec
    b, s, _ = x.shape
    a, g, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    if 'qkv' in layer:
        q, k, v = layer['qkv'](x).split([spec.q_size, spec.kv_size, spec.kv_size], dim=-1)
    else:
        q, k, v = layer['q'](x), layer['k'](x), layer['v'](x)
    q, k, v = q.view(b, s, a, d), k.view(b, s, g, d), v.view(b, s, g, d)
    if 'q_norm' in layer:
        q, k = layer['q_norm'](q), layer['k_norm'](k)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if p.rope is not None:
        cos, sin = (t[:s] for t in p.rope)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    dropout = spec.attention_dropout if layer.training else 0.0
    if p.attention == 'flash':
        if g != a:  # GQA inside the kernel where torch has it (>= 2.5), else a copy
            try:
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True,
                                                     enable_gqa=True)
            except TypeError:
                out = F.scaled_dot_product_attention(
                    q, k.repeat_interleave(a // g, 1), v.repeat_interleave(a // g, 1),
                    dropout_p=dropout, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
    else:
        if g != a:
            k, v = k.repeat_interleave(a // g, 1), v.repeat_interleave(a // g, 1)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float('-inf'))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = F.dropout(probs, dropout, layer.training) @ v
    out = out.transpose(1, 2).reshape(b, s, spec.q_size)
    return F.dropout(layer['o'](out), spec.hidden_dropout, layer.training)


def _mlp(spec: ModelSpec, layer: Any, x: Any) -> Any:
    import torch.nn.functional as F  # noqa: N812

    if 'gate' in layer:
        inner = _activation(spec, layer['gate'](x)) * layer['up'](x)
    else:
        inner = _activation(spec, layer['up'](x))
    return F.dropout(layer['down'](inner), spec.hidden_dropout, layer.training)


def proxy_loss(p: Proxy, input_ids: Any) -> Any:
    """Next-token cross-entropy of the proxy on ``input_ids`` (labels = the inputs).

    The logits are upcast to fp32 before the loss, as transformers does.
    """
    import torch
    import torch.nn.functional as F  # noqa: N812

    m = p.modules
    x = m['embed'](input_ids)
    if 'positions' in m:
        x = x + m['positions'](torch.arange(input_ids.shape[1], device=input_ids.device))
    x = F.dropout(x, p.spec.hidden_dropout, m.training)
    for layer in m['layers']:
        x = x + _attention(p, layer, layer['norm1'](x))
        x = x + _mlp(p.spec, layer, layer['norm2'](x))
    x = m['final_norm'](x)
    logits = m['head'](x) if 'head' in m else x @ m['embed'].weight.t()
    return F.cross_entropy(logits.float().view(-1, p.spec.vocab_size), input_ids.view(-1))


def random_batch(p: Proxy, micro_batch: int, seq_len: int, device: str = 'cpu') -> Any:
    """Token ids of one micro-batch."""
    import torch

    return torch.randint(0, p.spec.vocab_size, (micro_batch, seq_len), device=device)


def make_optimizer(p: Proxy) -> Any:
    """AdamW over the proxy's parameters, foreach (the CUDA default) on every device."""
    import torch

    return torch.optim.AdamW(p.modules.parameters(), lr=1e-4, foreach=True)


def autocast_context(precision: str, device: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for the ``amp-*`` recipes, else nothing."""
    import torch

    if precision == 'amp-bf16':
        return torch.autocast(device, dtype=torch.bfloat16)
    if precision == 'amp-fp16':
        return torch.autocast(device, dtype=torch.float16)
    return contextlib.nullcontext()


def compute_dtype_name(precision: str) -> str:
    """The torch dtype the matmuls run in under ``precision``."""
    return {'amp-bf16': 'bfloat16', 'bf16': 'bfloat16', 'amp-fp16': 'float16'}.get(
        precision, 'float32')
