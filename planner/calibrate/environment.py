"""Stage 1 of a calibration: the device and the software stack (child process only).

Device name, UUID, memory, compute capability and catalog match; torch, CUDA, cuDNN,
NCCL and Python versions; the allocator configuration; and the memory the CUDA
context takes (``mem_get_info`` used minus ``memory_reserved`` right after CUDA
initialisation). Every function imports torch itself.
"""

from __future__ import annotations

import contextlib
import os
import platform
from typing import Any

from planner.calibrate.probes import sync


def host_memory_bytes() -> int:
    """Physical memory of this machine."""
    try:
        return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    except (ValueError, OSError, AttributeError):  # not POSIX
        return 16 << 30


def cpu_name() -> str:
    """The CPU model, as /proc/cpuinfo or the platform module says."""
    try:
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            for line in f:
                if line.startswith('model name'):
                    return f'CPU {line.split(":", 1)[1].strip()}'
    except OSError:
        pass
    return f'CPU {platform.processor() or platform.machine()}'


def environment(device: str) -> dict[str, Any]:
    """Device and software facts; on CUDA initialises the context and measures it.

    Returns ``{'device': DeviceInfo fields, 'environment': Environment fields}``.
    """
    import torch

    conf = os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')
    env: dict[str, Any] = {
        'torch_version': torch.__version__, 'cuda_version': torch.version.cuda,
        'cudnn_version': None, 'nccl_version': None,
        'python_version': platform.python_version(), 'allocator_config': conf,
        'expandable_segments': 'expandable_segments:true' in conf.replace(' ', '').lower(),
        'cuda_context_bytes': 0, 'cpu_threads': torch.get_num_threads()}
    if device == 'cpu':
        return {'device': {'kind': 'cpu', 'name': cpu_name(), 'uuid': None, 'catalog_key': None,
                           'memory_bytes': host_memory_bytes(), 'compute_capability': None,
                           'count': 1},
                'environment': env}
    cudnn = torch.backends.cudnn.version()
    env['cudnn_version'] = None if cudnn is None else str(cudnn)
    with contextlib.suppress(AttributeError, RuntimeError, TypeError):
        env['nccl_version'] = '.'.join(map(str, torch.cuda.nccl.version()))
    torch.cuda.init()
    torch.empty(1, device='cuda')  # creates the context and loads the first kernels
    sync('cuda')
    free, total = torch.cuda.mem_get_info()
    # Driver view minus the caching allocator: context, kernels, libraries (and any other
    # process on the device, which is why calibration wants the GPU to itself).
    env['cuda_context_bytes'] = max(int(total - free - torch.cuda.memory_reserved()), 0)
    props = torch.cuda.get_device_properties(0)
    uuid = _cuda_uuid(props)
    return {'device': {'kind': 'cuda', 'name': props.name, 'uuid': uuid,
                       'catalog_key': _catalog_key(props.name, int(total)),
                       'memory_bytes': int(total),
                       'compute_capability': f'{props.major}.{props.minor}',
                       'count': torch.cuda.device_count()},
            'environment': env}


def _cuda_uuid(props: Any) -> str | None:
    visible = os.environ.get('CUDA_VISIBLE_DEVICES', '').split(',')[0].strip()
    if visible.upper().startswith(('GPU-', 'MIG-')):
        return visible
    raw = getattr(props, 'uuid', None)
    if raw is None:
        return None
    text = str(raw)
    return text if text.upper().startswith('GPU-') else f'GPU-{text}'


def _catalog_key(name: str, memory_bytes: int) -> str | None:
    try:  # the catalog needs platformdirs, which a training environment may lack
        from planner.hardware.catalog import match_nvml_name

        spec = match_nvml_name(name, memory_bytes)
    except Exception:  # noqa: BLE001 - a missing catalog only costs the match
        return None
    return None if spec is None else spec.key


def limit_memory(device: str, limit_bytes: int) -> None:
    """Emulate a smaller GPU: cap the caching allocator (not the context) at ``limit_bytes``.

    The CPU has no cap to set: its limit is checked against MemTracker's peaks.
    """
    if device != 'cuda':
        return
    import torch

    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(min(limit_bytes / total, 1.0))
