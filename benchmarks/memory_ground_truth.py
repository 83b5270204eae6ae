"""Peak memory of transformers' own models, measured for real, vs batchfit and llm-analysis.

Run ``.venv/bin/python -m benchmarks.memory_ground_truth [--json OUT] [--only SUBSTR]``
from the repository root (needs torch, transformers and peft from the ``test`` extra).
``--llm-analysis-python PY`` runs llm-analysis's column in another interpreter (it pins
an older transformers, so it lives in its own venv: ``make bench`` builds ``.venv-bench``;
``benchmarks/llm_analysis_column.py`` is what runs there).

For every case of ``tests/groundtruth/hf_cases.py`` it prints the measured training peak
(``tests/groundtruth/hf_measure.py``: MemTracker over two real CPU training steps of
``AutoModelForCausalLM.from_config``), batchfit's ``estimate(...).tensor_peak_bytes`` for
batchfit's reading of the same config.json, and the signed error; then a summary per
model type and over the cases fitted on and held out (``hf_cases.FITTED``).
``--measured FILE`` reuses the measurements of an earlier ``--json`` output.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict

from planner.memory.peak import estimate
from tests.groundtruth.hf_cases import FITTED, HF_CASES, HfCase

MB = 1e6


def evaluate(case: HfCase, measured: dict | None) -> dict:
    """One case: the measurement (taken now unless given) and batchfit's estimate."""
    if measured is None:
        m = case.measure()
        measured = {'measured_bytes': m.peak_bytes, 'measured_phase': m.peak_phase,
                    'measured_module': m.peak_module, 'logits_bytes': m.logits_bytes,
                    'measure_s': round(m.seconds, 2)}
    est = estimate(case.spec(), case.setup())
    row = {'case': case.id, 'model_type': case.model_type,
           'fitted': case.id in FITTED, **measured,
           'batchfit_bytes': est.tensor_peak_bytes, 'batchfit_phase': est.peak_phase}
    row['error'] = (row['batchfit_bytes'] - row['measured_bytes']) / row['measured_bytes']
    return row


def llm_analysis_column(rows: list[dict], python: str) -> None:
    """Fill ``llm_analysis_bytes`` by running llm-analysis in its own interpreter."""
    cases = {c.id: c for c in HF_CASES}
    payload = []
    for row in rows:
        case = cases[row['case']]
        if case.lora is not None:
            continue
        spec, setup = case.spec(), case.setup()
        payload.append({'case': case.id, 'spec': dataclasses.asdict(spec),
                        'setup': {**setup.to_dict(), 'loss': setup.loss}})
    out = subprocess.run([python, '-m', 'benchmarks.llm_analysis_column'],
                         input=json.dumps(payload), capture_output=True, text=True,
                         check=True)
    by_case = json.loads(out.stdout)
    for row in rows:
        if row['case'] in by_case:
            row['llm_analysis_bytes'] = by_case[row['case']]
            row['llm_analysis_error'] = (by_case[row['case']] - row['measured_bytes']) \
                / row['measured_bytes']


def summary(rows: list[dict], key: str = 'error') -> str:
    """median |error|, lowest and highest signed error, and the count, of ``rows``."""
    errs = [r[key] for r in rows if key in r]
    if not errs:
        return 'n/a'
    return (f'{len(errs)} cases: median |err| {statistics.median(abs(e) for e in errs):.2%}, '
            f'lowest {min(errs):+.2%}, highest {max(errs):+.2%}')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--json', help='write the rows here')
    parser.add_argument('--measured', help='reuse the measurements of this --json output')
    parser.add_argument('--only', default='', help='substring of case ids to run')
    parser.add_argument('--llm-analysis-python', help='interpreter with llm-analysis')
    parser.add_argument('--markdown', help='write the tables for docs/BENCHMARKS.md here')
    args = parser.parse_args()
    previous = {}
    if args.measured:
        with open(args.measured, encoding='utf-8') as f:
            previous = {r['case']: {k: r[k] for k in ('measured_bytes', 'measured_phase',
                                                       'measured_module', 'logits_bytes',
                                                       'measure_s')}
                        for r in json.load(f)}
    started = time.perf_counter()
    rows = []
    for case in HF_CASES:
        if args.only not in case.id:
            continue
        try:
            row = evaluate(case, previous.get(case.id))
        except Exception as exc:  # noqa: BLE001 - report the case and go on
            print(f'{case.id}: FAILED {type(exc).__name__}: {exc}', flush=True)
            continue
        rows.append(row)
        if args.json:  # after every case, so an interrupted run keeps what it measured
            with open(args.json, 'w', encoding='utf-8') as f:
                json.dump(rows, f, indent=1)
        print(f"{row['case']:58} {row['measured_bytes'] / MB:9.3f} {row['measured_phase']:9}"
              f" {row['batchfit_bytes'] / MB:9.3f} {row['error']:+7.2%}"
              f" {row['batchfit_phase']:15} {'fit' if row['fitted'] else ''}", flush=True)
    if args.llm_analysis_python:
        llm_analysis_column(rows, args.llm_analysis_python)
    print(f'\n{time.perf_counter() - started:.0f} s')
    by_type = defaultdict(list)
    for row in rows:
        by_type[row['model_type']].append(row)
    for model_type, group in by_type.items():
        print(f'{model_type:12} {summary(group)}')
    print('fitted:   ', summary([r for r in rows if r['fitted']]))
    print('held out: ', summary([r for r in rows if not r['fitted']]))
    print('llm-analysis:', summary(rows, 'llm_analysis_error'))
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump(rows, f, indent=1)
    if args.markdown:
        with open(args.markdown, 'w', encoding='utf-8') as f:
            f.write(markdown(rows))
    return 0


def _pct(row: dict, key: str) -> str:
    return f'{row[key]:+.2%}' if key in row else ''


def markdown(rows: list[dict]) -> str:
    """Every case, then a summary per model type and over fitted / held-out cases."""
    lines = ['| case | set | measured MB | phase | batchfit MB | err | llm-analysis MB | err |',
             '|---|---|---:|---|---:|---:|---:|---:|']
    for r in rows:
        lla = f"{r['llm_analysis_bytes'] / MB:.2f}" if 'llm_analysis_bytes' in r else 'n/a'
        lines.append(f"| {r['case']} | {'fitted' if r['fitted'] else 'held out'} | "
                     f"{r['measured_bytes'] / MB:.3f} | {r['measured_phase']} | "
                     f"{r['batchfit_bytes'] / MB:.3f} | {_pct(r, 'error')} | {lla} | "
                     f"{_pct(r, 'llm_analysis_error')} |")
    lines += ['', '| model type | batchfit | llm-analysis |', '|---|---|---|']
    by_type = defaultdict(list)
    for row in rows:
        by_type[row['model_type']].append(row)
    for model_type, group in by_type.items():
        lines.append(f'| {model_type} | {summary(group)} | '
                     f"{summary(group, 'llm_analysis_error')} |")
    lines += ['', f"Fitted: {summary([r for r in rows if r['fitted']])}.",
              f"Held out: {summary([r for r in rows if not r['fitted']])}.",
              f"llm-analysis, every case it can express: "
              f"{summary(rows, 'llm_analysis_error')}.", '']
    return '\n'.join(lines)


if __name__ == '__main__':
    sys.exit(main())
