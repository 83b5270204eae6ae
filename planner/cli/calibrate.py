"""``batchfit calibrate``: measure this machine and save a calibration profile.

Registered by ``planner.cli.main.build_parser`` through :func:`add_calibrate_command`. The
measurements run in a separate process (``planner.calibrate.runner``); this side shows
a progress bar on stderr (stage, percent, time left), or passes the child's JSON-lines
events through on stdout with ``--json``, and saves the profile into the data folder
(``planner.calibrate.profile``).

Exit codes (``planner.calibrate.protocol.EXIT_CODES``): 0 profile saved; 2 bad input;
3 torch not installed; 4 no CUDA device; 5 the model does not fit even at micro-batch
1 (or ran out of memory); 6 cancelled; 7 timed out; 8 the calibration process crashed.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from planner.calibrate.protocol import EXIT_CODES, TORCH_EXTRA_HINT, error_event
from planner.defaults import DEFAULT_PRECISION
from planner.units import GIB

if TYPE_CHECKING:
    from planner.calibrate.runner import CalibrationOutcome

STAGE_LABELS = {'environment': 'environment', 'matmul': 'GEMM throughput',
                'proxy': 'proxy training', 'max_micro_batch': 'largest micro-batch',
                'collectives': 'all-reduce', 'fit': 'fit'}
BAR_WIDTH = 24


def add_calibrate_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``batchfit calibrate`` on the top-level subparsers."""
    from planner.calibrate.proxy import PROXY_PRECISIONS
    from planner.cli.args import add_model_args, int_list, positive_int, positive_number

    codes = ', '.join(f'{code} {status.replace("_", " ")}' for status, code in
                      EXIT_CODES.items() if status != 'oom')
    p = sub.add_parser(
        'calibrate', help='measure this GPU (or the CPU) and save a calibration profile',
        description='Time a few-layer proxy of the model, measure GEMM throughput, memory '
                    'overheads and the largest micro-batch, in a separate process; '
                    'estimate and plan then use the profile (docs/calibration.md).',
        epilog=f'exit codes: {codes}')
    add_model_args(p)
    p.add_argument('--device', choices=('cuda', 'cpu'), default='cuda',
                   help='cuda (default) or cpu (the same pipeline; MemTracker stands in for '
                        'CUDA memory statistics)')
    p.add_argument('--gpu-uuid', default='',
                   help='GPU(s) by UUID (nvidia-smi -L), comma-separated; the first is '
                        'calibrated, all take part in --collectives (default: CUDA device 0)')
    p.add_argument('--precision', choices=PROXY_PRECISIONS,
                   help='recipe (default amp-bf16 on cuda, fp32 on cpu)')
    p.add_argument('--attention', choices=('flash', 'eager'), default='flash')
    p.add_argument('--micro-batches', type=int_list('--micro-batches'), default=(),
                   help='micro-batches to time, e.g. 1,2,4 (default: ~30/60/85 %% of the '
                        'predicted capacity on a GPU, 1,2,4 on the CPU)')
    p.add_argument('--repeats', type=positive_int('--repeats'),
                   help='timed rounds per configuration (default 10 on cpu, 5 on cuda)')
    p.add_argument('--cpu-threads', type=positive_int('--cpu-threads'), default=1,
                   help='torch threads with --device cpu (default 1: reproducible on shared '
                        'machines)')
    p.add_argument('--memory-limit-gib', type=positive_number('--memory-limit-gib'),
                   help='emulate a smaller device (set_per_process_memory_fraction on cuda)')
    p.add_argument('--collectives', action='store_true',
                   help='also time all-reduce from 1 MiB up (NCCL on 2+ GPUs, gloo on cpu)')
    p.add_argument('--collective-max-mib', type=positive_int('--collective-max-mib'),
                   help='largest all-reduce message (default 1024 on cuda, 64 on cpu)')
    p.add_argument('--timeout', type=positive_number('--timeout'), default=900.0,
                   help='stop the calibration after this many seconds (default 900)')
    p.add_argument('--python', help='interpreter with torch (your training environment; '
                                    'default: this one; in the frozen build, python3 or '
                                    'python on PATH if it has torch)')
    p.add_argument('--output', help='save the profile here instead of the data folder')
    p.add_argument('--json', action='store_true',
                   help="pass the child's JSON-lines events through on stdout, then a "
                        "'saved' event")
    p.set_defaults(run=run_calibrate)
    return p


class ProgressBar:
    """A one-line bar with stage, percent and time left (a line per stage off a terminal)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, 'isatty', lambda: False)())
        self.started = time.monotonic()
        self.stage = ''
        self.drawn = False

    def update(self, fraction: float, stage: str, message: str) -> None:
        """Redraw (on a terminal) or print the stage when it changes (elsewhere)."""
        label = STAGE_LABELS.get(stage, stage)
        if not self.tty:
            if stage != self.stage:
                self.stream.write(f'calibrate: {label}...\n')
                self.stream.flush()
            self.stage = stage
            return
        self.stage = stage
        elapsed = time.monotonic() - self.started
        left = f' · ~{elapsed * (1 - fraction) / fraction:.0f} s left' if fraction > 0.05 else ''
        done = round(BAR_WIDTH * fraction)
        text = (f'[{"#" * done}{"." * (BAR_WIDTH - done)}] {fraction:4.0%} {label}'
                f'{": " + message if message else ""}{left}')
        self.stream.write('\r' + text[:110].ljust(110))
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """End the bar's line."""
        if self.drawn:
            self.stream.write('\n')
            self.stream.flush()
            self.drawn = False


