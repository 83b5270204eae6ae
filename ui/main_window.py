"""The planner window: inputs on the left, candidates and plots in the middle, details right.

:class:`MainWindow` wires the widgets to the two controllers (plan recompute and NVML
poll), owns the session (file path, saved inputs, recent files) and the window state
(QSettings, restored on the next start). It opens on a worked example so nothing is
empty: Llama-3.1-8B, sequence 4096, 1024 × 4096 = 4,194,304 tokens per step, 1T tokens,
on this machine's GPUs when NVML finds them, else one node of 8 H100.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QEvent, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDockWidget,
    QFileDialog,
    QGridLayout,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from planner.errors import InputError
from planner.plans.micro_batch_sweep import micro_batch_sweep
from planner.units import DAY
from ui import settings as app_settings
from ui.controllers.hardware_controller import HardwareController
from ui.controllers.plan_controller import PlanController
from ui.controllers.staged_update import StagedUpdate
from ui.i18n import (
    QT_TRANSLATE_NOOP,
    current_language,
    language_choices,
    resolve_language,
    saved_language,
    set_saved_language,
    translate,
)
from ui.plan_compute import guidance_for
from ui.plan_document import matching_index, opened_plan, plan_for
from ui.plan_inputs import PlanInputs
from ui.plots.memory_plot import MemoryPlot
from ui.plots.plot_export import export_png, export_svg
from ui.plots.series_plot import MicroBatchPlot, time_vs_batch_plot, time_vs_gpus_plot
from ui.widgets.detail_panel import DetailPanel
from ui.widgets.empty_state import EmptyState
from ui.widgets.gpu_panel import GpuPanel
from ui.widgets.input_panel import InputPanel
from ui.widgets.results_view import ResultsView

if TYPE_CHECKING:
    from planner.plans.guidance import Guidance
    from planner.plans.result import Candidate
    from ui.plan_compute import PlanOutcome

log = logging.getLogger(__name__)
BUSY_DELAY_MS = 300
FIRST_PLAN_LOG = 'first plan on screen'  # logged once; benchmarks/bench_gui.py times it
PLAN_FILTER = QT_TRANSLATE_NOOP('MainWindow', 'batchfit plan (*.json);;All files (*)')
DOCS = Path(__file__).resolve().parent.parent / 'docs'




MAX_GPU_TICKS = 8
INPUT_DOCK_MIN_WIDTH = 280
DETAIL_DOCK_MIN_WIDTH = 260
CENTRAL_MIN_WIDTH = 420
COMPACT_WIDTH = 1280  # below: the details become a tab beside the inputs
WIDE_WIDTH = 1400  # from here: back on the right
COMPACT_DOCK_WIDTH = 360


def whole_ticks(values, most: int = MAX_GPU_TICKS) -> list[float]:
    """At most ``most`` of the plotted GPU counts as tick positions (no 4.5 GPUs)."""
    import numpy as np

    counts = np.sort(np.asarray(values, float).ravel())  # np.unique would load numpy.ma
    counts = counts[np.concatenate([[True], counts[1:] != counts[:-1]])] if counts.size \
        else counts
    if counts.size <= most:
        return counts.tolist()
    picks = np.round(np.linspace(0, counts.size - 1, most)).astype(int)
    return counts[sorted(set(picks.tolist()))].tolist()


def with_json_suffix(path: str) -> str:
    """``path`` ending in ``.json`` ("llama-3.1-70b-16n" gets it added)."""
    return path if path.lower().endswith('.json') else path + '.json'


class MainWindow(QMainWindow):
    """The batchfit planner window.

    Signals:
        plan_shown(PlanOutcome): a plan is on screen: table, details and every plot.
    """

    plan_shown = Signal(object)

    def __init__(self, restore: bool = True, poll_hardware: bool = True,
                 debounce_ms: int | None = None) -> None:
        super().__init__()
        self._created_s = time.perf_counter()
        self._first_painted = False  # the first plan on screen is logged once
        self.setObjectName('batchfit_main_window')
        self.resize(1500, 950)
        self.setAcceptDrops(True)
        kwargs = {} if debounce_ms is None else {'debounce_ms': debounce_ms}
        self.controller = PlanController(self, sweep_after_shown=True, **kwargs)
        self.hardware = HardwareController(self)
        self.outcome: PlanOutcome | None = None
        self.shown_outcome: PlanOutcome | None = None  # the last one plan_shown announced
        self._stages = StagedUpdate(self)
        self._guidance: Guidance | None = None  # of the selected row
        self._pending_choice = None  # the row an opened plan file chose
        self.path: str | None = None
        self._saved_inputs: PlanInputs = PlanInputs()
        self._touched = False  # the user changed the worked example or opened something

        # widgets
        self.inputs = InputPanel()
        self.results = ResultsView()
        self.empty_state = EmptyState()
        self.results.set_empty_widget(self.empty_state)
        self.details = DetailPanel()
        self.gpu_panel = GpuPanel()
        self.memory_plot = MemoryPlot()
        self.gpus_plot = time_vs_gpus_plot()
        self.batch_plot = time_vs_batch_plot()
        self.micro_plot = MicroBatchPlot()
        self.plots = {'memory': self.memory_plot, 'time_vs_gpus': self.gpus_plot,
                      'time_vs_batch': self.batch_plot, 'micro_batch': self.micro_plot}

        self._build_central()
        self._build_docks()
        self._build_status_bar()
        self._build_menus()
        self._connect()
        self._restore_session(restore)
        if poll_hardware:
            self.hardware.start()

    def _build_central(self) -> None:
        """The table above the four plots, in a vertical splitter."""
        plots = QWidget()
        grid = QGridLayout(plots)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.memory_plot, 0, 0)
        grid.addWidget(self.gpus_plot, 0, 1)
        grid.addWidget(self.batch_plot, 1, 0)
        grid.addWidget(self.micro_plot, 1, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.results)
        split.addWidget(plots)
        split.setChildrenCollapsible(False)
        plots.setMinimumHeight(240)
        split.setMinimumWidth(CENTRAL_MIN_WIDTH)
        split.setSizes([330, 570])
        self.splitter = split
        self.setCentralWidget(split)

    def _build_docks(self) -> None:
        """Inputs and local GPUs on the left (tabbed), the selected plan on the right."""
        left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
        self.input_dock = self._dock(translate('MainWindow', 'Inputs'), 'inputs_dock',
                                     self.inputs, left)
        self.gpu_dock = self._dock(translate('MainWindow', 'Local GPUs'), 'gpus_dock',
                                   self.gpu_panel, left)
        self.tabifyDockWidget(self.input_dock, self.gpu_dock)
        self.input_dock.raise_()
        detail_box = QWidget()
        box_layout = QVBoxLayout(detail_box)
        box_layout.setContentsMargins(0, 0, 0, 0)
        box_layout.addWidget(self.details, 1)
        box_layout.addWidget(self.details.warnings_label)
        self.detail_dock = self._dock(translate('MainWindow', 'Selected plan'), 'details_dock',
                                      detail_box, right)
        self._compact = False  # the details share the left dock area (narrow windows)
        self.installEventFilter(self)
        self.input_dock.setMinimumWidth(INPUT_DOCK_MIN_WIDTH)
        self.detail_dock.setMinimumWidth(DETAIL_DOCK_MIN_WIDTH)
        self.resizeDocks([self.input_dock, self.detail_dock], [390, 400],
                         Qt.Orientation.Horizontal)
        self._default_state = self.saveState()

    def _build_status_bar(self) -> None:
        """The status text and a busy bar shown only when a recompute takes a while."""
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(120)
        self.busy.setVisible(False)
        # Shown only when a recompute takes a while: a busy bar animates at 60 frames/s,
        # and each frame takes the GIL from the search it is waiting for.
        self._busy_delay = QTimer(self)
        self._busy_delay.setSingleShot(True)
        self._busy_delay.setInterval(BUSY_DELAY_MS)
        self._busy_delay.timeout.connect(self.busy.show)
        self.status = QLabel()
        self.status.setObjectName('status_text')
        self.statusBar().addWidget(self.status, 1)
        self.statusBar().addPermanentWidget(self.busy)

    def _connect(self) -> None:
        """Inputs, controllers, table and panels wired to the window's slots."""
        self.inputs.changed.connect(self._inputs_changed)
        self.controller.outcome_ready.connect(self._show_outcome)
        self._stages.finished.connect(self._shown)
        self._stages.painted.connect(self._painted)
        self.controller.sweep_ready.connect(self._show_sweep)
        self.controller.input_error.connect(self._show_input_error)
        self.controller.failed.connect(self._show_failure)
        self.controller.busy_changed.connect(self._busy_changed)
        self.results.candidate_selected.connect(self._show_candidate)
        self.empty_state.suggestion_chosen.connect(self.apply_suggestion)
        self.hardware.snapshot_ready.connect(self._hardware_snapshot)
        self.gpu_panel.use_catalog.connect(self._use_catalog)
        self.gpu_panel.use_local.connect(self._use_local)

    def _restore_session(self, restore: bool) -> None:
        """The last window state and inputs (when ``restore``), then the first plan."""
        s = app_settings.settings()
        app_settings.migrate(s)
        restored = False
        if restore:
            self.restore_window(s.value('window/geometry'), s.value('window/state'))
            inputs, path = app_settings.last_session()
            if inputs is not None:
                self.inputs.set_inputs(inputs)
                self.path = path
                self._saved_inputs = inputs if path is None else self._read_saved(path, inputs)
                self._touched = True
                restored = True
        self._refresh_recent()
        self._update_title()
        if not restored:
            self._saved_inputs = self.current_inputs() or PlanInputs()
        current = self.current_inputs()
        if current is not None:
            self.controller.compute_now(current)

    # ---- building --------------------------------------------------------------------

    def restore_window(self, geometry, state) -> bool:
        """The saved geometry and dock state, only where usable; False when not restored.

        A geometry is kept when it lies on a screen with room for the window's minimum;
        a state when every dock it shows keeps its minimum width (a state saved at
        1024 px could otherwise leave the Selected-plan panel 75 px wide for good).
        """
        if isinstance(geometry, QByteArray) and self.restoreGeometry(geometry):
            screen = self.screen().availableGeometry() if self.screen() else None
            if screen is not None and not screen.intersects(self.frameGeometry()):
                self.resize(min(1500, screen.width()), min(950, screen.height()))
                self.move(screen.topLeft())
        if not isinstance(state, QByteArray) or not self.restoreState(state):
            return False
        docks = (self.input_dock, self.gpu_dock, self.detail_dock)
        if not self.layout_usable() or any(d.isFloating() for d in docks):
            self.restoreState(self._default_state)
            for dock in docks:
                dock.setFloating(False)
            return False
        return True

    def eventFilter(self, obj, event) -> bool:  # noqa: N802
        if obj is self and event.type() == QEvent.Type.Resize:
            self.fit_docks_to_width(event.size().width())
        return False

    def fit_docks_to_width(self, width: int) -> None:
        """Below COMPACT_WIDTH the Selected-plan panel becomes a tab beside the inputs
        (three columns would leave the table and plots too narrow); above WIDE_WIDTH it
        goes back to the right."""
        if width < COMPACT_WIDTH and not self._compact and not self.detail_dock.isHidden() \
                and not self.detail_dock.isFloating() \
                and self.dockWidgetArea(self.detail_dock) == Qt.DockWidgetArea.RightDockWidgetArea:
            self._compact = True
            self.tabifyDockWidget(self.input_dock, self.detail_dock)
            self.input_dock.raise_()
            self.resizeDocks([self.input_dock], [COMPACT_DOCK_WIDTH], Qt.Orientation.Horizontal)
        elif width >= WIDE_WIDTH and self._compact:
            self._compact = False
            self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.detail_dock)
            self.resizeDocks([self.detail_dock], [400], Qt.Orientation.Horizontal)

    def layout_usable(self) -> bool:
        """Every shown dock and the table/plots area at least their minimum width."""
        layout = self.layout()
        if layout is not None:
            layout.activate()
        shown = [d for d in (self.input_dock, self.detail_dock) if d.isVisible()]
        return (all(d.width() >= d.minimumWidth() for d in shown)
                and self.splitter.width() >= self.splitter.minimumWidth()
                and all(size > 0 for size in self.splitter.sizes()))

    def _dock(self, title: str, name: str, widget: QWidget, area) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _action(self, menu: QMenu, text: str, slot, shortcut=None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(shortcut)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _build_menus(self) -> None:
        keys = QKeySequence.StandardKey
        bar = self.menuBar()
        file = bar.addMenu(translate('MainWindow', '&File'))
        self._action(file, translate('MainWindow', '&New'), self.new_session, keys.New)
        self._action(file, translate('MainWindow', '&Open plan…'), self.open_dialog, keys.Open)
        self.recent_menu = file.addMenu(translate('MainWindow', 'Open &Recent'))
        self._action(file, translate('MainWindow', '&Save plan'), self.save, keys.Save)
        self._action(file, translate('MainWindow', 'Save plan &as…'), self.save_as_dialog,
                     keys.SaveAs)
        file.addSeparator()
        self._action(file, translate('MainWindow', 'Export table as &CSV…'),
                     self.export_table_dialog)
        self.launcher_action = self._action(
            file, translate('MainWindow', 'Export plan to a &launcher…'), self.show_export_dialog)
        self.launcher_action.setToolTip(translate(
            'MainWindow', 'torchrun, accelerate, DeepSpeed, Megatron, Slurm… for the selected '
            'plan'))
        file.setToolTipsVisible(True)
        self.calibrate_action = self._action(
            file, translate('MainWindow', '&Calibrate on this machine…'),
            self.show_calibration_dialog)
        self.calibrate_action.setToolTip(translate(
            'MainWindow', 'Measure matmul and step efficiency in a separate torch process'))
        plots = file.addMenu(translate('MainWindow', 'Export &plot'))
        names = {'memory': translate('MainWindow', 'Memory'),
                 'time_vs_gpus': translate('MainWindow', 'Time vs GPUs'),
                 'time_vs_batch': translate('MainWindow', 'Time vs global batch'),
                 'micro_batch': translate('MainWindow', 'Throughput and MFU vs micro-batch')}
        for key, label in names.items():
            self._action(plots, label + '…', lambda _=False, k=key: self.export_plot_dialog(k))
        file.addSeparator()
        self._action(file, translate('MainWindow', '&Quit'), self.close, keys.Quit)
        view = bar.addMenu(translate('MainWindow', '&View'))
        for dock in (self.input_dock, self.gpu_dock, self.detail_dock):
            view.addAction(dock.toggleViewAction())
        view.addSeparator()
        self.language_menu = view.addMenu(translate('MainWindow', '&Language'))
        group = QActionGroup(self)
        saved = saved_language()
        for code, label in language_choices():
            action = self.language_menu.addAction(label)
            action.setCheckable(True)
            action.setChecked(code == saved)
            action.setData(code)
            group.addAction(action)
            action.triggered.connect(lambda _=False, c=code: self.choose_language(c))
        help_menu = bar.addMenu(translate('MainWindow', '&Help'))
        self._action(help_menu, translate('MainWindow', 'How batchfit &estimates'),
                     self.show_how_it_works)
        self._action(help_menu, translate('MainWindow', '&About batchfit'), self.show_about)

    def choose_language(self, code: str) -> None:
        """Remember the language ('' follows the system); it applies from the next start."""
        set_saved_language(code)
        if resolve_language() != current_language():
            self.status.setText(translate(
                'MainWindow', 'The language changes when batchfit starts again.'))

    # ---- inputs and results ----------------------------------------------------------

    def current_inputs(self) -> PlanInputs | None:
        """The inputs on screen, or None when a field is bad (it is marked red)."""
        inputs, errors = self.inputs.read_inputs()
        self.inputs.show_errors(errors)
        return inputs

    @Slot()
    def _inputs_changed(self) -> None:
        self._touched = True
        inputs = self.current_inputs()
        self._update_title()
        if inputs is not None:
            self.controller.request(inputs)
        else:
            self.status.setText(translate('MainWindow',
                                          'Fix the field marked red to update the plan.'))

    @Slot(object)
    def _show_input_error(self, exc: InputError) -> None:
        self.inputs.show_input_error(exc)
        self.status.setText(str(exc))

    @Slot(str)
    def _show_failure(self, message: str) -> None:
        self.status.setText(translate('MainWindow', 'Recompute failed: {m}').format(m=message))

    @Slot(object)
    def _show_outcome(self, outcome: PlanOutcome) -> None:
        """A new plan: table, details and memory on one turn; the series plots the next.

        Each turn's repaint covers only what it changed, so the GUI thread never blocks
        for the whole update at once (the longest stall is about 30 ms on a 2-core VM).
        The first turn waits for what is already being painted (at start-up, the whole
        window), and the plan becomes ``self.outcome`` with the table that shows it.
        """
        # the row the table selects queues the plots' step (_show_candidate)
        self._stages.start([lambda: self._show_table(outcome)])

    def _show_table(self, outcome: PlanOutcome) -> None:
        self.outcome = outcome
        r = outcome.result
        self.inputs.show_errors({})
        summary = translate('MainWindow', '{fit:,} of {grid:,} layouts fit · searched in '
                                          '{t:.2f} s').format(fit=r.fitting, grid=r.grid_size,
                                                              t=outcome.elapsed_s)
        if outcome.calibration is not None:  # which profile the plan used, as the CLI says
            summary += ' · ' + translate('MainWindow', 'calibrated: {p}').format(
                p=outcome.calibration.loaded.describe())
        why = outcome.explanation.text if outcome.explanation is not None else r.message
        self.status.setText(summary if r.status == 'ok' else translate(
            'MainWindow', 'No plan: {m}').format(m=why))
        self.results.set_result(r, summary)
        choice, self._pending_choice = self._pending_choice, None
        if choice is not None and outcome.inputs == self._saved_inputs:
            index = matching_index(r, choice)  # the row the opened file chose
            row = None if index is None else self.results.model.row_of_index(index)
            if row is not None:
                self.results.select_row(row)
        if not r.fitting:
            self._show_no_plan(outcome)

    def _show_no_plan(self, outcome: PlanOutcome) -> None:
        """The empty state: why nothing fits, the changes that would, this GPU's lines."""
        r, req = outcome.result, outcome.request
        view = outcome.no_plan
        if view is None:
            from ui.no_plan_view import HEADLINES

            headline = translate('NoPlan', HEADLINES.get(r.status, HEADLINES['no_fit']))
            reason, suggestions = r.message, []
        else:
            headline, reason = view.headline, view.reason
            suggestions = [(s.text, s.changes) for s in view.suggestions]
        self.empty_state.show_explanation(headline, reason, suggestions)
        self.details.show_message(translate('MainWindow', 'No plan: {m}').format(m=reason))
        self.memory_plot.show_no_plan(req.gpu.memory_bytes, req.usable_bytes,
                                      r.min_total_bytes)

    @Slot(object)
    def apply_suggestion(self, changes: dict) -> None:
        """Put a suggested change on screen (the plan follows)."""
        inputs = self.current_inputs()
        if inputs is not None:
            self.inputs.set_inputs(inputs.with_changes(**changes))

    @Slot(bool)
    def _busy_changed(self, busy: bool) -> None:
        if busy:
            self._busy_delay.start()
        else:
            self._busy_delay.stop()
            self.busy.hide()

    @Slot()
    def _shown(self) -> None:
        if self.outcome is not None:
            self.shown_outcome = self.outcome
            self.plan_shown.emit(self.outcome)

    @Slot()
    def _painted(self) -> None:
        if self.outcome is None:
            return
        self.controller.shown()  # its batch sweep may start: it would slow the paint
        if not self._first_painted:
            self._first_painted = True
            log.info('%s %.2f s after the window was created', FIRST_PLAN_LOG,
                     time.perf_counter() - self._created_s)

    def _set_batch_sweep(self, outcome: PlanOutcome) -> None:
        if not outcome.by_batch.x.size and outcome.result.fitting:
            return  # the sweep follows (_show_sweep): no empty plot in between
        self.batch_plot.set_data(outcome.by_batch.x, outcome.by_batch.y / DAY)
        self.batch_plot.set_x_ticks(outcome.by_batch.x, lambda x: f'{x / 1e6:.3g}M')

    @Slot(object)
    def _show_sweep(self, outcome: PlanOutcome) -> None:
        """The global-batch sweep arrived after the table (same request)."""
        self.outcome = outcome
        self._set_batch_sweep(outcome)
        c = self.results.selected_candidate()
        if c is not None:
            self.batch_plot.set_highlight(c.global_batch * outcome.request.seq_len,
                                          c.time_to_train_s / DAY)

    @Slot(object)
    def _show_candidate(self, c: Candidate | None) -> None:
        """A row was selected: details and memory now, the other plots on a later turn."""
        self._show_candidate_details(c)
        self._stages.then([lambda: self._show_candidate_plots(c)])

    def _show_candidate_details(self, c: Candidate | None) -> None:
        o = self.outcome
        if c is None or o is None:
            self.memory_plot.set_memory(None)
            return
        try:
            guidance = guidance_for(o, c)
        except InputError as exc:
            self.inputs.show_input_error(exc)
            guidance = None
        self._guidance = guidance
        self.details.show_candidate(o.request, c, guidance)
        self.memory_plot.set_memory(c.memory)

    def _show_candidate_plots(self, c: Candidate | None) -> None:
        """The three series plots for the selected row (a plot left unchanged is not
        redrawn, so a new plan changes and repaints each once)."""
        o = self.outcome
        if o is not None:
            self.gpus_plot.set_data(o.by_gpus.x, o.by_gpus.y / DAY)
            self.gpus_plot.set_x_ticks(whole_ticks(o.by_gpus.x), lambda v: f'{v:.0f}')
        if c is None or o is None:
            self.gpus_plot.set_highlight(None, None)
            if o is not None:
                self._set_batch_sweep(o)
            self.batch_plot.set_highlight(None, None)
            self.micro_plot.set_sweep(None)
            return
        self.gpus_plot.set_highlight(c.gpus, c.time_to_train_s / DAY)
        self._set_batch_sweep(o)  # the sweep may have arrived meanwhile
        self.batch_plot.set_highlight(c.global_batch * o.request.seq_len,
                                      c.time_to_train_s / DAY)
        crit = None if self._guidance is None else self._guidance.critical_batch_tokens
        self.batch_plot.set_marker(crit, '' if crit is None else
                                   f'B_crit ≈ {crit / 1e6:.3g}M')
        self.micro_plot.set_sweep(micro_batch_sweep(o.request, c), c.micro_batch)

    @property
    def updating(self) -> bool:
        """Whether a recompute or its display is still in progress."""
        return self.controller.busy or self._stages.pending

    def finish_updates(self) -> None:
        """Draw every waiting step of the current plan now (screenshots, saving, tests)."""
        self._stages.flush()

    # ---- hardware --------------------------------------------------------------------

    @Slot(object)
    def _hardware_snapshot(self, inventory) -> None:
        first = not self.gpu_panel.property('seen')
        self.gpu_panel.setProperty('seen', True)
        self.gpu_panel.set_inventory(inventory)
        if first:
            self.inputs.set_local_gpus(inventory)
            if not self._touched and self.inputs.use_local_gpus():
                self._saved_inputs = self.current_inputs() or self._saved_inputs
                self._touched = False
                self._update_title()

    @Slot()
    def _use_catalog(self) -> None:
        self.input_dock.raise_()
        self.inputs.gpu_combo.setFocus()
        self.inputs.gpu_combo.showPopup()

    @Slot()
    def _use_local(self) -> None:
        self.inputs.use_local_gpus()
        self.input_dock.raise_()

    # ---- session files ---------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """The inputs differ from the last saved or opened ones."""
        current, _ = self.inputs.read_inputs()
        return current != self._saved_inputs

    def _update_title(self) -> None:
        name = Path(self.path).name if self.path else translate('MainWindow', 'worked example')
        self.setWindowTitle(f'{name}[*] — batchfit')
        self.setWindowModified(self.dirty)

    def _read_saved(self, path: str, fallback: PlanInputs) -> PlanInputs:
        try:
            return self.open_plan_file(path).inputs
        except InputError:
            return fallback

    @staticmethod
    def open_plan_file(path: str):
        """The plan file at ``path`` as the window's inputs (:class:`OpenedPlan`).

        Raises:
            InputError: unreadable, not a plan file, or a model the window cannot name.
        """
        from planner.planfile.document import read_plan

        return opened_plan(read_plan(path))

    def confirm_discard(self) -> bool:
        """True when there is nothing unsaved, or the user saved or chose to discard it."""
        if not self.dirty:
            return True
        answer = QMessageBox.question(
            self, translate('MainWindow', 'Unsaved changes'),
            translate('MainWindow', 'Save the changes to this plan first?'),
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
            | QMessageBox.StandardButton.Cancel, QMessageBox.StandardButton.Save)
        if answer == QMessageBox.StandardButton.Save:
            return self.save()
        return answer == QMessageBox.StandardButton.Discard

    def new_session(self) -> None:
        """Back to the worked example, after asking about unsaved changes."""
        if not self.confirm_discard():
            return
        self.path = None
        self.inputs.set_inputs(PlanInputs())
        self._saved_inputs = self.current_inputs() or PlanInputs()
        self._update_title()

    def open_dialog(self) -> None:
        """Ask for a plan file and open it."""
        if not self.confirm_discard():
            return
        path, _ = QFileDialog.getOpenFileName(self, translate('MainWindow', 'Open plan'), '',
                                              translate('MainWindow', PLAN_FILTER))
        if path:
            self.open_path(path, confirm=False)

    def open_path(self, path: str, confirm: bool = True) -> bool:
        """Open a plan file (``batchfit.plan``, from here or ``batchfit plan --save``).

        Its inputs go on screen; once the search is done, the row the file chose is
        selected again. False (with a message) when it cannot be read.
        """
        if confirm and not self.confirm_discard():
            return False
        try:
            opened = self.open_plan_file(path)
        except InputError as exc:
            QMessageBox.warning(self, translate('MainWindow', 'Cannot open'), str(exc))
            return False
        self.path = str(path)
        self._saved_inputs = opened.inputs
        self._pending_choice = opened.chosen
        self.inputs.set_inputs(opened.inputs)
        self._touched = True
        self._refresh_recent(app_settings.add_recent_file(self.path))
        self._update_title()
        if opened.notes:
            self.status.setText(' · '.join(opened.notes))
        current = self.current_inputs()
        if current is not None:
            self.controller.compute_now(current)
        return True

    def save(self) -> bool:
        """Save to the current file (ask for one when there is none)."""
        if self.path is None:
            return self.save_as_dialog()
        return self.save_to(self.path)

    def save_as_dialog(self) -> bool:
        """Ask for a file name and save."""
        path, _ = QFileDialog.getSaveFileName(self, translate('MainWindow', 'Save plan as'),
                                              'plan.json', translate('MainWindow', PLAN_FILTER))
        return bool(path) and self.save_to(with_json_suffix(path))

    def save_to(self, path: str) -> bool:
        """Save the selected plan and the inputs on screen to ``path`` as a plan file.

        The file is what ``batchfit plan --save`` writes (``batchfit export`` and
        ``batchfit show`` read it), written atomically. When the results on screen are
        not yet those of the inputs, the search runs here first.
        """
        from planner.planfile.document import write_plan
        from ui.plan_compute import compute_main

        title = translate('MainWindow', 'Cannot save')
        inputs = self.current_inputs()
        if inputs is None:
            QMessageBox.warning(self, title, translate('MainWindow',
                                                       'Fix the fields marked red first.'))
            return False
        try:
            outcome = self.outcome
            chosen = self.results.selected_candidate()
            if outcome is None or outcome.inputs != inputs:
                outcome = compute_main(inputs)
                chosen = None
            if outcome.best is None:
                raise InputError('plan', translate(
                    'MainWindow', 'no layout fits these inputs, so there is no plan to save '
                    '(the inputs are kept for the next start)'))
            write_plan(path, plan_for(outcome, chosen or outcome.best))
        except (InputError, OSError) as exc:
            QMessageBox.warning(self, title, str(exc))
            return False
        self.path = str(path)
        self._saved_inputs = inputs
        self._refresh_recent(app_settings.add_recent_file(self.path))
        self._update_title()
        self.status.setText(translate('MainWindow', 'Saved {path}').format(path=path))
        return True

    def _refresh_recent(self, files: list[str] | None = None) -> None:
        self.recent_menu.clear()
        for path in files if files is not None else app_settings.recent_files():
            action = self.recent_menu.addAction(path)
            action.triggered.connect(lambda _=False, p=path: self.open_path(p))
        self.recent_menu.setEnabled(not self.recent_menu.isEmpty())

    # ---- exports ---------------------------------------------------------------------

    def export_plot(self, key: str, path: str) -> None:
        """Write plot ``key`` to ``path`` (SVG when it ends in .svg, else PNG)."""
        view = self.plots[key]
        if str(path).lower().endswith('.svg'):
            export_svg(view, path, title=key)
        else:
            export_png(view, path)

    def export_plot_dialog(self, key: str) -> None:
        """Ask for a file and export plot ``key``."""
        path, _ = QFileDialog.getSaveFileName(self, translate('MainWindow', 'Export plot'),
                                              f'{key}.png', 'PNG (*.png);;SVG (*.svg)')
        if path:
            try:
                self.export_plot(key, path)
            except OSError as exc:
                QMessageBox.warning(self, translate('MainWindow', 'Cannot export'), str(exc))
                return
            self.status.setText(translate('MainWindow', 'Saved {path}').format(path=path))

    def export_table(self, path: str) -> None:
        """Write the visible table rows as CSV."""
        Path(path).write_text(self.results.to_csv(), encoding='utf-8')

    def export_table_dialog(self) -> None:
        """Ask for a file and export the table."""
        path, _ = QFileDialog.getSaveFileName(self, translate('MainWindow', 'Export table'),
                                              'plans.csv', 'CSV (*.csv)')
        if path:
            try:
                self.export_table(path)
            except OSError as exc:
                QMessageBox.warning(self, translate('MainWindow', 'Cannot export'), str(exc))
                return
            self.status.setText(translate('MainWindow', 'Exported {n:,} rows to {path}').format(
                n=self.results.model.rowCount(), path=path))

    def show_export_dialog(self):
        """The selected plan in every launcher format (None without a selected plan)."""
        c = self.results.selected_candidate()
        if c is None or self.outcome is None:
            return None
        from ui.widgets.export_dialog import ExportDialog

        dialog = ExportDialog(self.outcome, c, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def show_calibration_dialog(self):
        """The calibration dialog for the model on screen (None while a field is bad)."""
        inputs = self.current_inputs()
        if inputs is None:
            return None
        from ui.widgets.calibration_dialog import CalibrationDialog

        inv = self.hardware.latest
        uuids = tuple(g.uuid for g in inv.gpus if g.uuid) if inv is not None else ()
        dialog = CalibrationDialog(inputs.model, inputs.seq_len, uuids, self)
        dialog.profile_saved.connect(self._profile_saved)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    @Slot(str)
    def _profile_saved(self, path: str) -> None:
        """A calibration saved a GPU profile: plan again (``profile`` auto finds it)."""
        current = self.current_inputs()
        if current is not None:
            self.controller.compute_now(current)
        self.status.setText(translate('MainWindow', 'Plans now use the calibration {path}')
                            .format(path=path))

    # ---- help ------------------------------------------------------------------------

    def how_it_works_text(self) -> str:
        """The markdown of docs/memory-model.md and docs/time-model.md (or where to find it)."""
        parts = []
        for name in ('memory-model.md', 'time-model.md'):
            path = DOCS / name
            if path.is_file():
                parts.append(path.read_text(encoding='utf-8'))
        if not parts:
            return translate('MainWindow', '# How batchfit estimates\n\nThe documentation is at '
                       'https://github.com/batchfit/batchfit/tree/main/docs.')
        return '\n\n---\n\n'.join(parts)

    def show_how_it_works(self) -> None:
        """A browsable page of the memory and time models."""
        dialog = QDialog(self)
        dialog.setWindowTitle(translate('MainWindow', 'How batchfit estimates'))
        dialog.resize(900, 800)
        browser = QTextBrowser(dialog)
        browser.setOpenExternalLinks(True)
        browser.setMarkdown(self.how_it_works_text())
        QVBoxLayout(dialog).addWidget(browser)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()

    def show_about(self) -> None:
        """Version and a line about the app."""
        from planner import __version__

        QMessageBox.about(self, translate('MainWindow', 'About batchfit'), translate('MainWindow',
            '<b>batchfit {v}</b><br>Capacity planner for distributed LLM training: what fits, '
            'which layout reaches the batch fastest, what it costs.').format(v=__version__))

    # ---- drag and drop, closing ------------------------------------------------------

    def dragEnterEvent(self, event) -> None:  # noqa: N802
        urls = event.mimeData().urls() if event.mimeData().hasUrls() else []
        if urls and urls[0].toLocalFile().lower().endswith('.json'):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event) -> None:  # noqa: N802
        urls = event.mimeData().urls()
        if urls:
            self.drop_file(urls[0].toLocalFile())
            event.acceptProposedAction()

    def drop_file(self, path: str) -> None:
        """A dropped ``.json``: a batchfit plan opens; anything else is taken as a config.json."""
        try:
            doc = json.loads(Path(path).read_text(encoding='utf-8'))
        except (OSError, UnicodeDecodeError, ValueError):
            doc = None
        if isinstance(doc, dict) and str(doc.get('schema', '')).startswith('batchfit.'):
            self.open_path(path)  # a plan (or says in words why it is not one)
            return
        self.inputs.model_edit.setText(path)
        self.input_dock.raise_()

    def shutdown(self, remember: bool = True) -> None:
        """Stop the workers and (unless ``remember`` is False) save window and session."""
        self.controller.shutdown()
        self._stages.cancel()
        self._busy_delay.stop()
        self.hardware.stop()
        from ui.controllers.calibration_controller import CalibrationController

        for child in self.findChildren(CalibrationController):
            child.shutdown()
        if not remember:
            return
        s = app_settings.settings()
        s.setValue('window/geometry', self.saveGeometry())
        s.setValue('window/state', self.saveState())
        inputs, _ = self.inputs.read_inputs()
        if inputs is not None:
            app_settings.save_last_session(inputs, self.path)
        s.sync()

    def closeEvent(self, event) -> None:  # noqa: N802
        if not self.confirm_discard():
            event.ignore()
            return
        self.shutdown()
        event.accept()

