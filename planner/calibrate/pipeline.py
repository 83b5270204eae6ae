"""The calibration run, stage by stage (inside the child process).

1. ``environment``: device, torch/CUDA/cuDNN/NCCL versions, allocator settings, the
   memory the CUDA context takes;
2. ``matmul``: the model's own GEMMs (projections, MLP, head) at the probe token
   counts, in the recipe's compute dtype, and the device's copy bandwidth;
3. ``proxy``: the proxy (the model's widths, 1 and 2 layers) trained at each
   micro-batch, interleaved, min of k; memory from ``torch.cuda`` statistics or
   MemTracker; extrapolated to the full depth;
4. ``max_micro_batch``: the estimator with the measured overheads predicts the
   largest micro-batch of the full model, and one probe in a fresh process confirms
   it (the fitted model picks the next size when it does not fit);
5. ``collectives`` (optional): an all-reduce sweep (NCCL on 2+ GPUs, gloo on the CPU);
6. ``fit``: the planner's step-time model fitted to the full-depth times.

Failures raise :class:`CalibrationError` with a kind from
``planner.calibrate.protocol.ERROR_KINDS``; ``profile`` is set when the measurements
are worth keeping anyway (the full model does not fit one device).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.calibrate import edge, fit, probes
from planner.calibrate.apply import device_spec
from planner.calibrate.environment import environment, limit_memory
from planner.calibrate.profile import profile_from_dict, utc_now
from planner.calibrate.protocol import EventWriter
from planner.calibrate.records import (
    PROBE_LOOP,
    SCHEMA,
    DeviceInfo,
    MemoryRecord,
    StepMeasurement,
    StepTimeRecord,
    model_spec_to_dict,
    plain,
)
from planner.hardware.devices import GpuSpec
from planner.memory.peak import Overheads, estimate
from planner.memory.recipes import RECIPES
from planner.memory.training import TrainingSetup
from planner.models.spec import ModelSpec

# Share of the progress bar per stage (collectives' share goes to the others when off).
STAGE_WEIGHTS: dict[str, float] = {'environment': 0.05, 'matmul': 0.15, 'proxy': 0.45,
                                   'max_micro_batch': 0.2, 'collectives': 0.1, 'fit': 0.05}
CPU_MICRO_BATCHES = (1, 2, 4)
MAX_EDGE_PROBES = 3
DEFAULT_NCCL_BYTES = int(Overheads().nccl_bytes)


class CalibrationError(Exception):
    """A classified failure: ``kind`` from ``ERROR_KINDS``, ``message`` in words."""

    def __init__(self, kind: str, message: str, profile: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.profile = profile


@dataclass(frozen=True)
class Settings:
    """What the child was asked to calibrate.

    Attributes:
        spec: the target model (full depth).
        seq_len: tokens per sequence.
        precision: a ``PROXY_PRECISIONS`` recipe.
        attention: ``flash`` or ``eager``.
        device: ``cuda`` or ``cpu``.
        micro_batches: micro-batches to time (empty: chosen from the predicted capacity).
        repeats: timed rounds per configuration (min of k).
        warmup: untimed steps per configuration.
        depths: proxy depths (two or more separate per-layer from fixed cost).
        memory_limit_bytes: emulate a smaller device (None: the whole device).
        collectives: run the all-reduce sweep.
        collective_max_bytes: largest all-reduce (default 1 GiB on CUDA, 64 MiB on CPU).
        python: the interpreter for probe processes.
    """

    spec: ModelSpec
    seq_len: int
    precision: str
    attention: str = 'flash'
    device: str = 'cuda'
    micro_batches: tuple[int, ...] = ()
    repeats: int = 5
    warmup: int = 2
    depths: tuple[int, ...] = (1, 2)
    memory_limit_bytes: int | None = None
    collectives: bool = False
    collective_max_bytes: int | None = None
    python: str = ''


class _Progress:
    """Maps a stage's own 0-1 progress onto the whole run's fraction."""

    def __init__(self, out: EventWriter, collectives: bool) -> None:
        self.out = out
        weights = dict(STAGE_WEIGHTS)
        if not collectives:
            weights.pop('collectives')
        total = sum(weights.values())
        self.start: dict[str, float] = {}
        acc = 0.0
        for stage, w in weights.items():
            self.start[stage] = acc / total
            acc += w
        self.weight = {s: w / total for s, w in weights.items()}

    def __call__(self, stage: str, fraction: float, message: str = '') -> None:
        self.out.progress(stage, self.start[stage] + self.weight[stage] * fraction, message)


def run(settings: Settings, out: EventWriter) -> dict[str, Any]:
    """Calibrate; returns the profile document (validated against the schema).

    Raises:
        CalibrationError: does_not_fit or oom (other errors propagate as crashes).
    """
    started = time.perf_counter()
    s = settings
    progress = _Progress(out, s.collectives)
    notes: list[str] = []
    if s.spec.moe is not None:
        notes.append('mixture of experts timed as a dense MLP of the width one token visits')

    progress('environment', 0.0, f'{s.device}: starting')
    env = environment(s.device)
    device = DeviceInfo(**env['device'])
    if s.memory_limit_bytes:
        device = dataclasses.replace(device, memory_bytes=min(device.memory_bytes,
                                                              s.memory_limit_bytes))
        notes.append(f'memory limited to {s.memory_limit_bytes / 2**30:.3g} GiB')
        limit_memory(s.device, s.memory_limit_bytes)
    context = int(env['environment']['cuda_context_bytes'])
    progress('environment', 1.0, device.name)

    micro_batches = _choose_micro_batches(s, device, context)
    configs = [(b, s.seq_len) for b in micro_batches]
    floor = _floor_config(s)

    dtype_key = RECIPES[s.precision].compute_dtype
    matmul, peaks, bandwidth = _matmul_stage(s, micro_batches, dtype_key, progress)

    steps = _measure_proxy(s, configs, floor, device, progress)
    memory = _memory_record(steps, context, s)
    overheads = Overheads(cuda_context_bytes=memory.cuda_context_bytes,
                          workspace_bytes=memory.workspace_bytes, nccl_bytes=0.0,
                          allocator_fraction=memory.allocator_fraction, source='calibration')
    gpu = device_spec(device, peaks, bandwidth)
    max_batch = edge.largest_micro_batch(s, gpu, overheads, progress)

    collectives = _collectives_stage(s, device, notes, progress) if s.collectives else None
    if collectives is not None:
        gpu = device_spec(device, peaks, bandwidth, _peak_busbw(collectives))
        if collectives.get('nccl_memory_bytes') is not None:
            memory = dataclasses.replace(memory, nccl_bytes=collectives['nccl_memory_bytes'])

    progress('fit', 0.0, 'fitting the step-time model')
    step_time = _step_time_record(s, steps, gpu, dtype_key, bandwidth, notes)
    doc = {
        'schema': SCHEMA, 'created': utc_now(), 'batchfit_version': _version(),
        'device': dataclasses.asdict(device), 'environment': env['environment'],
        'model': model_spec_to_dict(s.spec), 'seq_len': s.seq_len, 'precision': s.precision,
        'attention': s.attention, 'matmul': [dataclasses.asdict(p) for p in matmul],
        'peak_flops_per_s': peaks, 'steps': [dataclasses.asdict(m) for m in steps],
        'step_time': dataclasses.asdict(step_time), 'memory': dataclasses.asdict(memory),
        'max_micro_batch': dataclasses.asdict(max_batch), 'collectives': collectives,
        'notes': notes, 'elapsed_s': time.perf_counter() - started}
    doc = profile_from_dict(plain(doc), 'calibration result').to_dict()  # schema enforced here
    progress('fit', 1.0, 'done')
    if max_batch.predicted == 0 or max_batch.confirmed == 0:
        raise CalibrationError('does_not_fit', edge.does_not_fit_message(s, gpu, max_batch),
                               profile=doc)
    return doc


def _matmul_stage(s: Settings, micro_batches: tuple[int, ...], dtype_key: str,
                  progress: Callable[..., None]) -> tuple[list[Any], dict[str, float], float]:
    """The model's GEMMs at the probe token counts, the best FLOP/s per dtype, bandwidth."""
    tokens = sorted({b * s.seq_len for b in micro_batches})
    matmul = probes.time_gemms(s.spec, tokens, s.precision, s.device, s.repeats,
                               on_step=lambda f, m: progress('matmul', 0.9 * f, m))
    peaks = {dtype_key: max(p.flops_per_s for p in matmul)}
    if dtype_key != 'fp32':  # a GpuSpec always has an fp32 peak
        peaks['fp32'] = probes.square_gemm_flops('float32', s.device,
                                                 2048 if s.device == 'cuda' else 512)
    bandwidth = probes.copy_bandwidth(s.device)
    progress('matmul', 1.0, f'best GEMM {peaks[dtype_key] / 1e12:.3g} TFLOP/s')
    return matmul, peaks, bandwidth


