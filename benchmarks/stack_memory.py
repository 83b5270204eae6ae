"""Memory per stack: one rank measured under the real framework's wrapping vs batchfit.

Run ``PYTHONPATH=. .venv/bin/python -m benchmarks.stack_memory [--flags today|target]
[--confirm] [--artifact] [--json OUT]`` from the repository root (needs torch,
torchtitan and transformers from the ``launchers`` extra).

For every configuration of benchmarks/stack_flags.py it prints the measured peak of
rank 0 (tests/stacks/fake_pg.py: torchtitan's FSDP2 / TP / PP wrapping or HF DDP with
autocast on torch's fake process group, FSDPMemTracker / MemTracker), the categories at
that peak, batchfit's ``tensor_peak_bytes`` with the chosen flags, and the signed error
(positive: batchfit is high). ``--confirm`` also runs each fake-mode configuration as a
real allocating CPU run at sequence 64 and prints both peaks. ``--artifact`` measures
the FSDP2 rows with DTensor's sharding propagation left inside the tracked fake mode,
to show how far the optimizer category is inflated without the fix.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import subprocess
import sys
import time

from benchmarks.stack_compare import batchfit_estimate, relative_error
from benchmarks.stack_flags import CONFIGS, FLAG_SETS, cli_flags
from tests.stacks.fake_pg import frameworks_missing, measure

MB = 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--flags', choices=FLAG_SETS, default='today')
    parser.add_argument('--confirm', action='store_true',
                        help='also a real allocating run of each fake-mode row at sequence 64')
    parser.add_argument('--artifact', action='store_true',
                        help='FSDP2 rows without the sharding-propagation fix')
    parser.add_argument('--only', nargs='*', default=None, help='configuration names')
    parser.add_argument('--json', default=None)
    args = parser.parse_args(argv)
    rows = []
    print(f'# {platform.node()} {platform.processor() or platform.machine()} '
          f'{time.strftime("%Y-%m-%d")}, flags: {args.flags}')
    print(f'{"config":16s} {"stack":10s} {"measured MB":>11s} {"batchfit MB":>11s} '
          f'{"error":>7s} {"s":>5s}  batchfit flags / categories at the peak (MB)')
    for config in CONFIGS:
        if args.only and config.name not in args.only:
            continue
        missing = frameworks_missing(config)
        if missing:
            print(f'{config.name:16s} skipped: {missing}')
            continue
        got = measure(config)
        est = batchfit_estimate(config, args.flags)
        row = {'config': config.name, 'stack': config.stack, 'fake': config.fake,
               'measured_bytes': got.peak_bytes, 'by_category': got.peak_by_category,
               'optimizer_state_bytes': got.optimizer_state_bytes,
               'seconds': round(got.seconds, 1), 'flags': args.flags,
               'batchfit_kwargs': est.kwargs, 'batchfit_bytes': est.tensor_peak_bytes,
               'batchfit_components': est.components, 'unreachable': est.unreachable}
        if est.tensor_peak_bytes is None:
            err = '   n/a'
        else:
            row['error'] = relative_error(est.tensor_peak_bytes, got.peak_bytes)
            err = f'{row["error"]:+7.1%}'
        bf = '-' if est.tensor_peak_bytes is None else f'{est.tensor_peak_bytes / MB:11.2f}'
        print(f'{config.name:16s} {config.stack:10s} {got.peak_bytes / MB:11.2f} {bf:>11s} '
              f'{err} {got.seconds:5.1f}  {cli_flags(est.kwargs)}'
              + (f'  [{est.unreachable}]' if est.unreachable else ''))
        cats = ', '.join(f'{k} {v / MB:.2f}' for k, v in got.peak_by_category.items() if v)
        print(f'{"":16s} {"":10s} measured: {cats}')
        comps = ', '.join(f'{k} {v / MB:.2f}' for k, v in est.components.items() if v)
        if comps:
            print(f'{"":16s} {"":10s} batchfit: {comps}')
        if args.confirm and config.fake:
            small = dataclasses.replace(config, seq_len=64)
            fake_small, real_small = measure(small, fake=True), measure(small, fake=False)
            row['confirm_seq64'] = {'fake_bytes': fake_small.peak_bytes,
                                    'real_bytes': real_small.peak_bytes}
            print(f'{"":16s} {"":10s} seq 64: fake {fake_small.peak_bytes} B, real '
                  f'{real_small.peak_bytes} B ({real_small.seconds:.0f} s)')
        if args.artifact and config.wrapping.startswith('fsdp2'):
            # a fresh process: DTensor caches propagation, so the artifact shows only once
            out = subprocess.run([sys.executable, '-m', 'tests.stacks.fake_pg', '--artifact',
                                  config.name], capture_output=True, text=True, check=True)
            raw = json.loads(out.stdout.strip().splitlines()[-1])
            opt = raw['by_category'].get('OptState', 0)
            row['artifact'] = {'peak_bytes': raw['peak_bytes'], 'opt_category_bytes': opt}
            print(f'{"":16s} {"":10s} without the fix: peak {raw["peak_bytes"] / MB:.2f} MB, '
                  f'OptState {opt / MB:.2f} MB for {got.optimizer_state_bytes / MB:.2f} MB '
                  f'of AdamW states ({opt / got.optimizer_state_bytes:.1f}x)')
        rows.append(row)
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
