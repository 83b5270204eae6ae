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

from planner.memory.activations import EdgeBytes, LayerTerms, layer_terms
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
        return torchtitan_op_sac_terms(m, r)
    terms = layer_terms(m, r, attention, recompute, stack.kernels, lora)
    if stack.key == 'torchtitan' and recompute == 'none' and lora is None:
        return torchtitan_norm_terms(m, r, terms)
    return terms


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
    if (r.autocast or m.norm != 'rmsnorm' or m.norm_fp32 or m.parallel_residual
            or m.norms_per_layer != 2):
        return terms
    res = float(r.residual_bytes)
    fp32_normalised = 2 * (4.0 - res)
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
    """
    e, q, kv, h = r.act_bytes, m.q_size, m.kv_size, m.hidden_size
    f = m.moe.top_k * m.moe.expert_ffn_size if m.moe else m.ffn_size
    # (output elements per token, sharded by TP)
    mms: list[tuple[float, bool]] = (
        [(q + 2 * kv, True)] if m.fused_qkv else [(q, True), (kv, True), (kv, True)])
    mms.append((h, False))
    mms += [(f, True), (f, True), (h, False)] if m.gated_mlp else [(f, True), (h, False)]
    saved = mms[0::2]
    sharded = e * q + sum(e * width for width, split in saved if split)  # + SDPA output
    per_token = sum(e * width for width, split in saved if not split)
    return LayerTerms(hidden=float(r.residual_bytes), sharded=float(sharded), score=0.0,
                      per_head_token=LSE_BYTES, per_token=float(per_token))


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
