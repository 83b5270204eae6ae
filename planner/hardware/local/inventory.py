"""What NVML says about this machine's GPUs, as immutable snapshots.

These records are plain frozen dataclasses, safe to hand between threads (the GUI's
poller emits one per tick). A value NVML cannot give is ``None``, never a sentinel
string; units are in the field names (NVML's mW and KiB are converted at the edge).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal['ok', 'partial', 'no_driver', 'no_bindings', 'driver_mismatch', 'error']

# nvidia-smi topo -m legend, for the text view and the docs.
TOPOLOGY_LEGEND = (
    'X = self, NV# = bonded set of # NVLinks, PIX = at most one PCIe switch, '
    'PXB = several PCIe switches, PHB = a PCIe host bridge, NODE = host bridges within '
    'one NUMA node, SYS = across NUMA nodes (SMP interconnect), ? = unknown'
)


@dataclass(frozen=True)
class ProcessInfo:
    """A process holding memory on a GPU.

    Attributes:
        pid: process id as the driver sees it (the host's pid namespace).
        used_memory_bytes: device memory it holds; ``None`` when NVML cannot tell
            (``NVML_VALUE_NOT_AVAILABLE``: Windows WDDM, some containers).
        name: its command name from ``/proc/<pid>/comm``; ``None`` when unreadable
            (another pid namespace, not Linux, already exited).
    """

    pid: int
    used_memory_bytes: int | None = None
    name: str | None = None


@dataclass(frozen=True)
class GpuInfo:
    """One GPU at one instant.

    Static facts (name, uuid, PCI bus id, total memory, compute capability, maximum
    clocks and PCIe link) are read once per NVML session; the rest is polled.

    Attributes:
        index: NVML index (PCI bus order; CUDA's order only with
            ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: hand GPUs to other processes by ``uuid``).
        uuid: ``GPU-…``, the stable id to put in ``CUDA_VISIBLE_DEVICES``.
        name: the name NVML reports (``NVIDIA H100 80GB HBM3``).
        pci_bus_id: ``00000000:18:00.0``.
        memory_total_bytes: device memory as the driver reports it.
        memory_used_bytes: in use (v2: excludes the driver-reserved part).
        memory_free_bytes: still allocatable.
        utilization_gpu_percent: share of the last sample period a kernel ran, 0-100.
        utilization_memory_percent: share of it device memory was read or written.
        temperature_c: GPU die temperature, °C.
        power_draw_w: board power now, W.
        power_limit_w: enforced power limit, W.
        sm_clock_mhz: SM clock now, MHz.
        mem_clock_mhz: memory clock now, MHz.
        sm_clock_max_mhz: highest SM clock, MHz.
        mem_clock_max_mhz: highest memory clock, MHz.
        compute_capability: ``(major, minor)``, e.g. ``(9, 0)`` for Hopper.
        pcie_generation: PCIe generation the link runs at now (drops when idle).
        pcie_width: PCIe lanes in use now.
        pcie_generation_max: the highest generation the GPU and slot support.
        pcie_width_max: the most lanes the GPU and slot support.
        nvlink_links: NVLinks NVML reports for this GPU (0 without NVLink).
        nvlink_active_links: those of them that are up.
        processes: compute processes holding memory; ``()`` for none, ``None`` when
            NVML cannot list them.
        catalog: the matching catalog id (``h100-sxm``), or ``None`` for a GPU the
            catalog does not know.
        lost: the GPU stopped answering (``GpuIsLost``/``Unknown``); its polled
            fields are ``None``.
        errors: ``'field: reason'`` for each field NVML could not give.
    """

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    utilization_gpu_percent: int | None = None
    utilization_memory_percent: int | None = None
    temperature_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    compute_capability: tuple[int, int] | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    pcie_generation_max: int | None = None
    pcie_width_max: int | None = None
    nvlink_links: int | None = None
    nvlink_active_links: int | None = None
    processes: tuple[ProcessInfo, ...] | None = None
    catalog: str | None = None
    lost: bool = False
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class LinkInfo:
    """How two GPUs reach each other, as ``nvidia-smi topo -m`` shows it.

    Attributes:
        gpu_a: NVML index of the first GPU (the lower one).
        gpu_b: NVML index of the second.
        nvlink: NVML reports peer-to-peer over NVLink between them; ``None`` unknown.
        nvlink_links: NVLinks between them: the fewer active links of the two GPUs
            (exact behind NVSwitch, where every GPU reaches every other over all its
            links; an upper bound for bridged pairs). ``None`` without NVLink.
        pcie_path: the closest common PCIe ancestor: ``PIX``, ``PXB``, ``PHB``,
            ``NODE`` or ``SYS``; ``None`` when NVML cannot tell.
        label: the matrix cell: ``NV18`` over NVLink, else ``pcie_path``, else ``?``.
    """

    gpu_a: int
    gpu_b: int
    nvlink: bool | None
    nvlink_links: int | None
    pcie_path: str | None
    label: str


@dataclass(frozen=True)
class HardwareInventory:
    """One snapshot of the local GPUs.

    Attributes:
        status: ``ok``; ``partial`` (some GPU lost); ``no_driver``; ``no_bindings``
            (nvidia-ml-py missing or broken); ``driver_mismatch`` (kernel module not
            loaded, or library and module versions differ); ``error``.
        message: what happened, in words, with what to do about it.
        driver_version: NVIDIA driver, e.g. ``550.54.15``.
        cuda_driver_version: the newest CUDA the driver supports, ``major.minor``.
        gpus: one entry per GPU NVML lists, lost ones included.
        topology: one entry per pair of GPUs (``gpu_a < gpu_b``).
        taken_at: when the snapshot was taken, seconds since the Unix epoch.
    """

    status: Status
    message: str
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: tuple[GpuInfo, ...] = ()
    topology: tuple[LinkInfo, ...] = ()
    taken_at: float = 0.0

    def link(self, a: int, b: int) -> LinkInfo | None:
        """The link between GPUs ``a`` and ``b`` (either order), if known."""
        lo, hi = sorted((a, b))
        return next((li for li in self.topology if (li.gpu_a, li.gpu_b) == (lo, hi)), None)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as JSON-ready builtins (tuples become lists)."""
        return dataclasses.asdict(self)
