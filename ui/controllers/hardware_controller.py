"""Poll the local GPUs once a second in a worker thread (docs/architecture.md says
which work runs on which thread).

A :class:`_Poller` QObject moved to a ``QThread`` owns a ``QTimer`` created in that
thread; each tick calls :func:`planner.hardware.local.probe` (which never raises) and emits the
frozen :class:`~planner.hardware.local.HardwareInventory`. :class:`HardwareController` lives on the
GUI thread and re-emits every snapshot as :attr:`HardwareController.snapshot_ready`.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal, Slot

POLL_MS = 1000


class _Poller(QObject):
    snapshot = Signal(object)

    def __init__(self, interval_ms: int) -> None:
        super().__init__()
        self._interval_ms = interval_ms
        self._timer: QTimer | None = None

    @Slot()
    def start(self) -> None:
        self._timer = QTimer(self)  # created here, so it lives in the worker thread
        self._timer.setInterval(self._interval_ms)
        self._timer.timeout.connect(self.poll)
        self.poll()
        self._timer.start()

    @Slot()
    def poll(self) -> None:
        from planner.hardware.local import probe

        self.snapshot.emit(probe())

    @Slot()
    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer.deleteLater()
            self._timer = None


class HardwareController(QObject):
    """Starts and stops the NVML poller; re-emits its snapshots on the GUI thread.

    Signals:
        snapshot_ready(HardwareInventory): the latest reading.
    """

    snapshot_ready = Signal(object)
    _stop_requested = Signal()

    def __init__(self, parent: QObject | None = None, interval_ms: int = POLL_MS) -> None:
        super().__init__(parent)
        self._interval_ms = interval_ms
        self._thread: QThread | None = None
        self._poller: _Poller | None = None
        self.latest = None

    @property
    def running(self) -> bool:
        """Whether the poller thread runs."""
        return self._thread is not None and self._thread.isRunning()

    def start(self) -> None:
        """Start polling (no-op when running)."""
        if self.running:
            return
        self._thread = QThread()
        self._thread.setObjectName('batchfit-nvml-poller')
        self._poller = _Poller(self._interval_ms)
        self._poller.moveToThread(self._thread)
        self._thread.started.connect(self._poller.start)
        self._poller.snapshot.connect(self._on_snapshot)
        self._stop_requested.connect(self._poller.stop, Qt.ConnectionType.BlockingQueuedConnection)
        self._thread.start()

    def stop(self, timeout_ms: int = 5000) -> None:
        """Stop the timer in its own thread, end the thread and wait for it."""
        if self._thread is None:
            return
        if self._thread.isRunning():
            self._stop_requested.emit()
            self._thread.quit()
            self._thread.wait(timeout_ms)
        self._stop_requested.disconnect()
        self._poller = None
        self._thread = None

    @Slot(object)
    def _on_snapshot(self, inventory) -> None:
        self.latest = inventory
        self.snapshot_ready.emit(inventory)
