"""The candidate table with its filter bar (text, minimum headroom, Pareto front only)."""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ui.i18n import translate
from ui.models.candidate_table import CANDIDATE_ROLE, CandidateFilterProxy, CandidateTableModel


class ResultsView(QWidget):
    """A sortable, filterable table of candidates; emits :attr:`candidate_selected`."""

    candidate_selected = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = CandidateTableModel(self)
        self.proxy = CandidateFilterProxy(self)
        self.proxy.setSourceModel(self.model)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText(
            translate('ResultsView', 'filter (e.g. "selective", "2/1/1")'))
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self.proxy.setFilterFixedString)
        bar.addWidget(self.filter_edit, 2)
        bar.addWidget(QLabel(translate('ResultsView', 'min headroom')))
        self.headroom_spin = QDoubleSpinBox()
        self.headroom_spin.setRange(0.0, 1000.0)
        self.headroom_spin.setSuffix(' GiB')
        self.headroom_spin.setToolTip(
            translate('ResultsView', 'Hide plans with less usable memory left at the peak'))
        self.headroom_spin.valueChanged.connect(self.proxy.set_min_headroom_gib)
        bar.addWidget(self.headroom_spin)
        self.pareto_check = QCheckBox(translate('ResultsView', 'Pareto front only'))
        self.pareto_check.setToolTip(translate(
            'ResultsView', 'Only plans no other beats on both time-to-train and GPU-hours'))
        self.pareto_check.toggled.connect(self.proxy.set_pareto_only)
        bar.addWidget(self.pareto_check)
        self.summary = QLabel()
        self.summary.setObjectName('results_summary')
        bar.addWidget(self.summary, 3)
        layout.addLayout(bar)
        self.table = QTableView()
        self.table.setObjectName('candidate_table')
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        # Column widths from the rows on screen (and the header): sizing from all 100 rows
        # asks each cell's roles and took 70-80 ms of the first plan; the rows below are
        # formatted alike, and the columns stay resizable.
        header.setResizeContentsPrecision(0)
        self._sized = False
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        layout.addWidget(self.table)

    def set_candidates(self, candidates, summary: str = '') -> None:
        """Replace the rows and select the best visible one."""
        self.model.set_candidates(candidates)
        self.summary.setText(summary)
        if not self._sized and candidates:  # once: ResizeToContents on every reset is slow
            self.table.resizeColumnsToContents()
            self._sized = True
        if self.proxy.rowCount():
            self.select_row(0)
        else:
            self.candidate_selected.emit(None)

    def select_row(self, row: int) -> None:
        """Select proxy ``row`` (as a click would)."""
        index = self.proxy.index(row, 0)
        self.table.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows)

    def selected_candidate(self):
        """The candidate of the current row, or None."""
        index = self.table.selectionModel().currentIndex()
        return index.data(CANDIDATE_ROLE) if index.isValid() else None

    def _row_changed(self, current, _previous) -> None:
        self.candidate_selected.emit(current.data(CANDIDATE_ROLE) if current.isValid() else None)

    def to_csv(self) -> str:
        """The visible rows, in the shown order, as CSV."""
        return self.model.to_csv(self.proxy.visible_source_rows())


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    from ui.plan_compute import compute_plan
    from ui.plan_inputs import PlanInputs

    app = QApplication([])
    w = ResultsView()
    w.set_candidates(compute_plan(PlanInputs()).candidates)
    w.resize(1000, 500)
    w.show()
    app.exec()
