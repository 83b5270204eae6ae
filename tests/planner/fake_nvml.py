"""A fake ``pynvml`` module: an 8-GPU H100 NVLink node, with injectable failures.

It mirrors the parts of nvidia-ml-py that ``planner.hardware.local.nvml`` calls: the same function
names and signatures, ``NVMLError`` subclasses built from the NVML return code, and
process records with ``pid``/``usedGpuMemory``. Install it with :func:`install`.

Failures are per GPU: ``FakeGpu.fail`` maps a pynvml function name to the NVML return
code it raises (``FUNCTION_NOT_FOUND``, ``NOT_SUPPORTED``...); ``FakeGpu.lost_at`` names
the call from which on the GPU answers nothing but ``lost_code`` (GpuIsLost by default).
``nvmlDeviceGetMemoryInfo_v2`` in ``fail`` fails only the v2 call (``version=`` given).
"""

# ruff: noqa: N802, N815  (the names are pynvml's)

from __future__ import annotations

import sys
import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from planner.hardware.local import nvml

MIB = 2**20

# NVML return codes (nvml.h)
SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
UNKNOWN = 999
VALUE_NOT_AVAILABLE = 2**64 - 1

_ERRORS = {
    INVALID_ARGUMENT: ('InvalidArgument', 'Invalid Argument'),
    NOT_SUPPORTED: ('NotSupported', 'Not Supported'),
    NO_PERMISSION: ('NoPermission', 'Insufficient Permissions'),
    DRIVER_NOT_LOADED: ('DriverNotLoaded', 'Driver Not Loaded'),
    LIBRARY_NOT_FOUND: ('LibraryNotFound', 'NVML Shared Library Not Found'),
    FUNCTION_NOT_FOUND: ('FunctionNotFound', 'Function Not Found'),
    GPU_IS_LOST: ('GpuIsLost', 'GPU is lost'),
    LIB_RM_VERSION_MISMATCH: ('LibRmVersionMismatch',
                              'RM has detected an NVML/RM version mismatch.'),
    UNKNOWN: ('Unknown', 'Unknown Error'),
}


class NVMLError(Exception):
    """Like pynvml's: ``NVMLError(code)`` is an instance of the code's subclass."""

    _by_code: ClassVar[dict[int, type[NVMLError]]] = {}  # filled below, as in pynvml

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _ERRORS.get(self.value, ('', f'NVML Error with code {self.value}'))[1]


for _code, (_name, _) in _ERRORS.items():
    _cls = type(f'NVMLError_{_name}', (NVMLError,), {})
    NVMLError._by_code[_code] = _cls


class NVMLLibraryMismatchError(Exception):
    """pynvml raises it from an unversioned call the driver lacks."""


@dataclass
class FakeGpu:
    """One GPU and what it answers; defaults are an idle H100 SXM5 in a DGX H100."""

    name: str = 'NVIDIA H100 80GB HBM3'
    memory_total_bytes: int = 81559 * MIB
    memory_used_bytes: int = 0
    memory_reserved_bytes: int = 519 * MIB
    compute_capability: tuple[int, int] = (9, 0)
    nvlinks: int = 18
    nvlinks_down: int = 0
    utilization: tuple[int, int] = (0, 0)  # gpu %, memory %
    temperature_c: int = 33
    power_mw: int = 71_000
    power_limit_mw: int = 700_000
    clocks_mhz: tuple[int, int] = (345, 2619)  # SM, memory
    max_clocks_mhz: tuple[int, int] = (1980, 2619)
    pcie: tuple[int, int] = (5, 16)  # current generation, width
    pcie_max: tuple[int, int] = (5, 16)
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    fail: dict[str, int] = field(default_factory=dict)
    lost_at: str | None = None
    lost_code: int = GPU_IS_LOST
    uuid: str = ''
    bus_id: str = ''
    numa_node: int = 0
    is_lost: bool = False


# DGX H100 PCI bus ids, in NVML index order.
_BUS = ('18', '2A', '3A', '5D', '9A', 'AB', 'BA', 'DB')


