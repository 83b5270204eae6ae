"""Every fitting candidate of a search as a Qt table model, filtered and sorted in numpy.

:class:`CandidateTableModel` is a view over a whole :class:`planner.plans.result.SearchResult`
(thousands to millions of rows): each column is a numpy array over every fitting candidate
(:class:`CandidateArrays`), the visible rows are one index array, and a row's text is made
only when Qt paints it. Ranking (``time``, ``cost``, ``gpus``, ``headroom``: the CLI's
``--sort``, :func:`planner.plans.search.ranking_by`), header sorting and the filters (free
text, minimum headroom, Pareto front, one row per near-duplicate group) each run on the
full set as array operations; nothing is cut to the first hundred rows.

The columns are data (:data:`COLUMNS`): a :class:`Column` reads its numbers from the
arrays and formats one cell, so a new column is one entry. ``Qt.UserRole`` gives a cell's
raw number, ``CANDIDATE_ROLE`` the row's :class:`~planner.plans.result.Candidate`
(estimated on demand, with its named memory parts).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QModelRoleData,
    QModelRoleDataSpan,
    QPersistentModelIndex,
    Qt,
)
from PySide6.QtGui import QBrush, QColor

from ui.core_terms import core_text
from ui.i18n import QT_TRANSLATE_NOOP, translate

if TYPE_CHECKING:
    from planner.plans.result import Candidate, SearchResult

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
_LEFT = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
# The ranking keys offered, as the CLI's --sort (planner.plans.request.SORT_KEYS).
RANK_KEYS: dict[str, str] = {
    'time': QT_TRANSLATE_NOOP('CandidateTableModel', 'time-to-train'),
    'cost': QT_TRANSLATE_NOOP('CandidateTableModel', 'cost (GPU-hours)'),
    'gpus': QT_TRANSLATE_NOOP('CandidateTableModel', 'fewest GPUs'),
    'headroom': QT_TRANSLATE_NOOP('CandidateTableModel', 'most memory headroom'),
}
_CANDIDATE_CACHE = 64  # Candidate records kept (a selection estimates one)


def si(value: float, unit: str = '') -> str:
    """1234567 -> '1.23M'."""
    if value is None or not math.isfinite(value):
        return '–'
    for factor, suffix in ((1e12, 'T'), (1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
        if abs(value) >= factor:
            return f'{value / factor:.3g}{suffix}{unit}'
    return f'{value:.3g}{unit}'


def _fixed(digits: int) -> Callable[[Any], str]:
    return lambda v: '–' if not math.isfinite(v) else f'{v:.{digits}f}'


class CandidateArrays:
    """The fitting candidates of a result as flat arrays, one entry per candidate.

    Arrays are broadcast from the search's (some are 0-d when equal for every
    candidate) and made on first use.
    """

    def __init__(self, result: SearchResult) -> None:
        self.result = result
        self.size = int(result.fitting) if result.layout is not None else 0

    def _flat(self, array) -> np.ndarray:
        return np.broadcast_to(np.asarray(array), (self.size,))

    def layout(self, name: str) -> np.ndarray:
        """A :class:`~planner.timing.step_time.LayoutArrays` field."""
        return self._flat(getattr(self.result.layout, name))

    def step(self, name: str) -> np.ndarray:
        """A :class:`~planner.timing.step_time.StepTimeArrays` field."""
        return self._flat(getattr(self.result.step, name)).astype(float)

    def train(self, name: str) -> np.ndarray:
        """A :class:`~planner.timing.step_time.TrainingTimeArrays` field."""
        return self._flat(getattr(self.result.train, name)).astype(float)

    @cached_property
    def total_bytes(self) -> np.ndarray:
        """Per-GPU peak of each candidate."""
        memory = self.result.memory
        assert memory is not None  # a fitting result keeps its memory rows
        rows = np.asarray(self.result.memory_rows)
        total = np.asarray(memory.total_bytes, float)
        return (np.broadcast_to(total, (rows.max() + 1,))[rows] if total.ndim
                else np.full(self.size, float(total)))

    @cached_property
    def headroom_bytes(self) -> np.ndarray:
        """Usable memory (capacity less the margin) left at each candidate's peak."""
        return self.result.request.usable_bytes - self.total_bytes

    @cached_property
    def on_pareto(self) -> np.ndarray:
        """Whether each candidate is on the time-to-train vs GPU-hours front."""
        mask = np.zeros(self.size, bool)
        mask[np.asarray(self.result.pareto, np.intp)] = True
        return mask

    @cached_property
    def search_rank(self) -> np.ndarray:
        """Each candidate's 1-based rank in the search's own ranking."""
        rank = np.empty(self.size, np.int64)
        rank[np.asarray(self.result.ranking, np.intp)] = np.arange(1, self.size + 1)
        return rank

    def candidate(self, index: int) -> Candidate:
        """The candidate at array ``index`` as a plain record (its rank: the search's)."""
        return self.result.candidate(int(index), int(self.search_rank[index]))


