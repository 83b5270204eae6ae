"""Throughput of the vectorised memory estimator on one core (Llama-3.1-70B, ~1e6 configs).

Run ``.venv/bin/python -m benchmarks.bench_estimator [--repeat N] [--sample N]`` from the
repository root. The script pins itself to one CPU and sets OMP/MKL/OpenBLAS threads to 1
before numpy is imported.

The grid is micro-batch (10) × sequence length (6) × TP (4) × PP (8) × DP (11) × ZeRO
stage (4) × recompute mode (3) × sequence parallelism (2) × micro-batches per step (1 or
16) = 1,013,760 configurations of ``bf16-mixed`` Megatron training. ``estimate_arrays`` is
timed on two layouts of that grid: one broadcast array per axis (numpy shares the work of
the terms that depend on fewer axes) and flat 1-D arrays of every configuration (what
``planner.plans.search`` passes). The table gives the median of ``--repeat`` runs. For
comparison it also times, one configuration at a time over ``--sample`` configurations
drawn from the grid, batchfit's scalar ``estimate()`` and llm-analysis's ``training()``
(not vectorised; ``pip install llm-analysis``, skipped with a note when absent).
"""

from __future__ import annotations

import os

for _var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS'):
    os.environ[_var] = '1'
if hasattr(os, 'sched_setaffinity'):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.memory_accuracy import SKIP_NOTE, LLMAnalysis, llm_analysis_run  # noqa: E402
from planner.memory.activations import RECOMPUTE_CODES  # noqa: E402
from planner.memory.peak import ConfigArrays, MemoryOptions, estimate, estimate_arrays  # noqa: E402
from planner.memory.training import TrainingSetup  # noqa: E402
from planner.models.presets import find_preset  # noqa: E402

AXES = {
    'micro_batch': (1, 2, 3, 4, 6, 8, 12, 16, 24, 32),
    'seq_len': (1024, 2048, 4096, 8192, 16384, 32768),
    'tp': (1, 2, 4, 8),
    'pp': (1, 2, 4, 5, 8, 10, 16, 20),
    'dp': tuple(2**k for k in range(11)),
    'zero': (0, 1, 2, 3),
    'recompute': (0, 1, 2),
    'sequence_parallel': (False, True),
    'grad_accum': (1, 16),
}
OPTIONS = MemoryOptions(precision='bf16-mixed', framework='megatron', loss='megatron')


def grid(flat: bool) -> ConfigArrays:
    """The grid as broadcastable per-axis arrays, or as flat arrays of every point."""
    n = len(AXES)
    arrays = {name: np.asarray(values).reshape([-1 if i == k else 1 for i in range(n)])
              for k, (name, values) in enumerate(AXES.items())}
    if flat:
        arrays = dict(zip(arrays, (a.ravel() for a in np.broadcast_arrays(*arrays.values())),
                          strict=True))
    one = np.ones((1,) * (1 if flat else n), int)
    return ConfigArrays(vpp=one, cp=one, ep=one, offload=0 * one,
                        **arrays)


def sample_setups(count: int, seed: int = 0) -> list[TrainingSetup]:
    """``count`` configurations drawn from the grid, as single setups."""
    rng = np.random.default_rng(seed)
    modes = {code: mode for mode, code in RECOMPUTE_CODES.items()}
    setups = []
    for _ in range(count):
        pick = {name: values[rng.integers(len(values))] for name, values in AXES.items()}
        pick = {k: v if isinstance(v, bool) else int(v) for k, v in pick.items()}
        pick['recompute'] = modes[pick['recompute']]
        setups.append(TrainingSetup(precision='bf16-mixed',
                                    framework='megatron', **pick))
    return setups


def per_call(fn, items) -> float:
    started = time.perf_counter()
    for item in items:
        fn(item)
    return (time.perf_counter() - started) / len(items)


def main() -> int:
    """Print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=5, help='timed runs of the full grid')
    parser.add_argument('--sample', type=int, default=300, help='configurations timed singly')
    args = parser.parse_args()
    model = find_preset('llama-3.1-70b')
    print('| estimator | configurations | seconds (median) | configurations/s | µs/config |')
    print('|---|---:|---:|---:|---:|')
    for name, flat in (('batchfit estimate_arrays, broadcast grid', False),
                       ('batchfit estimate_arrays, flat arrays', True)):
        cfg = grid(flat)
        estimate_arrays(model, OPTIONS, cfg)  # warm up (page faults, imports)
        runs = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            out = estimate_arrays(model, OPTIONS, cfg)
            runs.append(time.perf_counter() - started)
        n, median = out.tensor_peak_bytes.size, statistics.median(runs)
        print(f'| {name} | {n:,} | {median:.3f} | {n / median:,.0f} | {median / n * 1e6:.3f} |')
    setups = sample_setups(args.sample)
    rows = [('batchfit estimate(), one at a time', lambda s: estimate(model, s))]
    if LLMAnalysis is not None:
        rows.append(('llm-analysis training(), one at a time',
                     lambda s: llm_analysis_run(model, s, max_seq_len=max(AXES['seq_len']))))
    for name, fn in rows:
        fn(setups[0])
        seconds = per_call(fn, setups)
        print(f'| {name} | {len(setups):,} | {seconds * len(setups):.3f} | {1 / seconds:,.0f} | '
              f'{seconds * 1e6:.1f} |')
    print('\nLlama-3.1-70B, bf16-mixed, Megatron kernels; one CPU core, 1 thread.')
    if LLMAnalysis is None:
        print(SKIP_NOTE)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
