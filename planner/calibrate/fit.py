"""Turning probe measurements into the planner's parameters (numpy only, no torch).

CALIBRATION.md §1 and §6: fit a model from a few robust measurements instead of
searching by trial. The pieces:

* :func:`theil_sen`: the median of pairwise slopes, robust to the one slow outlier
  a noisy machine produces;
* :func:`extrapolate_depth`: time or memory at two proxy depths -> the fixed and
  per-layer parts -> the full depth;
* :func:`fit_step_time`: the full-depth step times -> the planner's own step-time
  model, so that ``planner.timing.step_time`` reproduces them: a GEMM efficiency per
  measured GEMM size (a :class:`~planner.timing.efficiency.CalibrationProfile` on the
  ``gemm_flops`` axis) and a fixed per-step cost (``StepTimeOptions.step_overhead_s``);
* :func:`predict_step_time`: the planner's prediction with those parameters (what
  ``batchfit plan`` computes, for one single-device configuration);
* :func:`fit_latency_bandwidth`: collective times -> t(S) = alpha + S / beta;
* :func:`largest_fitting_micro_batch`: the estimator with the measured overheads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from planner.calibrate.records import PROBE_LOOP
from planner.hardware.devices import GpuSpec
from planner.memory.peak import Overheads, estimate
from planner.memory.training import TrainingSetup
from planner.models.spec import ModelSpec
from planner.timing.efficiency import CalibrationProfile
from planner.timing.step_time import LayoutArrays, StepTimeOptions, step_time_arrays

MAX_MICRO_BATCH = 1 << 16  # the largest micro-batch the fit-based search considers


def theil_sen(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Robust line fit: (intercept, slope) with slope the median of pairwise slopes.

    The intercept is the median of ``y - slope * x``. Pairs with equal ``x`` are
    skipped; with fewer than two distinct ``x`` the slope is 0 and the intercept the
    median of ``y``.

    Raises:
        ValueError: empty input or ``x`` and ``y`` of different lengths.
    """
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    if xs.size == 0 or xs.shape != ys.shape:
        raise ValueError('theil_sen needs equally long, non-empty x and y')
    i, j = np.triu_indices(xs.size, k=1)
    dx = xs[j] - xs[i]
    keep = dx != 0
    if not np.any(keep):
        return float(np.median(ys)), 0.0
    slope = float(np.median((ys[j] - ys[i])[keep] / dx[keep]))
    return float(np.median(ys - slope * xs)), slope


def extrapolate_depth(value_at: dict[int, float], full_layers: int) -> tuple[float, float, float]:
    """(fixed, per_layer, full) from a quantity measured at two or more proxy depths.

    ``value_at`` maps a depth (layers) to the measured value; the fixed part is the
    embedding, head, loss and per-step costs, the per-layer part what one more
    layer adds (Theil-Sen over the depths). One depth cannot separate the two: the
    value is then taken as all per-layer and scaled with the depth.

    Raises:
        ValueError: no depth given.
    """
    if not value_at:
        raise ValueError('extrapolate_depth needs at least one depth')
    depths = sorted(value_at)
    if len(depths) == 1:
        d = depths[0]
        per_layer = value_at[d] / d
        return 0.0, per_layer, per_layer * full_layers
    fixed, per_layer = theil_sen(depths, [value_at[d] for d in depths])
    return fixed, per_layer, fixed + per_layer * full_layers


# ---- step time ---------------------------------------------------------------------------

@dataclass(frozen=True)
class StepPoint:
    """One full-depth step time to fit, on one device without parallelism.

    Attributes:
        micro_batch: sequences per step.
        seq_len: tokens per sequence.
        forward_backward_s: forward, loss and backward of one micro-batch.
        optimizer_s: the optimizer step (and zeroing the gradients).
        for_efficiency: False for a fixed-cost probe (a few tokens, CPU only): it
            anchors the intercept and gets no efficiency point of its own.
    """

    micro_batch: int
    seq_len: int
    forward_backward_s: float
    optimizer_s: float
    for_efficiency: bool = True

    @property
    def step_s(self) -> float:
        """The whole optimizer step."""
        return self.forward_backward_s + self.optimizer_s