@dataclass(frozen=True)
class Column:
    """One table column.

    ``header`` and ``tooltip`` are English source texts (translated when shown).
    ``values(arrays, rank)`` gives the column's sort key for every candidate;
    ``cell(arrays, rank, i)`` the raw value of candidate ``i`` (the CSV's and
    ``Qt.UserRole``'s; default: the sort key); ``text`` renders a raw value in the UI
    language. ``searchable`` columns are matched by the free-text filter.
    """

    key: str
    header: str
    tooltip: str
    values: Callable[[CandidateArrays, np.ndarray], np.ndarray]
    text: Callable[[Any], str] = str
    cell: Callable[[CandidateArrays, np.ndarray, int], Any] | None = None
    searchable: bool = False
    align_left: bool = False

    def raw(self, arrays: CandidateArrays, rank: np.ndarray, i: int,
            values: np.ndarray | None = None) -> Any:
        """Candidate ``i``'s raw value (Python scalar)."""
        if self.cell is not None:
            return self.cell(arrays, rank, i)
        v = (self.values(arrays, rank) if values is None else values)[i]
        return v.item() if hasattr(v, 'item') else v


def _stack_of(a: CandidateArrays, i: int) -> str:
    """The stack (``planner.stacks`` key) that runs candidate ``i``: its plan mode's."""
    return a.result.request.plan_modes()[int(a.layout('mode')[i])].stack


def _layout_key(a: CandidateArrays, _rank) -> np.ndarray:
    key = np.zeros(a.size, np.int64)
    for name in ('tp', 'pp', 'vpp', 'cp', 'dp'):
        key = key * 65_536 + a.layout(name).astype(np.int64)
    return key


def _layout_text(a: CandidateArrays, _rank, i: int) -> str:
    tp, pp, vpp, cp, dp = (int(a.layout(n)[i]) for n in ('tp', 'pp', 'vpp', 'cp', 'dp'))
    pp_text = f'{pp}x{vpp}' if vpp > 1 else f'{pp}'
    return f'{tp}/{pp_text}/{cp}/{dp}'


def _recompute_text(a: CandidateArrays, _rank, i: int) -> str:
    from planner.timing.step_time import RECOMPUTE_MODES

    return RECOMPUTE_MODES[int(a.layout('recompute')[i])]


