"""Model states on one GPU: weights, gradients, optimizer states and their buffers.

Parameters are first split by tensor, pipeline and expert parallelism (what one
rank owns), then ZeRO shards them over the data-parallel ranks (Rajbhandari et al.
2020, Figure 1): ZeRO-1 the optimizer states, ZeRO-2 also the gradients, ZeRO-3 also the weights.
Functions take numpy arrays for the parallel sizes and return bytes per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.memory.recipes import (
    ADAM8BIT_BLOCK,
    OptimizerKind,
    PrecisionRecipe,
    main_grad_copy_bytes,
)
from planner.memory.training import LoraSpec
from planner.models.spec import ModelSpec
from planner.stacks import STACKS

OFFLOAD_CODES = {'none': 0, 'optimizer': 1, 'params': 2}
# DeepSpeed buckets as Hugging Face's "auto" sizes them: h² elements each.
ZERO_BUCKET_ELEMENTS_PER_H2 = 1.0


@dataclass(frozen=True)
class StageParams:
    """Parameters one rank of a pipeline stage owns, in elements (arrays).

    ``dense`` is sharded by ZeRO over dp·cp, ``expert`` over dp·cp/ep.
    ``matmul`` is the part that autocast casts (weights of linear layers).
    ``trainable`` excludes a frozen base under LoRA.
    """

    dense: np.ndarray
    expert: np.ndarray
    matmul: np.ndarray
    trainable_dense: np.ndarray
    trainable_expert: np.ndarray
    top_unit: np.ndarray  # what ZeRO-3 gathers at the top of the stage: head or a layer
    bottom_unit: np.ndarray  # ... at its bottom, at the end of backward: embedding or layer
    layer: np.ndarray  # one transformer layer, the unit prefetched next
    layers: np.ndarray  # transformer layers on this stage
    layer_matmul: np.ndarray  # matmul weights of one layer (what autocast casts)
    head_matmul: np.ndarray  # the output head on this rank (0 off the last stage)
    embedding: np.ndarray  # input embedding whose gradient comes last in backward
    layer_out_proj: np.ndarray  # one layer's MLP output projection
    # LoRA adapter elements of one layer, and of its MLP output projection (0 without)
    layer_adapters: np.ndarray = field(default_factory=lambda: np.zeros(()))
    layer_out_adapter: np.ndarray = field(default_factory=lambda: np.zeros(()))


def _attention_split(m: ModelSpec) -> tuple[int, int]:
    """(TP-sharded, replicated) elements of one layer's attention block and norms."""
    h, q, kv = m.hidden_size, m.q_size, m.kv_size
    attn_sharded = 2 * h * q + 2 * h * kv + ((q + 2 * kv) if m.qkv_bias else 0)
    replicated = m.norms_per_layer * m.norm_params() + (h if m.attn_out_bias else 0)
    replicated += 2 * m.head_dim if m.qk_norm else 0
    return attn_sharded, replicated


def _mlp_split(m: ModelSpec, f: int) -> tuple[int, int]:
    """(TP-sharded, replicated) elements of one dense MLP of width f."""
    h = m.hidden_size
    n_in = 2 if m.gated_mlp else 1
    sharded = (n_in + 1) * h * f + (n_in * f if m.mlp_bias else 0)
    return sharded, (h if m.mlp_bias else 0)


def lora_params(m: ModelSpec, lora: LoraSpec) -> int:
    """Adapter elements over all layers: r·(in + out) per adapted projection.

    A fused qkv (or gate_up) projection gets one adapter (see ``LoraSpec.adapted``).
    """
    per_layer = sum(lora.rank * (fan_in + fan_out)
                    for fan_in, fan_out in lora.adapted(m).values())
    return m.num_layers * per_layer


# bitsandbytes NF4 (``Params4bit``, blocksize 64, ``compress_statistics`` = double
# quantization as QLoRA recipes set it): two weights a byte, one uint8 absmax code per
# 64 weights and one fp32 absmax per 256 codes, 0.127 bits a weight; without double
# quantization (transformers' default) the absmax is fp32: 0.5 bits a weight.
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
# LLM.int8: one byte a weight (its per-row fp32 scales are not counted).
INT8_BYTES = 1.0