@dataclass(frozen=True)
class StepTimeFit:
    """What makes the planner's step-time model reproduce the measured steps.

    Attributes:
        efficiency_points: ``(gemm_flops, efficiency)`` of the measured GEMM sizes.
        overhead_s: fixed cost per step the FLOP and byte model does not explain
            (launch and framework overhead, the optimizer's per-tensor cost).
        intercept_s: the forward-backward part of ``overhead_s`` (Theil-Sen intercept).
        optimizer_excess_s: measured optimizer time minus the modelled one.
        clamped: efficiencies clamped to (0, 1] (a sign the peak is too low).
    """

    efficiency_points: tuple[tuple[float, float], ...]
    overhead_s: float
    intercept_s: float
    optimizer_excess_s: float
    clamped: int = 0

    def calibration_profile(self, source: str) -> CalibrationProfile:
        """The efficiency points as the planner's profile (on the ``gemm_flops`` axis)."""
        return CalibrationProfile(axis='gemm_flops', points=self.efficiency_points, source=source)

    def step_options(self, base: StepTimeOptions | None = None) -> StepTimeOptions:
        """``base`` with the fitted fixed per-step cost."""
        return replace(base or StepTimeOptions(), step_overhead_s=self.overhead_s)


MIN_EFFICIENCY = 1e-4


def _single_device(micro_batch: int) -> LayoutArrays:
    one = (1,)
    return LayoutArrays(nodes=np.array(one), gpus_per_node=np.array(one), tp=np.array(one),
                        pp=np.array(one), vpp=np.array(one), cp=np.array(one), dp=np.array(one),
                        micro_batch=np.array([micro_batch]), grad_accum=np.array(one),
                        zero=np.array([0]), recompute=np.array([0]),
                        sequence_parallel=np.array([False]))


class StepTerms(NamedTuple):
    """The planner's parts of one single-device step (seconds; FLOPs)."""

    gemm_s_at_full_efficiency: float
    elementwise_s: float
    optimizer_s: float
    gemm_flops: float  # the representative GEMM's size (the efficiency axis)


def planner_terms(model: ModelSpec, micro_batch: int, seq_len: int, gpu: GpuSpec,
                  precision: str, attention: str,
                  options: StepTimeOptions | None = None) -> StepTerms:
    """How the planner splits a step: GEMMs at efficiency 1, elementwise, optimizer."""
    unit = CalibrationProfile(axis='gemm_flops', points=((1.0, 1.0),), source='unit')
    st = step_time_arrays(model, seq_len, gpu, None, _single_device(micro_batch),
                          precision=precision, attention=attention, framework='hf',
                          options=options or StepTimeOptions(), calibration=unit)
    return StepTerms(float(st.compute_s[0]), float(st.elementwise_s[0]),
                     float(st.optimizer_s[0]), float(st.gemm_flops[0]))


