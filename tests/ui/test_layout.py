"""The window from 1024 x 700 to 4K: docks keep their minimums, plots are not cut off,
a saved state is restored only when usable, every memory part has its own colour."""

from __future__ import annotations

import pytest

from ui.main_window import MainWindow, whole_ticks, with_json_suffix
from ui.plots.memory_plot import PART_COLOURS, PARTS


def _plots_fit(window: MainWindow) -> None:
    for key, plot in window.plots.items():
        item = plot.getPlotItem()
        # the plot's items stay inside the widget (a long title once widened the plot
        # past it and cut off the MFU axis)
        assert item.geometry().right() <= plot.viewport().width() + 1, key
        for name in ('left', 'right', 'bottom'):
            axis = item.getAxis(name)
            if axis.isVisible():
                assert axis.geometry().right() <= plot.viewport().width() + 1, (key, name)


@pytest.mark.parametrize(('width', 'height'), [(1024, 700), (1500, 950), (2560, 1440)])
def test_every_size_keeps_docks_and_plots_usable(qtbot, window, width, height):
    window.resize(width, height)
    qtbot.waitUntil(lambda: window.width() == width, timeout=5_000)
    window.layout().activate()
    qtbot.wait(50)
    assert window.layout_usable()
    compact = width < 1280
    assert (window.dockWidgetArea(window.detail_dock)
            == window.dockWidgetArea(window.input_dock)) == compact
    _plots_fit(window)


def test_compact_and_back(qtbot, window):
    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.width() == 1024, timeout=5_000)
    assert window.detail_dock in window.tabifiedDockWidgets(window.input_dock)
    window.resize(1600, 950)
    qtbot.waitUntil(lambda: window.width() == 1600, timeout=5_000)
    window.layout().activate()
    assert window.detail_dock not in window.tabifiedDockWidgets(window.input_dock)
    assert window.detail_dock.width() >= window.detail_dock.minimumWidth()


def test_an_unusable_saved_state_is_not_restored(qtbot, window):
    window.detail_dock.setFloating(True)
    state = window.saveState()
    window.detail_dock.setFloating(False)
    other = MainWindow(restore=False, poll_hardware=False, debounce_ms=10)
    qtbot.addWidget(other)
    try:
        assert other.restore_window(None, state) is False
        assert not other.detail_dock.isFloating()
        assert other.restore_window(None, other.saveState()) is True
    finally:
        other.shutdown(remember=False)


def test_every_memory_part_has_its_own_colour():
    keys = [key for key, _ in PARTS]
    assert set(keys) <= set(PART_COLOURS)
    colours = [PART_COLOURS[k].lower() for k in keys]
    assert len(set(colours)) == len(colours)


def test_gpu_ticks_are_whole_counts():
    assert whole_ticks([4.0, 8.0]) == [4.0, 8.0]
    ticks = whole_ticks(range(1, 200))
    assert len(ticks) <= 8
    assert all(t == int(t) for t in ticks)


def test_save_as_adds_json():
    assert with_json_suffix('/tmp/llama-3.1-70b-16n') == '/tmp/llama-3.1-70b-16n.json'
    assert with_json_suffix('/tmp/a.JSON') == '/tmp/a.JSON'


def test_no_internal_status_code_is_shown(qtbot):
    from planner.hardware.local.inventory import HardwareInventory
    from ui.widgets.gpu_panel import GpuPanel

    panel = GpuPanel()
    qtbot.addWidget(panel)
    for status in ('no_driver', 'no_bindings', 'driver_mismatch', 'error'):
        panel.set_inventory(HardwareInventory(status=status, message='x'))
        assert status not in panel.status_label.text()


def test_copy_and_save_confirm(qtbot, window, tmp_path):
    dialog = window.show_export_dialog()
    qtbot.addWidget(dialog)
    name = next(iter(dialog.texts))
    done = dialog.done_labels[name]
    dialog._copy(dialog.texts[name], done)
    assert done.text()
    path = tmp_path / 'launch.sh'
    assert dialog.save_text(dialog.texts[name], str(path), done)
    assert str(path) in done.text()
    assert path.read_text() == dialog.texts[name]
    dialog.close()


def test_a_wide_window_does_not_stretch_the_last_column(qtbot, window):
    window.resize(3840, 2160)
    qtbot.waitUntil(lambda: window.width() == 3840, timeout=5_000)
    window.layout().activate()
    qtbot.wait(50)
    table = window.results.table
    assert table.model().rowCount() > 0
    last = table.model().columnCount() - 1
    header = table.horizontalHeader()
    wanted = max(table.sizeHintForColumn(last), header.sectionSizeHint(last))
    # sized to its contents, not to the table's spare width
    assert header.sectionSize(last) <= wanted + 8
    assert table.viewport().width() > header.length()


@pytest.mark.parametrize('stack', ['', 'hf', 'hf-deepspeed', 'torchtitan', 'megatron',
                                   'deepspeed'])
def test_the_inputs_fit_their_dock_at_1024_px(qtbot, window, stack):
    """No field is cut off at the right of the inputs at 1024 x 700, whichever stack's
    (long) recompute words and switches are shown."""
    from ui.widgets.input_panel import InputPanel

    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.width() == 1024, timeout=5_000)
    panel = window.findChild(InputPanel)
    panel.framework_combo.setCurrentIndex(panel.framework_combo.findData(stack))
    window.layout().activate()
    qtbot.wait(50)
    assert panel.widget().minimumSizeHint().width() <= panel.viewport().width()
