"""Activation memory: the tensors a training step keeps from forward to backward.

Two implementations are modelled, because which tensors autograd saves depends on
the code that runs, not on the maths:

* ``megatron``: Megatron-LM / Transformer Engine fused kernels, Korthikanti et al.
  2022 Table 2 generalised to GQA, gated MLPs and flash attention.
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

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from planner.defaults import RECOMPUTE_MODES
from planner.memory.recipes import PrecisionRecipe
from planner.memory.training import LoraSpec
from planner.models.spec import ModelSpec

RECOMPUTE_CODES = {mode: code for code, mode in enumerate(RECOMPUTE_MODES)}
# The share of a stage's layers whose forward is re-run in backward, by recompute code
# (selective re-runs the attention core only: 0 here).
FULL_RECOMPUTE_SHARE = np.array([0.0, 0.0, 1.0, 0.5])
# The share of layers whose attention core is re-run, by recompute code.
CORE_RECOMPUTE_SHARE = np.array([0.0, 1.0, 1.0, 0.5])
# How much each code recomputes, least first (none, selective, half, full): the order
# in which a plan search prefers the simpler of two tied layouts.
RECOMPUTE_ORDER = np.array([0, 1, 3, 2])


def by_recompute_code(none, selective, full) -> np.ndarray:
    """A figure by recompute code from its value without recompute, under selective and
    under full recompute: ``half`` recomputes its share of the layers
    (``FULL_RECOMPUTE_SHARE``), so it takes that share of the way from none to full."""
    none, full = np.asarray(none, float), np.asarray(full, float)
    half = none + FULL_RECOMPUTE_SHARE[RECOMPUTE_CODES['half']] * (full - none)
    return np.stack(np.broadcast_arrays(none, np.asarray(selective, float), full, half))


def half_recomputed_per_chunk(layers: int, pp, vpp) -> np.ndarray:
    """Layers of one model chunk (ceil(L/(p·v)), the first rank's) that ``half``
    recomputes: the floor of its half, so at least the other half keeps its
    activations (Megatron's ``--recompute-num-layers`` with ``--recompute-method
    block``)."""
    v = np.maximum(np.asarray(vpp), 1)
    return np.floor(np.ceil(layers / (np.asarray(pp) * v)) / 2)


def half_recomputed_layers(layers: int, pp, vpp) -> np.ndarray:
    """Layers of the first stage that ``half`` recomputes: its chunks' together."""
    return half_recomputed_per_chunk(layers, pp, vpp) * np.maximum(np.asarray(vpp), 1)


MASK_BYTES = 1  # dropout masks are bool tensors


_TERM_FIELDS = ('hidden', 'sharded', 'score', 'per_head_token', 'per_token', 'sp_token',
                'routed', 'routed_ep', 'routed_a2a', 'expert_pad')


@dataclass(frozen=True)
class LayerTerms:
    """Bytes one layer saves, split by how each part scales under TP/SP/CP/EP.

    All coefficients multiply tokens on this rank (T = b·s/c) unless named:
    ``hidden`` by T·h and replicated across TP ranks unless SP is on; ``sharded``
    already includes q, kv and f widths and is divided by t; ``score`` multiplies
    the attention-score elements b·(a/t)·s·(s/c); ``per_head_token`` multiplies
    b·(a/t)·(s/c); ``per_token`` multiplies T and is replicated.

    An MoE layer's router and dispatcher work on the rank's sequence shard, and its
    experts on the tokens routed to them (Megatron-Core):

    * ``sp_token`` multiplies T and is divided like ``hidden`` (by t under SP): per-token
      tensors of the rank's own tokens (router probabilities, top-k indices);
    * ``routed`` multiplies T·et/t (t where SP is off): per-token tensors of the routed
      copies a rank holds after the EP all-to-all and the all-gather over the et ranks
      that split each expert (the expert input, k·h per token);
    * ``routed_ep`` multiplies T·et/t·ep: per token of the all-gather dispatcher's
      gathered rows, which span the EP group;
    * ``routed_a2a`` multiplies T·et/t where EP > 1 (0 at EP 1): the all-to-all outputs
      torchtitan's op-level SAC keeps;
    * ``expert_pad`` is bytes per layer at EP 1, divided by ep, whatever the tokens: rows
      torchtitan pads every local expert's token group with (``generate_permute_indices``).
    """

    hidden: float
    sharded: float
    score: float
    per_head_token: float
    per_token: float
    sp_token: float = 0.0
    routed: float = 0.0
    routed_ep: float = 0.0
    routed_a2a: float = 0.0
    expert_pad: float = 0.0

    def minus(self, other: LayerTerms) -> LayerTerms:
        """The coefficient-wise difference (what ``self`` saves beyond ``other``)."""
        return LayerTerms(*(getattr(self, k) - getattr(other, k) for k in _TERM_FIELDS))

    def plus(self, other: LayerTerms) -> LayerTerms:
        """The coefficient-wise sum (two blocks of one layer)."""
        return LayerTerms(*(getattr(self, k) + getattr(other, k) for k in _TERM_FIELDS))

    def at_least(self, other: LayerTerms) -> LayerTerms:
        """The coefficient-wise maximum: at least what either saves, at any shape."""
        return LayerTerms(*(max(getattr(self, k), getattr(other, k)) for k in _TERM_FIELDS))

    def bytes(self, b: np.ndarray, s: np.ndarray, t: np.ndarray, c: np.ndarray,
              sp: np.ndarray, h: int, a: int, et=None, ep=1) -> np.ndarray:
        """Evaluate for arrays of micro-batch, sequence, TP, CP and SP flags.

        ``et``: the ranks each expert is split over (None: t, Megatron's default
        ``--expert-tensor-parallel-size``, the larger); ``ep``: the expert-parallel size.
        Both matter only to MoE layers.
        """
        tokens = b * s / c
        hidden_div = np.where(sp & (t > 1), t, 1)
        out = (tokens * (self.hidden * h / hidden_div + self.sharded / t + self.per_token)
               + self.score * b * (a / t) * s * (s / c)
               + self.per_head_token * b * (a / t) * (s / c))
        if not (self.sp_token or self.routed or self.routed_ep or self.routed_a2a
                or self.expert_pad):
            return out  # a dense layer
        et = t if et is None else et
        ep = np.asarray(ep)
        routed = (self.routed + self.routed_ep * ep
                  + self.routed_a2a * (ep > 1)) * et / hidden_div
        return out + tokens * (self.sp_token / hidden_div + routed) + self.expert_pad / ep


def _dropout(p: float) -> float:
    return 1.0 if p > 0 else 0.0


def megatron_layer_terms(m: ModelSpec, r: PrecisionRecipe, attention: str,
                         recompute: str) -> LayerTerms:
    """Korthikanti et al. 2022 Table 2, generalised.

    16-bit activations (scaled by the recipe's activation bytes), 1-byte masks.
    Reproduces sbh(34 + 5as/h) for GPT-3 shapes with dropout. The four linears' inputs
    (QKV, out-projection, fc1, fc2) are saved in the recipe's ``linear_input_bytes``
    (fp8 under Transformer Engine's fp8).

    An MoE model's layers save the MoE block of :func:`megatron_moe_terms` in place of
    the dense MLP; where it keeps leading dense layers (``first_dense_layers``), one
    layer is counted at the larger of the two, coefficient by coefficient.
    """
    e = r.act_bytes
    lin = r.linear_input_bytes or e
    q, kv = m.q_size, m.kv_size
    hid_mask = _dropout(m.hidden_dropout) * MASK_BYTES
    if recompute == 'full':
        return LayerTerms(hidden=e, sharded=0.0, score=0.0, per_head_token=0.0, per_token=0.0)
    # Replicated outside the TP regions: two norm inputs, the QKV input, two masks.
    hidden = 2 * e + lin + 2 * hid_mask  # LN1 in, LN2 in, QKV in; two masks
    sharded = e * (q + kv) + e * kv + lin * q  # Q and K, V, out-projection input
    score = per_head = 0.0
    if attention == 'eager' and recompute != 'selective':
        score = e + _dropout(m.attention_dropout) * (MASK_BYTES + e)  # softmax out, mask, out
    elif attention == 'flash':
        per_head = 4.0  # fp32 log-sum-exp kept by the fused kernel
    attn = LayerTerms(hidden=hidden, sharded=sharded, score=score, per_head_token=per_head,
                      per_token=0.0)
    if m.moe is None:
        return attn.plus(_megatron_dense_mlp(m, r, m.ffn_size))
    mlp = megatron_moe_terms(m, r)
    if m.moe.first_dense_layers:
        mlp = mlp.at_least(_megatron_dense_mlp(m, r, m.ffn_size))
    return attn.plus(mlp)


def _megatron_dense_mlp(m: ModelSpec, r: PrecisionRecipe, f: int) -> LayerTerms:
    """A dense MLP of inner width ``f`` (TE's fused LayerNormLinear fc1 and the fused
    bias-SwiGLU/GeLU): the fc1 input, the activation's input(s) and the fc2 input."""
    e = r.act_bytes
    lin = r.linear_input_bytes or e
    return LayerTerms(hidden=lin, sharded=e * (2 * f if m.gated_mlp else f) + lin * f,
                      score=0.0, per_head_token=0.0, per_token=0.0)


@dataclass(frozen=True)
class MegatronMoEChoices:
    """The Megatron-Core switches that change what an MoE layer saves.

    Attributes:
        dispatcher: ``--moe-token-dispatcher-type``: 'allgather' (Megatron-LM's default)
            or 'alltoall' (what Megatron-Bridge's recipes run; 'flex' is bounded by
            'allgather', see :func:`megatron_moe_terms`).
        router: the score function as run: 'softmax' (top-k on the logits, then a softmax
            over the k: ``--moe-router-pre-softmax`` off, the default), 'softmax_pre',
            'sigmoid', or 'fused' (``--moe-router-fusion``, TE's kernel).
        aux: the load-balancing loss's scores: 'none' (``--moe-aux-loss-coeff 0``, the
            default), 'softmax', 'sigmoid' or 'fused'.
        z_loss: ``--moe-z-loss-coeff`` set.
        permute_fused: ``--moe-permute-fusion`` (TE's permutation kernels).
        router_fp32: ``--moe-router-dtype fp32``: the probabilities in fp32, else in the
            activations' dtype.
        shared_gate: ``--moe-shared-expert-gate`` (with shared experts).
    """

    dispatcher: str = 'allgather'
    router: str = 'softmax'
    aux: str = 'none'
    z_loss: bool = False
    permute_fused: bool = False
    router_fp32: bool = False
    shared_gate: bool = False


def megatron_moe_block(m: ModelSpec, r: PrecisionRecipe, ch: MegatronMoEChoices) -> LayerTerms:
    """What one Megatron-Core MoE block saves under the switches ``ch``, its input (the
    pre-MLP norm's output) included, counted op by op from NVIDIA/Megatron-LM
    megatron/core/transformer/moe/ (megatron-core 0.16.1; the same at d98e8a6) and
    NVIDIA/TransformerEngine (d0067d0) for the fused kernels. Measured on the CPU for
    the unfused switches by tests/stacks/test_moe_activations.py.

    Bytes per token (h hidden, E experts, k routed per token, f an expert's width, e the
    activations' bytes, l a linear's saved input, p the probabilities' bytes):

    * router (router.py ``TopKRouter``, moe_utils.py ``router_gating_linear`` and
      ``topk_routing_with_score_function``): the gating linear keeps its input, the
      block's input (e·h). Unfused: torch.topk keeps its int64 indices (8k) and the
      softmax over the k its fp32 output (4k); 'softmax_pre' the softmax over E (4E) and
      the indices; 'sigmoid' the fp32 sigmoid over E (4E), the indices, and the division
      that normalises the k its numerator and denominator (p·k + p). TE's fused router
      (transformer_engine/pytorch/router.py ``FusedTopkScoreFunction``, csrc/extensions/
      router.cpp) keeps a bool routing map and an fp32 intermediate, both E wide (5E).
    * load-balancing loss (``compute_routing_scores_for_aux_loss``): a softmax over E in
      fp32 (4E) and the top-k indices of those scores (8k, topk's backward keeps them);
      with a sigmoid, the sigmoid in the logits' dtype and the normaliser (p·E + 8k + p);
      TE's fused scores an fp32 intermediate (4E). The z-loss (``z_loss_func``):
      logsumexp keeps the logits and its output (p·E + p).
    * dispatch (token_dispatcher.py, moe_utils.py ``permute``): the alltoall dispatcher
      permutes the probabilities with ``probs.T.contiguous().masked_select(mask)``, which
      keeps both (p·E + E), and the tokens by ``index_select`` on the int64 sorted indices
      (8k, the same tensor the unpermute's ``scatter_add_`` keeps). TE's fused permutation
      (transformer_engine/pytorch/permutation.py ``moe_permute_with_probs``) keeps an
      int32 row map of 2E + 1 columns (8E + 4) instead, and with several local experts
      its chunk sorts one int32 map each way per routed copy (8k, ``routed``). The
      allgather dispatcher does the same on the rows gathered over the EP x expert-TP
      group, restricted to the local experts: p·E + E and 8k, or (8E/ep + 4) per gathered
      row fused: all ``routed``.
    * experts (experts.py ``TEGroupedMLP``/``SequentialMLP``, fusions/fused_bias_swiglu.py
      ``WeightedSwiGLUFunction``): fc1 keeps the routed copies (l·k·h, replicated over
      the expert-TP ranks after their all-gather), the weighted activation its input (the
      fc1 output, 2·e·k·f, split over the expert-TP ranks) and the permuted probabilities
      (p·k), fc2 its input (l·k·f). GPT-OSS's clamped GEGLU
      (fusions/fused_bias_geglu.py ``weighted_bias_quick_geglu_impl``) clamps both halves
      and concatenates them before the fused function: the clamps keep the fc1 output
      and the function the clamped copy, 2·e·k·f more. A plain (non-gated) activation has
      no fused weighted kernel (mlp.py raises), so it runs unfused: the fc1 output, the
      activation's output (multiplied by the probabilities) and the fc2 input.
    * shared experts (shared_experts.py ``SharedExpertMLP``): a dense MLP on the block's
      input (under fp8 TE's fc1 keeps its own quantized copy of it); with a gate, the
      sigmoid's output (e) and the shared output it multiplies (e·h).

    Not counted: per-layer (not per-token) tensors (the loss's per-expert counts, 8E B,
    and scalars), the DeepEP/HybridEP dispatch handles (held by the autograd context, not
    saved through it), ``--no-bias-swiglu-fusion`` (unfused SwiGLU keeps more),
    and the pre-MLP norm's statistics (4 B per token, not counted for dense layers either).
    """
    moe = m.moe
    assert moe is not None
    e = float(r.act_bytes)
    lin = float(r.linear_input_bytes or e)
    h, n_exp, k, f = m.hidden_size, moe.num_experts, moe.top_k, moe.expert_ffn_size
    p = 4.0 if ch.router_fp32 else e
    hidden = e  # the router's input, the block's input
    sp_token = {'softmax': 12.0 * k, 'softmax_pre': 4.0 * n_exp + 8 * k,
                'sigmoid': 4.0 * n_exp + 8 * k + p * k + p, 'fused': 5.0 * n_exp}[ch.router]
    sp_token += {'none': 0.0, 'softmax': 4.0 * n_exp + 8 * k,
                 'sigmoid': p * n_exp + 8 * k + p, 'fused': 4.0 * n_exp}[ch.aux]
    if ch.z_loss:
        sp_token += p * n_exp + p
    routed = lin * k * h + p * k  # the experts' input, the permuted probabilities
    routed_ep = 0.0
    if ch.dispatcher == 'alltoall':
        sp_token += (8.0 * n_exp + 4) if ch.permute_fused else (p * n_exp + n_exp + 8 * k)
        if ch.permute_fused:
            routed += 8.0 * k  # the chunk sorts' int32 maps (several local experts)
    else:
        routed += p * n_exp + n_exp + (8.0 * n_exp if ch.permute_fused else 8.0 * k)
        routed_ep = 4.0 if ch.permute_fused else 0.0
    # gated: the fc1 output (2f wide); plain: the fc1 output and the activation's (f each)
    sharded = 2 * e * k * f + lin * k * f  # and the fc2 input
    if m.gated_mlp and m.clamped_glu:
        sharded += 2 * e * k * f  # the clamped copy
    if moe.shared_experts:
        fs = moe.shared_experts * (moe.shared_ffn_size or f)
        sharded += e * (2 * fs if m.gated_mlp else fs) + lin * fs
        if lin != e:
            hidden += lin  # TE's fp8 fc1 keeps a quantized copy of the block's input
        if ch.shared_gate:
            hidden += e
            sp_token += e
    return LayerTerms(hidden=hidden, sharded=sharded, score=0.0, per_head_token=0.0,
                      per_token=0.0, sp_token=sp_token, routed=routed, routed_ep=routed_ep)


def megatron_moe_terms(m: ModelSpec, r: PrecisionRecipe) -> LayerTerms:
    """One Megatron-Core MoE block at the switches that keep the most.

    batchfit's request names none of them, so each is taken where it saves more: the
    fp32 probabilities, the z-loss and a load-balancing loss, the shared-expert gate, and
    per block the larger of the unfused and the fused kernels (the router and the
    permutation; the fused ones keep E-wide maps). For the dispatcher: allgather (the
    default) keeps at least what alltoall keeps wherever E·(p + 1) >= 8k (its gathered
    rows cover the alltoall's by the expert-TP size, and its fused map is as wide), so
    it alone is counted there; elsewhere both are, coefficient by coefficient. The flex
    dispatcher (DeepEP) permutes at most every gathered row once with the local experts'
    E/ep-wide maps: no more than allgather's. Routing is assumed balanced: each rank's
    experts receive k·T·et/t routed copies (the mean); a rank whose experts draw more
    tokens saves proportionally more (Megatron's dropless default caps nothing).
    Megatron-LM d7288711 (Megatron-Bridge v0.4.1's) permutes unfused by an argsort, keeping
    two int64 k-long maps (16k) where megatron-core 0.16.1 keeps the masked select's
    p·E + E + 8k: below the allgather bound too.
    """
    moe = m.moe
    assert moe is not None
    best: LayerTerms | None = None
    for dispatcher in ('allgather', 'alltoall'):
        for router in ('softmax', 'softmax_pre', 'sigmoid', 'fused'):
            for aux in ('softmax', 'sigmoid', 'fused'):
                for fused in (False, True):
                    terms = megatron_moe_block(m, r, MegatronMoEChoices(
                        dispatcher=dispatcher, router=router, aux=aux, z_loss=True,
                        permute_fused=fused, router_fp32=True, shared_gate=True))
                    best = terms if best is None else best.at_least(terms)
        if moe.num_experts * 5 >= 8 * moe.top_k:
            break  # allgather keeps at least what alltoall does (see above)
    assert best is not None
    return best


def hf_layer_terms(m: ModelSpec, r: PrecisionRecipe, attention: str,
                   recompute: str) -> LayerTerms:
    """What PyTorch autograd saves for one Hugging Face decoder layer (:func:`_hf_layer`);
    for an MoE model that keeps leading dense layers, the larger of its two kinds of
    layer, coefficient by coefficient."""
    terms = _hf_layer(m, r, attention, recompute)
    if m.moe is not None and m.moe.first_dense_layers and recompute != 'full':
        terms = terms.at_least(_hf_layer(replace(m, moe=None), r, attention, recompute))
    return terms


def _hf_layer(m: ModelSpec, r: PrecisionRecipe, attention: str,
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
    f = m.ffn_size
    if recompute == 'full':
        # checkpoint() keeps the layer's input; the rest is rebuilt in backward.
        return LayerTerms(hidden=res, sharded=0.0, score=0.0, per_head_token=0.0,
                          per_token=0.0)
    # Two norms: each saves its input (the residual stream) and what it needs for backward.
    # A parallel-residual block (GPT-NeoX) feeds both norms the same input, saved once.
    stats = 4 if m.norm == 'rmsnorm' else 8  # fp32 rsqrt, or mean and rstd, per token
    hidden = 2 * norm_saved_bytes(m, r)
    if m.parallel_residual and m.norm == 'layernorm':
        hidden -= r.residual_bytes
    # Post-norms on the sublayers' outputs (Gemma-2/3: four norms a layer) save the fp32
    # view of their input and the fp32 normalised tensor.
    post_norms = m.norms_per_layer - 2
    hidden += post_norms * 8.0
    if r.autocast:
        hidden += e * (1 if m.fused_qkv else 3)
        if m.moe is None:
            hidden += e * (1 if (m.fused_gate_up or not m.gated_mlp) else 2)
    else:
        hidden += 2 * res  # one norm output shared by the projections that read it
    hidden += 2 * _dropout(m.hidden_dropout) * MASK_BYTES
    per_token: float = (2 + post_norms) * stats

    rope = m.position_embedding == 'rotary'
    sharded: float
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
        if m.fused_qkv and rope:
            # v is a view of the fused projection's output, so the kernel's saved v keeps
            # all of it alive while rotary makes q and k anew (transformers' Phi-3 and
            # GPT-NeoX split qkv by slicing; GPT-2's q and k are views of it too)
            sharded += e * (q + kv)
        if m.rotary_cat:
            # Partial rotary ends in torch.cat, so q is laid out (b, heads, s, d) and so is
            # the kernel's output (its memory follows q's: ``empty_like``); the
            # ``transpose(1, 2).contiguous()`` before o_proj is then a copy, which o_proj
            # saves (transformers' Phi-3 and GPT-NeoX ``apply_rotary_pos_emb``)
            sharded += e * q
    per_head = 0.0
    if m.qk_norm:
        # q and k normalised per head (or over all heads): the fp32 view of the
        # projection's output and the normalised tensor (fp32 where the norm multiplies
        # in fp32, Gemma-3 and OLMo-2; else in the projection's dtype, Qwen3), and rsqrt.
        sharded += (4.0 + (4.0 if m.norm_fp32 else e)) * (q + kv)
        if m.qk_norm_full_width:
            per_token += 2 * 4.0
        else:
            per_head += 4.0 * (1 + m.num_kv_heads / m.num_heads)
    if m.moe is not None:
        moe_hidden, moe_sharded, moe_token = hf_moe_terms(m, r)
        hidden += moe_hidden
        sharded += moe_sharded
        per_token += moe_token
    elif m.gated_mlp:
        sharded += 4 * e * f
    elif m.python_gelu:
        # 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) saves x, tanh, 0.5·x, 1 + tanh and the
        # fc2 input. pow runs in fp32 under CUDA autocast, which makes x³'s input, tanh
        # and 1 + tanh fp32 there.
        sharded += ((12 + 2 * e) if r.autocast else 5 * e) * f
    else:
        sharded += 2 * e * f
    score = 0.0
    if attention == 'eager' and recompute != 'selective':
        # The fp32 softmax output, and what the AV matmul reads: its cast back to the
        # compute dtype, or dropout's output (with a 1-byte mask) when dropout is on.
        drop = _dropout(m.attention_dropout)
        softmax = 4 if (m.softmax_fp32 or r.autocast) else e  # autocast runs it in fp32
        score = softmax + (e if (e != softmax or drop) else 0) + drop * MASK_BYTES
        if m.attn_softcap:
            score += e  # Gemma-2's tanh(scores / cap) output, saved by tanh
        if m.attention_sinks:
            # the softmax runs over the scores and one sink logit per head (GPT-OSS's
            # ``eager_attention_forward``): its saved output has one more column, and the
            # ``combined_logits.max(dim=-1, keepdim=True)`` subtracted before it keeps its
            # int64 indices, one per head and token (transformers
            # models/gpt_oss/modeling_gpt_oss.py; measured per layer in
            # tests/groundtruth/test_hf_moe_layers.py)
            per_head += softmax + 8.0
    elif attention == 'flash':
        per_head += 4.0
    return LayerTerms(hidden=hidden, sharded=sharded, score=score, per_head_token=per_head,
                      per_token=per_token)


def norm_saved_bytes(m: ModelSpec, r: PrecisionRecipe) -> float:
    """Bytes per token·hidden one norm keeps for backward, its input included.

    LayerNorm's kernel keeps its input (plus per-token statistics). HF RMSNorm keeps
    the fp32 view of its input (the input itself when fp32, else an upcast copy) and
    the normalised tensor in the input dtype; Gemma's and OLMo-2's multiply by the
    weight in fp32 and so keep the normalised tensor in fp32
    (``GemmaRMSNorm.forward``: ``output * (1.0 + self.weight.float())``).
    """
    if m.norm == 'layernorm':
        return float(r.residual_bytes)
    return 4.0 + (4.0 if m.norm_fp32 else r.residual_bytes)


def hf_moe_terms(m: ModelSpec, r: PrecisionRecipe) -> tuple[float, float, float]:
    """What a transformers 5 MoE block saves per token: (× h, widths, bytes).

    The router is a linear (under autocast it saves a bf16 cast of its input); its fp32
    softmax output, top-k indices and normalised weights are kept. The experts run
    ``grouped_mm_experts_forward`` (``transformers/integrations/moe.py``, the default
    ``experts_implementation``): every routed copy of a token is gathered (k·h), projected
    by gate_up (2·k·f), activated and multiplied (k·f each), projected down (k·h) and
    weighted; grouped_mm is not autocast-enabled and casts its input to the weights'
    dtype, so under autocast over fp32 weights all of this is fp32. The sort permutation,
    its inverse and the gathered weights are kept for the gathers' backward. A shared
    expert (Qwen2-MoE) is a gated MLP with a sigmoid gate.
    """
    moe = m.moe
    assert moe is not None
    e = r.act_bytes
    c = float(r.weight_bytes)  # the experts' compute dtype
    k, fe = moe.top_k, moe.expert_ffn_size
    hidden = (e if r.autocast else 0.0) + c * 2 * k
    sharded = c * 4 * k * fe
    if m.clamped_glu:
        # GPT-OSS (transformers models/gpt_oss/modeling_gpt_oss.py ``_apply_gate``): the
        # clamped gate, σ(α·gate), up + 1 and their product are saved where SwiGLU saves
        # act(gate) alone: three more k·f tensors.
        sharded += c * 3 * k * fe
    # Per token (transformers models/{mixtral,qwen2_moe,qwen3_moe,gpt_oss}: the routers;
    # integrations/moe.py ``grouped_mm_experts_forward``): the fp32 softmax over E (4E);
    # topk's int64 indices (8k); the sort permutation, its ``// k`` gather index and the
    # inverse permutation (3 x 8k), and with expert biases the expert ids that gather them
    # (8k); the gathered routing weights the expert output is multiplied by (k, fp32 at
    # most: Mixtral does not cast them back); and where the top-k weights are renormalised
    # in place (Mixtral; Qwen's ``norm_topk_prob``) the clone of the top-k values the
    # in-place division keeps (4k) and the sum it divides by (4). Measured per layer in
    # tests/groundtruth/test_hf_moe_layers.py.
    per_token = 4.0 * moe.num_experts + 8.0 * k + 8.0 * k * (4 if m.mlp_bias else 3) \
        + 4.0 * k + 4.0 * k + 4.0
    if moe.shared_experts:
        fs = moe.shared_ffn_size or fe
        hidden += (3 * e if r.autocast else 0.0) + e  # gate/up/gate-gate casts, its output
        sharded += moe.shared_experts * 4 * e * fs
        per_token += 2 * e  # the sigmoid gate's output
    return hidden, sharded, per_token


def layer_terms(m: ModelSpec, r: PrecisionRecipe, attention: str, recompute: str,
                framework: str, lora: LoraSpec | None = None) -> LayerTerms:
    """Per-layer saved bytes for the chosen framework (Hugging Face + PEFT under LoRA)."""
    if framework == 'megatron':
        return megatron_layer_terms(m, r, attention, recompute)
    if lora is not None:
        return hf_lora_layer_terms(m, r, lora, attention, recompute)
    return hf_layer_terms(m, r, attention, recompute)


# ---- LoRA (PEFT) on a frozen Hugging Face model -------------------------------------------

class _LoraLayer(NamedTuple):
    saved: LayerTerms  # what one layer saves
    base_casts: float  # frozen weight elements whose input requires grad
    at_scores: LayerTerms | None  # eager: saved when the scores are made


class _Saved:
    """Tensors saved for backward, each counted once however many ops save it."""

    def __init__(self) -> None:
        self.terms: dict[str, tuple[str, float]] = {}

    def add(self, key: str, bucket: str, coef: float) -> None:
        self.terms.setdefault(key, (bucket, coef))

    def layer_terms(self) -> LayerTerms:
        total = dict.fromkeys(('hidden', 'sharded', 'score', 'per_head_token', 'per_token'),
                              0.0)
        for bucket, coef in self.terms.values():
            total[bucket] += coef
        return LayerTerms(**total)


def lora_adapter_input_bytes(r: PrecisionRecipe) -> float:
    """Bytes per element that an adapted projection's ``lora_A`` saves of its input.

    PEFT's ``lora.Linear`` casts its input to the adapters' fp32 (``_cast_input_dtype``,
    a copy unless it is fp32 already); under autocast ``lora_A``'s linear then casts that
    to bf16 (a new tensor each time), so every adapted projection saves its own 2-byte
    copy. Without autocast it saves the fp32 input itself (shared with whatever else saves
    it) or its own fp32 copy. The QLoRA layer (``lora.bnb.Linear4bit``) skips PEFT's cast
    under autocast, so a bf16 input is saved as is, shared (:func:`_adapter_input_shared`).
    Returns the size of the saved tensor, whoever else holds it.
    """
    return 2.0 if r.autocast else 4.0


def _adapter_input_shared(r: PrecisionRecipe, lora: LoraSpec, x_bytes: float) -> bool:
    """Whether ``lora_A`` saves its input tensor itself rather than a copy of it."""
    if r.autocast:
        return lora.quantized and x_bytes == 2
    return x_bytes == 4


def hf_lora_layer_terms(m: ModelSpec, r: PrecisionRecipe, lora: LoraSpec, attention: str,
                        recompute: str, input_grad: bool = True) -> LayerTerms:
    """What autograd saves for one Hugging Face decoder layer with PEFT LoRA adapters.

    See :func:`_hf_lora_layer`.
    """
    return _hf_lora_layer(m, r, lora, attention, recompute, input_grad).saved


def lora_saved_base_casts(m: ModelSpec, r: PrecisionRecipe, lora: LoraSpec, attention: str,
                          input_grad: bool = True) -> float:
    """Elements of one layer's frozen base weights whose autocast copy is saved.

    A frozen fp32 weight under autocast is cast to bf16 at every use; the linear saves
    that copy (for its input's gradient) only when its input requires grad. Not cached.
    """
    return _hf_lora_layer(m, r, lora, attention, 'none', input_grad).base_casts


def lora_scores_moment(m: ModelSpec, r: PrecisionRecipe, lora: LoraSpec) -> LayerTerms:
    """Eager attention's scores moment under LoRA, relative to the layer's saved bytes.

    What the layer has saved when its scores are computed, less all it saves, plus its
    input and the norm output where those are not saved themselves; the scores'
    temporaries come on top (``memory._forward_attention_temp``).
    """
    layer = _hf_lora_layer(m, r, lora, 'eager', 'none')
    assert layer.at_scores is not None  # eager attention, nothing recomputed: always set
    fd = lora.frozen_bytes(r.act_bytes)
    y1 = (4.0 if r.autocast else fd) if m.norm == 'layernorm' else fd
    alive = 0.0 if lora_norm_saves_input(m, r, lora) else fd
    qkv = ('qkv',) if m.fused_qkv else ('q', 'k', 'v')
    adapted = lora.adapted(m)
    if not (any(p in adapted for p in qkv) and _adapter_input_shared(r, lora, y1)):
        alive += y1
    before = layer.at_scores.minus(layer.saved)
    return LayerTerms(before.hidden + alive, before.sharded, before.score,
                      before.per_head_token, before.per_token)


def _hf_lora_layer(m: ModelSpec, r: PrecisionRecipe, lora: LoraSpec, attention: str,
                   recompute: str, input_grad: bool = True) -> _LoraLayer:
    """What autograd saves for one Hugging Face decoder layer with PEFT LoRA adapters.

    The base is frozen, so autograd saves a projection's input only where an adapter
    reads it (``lora_A``'s weight requires grad), and an op saves an operand only when
    the other one requires grad (checked against MemTracker in tests/groundtruth):

    * the residual stream is in the base's dtype (:meth:`LoraSpec.frozen_bytes`), since
      the frozen embedding is; RMSNorm with a frozen weight keeps only its fp32 input (a
      copy of a bf16 one) and the per-token rsqrt, not the normalised tensor;
    * an adapted projection saves its input as :func:`lora_adapter_input_bytes` says
      (one copy per adapted consumer under autocast; shared in fp32), and ``lora_A``'s
      r-wide output; a frozen one saves nothing (its weight is a parameter already);
    * attention saves what it does in full fine-tuning (its inputs require grad through
      the residual stream); ``o_proj``'s input is SDPA's saved output, so adapting ``o``
      costs nothing more there in fp32, while eager attention's contiguous copy is kept
      only for an adapted ``o``;
    * a gated MLP keeps gate, act(gate) and up (silu and the product need them), the
      product only for an adapted ``down``; a plain MLP its activation's saved tensors,
      the activation output only for an adapted second projection.

    ``input_grad=False`` is the bottom layer when the embedding output does not require
    grad (no ``enable_input_require_grads``, which PEFT and TRL call for gradient
    checkpointing only): nothing before the first adapter is recorded.

    Returns the saved bytes, the elements of frozen projection weights whose input
    requires grad (whose autocast copy a linear saves, when the base is fp32), and for
    eager attention what is saved when the scores are computed.
    """
    if recompute == 'full':
        # checkpoint() keeps the layer's input; the rest is rebuilt in backward.
        return _LoraLayer(LayerTerms(hidden=lora.frozen_bytes(r.act_bytes), sharded=0.0,
                                     score=0.0, per_head_token=0.0, per_token=0.0), 0.0, None)
    w = _LoraLayerWalk(m, r, lora)
    rg_o, per_head, at_scores = _lora_attention_block(w, attention, recompute, input_grad)
    _lora_mlp_block(w, input_grad or rg_o)
    terms = w.saved.layer_terms()
    return _LoraLayer(LayerTerms(hidden=terms.hidden, sharded=terms.sharded,
                                 score=terms.score, per_head_token=per_head,
                                 per_token=terms.per_token), w.casts, at_scores)


class _LoraLayerWalk:
    """One LoRA layer walked op by op: what it saves so far and the frozen weight
    elements whose input requires grad (``casts``)."""

    def __init__(self, m: ModelSpec, r: PrecisionRecipe, lora: LoraSpec) -> None:
        self.m, self.r, self.lora = m, r, lora
        self.fd = lora.frozen_bytes(r.act_bytes)
        self.ac = r.autocast
        self.ec = r.act_bytes if self.ac else self.fd  # what matmuls and the ops between produce
        self.q, self.kv = m.q_size, m.kv_size
        self.f = m.moe.top_k * m.moe.expert_ffn_size if m.moe else m.ffn_size
        self.adapted = lora.adapted(m)
        self.saved = _Saved()
        h, q, kv, f = m.hidden_size, self.q, self.kv, self.f
        self.fans = {'q': (h, q), 'k': (h, kv), 'v': (h, kv), 'qkv': (h, q + 2 * kv),
                     'o': (q, h), 'gate': (h, f), 'up': (h, f), 'gate_up': (h, 2 * f),
                     'down': (f, h)}
        self.casts = 0.0
        self.hid_drop = _dropout(m.hidden_dropout)

    def norm(self, name: str, rg: bool) -> float:
        """Save what a frozen norm keeps; return its output's bytes per element."""
        ac, fd, saved = self.ac, self.fd, self.saved
        if self.m.norm == 'layernorm':
            # native_layer_norm keeps its input (cast to fp32 under CUDA autocast's fp32
            # policy) and fp32 mean and rstd; its output is fp32 under autocast.
            if rg:
                saved.add(f'{name}.in', 'hidden', 4.0 if ac else fd)
                saved.add(f'{name}.stats', 'per_token', 8.0)
            return 4.0 if ac else fd
        if rg:
            saved.add(f'{name}.in32', 'hidden', 4.0)  # the fp32 view of the input
            saved.add(f'{name}.rstd', 'per_token', 4.0)
        return fd

    def project(self, name: str, x: str, x_bytes: float, bucket: str, width: float,
                rg_x: bool) -> bool:
        """A frozen projection, adapted or not; returns whether its output requires grad."""
        if rg_x:
            self.casts += self.fans[name][0] * self.fans[name][1]
        if name not in self.adapted:
            return rg_x
        size = lora_adapter_input_bytes(self.r)
        key = x if _adapter_input_shared(self.r, self.lora, x_bytes) else f'{name}.lora_in'
        self.saved.add(key, bucket, size * width)
        self.saved.add(f'{name}.lora_mid', 'per_token', (2.0 if self.ac else 4.0) * self.lora.rank)
        return True


def _lora_attention_block(w: _LoraLayerWalk, attention: str, recompute: str,
                          rg_x: bool) -> tuple[bool, float, LayerTerms | None]:
    """The attention block: (whether o_proj's output requires grad, the per-head-token
    bytes, what is saved when eager attention's scores are made)."""
    m = w.m
    y1 = w.norm('norm1', rg_x)
    if m.fused_qkv:
        rg_q = rg_k = rg_v = w.project('qkv', 'norm1.out', y1, 'hidden', 1.0, rg_x)
    else:
        rg_q, rg_k, rg_v = (w.project(p, 'norm1.out', y1, 'hidden', 1.0, rg_x)
                            for p in ('q', 'k', 'v'))
    rg_any = rg_q or rg_k or rg_v
    per_head = 0.0
    at_scores = None
    if attention != 'eager':
        # q, k, v and the kernel's output (o_proj's input, no copy), the log-sum-exp.
        if rg_any:
            w.saved.add('q', 'sharded', w.ec * w.q)
            w.saved.add('k', 'sharded', w.ec * w.kv)
            w.saved.add('v', 'sharded', w.ec * w.kv)
            w.saved.add('attn.out', 'sharded', w.ec * w.q)
            per_head = 4.0 if attention == 'flash' else 0.0
        rg_out = rg_any
    else:
        at_scores = _lora_eager_attention(w, recompute, rg_q, rg_k, rg_v)
        rg_out = rg_q or rg_k or rg_v
    rg_o = w.project('o', 'attn.out', w.ec, 'sharded', w.q, rg_out)
    if rg_o and w.hid_drop:
        w.saved.add('attn.drop', 'hidden', MASK_BYTES)
    return rg_o, per_head, at_scores


def _lora_eager_attention(w: _LoraLayerWalk, recompute: str, rg_q: bool, rg_k: bool,
                          rg_v: bool) -> LayerTerms:
    """Eager attention's saves (repeat_kv's copies, the softmax, dropout, the
    probabilities); returns what is saved when the scores are made."""
    m, saved, ec, q, kv = w.m, w.saved, w.ec, w.q, w.kv
    rg_s = rg_q or rg_k  # the scores
    if m.fused_qkv and m.position_embedding != 'rotary':
        # q, k, v are views of one output: any of them saved keeps it all.
        if rg_q or rg_k or rg_v:
            saved.add('qkv', 'sharded', ec * (q + 2 * kv)
                      + (2 * ec * (q - kv) if kv < q else 0))
    else:
        if rg_k:
            saved.add('q', 'sharded', ec * q)  # for k's gradient
        if rg_q:
            saved.add('k_rep', 'sharded', ec * q)  # repeat_kv's full-width copy
        if rg_s:
            saved.add('v_rep', 'sharded', ec * q)
    at_scores = saved.layer_terms()
    drop = _dropout(m.attention_dropout)
    softmax = 4 if (m.softmax_fp32 or w.ac) else ec
    if recompute != 'selective':
        if rg_s:
            saved.add('softmax', 'score', softmax)  # softmax saves its output
            saved.add('drop_mask', 'score', drop * MASK_BYTES)
        if rg_v:
            # what the AV matmul reads: the softmax output itself, or its cast (or
            # dropout's output)
            if ec != softmax or drop:
                saved.add('probs', 'score', ec)
            else:
                saved.add('softmax', 'score', softmax)
    return at_scores


def _lora_mlp_block(w: _LoraLayerWalk, rg_h: bool) -> None:
    """The MLP block (gated or plain), its input requiring grad where ``rg_h``."""
    m, saved, ec, f = w.m, w.saved, w.ec, w.f
    y2 = w.norm('norm2', rg_h)
    p_bytes: float
    if m.gated_mlp:
        if m.fused_gate_up:
            rg_g = rg_u = w.project('gate_up', 'norm2.out', y2, 'hidden', 1.0, rg_h)
        else:
            rg_g = w.project('gate', 'norm2.out', y2, 'hidden', 1.0, rg_h)
            rg_u = w.project('up', 'norm2.out', y2, 'hidden', 1.0, rg_h)
        if rg_g:
            saved.add('gate', 'sharded', ec * f)  # the activation's input
            saved.add('up', 'sharded', ec * f)  # for act(gate)'s gradient
        if rg_u:
            saved.add('act', 'sharded', ec * f)  # for up's gradient
        rg_p, p_bytes = rg_g or rg_u, ec
    else:
        rg_p = w.project('up', 'norm2.out', y2, 'hidden', 1.0, rg_h)
        if rg_p:
            if m.python_gelu:
                # x, tanh, 0.5·x, 1 + tanh (x³'s input, tanh and 1 + tanh in fp32 under
                # CUDA autocast, which runs pow in fp32)
                saved.add('gelu', 'sharded', ((12 + ec) if w.ac else 4 * ec) * f)
            else:
                saved.add('fc1.out', 'sharded', ec * f)
        p_bytes = 4.0 if (m.python_gelu and w.ac) else ec
    rg_mlp = w.project('down', 'mlp.act', p_bytes, 'sharded', f, rg_p)
    if rg_mlp and w.hid_drop:
        saved.add('mlp.drop', 'hidden', MASK_BYTES)


def lora_forward_temps(m: ModelSpec, r: PrecisionRecipe, lora: LoraSpec,
                       recompute: bool = False) -> list[tuple[LayerTerms, float]]:
    """A layer's widest forward moments under LoRA, beyond its saved tensors.

    Each candidate is what is alive at one point of the MLP less what the layer saves
    after it: at the last adapted input projection (up, else gate), its base output, the
    adapter's output and the scaled one or their sum (fp32 without autocast: the
    adapters' dtype); at the output projection, its input (saved or not) and PEFT's
    fp32 copy of it (a bf16 copy of that copy is what an autocast ``lora_A`` saves),
    with the three h-wide outputs. The layer's input, the mid-layer residual and the
    MLP's input (the norm output) are alive throughout without being saved.

    ``recompute``: the layer re-running in backward under full recompute. Its input is
    the checkpoint's (counted already); the recomputation starts at the first backward
    node that unpacks a saved tensor (an adapted output projection's ``lora_B``, else
    the frozen projection itself, whose weight is packed too; bitsandbytes' 4-bit
    matmul packs nothing, so there the product's gradient exists first) with the
    gradients made so far alive, and stops once the last saved tensor exists, before the
    adapter's outputs.

    Each comes with the bytes of a weight-sized transient (a 4-bit base's dequantized
    weight, :func:`lora_dequant_bytes`), before tensor parallelism.
    """
    fd = lora.frozen_bytes(r.act_bytes)
    ac = r.autocast
    ec = r.act_bytes if ac else fd
    lo = ec if ac else 4.0  # an adapter's output: fp32 without autocast
    f = m.moe.top_k * m.moe.expert_ffn_size if m.moe else m.ffn_size
    adapted = lora.adapted(m)
    down = 'down' in adapted
    y2 = (4.0 if ac else fd) if m.norm == 'layernorm' else fd
    p_bytes = 4.0 if (m.python_gelu and ac and not m.gated_mlp) else ec
    peft_copy = (not lora.quantized or not ac)  # PEFT casts the input to fp32
    first = [n for n in ('up', 'gate_up', 'gate') if n in adapted]
    # The mid-layer residual and the norm output, where not saved themselves (a norm
    # saving its fp32 input saves the residual; an adapter may save the norm output).
    residual_saved = lora_norm_saves_input(m, r, lora)
    common = (0.0 if residual_saved else fd)
    common += 0.0 if (first and _adapter_input_shared(r, lora, y2)) else y2
    grad_f = 0.0
    if recompute:
        # the output's gradient (and its cast to the MLP output's dtype); an adapted
        # down's scaled-output gradient and, when the adapter's dtype differs, the base
        # output's; a 4-bit frozen down's input gradient
        common += fd + (ec if fd != ec else 0.0)
        common += (lo + (ec if lo != ec else 0.0)) if down else 0.0
        grad_f = ec if (lora.quantized and not down) else 0.0
    elif not residual_saved:
        common += fd  # the layer's input, held by the caller

    down_saved = lora_adapter_input_bytes(r) if down else 0.0
    shapes: list[LayerTerms] = []
    if first:
        outputs = ec + 2 * lo  # base output, adapter output and its scaled copy
        if lora.quantized:
            outputs = max(outputs, 2 * ec)  # PEFT's clone of the base output
        copy = 4.0 if (peft_copy and ac and y2 != 4) else 0.0  # PEFT's fp32 copy, transient
        later = ec + down_saved  # the projection's own output, the product's saved copy
        if first[0] == 'gate':
            later += 2 * ec  # act(gate) and up come after
        shapes.append(LayerTerms(hidden=common + copy,
                                 sharded=(outputs - later + grad_f) * f,
                                 score=0.0, per_head_token=0.0, per_token=0.0))
    if down:
        shared = _adapter_input_shared(r, lora, p_bytes)
        wide = (0.0 if shared else p_bytes) + (4.0 if (peft_copy and ac and p_bytes != 4)
                                               else 0.0)
        outputs = ec if recompute else ec + 2 * lo
    else:
        wide, outputs = p_bytes, (0.0 if recompute else ec)
    shapes.append(LayerTerms(hidden=common + outputs, sharded=(wide + grad_f) * f,
                             score=0.0, per_head_token=0.0, per_token=0.0))
    moments = [(moment, 0.0) for moment in shapes]
    if lora.quantized:
        # bitsandbytes' matmuls dequantize the weight beside the base output: at the
        # input projection (up) and at the output projection, whose input is alive
        # (a copy of it not made yet)
        deq = lora_dequant_bytes(m, r, lora)
        moments.append((LayerTerms(hidden=common, sharded=(grad_f - down_saved) * f,
                                   score=0.0, per_head_token=0.0, per_token=0.0), deq))
        if down or not recompute:
            pending = (0.0 if _adapter_input_shared(r, lora, p_bytes)
                       else p_bytes - down_saved) if down else p_bytes
            moments.append((LayerTerms(hidden=common + ec, sharded=(pending + grad_f) * f,
                                       score=0.0, per_head_token=0.0, per_token=0.0), deq))
    return moments


def lora_dequant_bytes(m: ModelSpec, r: PrecisionRecipe, lora: LoraSpec) -> float:
    """A 4-bit base's widest dequantized weight (and its fp32 absmax), made per use.

    bitsandbytes dequantizes to the dtype the weight was quantized from (the base's)
    for the forward matmul and again for the input's gradient; 0 for an unquantized base.
    """
    if not lora.quantized:
        return 0.0
    h, q, kv = m.hidden_size, m.q_size, m.kv_size
    f = m.moe.expert_ffn_size if m.moe else m.ffn_size
    widest = max(h * f, h * q, h * (q + 2 * kv) if m.fused_qkv else 0)
    return widest * (lora.frozen_bytes(r.act_bytes) + 4 / 64)


def lora_norm_saves_input(m: ModelSpec, r: PrecisionRecipe, lora: LoraSpec) -> bool:
    """Whether a frozen norm saves its input tensor itself (not a copy of it).

    Then under full recompute the recomputed layer's first norm saves the checkpoint's
    input, which is counted once.
    """
    fd = lora.frozen_bytes(r.act_bytes)
    if m.norm == 'layernorm':
        return not r.autocast or fd == 4
    return fd == 4


def lora_first_layer_delta(m: ModelSpec, r: PrecisionRecipe, lora: LoraSpec, attention: str,
                           recompute: str) -> LayerTerms:
    """What the first stage saves less when the embedding output does not require grad.

    Without gradient checkpointing nothing calls ``enable_input_require_grads``, so the
    bottom layer records nothing before its first adapter (its first norm, for one) and
    the embedding dropout keeps no mask. With checkpointing PEFT and TRL call it (the
    checkpointed layers need an input that requires grad), and every layer is alike.
    """
    if recompute == 'full':
        return LayerTerms(0.0, 0.0, 0.0, 0.0, 0.0)
    delta = hf_lora_layer_terms(m, r, lora, attention, recompute, input_grad=False).minus(
        hf_lora_layer_terms(m, r, lora, attention, recompute))
    mask = _dropout(m.hidden_dropout) * MASK_BYTES
    return LayerTerms(delta.hidden - mask, delta.sharded, delta.score, delta.per_head_token,
                      delta.per_token)


@dataclass(frozen=True)
class EdgeBytes:
    """Activations outside the layers, per micro-batch, on the first and last stage.

    Attributes:
        first_stage: input ids, embedding dropout mask, rotary tables.
        last_stage_saved: final norm tensors and the saved loss input, kept from the
            end of forward to the start of backward.
        loss_forward_peak: extra bytes live while the loss is computed.
        loss_backward_peak: extra bytes live while the loss's backward runs.
        norm_backward_peak: LoRA only: bytes live at the final norm's backward beyond
            the layers' activations.
    """

    first_stage: np.ndarray
    last_stage_saved: np.ndarray
    loss_forward_peak: np.ndarray
    loss_backward_peak: np.ndarray
    # Under LoRA: what the final norm's backward holds beside the layers' activations
    # (its saved tensors and its temporaries); 0 where not modelled as a moment of its own.
    norm_backward_peak: np.ndarray = field(default_factory=lambda: np.zeros(()))


def edge_bytes(m: ModelSpec, r: PrecisionRecipe, loss: str, b: np.ndarray, s: np.ndarray,
               t: np.ndarray, c: np.ndarray, sp: np.ndarray,
               lora: LoraSpec | None = None) -> EdgeBytes:
    """Embedding-side and loss-side activations (the logits and the cross-entropy's
    buffers; Megatron-LM megatron/training/theoretical_memory_usage.py for the fused loss).

    Under LoRA the head is frozen, so its input is not saved, and the final norm keeps
    only what a frozen norm keeps (see :func:`hf_lora_layer_terms`).
    """
    tokens = b * s / c
    h, v = m.hidden_size, m.vocab_size
    res, e = r.residual_bytes, r.act_bytes
    if lora is not None:
        res = lora.frozen_bytes(r.act_bytes)
        e = r.act_bytes if r.autocast else res
    hidden_div = np.where(sp & (t > 1), t, 1)
    first = 8.0 * tokens  # int64 input ids
    first = first + _dropout(m.hidden_dropout) * MASK_BYTES * tokens * h / hidden_div
    if m.position_embedding == 'rotary':
        # cos and sin tables, one per position, broadcast over the batch
        first = first + 2 * s / c * m.head_dim * res
    norm_bwd = 0.0
    if lora is None:
        final_norm = tokens * h / hidden_div * norm_saved_bytes(m, r)
        head_input = tokens * h / hidden_div * (e if r.autocast else res)
    else:
        layernorm = m.norm == 'layernorm'
        per_elem = (4.0 if r.autocast else res) if layernorm else 4.0
        final_norm = tokens * h / hidden_div * per_elem + tokens * (8.0 if layernorm else 4.0)
        head_input = 0.0
        # The final norm's backward, once the loss and the head are done: HF RMSNorm's
        # Python ops differentiate in fp32, five input-sized temporaries at their widest;
        # LayerNorm's kernel writes the input's gradient (fp32 under autocast) and its cast.
        temps = (4.0 + res if r.autocast else 2 * res) if layernorm else 20.0
        norm_bwd = final_norm + temps * tokens * h / hidden_div
    labels = 3 * 8.0 * tokens  # int64 labels, and the shifted copy the loss keeps
    if m.final_logit_softcap:
        # Gemma-2: logits = cap·tanh(logits / cap); tanh saves its output (the logits' size)
        labels = labels + e * tokens * v / t
    if loss == 'chunked':
        # Liger's fused linear cross-entropy (linkedin/Liger-Kernel,
        # src/liger_kernel/ops/fused_linear_cross_entropy.py): the head and the loss run
        # chunk by chunk in forward, ceil(BT / ceil(V / h)) rows (rounded up to a power
        # of two: up to about 2·tokens·h logits) at a time, the gradients written then:
        # the head input's (kept to backward) and the head weight's (weight-sized, in the
        # weight's dtype, kept to backward). No b·s·V tensor exists. From the source; not
        # measured here (its kernels need a GPU).
        saved = (final_norm + head_input + labels + e * tokens * h / hidden_div
                 + r.weight_bytes * v * h / t)
        fwd_peak = 2 * 4.0 * tokens * h / hidden_div  # one chunk's logits, upcast in-kernel
        bwd_peak = 0.0 * tokens  # the saved gradients are scaled in place
    elif loss == 'megatron':
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
                     loss_backward_peak=np.asarray(bwd_peak, float),
                     norm_backward_peak=np.asarray(norm_bwd, float))
