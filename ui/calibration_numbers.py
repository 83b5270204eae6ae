"""What a finished calibration measured, as numbers beside batchfit's predictions, and
how long a full calibration would take, judged from a quick one. Qt-free.

Step time: each full-depth point the child measured (``step_time.full_depth_step_s``,
extrapolated from its 1- and 2-layer proxies) against :func:`planner.calibrate.fit.
predict_step_time` with the profile applied, as a plan would use it. Memory: each
measured full-depth peak against batchfit's estimate of the same configuration
(``memory.full_depth_peak_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.calibrate.records import MeasuredProfile

# The quick check: the same pipeline on a few tokens (CPU, fp32: bf16 is emulated on most
# CPUs and took about 12 minutes for GPT-2 124M on 2 cores).
QUICK_SEQ_LEN = 128
QUICK_MICRO_BATCHES = (1,)
QUICK_REPEATS = 2
QUICK_PRECISION = 'fp32'
FP32_ADAM_BYTES_PER_PARAM = 16  # fp32 weights, gradients and two Adam moments (recipe fp32)


def quick_memory_limit_bytes(params: int) -> int:
    """The quick check's memory limit: room for the model's states and half again, so the
    largest-micro-batch probe (a full-depth step) stays a few micro-batches (a CPU has
    tens of GiB: unlimited, it probed micro-batch 111 of GPT-2 124M; at 2 GiB GPT-2 did
    not fit at all)."""
    return int(1.5 * FP32_ADAM_BYTES_PER_PARAM * params + 2**29)


# A full CPU calibration (planner.calibrate.__main__ and pipeline defaults).
FULL_CPU_MICRO_BATCHES = (1, 2, 4)
FULL_CPU_REPEATS = 10
WARMUP = 2
PROXY_DEPTHS = (1, 2)


@dataclass(frozen=True)
class StepRow:
    """One measured step against the calibrated prediction."""

    micro_batch: int
    seq_len: int
    measured_s: float
    predicted_s: float


@dataclass(frozen=True)
class MemoryRow:
    """One measured peak against batchfit's estimate."""

    micro_batch: int
    seq_len: int
    measured_bytes: float
    estimated_bytes: float


def result_rows(p: MeasuredProfile) -> tuple[list[StepRow], list[MemoryRow]]:
    """The profile's measured step times and peaks beside what batchfit predicts."""
    from planner.calibrate.apply import (
        device_spec_from_profile,
        efficiency_from_profile,
        step_options_from_profile,
    )
    from planner.calibrate.fit import predict_step_time

    model = p.model_spec()
    gpu = device_spec_from_profile(p)
    calibration = efficiency_from_profile(p, 'calibration')
    options = step_options_from_profile(p, model)
    steps = [StepRow(int(b), int(s), float(t),
                     predict_step_time(model, int(s), int(b), gpu, p.precision, p.attention,
                                       calibration, options))
             for b, s, t in p.step_time.full_depth_step_s]
    memory = [MemoryRow(int(b), int(s), float(measured), float(estimated))
              for b, s, measured, estimated in p.memory.full_depth_peak_bytes]
    return steps, memory


def _work(hidden: int, seq_len: int, micro_batches, rounds: int) -> float:
    """Relative proxy work: tokens x layers x (dense + attention FLOPs per token-layer)."""
    per_token_layer = 24.0 * hidden * hidden + 4.0 * seq_len * hidden
    return sum(rounds * depth * b * seq_len * per_token_layer
               for depth in PROXY_DEPTHS for b in micro_batches)


def full_cpu_estimate_s(quick: MeasuredProfile, seq_len: int) -> float:
    """About how long a full CPU calibration at ``seq_len`` takes, from a quick check.

    The quick check's wall time scaled by the proxy work (tokens, layers, FLOPs per
    token with the attention term) of the full run's micro-batches 1, 2, 4 and 10 rounds
    against its own; fixed costs (starting torch) are scaled too, so this leans long.
    """
    h = quick.model_spec().hidden_size
    quick_work = _work(h, quick.seq_len, QUICK_MICRO_BATCHES, QUICK_REPEATS + WARMUP)
    full_work = _work(h, seq_len, FULL_CPU_MICRO_BATCHES, FULL_CPU_REPEATS + WARMUP)
    return float(quick.elapsed_s) * full_work / quick_work
