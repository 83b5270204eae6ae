"""The candidates of a search as a Qt table model, with a filter proxy and CSV export.

:class:`CandidateTableModel` shows :class:`planner.plans.result.Candidate` records, one
per row, columns with their units; ``Qt.UserRole`` gives the raw number. The model sorts
itself on those numbers (one Python sort of its rows), and keeps the order through new
results: a sorting proxy would ask ``data()`` about 800 times per new table, each a call
from C++ into Python. :class:`CandidateFilterProxy` filters on free text, on a minimum
memory headroom and on the Pareto front, and hands sorting to the model.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import (
    QT_TRANSLATE_NOOP,
    QAbstractTableModel,
    QModelIndex,
    QModelRoleDataSpan,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QBrush, QColor

from ui.core_terms import core_text
from ui.i18n import translate

if TYPE_CHECKING:
    from planner.plans.result import Candidate

GIB = 2**30
DAY = 86_400.0
RAW_ROLE = Qt.ItemDataRole.UserRole
CANDIDATE_ROLE = Qt.ItemDataRole.UserRole + 1
# plain ints: data() compares roles tens of times per repaint
_DISPLAY = int(Qt.ItemDataRole.DisplayRole)
_ALIGN = int(Qt.ItemDataRole.TextAlignmentRole)
_FOREGROUND = int(Qt.ItemDataRole.ForegroundRole)
_TOOLTIP = int(Qt.ItemDataRole.ToolTipRole)
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_LEFT_ALIGNED = frozenset({'layout', 'recompute', 'stack'})



def si(value: float, unit: str = '') -> str:
    """1234567 -> '1.23M'."""
    if value is None or not math.isfinite(value):
        return '–'
    for factor, suffix in ((1e12, 'T'), (1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
        if abs(value) >= factor:
            return f'{value / factor:.3g}{suffix}{unit}'
    return f'{value:.3g}{unit}'


@dataclass(frozen=True)
class Column:
    """One table column: header (with unit), tooltip, raw value and its displayed text.

    ``header`` and ``tooltip`` are English source texts (translated when shown); ``text``
    renders a raw value for the table in the UI language.
    """

    key: str
    header: str
    tooltip: str
    value: Callable[[Candidate], Any]
    text: Callable[[Any], str]


# Headers and tooltips are marked for translation and translated in headerData/data;
# to_csv keeps the English headers (a CSV is data for other tools, not a display).
COLUMNS: tuple[Column, ...] = (
    Column('rank', '#', QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Rank by time-to-train (near-ties go to the simpler layout)'),
        lambda c: c.rank, str),
    Column('gpus', QT_TRANSLATE_NOOP('CandidateTableModel', 'GPUs'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'GPUs used = TP × PP × CP × DP'),
           lambda c: c.gpus, str),
    Column('nodes', QT_TRANSLATE_NOOP('CandidateTableModel', 'nodes'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'Nodes used (the fewest that hold the GPUs)'),
           lambda c: c.nodes, str),
    Column('layout', 'TP/PP/CP/DP', QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Tensor / pipeline (× virtual stages) / context / data parallel '
        'sizes'), lambda c: c.layout, str),
    Column('micro', QT_TRANSLATE_NOOP('CandidateTableModel', 'micro×accum'), QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Micro-batch × gradient accumulation; global batch = micro × '
        'accum × DP'), lambda c: c.micro_batch * 10_000 + c.grad_accum,
           lambda v: f'{v // 10_000}×{v % 10_000}'),
    Column('zero', 'ZeRO', QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'ZeRO stage: 0 plain DP, 1 optimizer states, 2 + gradients, '
        '3 + weights sharded'), lambda c: c.zero, str),
    Column('recompute', QT_TRANSLATE_NOOP('CandidateTableModel', 'recompute'), QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Activation recompute: none, selective (attention), full (whole '
        'layers)'), lambda c: c.recompute, core_text),
    Column('memory', QT_TRANSLATE_NOOP('CandidateTableModel', 'memory (GiB)'), QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Per-GPU peak incl. CUDA context and allocator reserve '
        '(≈ nvidia-smi)'), lambda c: c.memory.total_bytes / GIB, lambda v: f'{v:.1f}'),
    Column('headroom', QT_TRANSLATE_NOOP('CandidateTableModel', 'headroom (GiB)'),
           QT_TRANSLATE_NOOP('CandidateTableModel',
                             'Usable memory (capacity less the margin) left at the peak'),
           lambda c: c.memory.headroom_bytes / GIB, lambda v: f'{v:.1f}'),
    Column('step', QT_TRANSLATE_NOOP('CandidateTableModel', 'step (s)'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'Time of one optimizer step'),
           lambda c: c.step_time_s, lambda v: f'{v:.3g}'),
    Column('tokens', 'tokens/s',
           QT_TRANSLATE_NOOP('CandidateTableModel', 'Training throughput of the whole job'),
           lambda c: c.tokens_per_s, si),
    Column('mfu', 'MFU (%)', QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Model FLOPs utilisation: model FLOPs per second ÷ peak'),
        lambda c: 100 * c.mfu, lambda v: f'{v:.1f}'),
    Column('days', QT_TRANSLATE_NOOP('CandidateTableModel', 'time (days)'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'Time-to-train = steps × step time'),
           lambda c: c.time_to_train_s / DAY, lambda v: '–' if not math.isfinite(v)
           else f'{v:.1f}'),
    Column('gpu_hours', QT_TRANSLATE_NOOP('CandidateTableModel', 'GPU-hours'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'GPUs × time-to-train'),
           lambda c: c.gpu_hours, si),
    Column('cost', QT_TRANSLATE_NOOP('CandidateTableModel', 'cost (USD)'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'GPU-hours × price per GPU-hour'),
           lambda c: c.cost_usd, si),
    # the raw 'yes' is what the CSV holds; the table shows it translated
    Column('pareto', QT_TRANSLATE_NOOP('CandidateTableModel', 'Pareto'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'On the time-to-train vs GPU-hours front'),
           lambda c: 'yes' if c.on_pareto else '',
           lambda v: translate('CandidateTableModel', 'yes') if v else ''),
    Column('stack', QT_TRANSLATE_NOOP('CandidateTableModel', 'stack'), QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'The software that runs the plan (its precision, recompute and '
        'launchers)'), lambda c: c.framework, str),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)

_GOOD = QColor('#2e7d32')
_TIGHT = QColor('#ef6c00')
_BAD = QColor('#c62828')


def headroom_colour(headroom_bytes: float, usable_bytes: float) -> QColor:
    """Green with room to spare, orange under 10 % of usable memory, red when negative."""
    if headroom_bytes < 0:
        return _BAD
    if headroom_bytes < 0.1 * usable_bytes:
        return _TIGHT
    return _GOOD


def _raw(col: Column, c: Candidate) -> Any:
    """The column's number for sorting (NaN sorts last, as infinity)."""
    value = col.value(c)
    return value if not isinstance(value, float) or math.isfinite(value) else math.inf


