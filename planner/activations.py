"""Activation memory: the tensors a training step keeps from forward to backward.

Two implementations are modelled, because which tensors autograd saves depends on
the code that runs, not on the maths:

* ``megatron``: Megatron-LM / Transformer Engine fused kernels, Korthikanti et al.
  2022 Table 2 generalised to GQA, gated MLPs and flash attention (DOMAIN.md §5).
* ``hf``: Hugging Face transformers modules run by PyTorch eager autograd, counted
  tensor by tensor from what each op saves (RMSNorm's fp32 upcast, autocast's
  per-op input casts, ``repeat_kv`` in eager attention, SDPA's log-sum-exp, ...).
  Checked against PyTorch's MemTracker in ``tests/groundtruth``.

Every function takes numpy arrays (or scalars) for the numeric axes and returns
bytes per GPU, broadcast over them. ``b`` is the micro-batch, ``s`` the full
sequence length, ``t``/``c`` the tensor/context-parallel sizes, ``sp`` whether
sequence parallelism shards the replicated parts, ``rc`` the recompute code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.model_spec import ModelSpec
from planner.recipes import PrecisionRecipe

RECOMPUTE_CODES = {'none': 0, 'selective': 1, 'full': 2}
MASK_BYTES = 1  # dropout masks are bool tensors


@dataclass(frozen=True)
class LayerTerms:
    """Bytes one layer saves, split by how each part scales under TP/SP/CP.

    All coefficients multiply tokens on this rank (T = b·s/c) unless named:
    ``hidden`` by T·h and replicated across TP ranks unless SP is on; ``sharded``
    already includes q, kv and f widths and is divided by t; ``score`` multiplies
    the attention-score elements b·(a/t)·s·(s/c); ``per_head_token`` multiplies
    b·(a/t)·(s/c); ``per_token`` multiplies T and is replicated.
    """

    hidden: float
    sharded: float
    score: float
    per_head_token: float
    per_token: float

    def bytes(self, b, s, t, c, sp, h, a):
        """Evaluate for arrays of micro-batch, sequence, TP, CP and SP flags."""
        tokens = b * s / c
        hidden_div = np.where(sp & (t > 1), t, 1)
        return (tokens * (self.hidden * h / hidden_div + self.sharded / t + self.per_token)
                + self.score * b * (a / t) * s * (s / c)
                + self.per_head_token * b * (a / t) * (s / c))


def _dropout(p: float) -> float:
    return 1.0 if p > 0 else 0.0


def megatron_layer_terms(m: ModelSpec, r: PrecisionRecipe, attention: str,
                         recompute: str) -> LayerTerms:
    """Korthikanti et al. 2022 Table 2, generalised (DOMAIN.md §5).

    16-bit activations (scaled by the recipe's activation bytes), 1-byte masks.
    Reproduces sbh(34 + 5as/h) for GPT-3 shapes with dropout.
    """
    e = r.act_bytes
    q, kv = m.q_size, m.kv_size
    f = m.moe.top_k * m.moe.expert_ffn_size if m.moe else m.ffn_size
    hid_mask = _dropout(m.hidden_dropout) * MASK_BYTES
    if recompute == 'full':
        return LayerTerms(hidden=e, sharded=0.0, score=0.0, per_head_token=0.0, per_token=0.0)
    # Replicated outside the TP regions: two norm inputs, QKV and fc1 inputs, two masks.
    hidden = 4 * e + 2 * hid_mask  # LN1 in, LN2 in, QKV in, fc1 in; two dropout masks
    sharded = e * (q + kv) + e * kv + e * q  # Q and K, V, out-projection input
    sharded += e * (3 * f if m.gated_mlp else 2 * f)  # act input(s) and fc2 input
    score = per_head = 0.0
    if attention == 'eager' and recompute != 'selective':
        score = e + _dropout(m.attention_dropout) * (MASK_BYTES + e)  # softmax out, mask, out
    elif attention == 'flash':
        per_head = 4.0  # fp32 log-sum-exp kept by the fused kernel
    return LayerTerms(hidden=hidden, sharded=sharded, score=score, per_head_token=per_head,
                      per_token=0.0)


def hf_layer_terms(m: ModelSpec, r: PrecisionRecipe, attention: str,
                   recompute: str) -> LayerTerms:
    """What PyTorch autograd saves for one Hugging Face decoder layer.

    Counted op by op (verified against MemTracker in tests/groundtruth):
    * residual stream: the layer input and the mid-layer residual (fp32 under
      autocast, since fp32 + bf16 promotes);
    * RMSNorm upcasts to fp32 and saves the normalised tensor (and the fp32 copy of
      a bf16 input); LayerNorm's fused kernel saves only per-token statistics;
    * a linear saves its input; under autocast each linear casts its input anew,
      so separate q/k/v projections save three bf16 copies;
    * eager attention saves q, the ``repeat_kv`` copies of k and v (full q width
      even with GQA), the fp32 softmax output and its bf16 cast; SDPA/flash saves
      q, k, v, its output and an fp32 log-sum-exp per head and token;
    * a gated MLP saves gate, act(gate), up and their product; a plain one its
      fc1 output and act output (five tensors for HF's Python "gelu_new").
    """
    res, e = r.residual_bytes, r.act_bytes
    q, kv = m.q_size, m.kv_size
    f = m.moe.top_k * m.moe.expert_ffn_size if m.moe else m.ffn_size
    if recompute == 'full':
        # checkpoint() keeps the layer's input; the rest is rebuilt in backward.
        return LayerTerms(hidden=res, sharded=0.0, score=0.0, per_head_token=0.0,
                          per_token=0.0)
    # Two norms: each saves its input (the residual stream) and what it needs for backward.
    hidden = 2 * norm_saved_bytes(m, r)
    if r.autocast:
        hidden += e * (1 if m.fused_qkv else 3)
        hidden += e * (1 if (m.fused_gate_up or not m.gated_mlp) else 2)
    else:
        hidden += 2 * res  # one norm output shared by the projections that read it
    hidden += 2 * _dropout(m.hidden_dropout) * MASK_BYTES
    per_token = 2 * (4 if m.norm == 'rmsnorm' else 8)  # fp32 rsqrt, or mean and rstd

    rope = m.position_embedding == 'rotary'
    if attention == 'eager':
        if m.fused_qkv and not rope:
            qkv = e * (q + 2 * kv) + (2 * e * (q - kv) if kv < q else 0)
        else:
            qkv = 3 * e * q
        sharded = qkv + e * q  # + the contiguous input of o_proj
    else:
        # q, k, v and the kernel's output, which is laid out (b, s, heads, d) already and
        # so is o_proj's input without a copy.
        sharded = e * (q + 2 * kv) + e * q
    if m.gated_mlp:
        sharded += 4 * e * f
    elif m.python_gelu:
        # 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) saves x, tanh, 0.5·x, 1 + tanh and the
        # fc2 input. pow runs in fp32 under CUDA autocast, which makes x³'s input, tanh
        # and 1 + tanh fp32 there.
        sharded += ((12 + 2 * e) if r.autocast else 5 * e) * f
    else:
        sharded += 2 * e * f
    score = per_head = 0.0
    if attention == 'eager' and recompute != 'selective':
        # The fp32 softmax output, and what the AV matmul reads: its cast back to the
        # compute dtype, or dropout's output (with a 1-byte mask) when dropout is on.
        drop = _dropout(m.attention_dropout)
        softmax = 4 if (m.softmax_fp32 or r.autocast) else e  # autocast runs it in fp32
        score = softmax + (e if (e != softmax or drop) else 0) + drop * MASK_BYTES
    elif attention == 'flash':
        per_head = 4.0
    return LayerTerms(hidden=hidden, sharded=sharded, score=score, per_head_token=per_head,
                      per_token=per_token)


def norm_saved_bytes(m: ModelSpec, r: PrecisionRecipe) -> float:
    """Bytes per token·hidden one norm keeps for backward, its input included.

    LayerNorm's kernel keeps its input (plus per-token statistics). HF RMSNorm keeps
    the fp32 view of its input (the input itself when fp32, else an upcast copy) and
    the normalised tensor in the input dtype.
    """
    if m.norm == 'layernorm':
        return float(r.residual_bytes)
    return 4.0 + r.residual_bytes


def layer_terms(m: ModelSpec, r: PrecisionRecipe, attention: str, recompute: str,
                framework: str) -> LayerTerms:
    """Per-layer saved bytes for the chosen framework."""
    fn = megatron_layer_terms if framework == 'megatron' else hf_layer_terms
    return fn(m, r, attention, recompute)


@dataclass(frozen=True)
class EdgeBytes:
    """Activations outside the layers, per micro-batch, on the first and last stage.

    Attributes:
        first_stage: input ids, embedding dropout mask, rotary tables.
        last_stage_saved: final norm tensors and the saved loss input, kept from the
            end of forward to the start of backward.
        loss_forward_peak: extra bytes live while the loss is computed.
        loss_backward_peak: extra bytes live while the loss's backward runs.
    """

    first_stage: np.ndarray
    last_stage_saved: np.ndarray
    loss_forward_peak: np.ndarray
    loss_backward_peak: np.ndarray


def edge_bytes(m: ModelSpec, r: PrecisionRecipe, loss: str, b, s, t, c, sp) -> EdgeBytes:
    """Embedding-side and loss-side activations (DOMAIN.md §5, logits and CE)."""
    tokens = b * s / c
    h, v = m.hidden_size, m.vocab_size
    res, e = r.residual_bytes, r.act_bytes
    hidden_div = np.where(sp & (t > 1), t, 1)
    first = 8.0 * tokens  # int64 input ids
    first = first + _dropout(m.hidden_dropout) * MASK_BYTES * tokens * h / hidden_div
    if m.position_embedding == 'rotary':
        # cos and sin tables, one per position, broadcast over the batch
        first = first + 2 * s / c * m.head_dim * res
    final_norm = tokens * h / hidden_div * norm_saved_bytes(m, r)
    head_input = tokens * h / hidden_div * (e if r.autocast else res)
    labels = 3 * 8.0 * tokens  # int64 labels, and the shifted copy the loss keeps
    if loss == 'megatron':
        # Vocab-parallel CE keeps fp32 logits (softmax written in place) per TP shard.
        saved = final_norm + head_input + labels + 4.0 * tokens * v / t
        fwd_peak = e * tokens * v / t
        bwd_peak = e * tokens * v / t
    else:
        # HF: logits in the compute dtype, .float(), log_softmax saved (fp32).
        saved = final_norm + head_input + labels + 4.0 * tokens * v / t
        logits = e * tokens * v / t
        upcast = 4.0 * tokens * v / t if e != 4 else 0.0
        fwd_peak = logits + upcast
        # nll grad + log_softmax grad (fp32) while the saved output is still live
        bwd_peak = 8.0 * tokens * v / t
    return EdgeBytes(first_stage=np.asarray(first, float),
                     last_stage_saved=np.asarray(saved, float),
                     loss_forward_peak=np.asarray(fwd_peak, float),
                     loss_backward_peak=np.asarray(bwd_peak, float))