def _collectives_stage(s: Settings, device: DeviceInfo, notes: list[str],
                       progress: Callable[..., None]) -> dict[str, Any] | None:
    """The all-reduce sweep in fresh processes (None, with a note, when it cannot run)."""
    from planner.calibrate.collectives import sweep

    progress('collectives', 0.0, 'all-reduce sweep')
    result = sweep(s.device, device.count, s.collective_max_bytes, s.python, notes)
    progress('collectives', 1.0, 'all-reduce sweep done')
    return result


def _version() -> str:
    from planner import __version__

    return __version__


# ---- micro-batches -------------------------------------------------------------------------

def _choose_micro_batches(s: Settings, device: DeviceInfo, context: int) -> tuple[int, ...]:
    """The user's, or ~30/60/85 % of the full model's predicted capacity (CALIBRATION §8).

    The CPU never runs out of memory in a useful way and every sample costs real time,
    so it takes 1, 2, 4. A GPU model too big for one device takes what the 2-layer
    proxy holds.
    """
    if s.micro_batches:
        return tuple(sorted(set(s.micro_batches)))
    if s.device == 'cpu':
        return CPU_MICRO_BATCHES
    # Only the memory size matters to the estimator; the speeds are not measured yet.
    gpu = device_spec(dataclasses.replace(device, catalog_key=None), {'fp32': 1.0}, 1.0)
    defaults = Overheads(cuda_context_bytes=context)
    cap = fit.largest_fitting_micro_batch(s.spec, s.seq_len, s.precision, s.attention, gpu,
                                          defaults)
    if cap < 4:
        proxy = s.spec.with_changes(num_layers=max(s.depths))
        cap = min(4, fit.largest_fitting_micro_batch(proxy, s.seq_len, s.precision,
                                                     s.attention, gpu, defaults))
        return tuple(range(1, max(cap, 1) + 1)) if cap < 3 else (1, 2, 4)
    return tuple(sorted({max(1, round(f * cap)) for f in (0.3, 0.6, 0.85)}))


