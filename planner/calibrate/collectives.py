"""Optional step 5: all-reduce bandwidth with torch.distributed.

Bandwidths as nccl-tests defines them (doc/PERFORMANCE.md: algbw and busbw).

:func:`sweep` (in the calibration child) starts ``world_size`` fresh processes,
``python -m planner.calibrate.collectives --rank R ...``: NCCL, one per GPU, when two
or more GPUs are visible; gloo with two local processes on the CPU (good enough to
check the fit and the bus-bandwidth formulas, meaningless as GPU numbers). Each size
is warmed up, then timed ``repeats`` times between barriers; the per-rank times are
reduced with MAX (the slowest rank sets the step) and the minimum over repeats kept.
Rank 0 prints one JSON line; :func:`sweep` fits t(S) = alpha + S / beta and returns
the ``collectives`` member of the profile (or None, with a note, when it cannot run).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

MIB = 1 << 20
CUDA_MAX_BYTES = 1 << 30
CPU_MAX_BYTES = 64 * MIB
MIN_BYTES = 1 * MIB
SIZE_FACTOR = 4
WARMUP = 3
REPEATS = 5
SWEEP_TIMEOUT_S = 300.0


def sizes_bytes(max_bytes: int) -> list[int]:
    """1 MiB, 4 MiB, ... up to ``max_bytes`` (4x steps)."""
    sizes, size = [], MIN_BYTES
    while size <= max_bytes:
        sizes.append(size)
        size *= SIZE_FACTOR
    return sizes or [MIN_BYTES]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


def sweep(device: str, gpus: int, max_bytes: int | None, python: str,
          notes: list[str]) -> dict[str, Any] | None:
    """Run the sweep in fresh processes; the profile's ``collectives`` member or None."""
    from planner.calibrate.fit import bus_bandwidth, fit_latency_bandwidth

    if device == 'cuda' and gpus < 2:
        notes.append('collectives skipped: NCCL needs 2+ GPUs (pass several --gpu-uuid)')
        return None
    backend, world = ('nccl', gpus) if device == 'cuda' else ('gloo', 2)
    sizes = sizes_bytes(max_bytes or (CUDA_MAX_BYTES if device == 'cuda' else CPU_MAX_BYTES))
    port = _free_port()
    env = {**os.environ, 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(port)}
    cmd = [python or sys.executable, '-m', 'planner.calibrate.collectives', '--backend', backend,
           '--world-size', str(world), '--sizes', ','.join(map(str, sizes))]
    procs = [subprocess.Popen([*cmd, '--rank', str(r)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    try:
        outputs = [p.communicate(timeout=SWEEP_TIMEOUT_S) for p in procs]
    except subprocess.TimeoutExpired:
        notes.append(f'collectives skipped: the sweep hung for {SWEEP_TIMEOUT_S:.0f} s')
        return None
    finally:
        for p in procs:  # cancelled or timed out: take the ranks down with us
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        err = next((e for p, (_, e) in zip(procs, outputs, strict=True) if p.returncode), '')
        notes.append('collectives skipped: ' + (err.strip().splitlines() or ['a rank failed'])[-1])
        return None
    result = json.loads(outputs[0][0].strip().splitlines()[-1])
    points = []
    for size, t in zip(result['sizes'], result['times_s'], strict=True):
        algbw, busbw = bus_bandwidth(size, t, world)
        points.append({'size_bytes': size, 'time_s': t, 'algbw_bytes_per_s': algbw,
                       'busbw_bytes_per_s': busbw})
    # Startup skew inflates the first size (the first collective also initialises the
    # communicator): fit without it.
    fit_points = points[1:] if len(points) > 2 else points
    try:
        alpha, beta = fit_latency_bandwidth([p['size_bytes'] for p in fit_points],
                                            [p['time_s'] for p in fit_points])
    except ValueError as exc:
        notes.append(f'collective fit failed: {exc}')
        alpha, beta = 0.0, max(p['algbw_bytes_per_s'] for p in points)
    return {'backend': backend, 'world_size': world, 'points': points, 'alpha_s': alpha,
            'beta_bytes_per_s': beta, 'nccl_memory_bytes': result.get('nccl_memory_bytes')}


def _rank_main(backend: str, rank: int, world: int, sizes: Sequence[int]) -> dict[str, Any]:
    """One rank's sweep; rank 0's return value is what gets printed."""
    import torch
    import torch.distributed as dist

    cuda = backend == 'nccl'
    device = torch.device('cuda', rank) if cuda else torch.device('cpu')
    used_before = 0
    if cuda:
        torch.cuda.set_device(device)
        free, total = torch.cuda.mem_get_info()
        used_before = total - free
    if cuda:  # device_id binds NCCL to this rank's GPU
        dist.init_process_group(backend, rank=rank, world_size=world, device_id=device)
    else:
        dist.init_process_group(backend, rank=rank, world_size=world)
    times = []
    nccl_memory = None
    for i, size in enumerate(sizes):
        buf = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(WARMUP):
            dist.all_reduce(buf)
        if cuda:
            torch.cuda.synchronize()
            if i == 0:  # communicator and its buffers exist after the first collective
                free, total = torch.cuda.mem_get_info()
                nccl_memory = max(int(total - free - used_before
                                      - torch.cuda.memory_reserved()), 0)
        best = float('inf')
        for _ in range(REPEATS):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            if cuda:
                torch.cuda.synchronize()
            elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64,
                                   device=device)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time
            best = min(best, float(elapsed.item()))
        times.append(best)
    dist.destroy_process_group()
    return {'sizes': list(sizes), 'times_s': times, 'nccl_memory_bytes': nccl_memory}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of one rank (``python -m planner.calibrate.collectives``)."""
    parser = argparse.ArgumentParser(description='one rank of the all-reduce sweep')
    parser.add_argument('--backend', choices=('nccl', 'gloo'), required=True)
    parser.add_argument('--rank', type=int, required=True)
    parser.add_argument('--world-size', type=int, required=True)
    parser.add_argument('--sizes', required=True, help='comma-separated bytes')
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(',')]
    result = _rank_main(args.backend, args.rank, args.world_size, sizes)
    if args.rank == 0:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