# Headers and tooltips are marked for translation and translated in headerData/data;
# to_csv keeps the English headers (a CSV is data for other tools, not a display).
COLUMNS: tuple[Column, ...] = (
    Column('rank', '#', QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Rank by the chosen order (near-ties go to the simpler layout). '
        'With one row per near-duplicate group, the ranks of the hidden near-duplicates are '
        'skipped (1, 3, 5…)'), lambda a, rank: rank),
    Column('gpus', QT_TRANSLATE_NOOP('CandidateTableModel', 'GPUs'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'GPUs used = TP × PP × CP × DP'),
           lambda a, _r: a.step('gpus').astype(np.int64), searchable=True),
    Column('nodes', QT_TRANSLATE_NOOP('CandidateTableModel', 'nodes'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'Nodes used (the fewest that hold the GPUs)'),
           lambda a, _r: a.layout('nodes').astype(np.int64)),
    Column('layout', 'TP/PP/CP/DP', QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Tensor / pipeline (× virtual stages) / context / data parallel '
        'sizes'), _layout_key, cell=_layout_text, searchable=True, align_left=True),
    Column('micro', QT_TRANSLATE_NOOP('CandidateTableModel', 'micro×accum'), QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Micro-batch × gradient accumulation; global batch = micro × '
        'accum × DP'),
        lambda a, _r: a.layout('micro_batch').astype(np.int64) * 100_000
        + a.layout('grad_accum').astype(np.int64),
        cell=lambda a, _r, i: f'{int(a.layout("micro_batch")[i])}×'
                              f'{int(a.layout("grad_accum")[i])}', searchable=True),
    Column('zero', 'ZeRO', QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'ZeRO stage: 0 plain DP, 1 optimizer states, 2 + gradients, '
        '3 + weights sharded'), lambda a, _r: a.layout('zero').astype(np.int64)),
    Column('recompute', QT_TRANSLATE_NOOP('CandidateTableModel', 'recompute'), QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Activation recompute: none, selective (attention), full (whole '
        'layers), half (every other layer)'),
        lambda a, _r: a.layout('recompute').astype(np.int64), text=core_text,
        cell=_recompute_text, searchable=True, align_left=True),
    Column('memory', QT_TRANSLATE_NOOP('CandidateTableModel', 'memory (GiB)'), QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Per-GPU peak incl. CUDA context and allocator reserve '
        '(≈ nvidia-smi)'), lambda a, _r: a.total_bytes / GIB, text=_fixed(1)),
    Column('headroom', QT_TRANSLATE_NOOP('CandidateTableModel', 'headroom (GiB)'),
           QT_TRANSLATE_NOOP('CandidateTableModel',
                             'Usable memory (capacity less the margin) left at the peak'),
           lambda a, _r: a.headroom_bytes / GIB, text=_fixed(1)),
    Column('step', QT_TRANSLATE_NOOP('CandidateTableModel', 'step (s)'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'Time of one optimizer step'),
           lambda a, _r: a.step('step_time_s'), text=lambda v: f'{v:.3g}'),
    Column('tokens', 'tokens/s',
           QT_TRANSLATE_NOOP('CandidateTableModel', 'Training throughput of the whole job'),
           lambda a, _r: a.step('tokens_per_s'), text=si),
    Column('mfu', 'MFU (%)', QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'Model FLOPs utilisation: model FLOPs per second ÷ peak'),
        lambda a, _r: 100 * a.step('mfu'), text=_fixed(1)),
    Column('days', QT_TRANSLATE_NOOP('CandidateTableModel', 'time (days)'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'Time-to-train = steps × step time'),
           lambda a, _r: a.train('time_to_train_s') / DAY, text=_fixed(1)),
    Column('gpu_hours', QT_TRANSLATE_NOOP('CandidateTableModel', 'GPU-hours'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'GPUs × time-to-train'),
           lambda a, _r: a.train('gpu_hours'), text=si),
    Column('cost', QT_TRANSLATE_NOOP('CandidateTableModel', 'cost (USD)'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'GPU-hours × price per GPU-hour'),
           lambda a, _r: a.train('cost_usd'), text=si),
    # the raw 'yes' is what the CSV holds; the table shows it translated
    Column('pareto', QT_TRANSLATE_NOOP('CandidateTableModel', 'Pareto'),
           QT_TRANSLATE_NOOP('CandidateTableModel', 'On the time-to-train vs GPU-hours front'),
           lambda a, _r: a.on_pareto.astype(np.int8),
           cell=lambda a, _r, i: 'yes' if a.on_pareto[i] else '',
           text=lambda v: translate('CandidateTableModel', 'yes') if v else ''),
    Column('stack', QT_TRANSLATE_NOOP('CandidateTableModel', 'stack'), QT_TRANSLATE_NOOP(
        'CandidateTableModel', 'The software that runs the plan (its precision, recompute and '
        'launchers)'), lambda a, _r: a.layout('mode').astype(np.int64),
        cell=lambda a, _r, i: _stack_of(a, i), searchable=True, align_left=True),
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


@dataclass(frozen=True)
class Hidden:
    """What the filters hide: near-duplicates and rows failing the other filters."""

    near_duplicates: int
    filtered: int


