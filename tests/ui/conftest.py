"""UI test set-up: isolated QSettings, no NVML surprises, no thread or timer left running.

As napari's src/napari/conftest.py does: every QThread and QTimer started during a test
is recorded with where it was started, and a test that leaves one running fails.
"""

from __future__ import annotations

import traceback
import weakref

import pytest
from PySide6.QtCore import QCoreApplication, QSettings, QThread, QThreadPool, QTimer

import ui  # noqa: F401  (PySide6 before pyqtgraph)
from tests.planner.fake_nvml import FakeNvml, h100_node, install


@pytest.fixture(autouse=True)
def _fresh_settings(tmp_path, qapp):
    """QSettings (INI) of this test live under its tmp_path."""
    QCoreApplication.setOrganizationName('batchfit-tests')
    QCoreApplication.setApplicationName('batchfit')
    folder = tmp_path / 'qsettings'
    folder.mkdir()
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))
    return folder


@pytest.fixture(autouse=True)
def _no_modal_dialogs(monkeypatch):
    """A dialog would block an offscreen test: discard on close, record warnings."""
    from PySide6.QtWidgets import QMessageBox

    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, 'question',
                        lambda *a, **k: QMessageBox.StandardButton.Discard)
    monkeypatch.setattr(QMessageBox, 'warning', lambda *a, **k: shown.append(a[2]))
    return shown


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    """No NVIDIA GPU unless a test installs a fake one (the host's driver never leaks in)."""
    install(monkeypatch, FakeNvml(init_error=12))  # NVML_ERROR_LIBRARY_NOT_FOUND


@pytest.fixture
def fake_gpus(monkeypatch):
    """A fake NVML with an 8 x H100 node."""
    node = FakeNvml(h100_node(8))
    install(monkeypatch, node)
    return node


@pytest.fixture(autouse=True)
def _dangling_threads_and_timers(qapp):
    """Fail a test that leaves a QThread or a QTimer running."""
    threads: list[tuple[weakref.ref, str]] = []
    timers: list[tuple[weakref.ref, str]] = []
    thread_start, timer_start = QThread.start, QTimer.start

    def record_thread(self, *args, **kwargs):
        threads.append((weakref.ref(self), ''.join(traceback.format_stack(limit=8))))
        return thread_start(self, *args, **kwargs)

    def record_timer(self, *args, **kwargs):
        timers.append((weakref.ref(self), ''.join(traceback.format_stack(limit=8))))
        return timer_start(self, *args, **kwargs)

    QThread.start, QTimer.start = record_thread, record_timer
    try:
        yield
    finally:
        QThread.start, QTimer.start = thread_start, timer_start
    for ref, where in threads:
        thread = ref()
        try:
            running = thread is not None and thread.isRunning()
        except RuntimeError:  # the C++ object is gone
            running = False
        if running:
            thread.quit()
            thread.wait(2000)
            pytest.fail('a QThread was started in this test and not stopped; started at:\n'
                        + where)
    for ref, where in timers:
        timer = ref()
        try:
            active = timer is not None and timer.isActive()
        except RuntimeError:
            active = False
        if active:
            timer.stop()
            pytest.fail('a QTimer was started in this test and is still running; started at:\n'
                        + where)
    pool = QThreadPool.globalInstance()
    if not pool.waitForDone(2000):
        pytest.fail('the global QThreadPool still runs tasks after the test')


@pytest.fixture
def window(qtbot):
    """The main window on the worked example, after its first plan; shut down after."""
    from ui.main_window import MainWindow

    w = MainWindow(restore=False, poll_hardware=False, debounce_ms=10)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.outcome is not None and not w.updating, timeout=20_000)
    yield w
    w._saved_inputs = w.inputs.read_inputs()[0]  # no save prompt
    w.shutdown()
