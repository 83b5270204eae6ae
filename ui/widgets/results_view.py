"""The candidate table with its bar: ranking key, text, minimum headroom, Pareto front,
one row per near-duplicate group, and a count of what the filters hide."""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ui.i18n import translate
from ui.models.candidate_table import CANDIDATE_ROLE, RANK_KEYS, CandidateTableModel


class ResultsView(QWidget):
    """Every fitting candidate, sortable and filterable; emits :attr:`candidate_selected`.

    When nothing fits, the table's place shows :attr:`empty` (set by the window).
    """

    candidate_selected = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = CandidateTableModel(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        bar.addWidget(QLabel(translate('ResultsView', 'rank by')))
        self.rank_combo = QComboBox()
        for key, label in RANK_KEYS.items():
            self.rank_combo.addItem(translate('CandidateTableModel', label), key)
        self.rank_combo.setToolTip(translate(
            'ResultsView', 'The order of the # column, as the command line\'s --sort'))
        self.rank_combo.currentIndexChanged.connect(self._rank_changed)
        bar.addWidget(self.rank_combo)
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText(
            translate('ResultsView', 'filter (e.g. "selective", "2/1/1")'))
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(
            lambda text: self._filtered(self.model.set_text_filter, text))
        self.filter_edit.setMinimumWidth(140)
        bar.addWidget(self.filter_edit, 1)
        layout.addLayout(bar)
        bar = QHBoxLayout()  # a second row: the bar fits from 1024 px wide up
        bar.addWidget(QLabel(translate('ResultsView', 'min headroom')))
        self.headroom_spin = QDoubleSpinBox()
        self.headroom_spin.setRange(0.0, 1000.0)
        self.headroom_spin.setSuffix(' GiB')
        self.headroom_spin.setToolTip(
            translate('ResultsView', 'Hide plans with less usable memory left at the peak'))
        self.headroom_spin.valueChanged.connect(
            lambda v: self._filtered(self.model.set_min_headroom_gib, v))
        bar.addWidget(self.headroom_spin)
        self.pareto_check = QCheckBox(translate('ResultsView', 'Pareto front only'))
        self.pareto_check.setToolTip(translate(
            'ResultsView', 'Only plans no other beats on both time-to-train and GPU-hours'))
        self.pareto_check.toggled.connect(
            lambda on: self._filtered(self.model.set_pareto_only, on))
        bar.addWidget(self.pareto_check)
        self.distinct_check = QCheckBox(translate('ResultsView', 'hide near-duplicates'))
        self.distinct_check.setChecked(True)
        self.distinct_check.setToolTip(translate(
            'ResultsView', 'One row per group of plans with the same GPUs, TP, PP, ZeRO stage '
            'and recompute whose step times are within 0.1 % (they only trade CP against '
            'micro-batch, or DP against accumulation); the # column keeps the full ranking, '
            'so hidden ranks are skipped'))
        self.distinct_check.toggled.connect(
            lambda on: self._filtered(self.model.set_distinct_only, on))
        bar.addWidget(self.distinct_check)
        bar.addStretch(1)
        layout.addLayout(bar)
        self.summary = QLabel()
        self.summary.setObjectName('results_summary')
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)
        self.stack = QStackedWidget()
        self.table = QTableView()
        self.table.setObjectName('candidate_table')
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.horizontalHeader().setSortIndicator(0, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        # No stretched last column: on a wide screen the space is left blank to the right
        # (as in a spreadsheet) rather than widening one column far past its contents.
        header.setStretchLastSection(False)
        # Column widths from the rows on screen (and the header); the rows below are
        # formatted alike, and the columns stay resizable.
        header.setResizeContentsPrecision(0)
        self._sized = False
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self.stack.addWidget(self.table)
        self.empty: QWidget | None = None
        self.table.setMinimumHeight(90)
        layout.addWidget(self.stack, 1)
        self._base_summary = ''

    def set_empty_widget(self, widget: QWidget) -> None:
        """The widget shown in the table's place when nothing fits."""
        self.empty = widget
        self.stack.addWidget(widget)

    def set_result(self, result, summary: str = '') -> None:
        """Show every fitting candidate of ``result`` and select the best visible one."""
        self.model.set_result(result)
        self._base_summary = summary
        if self.empty is not None:
            self.stack.setCurrentWidget(self.table if self.model.total else self.empty)
        if not self._sized and self.model.rowCount():  # once: resizing every reset is slow
            self.table.resizeColumnsToContents()
            self._sized = True
        self._update_summary()
        self._select_first()

    def _select_first(self) -> None:
        if self.model.rowCount():
            self.select_row(0)
        else:
            self.candidate_selected.emit(None)

    def _filtered(self, setter, value) -> None:
        """Apply a filter on the full set; keep the selected plan when it stays visible."""
        current = self.table.selectionModel().currentIndex()
        kept = None
        if current.isValid():
            kept = int(self.model.visible_indices()[current.row()])
        setter(value)
        self._update_summary()
        row = None if kept is None else self.model.row_of_index(kept)
        if row is None:
            self._select_first()
        else:
            self.select_row(row)

    def _rank_changed(self, _index: int) -> None:
        key = self.rank_combo.currentData()
        self._filtered(self.model.set_rank_key, key)

    def sort_by_rank(self, key: str) -> None:
        """Rank by ``key`` (``time``, ``cost``, ``gpus``, ``headroom``), rank order shown."""
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.rank_combo.setCurrentIndex(self.rank_combo.findData(key))

    def _update_summary(self) -> None:
        m = self.model
        parts = [self._base_summary] if self._base_summary else []
        if m.total:
            parts.append(translate('ResultsView', 'showing {n:,} of {total:,}').format(
                n=m.rowCount(), total=m.total))
            if m.hidden.near_duplicates:
                parts.append(translate('ResultsView', '{n:,} near-duplicates hidden').format(
                    n=m.hidden.near_duplicates))
            if m.hidden.filtered:
                parts.append(translate('ResultsView', '{n:,} hidden by the filters').format(
                    n=m.hidden.filtered))
        self.summary.setText(' · '.join(parts))

    def select_row(self, row: int) -> None:
        """Select visible ``row`` (as a click would)."""
        index = self.model.index(row, 0)
        self.table.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows)
        self.table.scrollTo(index)

    def selected_candidate(self):
        """The candidate of the current row, or None."""
        index = self.table.selectionModel().currentIndex()
        return index.data(CANDIDATE_ROLE) if index.isValid() else None

    def _row_changed(self, current, _previous) -> None:
        self.candidate_selected.emit(current.data(CANDIDATE_ROLE) if current.isValid() else None)

    def to_csv(self) -> str:
        """The visible rows, in the shown order, as CSV."""
        return self.model.to_csv()


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    from ui.plan_compute import compute_plan
    from ui.plan_inputs import PlanInputs

    app = QApplication([])
    w = ResultsView()
    w.set_result(compute_plan(PlanInputs()).result)
    w.resize(1000, 500)
    w.show()
    app.exec()