def fit_step_time(model: ModelSpec, points: Sequence[StepPoint], gpu: GpuSpec, precision: str,
                  attention: str, options: StepTimeOptions | None = None) -> StepTimeFit:
    """Fit the planner's step model to full-depth measurements.

    The planner times a step as GEMM FLOPs / (peak x efficiency) + elementwise bytes /
    bandwidth + optimizer bytes / bandwidth + a fixed overhead. With ``x`` the GEMM
    time at efficiency 1 and ``y`` the measured forward-backward time less the
    modelled elementwise time, a Theil-Sen line ``y = intercept + x / efficiency``
    over all points gives the intercept; each measured point then gets its own
    efficiency ``x / (y - intercept)``, so the planner reproduces every point and
    interpolates between them (in log GEMM size). The optimizer's measured time
    less its modelled time joins the fixed overhead.

    With a single point and no fixed-cost probe the intercept is 0.

    Raises:
        ValueError: no point usable for efficiency.
    """
    opts = options or StepTimeOptions()
    rows = [(p, *planner_terms(model, p.micro_batch, p.seq_len, gpu, precision, attention, opts))
            for p in points]
    if not any(p.for_efficiency for p, *_ in rows):
        raise ValueError('fit_step_time needs a point measured at the target sequence length')
    xs = [gemm for _, gemm, *_ in rows]
    ys = [p.forward_backward_s - elem for p, _, elem, _, _ in rows]
    intercept, _ = theil_sen(xs, ys) if len(rows) > 1 else (0.0, 0.0)
    intercept = max(intercept, 0.0)  # a negative launch cost is noise, not a saving
    by_size: dict[float, list[float]] = {}
    clamped = 0
    for (p, gemm, _, _, flops), y in zip(rows, ys, strict=True):
        if not p.for_efficiency:
            continue
        work = y - intercept
        eff = gemm / work if work > 0 else 1.0
        if not MIN_EFFICIENCY <= eff <= 1.0:
            clamped += 1
            eff = min(max(eff, MIN_EFFICIENCY), 1.0)
        by_size.setdefault(flops, []).append(eff)
    efficiency = tuple(sorted((x, float(np.median(e))) for x, e in by_size.items()))
    excess = float(np.median([p.optimizer_s - opt for p, _, _, opt, _ in rows]))
    return StepTimeFit(efficiency_points=efficiency, overhead_s=max(intercept + excess, 0.0),
                       intercept_s=intercept, optimizer_excess_s=excess, clamped=clamped)


def predict_step_time(model: ModelSpec, seq_len: int, micro_batch: int, gpu: GpuSpec,
                      precision: str, attention: str, calibration: CalibrationProfile,
                      options: StepTimeOptions) -> float:
    """The planner's step time of one device at (micro-batch, sequence) with a profile."""
    st = step_time_arrays(model, seq_len, gpu, None, _single_device(micro_batch),
                          precision=precision, attention=attention, framework='hf',
                          options=options, calibration=calibration)
    return float(st.step_time_s[0])


# ---- collectives -------------------------------------------------------------------------

def bus_bandwidth(size_bytes: float, time_s: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) of an all-reduce, nccl-tests' definitions (CALIBRATION.md §10)."""
    algbw = size_bytes / time_s
    return algbw, algbw * 2 * (world_size - 1) / world_size


def fit_latency_bandwidth(sizes_bytes: Sequence[float], times_s: Sequence[float]
                          ) -> tuple[float, float]:
    """(alpha_s, beta_bytes_per_s) of t(S) = alpha + S / beta, by Theil-Sen.

    Raises:
        ValueError: fewer than two sizes, or times that do not grow with size.
    """
    if len(set(sizes_bytes)) < 2:
        raise ValueError('the latency-bandwidth fit needs two or more sizes')
    alpha, slope = theil_sen(sizes_bytes, times_s)
    if slope <= 0:
        raise ValueError('collective times do not grow with the message size')
    return max(alpha, 0.0), 1.0 / slope


# ---- memory ------------------------------------------------------------------------------

def largest_fitting_micro_batch(model: ModelSpec, seq_len: int, precision: str, attention: str,
                                gpu: GpuSpec, overheads: Overheads, *,
                                scale: float = 1.0, below: int = MAX_MICRO_BATCH + 1) -> int:
    """The largest micro-batch whose predicted peak fits ``gpu`` (0: not even 1).

    ``scale`` multiplies the estimator's tensor peak (a probe's measured / predicted
    ratio); ``below`` caps the answer (after a failed probe). Doubling, then bisection.
    """

    def fits(b: int) -> bool:
        setup = TrainingSetup(seq_len=seq_len, micro_batch=b, precision=precision,
                              attention=attention, framework='hf', loop=PROBE_LOOP)
        est = estimate(model, setup, gpu, margin_fraction=0.0, overheads=overheads)
        extra = (scale - 1.0) * est.tensor_peak_bytes * (1 + overheads.allocator_fraction)
        return est.total_bytes + extra <= gpu.memory_bytes

    cap = min(below - 1, MAX_MICRO_BATCH)
    if cap < 1 or not fits(1):
        return 0
    lo = 1  # fits
    while True:
        nxt = min(2 * lo, cap)
        if nxt == lo:
            return lo
        if not fits(nxt):
            hi = nxt  # does not fit
            break
        lo = nxt
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
