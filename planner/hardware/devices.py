"""Accelerators and the links between them, as plain frozen records.

The catalog of known GPUs and interconnects lives in ``resources/gpus.toml`` and
``resources/interconnects.toml`` and is loaded by ``planner.hardware.catalog``. Bandwidths
are bytes per second in one direction per GPU (what a ring collective can use),
peaks are dense (no 2:4 sparsity) tensor-core FLOP/s.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPES: tuple[str, ...] = ('fp32', 'tf32', 'bf16', 'fp16', 'fp8')


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator model.

    Attributes:
        key: catalog id, lower-case (``h100-sxm``).
        name: marketing name (``NVIDIA H100 SXM5 80GB``).
        vendor: ``nvidia`` or ``amd``.
        family: architecture (``volta``, ``turing``, ``ampere``, ``ada``, ``hopper``,
            ``blackwell``, ``cdna2``, ``cdna3``), used by the default efficiency curve.
        memory_bytes: device memory as the driver reports it in total.
        peak_flops: dense peak FLOP/s per dtype (keys from ``DTYPES``); a dtype the
            GPU does not accelerate is absent.
        hbm_bandwidth_bytes_per_s: device-memory bandwidth.
        intra_node_link: name of the GPU-to-GPU link inside a node.
        intra_node_bandwidth_bytes_per_s: that link, one direction, per GPU.
        price_per_gpu_hour_usd: an on-demand cloud price to start from (editable).
        nvml_names: names NVML reports for this GPU, to match local devices.
        source: where the figures come from.
    """

    key: str
    name: str
    vendor: str
    family: str
    memory_bytes: int
    peak_flops: dict[str, float]
    hbm_bandwidth_bytes_per_s: float
    intra_node_link: str
    intra_node_bandwidth_bytes_per_s: float
    price_per_gpu_hour_usd: float = 0.0
    tdp_watts: int = 0
    nvml_names: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    source: str = ''

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``, falling back to the nearest wider format."""
        for candidate in _PEAK_FALLBACK[dtype]:
            if candidate in self.peak_flops:
                return self.peak_flops[candidate]
        return self.peak_flops['fp32']


# A GPU without fp8 runs fp8 recipes at bf16 speed, one without bf16 at fp16, ...
_PEAK_FALLBACK: dict[str, tuple[str, ...]] = {
    'fp8': ('fp8', 'bf16', 'fp16', 'tf32', 'fp32'),
    'bf16': ('bf16', 'fp16', 'tf32', 'fp32'),
    'fp16': ('fp16', 'bf16', 'tf32', 'fp32'),
    'tf32': ('tf32', 'fp32'),
    'fp32': ('fp32',),
}


@dataclass(frozen=True)
class LinkSpec:
    """A network between nodes.

    Attributes:
        key: catalog id (``ib-ndr``).
        name: in words (``InfiniBand NDR 400 Gb/s per GPU``).
        bandwidth_bytes_per_s: one direction, per GPU (a rail per GPU on most
            training clusters).
        latency_s: one-way small-message latency.
    """

    key: str
    name: str
    bandwidth_bytes_per_s: float
    latency_s: float = 5e-6
    aliases: tuple[str, ...] = ()
    source: str = ''
