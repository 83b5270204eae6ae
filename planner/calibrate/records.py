"""The records a calibration profile is made of (frozen dataclasses, units in the names).

``planner.calibrate.profile`` reads and writes them as JSON (schema
``batchfit.calibration/1``, documented in ``docs/calibration.md``);
``planner.calibrate.apply`` turns them into the planner's inputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.models.spec import ModelSpec, MoESpec

# The probes' step (planner/calibrate/probes.py ``train_step``) keeps only the loss, as
# the HF Trainer does: its estimate counts no held model output.
PROBE_LOOP = 'trainer'

SCHEMA = 'batchfit.calibration/1'
DEVICE_KINDS: tuple[str, ...] = ('cuda', 'cpu')


def plain(value: Any) -> Any:
    """Tuples to lists, recursively (JSON-ready)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


# ---- the records --------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceInfo:
    """The device a profile was measured on.

    Attributes:
        kind: ``cuda`` or ``cpu``.
        name: as torch reports it (``NVIDIA H100 80GB HBM3``), or the CPU model.
        uuid: ``GPU-...`` for a CUDA device, None for the CPU.
        catalog_key: the matching ``batchfit gpus --catalog`` entry, or None.
        memory_bytes: total device memory (host memory, or the emulated limit, on CPU).
        compute_capability: ``"9.0"`` on CUDA.
        count: devices used (more than one only for the collective step).
    """

    kind: str
    name: str
    uuid: str | None
    catalog_key: str | None
    memory_bytes: int
    compute_capability: str | None = None
    count: int = 1


@dataclass(frozen=True)
class Environment:
    """The software stack; results are only comparable under the same one.

    Attributes:
        torch_version: ``torch.__version__``.
        cuda_version: ``torch.version.cuda`` (None on a CPU build).
        cudnn_version: ``torch.backends.cudnn.version()``.
        nccl_version: ``torch.cuda.nccl.version()`` as ``2.21.5``.
        python_version: the calibrating interpreter.
        allocator_config: ``PYTORCH_CUDA_ALLOC_CONF`` as the child saw it.
        expandable_segments: whether that configuration enables them.
        cuda_context_bytes: device memory in use after CUDA initialisation that the
            caching allocator does not hold (driver context, kernels, libraries).
        cpu_threads: ``torch.get_num_threads()``.
    """

    torch_version: str
    cuda_version: str | None
    cudnn_version: str | None
    nccl_version: str | None
    python_version: str
    allocator_config: str
    expandable_segments: bool
    cuda_context_bytes: int
    cpu_threads: int


@dataclass(frozen=True)
class MatmulPoint:
    """Achieved throughput of one of the model's GEMMs at one token count.

    ``time_s`` covers the forward GEMM (tokens x k @ k x n) and both backward ones
    (input and weight gradients), min of k repeats; ``flops`` is 3 x 2·tokens·k·n.
    """

    name: str
    tokens: int
    k: int
    n: int
    time_s: float
    flops: float

    @property
    def flops_per_s(self) -> float:
        """Achieved FLOP/s."""
        return self.flops / self.time_s


@dataclass(frozen=True)
class StepMeasurement:
    """One proxy configuration: time per step and memory.

    Attributes:
        layers: proxy depth.
        micro_batch: sequences per step.
        seq_len: tokens per sequence.
        forward_backward_s: min over repeats of forward + loss + backward.
        optimizer_s: min over repeats of the optimizer step and zeroing.
        repeats: timed steps behind the minima.
        peak_allocated_bytes: ``max_memory_allocated`` (CUDA) or MemTracker's peak (CPU).
        peak_reserved_bytes: ``max_memory_reserved`` (CUDA); the same as allocated on CPU.
        num_alloc_retries: allocator flush-and-retry count (near-OOM; 0 on CPU).
        num_ooms: OOMs the allocator saw.
        estimated_tensor_peak_bytes: batchfit's estimate for this configuration.
        fake_tensor_peak_bytes: MemTracker under FakeTensorMode for this configuration.
        memory_source: ``cuda`` or ``memtracker``.
        for_efficiency: False for the CPU's few-token fixed-cost probe.
    """

    layers: int
    micro_batch: int
    seq_len: int
    forward_backward_s: float
    optimizer_s: float
    repeats: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    num_alloc_retries: int
    num_ooms: int
    estimated_tensor_peak_bytes: int
    fake_tensor_peak_bytes: int
    memory_source: str
    for_efficiency: bool = True


