"""Hostile inputs: what ``batchfit`` does with the inputs issue 17 tried, and how long.

Run ``.venv/bin/python -m benchmarks.hostile_inputs`` from the repository root. Each row
runs ``batchfit`` in a fresh process (``python -m planner.cli``) with a 120 s limit and
records the exit code, the first line of the answer, the wall time and the peak resident
memory of the child (GNU time's ``%M``; install the ``time`` package where it is
missing). It prints a Markdown table for docs/BENCHMARKS.md; "no
traceback" and "no negative figure" are checked on every row and reported in the table.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GNU_TIME = '/usr/bin/time'
PLAN = ['plan', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--gpu', 'h100-sxm',
        '--tokens', '1T', '--top', '3']


def plan(**changes: str) -> list[str]:
    """``PLAN`` with flags replaced or added (``seq_len='1'`` -> ``--seq-len 1``); a value
    of '' drops the flag."""
    flags = dict(zip(PLAN[1::2], PLAN[2::2], strict=True))
    for name, value in changes.items():
        flags['--' + name.replace('_', '-')] = value
    return ['plan'] + [x for k, v in flags.items() if v for x in (k, v)]
EST = ['estimate', '--model', 'llama-3.1-8b', '--gpu', 'h200', '--gpus-per-node', '8',
       '--zero', '3']


def _deep_config() -> str:
    path = Path(tempfile.gettempdir()) / 'batchfit-deep-config.json'
    path.write_text('{"a": ' + '[' * 100_000 + ']' * 100_000 + '}')
    return str(path)


def _bert_config() -> str:
    path = Path(tempfile.gettempdir()) / 'batchfit-bert-config.json'
    path.write_text(json.dumps({
        'architectures': ['BertForMaskedLM'], 'model_type': 'bert', 'hidden_size': 768,
        'num_hidden_layers': 12, 'num_attention_heads': 12, 'intermediate_size': 3072,
        'vocab_size': 30522, 'max_position_embeddings': 512}))
    return str(path)


def cases() -> list[tuple[str, list[str]]]:
    """(what, argv) for every row."""
    return [
        ('estimate: sequence 99,999,999,999 x micro-batch 99,999,999',
         [*EST, '--seq-len', '99999999999', '--micro-batch', '99999999']),
        ('estimate: sequence 2^24 x micro-batch 2^20 (the largest allowed)',
         [*EST, '--seq-len', str(2**24), '--micro-batch', str(2**20)]),
        ('plan --global-batch 9007199254740993', [*PLAN, '--global-batch',
                                                  '9007199254740993']),
        ('plan --global-batch 1e18', [*PLAN, '--global-batch', '1e18']),
        ('plan --global-batch 2^62', [*PLAN, '--global-batch', str(2**62)]),
        ('plan --global-batch 1e20', [*PLAN, '--global-batch', '1e20']),
        ('plan --global-batch 4M', [*PLAN, '--global-batch', '4M']),
        ('plan --global-batch 4Mitok', [*PLAN, '--global-batch', '4Mitok']),
        ('plan --nodes 1000000 --gpus-per-node 1000000',
         [*PLAN, '--global-batch', '1024', '--nodes', '1000000', '--gpus-per-node',
          '1000000']),
        ('plan --nodes 100000 --gpus-per-node 256 (the old app limits)',
         [*PLAN, '--global-batch', '1024', '--nodes', '100000', '--gpus-per-node', '256']),
        ('plan --nodes 131072 --gpus-per-node 8 (2^20 GPUs)',
         [*PLAN, '--global-batch', '1024', '--nodes', '131072', '--gpus-per-node', '8']),
        ('plan --nodes 1024 --gpus-per-node 1024, batch 7,207,200',
         [*PLAN, '--global-batch', '7207200', '--nodes', '1024', '--gpus-per-node', '1024']),
        ('plan --nodes 64, batch 7,207,200, sequence 1 (over the grid bound)',
         plan(seq_len='1', global_batch='7207200', nodes='64', inter_node='ib-ndr')),
        ('plan --nodes 16, batch 7,207,200, sequence 1 (under the grid bound)',
         plan(seq_len='1', global_batch='7207200', nodes='16', inter_node='ib-ndr')),
        ('plan 405B --pp 16 (16 does not divide 126 layers)',
         ['plan', '--model', 'llama-3.1-405b', '--seq-len', '4096', '--gpu', 'h100-sxm',
          '--tokens', '1T', '--nodes', '16', '--global-batch', '2048', '--pp', '16']),
        ('plan 70B on 1 x 8 H100, ZeRO 0-1 only',
         ['plan', '--model', 'llama-3.1-70b', '--seq-len', '4096', '--gpu', 'h100-sxm',
          '--tokens', '1T', '--global-batch', '1024', '--zero', '0,1']),
        ('plan --seq-len 4096.5', plan(seq_len='4096.5', global_batch='8')),
        ('plan --seq-len ٤٠٩٦ (Arabic-Indic digits)', plan(seq_len='٤٠٩٦', global_batch='8')),
        ('plan --epochs nan', plan(tokens='', samples='1000', epochs='nan',
                                   global_batch='8')),
        ('plan --epochs 1e12 (allowed range ends at 10^6)',
         plan(tokens='', samples='1000', epochs='1e12', global_batch='8')),
        ('plan --seq-len 262144 on Llama-3.1-8B (beyond its context)',
         plan(seq_len='262144', global_batch='8')),
        ('plan --margin -', [*PLAN, '--global-batch', '8', '--margin', '-']),
        ('config.json nested 100,000 deep', ['estimate', '--model', _deep_config(),
                                             '--seq-len', '512', '--micro-batch', '1']),
        ('BERT config.json (an encoder)', ['estimate', '--model', _bert_config(),
                                           '--seq-len', '512', '--micro-batch', '1']),
    ]


NEGATIVE = re.compile(r'(?<![\w.])-[0-9]')


def run(argv: list[str]) -> dict:
    """One row: exit code, answer, seconds, peak MiB of the child."""
    env = {**os.environ, 'PYTHONPATH': str(ROOT)}
    started = time.perf_counter()
    peak_kib = float('nan')
    try:
        proc = subprocess.run([GNU_TIME, '-f', 'peak-kib %M', sys.executable, '-m',
                               'planner.cli', *argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
        lines = err.rstrip().splitlines()
        if lines and lines[-1].startswith('peak-kib '):
            peak_kib = float(lines[-1].split()[1])
            err = '\n'.join(lines[:-1])
    except subprocess.TimeoutExpired:
        code, out, err = 'timeout', '', ''
    seconds = time.perf_counter() - started
    answer = (err.strip().splitlines() or [''])[0] if code == 2 else _summary(out)
    return {'code': code, 'answer': answer, 'seconds': seconds, 'peak_mib': peak_kib / 1024,
            'traceback': 'Traceback' in err + out,
            'negative': bool(NEGATIVE.search(out)) and code == 0}


def _summary(out: str) -> str:
    for start in ('No plan:', 'WARNING'):
        found = [line for line in out.splitlines() if line.startswith(start)]
        if found:
            return found[0]
    for line in out.splitlines():
        if line.startswith(('No plan:', 'Searched', 'NVIDIA')):
            return line
    return (out.strip().splitlines() or [''])[0]


def main() -> None:
    rows = []
    for what, argv in cases():
        r = run(argv)
        rows.append((what, r))
        print(f'{what}: {r["code"]} in {r["seconds"]:.2f} s', file=sys.stderr)
    print(f'Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, '
          f'Python {platform.python_version()}; {date.today().isoformat()}.')
    print()
    print('| input | exit | time (s) | peak child RSS (MiB) | answer (first line) |')
    print('|---|---|---|---|---|')
    for what, r in rows:
        answer = r['answer'].replace('|', '\\|')
        if len(answer) > 160:
            answer = answer[:157] + '...'
        flags = (' **traceback**' if r['traceback'] else '') + \
            (' **negative figure**' if r['negative'] else '')
        print(f'| {what} | {r["code"]}{flags} | {r["seconds"]:.2f} | {r["peak_mib"]:.0f} | '
              f'{answer} |')
    bad = [w for w, r in rows if r['traceback'] or r['negative'] or r['code'] == 'timeout']
    print()
    print(f'Rows with a traceback, a negative figure or a timeout: {len(bad)}.')


if __name__ == '__main__':
    main()
