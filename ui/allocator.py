"""Keep the search's freed arrays in the process instead of handing them back to the OS.

A plan search on 64 GPUs allocates a few hundred numpy temporaries of 0.3-0.8 MB on the
worker thread. glibc serves blocks that large with ``mmap`` and trims its per-thread
arenas as soon as they are freed, so every search faults its memory in again: about
6,000 page faults and 10 ms of a 50 ms search (``benchmarks/gui_timeline.py``). Raising
the mmap and trim thresholds keeps those pages mapped between searches; the process
holds at most :data:`TRIM_THRESHOLD_BYTES` of freed memory more.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

# mallopt parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 2**20  # glibc's ceiling on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD_BYTES = 128 * 2**20


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; False where that is not glibc (no change)."""
    if not sys.platform.startswith('linux'):
        return False
    name = ctypes.util.find_library('c')
    try:
        libc = ctypes.CDLL(name or 'libc.so.6')
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
          and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1)
    if not ok:
        log.debug('mallopt refused the thresholds; allocator left as it was')
    return ok
