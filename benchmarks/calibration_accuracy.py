"""Step-time prediction after a one-micro-batch CPU calibration vs measured step times.

Run ``.venv/bin/python -m benchmarks.calibration_accuracy [--rounds K] [--json OUT]``
from the repository root (needs torch, from the ``test`` extra).

For each model below it

1. calibrates on the CPU at ONE micro-batch, through the real pipeline and process
   (``batchfit calibrate --device cpu --micro-batches B0``; the two-depth proxy and the
   few-token fixed-cost probe are part of every calibration);
2. predicts the full-depth step time at two other micro-batches and one other sequence
   length with the planner's own step model and that profile
   (``planner.calibrate.fit.predict_step_time``: what ``batchfit plan`` computes);
3. measures those steps on the full-depth model in this process, before and after the
   calibration: min over 2 x ``--rounds`` interleaved rounds (docs/calibration.md),
   single-threaded like the calibration;

and prints a markdown table with the signed error of every prediction. The claim
checked: every prediction within 10 % of the measurement. The table also re-measures
the calibration point itself and shows a *shape error* with that point's offset
divided out: on a shared machine two processes timing the same step can differ by
more than the fit's own error, and the two columns tell those apart.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from planner.calibrate.fit import predict_step_time
from planner.calibrate.probes import time_proxy
from planner.calibrate.profile import (
    device_spec_from_profile,
    efficiency_from_profile,
    profile_from_dict,
    step_options_from_profile,
)
from planner.calibrate.runner import CalibrationOptions, CalibrationRunner
from planner.models.spec import ModelSpec

TOLERANCE = 0.10


@dataclass(frozen=True)
class Case:
    """A model, the micro-batch it is calibrated at, and the configurations predicted."""

    label: str
    spec: ModelSpec
    seq_len: int
    calibrate_micro_batch: int
    predict: tuple[tuple[int, int], ...]  # (micro_batch, seq_len)
    attention: str = 'flash'


CASES: tuple[Case, ...] = (
    Case('tiny Llama L2 h64 s64 (the CI model)',
         ModelSpec(name='tiny-llama', num_layers=2, hidden_size=64, num_heads=4,
                   num_kv_heads=4, head_dim=16, ffn_size=256, vocab_size=512,
                   max_position_embeddings=256),
         seq_len=64, calibrate_micro_batch=2, predict=((1, 64), (8, 64), (2, 128))),
    Case('test GPT L4 h256 a4 s128 V1024 (tests/groundtruth), eager',
         ModelSpec(name='test-gpt', num_layers=4, hidden_size=256, num_heads=4,
                   num_kv_heads=4, head_dim=64, ffn_size=1024, vocab_size=1024,
                   gated_mlp=False, activation='gelu', tied_embeddings=True,
                   position_embedding='learned', max_position_embeddings=512,
                   norm='layernorm'),
         seq_len=128, calibrate_micro_batch=2, predict=((1, 128), (4, 128), (2, 256)),
         attention='eager'),
)


def calibrate(case: Case, rounds: int) -> tuple[dict[str, Any], float, str]:
    """The profile of a one-micro-batch CPU calibration, its wall time and the command
    (as ``batchfit calibrate`` would spell it; the model goes to the child as JSON)."""
    options = CalibrationOptions(model=case.spec, seq_len=case.seq_len, precision='fp32',
                                 attention=case.attention, device='cpu',
                                 micro_batches=(case.calibrate_micro_batch,), repeats=rounds,
                                 timeout_s=600)
    started = time.perf_counter()
    outcome = CalibrationRunner(options).run()
    if outcome.status != 'ok' or outcome.profile is None:
        raise SystemExit(f'calibration failed: {outcome.status}: {outcome.message}')
    command = (f'batchfit calibrate --device cpu --model <{case.spec.name}> --seq-len '
               f'{case.seq_len} --precision fp32 --attention {case.attention} '
               f'--micro-batches {case.calibrate_micro_batch} --repeats {rounds}')
    return outcome.profile, time.perf_counter() - started, command


def measure(case: Case, rounds: int) -> dict[tuple[int, int], float]:
    """Full-depth step times (forward-backward + optimizer minima), interleaved."""
    configs = [(case.calibrate_micro_batch, case.seq_len), *case.predict]
    timings = time_proxy(case.spec, [case.spec.num_layers], configs, precision='fp32',
                         attention=case.attention, device='cpu', repeats=rounds, warmup=2)
    return {(t.micro_batch, t.seq_len): t.forward_backward_s + t.optimizer_s for t in timings}


def evaluate(case: Case, rounds: int) -> dict[str, Any]:
    """Measure, calibrate, measure again, predict; one row per configuration.

    The measurement runs before and after the calibration and keeps the minimum of both,
    so a noisy stretch of a shared machine hits neither side alone. The calibration
    point itself is re-measured here too (its row shows the two processes' agreement).
    """
    before = measure(case, rounds)
    doc, wall_s, command = calibrate(case, rounds)
    after = measure(case, rounds)
    measured = {c: min(before[c], after[c]) for c in before}
    p = profile_from_dict(doc)
    gpu, cal = device_spec_from_profile(p), efficiency_from_profile(p)
    options = step_options_from_profile(p)
    rows: list[dict[str, Any]] = []
    for b, s in ((case.calibrate_micro_batch, case.seq_len), *case.predict):
        predicted = predict_step_time(case.spec, s, b, gpu, 'fp32', case.attention, cal, options)
        rows.append({'micro_batch': b, 'seq_len': s, 'measured_s': measured[(b, s)],
                     'predicted_s': predicted, 'error': predicted / measured[(b, s)] - 1,
                     'calibration_point': (b, s) == (case.calibrate_micro_batch, case.seq_len)})
    offset = 1 + rows[0]['error']  # the calibration point re-measured here
    for row in rows:
        row['shape_error'] = (1 + row['error']) / offset - 1
    return {'case': case.label, 'calibrated_at': [case.calibrate_micro_batch, case.seq_len],
            'calibration_wall_s': wall_s, 'calibration_elapsed_s': p.elapsed_s,
            'fit_residual': p.step_time.max_residual_fraction,
            'command': command,
            'rows': rows}


def main(argv: list[str] | None = None) -> int:
    """Print the markdown table (and write JSON with ``--json``); 1 if a claim fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=30,
                        help='timed rounds per configuration (min of k)')
    parser.add_argument('--json', metavar='OUT', help='also write the results as JSON')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # as the calibration child runs (--cpu-threads 1)
    results = [evaluate(case, args.rounds) for case in CASES]
    print(f'CPU: {platform.processor() or platform.machine()}, torch {torch.__version__}, '
          f'1 thread, min of {args.rounds} interleaved rounds, fp32.\n')
    print('| model | calibrated at (b, s) | predicted (b, s) | measured ms | predicted ms '
          '| error | shape error |')
    print('|---|---|---|---:|---:|---:|---:|')
    worst = worst_shape = 0.0
    for r in results:
        for row in r['rows']:
            at = f"({row['micro_batch']}, {row['seq_len']})"
            if row['calibration_point']:
                at += ' (calibration point)'
            else:
                worst = max(worst, abs(row['error']))
                worst_shape = max(worst_shape, abs(row['shape_error']))
            print(f"| {r['case']} | {tuple(r['calibrated_at'])} | {at} | "
                  f"{row['measured_s'] * 1e3:.2f} | {row['predicted_s'] * 1e3:.2f} | "
                  f"{row['error']:+.1%} | {row['shape_error']:+.1%} |")
    print()
    for r in results:
        print(f"- {r['case']}: calibration {r['calibration_wall_s']:.1f} s wall "
              f"({r['calibration_elapsed_s']:.1f} s in the child), fit residual "
              f"{r['fit_residual']:.1%}; `{r['command']}`")
    verdict = 'within' if worst <= TOLERANCE else 'NOT within'
    print(f'\nWorst error {worst:.1%}: {verdict} {TOLERANCE:.0%}. Worst shape error '
          f'{worst_shape:.1%} (the error with the calibration point\'s own offset between '
          'the calibrating process and this one divided out: what the fit gets wrong, '
          'as opposed to how reproducible a measurement is on this machine).')
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump({'torch': torch.__version__, 'rounds': args.rounds, 'worst_error': worst,
                       'tolerance': TOLERANCE, 'results': results}, f, indent=1)
    return 0 if worst <= TOLERANCE else 1


if __name__ == '__main__':
    sys.exit(main())
