"""StagedUpdate: one step per event-loop turn, each after the previous one is painted."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QWidget

from ui.controllers.staged_update import StagedUpdate


class _PaintLog(QObject):
    """Appends 'paint' to ``log`` whenever the watched widget paints."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def eventFilter(self, obj, event) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.Paint:
            self.log.append('paint')
        return False


def _shown_widget(qtbot, log: list[str]) -> QWidget:
    widget = QWidget()
    qtbot.addWidget(widget)
    widget.resize(200, 100)
    widget.show()
    qtbot.waitExposed(widget)
    qtbot.wait(20)  # the first paint
    widget.paint_log = _PaintLog(log)
    widget.installEventFilter(widget.paint_log)
    log.clear()
    return widget


def test_each_step_runs_after_the_previous_one_is_painted(qtbot):
    """A 0 ms timer firing in the same pass as another timer ran step 2 before step 1's
    paint; the heartbeat here is that other timer."""
    log: list[str] = []
    widget = _shown_widget(qtbot, log)
    heartbeat = QTimer()
    heartbeat.setInterval(0)
    heartbeat.timeout.connect(lambda: None)
    heartbeat.start()
    stages = StagedUpdate()
    stages.finished.connect(lambda: log.append('finished'))
    stages.painted.connect(lambda: log.append('painted'))

    def step(name: str):
        def run() -> None:
            log.append(name)
            widget.update()
        return run

    stages.start([step('one'), step('two'), step('three')])
    assert stages.pending
    assert log == []  # nothing runs inside start()
    qtbot.waitUntil(lambda: 'painted' in log, timeout=2000)
    heartbeat.stop()
    steps = [e for e in log if e != 'paint']
    assert steps == ['one', 'two', 'three', 'finished', 'painted']
    for name in ('one', 'two'):  # a paint between each step and the next
        after = log[log.index(name) + 1:]
        assert after.index('paint') < after.index({'one': 'two', 'two': 'three'}[name])
    assert not stages.pending


class _Sender(QObject):
    fired = Signal()


def test_an_update_started_from_a_queued_signal_waits_for_the_pending_paint(qtbot):
    """A worker's result arrives as a queued signal, at start-up while the whole window
    waits for its first paint: the first step runs after that paint, not in one block
    with it."""
    log: list[str] = []
    widget = _shown_widget(qtbot, log)
    stages = StagedUpdate()
    sender = _Sender()

    def arrive() -> None:
        widget.update()  # a paint is pending when the result comes in
        stages.start([lambda: log.append('step')])

    sender.fired.connect(arrive, Qt.ConnectionType.QueuedConnection)
    with qtbot.waitSignal(stages.painted, timeout=2000):
        sender.fired.emit()
    assert log[:2] == ['paint', 'step']


def test_a_new_update_replaces_the_waiting_steps_and_cancel_drops_them(qtbot):
    ran: list[str] = []
    stages = StagedUpdate()
    finished: list[bool] = []
    stages.finished.connect(lambda: finished.append(True))
    stages.start([lambda: ran.append('old 1'), lambda: ran.append('old 2')])
    stages.start([lambda: ran.append('new')])  # latest wins
    qtbot.waitUntil(lambda: bool(finished), timeout=2000)
    assert ran == ['new']

    stages.start([lambda: ran.append('dropped')])
    stages.cancel()
    qtbot.wait(50)
    assert ran == ['new']
    assert finished == [True]
    assert not stages.pending


def test_flush_runs_every_waiting_step_now(qtbot):
    ran: list[int] = []
    stages = StagedUpdate()
    stages.start([lambda: ran.append(1)])
    stages.then([lambda: ran.append(2)])
    with qtbot.waitSignal(stages.finished, timeout=1000):
        stages.flush()
    assert ran == [1, 2]
    assert not stages.pending
    qtbot.waitSignal(stages.painted, timeout=1000).wait()
