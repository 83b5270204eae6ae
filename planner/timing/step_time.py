"""Step time, throughput and time-to-train, vectorised over candidate configurations.

One optimizer step of a (TP, PP, CP, DP) layout with gradient accumulation costs
(Narayanan et al. 2021: the pipeline bubble of §2.2, the costs of §3)::

    t_step = t_mb · (m + (p - 1)/v)          # micro-batches through the pipeline, bubble
           + exposed DP communication         # gradient reduction not hidden by backward
           + optimizer update                 # memory-bound: bytes touched / HBM bandwidth

where ``t_mb``, the time of one micro-batch on the busiest pipeline stage, is its
compute (FLOPs / (peak · eta), eta from ``planner.timing.efficiency``) plus the
communication on its critical path: TP collectives, the exposed part of the CP ring
exchange, the pipeline's point-to-point sends, and ZeRO-2/3 traffic that repeats per
micro-batch. Collectives use the ring model (2(n-1)/n · S / B_bus for an all-reduce)
over the slowest link the group spans. Every formula, default and source is in
``docs/time-model.md``.

With a :class:`~planner.memory.training.LoraSpec` the base is frozen (PEFT): no weight-gradient
GEMMs for it, adapters' FLOPs and memory traffic added, DP/ZeRO traffic and the optimizer
step over the adapters only (ZeRO-3 still gathers the whole frozen base), and a 4/8-bit
base dequantized before every use (docs/time-model.md §1.7).

All functions take numpy arrays for the per-candidate axes (:class:`LayoutArrays`)
and return arrays of the broadcast shape; the model, GPU and recipe are scalars.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import numpy as np

from planner.defaults import (
    DEFAULT_ATTENTION,
    DEFAULT_FRAMEWORK,
    DEFAULT_OPTIMIZER,
    DEFAULT_PRECISION,
    RECOMPUTE_MODES,
)
from planner.errors import InputError
from planner.hardware.devices import GpuSpec, LinkSpec
from planner.memory.activations import (
    CORE_RECOMPUTE_SHARE,
    FULL_RECOMPUTE_SHARE,
    by_recompute_code,
)
from planner.memory.model_states import (
    ADAPTER_BYTES,
    expert_tp,
    lora_base_bytes_per_param,
    lora_params,
    lora_weight_bytes,
    stage_params,
)
from planner.memory.recipes import (
    OPTIMIZERS,
    RECIPES,
    OptimizerKind,
    PrecisionRecipe,
    main_grad_copy_bytes,
    with_bf16_main_grads,
)
from planner.memory.training import LoraSpec, resolve_loss
from planner.models.spec import ModelSpec
from planner.stacks import STACKS
from planner.stacks.pipeline_schedule import zero_bubble_fraction
from planner.timing.efficiency import CalibrationProfile, gemm_flops, matmul_efficiency
from planner.timing.stack_speed import compiled_compute_s


@dataclass(frozen=True)
class StepTimeOptions:
    """Tunable constants of the step-time model (documented in docs/time-model.md).

    Attributes:
        intra_node_link_efficiency: achieved NCCL bus bandwidth / the GPU's one-way
            intra-node link bandwidth (nccl-tests reach ~80 % on NVLink without NVLS).
        inter_node_link_efficiency: the same for the inter-node rail (~90 % on IB).
        intra_node_latency_s: per-hop latency of an intra-node collective.
        dp_overlap: fraction of a micro-batch's backward (or forward) that can hide
            DP/ZeRO communication (DDP buckets; the last bucket always waits).
        tp_overlap: fraction of TP collectives hidden behind GEMMs (0: Megatron
            2021-22; TE userbuffers or async TP hide part of it).
        cp_overlap: fraction of the attention core that hides the CP ring exchange.
        pp_overlap: fraction of pipeline sends hidden behind compute.
        hbm_efficiency: achieved / datasheet HBM bandwidth for the optimizer step.
        step_overhead_s: fixed per-step cost (data loading, logging, launch).
        compute_speedup: a micro-batch's compute (GEMMs and memory-bound work) divided
            by this (torch.compile: ``planner.timing.stack_speed.COMPILE_SPEEDUP``).
    """

    intra_node_link_efficiency: float = 0.80
    inter_node_link_efficiency: float = 0.90
    intra_node_latency_s: float = 5e-6
    dp_overlap: float = 0.8
    tp_overlap: float = 0.0
    cp_overlap: float = 1.0
    pp_overlap: float = 0.0
    hbm_efficiency: float = 0.8
    step_overhead_s: float = 0.0
    compute_speedup: float = 1.0


@dataclass
class LayoutArrays:
    """The per-candidate axes of a step (broadcastable numpy arrays).

    ``nodes`` x ``gpus_per_node`` are the GPUs a candidate uses (so
    ``tp * pp * cp * dp == nodes * gpus_per_node``); ranks are ordered TP fastest,
    then CP, DP and PP, as Megatron's default ``tp-cp-ep-dp-pp``. ``recompute`` holds
    codes into :data:`RECOMPUTE_MODES`. ``ep`` is the expert-parallel size and ``etp``
    the expert-tensor-parallel size (0: the TP size, so EP lies inside the ``dp * cp``
    ranks; 1: whole experts, EP folded out of ``tp * dp * cp``); ``mode`` indexes the
    plan search's stack modes (0 outside a search).
    """

    nodes: np.ndarray
    gpus_per_node: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    micro_batch: np.ndarray
    grad_accum: np.ndarray
    zero: np.ndarray
    recompute: np.ndarray
    sequence_parallel: np.ndarray
    ep: np.ndarray = field(default_factory=lambda: np.ones((), int))
    mode: np.ndarray = field(default_factory=lambda: np.zeros((), int))
    etp: np.ndarray = field(default_factory=lambda: np.zeros((), int))  # 0: as TP
    # HSDP: copies of the FSDP shard group (dp x cp / dp_replicate ranks); 1: plain FSDP
    dp_replicate: np.ndarray = field(default_factory=lambda: np.ones((), int))

    def __len__(self) -> int:
        return int(np.size(self.tp))

    def take(self, rows: np.ndarray | slice) -> LayoutArrays:
        """The candidates at ``rows`` (an index array, or a slice: views)."""
        shape = np.shape(self.tp)
        return LayoutArrays(**{f.name: np.broadcast_to(getattr(self, f.name), shape)[rows]
                               for f in fields(self)})

    @staticmethod
    def concatenate(parts: list[LayoutArrays]) -> LayoutArrays:
        """The candidates of several grids, one after the other (flat arrays)."""
        return LayoutArrays(**{f.name: np.concatenate([
            np.broadcast_to(getattr(p, f.name), np.shape(p.tp)) for p in parts])
            for f in fields(LayoutArrays)})


@dataclass
class StepTimeArrays:
    """Seconds per optimizer step, split into parts that add up, and throughput.

    ``compute_s + elementwise_s + bubble_s + tp_comm_s + cp_comm_s + pp_comm_s + dp_comm_s
    + optimizer_s + overhead_s == step_time_s``; the communication parts are the
    *exposed* time. ``dp_traffic_s`` is the unhidden DP/ZeRO traffic time and
    ``dequant_s`` the part of ``elementwise_s`` that dequantizes a QLoRA base (0
    otherwise), both for reference. MFU and HFU follow PaLM (attention counted without
    the causal saving) over the FLOPs the step needs: under LoRA those of a frozen base
    (no weight gradients), not 6N. ``achieved_flops_per_gpu`` is HFU x peak
    (Narayanan's TF/GPU).
    """

    compute_s: np.ndarray
    elementwise_s: np.ndarray
    bubble_s: np.ndarray
    tp_comm_s: np.ndarray
    cp_comm_s: np.ndarray
    pp_comm_s: np.ndarray
    dp_comm_s: np.ndarray
    optimizer_s: np.ndarray
    overhead_s: np.ndarray
    step_time_s: np.ndarray
    dp_traffic_s: np.ndarray
    efficiency: np.ndarray
    gemm_flops: np.ndarray
    gpus: np.ndarray
    tokens_per_step: np.ndarray
    tokens_per_s: np.ndarray
    samples_per_s: np.ndarray
    model_flops_per_step: np.ndarray
    hardware_flops_per_step: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    achieved_flops_per_gpu: np.ndarray
    dequant_s: np.ndarray
    ep_comm_s: np.ndarray = field(default_factory=lambda: np.zeros(()))

    def take(self, rows: np.ndarray) -> StepTimeArrays:
        """The candidates at ``rows`` (flat arrays)."""
        shape = np.shape(self.step_time_s)
        return StepTimeArrays(**{f.name: np.broadcast_to(getattr(self, f.name), shape)[rows]
                                 for f in fields(self)})

    @staticmethod
    def concatenate(parts: list[StepTimeArrays]) -> StepTimeArrays:
        """The step times of several grids, one after the other (flat arrays)."""
        return StepTimeArrays(**{f.name: np.concatenate([
            np.broadcast_to(np.asarray(getattr(p, f.name), float), np.shape(p.step_time_s))
            for p in parts]) for f in fields(StepTimeArrays)})


# Elements read or written per token per layer by memory-bound ops, in units of h
# (forward; backward touches about twice as much) and, for eager attention, of
# heads x sequence (scale-mask-softmax and attention dropout). Rough counts of
# Megatron's fused kernels; see docs/time-model.md.
ELEMENTWISE_FWD_PER_H = 20.0
SOFTMAX_FWD_PER_SCORE = 4.5

# Bytes the cross-entropy moves per logit (forward and backward; never recomputed), by the
# stack's loss (``Stack.loss``), counted from the kernels each one runs on the bf16 logits:
# * ``hf`` (transformers transformers/loss/loss_utils.py ``ForCausalLMLoss``; torchtitan
#   torchtitan/components/loss.py ``cross_entropy_loss``): ``logits.float()`` (read 2,
#   write 4), aten's log-softmax over a row too long for shared memory (max, sum of exp,
#   then write: read 3 x 4, write 4), nll_loss's backward zero-filling a logits-sized
#   gradient (write 4), the log-softmax backward (sum of the gradient, then read it with
#   the output and write: 4 + 8 + 4) and the cast back to bf16 (read 4, write 2): 48.
#   torchtitan's loss parallel (torch/distributed/tensor/parallel/loss.py) runs the same
#   passes on its vocabulary shard.
# * ``megatron`` (NVIDIA/Megatron-LM megatron/core/tensor_parallel/cross_entropy.py, the
#   default: ``cross_entropy_loss_fusion`` is off in model_parallel_config.py): ``.float()``
#   (2 + 4), max (4), in-place subtract, exp and divide (3 x 8), sum (4) forward; the
#   in-place multiply by the output gradient (8) and the cast to bf16 (4 + 2) backward: 52.
# * ``chunked`` (``--loss chunked``: Liger's fused linear cross-entropy, linkedin/Liger-Kernel
#   src/liger_kernel/ops/fused_linear_cross_entropy.py and ops/cross_entropy.py): per chunk
#   of rows, an online-softmax pass over the bf16 logits (read 2), then a second pass that
#   writes the gradient over them (read 2, write 2), both in forward; backward only scales
#   the saved gradients of the head's input and weight: 6.
LOSS_BYTES_PER_LOGIT: dict[str, float] = {'hf': 48.0, 'megatron': 52.0, 'chunked': 6.0}


def _elementwise_bytes_per_token(model: ModelSpec, seq_len: int, attention: str,
                                 act_bytes: int) -> np.ndarray:
    """Memory-bound bytes per token per layer, indexed by recompute code."""
    hidden = ELEMENTWISE_FWD_PER_H * model.hidden_size
    scores = SOFTMAX_FWD_PER_SCORE * model.num_heads * seq_len if attention == 'eager' else 0.0
    fwd = hidden + scores
    # none: fwd + 2x bwd; selective re-runs the softmax; full re-runs the whole forward;
    # half re-runs half the layers' forward.
    return act_bytes * by_recompute_code(3 * fwd, 3 * fwd + scores, 4 * fwd)


# Megatron-Core's grouped experts (NVIDIA/Megatron-LM megatron/core/transformer/moe/
# experts.py ``TEGroupedMLP``, at d7288711, the Megatron-LM of Megatron-Bridge 0.4.x and the
# 26.04 containers, and unchanged at d98e8a6) run two steps of GPT-OSS's expert MLP as
# eager PyTorch ops outside the fused activation kernel, on the routed copies of each token
# (k·f of the fc1 output's halves, k·h of the fc2 output; bytes per element of each, in
# 2-byte elements):
# * the clamp (``activation_func_clamp_value``; megatron/core/fusions/fused_bias_geglu.py
#   ``weighted_bias_quick_geglu_impl``): ``x_glu.clamp(max)`` and ``x_linear.clamp(-c, c)``
#   read and write their half (4 + 4), ``torch.cat`` of the two reads and writes both
#   (8); backward, torch's ``clamp_backward`` (torch/csrc/autograd/FunctionsManual.cpp)
#   is ``where(self <= max, grad, 0)`` (compare: read 2, write a 1-byte mask; where: read
#   1 + 2, write 2: 8) on one half and ``where((self >= min).logical_and_(self <= max),
#   grad, 0)`` (3 + 3 + 3 + 5: 14) on the other, and ``chunk``'s backward concatenates
#   the two gradients (read and write both: 8): 16 forward + 30 backward per k·f element;
# * the fc2 bias (``linear_fc2`` has ``skip_bias_add=True``; ``_apply_bias``): per local
#   expert ``t + b * p`` (write b·p: 2; read t and b·p, write: 6), then ``torch.cat``
#   (read, write: 4); backward, the product's two gradients (grad·p and grad·b, each
#   written and summed to its shape: 6 + 6) and ``split``'s backward concatenating the
#   experts' gradients (4): 12 forward + 16 backward per k·h element.
# The router's probabilities are taken in the activations' 2 bytes (its dtype without
# --moe-router-dtype); fp32 probabilities would make the product fp32 and the bytes more.
# SwiGLU experts without biases (Qwen3, Mixtral, DeepSeek) take the fused path only.
CLAMP_BYTES_FWD, CLAMP_BYTES_BWD = 16.0, 30.0  # per k·f element, 2-byte activations
EXPERT_BIAS_BYTES_FWD, EXPERT_BIAS_BYTES_BWD = 12.0, 16.0  # per k·h element


def megatron_expert_eager_bytes_per_token(model: ModelSpec, act_bytes: int) -> np.ndarray:
    """Bytes per token per layer (averaged over the layers) of Megatron-Core's eager clamp
    and expert-bias ops around its grouped experts, by recompute code; full recompute runs
    their forward again. Zero for a dense model or experts without either."""
    m = model.moe
    if m is None or not (model.clamped_glu or model.mlp_bias):
        return np.zeros(len(RECOMPUTE_MODES))
    scale = act_bytes / 2.0 * model.moe_layers / model.num_layers
    kf, kh = m.top_k * m.expert_ffn_size, m.top_k * model.hidden_size
    fwd = scale * ((CLAMP_BYTES_FWD * kf if model.clamped_glu else 0.0)
                   + (EXPERT_BIAS_BYTES_FWD * kh if model.mlp_bias else 0.0))
    bwd = scale * ((CLAMP_BYTES_BWD * kf if model.clamped_glu else 0.0)
                   + (EXPERT_BIAS_BYTES_BWD * kh if model.mlp_bias else 0.0))
    return by_recompute_code(fwd + bwd, fwd + bwd, 2 * fwd + bwd)


# ---- LoRA / QLoRA (docs/time-model.md §1.7) ------------------------------------------------

# PEFT's lora.Linear around its rank-r GEMMs, per adapted projection and token, in
# activation elements (rough counts of its eager ops; docs/time-model.md §1.7). Input side:
# lora_A reads the input (1) and, backward, writes the input's gradient, reads the saved
# input for its weight gradient and adds its gradient to the base's (1 + 1 + 3). When the
# input is not in the adapters' fp32, PEFT casts it to fp32 and autocast casts that back
# to bf16 (read 1 + write 2, read 2 + write 1), and backward casts the gradient through
# both (6 more each way). Output side: lora_B writes (1), the scaling reads and writes (2),
# the sum with the base output reads two and writes one (3); backward the scaling again
# (2) and lora_B's two GEMMs read the gradient (2). The QLoRA layer clones the base
# output first (2).
ADAPTER_IN_FWD, ADAPTER_IN_BWD, ADAPTER_CAST = 1.0, 5.0, 6.0
ADAPTER_OUT_FWD, ADAPTER_OUT_BWD, QLORA_CLONE = 6.0, 4.0, 2.0
# bitsandbytes' double quantization writes an fp32 absmax per 64 weights before the
# weights themselves are dequantized.
NF4_ABSMAX_BYTES = 4.0 / 64


def training_flops_per_token(model: ModelSpec, seq_len: int, recompute: str = 'none',
                             causal: bool = True, lora: LoraSpec | None = None) -> float:
    """FLOPs per token of one training step, full or LoRA on a frozen base.

    A frozen linear layer still needs its input's gradient (backpropagation continues
    through it to the adapters below) but no weight gradient: every matmul weight, the
    output head included, loses that GEMM, 2 FLOPs per weight per token. The adapters
    cost 2 forward and 4 backward (their weight and input gradients) per adapter
    parameter, and full recompute runs their forward again. Without ``lora`` this is
    ``ModelSpec.training_flops_per_token``.
    """
    full = model.training_flops_per_token(seq_len, recompute, causal)
    if lora is None:
        return full
    adapters = float(lora_params(model, lora))
    again = 2.0 * adapters if recompute == 'full' else 0.0
    return full - 2.0 * model.matmul_params_per_token() + 6.0 * adapters + again


def flash_backward_rescore_flops(model: ModelSpec, seq_len: int) -> float:
    """FLOPs per token a flash-attention backward executes beyond twice its forward.

    The kernel keeps no scores: its backward recomputes S = QK^T (and P) before the four
    gradient matmuls, five matmuls against the forward's two, 2.5x the forward's FLOPs
    (Dao 2023, FlashAttention-2, Section 3.1.2; Dao-AILab/flash-attention
    benchmarks/benchmark_flash_attention.py counts ``bwd`` as 2.5 x ``fwd``). Causal.
    """
    return 0.5 * 2.0 * seq_len * model.q_size * model.num_layers


def _flops_per_token(model: ModelSpec, seq_len: int, causal: bool,
                     lora: LoraSpec | None) -> tuple[np.ndarray, float, float]:
    """(training FLOPs per token by recompute code, forward FLOPs, head fwd + bwd FLOPs).

    The head's share is 6·V·h in full training and 4·V·h on a frozen head (forward and
    input gradient); it is never recomputed.
    """
    per_mode = np.array([training_flops_per_token(model, seq_len, mode, causal, lora)
                         for mode in RECOMPUTE_MODES])
    if causal:
        per_mode = per_mode + flash_backward_rescore_flops(model, seq_len)
    fwd = model.forward_flops_per_token(seq_len, causal)
    head = (4.0 if lora is not None else 6.0) * model.vocab_size * model.hidden_size
    if lora is not None:
        fwd += 2.0 * lora_params(model, lora)
    return per_mode, fwd, head


def _adapter_bytes_per_token(model: ModelSpec, r: PrecisionRecipe,
                             lora: LoraSpec | None) -> np.ndarray:
    """Memory-bound bytes per token per layer of PEFT's adapter path, by recompute code.

    Rank-r GEMMs read and write h-wide tensors for r-wide work: they are bound by
    memory, not FLOPs, and PEFT adds casts, a scaling and a sum around them. The input
    is cast when it is not fp32 already, except in the QLoRA layer under autocast
    (``lora.bnb.Linear4bit`` skips the cast there). Full recompute runs the forward
    part again; selective recompute does not touch the projections.
    """
    if lora is None:
        return np.zeros(len(RECOMPUTE_MODES))
    cast = (lora.frozen_bytes(r.act_bytes) != ADAPTER_BYTES
            and not (lora.quantized and r.autocast))
    in_fwd = ADAPTER_IN_FWD + (ADAPTER_CAST if cast else 0.0)
    in_bwd = ADAPTER_IN_BWD + (ADAPTER_CAST if cast else 0.0)
    out_fwd = ADAPTER_OUT_FWD + (QLORA_CLONE if lora.quantized else 0.0)
    shapes = lora.adapted(model).values()
    fan_in, fan_out = sum(i for i, _ in shapes), sum(o for _, o in shapes)
    fwd = r.act_bytes * (in_fwd * fan_in + out_fwd * fan_out)
    bwd = r.act_bytes * (in_bwd * fan_in + ADAPTER_OUT_BWD * fan_out)
    return by_recompute_code(fwd + bwd, fwd + bwd, 2 * fwd + bwd)


def _dequant_bytes_per_param(r: PrecisionRecipe, lora: LoraSpec | None) -> np.ndarray:
    """Bytes moved per frozen projection weight to dequantize it, by recompute code.

    bitsandbytes dequantizes a 4/8-bit weight to the compute dtype before every matmul
    that uses it: the forward, the input's gradient in backward, and the forward again
    under full recompute (selective recompute re-runs only the attention core). Each use
    reads the stored bytes and writes the dequantized copy (plus NF4's fp32 absmax).
    """
    if lora is None or not lora.quantized:
        return np.zeros(len(RECOMPUTE_MODES))
    per_use = lora_base_bytes_per_param(r, lora) + lora.frozen_bytes(r.act_bytes)
    per_use += NF4_ABSMAX_BYTES if lora.base_bits == 4 else 0.0
    return per_use * by_recompute_code(2.0, 2.0, 3.0)


@dataclass
class _StageBytes:
    """What DP/ZeRO moves and the optimizer updates on the busiest stage's rank.

    Attributes:
        grad_bytes: the gradients reduced (all trainable parameters).
        update_bytes: what ZeRO-1/2 all-gather after the step (the updated parameters).
        gather_bytes: what ZeRO-3 gathers per forward and backward (every parameter,
            trainable or frozen, at its stored size).
        trainable: trainable elements (the optimizer's work).
        quantized: quantized frozen elements (dequantized per use).
    """

    grad_bytes: np.ndarray
    update_bytes: np.ndarray
    gather_bytes: np.ndarray
    trainable: np.ndarray
    quantized: np.ndarray


def _stage_bytes(model: ModelSpec, r: PrecisionRecipe, t, p,
                 lora: LoraSpec | None, ep=1, etp=0) -> _StageBytes:
    """Per-rank parameter bytes of the busiest stage, full training or LoRA.

    Full training moves every parameter in the recipe's gradient and weight bytes. Under
    LoRA only the fp32 adapters are reduced and updated, but ZeRO-3 gathers the frozen
    base too, at its stored size (``planner.memory.model_states.lora_weight_bytes``: NF4 for
    QLoRA); the larger of the first and last stage counts.
    """
    # The memory model's partition (planner.memory.model_states.stage_params), once.
    # experts split over EP: what one rank holds (dense part over TP, its own experts)
    ep = np.ones(np.broadcast_shapes(np.shape(p), np.shape(ep)), int) * ep
    stages = [stage_params(model, t, p, ep, stage, lora, etp) for stage in ('first', 'last')]
    if lora is None:
        psi = np.maximum(*(s.dense + s.expert for s in stages))
        gather = psi * r.gathered_bytes
        if r.float8_all_gather:  # the converted linears' weights travel in fp8 (1 B)
            from planner.timing.stack_speed import float8_linear_params

            converted = np.maximum(*(s.layers for s in stages)) * float8_linear_params(model) / t
            gather = gather - converted * (r.gathered_bytes - 1)
        return _StageBytes(grad_bytes=psi * r.grad_bytes, update_bytes=psi * r.weight_bytes,
                           gather_bytes=gather, trainable=psi,
                           quantized=np.zeros(np.shape(psi)))
    trainable = np.maximum(*(s.trainable_dense + s.trainable_expert for s in stages))
    gather = np.maximum(*(lora_weight_bytes(s, r, lora) for s in stages))
    quantized = (np.maximum(*(s.matmul - s.head_matmul for s in stages)) if lora.quantized
                 else np.zeros(np.shape(trainable)))
    adapters = ADAPTER_BYTES * trainable
    return _StageBytes(grad_bytes=adapters, update_bytes=adapters, gather_bytes=gather,
                       trainable=trainable, quantized=quantized)


def _float8_compute(model: ModelSpec, r: PrecisionRecipe, o: StepTimeOptions,
                    layers_tok: np.ndarray, rc, busy_layers, tokens_mb, t, shards, rate,
                    hbm_bps, gemm_mb, elementwise_mb):
    """(GEMM, memory-bound) seconds of a micro-batch with torchao Float8Linear layers: the
    converted GEMMs at the fp8 rate, the casts around them at HBM speed
    (``planner.timing.stack_speed``). ``layers_tok`` holds the layers' FLOPs per token by
    recompute code (the head taken out)."""
    from planner.timing.stack_speed import (
        WEIGHT_CAST_BYTES,
        float8_cast_bytes,
        float8_linear_params,
        float8_saved_flops,
    )

    recomputed = (layers_tok - layers_tok[0]) / model.num_layers  # per layer, by code
    saved = float8_saved_flops(model, recomputed)[rc]
    gemm_mb = gemm_mb - busy_layers * saved * tokens_mb / t / rate
    casts = float8_cast_bytes(model, o.compute_speedup > 1)[rc] * tokens_mb / t
    weights = WEIGHT_CAST_BYTES * float8_linear_params(model) / t
    weights = weights / np.where(r.float8_all_gather, np.maximum(shards, 1), 1)
    return gemm_mb, elementwise_mb + busy_layers * (casts + weights) / hbm_bps


def _optimizer_bytes_per_param(r: PrecisionRecipe, opt: OptimizerKind,
                               lora: LoraSpec | None) -> float:
    """Bytes the update touches per trainable parameter (memory-bound).

    Read the gradient, read and write the master copy and the states, write the weights
    (read and write them when they are the master). PEFT's adapters are fp32 with no
    master copy, whatever the recipe.
    """
    states = 0 if opt.factored else opt.states
    if lora is not None:
        state_bytes = opt.state_bytes_override or ADAPTER_BYTES
        return ADAPTER_BYTES + 2 * states * state_bytes + 2 * ADAPTER_BYTES
    state_bytes = opt.state_bytes_override or r.state_bytes
    return (r.grad_bytes + 2 * r.master_bytes + 2 * states * state_bytes
            + (r.weight_bytes if r.master_bytes else 2 * r.weight_bytes))


def _ring_bandwidth(span_gpus, members_per_node, gpus_per_node, intra_bps, inter_bps):
    """Bus bandwidth of a collective over ranks spread as described.

    A group inside one node runs at the intra-node link. A group across nodes is limited
    by the network, but its ``k`` members in each node drive ``k`` rails at once
    (NCCL lays one ring per NIC), so the bus bandwidth is ``min(intra, k · inter)``.
    """
    k = np.maximum(members_per_node, 1)
    return np.where(span_gpus <= gpus_per_node, intra_bps, np.minimum(intra_bps, k * inter_bps))


def step_time_arrays(model: ModelSpec, seq_len: int, gpu: GpuSpec, inter_node: LinkSpec | None,
                     layout: LayoutArrays, *, precision: str = DEFAULT_PRECISION,
                     optimizer: str = DEFAULT_OPTIMIZER, attention: str = DEFAULT_ATTENTION,
                     framework: str = DEFAULT_FRAMEWORK, options: StepTimeOptions | None = None,
                     calibration: CalibrationProfile | Mapping | None = None,
                     lora: LoraSpec | None = None,
                     loss: str = '',
                     partition_activations: bool = False,
                     zero_bubble: bool = False,
                     grad_reduce_in_bf16: bool = False) -> StepTimeArrays:
    """Time one optimizer step for every candidate in ``layout``.

    Args:
        model: the transformer.
        seq_len: tokens per sequence.
        gpu: the accelerator (peak FLOP/s of the recipe's compute dtype, HBM, NVLink).
        inter_node: the network between nodes (needed when a candidate spans nodes).
        layout: the per-candidate axes.
        precision: a ``RECIPES`` key (compute dtype, gradient and weight bytes).
        optimizer: an ``OPTIMIZERS`` key (state tensors touched by the update).
        attention: ``flash`` skips the masked half of causal attention; ``eager``
            computes it.
        framework: ``megatron`` (fused kernels, the curves' reference) or ``hf`` (eager
            PyTorch, slower; ``planner.timing.efficiency.framework_factor``).
        options: model constants; defaults documented in docs/time-model.md.
        calibration: measured efficiencies replacing the default curve.
        loss: the loss implementation (``planner.memory.training.LOSSES``; '' : the
            stack's own), whose memory traffic is timed on the last stage.
        lora: train LoRA adapters on a frozen base (QLoRA with ``base_bits`` 4 or 8)
            instead of every weight. PEFT runs it data parallel only, so the plan
            search passes TP = PP = CP = 1; other layouts are timed by the same
            formulas.
        partition_activations: DeepSpeed's switch (an all-gather of each recomputed
            layer's input without SP).
        zero_bubble: torchtitan's InterleavedZeroBubble schedule where vpp > 1.
        grad_reduce_in_bf16: Megatron's bf16 main grads: the DP reduce-scatter moves 2 B
            per element, and the step reads them and writes and reads an fp32 copy
            (``planner.memory.recipes.main_grad_copy_bytes``).

    Raises:
        InputError: a candidate spans nodes and no inter-node link is given.
    """
    o = options or StepTimeOptions()
    stack = STACKS[framework]
    r, opt = RECIPES[precision], OPTIMIZERS[optimizer]
    if grad_reduce_in_bf16 and stack.persistent_grad_buffer:
        r = with_bf16_main_grads(r)
    lay = layout
    if inter_node is None and np.any(lay.nodes > 1):
        raise InputError('--inter-node', 'candidates span several nodes: name the network')
    peak = gpu.peak(r.compute_dtype)
    links = _links(gpu, inter_node, o)
    rc = np.asarray(lay.recompute)
    mb = _microbatch_compute(model, seq_len, gpu, lay, r, lora, attention=attention,
                             torchtitan=stack.key == 'torchtitan', calibration=calibration,
                             framework=framework, loss=resolve_loss(loss, stack.loss),
                             peak=peak, links=links,
                             o=o)
    tp_mb = _tp_comm_s(model, lay, r, rc, mb, links, o, partition_activations)
    cp_mb = _cp_comm_s(model, seq_len, lay, r, rc, attention == 'flash', mb, peak, links, o,
                       torchtitan=stack.key == 'torchtitan')
    pp_mb = _pp_comm_s(model, lay, r, mb, links, o)
    dp = _dp_zero_comm_s(lay, r, stack.fsdp_unsharded_accumulation, mb, links, o)
    # EP: each MoE layer dispatches its tokens to the experts' ranks and combines them
    # back, an all-to-all each way forward and again backward (four per layer, six under
    # full recompute), of the rank's tokens x top-k x h; the EP group spans t x ep GPUs
    # (stride t); not overlapped.
    ep_mb = _expert_all_to_all_s(model, lay, mb.tokens_mb, r.act_bytes, rc, mb.busy_layers,
                                 links.intra_bps, links.inter_bps, links.inter_lat,
                                 o.intra_node_latency_s)
    # Pipeline: every micro-batch crosses the busiest stage; (p-1)/v of a micro-batch's
    # time is the bubble (interleaved 1F1B). torchtitan's zero-bubble schedule
    # (InterleavedZeroBubble where v > 1) fills it with the weight gradients.
    t_mb = mb.compute_mb + tp_mb + cp_mb + pp_mb + dp.mb_dp + ep_mb
    bubble = t_mb * (lay.pp - 1) / lay.vpp
    if zero_bubble:
        zb = zero_bubble_fraction(lay.pp, lay.vpp, 1 - mb.bwd_fraction, mb.wgrad_fraction)
        bubble = np.where(np.asarray(lay.vpp) > 1, t_mb * zb, bubble)
    optimizer_s = _optimizer_step_s(lay, r, opt, lora, mb.stage, links,
                                    main_grad_copy_bytes(r, stack.persistent_grad_buffer))
    step = t_mb * np.asarray(lay.grad_accum, float) + bubble + dp.step_dp + optimizer_s \
        + o.step_overhead_s
    return _assemble(model, seq_len, lay, lora, peak, o, mb,
                     _PerMicroBatchComm(tp=tp_mb, cp=cp_mb, pp=pp_mb, ep=ep_mb, dp=dp),
                     bubble=bubble, optimizer_s=optimizer_s, step=step)


@dataclass
class _Links:
    """Achieved bandwidths (bytes/s) and latencies (s) the step's traffic runs over."""

    intra_bps: float
    inter_bps: float
    inter_lat: float
    hbm_bps: float


def _links(gpu: GpuSpec, inter_node: LinkSpec | None, o: StepTimeOptions) -> _Links:
    """The intra-node, inter-node and HBM bandwidths after their efficiencies."""
    intra_bps = gpu.intra_node_bandwidth_bytes_per_s * o.intra_node_link_efficiency
    inter_bps = (inter_node.bandwidth_bytes_per_s * o.inter_node_link_efficiency
                 if inter_node else intra_bps)
    inter_lat = inter_node.latency_s if inter_node else o.intra_node_latency_s
    return _Links(intra_bps=intra_bps, inter_bps=inter_bps, inter_lat=inter_lat,
                  hbm_bps=gpu.hbm_bandwidth_bytes_per_s * o.hbm_efficiency)


@dataclass
class _MicroBatchCompute:
    """One micro-batch's compute on the busiest pipeline stage (seconds are per rank).

    Attributes:
        tokens_mb: tokens of one micro-batch on one rank.
        gemm: the GEMM size the efficiency curve reads; eta: the efficiency it gives.
        busy_layers: transformer layers on the busiest stage.
        gemm_mb, elementwise_mb, dequant_mb: GEMM, memory-bound and (QLoRA)
            dequantization seconds; dequant_mb is part of elementwise_mb.
        compute_mb, fwd_mb, bwd_mb: their sum, split into forward and backward.
        bwd_fraction: the backward's share of the FLOPs (recomputation included).
        wgrad_fraction: the weight gradients' share of the FLOPs (what a zero-bubble
            schedule splits off the backward as W).
        stage: the stage's parameter bytes (what DP/ZeRO moves, the optimizer updates).
    """

    tokens_mb: np.ndarray
    gemm: np.ndarray
    eta: np.ndarray
    busy_layers: np.ndarray
    gemm_mb: np.ndarray
    elementwise_mb: np.ndarray
    dequant_mb: np.ndarray
    compute_mb: np.ndarray
    fwd_mb: np.ndarray
    bwd_mb: np.ndarray
    bwd_fraction: np.ndarray
    wgrad_fraction: np.ndarray
    stage: _StageBytes


def _microbatch_compute(model: ModelSpec, seq_len: int, gpu: GpuSpec, lay: LayoutArrays,
                        r: PrecisionRecipe, lora: LoraSpec | None, *, attention: str,
                        torchtitan: bool, calibration: CalibrationProfile | Mapping | None,
                        framework: str, loss: str, peak: float, links: _Links,
                        o: StepTimeOptions) -> _MicroBatchCompute:
    """FLOPs the GPUs execute (causal saving only with flash attention) and the
    memory-bound work between them, for one micro-batch on the busiest stage."""
    t, p, c = lay.tp, lay.pp, lay.cp
    b = np.asarray(lay.micro_batch, float)  # float64: token counts overflow int64
    rc = np.asarray(lay.recompute)
    s, h, layers = seq_len, model.hidden_size, model.num_layers
    causal = attention == 'flash'
    # fwd + bwd of the output head is never recomputed
    per_mode, fwd_tok, head_tok = _flops_per_token(model, s, causal, lora)
    if torchtitan and lora is None:
        per_mode = per_mode.copy()
        per_mode[1] = per_mode[0] + torchtitan_sac_recompute_flops(model)
    layer_tok = (per_mode[rc] - head_tok) / layers
    bwd_fraction = (per_mode[rc] - fwd_tok) / per_mode[rc]
    # W: one GEMM per trainable weight, as large as its forward GEMM (dW = dY^T X beside
    # dX = dY W); the attention core has no weight, its backward is all B
    wgrad_tok = 2.0 * (lora_params(model, lora) if lora is not None
                       else model.matmul_params_per_token())
    wgrad_fraction = wgrad_tok / per_mode[rc]
    first_layers, last_layers = np.ceil(layers / p), np.floor(layers / p)
    stage_tok = np.where(p > 1, np.maximum(first_layers * layer_tok,
                                           last_layers * layer_tok + head_tok),
                         layers * layer_tok + head_tok)
    tokens_mb = b * s / c  # tokens of one micro-batch on one rank
    gemm = gemm_flops(h, tokens_mb, t)
    eta = matmul_efficiency(gpu.family, gemm, b, calibration, framework)
    busy_layers = first_layers
    # Memory-bound work between the GEMMs (norms, activations, dropout, residual adds and,
    # with eager attention, the s^2 softmax) costs bytes / HBM bandwidth. It is what makes
    # narrow models slower per FLOP: GEMM FLOPs grow as h^2, these bytes as h.
    # Under LoRA the adapters' own path is memory-bound too, and a QLoRA base is
    # dequantized before every use (once per micro-batch for each use, whatever its size).
    hbm_bps = links.hbm_bps
    elementwise = (_elementwise_bytes_per_token(model, s, attention, r.act_bytes)[rc]
                   + _adapter_bytes_per_token(model, r, lora)[rc])
    if framework == 'megatron':  # GPT-OSS's eager clamp and expert biases
        elementwise = elementwise + megatron_expert_eager_bytes_per_token(
            model, r.act_bytes)[rc]
    sb = _stage_bytes(model, r, t, p, lora, lay.ep, lay.etp)
    dequant_mb = sb.quantized * _dequant_bytes_per_param(r, lora)[rc] / hbm_bps
    # The loss runs on the last stage over the rank's vocabulary shard (vocab-parallel
    # under TP); that stage's memory-bound work is its layers' plus the loss.
    layer_elementwise_mb = elementwise * tokens_mb / t / hbm_bps
    loss_mb = tokens_mb * model.vocab_size / t * LOSS_BYTES_PER_LOGIT[loss] / hbm_bps
    elementwise_mb = np.maximum(first_layers * layer_elementwise_mb,
                                last_layers * layer_elementwise_mb + loss_mb) + dequant_mb
    gemm_mb = stage_tok * tokens_mb / t / (peak * eta)
    if r.float8_linears:  # torchao Float8Linear (planner.timing.stack_speed)
        gemm_mb, elementwise_mb = _float8_compute(model, r, o, per_mode - head_tok, rc,
                                                  busy_layers, tokens_mb, t, lay.dp * c,
                                                  peak * eta, hbm_bps, gemm_mb, elementwise_mb)
    gemm_mb, elementwise_mb = compiled_compute_s(model, s, causal, rc, busy_layers, tokens_mb,
                                                 t, peak * eta, gemm_mb, elementwise_mb,
                                                 o.compute_speedup)
    compute_mb = gemm_mb + elementwise_mb
    fwd_mb, bwd_mb = compute_mb * (1 - bwd_fraction), compute_mb * bwd_fraction
    return _MicroBatchCompute(
        tokens_mb=tokens_mb, gemm=gemm, eta=eta, busy_layers=busy_layers, gemm_mb=gemm_mb,
        elementwise_mb=elementwise_mb, dequant_mb=dequant_mb, compute_mb=compute_mb,
        fwd_mb=fwd_mb, bwd_mb=bwd_mb, bwd_fraction=np.asarray(bwd_fraction),
        wgrad_fraction=np.asarray(wgrad_fraction), stage=sb)


def _tp_comm_s(model: ModelSpec, lay: LayoutArrays, r: PrecisionRecipe, rc: np.ndarray,
               mb: _MicroBatchCompute, links: _Links, o: StepTimeOptions,
               partition_activations: bool = False) -> np.ndarray:
    """TP: 2 all-reduces forward + 2 backward per layer of b·s·h/c elements (RS + AG of
    the same volume with SP); full recompute repeats the forward's two (and DeepSpeed's
    partitioned checkpoints add an all-gather of the layer input).

    Whole experts (expert TP 1) take their tokens by the EP all-to-all from each rank's
    own sequence shard, with no TP collective around the MoE MLP: an MoE layer then has
    only its attention's half (megatron/core/transformer/moe/token_dispatcher.py
    ``MoEAlltoAllTokenDispatcher``, which gathers over the expert-TP group only).
    """
    t = lay.tp
    act = mb.tokens_mb * model.hidden_size * r.act_bytes
    ar_per_layer = 4 + 2 * FULL_RECOMPUTE_SHARE[rc]
    if partition_activations:
        # one all-gather (half an all-reduce's traffic) of each recomputed layer's
        # input; with SP the input is a sequence shard gathered anyway
        sp = np.asarray(lay.sequence_parallel, bool)
        ar_per_layer = ar_per_layer + np.where(sp, 0.0, 0.5 * FULL_RECOMPUTE_SHARE[rc])
    if model.moe is not None:
        whole_experts = (expert_tp(t, lay.etp) == 1) & (np.asarray(lay.ep) > 1)
        ar_per_layer = ar_per_layer * np.where(
            whole_experts, 1 - 0.5 * model.moe_layers / model.num_layers, 1.0)
    tp_ar_s = 2 * (t - 1) / t * act / links.intra_bps + 2 * (t - 1) * o.intra_node_latency_s
    return np.where(t > 1, mb.busy_layers * ar_per_layer * tp_ar_s * (1 - o.tp_overlap), 0.0)


def _cp_comm_s(model: ModelSpec, seq_len: int, lay: LayoutArrays, r: PrecisionRecipe,
               rc: np.ndarray, causal: bool, mb: _MicroBatchCompute, peak: float,
               links: _Links, o: StepTimeOptions, *, torchtitan: bool = False) -> np.ndarray:
    """CP: ring attention passes each rank's K and V chunk c-1 times forward, and K, V
    plus their gradients backward; the attention core hides it (Megatron overlaps).

    torchtitan runs torch's ring (:func:`_torch_ring_layer_s`): one all-gather of K and V
    per pass, the fp32 dK/dV sent on at every backward step, each hidden only behind
    one ring step's attention, and nothing hidden once compiled."""
    t, c, g = lay.tp, lay.cp, lay.gpus_per_node
    # K and V at the key/value heads' width: torchtitan 0.2.2 passes ``enable_gqa`` to
    # SDPA (torchtitan/models/llama3/model/model.py); its Dec-2024 commit 9dec370 repeated
    # them to every query head first (``repeat_kv``), which this does not model
    kv_chunk = 2 * mb.tokens_mb * (model.kv_size / t) * r.act_bytes
    cp_bps = np.where(t * c <= g, links.intra_bps, links.inter_bps)
    cp_lat = np.where(t * c <= g, o.intra_node_latency_s, links.inter_lat)
    core_fwd_tok = (2.0 if causal else 4.0) * seq_len * model.q_size  # per layer
    core_fwd_layer_s = core_fwd_tok * mb.tokens_mb / t / (peak * mb.eta)
    if torchtitan:
        layer_s = _torch_ring_layer_s(c, kv_chunk, cp_bps, cp_lat, core_fwd_layer_s,
                                      FULL_RECOMPUTE_SHARE[rc], o.cp_overlap,
                                      compiled=o.compute_speedup > 1)  # --compile
    else:
        passes = 3 + FULL_RECOMPUTE_SHARE[rc]
        cp_layer_s = (c - 1) * passes * (kv_chunk / cp_bps + cp_lat)
        core_layer_s = core_fwd_layer_s * (3 + CORE_RECOMPUTE_SHARE[rc])  # fwd+bwd(+recomp.)
        layer_s = np.maximum(0.0, cp_layer_s - o.cp_overlap * core_layer_s)
    return np.where(c > 1, mb.busy_layers * layer_s, 0.0)


# FlashAttention's backward executes 2.5x its forward's FLOPs (Dao 2023, FlashAttention-2,
# Section 3.1.2; ``flash_backward_rescore_flops``).
FLASH_BWD_OVER_FWD = 2.5


def _torch_ring_layer_s(c: np.ndarray, kv_chunk: np.ndarray, bps: np.ndarray,
                        lat: np.ndarray, core_fwd_layer_s: np.ndarray,
                        recompute_share: np.ndarray, overlap: float, *,
                        compiled: bool) -> np.ndarray:
    """Exposed seconds of one layer's CP exchange under torch's ring attention, as
    torchtitan runs it (pytorch/pytorch torch/distributed/tensor/experimental/
    _context_parallel/_attention.py, torch 2.13; the same algorithm in torch 2.6):

    * ``_templated_ring_attention``: the default ``_RotateMethod.ALL_GATHER`` gathers the
      K and V chunks of all c ranks once per pass ((c-1) chunks received), issued before
      the local (step 0) SDPA and waited for at step 1, so eager only step 0 hides it.
      With load balancing (``enable_load_balance``, head-tail shards) every step runs
      1/c of the pass's attention. Full AC runs this forward twice.
    * ``_templated_ring_attention_backward``: the same all-gather, then dK and dV,
      accumulated in fp32 (``convert_to_f32``), go to the next rank after every one of
      the c steps (``dkv_rotater`` is always ``ALL_TO_ALL``: twice the bf16 chunk's
      bytes each time); eager, each waits behind the next step's SDPA backward and the
      last behind nothing.
    * Compiled (torchtitan compiles each block, the ring inside): while tracing, a
      functional collective is followed by its ``wait_tensor`` (torch/distributed/
      _functional_collectives.py ``_maybe_wrap_tensor``) and Inductor's reordering for
      overlap is off (torch/_inductor/config.py ``reorder_for_compute_comm_overlap``).
      Inductor's code for the ring (benchmarks/cp_ring_schedule.py) waits for the
      backward's all-gather and for every dK/dV send before the next SDPA backward, and
      at CP 4 and 8 one rank issues the forward all-gather only after its step-0 SDPA,
      which holds the collective for all: the whole exchange is exposed.
    """
    step_fwd = overlap * core_fwd_layer_s / c
    step_bwd = FLASH_BWD_OVER_FWD * step_fwd
    gather = (c - 1) * (kv_chunk / bps + lat)  # ring all-gather of the K, V chunks
    send = 2 * kv_chunk / bps + lat  # fp32 dK, dV of one chunk to the next rank
    if compiled:
        return (1 + recompute_share) * gather + gather + c * send
    fwd = (1 + recompute_share) * np.maximum(0.0, gather - step_fwd)
    bwd = (np.maximum(0.0, gather - step_bwd) + (c - 1) * np.maximum(0.0, send - step_bwd)
           + send)
    return fwd + bwd


def _pp_comm_s(model: ModelSpec, lay: LayoutArrays, r: PrecisionRecipe,
               mb: _MicroBatchCompute, links: _Links, o: StepTimeOptions) -> np.ndarray:
    """PP: one activation send forward and one gradient send backward per micro-batch
    and model chunk, b·s·h/(c·t) elements (scatter/gather), over the network when the
    pipeline spans nodes."""
    t, p, v = lay.tp, lay.pp, lay.vpp
    act = mb.tokens_mb * model.hidden_size * r.act_bytes
    pp_msg = act / t
    multi_node = lay.nodes > 1
    pp_bps = np.where(multi_node, links.inter_bps, links.intra_bps)
    pp_lat = np.where(multi_node, links.inter_lat, o.intra_node_latency_s)
    return np.where(p > 1, 2 * v * (pp_msg / pp_bps + pp_lat) * (1 - o.pp_overlap), 0.0)


@dataclass
class _DataParallelComm:
    """DP/ZeRO seconds: exposed per micro-batch, exposed once per step, and the whole
    traffic (for reference)."""

    mb_dp: np.ndarray
    step_dp: np.ndarray
    traffic: np.ndarray


def _dp_zero_comm_s(lay: LayoutArrays, r: PrecisionRecipe, accumulation: str,
                    mb: _MicroBatchCompute, links: _Links,
                    o: StepTimeOptions) -> _DataParallelComm:
    """DP / ZeRO over the dp x cp ranks (stride t): gradients reduced, ZeRO shards.

    Under LoRA only the adapters' gradients and updates move; ZeRO-3 gathers the base.
    ``accumulation`` is the stack's ``fsdp_unsharded_accumulation``.
    """
    t, p, g = lay.tp, lay.pp, lay.gpus_per_node
    m, zero = np.asarray(lay.grad_accum, float), np.asarray(lay.zero)
    fwd_mb, bwd_mb, sb = mb.fwd_mb, mb.bwd_mb, mb.stage
    # HSDP: ZeRO's collectives run in one replica's shard group; the sharded gradients
    # are then all-reduced across the replicas (torch fully_shard on a 2-D mesh)
    replicas = np.asarray(lay.dp_replicate)
    n = lay.dp * lay.cp // replicas
    grad_bytes, update_bytes, gather_bytes = sb.grad_bytes, sb.update_bytes, sb.gather_bytes
    dp_span = t * n
    dp_bps = _ring_bandwidth(dp_span, np.minimum(g // t, n), g, links.intra_bps,
                             links.inter_bps)
    dp_lat = np.where(dp_span <= g, o.intra_node_latency_s, links.inter_lat)
    across = dp_span * replicas <= g  # the replicas of a shard share a node
    rep_bps = np.where(across, links.intra_bps, links.inter_bps)
    rep_lat = np.where(across, o.intra_node_latency_s, links.inter_lat)

    def rs(size):  # reduce-scatter or all-gather of a `size`-byte array
        return np.where(n > 1, (n - 1) / n * size / dp_bps + (n - 1) * dp_lat, 0.0)

    def reduce(size):  # a gradient reduction: reduce-scatter, then across the replicas
        shard = size / np.maximum(n, 1)
        ring = 2 * (replicas - 1) / np.maximum(replicas, 1)
        return rs(size) + np.where(replicas > 1, ring * shard / rep_bps
                                   + 2 * (replicas - 1) * rep_lat, 0.0)

    def exposed(comm, window):
        return np.maximum(0.0, comm - o.dp_overlap * window)

    # FSDP2 accumulating unsharded gradients (HF Trainer's no_sync with accumulation,
    # torch's pipelining stage under PP) reduce-scatters them once per step; under
    # torchtitan's PP the stage also stays gathered: one all-gather per step
    # (torch/distributed/pipelining/stage.py).
    gather_once = r.fsdp & (accumulation == 'pipeline') & (p > 1)
    reduce_once = r.fsdp & (gather_once | ((accumulation == 'no_sync') & (m > 1)))
    # ZeRO-0: one all-reduce per step after the last backward. ZeRO-1: reduce-scatter,
    # then all-gather the updated weights (hidden by the next forward). ZeRO-2: gradients
    # are reduce-scattered every micro-batch. ZeRO-3: weights gathered for every
    # micro-batch's forward and backward, gradients reduce-scattered (1.5x DP volume).
    step_dp = np.select(
        [zero == 0, zero == 1, zero == 2],
        [exposed(2 * rs(grad_bytes), bwd_mb),
         exposed(rs(grad_bytes), bwd_mb) + exposed(rs(update_bytes), fwd_mb),
         exposed(rs(update_bytes), fwd_mb)], 0.0)
    mb_grad = np.where(reduce_once, 0.0, reduce(grad_bytes))
    mb_gather = np.where(gather_once, 0.0, rs(gather_bytes))
    mb_dp = np.select(
        [zero == 2, zero == 3],
        [exposed(mb_grad, bwd_mb),
         exposed(mb_gather, fwd_mb) + exposed(mb_gather + mb_grad, bwd_mb)],
        0.0)
    step_dp = step_dp + np.where(
        (zero >= 2) & reduce_once, exposed(reduce(grad_bytes), bwd_mb), 0.0) + np.where(
        (zero == 3) & gather_once, exposed(rs(gather_bytes), fwd_mb), 0.0)
    traffic = np.select([zero == 0, zero == 1, zero == 2],
                        [2 * rs(grad_bytes), rs(grad_bytes) + rs(update_bytes),
                         m * reduce(grad_bytes) + rs(update_bytes)],
                        m * (2 * rs(gather_bytes) + reduce(grad_bytes)))
    return _DataParallelComm(mb_dp=mb_dp, step_dp=step_dp, traffic=traffic)


def _optimizer_step_s(lay: LayoutArrays, r: PrecisionRecipe, opt: OptimizerKind,
                      lora: LoraSpec | None, sb: _StageBytes, links: _Links,
                      grad_copy_bytes: int = 0) -> np.ndarray:
    """Optimizer: read gradients, read/write master and states, write weights (ZeRO >= 1
    updates the rank's shard of the dp x cp group); a Megatron main grad below fp32 is
    first copied to fp32 (written, then read by the update)."""
    touched = _optimizer_bytes_per_param(r, opt, lora) + 2 * grad_copy_bytes
    n = lay.dp * lay.cp // np.asarray(lay.dp_replicate)
    opt_params = sb.trainable / np.where(np.asarray(lay.zero) >= 1, n, 1)
    return opt_params * touched / links.hbm_bps


@dataclass
class _PerMicroBatchComm:
    """Exposed communication seconds of one micro-batch, by parallelism."""

    tp: np.ndarray
    cp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    dp: _DataParallelComm


def _assemble(model: ModelSpec, seq_len: int, lay: LayoutArrays, lora: LoraSpec | None,
              peak: float, o: StepTimeOptions, mb: _MicroBatchCompute,
              comm: _PerMicroBatchComm, *, bubble: np.ndarray, optimizer_s: np.ndarray,
              step: np.ndarray) -> StepTimeArrays:
    """The step's parts (per micro-batch parts times the accumulation), throughput, and
    MFU/HFU over the FLOPs the step needs."""
    s, rc = seq_len, np.asarray(lay.recompute)
    b, m = np.asarray(lay.micro_batch, float), np.asarray(lay.grad_accum, float)
    t, p, c, d = lay.tp, lay.pp, lay.cp, lay.dp
    gpus = t * p * c * d
    tokens_step = b * m * d * s
    model_flops = training_flops_per_token(model, s, 'none', False, lora) * tokens_step
    paper_per_mode = np.array([training_flops_per_token(model, s, mode, False, lora)
                               for mode in RECOMPUTE_MODES])
    hardware_flops = paper_per_mode[rc] * tokens_step
    return StepTimeArrays(
        compute_s=mb.gemm_mb * m, elementwise_s=mb.elementwise_mb * m, bubble_s=bubble,
        tp_comm_s=comm.tp * m, cp_comm_s=comm.cp * m,
        pp_comm_s=comm.pp * m, dp_comm_s=comm.dp.mb_dp * m + comm.dp.step_dp,
        optimizer_s=optimizer_s,
        overhead_s=np.full(np.shape(step), o.step_overhead_s), step_time_s=step,
        dp_traffic_s=comm.dp.traffic, efficiency=mb.eta, gemm_flops=mb.gemm, gpus=gpus,
        tokens_per_step=tokens_step, tokens_per_s=tokens_step / step,
        samples_per_s=b * m * d / step, model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        mfu=model_flops / (step * gpus * peak), hfu=hardware_flops / (step * gpus * peak),
        achieved_flops_per_gpu=hardware_flops / (step * gpus),
        dequant_s=np.broadcast_to(mb.dequant_mb * m, np.shape(step)).astype(float),
        ep_comm_s=np.broadcast_to(comm.ep * m, np.shape(step)).astype(float))


def torchtitan_sac_recompute_flops(model: ModelSpec) -> float:
    """FLOPs per token torchtitan's op-level SAC recomputes: every second matmul of each
    layer (``planner.memory.stack_activations``), forward only."""
    h, q, kv = model.hidden_size, model.q_size, model.kv_size
    f = model.moe.top_k * model.moe.expert_ffn_size if model.moe else model.ffn_size
    widths = [(h, q + 2 * kv)] if model.fused_qkv else [(h, q), (h, kv), (h, kv)]
    widths.append((q, h))
    widths += [(h, f), (h, f), (f, h)] if model.gated_mlp else [(h, f), (f, h)]
    return 2.0 * model.num_layers * sum(a * b for a, b in widths[1::2])


def _expert_all_to_all_s(model: ModelSpec, lay: LayoutArrays, tokens_mb, act_bytes: int,
                         rc, busy_layers, intra_bps, inter_bps, inter_lat, intra_lat):
    """Seconds of expert-parallel all-to-all per micro-batch on the busiest stage."""
    ep = np.asarray(lay.ep)
    if model.moe is None or not np.any(ep > 1):
        return np.zeros(())
    t, g = lay.tp, lay.gpus_per_node
    volume = tokens_mb / t * model.moe.top_k * model.hidden_size * act_bytes
    # The EP group's ranks sit etp apart (TP fastest; etp 1: consecutive ranks), so
    # `local` of them share a node. A rank sends 1/ep of its tokens to each peer: those
    # on its node over NVLink, the others over its own network rail, both at once
    # (NCCL's all-to-all is grouped point-to-point sends); counted one after the other,
    # which errs slow.
    local = np.clip(g // expert_tp(t, lay.etp), 1, ep)
    to_node = (local - 1) / ep * volume / intra_bps + (local - 1) * intra_lat
    off_node = (ep - local) / ep * volume / inter_bps + np.where(ep > local, inter_lat, 0.0)
    one = to_node + off_node
    moe_layers = busy_layers * model.moe_layers / model.num_layers
    count = 4 + 2 * FULL_RECOMPUTE_SHARE[np.asarray(rc)]
    return np.where(ep > 1, moe_layers * count * one, 0.0)


# ---- time to train ---------------------------------------------------------------------

@dataclass(frozen=True)
class TrainingLength:
    """How much data a run sees: a token budget, or samples x epochs.

    Attributes:
        tokens: total training tokens (pretraining budgets are quoted this way).
        samples: sequences in the data set (with ``epochs``).
        epochs: passes over ``samples``.
    """

    tokens: float | None = None
    samples: int | None = None
    epochs: float = 1.0

    def __post_init__(self) -> None:
        if (self.tokens is None) == (self.samples is None):
            raise InputError('--tokens', 'give either a token budget or samples x epochs')
        from planner import limits

        if self.tokens is not None:
            limits.check('tokens', self.tokens)
        if self.samples is not None:
            limits.check('samples', self.samples)
        limits.check('epochs', self.epochs)

    def total_tokens(self, seq_len: int) -> float:
        """Tokens processed over the whole run."""
        if self.tokens is not None:
            return float(self.tokens)
        return float(self.samples) * self.epochs * seq_len  # type: ignore[arg-type]

    def steps(self, global_batch_samples, seq_len: int) -> np.ndarray:
        """Optimizer steps: epochs x samples / B, or tokens / (B x s) (fractional)."""
        return self.total_tokens(seq_len) / (np.asarray(global_batch_samples, float) * seq_len)

    def to_dict(self) -> dict[str, float | None]:
        """JSON-ready."""
        return {'tokens': self.tokens, 'samples': self.samples,
                'epochs': self.epochs if self.samples is not None else None}


@dataclass
class TrainingTimeArrays:
    """Wall time, GPU-hours and cost of a whole run per candidate.

    ``time_per_epoch_s`` is NaN for a token budget (no epoch defined).
    """

    steps: np.ndarray
    time_to_train_s: np.ndarray
    time_per_epoch_s: np.ndarray
    gpu_hours: np.ndarray
    cost_usd: np.ndarray


def training_time(step_time_s, global_batch_samples, seq_len: int, gpus,
                  length: TrainingLength, price_per_gpu_hour_usd: float) -> TrainingTimeArrays:
    """steps = data / B; wall = steps x step time; GPU-hours = wall x GPUs (Narayanan et al. 2021
    eq. 4 is its closed form).

    The last, partial step is counted as a fraction, as Narayanan et al.'s
    T_end2end = 8·T·P/(n·X) does.
    """
    step_time_s = np.asarray(step_time_s, float)
    steps = length.steps(global_batch_samples, seq_len)
    wall = steps * step_time_s
    if length.samples is not None:
        per_epoch = length.samples / np.asarray(global_batch_samples, float) * step_time_s
    else:
        per_epoch = np.full(np.shape(wall), math.nan)
    gpu_hours = wall * np.asarray(gpus, float) / 3600.0
    return TrainingTimeArrays(steps=np.broadcast_to(steps, np.shape(wall)), time_to_train_s=wall,
                              time_per_epoch_s=per_epoch, gpu_hours=gpu_hours,
                              cost_usd=gpu_hours * price_per_gpu_hour_usd)


def step_time_from_throughput(flops_per_token: float, tokens_per_step: float, gpus: int,
                              achieved_flops_per_gpu: float) -> float:
    """Step time implied by a measured per-GPU throughput (X in Narayanan eq. 4)."""
    return flops_per_token * tokens_per_step / (gpus * achieved_flops_per_gpu)
