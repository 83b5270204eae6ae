"""The candidates of a search as a Qt table model, with a filter proxy and CSV export.

:class:`CandidateTableModel` shows :class:`planner.plan_result.Candidate` records, one
per row, columns with their units; ``Qt.UserRole`` gives the raw number so the proxy
sorts numerically. :class:`CandidateFilterProxy` filters on free text, on a minimum
memory headroom and on the Pareto front.
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
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QBrush, QColor

from ui.core_terms import core_text
from ui.i18n import translate

if TYPE_CHECKING:
    from planner.plan_result import Candidate

GIB = 2**30
DAY = 86_400.0
RAW_ROLE = Qt.ItemDataRole.UserRole
CANDIDATE_ROLE = Qt.ItemDataRole.UserRole + 1



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


class CandidateTableModel(QAbstractTableModel):
    """Candidates, one per row."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._rows: list[Candidate] = []

    def set_candidates(self, candidates: Sequence[Candidate]) -> None:
        """Replace every row."""
        self.beginResetModel()
        self._rows = list(candidates)
        self.endResetModel()

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
        c = self._rows[index.row()]
        col = COLUMNS[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return col.text(col.value(c))
        if role == RAW_ROLE:
            value = col.value(c)
            return value if not isinstance(value, float) or math.isfinite(value) else math.inf
        if role == CANDIDATE_ROLE:
            return c
        if role == Qt.ItemDataRole.TextAlignmentRole and col.key not in ('layout', 'recompute'):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole and col.key == 'headroom':
            return QBrush(headroom_colour(c.memory.headroom_bytes, c.memory.usable_bytes))
        if role == Qt.ItemDataRole.ToolTipRole:
            return translate('CandidateTableModel', col.tooltip)
        return None

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
    """Sorts on raw numbers; filters on text, minimum headroom and the Pareto front."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setSortRole(RAW_ROLE)
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
