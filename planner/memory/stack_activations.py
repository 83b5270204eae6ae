"""What each stack's layers save for backward, where it differs from its kernels' inventory.

Every stack saves what its kernels save (``planner.memory.activations``: Hugging Face
modules under PyTorch autograd, or Megatron's fused kernels), except where its recompute
vocabulary means something else:

* torchtitan ``selective`` is op-level selective activation checkpointing: inside each
  checkpointed layer the outputs of the ops in its save list are kept (matmuls,
  scaled-dot-product attention, reduce-scatters, max), every second matmul is recomputed,
  and everything else (norms, activations, elementwise ops) is rebuilt in backward
  (pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py
  ``_get_custom_policy``; torchtitan/models/llama3/infra/parallelize.py
  ``_op_sac_save_list``). Megatron's ``selective`` (core attention) is the kernels' own.
* HF, DeepSpeed: whole-layer checkpointing only (``full``), as their kernels count it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.memory.activations import EdgeBytes, LayerTerms, hf_moe_terms, layer_terms
from planner.memory.recipes import PrecisionRecipe
from planner.memory.training import LoraSpec
from planner.models.spec import ModelSpec
from planner.stacks import Stack

# fp32 log-sum-exp per head and token kept by the fused attention kernels
LSE_BYTES = 4.0


def stack_layer_terms(stack: Stack, m: ModelSpec, r: PrecisionRecipe, attention: str,
                      recompute: str, lora: LoraSpec | None = None,
                      partition_activations: bool = False) -> LayerTerms:
    """One layer's saved bytes as ``stack`` runs it under ``recompute``.

    ``partition_activations`` (DeepSpeed's activation checkpointing option): a fully
    recomputed layer keeps its input split over the TP ranks, whatever sequence
    parallelism says (deepspeed/runtime/activation_checkpointing/checkpointing.py
    ``partition_activations``).
    """
    if partition_activations and recompute == 'full':
        full = layer_terms(m, r, attention, recompute, stack.kernels, lora)
        return replace(full, hidden=0.0, sharded=full.sharded + full.hidden * m.hidden_size)
    if stack.key == 'torchtitan' and recompute == 'selective':
        terms = torchtitan_op_sac_terms(m, r)
        if m.moe is not None and m.moe.first_dense_layers:
            terms = terms.at_least(torchtitan_op_sac_terms(replace(m, moe=None), r))
        return terms
    terms = layer_terms(m, r, attention, recompute, stack.kernels, lora)
    if stack.key == 'torchtitan' and recompute == 'none' and lora is None:
        if m.moe is not None:
            # torchtitan's own MoE block in place of transformers' (counted by hf_moe_terms)
            hidden, sharded, per_token = hf_moe_terms(m, r)
            terms = terms.minus(LayerTerms(hidden, sharded, 0.0, 0.0, per_token)).plus(
                torchtitan_moe_block(m, r))
            if m.moe.first_dense_layers:
                dense = layer_terms(replace(m, moe=None), r, attention, recompute,
                                    stack.kernels)
                terms = terms.at_least(dense)
        return torchtitan_norm_terms(m, r, terms)
    return terms


def torchtitan_moe_block(m: ModelSpec, r: PrecisionRecipe) -> LayerTerms:
    """What torchtitan's MoE block keeps beyond its input (the norm output, counted with
    the norms), counted from pytorch/torchtitan 0.2.2 torchtitan/models/moe/moe.py (``MoE``,
    ``TokenChoiceTopKRouter``, ``TokenReorderer``, ``GroupedExperts``), moe/utils.py
    (``indices_padding_wrapper``) and models/gpt_oss/model/moe.py, and measured on the CPU
    by tests/stacks/test_moe_activations.py. Per token (E experts, k routed, f an expert's
    width, h hidden):

    * router (on every token of the rank, all-gathered under TP: ``per_token``): the fp32
      softmax or sigmoid over E (4E), topk's int64 indices (8k), the gathered top-k scores
      and the normaliser ``route_norm`` divides by (4k + 4), and the scaled scores the
      combine multiplies by (4k);
    * routed copies (``routed``): the sort order and the ``// k`` gather index (int64,
      8k each), the int32 padded permutation (4k), the scores sorted for
      ``score_before_experts`` (4k), the experts' input, cast to bf16 for
      ``torch._grouped_mm`` (2kh), and an fp32 copy of it or of the experts' output (4kh):
      ``score_before_experts`` multiplies ``routed_input.to(float32)`` by the scores, else
      ``torch.bmm`` combines with ``routed_output_unsorted.float()``;
    * the experts in bf16 (``sharded``): SwiGLU keeps w1's output, its silu, w3's output
      and the product (4 x 2kf); GPT-OSS's clamped SwiGLU the biased fc1 output (2f wide),
      the clamped gate, its sigmoid, their product, up + 1 and the product (7 x 2kf), and
      its two biases' ``repeat_interleave`` their int64 row indices (16k); shared experts
      a gated MLP in the activations' dtype. Activations that are not bf16 (fp32
      training) are cast by each grouped GEMM anew (w1's and w3's: two bf16 copies), and
      weights that are not bf16 likewise: each layer then keeps a bf16 copy of its local
      experts' weights (``w1.bfloat16()``...);
    * ``expert_pad``: every local expert's group is padded by the alignment (8 rows, 16
      under float8) and the experts run on the padded rows: E/ep x alignment rows of the
      input and the f-wide tensors, and the int32 group offsets.
    """
    moe = m.moe
    assert moe is not None
    e = float(r.act_bytes)
    h, n_exp, k, f = m.hidden_size, moe.num_experts, moe.top_k, moe.expert_ffn_size
    grouped = 2.0  # _run_experts_grouped_mm: x.bfloat16(), weights .bfloat16()
    wide = 7 if m.clamped_glu else 4  # f-wide tensors per routed copy
    copies = 1 if (e == grouped or m.clamped_glu) else 2  # x.bfloat16() per grouped GEMM
    per_token = 4.0 * n_exp + 8 * k + 4 * k + 4 + 4 * k
    row = 4.0 + copies * grouped * h + (16.0 if m.mlp_bias else 0.0)  # per routed copy
    routed = 8.0 * k + 8 * k + 4 * k + row * k + 4.0 * k * h
    sharded = grouped * wide * k * f
    if moe.shared_experts:
        sharded += 4 * e * moe.shared_experts * (moe.shared_ffn_size or f)
    align = 16 if r.float8_linears else 8  # TOKEN_GROUP_ALIGN_SIZE_M
    pad = align * n_exp * (row + grouped * wide * f) + 4 * n_exp
    if r.gathered_bytes != grouped:
        pad += grouped * n_exp * 3 * h * f  # the bf16 copies of w1, w2, w3 (or mlp1, mlp2)
    return LayerTerms(hidden=0.0, sharded=sharded, score=0.0, per_head_token=0.0,
                      per_token=per_token, routed=routed, expert_pad=pad)


def torchtitan_norm_terms(m: ModelSpec, r: PrecisionRecipe, terms: LayerTerms) -> LayerTerms:
    """The two norms of a torchtitan layer, where they differ from transformers' RMSNorm.

    * ``nn.RMSNorm`` runs torch's composite ``rms_norm`` (aten/src/ATen/native/
      layer_norm.cpp ``rms_norm_symint``): the fp32 upcast input times rsqrt, times the
      weight, in fp32, then ``type_as(input)``; the weight's multiply saves the fp32
      normalised tensor, where transformers' ``LlamaRMSNorm`` saves it in the input dtype.
      (Measured on the CPU; a fused CUDA kernel would keep less: this errs high.)
    * Under TP, the norms are ``SequenceParallel`` and ``PrepareModuleInput`` all-gathers
      their output to ``Replicate`` before the column-parallel q/k/v and w1/w3, which save
      that gathered tensor (pytorch/torchtitan torchtitan/models/llama3/infra/parallelize.py
      ``apply_tp``; torch/distributed/tensor/parallel/style.py). Megatron keeps only the
      sequence shard and gathers it again in backward; torchtitan keeps the whole
      sequence, so the norm outputs are not divided by TP: they move to ``per_token``.
    """
    if r.autocast or m.norm != 'rmsnorm' or m.parallel_residual or m.norms_per_layer != 2:
        return terms
    res = float(r.residual_bytes)
    # counted in fp32 already where the model's own norm multiplies in fp32 (GPT-OSS)
    fp32_normalised = 0.0 if m.norm_fp32 else 2 * (4.0 - res)
    gathered = 2 * res  # one norm output per sublayer, shared by the projections reading it
    return LayerTerms(hidden=terms.hidden + fp32_normalised - gathered, sharded=terms.sharded,
                      score=terms.score, per_head_token=terms.per_head_token,
                      per_token=terms.per_token + gathered * m.hidden_size)


def torchtitan_op_sac_terms(m: ModelSpec, r: PrecisionRecipe) -> LayerTerms:
    """torchtitan's op-level SAC: the layer input, the SDPA output and its log-sum-exp,
    and the output of every odd-numbered matmul (1st, 3rd, ...) of the layer.

    Matmuls in forward order: q, k, v projections (one fused qkv matmul where the model
    fuses them), the output projection, then w1 (gate), w3 (up) and w2 (down) of a
    gated MLP (fc1, fc2 of a plain one). Column-parallel outputs are sharded by TP;
    the row-parallel ones (output projection, w2) are whole on each TP rank before their
    reduce(-scatter).

    An MoE layer's experts run ``torch._grouped_mm``, not in the save list: they are
    recomputed, and so is the router's gate (``per_op_sac_force_recompute_mm_shapes_by_fqns``
    defaults to ``["moe.router.gate"]``: torchtitan/config/job_config.py), whose matmul is
    not counted in the alternation; shared experts are three matmuls like a dense MLP's.
    Under EP the save lists of GPT-OSS, DeepSeek-V3 and Llama-4 (not Qwen3's) keep
    ``all_to_all_single``'s outputs: the dispatched and the combined routed copies
    (models/gpt_oss/infra/parallelize.py ``_op_sac_save_list``), 2·k·h per token.
    """
    e, q, kv, h = r.act_bytes, m.q_size, m.kv_size, m.hidden_size
    f = m.ffn_size
    # (output elements per token, sharded by TP)
    mms: list[tuple[float, bool]] = (
        [(q + 2 * kv, True)] if m.fused_qkv else [(q, True), (kv, True), (kv, True)])
    mms.append((h, False))
    routed_a2a = 0.0
    if m.moe is not None:
        if m.moe.shared_experts:
            fs = m.moe.shared_experts * (m.moe.shared_ffn_size or m.moe.expert_ffn_size)
            mms += [(fs, True), (fs, True), (h, False)]
        routed_a2a = 2 * e * m.moe.top_k * h
    else:
        mms += [(f, True), (f, True), (h, False)] if m.gated_mlp else [(f, True), (h, False)]
    saved = mms[0::2]
    sharded = e * q + sum(e * width for width, split in saved if split)  # + SDPA output
    per_token = sum(e * width for width, split in saved if not split)
    return LayerTerms(hidden=float(r.residual_bytes), sharded=float(sharded), score=0.0,
                      per_head_token=LSE_BYTES, per_token=float(per_token),
                      routed_a2a=routed_a2a)


def stack_edge_bytes(stack: Stack, m: ModelSpec, r: PrecisionRecipe, loss: str, edge: EdgeBytes,
                     b: np.ndarray, s: np.ndarray, t: np.ndarray, c: np.ndarray,
                     sp: np.ndarray) -> EdgeBytes:
    """The loss side of ``edge`` as ``stack`` runs it (only torchtitan departs).

    torchtitan, with no autocast, whatever its layers recompute (``apply_ac`` wraps only
    the TransformerBlocks; the final norm, the output head and the loss stay outside:
    pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py ``apply_ac``):

    * the final norm keeps its fp32 normalised tensor, as in :func:`torchtitan_norm_terms`;
    * under TP the output projection is ``ColwiseParallel(input_layouts=Shard(1))``: it
      saves its all-gathered input, the whole sequence (``apply_tp``);
    * loss parallel (on by default under TP): torch's vocab-parallel ``_log_softmax``
      (torch/distributed/tensor/parallel/loss.py) holds the fp32 input, ``x - max`` and
      its ``exp`` (or the result) at once: one fp32 logits shard more than aten's fused
      ``_log_softmax`` beside the bf16 logits. Its backward
      (``_nll_loss_and_log_softmax_backward``) builds ``zeros_like(x)``, ``exp(x)`` and
      their sum beside the saved output: again one fp32 shard more than aten's
      ``nll_loss_backward`` and ``_log_softmax_backward_data``.
    """
    if stack.key != 'torchtitan' or r.autocast or loss != 'hf':
        return edge
    tokens = b * s / c
    h = m.hidden_size
    hidden_div = np.where(sp & (t > 1), t, 1)
    res = float(r.residual_bytes)
    fp32_norm = (4.0 - res) if m.norm == 'rmsnorm' and not m.norm_fp32 else 0.0
    saved = tokens * h / hidden_div * fp32_norm + tokens * h * res * (1 - 1 / hidden_div)
    loss_parallel = np.where(t > 1, 4.0 * tokens * m.vocab_size / t, 0.0)
    return replace(edge, last_stage_saved=np.asarray(edge.last_stage_saved + saved, float),
                   loss_forward_peak=np.asarray(edge.loss_forward_peak + loss_parallel, float),
                   loss_backward_peak=np.asarray(edge.loss_backward_peak + loss_parallel,
                                                 float))
