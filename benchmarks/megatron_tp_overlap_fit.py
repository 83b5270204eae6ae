"""The fit of Megatron's TP overlap fraction (``planner.timing.stack_speed.TP_COMM_OVERLAP``).

Run ``PYTHONPATH=. .venv/bin/python -m benchmarks.megatron_tp_overlap_fit [v ...]`` from the
repository root (no torch needed). For each hidden fraction v it plans the published runs
of tests/stacks/data/published_runs.toml with the ``target`` flags
(benchmarks/stack_flags.py: the rows whose source names ``--tp-comm-overlap`` have it on)
and prints the throughput errors of

* the FIT set: Megatron-LM's README weak-scaling rows with TP > 1 (the README's benchmark
  configuration names ``--tp-comm-overlap``), their mean signed error and RMS;
* the VALIDATION set: Megatron-Bridge's 26.04.01 H100 Llama rows (their recipes set
  ``tp_comm_overlap``), which the fit does not look at.

The constant is the v whose fit-set mean signed error is zero (docs/BENCHMARKS.md
"Megatron switches, 2026-11-25").
"""

from __future__ import annotations

import argparse
import math

import planner.timing.stack_speed as stack_speed
from benchmarks.published_runs import compare, load_runs, predict

FIT = ('megatron-lm-weak-7.1b', 'megatron-lm-weak-16b', 'megatron-lm-weak-32b',
       'megatron-lm-weak-70b', 'megatron-lm-weak-177b', 'megatron-lm-weak-462b')
VALIDATION = ('bridge-llama3-70b-h100-fp8', 'bridge-llama31-405b-h100-fp8')


def errors(v: float) -> dict[str, float]:
    """Throughput error of every fit and validation row with the hidden fraction ``v``."""
    saved = stack_speed.TP_COMM_OVERLAP
    stack_speed.TP_COMM_OVERLAP = v
    try:
        runs = {r['id']: r for r in load_runs()}
        return {k: compare(runs[k], predict(runs[k], 'target'))['throughput_error']
                for k in (*FIT, *VALIDATION)}
    finally:
        stack_speed.TP_COMM_OVERLAP = saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('v', nargs='*', type=float,
                        default=[0.0, 0.3, 0.4, 0.45, 0.5, 0.6, 0.8])
    args = parser.parse_args(argv)
    names = [k.replace('megatron-lm-weak-', 'README ') for k in FIT] + [
        'Bridge 70B', 'Bridge 405B']
    print(f'{"v":>5s} {"mean":>7s} {"rms":>6s}  ' + ' '.join(f'{n:>11s}' for n in names))
    for v in args.v:
        e = errors(v)
        fit = [e[k] for k in FIT]
        mean = sum(fit) / len(fit)
        rms = math.sqrt(sum(x * x for x in fit) / len(fit))
        print(f'{v:5.2f} {mean:+7.1%} {rms:6.1%}  '
              + ' '.join(f'{e[k]:+11.1%}' for k in (*FIT, *VALIDATION)))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