def hf_uncast_expert_matmul(m: ModelSpec, t, ep) -> float:
    """Routed-expert weights of one layer that autocast does not cast in transformers.

    transformers 5 runs the experts through ``grouped_mm`` (or its fallback), which is not
    autocast-enabled: their input is cast to the weights' dtype instead
    (``transformers/integrations/moe.py::_grouped_mm``), so no bf16 weight copy exists.
    """
    if m.moe is None:
        return 0.0
    e_sh, _ = _mlp_split(m, m.moe.expert_ffn_size)
    return m.moe.num_experts / ep * e_sh / t


def expert_tp(t, etp):
    """The expert-tensor-parallel size: ``etp``, or the TP size where it is 0."""
    return np.where(np.asarray(etp) == 0, t, etp)


def stage_params(m: ModelSpec, t, pp, ep, stage: str, lora: LoraSpec | None,
                 etp=0) -> StageParams:
    """Elements owned by one rank of the first or last pipeline stage.

    Experts are split over ``ep`` ranks and each expert over ``etp`` (0: the TP size,
    Megatron's default ``--expert-tensor-parallel-size``).

    The most loaded stage has ceil(L/pp) layers. The first stage adds the input
    embedding, the last the final norm and the output head; with pp == 1 both are
    the same rank. Tied embeddings need a copy of the embedding on the last stage
    when it differs from the first (Megatron does the same).
    """
    pp = np.asarray(pp)
    f_out = m.moe.top_k * m.moe.expert_ffn_size if m.moe else m.ffn_size
    layers = np.ceil(m.num_layers / pp)
    moe_layers = np.minimum(layers, m.moe_layers)
    dense_layers = layers - moe_layers
    attn_sh, attn_rep = _attention_split(m)
    mlp_sh, mlp_rep = _mlp_split(m, m.ffn_size)
    dense = dense_layers * ((attn_sh + mlp_sh) / t + attn_rep + mlp_rep)
    attn_matmul = 2 * m.hidden_size * (m.q_size + m.kv_size) / t
    matmul_per_layer = attn_matmul + (3 if m.gated_mlp else 2) * m.hidden_size * m.ffn_size / t
    matmul = dense_layers * matmul_per_layer
    expert = np.zeros_like(dense)
    if m.moe is not None:
        e_sh, e_rep = _mlp_split(m, m.moe.expert_ffn_size)
        s_sh, s_rep = _mlp_split(m, m.moe.shared_ffn_size or m.moe.expert_ffn_size)
        shared = m.moe.shared_experts * (s_sh / t + s_rep)
        router = m.hidden_size * m.moe.num_experts
        dense = dense + moe_layers * (attn_sh / t + attn_rep + shared + router)
        et = expert_tp(t, etp)
        expert = moe_layers * m.moe.num_experts / ep * (e_sh / et + e_rep)
        moe_matmul = attn_matmul + m.moe.num_experts / ep * e_sh / et + shared
        matmul = matmul + moe_layers * moe_matmul
        matmul_per_layer = np.maximum(matmul_per_layer, moe_matmul)
    vocab = m.vocab_size * m.hidden_size / t
    positions = m.max_position_embeddings * m.hidden_size if m.position_embedding == 'learned' \
        else 0
    first = stage == 'first'
    last = (stage == 'last') | (pp == 1)
    # The head's weight is the embedding when tied and on the same rank.
    head = np.where(m.tied_embeddings & (pp == 1), 0.0, vocab)
    embed_part = np.where(first | (pp == 1), vocab + positions, 0.0)
    head_part = np.where(last, head + m.norm_params(), 0.0)
    dense = dense + embed_part + head_part
    head_matmul = np.where(last, vocab, 0.0)  # the head is a matmul, tied or not
    matmul = matmul + head_matmul
    # A tied embedding's gradient starts with the head's, at the top of backward.
    embedding = np.where(first | (pp == 1), positions + np.where(
        m.tied_embeddings & (pp == 1), 0.0, vocab), 0.0)
    if lora is None:
        trainable_dense, trainable_expert = dense, expert
        layer_adapters = layer_out_adapter = np.zeros(())
    else:
        layer_adapters = lora_params(m, lora) / m.num_layers / t
        down = lora.adapted(m).get('down')
        layer_out_adapter = np.asarray(lora.rank * sum(down) / t if down else 0.0)
        trainable_dense, trainable_expert = layer_adapters * layers, np.zeros_like(expert)
    per_layer = (attn_sh + mlp_sh) / t + attn_rep + mlp_rep
    if m.moe is not None:
        per_layer = np.maximum(per_layer, attn_sh / t + attn_rep
                               + m.moe.num_experts / ep * (e_sh / t + e_rep) + shared + router)
    top_unit = np.maximum(per_layer, head_part)
    bottom_unit = np.maximum(per_layer, embed_part)
    return StageParams(dense=np.asarray(dense, float), expert=np.asarray(expert, float),
                       matmul=np.asarray(matmul, float),
                       trainable_dense=np.asarray(trainable_dense, float),
                       trainable_expert=np.asarray(trainable_expert, float),
                       top_unit=np.asarray(top_unit, float),
                       bottom_unit=np.asarray(bottom_unit, float),
                       layer=np.asarray(per_layer, float), layers=np.asarray(layers, float),
                       layer_matmul=np.asarray(matmul_per_layer, float),
                       head_matmul=np.asarray(head_matmul, float),
                       embedding=np.asarray(embedding, float),
                       layer_out_proj=np.asarray(m.hidden_size * f_out / t, float),
                       layer_adapters=np.asarray(layer_adapters, float),
                       layer_out_adapter=np.asarray(layer_out_adapter, float))


