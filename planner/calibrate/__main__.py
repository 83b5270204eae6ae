"""The calibration child: ``python -m planner.calibrate --device cpu|cuda ... --json``.

Writes JSON-lines events on stdout (``planner.calibrate.protocol``) and exits 0 with a
``result`` event, or non-zero after an ``error`` event: 3 torch missing, 4 no CUDA
device, 5 out of memory / does not fit, 8 crash, 130 cancelled (SIGTERM or SIGINT),
2 bad arguments. Only this module's :func:`main` imports torch, after the arguments
are parsed and the signal handlers are installed, and before anything that needs
numpy, so a bare interpreter still gets a clean ``torch_missing`` event.

The model comes as ``--model-json`` (``ModelSpec`` fields; what the runner passes, so
the child needs no catalog files) or ``--model`` (a preset, size or config.json path).

``--probe JSON`` runs one edge probe (``planner.calibrate.probes.edge_probe``) and
prints one ``probe`` event: the fresh process the max-micro-batch step asks for.

Test hook: with ``BATCHFIT_CALIBRATE_TEST_HANG=1`` in the environment the child reports
progress once, then sleeps until it is signalled; ``=ignore-sigterm`` also ignores
SIGTERM, so only the runner's SIGKILL stops it. The runner's timeout, cancel and crash
tests use it; it is read before torch is imported, so it costs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

from planner.calibrate.protocol import (
    CHILD_EXIT_CODES,
    TORCH_EXTRA_HINT,
    EventWriter,
    claim_stdout,
    error_event,
    result_event,
)
from planner.defaults import DEFAULT_PRECISION

TEST_HANG_ENV = 'BATCHFIT_CALIBRATE_TEST_HANG'


class CancelledError(BaseException):
    """SIGTERM or SIGINT arrived (a BaseException: no ``except Exception`` swallows it)."""


def _cancel(signum: int, _frame: Any) -> None:
    signal.signal(signum, signal.SIG_IGN)  # one is enough; the rest would interrupt cleanup
    raise CancelledError(signal.Signals(signum).name)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='python -m planner.calibrate',
                                description='Calibration child process (JSON lines on stdout).')
    p.add_argument('--device', choices=('cuda', 'cpu'), default='cuda')
    p.add_argument('--gpu-uuid', default='', help='informational: the runner pins it with '
                   'CUDA_VISIBLE_DEVICES')
    model = p.add_mutually_exclusive_group()
    model.add_argument('--model', help='preset, size or config.json path')
    model.add_argument('--model-json', help='ModelSpec fields as JSON')
    p.add_argument('--seq-len', type=int)
    p.add_argument('--precision', default=DEFAULT_PRECISION)
    p.add_argument('--attention', choices=('flash', 'eager'), default='flash')
    p.add_argument('--micro-batches', default='', help='comma-separated, e.g. 1,2,4')
    p.add_argument('--repeats', type=int, help='timed rounds (default 10 on CPU, 5 on CUDA)')
    p.add_argument('--cpu-threads', type=int, default=1,
                   help='torch threads on the CPU (default 1: see docs/calibration.md)')
    p.add_argument('--warmup', type=int, default=2)
    p.add_argument('--memory-limit-bytes', type=int)
    p.add_argument('--collectives', action='store_true')
    p.add_argument('--collective-max-bytes', type=int)
    p.add_argument('--json', action='store_true', help='accepted for symmetry: always JSON')
    p.add_argument('--probe', help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the calibration (or one probe); returns the exit code."""
    args = _parser().parse_args(argv)
    out = EventWriter(claim_stdout())
    signal.signal(signal.SIGTERM, _cancel)
    signal.signal(signal.SIGINT, _cancel)
    try:
        return _run(args, out)
    except CancelledError as exc:
        out.emit(error_event('cancelled', f'calibration cancelled ({exc})'))
        return CHILD_EXIT_CODES['cancelled']


def _fail(out: EventWriter, kind: str, message: str) -> int:
    out.emit(error_event(kind, message))
    return CHILD_EXIT_CODES[kind]