class FakeNvml(types.ModuleType):
    """A stand-in for the ``pynvml`` module.

    Attributes:
        gpus: the node's GPUs, in NVML index order.
        init_error: NVML return code ``nvmlInit`` raises, or ``None``.
        count_error: NVML return code ``nvmlDeviceGetCount`` raises, or ``None``.
        calls: how often each function was called.
        initialised: nvmlInit calls not yet balanced by nvmlShutdown.
    """

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_NVLINK_MAX_LINKS = 36
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0
    NVML_P2P_STATUS_NOT_SUPPORTED = 5
    NVML_TOPOLOGY_NODE = 40
    NVML_TOPOLOGY_SYSTEM = 50
    NVML_VALUE_NOT_AVAILABLE_ulonglong = types.SimpleNamespace(value=VALUE_NOT_AVAILABLE)
    nvmlMemory_v2 = 0x02000028

    def __init__(self, gpus: list[FakeGpu] | None = None, *, init_error: int | None = None,
                 count_error: int | None = None, driver: str = '550.54.15',
                 cuda: int = 12040) -> None:
        super().__init__('pynvml')
        self.gpus = gpus if gpus is not None else h100_node()
        for i, gpu in enumerate(self.gpus):
            gpu.uuid = gpu.uuid or f'GPU-fa4e0000-0000-4000-8000-{i:012x}'
            gpu.bus_id = gpu.bus_id or f'00000000:{_BUS[i % len(_BUS)]}:00.0'
            gpu.numa_node = i * 2 // max(len(self.gpus), 1)
        self.init_error = init_error
        self.count_error = count_error
        self.driver, self.cuda = driver, cuda
        self.calls: Counter[str] = Counter()
        self.initialised = 0
        for code, (name, _) in _ERRORS.items():
            setattr(self, f'NVMLError_{name}', NVMLError._by_code[code])

    # -- helpers
    def _gpu(self, func: str, handle: Any, *, version_suffix: str = '') -> FakeGpu:
        self.calls[func + version_suffix] += 1
        if not self.initialised:
            raise NVMLError(1)  # Uninitialized
        gpu = self.gpus[handle.index]
        if gpu.lost_at in (func, func + version_suffix):
            gpu.is_lost = True
        if gpu.is_lost:
            raise NVMLError(gpu.lost_code)
        code = gpu.fail.get(func + version_suffix)
        if code is not None:
            raise NVMLError(code)
        return gpu

    # -- library
    def nvmlInitWithFlags(self, flags: int) -> None:
        self.calls['nvmlInit'] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised += 1

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> None:
        self.calls['nvmlShutdown'] += 1
        if not self.initialised:
            raise NVMLError(1)
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        handle = types.SimpleNamespace(index=index)
        self._gpu('nvmlDeviceGetHandleByIndex', handle)
        return handle

    # -- static facts
    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu('nvmlDeviceGetName', handle).name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._gpu('nvmlDeviceGetUUID', handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return types.SimpleNamespace(busId=self._gpu('nvmlDeviceGetPciInfo', handle).bus_id)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return self._gpu('nvmlDeviceGetCudaComputeCapability', handle).compute_capability

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: int) -> int:
        return self._gpu('nvmlDeviceGetMaxClockInfo', handle).max_clocks_mhz[clock - 1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._gpu('nvmlDeviceGetMaxPcieLinkGeneration', handle).pcie_max[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._gpu('nvmlDeviceGetMaxPcieLinkWidth', handle).pcie_max[1]

    # -- polled values
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        # pynvml calls the C function nvmlDeviceGetMemoryInfo_v2 when a version is given
        gpu = self._gpu('nvmlDeviceGetMemoryInfo', handle,
                        version_suffix='_v2' if version else '')
        total, used = gpu.memory_total_bytes, gpu.memory_used_bytes
        if version:  # v2 reports the driver-reserved part apart from "used"
            return types.SimpleNamespace(total=total, reserved=gpu.memory_reserved_bytes,
                                         used=used, free=total - used - gpu.memory_reserved_bytes)
        used += gpu.memory_reserved_bytes
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu_pct, mem_pct = self._gpu('nvmlDeviceGetUtilizationRates', handle).utilization
        return types.SimpleNamespace(gpu=gpu_pct, memory=mem_pct)

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int) -> int:
        return self._gpu('nvmlDeviceGetTemperatureV', handle).temperature_c

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return self._gpu('nvmlDeviceGetTemperature', handle).temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._gpu('nvmlDeviceGetPowerUsage', handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._gpu('nvmlDeviceGetEnforcedPowerLimit', handle).power_limit_mw

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        return self._gpu('nvmlDeviceGetClockInfo', handle).clocks_mhz[clock - 1]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._gpu('nvmlDeviceGetCurrPcieLinkGeneration', handle).pcie[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._gpu('nvmlDeviceGetCurrPcieLinkWidth', handle).pcie[1]

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        gpu = self._gpu('nvmlDeviceGetNvLinkState', handle)
        if not gpu.nvlinks:
            raise NVMLError(NOT_SUPPORTED)
        if link >= gpu.nvlinks:
            raise NVMLError(INVALID_ARGUMENT)
        return 0 if link < gpu.nvlinks_down else 1

    def _procs(self, func: str, handle: Any) -> list[Any]:
        gpu = self._gpu(func, handle)
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF,
                                      computeInstanceId=0xFFFFFFFF)
                for pid, used in gpu.processes]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[Any]:
        return self._procs('nvmlDeviceGetComputeRunningProcesses_v3', handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return self._procs('nvmlDeviceGetComputeRunningProcesses_v2', handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return self._procs('nvmlDeviceGetComputeRunningProcesses', handle)

    # -- pairs
    def nvmlDeviceGetP2PStatus(self, a: Any, b: Any, index: int) -> int:
        ga, gb = (self._gpu('nvmlDeviceGetP2PStatus', h) for h in (a, b))
        if index == self.NVML_P2P_CAPS_INDEX_NVLINK:  # every GPU sits on the NVSwitches
            return self.NVML_P2P_STATUS_OK if ga.nvlinks and gb.nvlinks else \
                self.NVML_P2P_STATUS_NOT_SUPPORTED
        return self.NVML_P2P_STATUS_OK

    def nvmlDeviceGetTopologyCommonAncestor(self, a: Any, b: Any) -> int:
        ga, gb = (self._gpu('nvmlDeviceGetTopologyCommonAncestor', h) for h in (a, b))
        return self.NVML_TOPOLOGY_NODE if ga.numa_node == gb.numa_node else \
            self.NVML_TOPOLOGY_SYSTEM


def h100_node(count: int = 8) -> list[FakeGpu]:
    """An HGX/DGX H100 node: ``count`` H100 SXM5 80GB, 18 NVLinks each, all on NVSwitch."""
    return [FakeGpu() for _ in range(count)]


def install(monkeypatch: pytest.MonkeyPatch, fake: types.ModuleType | None) -> None:
    """Make ``import pynvml`` return ``fake`` (``None``: make it fail) in a fresh session."""
    nvml.shutdown()  # forget a session opened with another module
    monkeypatch.setitem(sys.modules, 'pynvml', fake)



def real_driver_present() -> bool:
    """``nvmlInit`` succeeds with the real bindings (no-driver tests then do not apply)."""
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True