class CandidateTableModel(QAbstractTableModel):
    """Every fitting candidate of a result; rows are the visible ones, in the shown order.

    ``_order`` holds the array indices of the visible rows. Setting a result, a ranking,
    a sort column or a filter recomputes it on the full set with numpy.
    """

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._arrays: CandidateArrays | None = None
        self._order = np.zeros(0, np.intp)
        self._rank = np.zeros(0, np.int64)  # 1-based rank of each candidate, current key
        self._ranking = np.zeros(0, np.intp)  # array indices in rank order
        self._values: dict[int, np.ndarray] = {}  # column -> sort keys, made when first asked
        self._texts: dict[int, list[str]] = {}  # visible row -> cell texts
        self._candidates: dict[int, Candidate] = {}  # array index -> record
        self._rank_key = 'time'
        self._sort: tuple[int, Qt.SortOrder] | None = None
        self._text_filter = ''
        self._min_headroom_gib = 0.0
        self._pareto_only = False
        self._distinct_only = True
        self._hidden = Hidden(0, 0)

    # ---- inputs ------------------------------------------------------------------

    def set_result(self, result: SearchResult | None) -> None:
        """Show every fitting candidate of ``result`` (None or nothing fitting: no rows)."""
        self._arrays = None if result is None or not result.fitting else CandidateArrays(result)
        self._candidates = {}
        self._rerank()

    def set_rank_key(self, key: str) -> None:
        """Rank by ``time``, ``cost``, ``gpus`` or ``headroom`` (as the CLI's ``--sort``)."""
        if key not in RANK_KEYS:
            raise ValueError(key)
        self._rank_key = key
        self._rerank()

    def set_text_filter(self, text: str) -> None:
        """Show rows where a searchable column's text contains ``text`` (any case)."""
        self._text_filter = text.strip().lower()
        self._refresh()

    def set_min_headroom_gib(self, value: float) -> None:
        """Hide candidates with less memory headroom than ``value`` GiB."""
        self._min_headroom_gib = float(value)
        self._refresh()

    def set_pareto_only(self, on: bool) -> None:
        """Show only the time-to-train vs GPU-hours front."""
        self._pareto_only = bool(on)
        self._refresh()

    def set_distinct_only(self, on: bool) -> None:
        """Show one row per near-duplicate group (its best-ranked member)."""
        self._distinct_only = bool(on)
        self._refresh()

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Order the rows by ``column``'s numbers (stable: ties keep their rank order).

        Column -1 (no sort) goes back to the rank order.
        """
        if column >= len(COLUMNS):
            return
        self._sort = (column, order) if column >= 0 else None
        self._refresh()

    # ---- state -------------------------------------------------------------------

    @property
    def result(self) -> SearchResult | None:
        """The result shown (None without fitting candidates)."""
        return None if self._arrays is None else self._arrays.result

    @property
    def total(self) -> int:
        """Every fitting candidate."""
        return 0 if self._arrays is None else self._arrays.size

    @property
    def hidden(self) -> Hidden:
        """How many candidates the filters hide, by reason."""
        return self._hidden

    @property
    def rank_key(self) -> str:
        """The current ranking key."""
        return self._rank_key

    def visible_indices(self) -> np.ndarray:
        """Array indices (into the result's arrays) of the visible rows, in order."""
        return self._order.copy()

    def row_of_index(self, index: int) -> int | None:
        """The visible row showing array ``index``, or None when it is hidden."""
        rows = np.flatnonzero(self._order == index)
        return int(rows[0]) if rows.size else None

    def candidate(self, row: int) -> Candidate:
        """The candidate of visible ``row`` (estimated with its memory parts)."""
        if self._arrays is None:
            raise IndexError(row)
        index = int(self._order[row])
        c = self._candidates.get(index)
        if c is None:
            if len(self._candidates) >= _CANDIDATE_CACHE:
                self._candidates.clear()
            c = self._candidates[index] = self._arrays.candidate(index)
        return c

    def column_values(self, column: int) -> np.ndarray:
        """Column ``column``'s numbers for every candidate (array order)."""
        values = self._values.get(column)
        if values is None:
            if self._arrays is None:
                return np.zeros(0)
            values = self._values[column] = np.asarray(
                COLUMNS[column].values(self._arrays, self._rank))
        return values

    def _rerank(self) -> None:
        from planner.plans.search import ranking_by

        a = self._arrays
        self._rank = np.zeros(0, np.int64)
        if a is not None:
            ranking = np.asarray(ranking_by(a.result, self._rank_key), np.intp)
            self._rank = np.empty(a.size, np.int64)
            self._rank[ranking] = np.arange(1, a.size + 1)
            self._ranking = ranking
        self._values = {}
        self._refresh()

    def _refresh(self) -> None:
        """Filter and sort the full set, then show it (one model reset)."""
        self.beginResetModel()
        self._texts = {}
        a = self._arrays
        if a is None:
            self._order = np.zeros(0, np.intp)
            self._hidden = Hidden(0, 0)
            self.endResetModel()
            return
        order = self._ranking
        keep = np.ones(order.size, bool)
        near = 0
        if self._distinct_only:
            keep = a.result.first_distinct(order)
            near = int(order.size - keep.sum())
        before = int(keep.sum())
        if self._min_headroom_gib > 0:
            keep &= a.headroom_bytes[order] >= self._min_headroom_gib * GIB
        if self._pareto_only:
            keep &= a.on_pareto[order]
        if self._text_filter:
            keep &= self._text_matches()[order]
        order = order[keep]
        if self._sort is not None:
            column, direction = self._sort
            values = self.column_values(column)[order].astype(float)
            values = np.where(np.isnan(values), np.inf, values)  # unknown sorts last
            if direction == Qt.SortOrder.DescendingOrder:
                values = np.where(np.isinf(values) & (values > 0), -np.inf, -values)
            order = order[np.argsort(values, kind='stable')]
        self._order = order
        self._hidden = Hidden(near_duplicates=near, filtered=before - int(order.size))
        self.endResetModel()

    def _text_matches(self) -> np.ndarray:
        """Candidates where a searchable column's text contains the filter text."""
        a = self._arrays
        assert a is not None  # filtering runs only on a result with candidates
        mask = np.zeros(a.size, bool)
        for c, col in enumerate(COLUMNS):
            if not col.searchable:
                continue
            values = self.column_values(c)
            uniques, first, inverse = np.unique(values, return_index=True,
                                                return_inverse=True)
            hits = np.fromiter(
                (self._text_filter in col.text(col.raw(a, self._rank, int(i), values)).lower()
                 or self._text_filter in str(col.raw(a, self._rank, int(i), values)).lower()
                 for i in first), np.bool_, count=uniques.size)
            mask |= hits[inverse.reshape(-1)]
        return mask

    # ---- Qt ----------------------------------------------------------------------

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else int(self._order.size)

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

    def _row_texts(self, row: int) -> list[str]:
        texts = self._texts.get(row)
        if texts is None:
            a, i = self._arrays, int(self._order[row])
            assert a is not None  # rows exist only with candidates
            texts = self._texts[row] = [
                col.text(col.raw(a, self._rank, i, self.column_values(c)))
                for c, col in enumerate(COLUMNS)]
        return texts

    def data(self, index: QModelIndex | QPersistentModelIndex,
             role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or self._arrays is None:
            return None
        row = index.row()
        if role == _DISPLAY:
            return self._row_texts(row)[index.column()]
        col = COLUMNS[index.column()]
        if role == _ALIGN:
            return _LEFT if col.align_left else _RIGHT
        if role == _FOREGROUND:
            if col.key != 'headroom':
                return None
            i = int(self._order[row])
            return QBrush(headroom_colour(self._arrays.headroom_bytes[i],
                                          self._arrays.result.request.usable_bytes))
        if role == RAW_ROLE:
            i = int(self._order[row])
            return col.raw(self._arrays, self._rank, i, self.column_values(index.column()))
        if role == CANDIDATE_ROLE:
            return self.candidate(row)
        if role == _TOOLTIP:
            return translate('CandidateTableModel', col.tooltip)
        return None

    def multiData(self, index: QModelIndex | QPersistentModelIndex,  # noqa: N802
                  roles: QModelRoleDataSpan | QModelRoleData) -> None:
        """Every role a delegate asks of a cell, in one call (Qt 6's batched ``data``)."""
        # a span iterates its QModelRoleData; PySide6's stub lacks its __iter__
        items = [roles] if isinstance(roles, QModelRoleData) else roles
        for item in items:  # type: ignore[union-attr]
            value = self.data(index, item.role())
            if value is None:
                item.clearData()
            else:
                item.setData(value)

    # ---- export ------------------------------------------------------------------

    def to_csv(self, rows: Sequence[int] | None = None) -> str:
        """The visible rows (or ``rows`` of them) as CSV: English headers, full precision."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator='\n')
        writer.writerow([c.header for c in COLUMNS])
        if self._arrays is None:
            return out.getvalue()
        a = self._arrays
        values = [self.column_values(c) for c in range(len(COLUMNS))]
        for r in (range(self._order.size) if rows is None else rows):
            i = int(self._order[r])
            writer.writerow([col.raw(a, self._rank, i, values[c])
                             for c, col in enumerate(COLUMNS)])
        return out.getvalue()