def _floor_config(s: Settings) -> tuple[int, int] | None:
    """A few-token step that measures the fixed cost (CPU only).

    The CPU runs synchronously, so per-operator overheads add to the work and a step
    of a few tokens is almost all overhead. A GPU overlaps its launches with the
    work of earlier kernels, so there the intercept comes from the micro-batch fit.
    """
    if s.device != 'cpu':
        return None
    return (1, max(1, min(16, s.seq_len // 8)))


# ---- the proxy ---------------------------------------------------------------------------

def _measure_proxy(s: Settings, configs: list[tuple[int, int]], floor: tuple[int, int] | None,
                   device: DeviceInfo, progress: Callable[..., None]) -> list[StepMeasurement]:
    """Time and memory of every (depth, configuration).

    On the CPU all depths are timed together, interleaved (drift hits them alike); on
    a GPU one depth at a time, so only one proxy holds device memory.
    """
    timed = configs + ([floor] if floor else [])
    fake = _FakePeaks(s)
    _check_proxy_fits(s, configs, fake)
    groups = [tuple(s.depths)] if s.device == 'cpu' else [(d,) for d in s.depths]
    timings: list[probes.ProxyTiming] = []
    for i, depths in enumerate(groups):
        share = 0.6 / len(groups)
        progress('proxy', i * share, f'{"/".join(map(str, depths))}-layer proxy: timing')
        try:
            timings += probes.time_proxy(
                s.spec, depths, timed, precision=s.precision, attention=s.attention,
                device=s.device, repeats=s.repeats, warmup=s.warmup,
                window=3 if s.device == 'cuda' else 1,
                on_step=lambda f, i=i, share=share: progress('proxy', (i + f) * share))
        except Exception as exc:  # an OOM is classified, the rest re-raised
            if not probes.is_oom(exc):
                raise
            message = str(exc).splitlines()[0][:200]
            if i == 0:
                raise CalibrationError('does_not_fit', f'the {depths[0]}-layer proxy of '
                                       f'{s.spec.name} does not fit {device.name} at '
                                       f'micro-batch {min(b for b, _ in configs)}: '
                                       f'{message}') from None
            raise CalibrationError('oom', f'out of memory timing the {depths[0]}-layer proxy at '
                                   f'micro-batches {[b for b, _ in configs]}; pass smaller '
                                   f'--micro-batches ({message})') from None
    steps = []
    for j, t in enumerate(sorted(timings, key=lambda t: (t.layers, t.micro_batch, t.seq_len))):
        steps.append(_step_measurement(s, t, fake, is_floor=(t.micro_batch, t.seq_len) == floor))
        progress('proxy', 0.6 + 0.4 * (j + 1) / len(timings),
                 f'{t.layers}-layer proxy: memory at micro-batch {t.micro_batch}')
    return steps


class _FakePeaks:
    """MemTracker peaks of the proxy, measured once per (depth, micro-batch, sequence)."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.known: dict[tuple[int, int, int], int] = {}

    def __call__(self, depth: int, micro_batch: int, seq_len: int) -> int:
        """The peak, or 0 on a GPU whose torch lacks MemTracker (the CPU needs it)."""
        key = (depth, micro_batch, seq_len)
        if key not in self.known:
            try:
                self.known[key] = probes.fake_peak_bytes(
                    self.s.spec, depth, micro_batch, seq_len, precision=self.s.precision,
                    attention=self.s.attention)
            except ImportError as exc:  # torch.distributed._tools is private and young
                if self.s.device == 'cpu':
                    raise CalibrationError('crash', f'--device cpu measures memory with '
                                           f'MemTracker, which this torch lacks ({exc})') from None
                self.known[key] = 0
        return self.known[key]


def _step_measurement(s: Settings, t: probes.ProxyTiming, fake_peaks: _FakePeaks,
                      is_floor: bool) -> StepMeasurement:
    """One timing with its memory: MemTracker's fake peak, CUDA's statistics, the estimate."""
    fake = 0 if is_floor else fake_peaks(t.layers, t.micro_batch, t.seq_len)
    cpu = s.device == 'cpu'
    estimated = estimate(s.spec.with_changes(num_layers=t.layers), TrainingSetup(
        seq_len=t.seq_len, micro_batch=t.micro_batch, precision=s.precision,
        attention=s.attention, framework='hf', loop=PROBE_LOOP)).tensor_peak_bytes
    return StepMeasurement(
        layers=t.layers, micro_batch=t.micro_batch, seq_len=t.seq_len,
        forward_backward_s=t.forward_backward_s, optimizer_s=t.optimizer_s, repeats=t.repeats,
        peak_allocated_bytes=int(fake if cpu else t.peak_allocated_bytes),
        peak_reserved_bytes=int(fake if cpu else t.peak_reserved_bytes),
        num_alloc_retries=t.num_alloc_retries, num_ooms=t.num_ooms,
        estimated_tensor_peak_bytes=int(estimated), fake_tensor_peak_bytes=int(fake),
        memory_source='memtracker' if cpu else 'cuda', for_efficiency=not is_floor)


def _check_proxy_fits(s: Settings, configs: list[tuple[int, int]], fake: _FakePeaks) -> None:
    """On the CPU, check a memory limit against MemTracker's peak before timing anything.

    Nothing runs out of memory on the CPU, so the shallowest proxy's fake-tensor peak at
    the smallest micro-batch stands in for the OOM a GPU would raise.
    """
    if s.device != 'cpu' or not s.memory_limit_bytes:
        return
    depth = min(s.depths)
    b, seq = min(configs)
    need = fake(depth, b, seq)
    if need > s.memory_limit_bytes:
        raise CalibrationError(
            'does_not_fit', f'the {depth}-layer proxy of {s.spec.name} needs '
            f'{need / 2**20:,.1f} MiB at micro-batch {b}, over the '
            f'{s.memory_limit_bytes / 2**20:,.1f} MiB limit')


def _memory_record(steps: list[StepMeasurement], context: int, s: Settings) -> MemoryRecord:
    """Overheads from the probes (what CUDA allocates beyond the exact tensor bytes) and
    the measured peaks extrapolated to the full depth, beside the estimator's."""
    real = [m for m in steps if m.for_efficiency]
    ratio = float(np.median([m.peak_allocated_bytes / m.estimated_tensor_peak_bytes
                             for m in real if m.estimated_tensor_peak_bytes > 0] or [1.0]))
    full = []
    for b, seq in sorted({(m.micro_batch, m.seq_len) for m in real}):
        at = {m.layers: m.peak_allocated_bytes for m in real
              if (m.micro_batch, m.seq_len) == (b, seq)}
        _, _, extrapolated = fit.extrapolate_depth(at, s.spec.num_layers)
        setup = TrainingSetup(seq_len=seq, micro_batch=b, precision=s.precision,
                              attention=s.attention, framework='hf', loop=PROBE_LOOP)
        full.append((b, seq, int(extrapolated), int(estimate(s.spec, setup).tensor_peak_bytes)))
    if s.device == 'cpu':  # MemTracker's bytes are exact tensor bytes: nothing on top
        return MemoryRecord(cuda_context_bytes=0, workspace_bytes=0, nccl_bytes=0,
                            allocator_fraction=0.0, estimator_ratio=ratio,
                            full_depth_peak_bytes=tuple(full))
    # Without MemTracker (fake peak 0) there is no exact tensor peak to compare with.
    workspace = max((m.peak_allocated_bytes - m.fake_tensor_peak_bytes for m in real
                     if m.fake_tensor_peak_bytes), default=int(Overheads().workspace_bytes))
    largest = max(real, key=lambda m: m.peak_allocated_bytes)
    fraction = max(largest.peak_reserved_bytes / max(largest.peak_allocated_bytes, 1) - 1, 0.0)
    return MemoryRecord(cuda_context_bytes=context, workspace_bytes=max(int(workspace), 0),
                        nccl_bytes=DEFAULT_NCCL_BYTES, allocator_fraction=fraction,
                        estimator_ratio=ratio, full_depth_peak_bytes=tuple(full))


# ---- step time -------------------------------------------------------------------------------

def _step_time_record(s: Settings, steps: list[StepMeasurement], gpu: GpuSpec,
                      dtype_key: str, bandwidth: float, notes: list[str]) -> StepTimeRecord:
    """Extrapolate to the full depth and fit the planner's step model there and per depth."""
    full_points, per_depth = _full_depth_points(steps, s.spec.num_layers)
    full = fit.fit_step_time(s.spec, full_points, gpu, s.precision, s.attention)
    if full.clamped:
        notes.append(f'{full.clamped} efficiency point(s) clamped to (0, 1]')
    overhead_by_depth = {}
    for depth, points in per_depth.items():
        spec = s.spec.with_changes(num_layers=depth)
        overhead_by_depth[depth] = fit.fit_step_time(spec, points, gpu, s.precision,
                                                     s.attention).overhead_s
    fixed, per_layer, _ = fit.extrapolate_depth(overhead_by_depth, s.spec.num_layers)
    options = full.step_options()
    profile = full.calibration_profile('fit')
    residual = max(abs(fit.predict_step_time(s.spec, p.seq_len, p.micro_batch, gpu, s.precision,
                                             s.attention, profile, options) - p.step_s) / p.step_s
                   for p in full_points)
    return StepTimeRecord(
        compute_dtype=dtype_key, reference_peak_flops_per_s=gpu.peak(dtype_key),
        reference=f'catalog:{gpu.key}' if gpu.vendor != 'measured' else 'measured',
        memory_bandwidth_bytes_per_s=bandwidth, efficiency_points=full.efficiency_points,
        overhead_s=full.overhead_s, overhead_fixed_s=fixed, overhead_per_layer_s=per_layer,
        full_depth_step_s=tuple((p.micro_batch, p.seq_len, p.step_s) for p in full_points),
        max_residual_fraction=float(residual))


def _full_depth_points(steps: list[StepMeasurement], full_layers: int
                       ) -> tuple[list[fit.StepPoint], dict[int, list[fit.StepPoint]]]:
    """Per configuration: times extrapolated to the full depth, and as measured per depth."""
    by_config: dict[tuple[int, int, bool], dict[int, StepMeasurement]] = {}
    for m in steps:
        by_config.setdefault((m.micro_batch, m.seq_len, m.for_efficiency), {})[m.layers] = m
    full, per_depth = [], {}
    for (b, seq, for_eff), at in sorted(by_config.items()):
        _, _, fb = fit.extrapolate_depth({d: m.forward_backward_s for d, m in at.items()},
                                         full_layers)
        _, _, opt = fit.extrapolate_depth({d: m.optimizer_s for d, m in at.items()}, full_layers)
        full.append(fit.StepPoint(b, seq, max(fb, 1e-9), max(opt, 0.0), for_eff))
        for d, m in at.items():
            per_depth.setdefault(d, []).append(
                fit.StepPoint(b, seq, m.forward_backward_s, m.optimizer_s, for_eff))
    return full, per_depth


def _peak_busbw(collectives: dict[str, Any]) -> float:
    return max((p['busbw_bytes_per_s'] for p in collectives['points']), default=0.0)
