"""The NVML adapter: the only module that imports ``pynvml`` (from nvidia-ml-py).

:func:`probe` opens NVML on first use (thread-safe, once per process; :func:`shutdown`
or interpreter exit closes it) and returns a :class:`HardwareInventory`. It never
raises: no driver, missing bindings, a driver/library mismatch, a lost GPU and a field
the GPU does not support are all states of the snapshot, each with words saying what
to do. Static facts are read once per session and GPU; the rest is polled per call.

Equivalent nvidia-smi queries: ``nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,
memory.total,memory.used,memory.free,utilization.gpu,utilization.memory,temperature.gpu,
power.draw,enforced.power.limit,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,
compute_cap,pcie.link.gen.current,pcie.link.width.current --format=csv`` and
``nvidia-smi topo -m``.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.hardware.local.inventory import (
    GpuInfo,
    HardwareInventory,
    LinkInfo,
    ProcessInfo,
    Status,
)
from planner.messages import Message

__all__ = ['probe', 'shutdown']

log = logging.getLogger(__name__)

# NVML return codes and enums from nvml.h: a stable C ABI, so naming them needs no pynvml.
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_LIB_RM_VERSION_MISMATCH = 18
_UNKNOWN = 999
_LOST = frozenset({_GPU_IS_LOST, _UNKNOWN})  # the GPU fell off the bus or hung
_CLOCK_SM, _CLOCK_MEM = 1, 2
_TEMPERATURE_GPU = 0
_P2P_CAPS_INDEX_NVLINK = 2
_P2P_STATUS_OK = 0
_FEATURE_ENABLED = 1
# (unsigned long long)-1: older bindings hand it through, newer ones turn it into None.
_VALUE_NOT_AVAILABLE = 2**64 - 1
# nvmlDeviceGetTopologyCommonAncestor level -> nvidia-smi topo -m label.
_PCIE_PATH = {0: 'PIX', 10: 'PIX', 20: 'PXB', 30: 'PHB', 40: 'NODE', 50: 'SYS'}
_MISSING_LOG_LIMIT = 1024  # as nvitop: a bound on the set of functions logged once
_PROC_ROOT = Path('/proc')  # process names, read without psutil
_FALLBACK = 'batchfit uses the catalog instead'
_STATIC_FIELDS = ('name', 'uuid', 'pci_bus_id', 'memory_total_bytes', 'compute_capability',
                  'sm_clock_max_mhz', 'mem_clock_max_mhz', 'pcie_generation_max',
                  'pcie_width_max')

_LOCK = threading.Lock()
_atexit_registered = False


class _Session:
    """The open NVML session: the module it was opened with and what is cached in it."""

    def __init__(self) -> None:
        self.nv: Any = None  # the pynvml module, once nvmlInit succeeded
        self.handles: dict[int, Any] = {}
        self.static: dict[int, tuple[dict[str, Any], tuple[str, ...]]] = {}
        self.missing: set[str] = set()  # functions already logged as missing


_session = _Session()


class _GpuLostError(Exception):
    """The GPU stopped answering in the middle of a query."""


# ----------------------------------------------------------------- session


def _open() -> tuple[Any, tuple[Status, str] | None]:
    """The initialised pynvml module, or why there is none (double-checked lock)."""
    nv = _session.nv
    if nv is not None:  # fast path: no lock once open
        return nv, None
    with _LOCK:
        if _session.nv is not None:
            return _session.nv, None
        try:
            import pynvml
        except ImportError as exc:
            return None, ('no_bindings', f'the NVML bindings are missing ({exc}): install '
                          f'nvidia-ml-py (not the deprecated pynvml package); {_FALLBACK}')
        if not callable(getattr(pynvml, 'nvmlInitWithFlags', None)):
            # nvidia-ml-py3 and old pynvml install a pynvml.py of their own (nvitop #1, #44).
            return None, ('no_bindings', 'the pynvml module is not the one from nvidia-ml-py '
                          '(another package overwrote it): run pip install --force-reinstall '
                          f'nvidia-ml-py; {_FALLBACK}')
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return None, _init_failure(exc)
        _session.nv = pynvml
        _register_atexit()
        return pynvml, None


def _init_failure(exc: Exception) -> tuple[Status, str]:
    code = getattr(exc, 'value', None)
    if code == _LIBRARY_NOT_FOUND:
        return 'no_driver', Message('nvml.no_driver', fallback=_FALLBACK)
    if code == _DRIVER_NOT_LOADED:
        return 'driver_mismatch', Message('nvml.driver_not_loaded', fallback=_FALLBACK)
    if code == _LIB_RM_VERSION_MISMATCH:
        return 'driver_mismatch', Message('nvml.version_mismatch', fallback=_FALLBACK)
    if code == _NO_PERMISSION:
        return 'error', Message('nvml.no_permission', fallback=_FALLBACK)
    return 'error', Message('nvml.failed', reason=_words(exc), fallback=_FALLBACK)


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:  # called under _LOCK
        atexit.register(shutdown)
        _atexit_registered = True


def shutdown() -> None:
    """Close the NVML session, if open, and forget what it cached.

    Balances the one ``nvmlInit`` :func:`probe` made; runs at interpreter exit. Safe
    to call at any time: the next :func:`probe` opens a new session.
    """
    with _LOCK:
        nv, _session.nv = _session.nv, None
        _session.handles.clear()
        _session.static.clear()
        _session.missing.clear()
        if nv is None:
            return
        try:
            nv.nvmlShutdown()
        except nv.NVMLError as exc:
            log.debug('nvmlShutdown failed: %s', _words(exc))


# ----------------------------------------------------------------- queries


def _words(exc: BaseException) -> str:
    text = str(exc)
    return text or f'NVML error {getattr(exc, "value", "?")}'


def _text(value: Any) -> str:
    return value.decode('utf-8', 'replace') if isinstance(value, bytes) else str(value)


def _note_missing(name: str) -> None:
    """Log a function the driver lacks once (bindings newer than the driver)."""
    missing = _session.missing
    if name in missing or len(missing) >= _MISSING_LOG_LIMIT:
        return
    missing.add(name)
    log.info('NVML function %s is not available (a driver older than nvidia-ml-py, or older '
             'bindings); using an older call or leaving the field empty', name)


class _Reader:
    """Queries for one GPU: an unsupported field becomes ``None`` plus an entry in
    ``errors``; a lost GPU raises :class:`_GpuLostError`."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.errors: list[str] = []
        # Unversioned names are bound to the newest version and raise this instead of
        # FunctionNotFound on an older driver.
        mismatch = getattr(nv, 'NVMLLibraryMismatchError', None)
        self._mismatch: tuple[type[BaseException], ...] = (mismatch,) if mismatch else ()

    def raw(self, func: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``func``; NVMLError propagates except for a lost GPU (:class:`_GpuLostError`)."""
        try:
            return getattr(self.nv, func)(*args, **kwargs)
        except self.nv.NVMLError as exc:
            if getattr(exc, 'value', None) in _LOST:
                raise _GpuLostError(_words(exc)) from exc
            raise

    def first(self, field: str, attempts: Sequence[tuple[str, str, tuple, dict]]) -> Any:
        """The first answer from several versions of a query, newest first.

        Args:
            field: the GpuInfo field, for ``errors``.
            attempts: ``(C function name for the log, pynvml name, args, kwargs)``.
        """
        reason = 'not available in these bindings'
        for c_name, func, args, kwargs in attempts:
            if not hasattr(self.nv, func):
                _note_missing(c_name)
                continue
            try:
                return self.raw(func, *args, **kwargs)
            except self._mismatch:
                _note_missing(c_name)
            except self.nv.NVMLError as exc:
                reason = _words(exc)
                if getattr(exc, 'value', None) != _FUNCTION_NOT_FOUND:
                    break  # NotSupported etc.: an older version will not know better
                _note_missing(c_name)
        self.errors.append(f'{field}: {reason}')
        return None

    def get(self, field: str, func: str, *args: Any) -> Any:
        """One query, ``None`` (and an ``errors`` entry) when it fails."""
        return self.first(field, [(func, func, args, {})])


def _memory(r: _Reader, handle: Any) -> Any:
    attempts: list[tuple[str, str, tuple, dict]] = [
        ('nvmlDeviceGetMemoryInfo', 'nvmlDeviceGetMemoryInfo', (handle,), {})]
    if hasattr(r.nv, 'nvmlMemory_v2'):  # v2 separates driver-reserved memory from used
        attempts.insert(0, ('nvmlDeviceGetMemoryInfo_v2', 'nvmlDeviceGetMemoryInfo',
                            (handle,), {'version': r.nv.nvmlMemory_v2}))
    return r.first('memory', attempts)


def _read_static(r: _Reader, handle: Any, out: dict[str, Any]) -> None:
    """Facts that do not change while the driver is loaded, into ``out`` as read."""
    name = r.get('name', 'nvmlDeviceGetName', handle)
    out['name'] = None if name is None else _text(name)
    uuid = r.get('uuid', 'nvmlDeviceGetUUID', handle)
    out['uuid'] = None if uuid is None else _text(uuid)
    pci = r.get('pci_bus_id', 'nvmlDeviceGetPciInfo', handle)
    out['pci_bus_id'] = None if pci is None else _text(pci.busId)
    memory = _memory(r, handle)
    # total 0: a unified-memory device (Grace Hopper) that has no separate device memory
    out['memory_total_bytes'] = None if memory is None else int(memory.total) or None
    cc = r.get('compute_capability', 'nvmlDeviceGetCudaComputeCapability', handle)
    out['compute_capability'] = None if cc is None else (int(cc[0]), int(cc[1]))
    out['sm_clock_max_mhz'] = r.get('sm_clock_max_mhz', 'nvmlDeviceGetMaxClockInfo', handle,
                                    _CLOCK_SM)
    out['mem_clock_max_mhz'] = r.get('mem_clock_max_mhz', 'nvmlDeviceGetMaxClockInfo', handle,
                                     _CLOCK_MEM)
    out['pcie_generation_max'] = r.get('pcie_generation_max',
                                       'nvmlDeviceGetMaxPcieLinkGeneration', handle)
    out['pcie_width_max'] = r.get('pcie_width_max', 'nvmlDeviceGetMaxPcieLinkWidth', handle)


def _milli(value: int | None) -> float | None:
    return None if value is None else value / 1000.0  # NVML gives mW


def _read_dynamic(r: _Reader, handle: Any, out: dict[str, Any]) -> None:
    """Values polled on every snapshot, into ``out`` as read."""
    memory = _memory(r, handle)
    if memory is not None:
        out['memory_used_bytes'], out['memory_free_bytes'] = int(memory.used), int(memory.free)
        if out.get('memory_total_bytes') is None:  # the static read failed this session
            out['memory_total_bytes'] = int(memory.total) or None
    util = r.get('utilization', 'nvmlDeviceGetUtilizationRates', handle)
    if util is not None:
        out['utilization_gpu_percent'] = int(util.gpu)
        out['utilization_memory_percent'] = int(util.memory)
    out['temperature_c'] = r.first('temperature_c', [
        ('nvmlDeviceGetTemperatureV', 'nvmlDeviceGetTemperatureV', (handle, _TEMPERATURE_GPU),
         {}),
        ('nvmlDeviceGetTemperature', 'nvmlDeviceGetTemperature', (handle, _TEMPERATURE_GPU), {}),
    ])
    out['power_draw_w'] = _milli(r.get('power_draw_w', 'nvmlDeviceGetPowerUsage', handle))
    out['power_limit_w'] = _milli(r.get('power_limit_w', 'nvmlDeviceGetEnforcedPowerLimit',
                                        handle))
    out['sm_clock_mhz'] = r.get('sm_clock_mhz', 'nvmlDeviceGetClockInfo', handle, _CLOCK_SM)
    out['mem_clock_mhz'] = r.get('mem_clock_mhz', 'nvmlDeviceGetClockInfo', handle, _CLOCK_MEM)
    out['pcie_generation'] = r.get('pcie_generation', 'nvmlDeviceGetCurrPcieLinkGeneration',
                                   handle)
    out['pcie_width'] = r.get('pcie_width', 'nvmlDeviceGetCurrPcieLinkWidth', handle)
    out['nvlink_links'], out['nvlink_active_links'] = _nvlinks(r, handle)
    out['processes'] = _processes(r, handle)


def _nvlinks(r: _Reader, handle: Any) -> tuple[int, int]:
    """(links NVML reports, links that are up); a GPU without NVLink has (0, 0)."""
    present = active = 0
    for link in range(getattr(r.nv, 'NVML_NVLINK_MAX_LINKS', 18)):
        try:
            state = r.raw('nvmlDeviceGetNvLinkState', handle, link)
        except r.nv.NVMLError:
            continue  # NotSupported / InvalidArgument: no such link on this GPU
        present += 1
        active += state == _FEATURE_ENABLED
    return present, active


def _processes(r: _Reader, handle: Any) -> tuple[ProcessInfo, ...] | None:
    procs = r.first('processes', [
        (name, name, (handle,), {}) for name in (
            'nvmlDeviceGetComputeRunningProcesses_v3',
            'nvmlDeviceGetComputeRunningProcesses_v2',
            'nvmlDeviceGetComputeRunningProcesses')
    ])
    if procs is None:
        return None
    found = []
    for p in procs:
        used = getattr(p, 'usedGpuMemory', None)
        used = None if used is None or used == _VALUE_NOT_AVAILABLE else int(used)
        found.append(ProcessInfo(pid=int(p.pid), used_memory_bytes=used,
                                 name=_process_name(int(p.pid))))
    return tuple(found)


def _process_name(pid: int) -> str | None:
    try:
        name = (_PROC_ROOT / str(pid) / 'comm').read_text(encoding='utf-8', errors='replace')
    except OSError:  # another pid namespace, not Linux, or gone
        return None
    return name.strip() or None


# ----------------------------------------------------------------- snapshot


def _read_gpu(nv: Any, index: int, match: Callable[[str, int | None], tuple]
              ) -> tuple[GpuInfo, Any]:
    """One GPU and its handle (``None`` when lost); a lost GPU keeps its static facts."""
    r = _Reader(nv)
    values: dict[str, Any] = {}
    handle = None
    try:
        handle = _session.handles.get(index)
        if handle is None:
            handle = r.raw('nvmlDeviceGetHandleByIndex', index)
            _session.handles[index] = handle
        cached = _session.static.get(index)
        if cached is None:
            _read_static(r, handle, values)
            cached = ({k: values[k] for k in _STATIC_FIELDS}, tuple(r.errors))
            _session.static[index] = cached  # only once complete: a lost GPU is re-read
        else:
            values.update(cached[0])
            r.errors[:0] = cached[1]
        _read_dynamic(r, handle, values)
    except _GpuLostError as exc:
        handle = None
        r.errors.append(f'lost: {exc}')
        values = {k: values[k] for k in _STATIC_FIELDS if k in values}
    if values.get('name'):
        key, error = match(values['name'], values.get('memory_total_bytes'))
        values['catalog'] = key
        if error:
            r.errors.append(f'catalog: {error}')
    info = GpuInfo(index=index, lost=handle is None, errors=tuple(dict.fromkeys(r.errors)),
                   **values)
    return info, handle


def _catalog_matcher() -> Callable[[str, int | None], tuple[str | None, str | None]]:
    """Catalog id by NVML name and memory, memoised for one snapshot (user.toml may change
    between snapshots)."""
    from planner.hardware.catalog import match_nvml_name

    memo: dict[tuple[str, int | None], tuple[str | None, str | None]] = {}

    def match(name: str, memory_bytes: int | None) -> tuple[str | None, str | None]:
        if (name, memory_bytes) not in memo:
            try:
                spec = match_nvml_name(name, memory_bytes)
                memo[name, memory_bytes] = (spec.key if spec else None, None)
            except InputError as exc:  # a malformed user.toml
                memo[name, memory_bytes] = (None, str(exc))
        return memo[name, memory_bytes]

    return match


def _quiet(nv: Any, func: str, *args: Any) -> Any:
    """A query whose failure just leaves the value unknown."""
    try:
        return getattr(nv, func)(*args)
    except (nv.NVMLError, AttributeError):
        return None


def _topology(nv: Any, gpus: Sequence[tuple[GpuInfo, Any]]) -> tuple[LinkInfo, ...]:
    """Every pair of GPUs that still answer, as nvidia-smi topo -m shows it."""
    links = []
    for (a, ha), (b, hb) in itertools.combinations([g for g in gpus if g[1] is not None], 2):
        p2p = _quiet(nv, 'nvmlDeviceGetP2PStatus', ha, hb, _P2P_CAPS_INDEX_NVLINK)
        nvlink = None if p2p is None else p2p == _P2P_STATUS_OK
        level = _quiet(nv, 'nvmlDeviceGetTopologyCommonAncestor', ha, hb)
        pcie = _PCIE_PATH.get(level) if level is not None else None
        count = None
        if nvlink and a.nvlink_active_links and b.nvlink_active_links:
            count = min(a.nvlink_active_links, b.nvlink_active_links)
        label = f'NV{count or "?"}' if nvlink else (pcie or '?')
        links.append(LinkInfo(gpu_a=a.index, gpu_b=b.index, nvlink=nvlink,
                              nvlink_links=count, pcie_path=pcie, label=label))
    return tuple(links)


def _cuda_version(value: Any) -> str | None:
    if value is None:
        return None
    value = int(value)  # 12040 -> '12.4'
    return f'{value // 1000}.{value % 1000 // 10}'


def _summary(gpus: Sequence[GpuInfo], driver: str | None,
             cuda: str | None) -> tuple[Status, str]:
    """The status and the message: what was found, then what needs attention."""
    from planner.user_config import user_toml_path

    if not gpus:
        return 'ok', Message('nvml.no_gpus', driver=driver or '', fallback=_FALLBACK)
    kinds: dict[str, list[int]] = {}
    for g in gpus:
        kind = (f'{g.name} ({g.catalog or "not in the catalog"})' if g.name else
                'unidentified (lost before NVML gave its name)')
        kinds.setdefault(kind, []).append(g.index)
    found = ', '.join(f'{len(ix)} x {kind}' for kind, ix in kinds.items())
    parts = [f'{len(gpus)} NVIDIA GPU{"s" if len(gpus) > 1 else ""}: {found}; '
             f'driver {driver or "?"}, CUDA {cuda or "?"}.']
    lost = [g.index for g in gpus if g.lost]
    if lost:
        parts.append(f'GPU {", ".join(map(str, lost))} stopped answering NVML (GPU is lost): '
                     'look for Xid errors in dmesg; it needs a GPU reset or a reboot.')
    unknown: dict[str, list[int]] = {}
    for g in gpus:
        if g.name and g.catalog is None and not any(e.startswith('catalog:') for e in g.errors):
            unknown.setdefault(g.name, []).append(g.index)
    for name, ix in unknown.items():
        parts.append(f'GPU {", ".join(map(str, ix))} ({name}) is not in the batchfit catalog: '
                     f'describe it with a [gpus.<key>] table in {user_toml_path()} with '
                     f'nvml_names = ["{name}"] and the fields of resources/gpus.toml (see the '
                     'README, Catalogs).')
    bad_catalog = next((e for g in gpus for e in g.errors if e.startswith('catalog:')), None)
    if bad_catalog:
        parts.append(f'The catalog could not be read ({bad_catalog[len("catalog: "):]}).')
    return ('partial' if lost else 'ok'), ' '.join(parts)


def _probe(taken_at: float) -> HardwareInventory:
    nv, failure = _open()
    if failure is not None:
        return HardwareInventory(status=failure[0], message=failure[1], taken_at=taken_at)
    driver = _quiet(nv, 'nvmlSystemGetDriverVersion')
    driver = None if driver is None else _text(driver)
    cuda = _cuda_version(_quiet(nv, 'nvmlSystemGetCudaDriverVersion'))
    try:
        count = int(nv.nvmlDeviceGetCount())
    except nv.NVMLError as exc:
        return HardwareInventory(
            status='error', message=f'NVML could not count the GPUs ({_words(exc)}): '
            f'nvidia-smi shows whether the driver works; {_FALLBACK}',
            driver_version=driver, cuda_driver_version=cuda, taken_at=taken_at)
    match = _catalog_matcher()
    read = [_read_gpu(nv, i, match) for i in range(count)]
    gpus = tuple(info for info, _ in read)
    status, message = _summary(gpus, driver, cuda)
    return HardwareInventory(status=status, message=message, driver_version=driver,
                             cuda_driver_version=cuda, gpus=gpus,
                             topology=_topology(nv, read), taken_at=taken_at)


def probe() -> HardwareInventory:
    """A snapshot of the local NVIDIA GPUs; never raises.

    Returns:
        The inventory. With no driver, ``status`` is ``'no_driver'`` and ``gpus`` is
        empty; ``message`` always says what was found or what went wrong and what to do.
    """
    taken_at = time.time()
    try:
        return _probe(taken_at)
    except Exception as exc:  # the promise is a snapshot, whatever NVML does
        log.exception('reading the GPUs through NVML failed')
        return HardwareInventory(
            status='error', message=f'reading the GPUs through NVML failed unexpectedly '
            f'({type(exc).__name__}: {exc}); {_FALLBACK}. Please report this.',
            taken_at=taken_at)