def _optimizer_bytes_per_param(opt: OptimizerKind, r: PrecisionRecipe) -> float:
    """Master copy + states per trainable element (8-bit block scales included)."""
    if opt.state_bytes_override:
        state = opt.state_bytes_override + 4.0 / ADAM8BIT_BLOCK
    else:
        state = r.state_bytes
    return r.master_bytes + opt.states * state


@dataclass(frozen=True)
class ModelStateBytes:
    """Bytes per GPU of the persistent and step-time model states (arrays)."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer_states: np.ndarray
    optimizer_step_temp: np.ndarray
    ddp_buckets: np.ndarray
    zero_buckets: np.ndarray
    zero3_gathered_top: np.ndarray  # gathered weights at the top (forward end, backward start)
    zero3_gathered_bottom: np.ndarray  # and at the bottom (end of backward)
    unsharded_grad_top: np.ndarray  # ZeRO-2/3: the unit's gradient before reduce-scatter
    unsharded_grad_bottom: np.ndarray
    embedding_gradients: np.ndarray
    bottom_layer_gradients: np.ndarray  # one layer's, but its MLP output projection
    head_gradients: np.ndarray  # written first in backward
    # LoRA: the bottom layer's output-projection adapter, whose gradient comes after its
    # recomputation under full recompute
    bottom_out_proj_gradients: np.ndarray = field(default_factory=lambda: np.zeros(()))
    # FSDP2 without reshard after forward (ZeRO-2, or any stage under torchtitan's PP):
    # the whole stage's parameters stay gathered from forward to backward
    resident_params: np.ndarray = field(default_factory=lambda: np.zeros(()))
    # the same parameters stay gathered after backward too (pipelining: no reshard until
    # the last micro-batch)
    resident_after_backward: np.ndarray = field(default_factory=lambda: np.zeros(()))
    # one full-size gradient (unsharded): what FSDP2 accumulates across micro-batches
    unsharded_gradients: np.ndarray = field(default_factory=lambda: np.zeros(()))


def model_state_bytes(m: ModelSpec, r: PrecisionRecipe, opt: OptimizerKind, *,
                      params: StageParams, dp, cp, ep, zero, offload, framework: str,
                      foreach: bool, lora: LoraSpec | None,
                      prefetch_layers: int, tp=1, etp=0, replicate=1) -> ModelStateBytes:
    """Weights, gradients and optimizer states of one rank after ZeRO sharding.

    ``replicate`` > 1 is HSDP: FSDP shards over dp x cp / replicate ranks and keeps
    ``replicate`` copies of that shard group (torch fully_shard on a 2-D mesh).
    """
    # Megatron and FSDP shard over dp x cp (HSDP: over one replica's shard group)
    shard = np.asarray(dp * cp, float) / np.asarray(replicate, float)
    # Experts: the expert-data-parallel group, tp x cp x dp / (ep x etp) ranks
    # (megatron/core/parallel_state.py ``initialize_model_parallel``): dp x cp / ep when
    # each expert is split over the TP ranks, Megatron's default.
    shard_e = np.maximum(shard * tp / (np.asarray(ep) * expert_tp(tp, etp)), 1.0)
    zero = np.asarray(zero)
    offload = np.asarray(offload)

    def sharded(dense, expert, on):
        return np.where(on, dense / shard + expert / shard_e, dense + expert)

    stack = STACKS[framework]
    if lora is not None:
        return _lora_state_bytes(m, r, opt, lora, params=params, shard=shard, zero=zero,
                                 offload=offload, framework=framework, foreach=foreach,
                                 prefetch_layers=prefetch_layers)
    weights = r.weight_bytes * sharded(params.dense, params.expert, zero == 3)
    weights = weights + r.fp8_weight_bytes * params.matmul
    weights = np.where(offload == 2, 0.0, weights)

    train_d, train_e = params.trainable_dense, params.trainable_expert
    gradients = r.grad_bytes * sharded(train_d, train_e, zero >= 2)
    # Offloading the optimizer moves the gradient partition to the CPU too (ZeRO-Offload).
    gradients = np.where((offload >= 1) & (zero >= 2), 0.0, gradients)
    per_param = _optimizer_bytes_per_param(opt, r)
    if opt.factored:
        per_param = r.master_bytes + 4.0 * _factored_fraction(m)
    opt_states = per_param * sharded(train_d, train_e, zero >= 1)
    opt_states = np.where(offload >= 1, 0.0, opt_states)

    temp_elems = sharded(train_d, train_e, zero >= 1)
    if foreach and not r.fused_optimizer and opt.foreach_temp_states:
        temp = opt.foreach_temp_states * r.state_bytes * temp_elems
    else:
        temp = np.zeros_like(temp_elems)
    # Megatron's optimizer copies a bf16/fp16 main grad to fp32 for its shard at the step
    temp = temp + main_grad_copy_bytes(r, stack.persistent_grad_buffer) * temp_elems
    temp = np.where(offload >= 1, 0.0, temp)

    multi = shard > 1
    train_total = train_d + train_e
    ddp = np.where(multi & (zero == 0) & stack.ddp_buckets, r.grad_bytes * train_total, 0.0)
    bucket = ZERO_BUCKET_ELEMENTS_PER_H2 * m.hidden_size ** 2
    zero_b = np.where(multi & (zero >= 1) & (stack.zero_buckets and not r.fsdp),
                      np.minimum(bucket, train_total) * (r.grad_bytes + r.weight_bytes), 0.0)
    # DeepSpeed's BF16_Optimizer (ZeRO 0-1) accumulates into a full-size fp32 buffer.
    zero_b = zero_b + np.where(zero <= 1, r.accum_buffer_bytes * train_total, 0.0)
    # ZeRO-3 gathers the unit in use (the head at the top of the last stage, the embedding
    # at the bottom of the first, else a layer) while the next layers are prefetched, in
    # the gather dtype (FSDP2: MixedPrecisionPolicy.param_dtype).
    # ZeRO-2 and 3 produce each unit's gradient whole, in the weights' dtype, before it is
    # reduce-scattered into the shard (DeepSpeed's 4 x largest layer in fp16: 2 + 2).
    def gathered(unit, prefetch, stages):
        on = (zero >= min(stages)) & multi
        unit_bytes = r.gathered_bytes if min(stages) == 3 else r.weight_bytes
        return np.where(on, (unit + prefetch * params.layer) * unit_bytes, 0.0)

    # FSDP2 keeps the stage gathered from forward to backward with ZeRO-2 (reshard never)
    # and, in torchtitan, under PP for every stage (``reshard_after_forward = not
    # pp_enabled``; torch/distributed/pipelining/stage.py skips the reshard after backward
    # until the last micro-batch).
    under_pp = np.asarray(params.layers) < m.num_layers
    pipelined = stack.fsdp_unsharded_accumulation == 'pipeline'
    no_reshard = r.fsdp & multi & (zero >= 2) & ((zero == 2) | (under_pp & pipelined))
    resident = np.where(no_reshard, r.gathered_bytes * (params.dense + params.expert), 0.0)
    resident_bwd = np.where(under_pp & pipelined, resident, 0.0)
    def grad_bytes(elements):
        return np.where(zero >= 2, elements / shard, elements) * r.grad_bytes

    embedding_grads = grad_bytes(params.embedding)
    bottom_layer = grad_bytes(np.maximum(params.layer - params.layer_out_proj, 0.0))
    return ModelStateBytes(weights=weights, gradients=gradients, optimizer_states=opt_states,
                           optimizer_step_temp=temp, ddp_buckets=ddp, zero_buckets=zero_b,
                           # a stage kept gathered holds its units already: no unit and
                           # prefetch window on top of it
                           zero3_gathered_top=np.where(
                               no_reshard, 0.0, gathered(params.top_unit, prefetch_layers, (3,))),
                           zero3_gathered_bottom=np.where(
                               no_reshard, 0.0, gathered(params.bottom_unit, 0, (3,))),
                           # the top unit's gradient is written whole at every stage: later
                           # reduce-scattered (ZeRO-2/3) or kept (DDP, ZeRO-1)
                           unsharded_grad_top=gathered(params.top_unit, 0, (0,)),
                           unsharded_grad_bottom=gathered(params.bottom_unit, 0, (2, 3)),
                           embedding_gradients=np.asarray(embedding_grads, float),
                           bottom_layer_gradients=np.asarray(bottom_layer, float),
                           head_gradients=np.asarray(grad_bytes(params.head_matmul), float),
                           resident_params=np.asarray(resident, float),
                           resident_after_backward=np.asarray(resident_bwd, float),
                           unsharded_gradients=np.asarray(
                               np.where(r.fsdp & multi & (zero >= 2),
                                        r.grad_bytes * train_total, 0.0), float))


# PEFT keeps the adapters in fp32 (``autocast_adapter_dtype=True``) whatever the base's
# dtype, so their gradients and optimizer states are fp32 too, with no master copy.
ADAPTER_BYTES = 4


def lora_base_bytes_per_param(r: PrecisionRecipe, lora: LoraSpec) -> float:
    """Stored bytes per element of the decoder layers' frozen projections.

    NF4 with its block statistics for a 4-bit base, one byte for LLM.int8, else the
    base's dtype (:meth:`LoraSpec.frozen_bytes`).
    """
    return {4: NF4_BYTES, 8: INT8_BYTES}.get(lora.base_bits, lora.frozen_bytes(r.act_bytes))


def lora_weight_bytes(params: StageParams, r: PrecisionRecipe, lora: LoraSpec) -> np.ndarray:
    """One rank's weights under LoRA before ZeRO-3 shards them, in bytes.

    The layers' projections at :func:`lora_base_bytes_per_param`, the rest of the base
    (embeddings, norms, head, biases) in :meth:`LoraSpec.frozen_bytes`, the adapters in
    fp32. It is also what ZeRO-3 gathers of a stage, so the step-time model reads it
    from here.
    """
    quantizable = params.matmul - params.head_matmul  # the layers' projections
    rest = params.dense + params.expert - quantizable
    return (lora_base_bytes_per_param(r, lora) * quantizable
            + lora.frozen_bytes(r.act_bytes) * rest + ADAPTER_BYTES * params.trainable_dense)


def _lora_state_bytes(m: ModelSpec, r: PrecisionRecipe, opt: OptimizerKind,
                      lora: LoraSpec, *, params: StageParams, shard, zero, offload,
                      framework: str, foreach: bool, prefetch_layers: int) -> ModelStateBytes:
    """Model states under LoRA: a frozen base, fp32 adapters the only trainable part.

    The decoder layers' projections are stored at ``lora.base_bits`` (NF4 with its
    block statistics for QLoRA); everything else of the base (embeddings, norms, head,
    biases) unquantized in ``lora.frozen_bytes``: bitsandbytes leaves the head alone.
    Gradients, optimizer states, the foreach step's temporaries and the DDP/ZeRO buckets
    cover the adapters only, in fp32.
    """
    fd = lora.frozen_bytes(r.act_bytes)
    weights = lora_weight_bytes(params, r, lora)
    weights = np.where(zero == 3, weights / shard, weights)
    weights = np.where(offload == 2, 0.0, weights)

    train = params.trainable_dense + params.trainable_expert
    on = lambda stage: np.where(zero >= stage, train / shard, train)  # noqa: E731
    gradients = ADAPTER_BYTES * on(2)
    gradients = np.where((offload >= 1) & (zero >= 2), 0.0, gradients)
    if opt.factored:
        per_param = 4.0 * _lora_factored_fraction(m, lora)
    elif opt.state_bytes_override:
        per_param = opt.states * (opt.state_bytes_override + 4.0 / ADAM8BIT_BLOCK)
    else:
        per_param = opt.states * ADAPTER_BYTES
    opt_states = np.where(offload >= 1, 0.0, per_param * on(1))
    if foreach and opt.foreach_temp_states:
        temp = opt.foreach_temp_states * ADAPTER_BYTES * on(1)
    else:
        temp = np.zeros_like(on(1))
    temp = np.where(offload >= 1, 0.0, temp)

    multi = shard > 1
    hf = STACKS[framework].kernels == 'hf'
    ddp = np.where(multi & (zero == 0) & hf, ADAPTER_BYTES * train, 0.0)
    bucket = ZERO_BUCKET_ELEMENTS_PER_H2 * m.hidden_size ** 2
    zero_b = np.where(multi & (zero >= 1) & hf,
                      np.minimum(bucket, train) * 2 * ADAPTER_BYTES, 0.0)

    def gathered(unit, prefetch):
        # ZeRO-3 gathers the frozen base unit by unit (at the base's bytes)
        return np.where((zero >= 3) & multi, (unit + prefetch * params.layer) * fd, 0.0)

    unsharded = np.where((zero >= 2) & multi, ADAPTER_BYTES * params.layer_adapters, 0.0)
    nothing = np.zeros_like(np.asarray(weights, float))
    # At the bottom layer's MLP backward its adapters' gradients are still to come, but
    # the output projection's (the only ones written before).
    down = params.layer_out_adapter
    bottom_layer = ADAPTER_BYTES * np.where(zero >= 2, (params.layer_adapters - down) / shard,
                                            params.layer_adapters - down)
    bottom_down = ADAPTER_BYTES * np.where(zero >= 2, down / shard, down)
    return ModelStateBytes(weights=weights, gradients=gradients, optimizer_states=opt_states,
                           optimizer_step_temp=temp, ddp_buckets=ddp, zero_buckets=zero_b,
                           zero3_gathered_top=gathered(params.top_unit, prefetch_layers),
                           zero3_gathered_bottom=gathered(params.bottom_unit, 0),
                           unsharded_grad_top=unsharded, unsharded_grad_bottom=unsharded,
                           embedding_gradients=nothing,
                           bottom_layer_gradients=np.asarray(bottom_layer + nothing, float),
                           head_gradients=nothing,
                           bottom_out_proj_gradients=np.asarray(bottom_down + nothing, float))


def _lora_factored_fraction(m: ModelSpec, lora: LoraSpec) -> float:
    """Adafactor state elements per adapter element: rows + columns of each matrix."""
    rank = lora.rank
    shapes = lora.adapted(m).values()
    stats = sum((rank + fan_in) + (fan_out + rank) for fan_in, fan_out in shapes)
    return stats / max(sum(rank * (fan_in + fan_out) for fan_in, fan_out in shapes), 1)


def _factored_fraction(m: ModelSpec) -> float:
    """Adafactor state elements per parameter: rows + cols per matrix, full vectors."""
    h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.ffn_size
    mats = [(h, q), (h, kv), (h, kv), (q, h)] + [(h, f)] * (3 if m.gated_mlp else 2)
    stats = sum(a + b for a, b in mats) + m.norms_per_layer * m.norm_params()
    per_layer = m.layer_params()
    emb = m.vocab_size + m.hidden_size
    return (m.num_layers * stats + emb * (1 if m.tied_embeddings else 2)) / \
        (m.num_layers * per_layer + m.embedding_params() + m.head_params())
