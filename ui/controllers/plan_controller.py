"""Recompute plans off the GUI thread, latest request wins.

:class:`PlanController` lives on the GUI thread. Edits call :meth:`PlanController.request`,
which starts a single-shot timer (``DEBOUNCE_MS``, 0 by default: the recompute starts on the
next event-loop turn, so edits made in one turn become one recompute); when it fires, a
:class:`_PlanRunnable` runs :func:`ui.plan_compute.compute_main` (then the batch sweep) on
the controller's own one-thread ``QThreadPool``. Each run carries a generation number and a
cancel flag: a newer request sets the older run's flag (the search stops at its next stage)
and a stale result that still arrives is dropped. Results are re-emitted from the
controller's main-thread slot, so widgets and tests connect to
:attr:`PlanController.outcome_ready` only (pytest-qt's ``waitSignal`` on a worker-thread
signal fails with "QObject::killTimer: Timers cannot be stopped from another thread",
pytest-qt #649).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from PySide6.QtCore import QObject, QRunnable, QThreadPool, QTimer, Signal, Slot

from planner.errors import InputError
from ui.plan_compute import batch_sweep, compute_main
from ui.plan_inputs import PlanInputs

log = logging.getLogger(__name__)
# 0: edits made in one event-loop turn (a file opened, several fields set) become one
# recompute. No longer: a newer request cancels the older run anyway (latest wins), and
# any wait counts in the edit-to-update time the user sees.
DEBOUNCE_MS = 0
SWEEP_WAIT_S = 2.0


class _RunnableSignals(QObject):
    """Signals of one run (a QRunnable is no QObject).

    ``main(generation, outcome)`` after the search; ``done(generation, sweep, error)`` at
    the end (the batch sweep, or the error that stopped the run).
    """

    main = Signal(int, object)
    done = Signal(int, object, object)


class _PlanRunnable(QRunnable):
    def __init__(self, generation: int, inputs: PlanInputs, cancel: threading.Event,
                 shown: threading.Event | None) -> None:
        super().__init__()
        self.generation = generation
        self.inputs = inputs
        self.cancel = cancel
        self.shown = shown  # set when the GUI has drawn the main result (None: no wait)
        self.signals = _RunnableSignals()

    def _wait_until_shown(self) -> None:
        """Hold the batch sweep until the plan is on screen.

        The sweep is four more searches; run beside the GUI thread's drawing, it takes
        the GIL from it and doubles the time to a drawn table. Never waits past
        :data:`SWEEP_WAIT_S`, so a window that never reports still gets its sweep.
        """
        if self.shown is None:
            return
        from planner.plans.search import SearchCancelled

        waited = 0.0
        while not self.shown.wait(0.02):
            waited += 0.02
            if self.cancel.is_set():
                raise SearchCancelled
            if waited >= SWEEP_WAIT_S:
                return

    def run(self) -> None:
        from planner.plans.search import SearchCancelled

        sweep = None
        error: Exception | None = None
        try:
            outcome = compute_main(self.inputs, should_stop=self.cancel.is_set)
            self.signals.main.emit(self.generation, outcome)
            self._wait_until_shown()
            sweep = batch_sweep(outcome, should_stop=self.cancel.is_set)
        except SearchCancelled:
            pass
        except InputError as exc:
            error = exc
        except Exception as exc:  # reported on the GUI thread, never lost in the pool
            log.exception('plan recompute failed')
            error = exc
        self.signals.done.emit(self.generation, sweep, error)


class PlanController(QObject):
    """Owns the plan worker; emits results on the GUI thread.

    Signals:
        outcome_ready(PlanOutcome): the latest request's result (table, memory, GPU
            scaling; its ``by_batch`` is still empty).
        sweep_ready(PlanOutcome): the same outcome with the global-batch sweep filled in.
        input_error(InputError): the latest request has a bad input.
        failed(str): the recompute raised something unexpected.
        busy_changed(bool): a recompute started or the last one ended.
    """

    outcome_ready = Signal(object)
    sweep_ready = Signal(object)
    input_error = Signal(object)
    failed = Signal(str)
    busy_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None, debounce_ms: int = DEBOUNCE_MS,
                 sweep_after_shown: bool = False) -> None:
        """``sweep_after_shown``: start each batch sweep only once :meth:`shown` is called
        (or after :data:`SWEEP_WAIT_S`), so it does not compete with the drawing."""
        super().__init__(parent)
        self._sweep_after_shown = sweep_after_shown
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(2)  # a cancelled run may still be finishing a stage
        self._generation = 0
        self._running: dict[int, tuple[_PlanRunnable, threading.Event]] = {}
        self._shown: dict[int, threading.Event] = {}
        self._pending: PlanInputs | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(debounce_ms)
        self._timer.timeout.connect(self._start_pending)
        self.latest = None  # the last PlanOutcome shown

    @property
    def generation(self) -> int:
        """Number of recomputes started."""
        return self._generation

    @property
    def busy(self) -> bool:
        """Whether a run is in flight or waiting for the debounce."""
        return bool(self._running) or self._timer.isActive()

    def request(self, inputs: PlanInputs) -> None:
        """Recompute for ``inputs`` after the debounce interval (restarted by each edit)."""
        self._pending = inputs
        self._timer.start()

    def compute_now(self, inputs: PlanInputs) -> None:
        """Start a recompute for ``inputs`` at once, cancelling the ones in flight."""
        self._timer.stop()
        self._pending = None
        for _, cancel in self._running.values():
            cancel.set()
        self._generation += 1
        cancel = threading.Event()
        shown = threading.Event() if self._sweep_after_shown else None
        if shown is not None:
            self._shown[self._generation] = shown
        runnable = _PlanRunnable(self._generation, inputs, cancel, shown)
        runnable.setAutoDelete(False)
        runnable.signals.main.connect(self._on_main)
        runnable.signals.done.connect(self._on_done)
        was_busy = bool(self._running)
        self._running[self._generation] = (runnable, cancel)
        self._pool.start(runnable)
        if not was_busy:
            self.busy_changed.emit(True)

    @Slot()
    def _start_pending(self) -> None:
        if self._pending is not None:
            self.compute_now(self._pending)

    @Slot(int, object)
    def _on_main(self, generation: int, outcome) -> None:
        if generation == self._generation:  # a newer request is in flight: latest wins
            self.latest = outcome
            self.outcome_ready.emit(outcome)

    def shown(self) -> None:
        """The latest main result is on screen: let its batch sweep start."""
        event = self._shown.get(self._generation)
        if event is not None:
            event.set()

    @Slot(int, object, object)
    def _on_done(self, generation: int, sweep, error) -> None:
        self._running.pop(generation, None)
        self._shown.pop(generation, None)
        if not self._running:
            self.busy_changed.emit(False)
        if generation != self._generation:
            return
        if isinstance(error, InputError):
            self.input_error.emit(error)
        elif error is not None:
            self.failed.emit(f'{type(error).__name__}: {error}')
        elif sweep is not None and self.latest is not None:
            self.latest = replace(self.latest, by_batch=sweep)
            self.sweep_ready.emit(self.latest)

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Cancel everything and wait for the worker threads; True when they stopped."""
        self._timer.stop()
        self._pending = None
        for _, cancel in self._running.values():
            cancel.set()
        done = self._pool.waitForDone(timeout_ms)
        self._running.clear()
        self._shown.clear()
        return done

    def active_thread_count(self) -> int:
        """Threads of the pool running a task now."""
        return self._pool.activeThreadCount()
