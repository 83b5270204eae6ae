"""The stacks' own speed switches: torchtitan's per-block torch.compile, torchao float8
linears and async TP, and Megatron's TP communication overlap.

All three are off by default, as in torchtitan's JobConfig (pytorch/torchtitan
torchtitan/config/job_config.py: ``Compile.enable``, ``Model.converters``,
``Parallelism.enable_async_tensor_parallel``).

* **torch.compile** (``[compile] enable = true``, ``components = ["model", "loss"]``):
  torchtitan compiles each TransformerBlock (torchtitan/models/llama3/infra/parallelize.py
  ``apply_compile``); Inductor fuses the norms, activations, RoPE and residual adds
  between the GEMMs and the float8 casts. Modelled as one divisor on a micro-batch's
  compute (GEMMs and memory-bound work), :data:`COMPILE_SPEEDUP`, except the attention
  core (the same SDPA flash kernels either way). Its memory saving
  (published: 82.4 -> 77.0 GiB on Table 1, 67.0 -> 62.0 on Table 3) is not subtracted:
  the estimate stays on the high side.
* **float8** (``--precision fp8`` on torchtitan: the ``fsdp-fp8`` recipe): torchao's
  ``Float8Linear`` with dynamic tensorwise scaling replaces every ``nn.Linear`` of the
  layers (not the output head, ``filter_fqns = ["output"]``; MoE experts are grouped GEMMs,
  not ``nn.Linear``, and stay bf16). Its GEMMs run at :data:`FP8_GEMM_SPEEDUP` times the
  bf16 rate, and each cast is memory-bound: torchao's roofline
  (pytorch/ao torchao/testing/training/roofline_utils.py
  ``get_tensor_memory_traffic_ovhd_s``, tensorwise) reads the bf16 input once for its
  absolute maximum (fused into the previous op under compile) and once more to write two
  fp8 copies (row- and column-major): 2 + 2 + 2 x 1 bytes per element of each linear's
  input forward and of its output gradient backward; a weight costs 2 (amax) + 2 x 3
  (forward and backward casts) bytes per element once per micro-batch, on the FSDP shard
  when the all-gather is in fp8 (``enable_fsdp_float8_all_gather``, which also halves the
  matmul weights' all-gather bytes: ``planner.timing.step_time._stage_bytes``).
* **async TP** (``enable_async_tensor_parallel``, compile required): the TP all-gathers
  and reduce-scatters are decomposed and overlapped with the GEMMs
  (``torch._inductor.config._micro_pipeline_tp``); modelled as the hidden fraction
  :data:`ASYNC_TP_OVERLAP` of the TP collectives.
* **Megatron's TP overlap** (``--tp-comm-overlap``, off by default in Megatron-LM:
  megatron/core/model_parallel_config.py ``tp_comm_overlap``): Transformer Engine's
  userbuffers overlap each TP all-gather and reduce-scatter with a GEMM; modelled as the
  hidden fraction :data:`TP_COMM_OVERLAP` of the TP collectives.

What each constant was fitted on, and validated against, is said beside it and in
docs/BENCHMARKS.md ("Stacks: torchtitan float8, compile and async TP"; "Megatron switches,
2026-11-25").
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from planner.memory.activations import FULL_RECOMPUTE_SHARE, by_recompute_code

if TYPE_CHECKING:
    from planner.models.spec import ModelSpec
    from planner.timing.step_time import StepTimeOptions

# Compute time (GEMMs + memory-bound work) of eager torchtitan / compiled torchtitan.
# FITTED on torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 1 (Llama-3.1-8B,
# FSDP 8, local batch 2, seq 8192, selective op AC): 5,762 -> 6,667 tokens/s/GPU with
# compile, i.e. 1.157x; the divisor that gives this model 1.158x on that row (the
# attention core, 13% of its FLOPs with the flash backward's recomputed scores, left as it
# is) is 1.185. VALIDATED on Table 3 (the same on 128 GPUs: 5,605 -> 6,514 published,
# 1.162x; 1.159x modelled); see docs/BENCHMARKS.md.
COMPILE_SPEEDUP = 1.185

# fp8 tensor-core GEMM rate / bf16 rate on the converted linears. The H100 datasheet says
# 2x (1,979 vs 989 TFLOP/s dense); torchao's roofline assumes the same achievable fraction
# of both (roofline_utils.py ``pct_achievable_gemm_tops`` 0.78); end to end less is
# reached. FITTED on Table 1: with compile, 6,667 -> 8,532 tokens/s/GPU adding float8
# (1.280x), which this model gives at 1.52 (1.279x; 2.0 would give about 1.40x). VALIDATED
# on Table 3 (6,514 -> 8,380 published, 1.286x; 1.282x modelled) and on the other float8
# rows' absolute throughput (Tables 2, 4-6; docs/BENCHMARKS.md).
FP8_GEMM_SPEEDUP = 1.52

# Bytes moved per element by torchao's tensorwise dynamic cast (roofline_utils.py): an
# activation or gradient (read for amax unless fused with the previous op, read again and
# written twice in fp8), and a weight (amax read, then a forward and a backward cast).
CAST_BYTES_FUSED = 4.0
CAST_BYTES_EAGER = 6.0
WEIGHT_CAST_BYTES = 8.0

# Fraction of TP collective time async TP hides behind the GEMMs. FITTED on Table 4
# (Llama-3.1-70B, FSDP 32 x TP 8, compile + float8, full AC: 829 -> 876 tokens/s/GPU with
# async TP, 1.057x; 0.26 gives this model 1.057x). VALIDATED against torchtitan
# benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (70B and 8B speed-ups of 1.04-1.16)
# in docs/BENCHMARKS.md.
ASYNC_TP_OVERLAP = 0.26


# Megatron's --tp-comm-overlap: the fraction of the TP collectives' time (as
# planner.timing.step_time._tp_comm_s charges it) that Transformer Engine's userbuffers
# hide behind the GEMMs. Megatron-LM passes no userbuffer layout unless
# --tp-comm-overlap-cfg is given (megatron/training/initialize.py
# _initialize_tp_communicators), so TE's defaults apply (NVIDIA/TransformerEngine
# transformer_engine/pytorch/module/base.py initialize_ub): the all-gathers before the QKV
# and FC1 GEMMs and of the output gradients before the proj and FC2 dgrad GEMMs by
# ring_exchange (split in TP chunks, 1 SM), the reduce-scatters after the proj and FC2 GEMMs
# by "pipeline" (4 splits, 16 SMs), and the backward's input all-gathers and
# gradient reduce-scatters of QKV and FC1 in bulk beside their dgrad/wgrad GEMMs (16 SMs);
# pipeline and bulk GEMMs run on the SMs the communication leaves (set_sm_margin;
# transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp ``_math_sms``).
# DERIVED bound: if every GEMM outlasts its collective, only the last of the 4 splits of
# the two forward reduce-scatters stays exposed, 2 x 1/4 x half an all-reduce of the 4
# all-reduces a layer is charged: at most 0.94 hidden. Less is: the SM margin slows the
# pipeline and bulk GEMMs, split GEMMs run less efficiently, and at TP 8 the attention
# output projection (h x h/t) of a bf16 model narrower than about h = 10,000 is shorter
# than its reduce-scatter at this model's rates; which of these costs how much is
# not isolated, so the fraction is FITTED: on the Megatron-LM README weak-scaling rows with
# TP > 1 (7.1B, 16B, 32B, 70B, 177B, 462B, H100 bf16; the README's benchmark configuration
# names --tp-comm-overlap), 0.52 puts their mean signed error at zero (0.50-0.55 give the
# same RMS, 4.3 %; benchmarks/megatron_tp_overlap_fit.py). VALIDATED on the Megatron-Bridge
# 26.04.01 H100 Llama rows (fp8, their recipes set tp_comm_overlap, with tuned userbuffer
# layouts): Llama-3-70B -6.0 -> +1.7 %, Llama-3.1-405B -9.6 -> +2.5 % (with its bf16 main
# grads; docs/BENCHMARKS.md "Megatron switches, 2026-11-25"). The Hopper
# efficiency curve's eta_max (planner.timing.efficiency) was set from the same README's MFU
# figures, so the README rows are not independent of it.
TP_COMM_OVERLAP = 0.52


def with_switches(options: StepTimeOptions, *, compile: bool, async_tp: bool,
                  tp_comm_overlap: bool = False) -> StepTimeOptions:
    """``options`` with torch.compile's, async TP's and Megatron's TP overlap constants
    when they are on."""
    if compile:
        options = replace(options, compute_speedup=COMPILE_SPEEDUP)
    if async_tp:
        options = replace(options, tp_overlap=max(options.tp_overlap, ASYNC_TP_OVERLAP))
    if tp_comm_overlap:
        options = replace(options, tp_overlap=max(options.tp_overlap, TP_COMM_OVERLAP))
    return options


def compiled_compute_s(model: ModelSpec, seq_len: int, causal: bool, rc, busy_layers,
                       tokens_mb, t, rate, gemm_mb, elementwise_mb, speedup: float):
    """(GEMM, memory-bound) seconds of a micro-batch under per-block torch.compile: both
    divided by ``speedup``, except the attention core, which runs in the same SDPA flash
    kernels compiled or not (Inductor calls them, it does not generate them). The core is
    not recomputed by torchtitan's op-level SAC (it saves the SDPA outputs), only by full AC.
    The core includes the flash backward's recomputed scores (causal: flash attention;
    ``planner.timing.step_time.flash_backward_rescore_flops``), which run inside the same
    SDPA backward kernel."""
    if speedup == 1.0:
        return gemm_mb, elementwise_mb
    core_fwd = (2.0 if causal else 4.0) * seq_len * model.q_size  # per token and layer
    rescore = 0.5 if causal else 0.0  # flash backward: 2.5x its forward, not 2x
    core = core_fwd * (3.0 + rescore + FULL_RECOMPUTE_SHARE[np.asarray(rc)])
    core_mb = np.minimum(busy_layers * core * tokens_mb / t / rate, gemm_mb)
    return (gemm_mb - core_mb) / speedup + core_mb, elementwise_mb / speedup


def _converted_linears(model: ModelSpec) -> list[tuple[int, float]]:
    """(in, out) widths of one layer's ``nn.Linear`` modules that Float8Linear replaces,
    the MLP's weighted by the share of layers with a dense MLP (MoE experts are not
    ``nn.Linear``)."""
    h, q, kv = model.hidden_size, model.q_size, model.kv_size
    shapes: list[tuple[int, float]] = ([(h, q + 2 * kv)] if model.fused_qkv
                                       else [(h, q), (h, kv), (h, kv)])
    shapes.append((q, h))
    f = model.ffn_size
    dense_share = (model.dense_layers / model.num_layers) if model.moe is not None else 1.0
    mlp = [(h, f), (h, f), (f, h)] if model.gated_mlp else [(h, f), (f, h)]
    return shapes + [(a, b * dense_share) for a, b in mlp]


def float8_linear_params(model: ModelSpec) -> float:
    """Weights of one layer's converted linears (elements, before TP)."""
    return float(sum(a * b for a, b in _converted_linears(model)))


