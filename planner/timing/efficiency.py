"""How much of a GPU's peak FLOP/s a training step achieves, as a function of GEMM size.

A single efficiency scalar is wrong for small GEMMs (DOMAIN.md §8): a 768-wide model at
micro-batch 1 leaves most of an H100 idle, a 12288-wide one fills it. Calculon models
this as a step function of op size (A100 matrix ops >= 128 GFLOP -> 0.95, >= 16 -> 0.9,
>= 1 -> 0.6, else 0.1). batchfit uses a smooth saturating curve instead::

    eta(x) = eta_max * x / (x + x_half)

with ``x`` the FLOPs of one representative GEMM on one GPU (see :func:`gemm_flops`).
The curve is what a fixed per-GEMM cost would give: a GEMM of ``x`` FLOPs takes
``(x + x_half) / (peak * eta_max)``, i.e. ``x_half / peak`` seconds of launch, tail and
wave-quantisation loss on top of its work. ``x_half`` is therefore set to a few
microseconds of peak work (about 2 us), which puts the curve at 0.62 of ``eta_max``
at 1 GFLOP and 0.96 at 16 GFLOP on an A100, Calculon's shape without its steps.

``eta_max`` is the whole layer's achieved fraction of peak for large GEMMs: matmuls,
attention and the memory-bound norms, activations and dropout they carry. It is not a
cuBLAS benchmark number. The defaults below (per GPU family) are calibrated against the
published Megatron-LM throughputs (DOMAIN.md §7, §11 V3); ``docs/time-model.md`` lists
where each comes from. Measured numbers replace them through a
:class:`CalibrationProfile`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.errors import InputError

ProfileAxis = Literal['gemm_flops', 'micro_batch']
PROFILE_AXES: tuple[str, ...] = ('gemm_flops', 'micro_batch')


@dataclass(frozen=True)
class EfficiencyCurve:
    """The default efficiency of one GPU family.

    Attributes:
        family: architecture name as in ``GpuSpec.family``.
        max_efficiency: achieved fraction of dense peak for large GEMMs (eta_max).
        half_gemm_flops: GEMM size, in FLOPs, at which half of ``max_efficiency`` is
            reached (x_half).
        source: where the numbers come from, in words.
    """

    family: str
    max_efficiency: float
    half_gemm_flops: float
    source: str

    def at(self, gemm_flops_per_gpu: np.ndarray | float) -> np.ndarray:
        """Efficiency for GEMMs of ``gemm_flops_per_gpu`` FLOPs (array in, array out)."""
        x = np.asarray(gemm_flops_per_gpu, float)
        return self.max_efficiency * x / (x + self.half_gemm_flops)


# x_half = peak (bf16/fp16 dense) x ~2 us of per-GEMM loss, rounded.
_KERNEL_LOSS_S = 2e-6
DEFAULT_CURVES: dict[str, EfficiencyCurve] = {c.family: c for c in (
    EfficiencyCurve('ampere', 0.60, 312e12 * _KERNEL_LOSS_S,
                    'calibrated on Narayanan et al. 2021 Table 1 (A100, 44-52 % of peak '
                    'incl. bubble and communication) and Korthikanti et al. 2022 Table 5'),
    EfficiencyCurve('hopper', 0.55, 989e12 * _KERNEL_LOSS_S,
                    'Megatron-Core H100 bf16: 41-48 % MFU at scale (Megatron-LM README); '
                    'Hopper needs larger GEMMs to fill (x_half scales with peak)'),
    EfficiencyCurve('blackwell', 0.50, 2250e12 * _KERNEL_LOSS_S,
                    'unverified: young software stack; scaled from Hopper'),
    EfficiencyCurve('ada', 0.50, 360e12 * _KERNEL_LOSS_S,
                    'unverified: PCIe workstation parts, lower sustained clocks'),
    EfficiencyCurve('volta', 0.45, 125e12 * _KERNEL_LOSS_S,
                    'unverified: Megatron-LM 2019 reached ~30 % of V100 peak end to end'),
    EfficiencyCurve('turing', 0.40, 65e12 * _KERNEL_LOSS_S, 'unverified: inference-class parts'),
    EfficiencyCurve('cdna2', 0.40, 190e12 * _KERNEL_LOSS_S,
                    'unverified: MI250X training reports ~30-40 % of peak'),
    EfficiencyCurve('cdna3', 0.45, 1300e12 * _KERNEL_LOSS_S,
                    'unverified: MI300X training reports ~35-45 % MFU'),
)}
# A family the table does not know gets a middle-of-the-road curve.
FALLBACK_CURVE = EfficiencyCurve('unknown', 0.45, 500e12 * _KERNEL_LOSS_S,
                                 'fallback for an unknown GPU family')


# Eager PyTorch (FSDP/DDP over transformers-style modules, no fused kernels, no
# torch.compile) gets less from the same GEMMs than Megatron's fused kernels, which the
# curves above are calibrated on. Factors from torchtitan's published runs
# (docs/performance.md, FSDP2, bf16, Llama-3-8B, selective AC) against this model:
#   8 x H100 SXM, b2, s8192: 5,762 tokens/s/GPU measured, 9,488 modelled -> 0.61
#   64 x A100 80GB, b1, s8192: 2,904 tokens/s/GPU measured, 3,367 modelled -> 0.86
# Other families take the midpoint (unverified). Calibration replaces all of this.
EAGER_PYTORCH_FACTORS: dict[str, float] = {'hopper': 0.61, 'ampere': 0.86}
EAGER_PYTORCH_DEFAULT_FACTOR = 0.75


def framework_factor(framework: str, family: str) -> float:
    """Efficiency of ``framework``'s kernels relative to Megatron's on this GPU family.

    ``framework`` is a stack key (``planner.stacks``; its ``efficiency`` says whose
    kernels it runs) or ``megatron``/``eager``.
    """
    from planner.stacks import STACKS

    kind = STACKS[framework].efficiency if framework in STACKS else framework
    if kind == 'megatron':
        return 1.0
    return EAGER_PYTORCH_FACTORS.get(family.lower(), EAGER_PYTORCH_DEFAULT_FACTOR)


def default_curve(family: str) -> EfficiencyCurve:
    """The documented default curve for a GPU family (a fallback for unknown ones)."""
    return DEFAULT_CURVES.get(family.lower(), FALLBACK_CURVE)


def attainable_fraction(efficiency: float, family: str, framework: str) -> float:
    """``efficiency`` as a fraction of what ``framework`` attains on large GEMMs here.

    What a larger GEMM (a larger micro-batch, less TP) could still win: the framework's
    own factor is not, so it divides out (eager PyTorch on Hopper sits at 0.61 of the
    curve at every micro-batch).
    """
    return efficiency / (default_curve(family).max_efficiency
                         * framework_factor(framework, family))


@dataclass(frozen=True)
class CalibrationProfile:
    """Measured efficiency at a few points, interpolated in log space.

    A calibration run (a later issue) measures the achieved fraction of peak for a
    model at several micro-batches or GEMM sizes. Between points the efficiency is
    interpolated linearly in ``log(x)``; outside them it is held at the end values
    (extrapolating a measured curve is worse than trusting its last point).

    Attributes:
        axis: what the points are keyed by: ``gemm_flops`` (FLOPs of the representative
            GEMM, see :func:`gemm_flops`) or ``micro_batch`` (sequences per GPU; only
            meaningful for the model, sequence length and TP it was measured with).
        points: ``(x, efficiency)`` pairs, sorted by ``x``.
        source: where the measurements come from.
    """

    axis: ProfileAxis
    points: tuple[tuple[float, float], ...]
    source: str = 'calibration'

    def __post_init__(self) -> None:
        if self.axis not in PROFILE_AXES:
            raise InputError('calibration.axis', f'unknown axis {self.axis!r}',
                             ', '.join(PROFILE_AXES))
        if not self.points:
            raise InputError('calibration', 'needs at least one measured point')
        for x, eff in self.points:
            if not x > 0:
                raise InputError('calibration', f'point {x!r} must be positive')
            if not 0 < eff <= 1:
                raise InputError('calibration', f'efficiency {eff!r} at {x!r} must be in (0, 1]')
        xs = [x for x, _ in self.points]
        if xs != sorted(xs) or len(set(xs)) != len(xs):
            raise InputError('calibration', 'points must have distinct, increasing x')

    @classmethod
    def from_mapping(cls, data: Mapping[float, float] | Mapping[str, object],
                     axis: ProfileAxis = 'micro_batch', source: str = 'calibration',
                     ) -> CalibrationProfile:
        """Build a profile from ``{x: efficiency}``, or ``{'axis': ..., 'points': {...}}``.

        Raises:
            InputError: a key or value is not a number, or out of range.
        """
        if 'points' in data:
            axis = str(data.get('axis', axis))  # type: ignore[assignment]
            source = str(data.get('source', source))
            data = data['points']  # type: ignore[assignment]
            if not isinstance(data, Mapping):
                raise InputError('calibration.points', 'must map x to efficiency')
        try:
            points = sorted((float(x), float(eff)) for x, eff in data.items())  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise InputError('calibration', 'keys and values must be numbers') from None
        return cls(axis=axis, points=tuple(points), source=source)

    def at(self, x: np.ndarray | float) -> np.ndarray:
        """Interpolated efficiency at ``x`` (same axis as the points)."""
        xs = np.log([p[0] for p in self.points])
        ys = np.array([p[1] for p in self.points])
        return np.interp(np.log(np.asarray(x, float)), xs, ys)


def as_profile(profile: CalibrationProfile | Mapping | None) -> CalibrationProfile | None:
    """Accept a profile, a plain ``{micro_batch: efficiency}`` dict, or None."""
    if profile is None or isinstance(profile, CalibrationProfile):
        return profile
    if isinstance(profile, Mapping):
        return CalibrationProfile.from_mapping(profile)
    raise InputError('calibration', f'unsupported profile {type(profile).__name__}',
                     'a CalibrationProfile or a mapping')


def gemm_flops(hidden_size: int, tokens_per_gpu: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """FLOPs of the representative GEMM on one GPU: an h x h/t projection of a micro-batch.

    ``tokens_per_gpu`` is micro-batch x sequence / CP. The attention output projection
    (2·T·h·h/t FLOPs) is the smallest dense GEMM of a layer; the MLP's are 2.7-4x
    larger, so this is the size that first starves the GPU.
    """
    return 2.0 * np.asarray(tokens_per_gpu, float) * hidden_size * (hidden_size / np.asarray(tp))


def matmul_efficiency(family: str, gemm_flops_per_gpu: np.ndarray,
                      micro_batch: np.ndarray | None = None,
                      profile: CalibrationProfile | Mapping | None = None,
                      framework: str = 'megatron') -> np.ndarray:
    """Achieved fraction of peak for each configuration.

    Args:
        family: ``GpuSpec.family``; picks the default curve.
        gemm_flops_per_gpu: FLOPs of the representative GEMM (:func:`gemm_flops`).
        micro_batch: sequences per GPU, needed when the profile is keyed by micro-batch.
        profile: measured efficiencies replacing the default curve (and the framework
            factor: a measurement already is of the user's framework).
        framework: ``megatron`` (fused kernels) or ``hf`` (eager PyTorch); see
            :func:`framework_factor`.

    Raises:
        InputError: a micro-batch profile without ``micro_batch``.
    """
    cal = as_profile(profile)
    if cal is None:
        return default_curve(family).at(gemm_flops_per_gpu) * framework_factor(framework, family)
    if cal.axis == 'micro_batch':
        if micro_batch is None:
            raise InputError('calibration', 'a micro-batch profile needs the micro-batch')
        return cal.at(micro_batch) * np.ones_like(np.asarray(gemm_flops_per_gpu, float))
    return cal.at(gemm_flops_per_gpu)