def options_from_args(args: argparse.Namespace) -> Any:
    """The runner's options (raises InputError for a bad model or combination)."""
    from planner.calibrate.interpreter import NO_PYTHON_HINT, choose_interpreter
    from planner.calibrate.runner import CalibrationOptions
    from planner.errors import InputError
    from planner.models.source import resolve_model

    model = resolve_model(args.model)
    interpreter = choose_interpreter(args.python)  # a frozen build looks for one on PATH
    if interpreter.python is None:
        raise InputError('--python', NO_PYTHON_HINT)
    uuids = tuple(u.strip() for u in args.gpu_uuid.split(',') if u.strip())
    if uuids and args.device == 'cpu':
        raise InputError('--gpu-uuid', 'names a GPU, but --device is cpu')
    precision = args.precision or ('fp32' if args.device == 'cpu' else DEFAULT_PRECISION)
    limit = None if args.memory_limit_gib is None else int(args.memory_limit_gib * GIB)
    return CalibrationOptions(
        model=model, seq_len=args.seq_len, precision=precision, attention=args.attention,
        device=args.device, gpu_uuids=uuids, micro_batches=tuple(args.micro_batches),
        repeats=args.repeats, cpu_threads=args.cpu_threads, memory_limit_bytes=limit,
        collectives=args.collectives,
        collective_max_bytes=None if args.collective_max_mib is None
        else args.collective_max_mib << 20,
        python=None if interpreter.source == 'self' else interpreter.python,
        timeout_s=args.timeout)


def run_calibrate(args: argparse.Namespace) -> int:
    """Entry point of ``batchfit calibrate``."""
    from planner.calibrate.runner import CalibrationRunner

    options = options_from_args(args)
    bar = None if args.json else ProgressBar(sys.stderr)

    def on_event(event: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps(event), flush=True)

    runner = CalibrationRunner(options, on_event=on_event,
                               on_progress=None if bar is None else bar.update)
    previous = signal.signal(signal.SIGTERM, lambda *_: runner.cancel())
    try:
        runner.start()
        try:
            outcome = runner.wait()
        except KeyboardInterrupt:  # Ctrl-C: the child got SIGINT too; make sure it stops
            runner.cancel()
            outcome = runner.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if bar is not None:
            bar.close()
    return _report(outcome, args)


def _report(outcome: CalibrationOutcome, args: argparse.Namespace) -> int:
    """Save what came back and say how it ended; the exit code."""
    from planner.calibrate.profile import profile_from_dict, save_profile

    saved = None
    if outcome.profile is not None:
        profile = profile_from_dict(outcome.profile, 'the calibration result')
        saved = save_profile(profile, args.output)
    if args.json:
        if outcome.status != 'ok' and not outcome.error_reported:
            print(json.dumps(error_event(outcome.status, outcome.message)), flush=True)
        print(json.dumps({'event': 'saved', 'path': None if saved is None else str(saved),
                          'status': outcome.status, 'exit_code': outcome.exit_code}), flush=True)
        return outcome.exit_code
    if saved is not None:
        print(_summary(profile, saved))
    if outcome.status != 'ok':
        message = outcome.message
        if outcome.status == 'torch_missing' and TORCH_EXTRA_HINT not in message:
            message += f'; install the calibrate extra: {TORCH_EXTRA_HINT}'
        print(f'batchfit: calibrate: {message}', file=sys.stderr)
    return outcome.exit_code


def _summary(p: Any, path: Any) -> str:
    """A few lines on what was measured."""
    st, mb, mem = p.step_time, p.max_micro_batch, p.memory
    peak = max(p.peak_flops_per_s.values())
    effs = ', '.join(f'{e:.0%}' for _, e in st.efficiency_points)
    lines = [f'calibration saved: {path}',
             f'  {p.device.name} · torch {p.environment.torch_version} · {p.model["name"]} '
             f'· sequence {p.seq_len} · {p.precision} · {p.elapsed_s:.1f} s',
             f'  best GEMM {peak / 1e12:.3g} TFLOP/s; step efficiency {effs} of '
             f'{st.reference_peak_flops_per_s / 1e12:.3g} TFLOP/s ({st.reference}); fixed cost '
             f'{st.overhead_s * 1e3:.3g} ms/step; fit residual {st.max_residual_fraction:.1%}',
             '  step time (full depth): ' + ', '.join(
                 f'b{b}×{s} {t * 1e3:.3g} ms' for b, s, t in st.full_depth_step_s),
             f'  memory: context {mem.cuda_context_bytes / 2**20:,.0f} MiB, workspace '
             f'{mem.workspace_bytes / 2**20:,.0f} MiB, allocator +{mem.allocator_fraction:.1%}, '
             f'measured/estimated tensor peak {mem.estimator_ratio:.3f}',
             f'  largest micro-batch: predicted {mb.predicted}, confirmed '
             f'{mb.confirmed if mb.confirmed is not None else "-"} of '
             f'{mb.capacity_bytes / GIB:,.1f} GiB']
    if p.collectives is not None:
        c = p.collectives
        lines.append(f'  all-reduce ({c.backend}, {c.world_size} ranks): busbw up to '
                     f'{c.peak_busbw_bytes_per_s / 1e9:.3g} GB/s, alpha {c.alpha_s * 1e6:.0f} µs')
    lines.extend(f'  note: {n}' for n in p.notes)
    return '\n'.join(lines)
