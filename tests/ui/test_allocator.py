"""The GUI's allocator tuning: glibc keeps freed arrays mapped, other platforms untouched."""

from __future__ import annotations

import platform
import resource
import sys
import threading

import numpy as np
import pytest

from ui import allocator


def test_other_platforms_are_left_alone(monkeypatch):
    monkeypatch.setattr(sys, 'platform', 'darwin')
    assert allocator.keep_freed_memory() is False


@pytest.mark.skipif(not sys.platform.startswith('linux') or platform.libc_ver()[0] != 'glibc',
                    reason='glibc only')
def test_a_worker_thread_stops_faulting_its_arrays_back_in():
    """0.75 MB arrays made and freed over and over on a thread: after the tuning they
    come from memory the process kept, not from fresh pages."""
    def faults() -> list[int]:
        out = []

        def work() -> None:
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            for _ in range(200):
                a = np.ones(93_000)
                b = a * 2.0
                del a, b
            out.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        return out

    assert allocator.keep_freed_memory() is True
    pages_per_array = 93_000 * 8 // resource.getpagesize() + 1
    # the thread's first two arrays fault in once (366 pages here); untuned, all 400
    # arrays fault every page (66,466 faults on the development VM)
    assert faults()[0] < 5 * pages_per_array