class CandidateTableModel(QAbstractTableModel):
    """Candidates, one per row, kept in the order of the last :meth:`sort`."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._rows: list[Candidate] = []
        self._texts: dict[int, list[str]] = {}  # shown text of a row, made when first asked
        self._sort: tuple[int, Qt.SortOrder] | None = None

    def set_candidates(self, candidates: Sequence[Candidate]) -> None:
        """Replace every row (in the current sort order)."""
        self.beginResetModel()
        self._rows = self._sorted(list(candidates))
        self._texts = {}
        self.endResetModel()

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Order the rows by ``column``'s raw numbers (stable: ties keep their rank order).

        Column -1 (no sort) goes back to the rank order the search gave.
        """
        if column >= len(COLUMNS):
            return
        self._sort = (column, order) if column >= 0 else None
        self.layoutAboutToBeChanged.emit()
        before = self.persistentIndexList()
        old = self._rows
        self._rows = self._sorted(sorted(old, key=lambda c: c.rank))
        row_of = {id(c): i for i, c in enumerate(self._rows)}
        self.changePersistentIndexList(before, [
            self.index(row_of[id(old[i.row()])], i.column()) for i in before])
        self._texts = {}
        self.layoutChanged.emit()

    def _sorted(self, rows: list[Candidate]) -> list[Candidate]:
        if self._sort is None:
            return rows
        column, order = self._sort
        col = COLUMNS[column]
        return sorted(rows, key=lambda c: _raw(col, c),
                      reverse=order == Qt.SortOrder.DescendingOrder)

    def candidate(self, row: int) -> Candidate:
        """The candidate at source ``row``."""
        return self._rows[row]

    def candidates(self) -> list[Candidate]:
        """Every row, in source order."""
        return list(self._rows)

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(COLUMNS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return translate('CandidateTableModel', COLUMNS[section].header)
        if role == Qt.ItemDataRole.ToolTipRole:
            return translate('CandidateTableModel', COLUMNS[section].tooltip)
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex,
             role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row = index.row()
        if role == _DISPLAY:
            texts = self._texts.get(row)
            if texts is None:
                c = self._rows[row]
                texts = self._texts[row] = [col.text(col.value(c)) for col in COLUMNS]
            return texts[index.column()]
        col = COLUMNS[index.column()]
        if role == _ALIGN:
            return None if col.key in _LEFT_ALIGNED else _RIGHT
        if role == _FOREGROUND:
            if col.key != 'headroom':
                return None
            m = self._rows[row].memory
            return QBrush(headroom_colour(m.headroom_bytes, m.usable_bytes))
        if role == RAW_ROLE:
            return _raw(col, self._rows[row])
        if role == CANDIDATE_ROLE:
            return self._rows[row]
        if role == _TOOLTIP:
            return translate('CandidateTableModel', col.tooltip)
        return None

    def multiData(self, index: QModelIndex | QPersistentModelIndex,  # noqa: N802
                  roles: QModelRoleDataSpan) -> None:
        """Every role a delegate asks of a cell, in one call (Qt 6's batched ``data``).

        Painting a cell asks seven roles; one call from C++ into Python instead of seven
        halves the table's repaint.
        """
        for item in roles:
            value = self.data(index, item.role())
            if value is None:
                item.clearData()
            else:
                item.setData(value)

    def to_csv(self, rows: Sequence[int] | None = None) -> str:
        """The table as CSV: a header with units, then full-precision numbers."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator='\n')
        writer.writerow([c.header for c in COLUMNS])
        for r in (range(len(self._rows)) if rows is None else rows):
            cand = self._rows[r]
            cells = []
            for col in COLUMNS:
                value = col.value(cand)
                if col.key == 'micro':
                    value = col.text(value)
                cells.append(value)
            writer.writerow(cells)
        return out.getvalue()


class CandidateFilterProxy(QSortFilterProxyModel):
    """Filters on text, minimum headroom and the Pareto front; the model sorts itself."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setFilterKeyColumn(-1)
        self._min_headroom_gib = 0.0
        self._pareto_only = False

    def set_min_headroom_gib(self, value: float) -> None:
        """Hide candidates with less memory headroom than ``value`` GiB."""
        self.beginFilterChange()
        self._min_headroom_gib = value
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def set_pareto_only(self, on: bool) -> None:
        """Show only the time-to-train vs GPU-hours front."""
        self.beginFilterChange()
        self._pareto_only = on
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort the model underneath; this proxy keeps its order (it only filters)."""
        self.sourceModel().sort(column, order)

    def filterAcceptsRow(self, source_row: int,  # noqa: N802
                         source_parent: QModelIndex | QPersistentModelIndex) -> bool:
        model = self.sourceModel()
        c = model.candidate(source_row)
        if c.memory.headroom_bytes / GIB < self._min_headroom_gib:
            return False
        if self._pareto_only and not c.on_pareto:
            return False
        return super().filterAcceptsRow(source_row, source_parent)

    def visible_source_rows(self) -> list[int]:
        """Source rows in the current sort and filter order."""
        return [self.mapToSource(self.index(r, 0)).row() for r in range(self.rowCount())]
