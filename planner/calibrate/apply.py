"""What a calibration profile gives the planner: overheads, efficiencies, step options.

These helpers are what ``batchfit estimate`` and ``batchfit plan`` call on a matching
profile (see ``docs/calibration.md``):

* :func:`overheads_from_profile` -> ``planner.memory.peak.Overheads`` (estimate and plan);
* :func:`efficiency_from_profile` -> ``planner.timing.efficiency.CalibrationProfile`` on the
  ``gemm_flops`` axis (plan);
* :func:`step_options_from_profile` -> ``planner.timing.step_time.StepTimeOptions`` with the
  fixed per-step cost and, from an NCCL sweep, the link efficiency (plan);
* :func:`device_spec_from_profile` -> the ``GpuSpec`` the efficiencies refer to.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from planner.calibrate.records import DeviceInfo, LoadedProfile, MeasuredProfile
from planner.errors import InputError
from planner.hardware.devices import GpuSpec
from planner.memory.peak import Overheads
from planner.models.spec import ModelSpec
from planner.timing.efficiency import CalibrationProfile
from planner.timing.step_time import StepTimeOptions


def _slug(text: str) -> str:
    return re.sub(r'[^a-z0-9.]+', '-', text.lower()).strip('-')[:48] or 'device'


def overheads_from_profile(p: MeasuredProfile, source: str = '') -> Overheads:
    """The measured non-tensor overheads as the estimator's ``Overheads``."""
    m = p.memory
    return Overheads(cuda_context_bytes=float(m.cuda_context_bytes),
                     workspace_bytes=float(m.workspace_bytes), nccl_bytes=float(m.nccl_bytes),
                     allocator_fraction=m.allocator_fraction,
                     source=source or f'calibration of {p.device.name} on {p.created[:10]}')


def efficiency_from_profile(p: MeasuredProfile, source: str = '') -> CalibrationProfile:
    """The measured GEMM efficiencies as the planner's profile (``gemm_flops`` axis).

    Raises:
        InputError: no or invalid points.
    """
    return CalibrationProfile(axis='gemm_flops', points=p.step_time.efficiency_points,
                              source=source or f'calibration of {p.device.name} on '
                                               f'{p.created[:10]}')


def step_options_from_profile(p: MeasuredProfile, model: ModelSpec | None = None,
                              base: StepTimeOptions | None = None,
                              gpu: GpuSpec | None = None,
                              include_overhead: bool = True) -> StepTimeOptions:
    """``base`` with the measured fixed step cost and, from NCCL, the link efficiency.

    The fixed cost is the fitted one for the profile's own model; for another model it
    is ``fixed + layers x per-layer``. The intra-node link efficiency (bus bandwidth
    over the catalog's NVLink bandwidth) and per-hop latency come from an NCCL
    all-reduce sweep, when the profile has one and ``gpu`` is given.
    ``include_overhead=False`` leaves the fixed cost as in ``base``.
    """
    opts = base or StepTimeOptions()
    st = p.step_time
    if model is None or model == p.model_spec():
        overhead = st.overhead_s
    else:
        overhead = max(st.overhead_fixed_s + model.num_layers * st.overhead_per_layer_s, 0.0)
    changes: dict[str, float] = {'step_overhead_s': overhead} if include_overhead else {}
    c = p.collectives
    if c is not None and c.backend == 'nccl' and gpu is not None \
            and gpu.intra_node_bandwidth_bytes_per_s > 0:
        changes['intra_node_link_efficiency'] = min(
            c.peak_busbw_bytes_per_s / gpu.intra_node_bandwidth_bytes_per_s, 1.0)
        changes['intra_node_latency_s'] = c.alpha_s / (2 * max(c.world_size - 1, 1))
    return dataclasses.replace(opts, **changes)


def device_spec(device: DeviceInfo, peak_flops_per_s: dict[str, float],
                memory_bandwidth_bytes_per_s: float, link_bytes_per_s: float = 0.0) -> GpuSpec:
    """The device as a ``GpuSpec``: the catalog entry, or one built from measurements.

    A GPU the catalog knows keeps the catalog's peaks and bandwidths (with the measured
    memory size), so a profile's efficiencies are fractions of the same peak the
    planner uses. A CPU, or a GPU the catalog lacks, gets the best GEMM FLOP/s measured
    per dtype and the measured copy bandwidth.
    """
    if device.catalog_key:
        try:
            from planner.hardware.catalog import find_gpu

            return dataclasses.replace(find_gpu(device.catalog_key),
                                       memory_bytes=device.memory_bytes)
        except (InputError, ImportError):
            pass  # the catalog changed (or cannot load): fall back to the measurements
    peaks = dict(peak_flops_per_s)
    peaks.setdefault('fp32', max(peaks.values()))
    return GpuSpec(key='cpu' if device.kind == 'cpu' else _slug(device.name), name=device.name,
                   vendor='measured', family='measured', memory_bytes=device.memory_bytes,
                   peak_flops=peaks, hbm_bandwidth_bytes_per_s=memory_bandwidth_bytes_per_s,
                   # Unmeasured link: the memory bandwidth stands in (one device never uses
                   # it, and a zero would divide by zero in the step model).
                   intra_node_link='measured' if link_bytes_per_s else 'none',
                   intra_node_bandwidth_bytes_per_s=link_bytes_per_s
                   or memory_bandwidth_bytes_per_s,
                   source='calibration measurements')