def _run(args: argparse.Namespace, out: EventWriter) -> int:
    hang = os.environ.get(TEST_HANG_ENV)
    if hang:
        if hang == 'ignore-sigterm':  # a child that only SIGKILL stops
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        out.progress('environment', 0.0, 'test hook: hanging until signalled')
        while True:
            time.sleep(0.05)
    try:
        import torch
    except ImportError as exc:
        return _fail(out, 'torch_missing', f'torch is not importable by {sys.executable} '
                     f'({exc}); install the calibrate extra: {TORCH_EXTRA_HINT}')
    if args.device == 'cpu' or args.probe:
        # One thread by default: on a shared or small VM, multi-threaded CPU kernels stall at
        # their barriers whenever a neighbour takes a core (a 2-layer step at 64 tokens took
        # 11-13 ms on two threads and 3-4.5 ms on one, on a 2-vCPU VM), which no min-of-k
        # can undo.
        torch.set_num_threads(max(args.cpu_threads, 1))
    if args.probe:
        from planner.calibrate.edge import edge_probe

        out.emit(edge_probe(json.loads(args.probe)))
        return 0
    if args.device == 'cuda' and not torch.cuda.is_available():
        visible = os.environ.get('CUDA_VISIBLE_DEVICES')
        where = f' (CUDA_VISIBLE_DEVICES={visible})' if visible is not None else ''
        build = 'a CPU-only build' if torch.version.cuda is None else f'CUDA {torch.version.cuda}'
        return _fail(out, 'no_cuda', f'no CUDA device is usable{where}; torch {torch.__version__}'
                     f' is {build}; use --device cpu to calibrate on the CPU')
    try:
        import numpy  # noqa: F401 - the fit needs it; say so plainly when it is missing
    except ImportError as exc:
        return _fail(out, 'torch_missing', f'numpy is not importable ({exc}); install the '
                     f'calibrate extra: {TORCH_EXTRA_HINT}')
    from planner.calibrate.pipeline import CalibrationError, run
    from planner.calibrate.probes import is_oom
    from planner.errors import InputError

    try:
        settings = _settings(args)
        profile = run(settings, out)
    except InputError as exc:
        return _fail(out, 'bad_input', str(exc))
    except CalibrationError as exc:
        if exc.profile is not None:
            out.emit(result_event(exc.profile))
        return _fail(out, exc.kind, exc.message)
    except Exception as exc:  # noqa: BLE001 - the child reports every failure as an event
        traceback.print_exc(file=sys.stderr)
        if is_oom(exc):
            return _fail(out, 'oom', str(exc).splitlines()[0][:300])
        return _fail(out, 'crash', f'{type(exc).__name__}: {str(exc)[:300]}')
    out.emit(result_event(profile))
    return 0


def _settings(args: argparse.Namespace) -> Any:
    """The pipeline's settings from the arguments (raises InputError when invalid)."""
    from planner.calibrate.proxy import PROXY_PRECISIONS
    from planner.calibrate.records import model_spec_from_dict
    from planner.calibrate.settings import Settings
    from planner.errors import InputError

    if args.model_json:
        try:
            spec = model_spec_from_dict(json.loads(args.model_json))
        except json.JSONDecodeError as exc:
            raise InputError('--model-json', f'is not JSON: {exc}') from None
    elif args.model:
        from planner.models.source import resolve_model

        spec = resolve_model(args.model)
    else:
        raise InputError('--model', 'is required')
    if not args.seq_len or args.seq_len < 1:
        raise InputError('--seq-len', 'must be a positive integer')
    if args.precision not in PROXY_PRECISIONS:
        raise InputError('--precision', f'{args.precision!r} cannot be calibrated',
                         ', '.join(PROXY_PRECISIONS))
    try:
        micro = tuple(int(x) for x in args.micro_batches.split(',') if x.strip())
    except ValueError:
        raise InputError('--micro-batches', f'{args.micro_batches!r} is not a list of '
                         'integers') from None
    repeats = args.repeats or (10 if args.device == 'cpu' else 5)
    if any(b < 1 for b in micro) or repeats < 1 or args.warmup < 0:
        raise InputError('--micro-batches', 'micro-batches and repeats must be positive')
    return Settings(spec=spec, seq_len=args.seq_len, precision=args.precision,
                    attention=args.attention, device=args.device, micro_batches=micro,
                    repeats=repeats, warmup=args.warmup,
                    memory_limit_bytes=args.memory_limit_bytes, collectives=args.collectives,
                    collective_max_bytes=args.collective_max_bytes, python=sys.executable)


if __name__ == '__main__':
    sys.exit(main())
