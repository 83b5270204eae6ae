"""Spread one screen update over several event-loop turns, so no turn blocks for long.

Showing a new plan touches the table, the detail panel and four plots; done in one slot,
Qt then repaints all of them in one go and the GUI thread is busy for 100+ ms on a slow
machine. :class:`StagedUpdate` runs the steps one per turn of the event loop, so each
turn's repaint covers only what that step changed, and input events get through in
between. A newer update replaces the steps still waiting (latest wins).

The next step waits for the previous one's paint: a posted event one priority below
Qt's paint requests (posted at ``LowEventPriority``) arrives once they are done and
starts a 0 ms timer, so input and other timers get a turn between the paint and the
step. A bare 0 ms timer could fire in the same pass as another timer, before the paint:
two steps and both paints then ran as one block (64 ms at start-up on a 2-core VM).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, QTimer, Signal, Slot

_NEXT_STEP = QEvent.Type(QEvent.registerEventType())
_AFTER_PAINT = Qt.EventPriority.LowEventPriority.value - 1  # below the paint requests


class StagedUpdate(QObject):
    """A queue of GUI steps run one per event-loop turn, each after the last one's paint.

    Signals:
        finished(): the last step of the current update ran.
        painted(): and Qt has painted what it changed (the next turn may be busy).
    """

    finished = Signal()
    painted = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._steps: deque[Callable[[], None]] = deque()
        self._posted = False  # a _NEXT_STEP event is waiting in the queue
        self._painting = False  # the steps are done: painted() follows the paint
        self._timer = QTimer(self)  # started by _NEXT_STEP: a loop turn after the paint
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self._run_next)

    @property
    def pending(self) -> bool:
        """Whether steps are still waiting."""
        return bool(self._steps)

    def start(self, steps: Iterable[Callable[[], None]]) -> None:
        """Run each of ``steps`` on its own turn, the first once what is pending is painted.

        Steps of an earlier update that have not run yet are dropped.
        """
        self._steps = deque(steps)
        self._painting = False
        self._post()

    def then(self, steps: Iterable[Callable[[], None]]) -> None:
        """Queue ``steps`` after the waiting ones (a row selected while a plan is shown)."""
        self._steps.extend(steps)
        self._post()

    def flush(self) -> None:
        """Run every waiting step now (before a screenshot, a save or a test check)."""
        self._unpost()
        while self._steps:
            self._steps.popleft()()
        self._schedule()

    def cancel(self) -> None:
        """Drop the waiting steps."""
        self._unpost()
        self._steps.clear()
        self._painting = False

    def event(self, e: QEvent) -> bool:
        if e.type() == _NEXT_STEP:
            self._posted = False
            if self._steps:
                self._timer.start()
            elif self._painting:
                self._painting = False
                self.painted.emit()
            return True
        return super().event(e)

    @Slot()
    def _run_next(self) -> None:
        if self._steps:
            self._steps.popleft()()
        self._schedule()

    def _schedule(self) -> None:
        if not self._steps:
            self._painting = True
            self.finished.emit()
        self._post()

    def _post(self) -> None:
        if not self._posted and not self._timer.isActive():
            self._posted = True
            QCoreApplication.postEvent(self, QEvent(_NEXT_STEP), _AFTER_PAINT)

    def _unpost(self) -> None:
        self._timer.stop()
        if self._posted:
            QCoreApplication.removePostedEvents(self, _NEXT_STEP)
            self._posted = False