@dataclass(frozen=True)
class StepTimeRecord:
    """The step-time fit in the planner's terms (see ``planner.calibrate.fit``).

    Attributes:
        compute_dtype: the recipe's compute dtype the efficiencies refer to.
        reference_peak_flops_per_s: the peak the efficiencies are fractions of.
        reference: ``catalog:<key>`` (the catalog's dense peak) or ``measured`` (the best
            GEMM throughput measured here: CPUs and GPUs the catalog lacks).
        memory_bandwidth_bytes_per_s: measured device-memory copy bandwidth.
        efficiency_points: ``(gemm_flops, efficiency)`` pairs.
        overhead_s: fixed per-step cost at the profile model's full depth.
        overhead_fixed_s: the part of it that does not grow with depth.
        overhead_per_layer_s: what each layer adds to it.
        full_depth_step_s: ``(micro_batch, seq_len, step_s)`` extrapolated to full depth.
        max_residual_fraction: largest |fit - measured| / measured over the points.
    """

    compute_dtype: str
    reference_peak_flops_per_s: float
    reference: str
    memory_bandwidth_bytes_per_s: float
    efficiency_points: tuple[tuple[float, float], ...]
    overhead_s: float
    overhead_fixed_s: float
    overhead_per_layer_s: float
    full_depth_step_s: tuple[tuple[int, int, float], ...]
    max_residual_fraction: float


@dataclass(frozen=True)
class MemoryRecord:
    """Measured non-tensor overheads (the planner's ``Overheads``), in bytes.

    Attributes:
        cuda_context_bytes: see :attr:`Environment.cuda_context_bytes` (0 on CPU).
        workspace_bytes: allocated bytes beyond the exact tensor peak (cuBLAS
            workspaces, CUDA kernels saving other tensors; 0 on CPU).
        nccl_bytes: device memory NCCL took (measured with ``--collectives`` on 2+ GPUs,
            else the estimator's default).
        allocator_fraction: max_memory_reserved / max_memory_allocated - 1 at the
            largest probe (0 on CPU: no caching allocator).
        estimator_ratio: measured / estimated tensor peak, median over the probes.
        full_depth_peak_bytes: ``(micro_batch, seq_len, measured, estimated)``: the
            proxy's peak extrapolated to the full depth (per-layer and fixed parts from
            the two depths) beside the estimator's tensor peak of the full model.
    """

    cuda_context_bytes: int
    workspace_bytes: int
    nccl_bytes: int
    allocator_fraction: float
    estimator_ratio: float
    full_depth_peak_bytes: tuple[tuple[int, int, int, int], ...] = ()


@dataclass(frozen=True)
class ProbeRecord:
    """One probe of the full-depth model at the predicted edge (a fresh process).

    Attributes:
        micro_batch: sequences per step.
        fits: it trained without OOM (and without allocator retries).
        peak_allocated_bytes: measured tensor peak (0 when it ran out of memory).
        peak_reserved_bytes: measured reserved peak.
        predicted_total_bytes: the estimator's total with the measured overheads.
        message: the OOM or failure in words ('' when it fit).
    """

    micro_batch: int
    fits: bool
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    predicted_total_bytes: int
    message: str = ''


@dataclass(frozen=True)
class MaxMicroBatchRecord:
    """The largest micro-batch of the full model on one device.

    Attributes:
        capacity_bytes: the memory it must fit.
        predicted: the estimator's answer with the measured overheads (0: not even 1).
        confirmed: the largest probed micro-batch that fit (None: none was probed).
        probes: the probes, in order.
    """

    capacity_bytes: int
    predicted: int
    confirmed: int | None
    probes: tuple[ProbeRecord, ...] = ()


