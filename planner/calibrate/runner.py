"""The parent side of a calibration: spawn the child, follow it, stop it, classify it.

:class:`CalibrationRunner` is a plain class with callbacks (no torch, no Qt): the CLI
drives it directly, and the GUI can wrap the same pieces in a ``QProcess``:
:meth:`CalibrationOptions.command` and :meth:`CalibrationOptions.environment` give
the program and its environment, :func:`~planner.calibrate.protocol.parse_event`
reads each stdout line, and :func:`classify` turns the end of the process into an
outcome.

The child is ``<python> -m planner.calibrate ...`` with ``CUDA_VISIBLE_DEVICES`` set to the
GPU's UUID, ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (so CUDA numbers GPUs as NVML does: CUDA C
Programming Guide, "CUDA Environment Variables") and
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` unless the user set an allocator
configuration (PyTorch's OOM message recommends it). The interpreter defaults to this one;
another (the user's training environment) sees this ``planner`` package through
``PYTHONPATH`` so parent and child always speak the same protocol.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from planner.calibrate.protocol import EXIT_CODES, parse_event
from planner.defaults import (
    DEFAULT_ATTENTION,
    DEFAULT_PRECISION,
)
from planner.messages import Message
from planner.models.spec import ModelSpec

DEFAULT_TIMEOUT_S = 900.0
DEFAULT_GRACE_S = 5.0  # between SIGTERM and SIGKILL
STDERR_TAIL_LINES = 40
STATUSES: tuple[str, ...] = tuple(EXIT_CODES)


@dataclass(frozen=True)
class CalibrationOptions:
    """What to calibrate and how to run the child.

    Attributes:
        model: the target model (passed to the child as JSON).
        seq_len: tokens per sequence.
        precision: a ``planner.calibrate.proxy.PROXY_PRECISIONS`` recipe.
        attention: ``flash`` or ``eager``.
        device: ``cuda`` or ``cpu``.
        gpu_uuids: GPUs by UUID (``GPU-...``); the first is calibrated, all take part in
            the collective sweep. Empty: CUDA's device 0.
        micro_batches: micro-batches to time (empty: the child chooses).
        repeats: timed rounds per configuration (None: the child's default).
        cpu_threads: torch threads for ``--device cpu``.
        memory_limit_bytes: emulate a smaller device.
        collectives: run the all-reduce sweep.
        collective_max_bytes: largest all-reduce message.
        python: the interpreter with torch (None: this one).
        timeout_s: wall-clock limit of the whole run.
        grace_s: how long a terminated child may take to exit before it is killed.
        extra_env: more environment variables for the child (tests, launchers).
    """

    model: ModelSpec
    seq_len: int
    precision: str = DEFAULT_PRECISION
    attention: str = DEFAULT_ATTENTION
    device: str = 'cuda'
    gpu_uuids: tuple[str, ...] = ()
    micro_batches: tuple[int, ...] = ()
    repeats: int | None = None
    cpu_threads: int = 1
    memory_limit_bytes: int | None = None
    collectives: bool = False
    collective_max_bytes: int | None = None
    python: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    grace_s: float = DEFAULT_GRACE_S
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def interpreter(self) -> str:
        """The Python that runs the child (a path made absolute, symlinks kept: a venv's
        ``python`` is a symlink whose target would lose the venv)."""
        if not self.python:
            return sys.executable
        return os.path.abspath(self.python) if os.sep in self.python else self.python

    def child_args(self) -> list[str]:
        """Arguments after ``python -m planner.calibrate``."""
        from planner.calibrate.records import model_spec_to_dict

        args = ['--device', self.device, '--model-json', json.dumps(model_spec_to_dict(self.model)),
                '--seq-len', str(self.seq_len), '--precision', self.precision,
                '--attention', self.attention, '--cpu-threads', str(self.cpu_threads), '--json']
        if self.gpu_uuids:
            args += ['--gpu-uuid', self.gpu_uuids[0]]
        if self.micro_batches:
            args += ['--micro-batches', ','.join(map(str, self.micro_batches))]
        if self.repeats:
            args += ['--repeats', str(self.repeats)]
        if self.memory_limit_bytes:
            args += ['--memory-limit-bytes', str(self.memory_limit_bytes)]
        if self.collectives:
            args.append('--collectives')
        if self.collective_max_bytes:
            args += ['--collective-max-bytes', str(self.collective_max_bytes)]
        return args

    def command(self) -> list[str]:
        """The child's full command line."""
        return [self.interpreter, '-m', 'planner.calibrate', *self.child_args()]

    def environment(self, base: Mapping[str, str] | None = None,
                    package_path: str | None = None) -> dict[str, str]:
        """The child's environment: ``base`` (default ``os.environ``) plus the pinning.

        ``package_path``, when given, is put first on ``PYTHONPATH`` (a folder holding
        this ``planner`` package, for an interpreter from another environment).
        """
        from planner.calibrate.interpreter import undo_frozen_library_path

        env = undo_frozen_library_path(dict(os.environ if base is None else base))
        env['CUDA_DEVICE_ORDER'] = 'PCI_BUS_ID'
        if self.device == 'cpu':
            env['CUDA_VISIBLE_DEVICES'] = ''  # a CPU calibration never touches a GPU
            env['OMP_NUM_THREADS'] = str(self.cpu_threads)
        elif self.gpu_uuids:
            env['CUDA_VISIBLE_DEVICES'] = ','.join(self.gpu_uuids)
        env.setdefault('PYTORCH_CUDA_ALLOC_CONF', 'expandable_segments:True')
        env['PYTHONUNBUFFERED'] = '1'
        if package_path:
            env['PYTHONPATH'] = os.pathsep.join(p for p in (package_path,
                                                            env.get('PYTHONPATH')) if p)
        env.update(self.extra_env)
        return env


@dataclass(frozen=True)
class CalibrationOutcome:
    """How a calibration ended.

    Attributes:
        status: ``ok`` or an error kind (``torch_missing``, ``no_cuda``, ``oom``,
            ``does_not_fit``, ``cancelled``, ``timeout``, ``crash``, ``bad_input``).
        message: one line for the user.
        profile: the profile document, when the child produced one (also with
            ``does_not_fit``: the measurements are kept).
        returncode: the child's exit status (negative: killed by that signal).
        stderr_tail: the last lines the child wrote on stderr.
        elapsed_s: wall time.
        error_reported: the child wrote an ``error`` event (else the status is the
            parent's own finding: time limit, cancel, crash).
    """

    status: str
    message: str
    profile: dict[str, Any] | None
    returncode: int | None
    stderr_tail: str = ''
    elapsed_s: float = 0.0
    error_reported: bool = False

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for this outcome (``protocol.EXIT_CODES``)."""
        return EXIT_CODES.get(self.status, EXIT_CODES['crash'])


def classify(returncode: int | None, events: list[dict[str, Any]], *, cancelled: bool = False,
             timed_out: bool = False, timeout_s: float = 0.0, stderr_tail: str = ''
             ) -> tuple[str, str]:
    """(status, message) for a finished child.

    In order: our time limit; our cancel; exit 0 with a result; the child's own error
    event; death by a signal (SIGSEGV, SIGABRT, SIGKILL: a crash); any other exit.
    """
    error = next((e for e in reversed(events) if e.get('event') == 'error'), None)
    result = next((e for e in events if e.get('event') == 'result'), None)
    if timed_out:
        return 'timeout', Message('calibrate.timed_out', seconds=f'{timeout_s:.0f}')
    if cancelled:
        return 'cancelled', 'calibration cancelled'
    if returncode == 0 and result is not None:
        return 'ok', 'calibration finished'
    if error is not None and error.get('kind') in STATUSES:
        return str(error['kind']), str(error.get('message', ''))
    last = (stderr_tail.strip().splitlines() or [''])[-1][:300]
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f'signal {-returncode}'
        return 'crash', f'the calibration process was killed by {name}' + (
            f': {last}' if last else '')
    return 'crash', f'the calibration process exited with code {returncode}' + (
        f': {last}' if last else ' without a result')


class CalibrationRunner:
    """Runs one calibration child; callbacks fire on the thread that calls :meth:`wait`.

    Args:
        options: what to calibrate.
        on_event: called with every protocol event (progress, result, error).
        on_progress: called with (fraction, stage, message) for progress events.
    """

    def __init__(self, options: CalibrationOptions,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_progress: Callable[[float, str, str], None] | None = None) -> None:
        self.options = options
        self.on_event = on_event
        self.on_progress = on_progress
        self.events: list[dict[str, Any]] = []
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._cancel = threading.Event()
        self._timed_out = False
        self._term_sent_at: float | None = None
        self._started = 0.0
        self._package_dir: tempfile.TemporaryDirectory[str] | None = None
        self._readers: list[threading.Thread] = []

    @property
    def pid(self) -> int | None:
        """The child's process id once started."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        """Spawn the child (returns at once)."""
        opts = self.options
        package = self._package_path()
        self._started = time.monotonic()
        self._proc = subprocess.Popen(
            opts.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            encoding='utf-8', errors='replace', env=opts.environment(package_path=package),
            cwd=tempfile.gettempdir(),  # never pick up a stray ./planner or ./torch
            start_new_session=True)  # its own process group: probes die with it
        self._readers = [
            threading.Thread(target=self._read_stdout, args=(self._proc.stdout,), daemon=True),
            threading.Thread(target=self._read_stderr, args=(self._proc.stderr,), daemon=True)]
        for reader in self._readers:
            reader.start()

    def cancel(self) -> None:
        """Ask the child to stop (SIGTERM now, SIGKILL after the grace period).

        Safe from any thread or a signal handler; :meth:`wait` reports ``cancelled``.
        """
        self._cancel.set()

    def run(self) -> CalibrationOutcome:
        """Start and wait."""
        self.start()
        return self.wait()

    def wait(self) -> CalibrationOutcome:
        """Follow the child to its end, enforcing the time limit; the outcome."""
        if self._proc is None:
            raise RuntimeError('start() first')
        opts, proc = self.options, self._proc
        deadline = self._started + opts.timeout_s
        eof = False
        exited_at: float | None = None
        try:
            while not (eof and proc.poll() is not None):
                now = time.monotonic()
                if proc.poll() is not None:
                    exited_at = exited_at or now
                    if now - exited_at > opts.grace_s:
                        break  # something else holds the pipe open: stop reading
                if now >= deadline and not self._timed_out and proc.poll() is None:
                    self._timed_out = True
                    self._terminate(now)
                if self._cancel.is_set() and self._term_sent_at is None:
                    self._terminate(now)
                if self._term_sent_at is not None and proc.poll() is None \
                        and now - self._term_sent_at >= opts.grace_s:
                    self._kill_group()
                try:
                    line = self._lines.get(timeout=0.05)
                except queue.Empty:
                    continue
                if line is None:
                    eof = True
                    continue
                self._handle(line)
            proc.wait()
            if proc.returncode < 0 or self._term_sent_at is not None:
                self._kill_group()  # probes or ranks a killed child left behind
            for reader in self._readers:  # both pipes read to their end
                reader.join(timeout=opts.grace_s)
        finally:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            if self._package_dir is not None:
                self._package_dir.cleanup()
        while not self._lines.empty():  # lines that raced the end
            line = self._lines.get_nowait()
            if line is not None:
                self._handle(line)
        tail = '\n'.join(self._stderr)
        status, message = classify(proc.returncode, self.events,
                                   cancelled=self._cancel.is_set(), timed_out=self._timed_out,
                                   timeout_s=opts.timeout_s, stderr_tail=tail)
        result = next((e for e in self.events if e.get('event') == 'result'), None)
        return CalibrationOutcome(status=status, message=message,
                                  profile=None if result is None else result.get('profile'),
                                  returncode=proc.returncode, stderr_tail=tail,
                                  elapsed_s=time.monotonic() - self._started,
                                  error_reported=any(e.get('event') == 'error'
                                                     for e in self.events))

    # ---- internals ------------------------------------------------------------------------

    def _terminate(self, now: float) -> None:
        self._term_sent_at = now
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()  # the child writes a 'cancelled' event and exits

    def _kill_group(self) -> None:
        """SIGKILL the child's whole process group (the child, its probes and ranks)."""
        if self._proc is None:
            return
        if hasattr(os, 'killpg'):
            with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
                os.killpg(self._proc.pid, signal.SIGKILL)
        elif self._proc.poll() is None:
            self._proc.kill()

    def _handle(self, line: str) -> None:
        event = parse_event(line)
        if event is None:
            return
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
        if event['event'] == 'progress' and self.on_progress is not None:
            self.on_progress(float(event.get('fraction', 0.0)), str(event.get('stage', '')),
                             str(event.get('message', '')))

    def _read_stdout(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)  # end of file

    def _read_stderr(self, stream: IO[str]) -> None:
        for line in stream:
            self._stderr.append(line.rstrip('\n'))

    def _package_path(self) -> str:
        """A folder exposing this ``planner`` package to the child's interpreter.

        Only the package itself is exposed (a symlink in a private folder), never the
        site-packages around it, whose compiled modules may not match another
        interpreter; the child runs in the temporary folder, so this is also how the
        default interpreter finds the package when it was imported from the cwd. A
        frozen build has no ``planner`` folder of source beside this module (it runs
        from the bundled archive) but ships one on purpose, holding nothing else.
        """
        from planner.calibrate.interpreter import bundled_source_path

        bundled = bundled_source_path()
        if bundled is not None:
            return str(bundled)
        own = Path(__file__).resolve().parents[1]  # .../planner
        self._package_dir = tempfile.TemporaryDirectory(prefix='batchfit-calibrate-')
        link = Path(self._package_dir.name) / 'planner'
        try:
            link.symlink_to(own, target_is_directory=True)
        except OSError:  # no symlinks (Windows without privileges): the folder above
            self._package_dir.cleanup()
            self._package_dir = None
            return str(own.parent)
        return self._package_dir.name

