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

from planner.memory.activations import LayerTerms, layer_terms
from planner.memory.recipes import PrecisionRecipe
from planner.memory.training import LoraSpec
from planner.models.spec import ModelSpec
from planner.stacks import Stack

# fp32 log-sum-exp per head and token kept by the fused attention kernels
LSE_BYTES = 4.0


def stack_layer_terms(stack: Stack, m: ModelSpec, r: PrecisionRecipe, attention: str,
                      recompute: str, lora: LoraSpec | None = None) -> LayerTerms:
    """One layer's saved bytes as ``stack`` runs it under ``recompute``."""
    if stack.key == 'torchtitan' and recompute == 'selective':
        return torchtitan_op_sac_terms(m, r)
    return layer_terms(m, r, attention, recompute, stack.kernels, lora)


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