@dataclass(frozen=True)
class CollectivePoint:
    """All-reduce of one size: min over repeats of the slowest rank's time."""

    size_bytes: int
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float


@dataclass(frozen=True)
class CollectiveRecord:
    """The optional all-reduce sweep.

    Attributes:
        backend: ``nccl`` or ``gloo``.
        world_size: processes (GPUs) taking part.
        points: one per size.
        alpha_s: fitted latency of t(S) = alpha + S / beta.
        beta_bytes_per_s: fitted algorithm bandwidth.
        nccl_memory_bytes: device memory the NCCL communicator took (None on gloo).
    """

    backend: str
    world_size: int
    points: tuple[CollectivePoint, ...]
    alpha_s: float
    beta_bytes_per_s: float
    nccl_memory_bytes: int | None = None

    @property
    def peak_busbw_bytes_per_s(self) -> float:
        """The best bus bandwidth measured (large messages)."""
        return max(p.busbw_bytes_per_s for p in self.points)


@dataclass(frozen=True)
class MeasuredProfile:
    """Everything one calibration run measured and fitted.

    Attributes:
        schema: ``batchfit.calibration/1``.
        created: UTC time of the run, ISO 8601 (``2026-05-01T12:00:00Z``).
        batchfit_version: the version that wrote it.
        device: what it ran on.
        environment: the software stack.
        model: the target model's ``ModelSpec`` fields.
        seq_len: tokens per sequence of the timed probes.
        precision: the recipe (``RECIPES`` key).
        attention: ``flash`` or ``eager``.
        matmul: GEMM throughput at the model's shapes.
        peak_flops_per_s: best measured GEMM FLOP/s per dtype (``fp32``, ``bf16``...).
        steps: every proxy configuration measured.
        step_time: the step-time fit.
        memory: the measured overheads.
        max_micro_batch: the largest micro-batch of the full model on one device.
        collectives: the all-reduce sweep, when asked for.
        notes: caveats in words.
        elapsed_s: wall time of the calibration.
    """

    schema: str
    created: str
    batchfit_version: str
    device: DeviceInfo
    environment: Environment
    model: dict[str, Any]
    seq_len: int
    precision: str
    attention: str
    matmul: tuple[MatmulPoint, ...]
    peak_flops_per_s: dict[str, float]
    steps: tuple[StepMeasurement, ...]
    step_time: StepTimeRecord
    memory: MemoryRecord
    max_micro_batch: MaxMicroBatchRecord
    collectives: CollectiveRecord | None = None
    notes: tuple[str, ...] = ()
    elapsed_s: float = 0.0

    def model_spec(self) -> ModelSpec:
        """The target model (raises InputError when the stored fields are invalid)."""
        return model_spec_from_dict(self.model)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (tuples become lists)."""
        return plain(dataclasses.asdict(self))


@dataclass(frozen=True)
class LoadedProfile:
    """A profile and the file it came from."""

    path: Path
    profile: MeasuredProfile

    def describe(self) -> str:
        """``<path> (<device>, <date>)``, as estimate and plan print it."""
        p = self.profile
        return f'{self.path} ({p.device.name}, {p.created[:10]})'


# ---- ModelSpec <-> dict --------------------------------------------------------------------

def model_spec_to_dict(spec: ModelSpec) -> dict[str, Any]:
    """A ``ModelSpec`` as plain JSON values."""
    return plain(dataclasses.asdict(spec))


def model_spec_from_dict(data: dict[str, Any]) -> ModelSpec:
    """The ``ModelSpec`` a profile stores.

    Raises:
        InputError: unknown fields or invalid values.
    """
    known = {f.name for f in dataclasses.fields(ModelSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError('model', f'unknown field(s) {unknown}')
    values = dict(data)
    if values.get('moe') is not None:
        if not isinstance(values['moe'], dict):
            raise InputError('model.moe', 'must be an object')
        try:
            values['moe'] = MoESpec(**values['moe'])
        except TypeError as exc:
            raise InputError('model.moe', str(exc)) from None
    try:
        return ModelSpec(**values)
    except TypeError as exc:
        raise InputError('model', str(exc)) from None