def device_spec_from_profile(p: MeasuredProfile) -> GpuSpec:
    """The ``GpuSpec`` a profile's efficiencies refer to (see :func:`device_spec`)."""
    link = p.collectives.peak_busbw_bytes_per_s if p.collectives else 0.0
    return device_spec(p.device, p.peak_flops_per_s, p.step_time.memory_bandwidth_bytes_per_s,
                       link)


@dataclass(frozen=True)
class CalibrationUse:
    """What a command took from a profile, and what it left out and why.

    Attributes:
        loaded: the profile and its file.
        overheads: the measured memory overheads (always used).
        efficiency: measured GEMM efficiencies, or None when they do not apply.
        step_options: the step-time constants with the measured fixed cost (and link
            efficiency), or None.
        applied: names of what was used (``memory_overheads``, ``efficiency``,
            ``step_overhead``, ``link_bandwidth``).
        not_applied: what was left out, with the reason.
    """

    loaded: LoadedProfile
    overheads: Overheads
    efficiency: CalibrationProfile | None = None
    step_options: StepTimeOptions | None = None
    applied: tuple[str, ...] = ('memory_overheads',)
    not_applied: dict[str, str] = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        """``calibrated: <path> (<GPU>, <date>)`` (plus what was left out)."""
        text = f'calibrated: {self.loaded.describe()}'
        if self.not_applied:
            text += '; not used: ' + '; '.join(f'{k} ({v})' for k, v in self.not_applied.items())
        return text

    def summary(self) -> dict[str, Any]:
        """The ``calibration`` member of ``estimate --json`` and ``plan --json``."""
        return calibration_summary(self.loaded, self.applied, self.not_applied)


def use_profile(lp: LoadedProfile, *, model: ModelSpec | None = None,
                gpu: GpuSpec | None = None, precision: str | None = None,
                framework: str = 'hf', base_options: StepTimeOptions | None = None,
                step_time: bool = False) -> CalibrationUse:
    """What ``estimate`` (memory only) or ``plan`` (``step_time=True``) takes from ``lp``.

    Memory overheads always apply. The efficiencies and the fixed step cost apply to
    the same compute dtype, measured on eager PyTorch (``framework='hf'``): a profile
    of bf16 GEMMs says nothing about fp32 ones, and Megatron's fused kernels do better
    than the eager proxy. The link efficiency applies whenever the profile has an NCCL
    sweep.
    """
    from planner.memory.recipes import RECIPES

    p = lp.profile
    source = str(lp.path)
    use = CalibrationUse(loaded=lp, overheads=overheads_from_profile(p, source))
    if not step_time:
        return use
    applied, skipped = ['memory_overheads'], {}
    if precision and framework:  # the stack's own meaning of the word (torchtitan's fp8)
        from planner.stacks import STACKS

        precision = STACKS[framework].recipe_of(precision) if framework in STACKS else precision
    dtype = RECIPES[precision].compute_dtype if precision else p.step_time.compute_dtype
    efficiency = None
    if dtype != p.step_time.compute_dtype:
        skipped['efficiency'] = (f'measured in {p.step_time.compute_dtype}, planning in {dtype}')
    elif framework and _kernels(framework) != 'eager':
        skipped['efficiency'] = f'measured on eager PyTorch, planning for {framework}'
    else:
        efficiency = efficiency_from_profile(p, source)
        applied += ['efficiency', 'step_overhead']
    options = step_options_from_profile(p, model, base_options, gpu,
                                        include_overhead=efficiency is not None)
    if p.collectives is not None and p.collectives.backend == 'nccl' and gpu is not None:
        applied.append('link_bandwidth')
    return dataclasses.replace(use, efficiency=efficiency, step_options=options,
                               applied=tuple(applied), not_applied=skipped)


def _kernels(framework: str) -> str:
    """``eager`` or ``megatron``: whose kernels a stack's time is modelled on."""
    from planner.stacks import STACKS

    return STACKS[framework].efficiency if framework in STACKS else framework


def calibration_summary(lp: LoadedProfile, applied: tuple[str, ...],
                        not_applied: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``calibration`` member of ``estimate --json`` and ``plan --json``."""
    p = lp.profile
    return {'path': str(lp.path), 'device': p.device.name, 'uuid': p.device.uuid,
            'catalog_key': p.device.catalog_key, 'created': p.created,
            'torch_version': p.environment.torch_version, 'model': p.model.get('name'),
            'seq_len': p.seq_len, 'precision': p.precision, 'applied': list(applied),
            'not_applied': dict(not_applied or {})}