def float8_saved_flops(model: ModelSpec, recompute_flops_per_layer: np.ndarray) -> np.ndarray:
    """GEMM FLOPs per token and layer that float8 takes off the bf16 rate, by recompute
    code: the converted linears' forward, input-gradient and weight-gradient GEMMs
    (6 FLOPs per weight), their forward again under full recompute (8), and the linears
    torchtitan's op-level SAC recomputes (``recompute_flops_per_layer[1]``), times
    ``1 - 1/FP8_GEMM_SPEEDUP``."""
    p = float8_linear_params(model)
    linear = by_recompute_code(6.0 * p, 6.0 * p + recompute_flops_per_layer[1], 8.0 * p)
    return linear * (1.0 - 1.0 / FP8_GEMM_SPEEDUP)


def float8_cast_bytes(model: ModelSpec, compiled: bool) -> np.ndarray:
    """Memory-bound bytes per token and layer of float8's activation and gradient casts,
    by recompute code (full recompute casts the inputs again; op-level SAC recomputes
    about half of the linears)."""
    per = CAST_BYTES_FUSED if compiled else CAST_BYTES_EAGER
    shapes = _converted_linears(model)
    inputs = sum(a * (b > 0) for a, b in shapes)  # a linear of no width casts nothing
    outputs = sum(b for _, b in shapes)
    once = per * (inputs + outputs)
    return by_recompute_code(once, once + 0.5 * per * inputs, once + per * inputs)
