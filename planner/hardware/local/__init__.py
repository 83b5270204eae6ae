"""Local hardware: what NVML reports about this machine's NVIDIA GPUs.

``probe()`` returns an immutable :class:`HardwareInventory` snapshot and never raises;
a machine without a GPU or driver is a normal state (``status == 'no_driver'``).
Only :mod:`planner.hardware.local.nvml` imports ``pynvml``, and only when called.
"""

from __future__ import annotations

from planner.hardware.local.inventory import (
           GpuInfo,
           HardwareInventory,
           LinkInfo,
           ProcessInfo,
           Status,
)
from planner.hardware.local.nvml import probe, shutdown

__all__ = ['GpuInfo', 'HardwareInventory', 'LinkInfo', 'ProcessInfo', 'Status', 'probe',
           'shutdown']
