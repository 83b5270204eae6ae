"""Spread one screen update over several event-loop turns, so no turn blocks for long.

Showing a new plan touches the table, the detail panel and four plots; done in one slot,
Qt then repaints all of them in one go and the GUI thread is busy for 100+ ms on a slow
machine. :class:`StagedUpdate` runs the steps one per turn of the event loop (a 0 ms
timer), so each turn's repaint covers only what that step changed, and input events get
through in between. A newer update replaces the steps still waiting (latest wins).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from PySide6.QtCore import QObject, QTimer, Signal, Slot


class StagedUpdate(QObject):
    """A queue of GUI steps run one per event-loop turn.

    Signals:
        finished(): the last step of the current update ran.
    """

    finished = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._steps: deque[Callable[[], None]] = deque()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self._run_next)

    @property
    def pending(self) -> bool:
        """Whether steps are still waiting."""
        return bool(self._steps)

    def start(self, first: Callable[[], None], later: Iterable[Callable[[], None]]) -> None:
        """Run ``first`` now and each of ``later`` on its own later turn.

        Steps of an earlier update that have not run yet are dropped.
        """
        self._steps = deque(later)
        first()
        self._schedule()

    def then(self, steps: Iterable[Callable[[], None]]) -> None:
        """Queue ``steps`` after the waiting ones (a row selected while a plan is shown)."""
        self._steps.extend(steps)
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Run every waiting step now (before a screenshot, a save or a test check)."""
        self._timer.stop()
        while self._steps:
            self._steps.popleft()()
        self.finished.emit()

    def cancel(self) -> None:
        """Drop the waiting steps."""
        self._timer.stop()
        self._steps.clear()

    def _schedule(self) -> None:
        if self._steps:
            self._timer.start()
        else:
            self.finished.emit()

    @Slot()
    def _run_next(self) -> None:
        if self._steps:
            self._steps.popleft()()
        self._schedule()
