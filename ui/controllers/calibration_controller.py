"""Run a calibration child through ``QProcess`` (torch never enters the GUI process).

The command and environment come from ``planner.calibrate.runner.CalibrationOptions``
(``python -m planner.calibrate ... --json`` with ``CUDA_VISIBLE_DEVICES`` pinned to the
GPU's UUID); stdout is read line by line as JSON-lines events
(``planner.calibrate.protocol.parse_event``); cancel is ``terminate()`` then ``kill()``
after a grace period; the end is classified by ``planner.calibrate.runner.classify``.
A finished result is saved with ``planner.calibrate.profile.save_profile``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer, Signal, Slot

if TYPE_CHECKING:
    from planner.calibrate.runner import CalibrationOptions


class CalibrationController(QObject):
    """One calibration at a time.

    Signals:
        progress(float, str, str): fraction of the run, stage, message.
        finished(str, str, object): status (``ok``, ``cancelled``, ``torch_missing``...),
            message, and the saved profile path (or None).
    """

    progress = Signal(float, str, str)
    finished = Signal(str, str, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._process: QProcess | None = None
        self._events: list[dict[str, Any]] = []
        self._buffer = b''
        self._cancelled = False
        self._timed_out = False
        self._stderr = b''
        self._options: CalibrationOptions | None = None
        self._kill_timer = QTimer(self)
        self._kill_timer.setSingleShot(True)
        self._kill_timer.timeout.connect(self._kill)
        self._deadline = QTimer(self)
        self._deadline.setSingleShot(True)
        self._deadline.timeout.connect(self._time_out)

    @property
    def running(self) -> bool:
        """Whether a child runs."""
        return self._process is not None

    def start(self, options) -> None:
        """Start ``options`` (a ``CalibrationOptions``); ignored while one runs."""
        if self._process is not None:
            return
        self._options = options
        self._events, self._buffer, self._stderr = [], b'', b''
        self._cancelled = self._timed_out = False
        process = QProcess(self)
        env = QProcessEnvironment()
        from planner.calibrate.interpreter import bundled_source_path

        # A frozen build runs from an archive: its planner/ source ships in a folder of its own.
        bundled = bundled_source_path()
        here = str(bundled) if bundled is not None else \
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        for key, value in options.environment(package_path=here).items():
            env.insert(key, value)
        process.setProcessEnvironment(env)
        process.readyReadStandardOutput.connect(self._read_stdout)
        process.readyReadStandardError.connect(self._read_stderr)
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._error)
        command = options.command()
        self._process = process
        process.start(command[0], command[1:])
        self._deadline.start(int(options.timeout_s * 1000))

    def cancel(self) -> None:
        """Ask the child to stop (SIGTERM); kill it after the grace period."""
        if self._process is None:
            return
        self._cancelled = True
        self._process.terminate()
        self._kill_timer.start(self._grace_ms())

    def _grace_ms(self) -> int:
        """How long a terminated child may take to exit before it is killed."""
        return 0 if self._options is None else int(self._options.grace_s * 1000)

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Stop a running child and wait for it (window closing)."""
        if self._process is None:
            return
        self.cancel()
        if not self._process.waitForFinished(timeout_ms):
            self._process.kill()
            self._process.waitForFinished(timeout_ms)

    @Slot()
    def _time_out(self) -> None:
        self._timed_out = True
        if self._process is not None:
            self._process.terminate()
            self._kill_timer.start(self._grace_ms())

    @Slot()
    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    @Slot()
    def _read_stdout(self) -> None:
        from planner.calibrate.protocol import parse_event

        if self._process is None:
            return
        self._buffer += self._process.readAllStandardOutput().data()
        *lines, self._buffer = self._buffer.split(b'\n')
        for raw in lines:
            event = parse_event(raw.decode('utf-8', 'replace'))
            if event is None:
                continue
            self._events.append(event)
            if event['event'] == 'progress':
                self.progress.emit(float(event.get('fraction', 0.0)), str(event.get('stage', '')),
                                   str(event.get('message', '')))

    @Slot()
    def _read_stderr(self) -> None:
        if self._process is None:
            return
        self._stderr = (self._stderr + self._process.readAllStandardError().data())[-20_000:]

    @Slot(QProcess.ProcessError)
    def _error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self._process is not None:
            interpreter = '' if self._options is None else self._options.interpreter
            self._end('crash', f'could not start {interpreter}: '
                      f'{self._process.errorString()}', None)

    @Slot(int, QProcess.ExitStatus)
    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        from planner.calibrate.runner import classify

        if self._process is None:
            return
        self._read_stdout()
        returncode = -9 if status == QProcess.ExitStatus.CrashExit and not self._cancelled \
            else code
        state, message = classify(returncode, self._events, cancelled=self._cancelled,
                                  timed_out=self._timed_out,
                                  timeout_s=0.0 if self._options is None
                                  else self._options.timeout_s,
                                  stderr_tail=self._stderr.decode('utf-8', 'replace'))
        saved = None
        if state == 'ok':
            from planner.calibrate.profile import profile_from_dict, save_profile
            from planner.errors import InputError

            result = next(e for e in self._events if e.get('event') == 'result')
            try:
                saved = str(save_profile(profile_from_dict(result['profile'], 'calibration')))
            except (InputError, OSError) as exc:
                state, message = 'crash', f'the profile could not be saved: {exc}'
        self._end(state, message, saved)

    def _end(self, state: str, message: str, saved) -> None:
        self._kill_timer.stop()
        self._deadline.stop()
        process, self._process = self._process, None
        if process is not None:
            process.deleteLater()
        self.finished.emit(state, message, saved)
