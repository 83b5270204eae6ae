"""Evaluate a formula once per distinct row of a flat grid, then spread it to every row.

A plan search's grid repeats each (TP, PP, DP, CP, ZeRO) once per micro-batch, virtual
stage and recompute mode, and each (micro-batch, TP, CP, recompute) once per pipeline
and data-parallel layout: Llama-3.1-8B on 64 GPUs gives 93,096 rows but under a
thousand distinct values of either key. numpy's cost on such a grid is memory traffic,
one pass over every row per operation. Evaluating the model-state and activation
formulas on the distinct rows (a few hundred, in cache) and gathering each result back
replaces dozens of passes over the grid with one per value read.

The results are bit-identical: every formula is elementwise, so a row's value does not
depend on which other rows are computed beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Below this many rows a grid is evaluated directly: the sort costs more than it saves.
MIN_ROWS = 512
# A lookup table over every possible key is used while it has at most this many entries
# per grid row; past that, np.unique's sort is cheaper.
LOOKUP_ROWS_PER_ROW = 4


@dataclass(frozen=True)
class DistinctRows:
    """The distinct rows of some integer columns of a flat grid.

    Attributes:
        first: for each distinct row, the grid row where it first appears.
        inverse: for each grid row, its distinct row.
    """

    first: np.ndarray
    inverse: np.ndarray

    def pick(self, column) -> np.ndarray:
        """``column``'s values at the distinct rows (a 0-d column stays as it is)."""
        column = np.asarray(column)
        return column if column.ndim == 0 else column[self.first]

    def spread(self, value) -> np.ndarray:
        """A value computed on the distinct rows, at every grid row (0-d stays 0-d)."""
        value = np.asarray(value)
        return value if value.ndim == 0 else value[self.inverse]


def distinct_rows(*columns, min_rows: int = MIN_ROWS) -> DistinctRows | None:
    """The distinct rows of the given integer (or boolean) columns.

    0-d columns are the same on every row and do not count. Returns None when there is
    nothing to gain: the columns are not 1-D arrays of one length (a broadcast grid is
    already evaluated once per value of each axis), or the grid has fewer than
    ``min_rows`` rows.
    """
    varying = [np.asarray(c) for c in columns if np.ndim(c)]
    if not varying:
        return None
    n = varying[0].shape[0]
    if n < min_rows or any(c.shape != (n,) for c in varying):
        return None
    key = packed_key(varying)
    if key.ndim == 2:
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        return DistinctRows(first=first, inverse=inverse.reshape(n))
    size = int(key.max()) + 1  # packed keys start at 0
    if size > LOOKUP_ROWS_PER_ROW * n:
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return DistinctRows(first=first, inverse=inverse.reshape(n))
    # A table over every possible key is small enough: no sort, a few linear passes.
    present = np.zeros(size, bool)
    present[key] = True
    number = np.cumsum(present) - 1  # each present key's rank
    inverse = number[key]
    first = np.empty(int(number[-1]) + 1, np.intp)
    first[inverse[::-1]] = np.arange(n - 1, -1, -1)  # written last: the first occurrence
    return DistinctRows(first=first, inverse=inverse)


def packed_key(columns: Sequence[np.ndarray]) -> np.ndarray:
    """One int64 per row, ordered as the rows are by the columns (the first the most
    significant), equal exactly when every column is: a mixed radix over each column's
    range.

    Sorting or ``np.unique`` on it is one 1-D sort, several times cheaper than on the
    stacked columns. Falls back to the stacked columns (rows x columns) when the ranges
    need more than 62 bits.
    """
    columns = [np.asarray(c) for c in columns]
    if not columns[0].size:
        return columns[0].astype(np.int64)
    lows = [int(c.min()) for c in columns]
    radices = [int(c.max()) - low + 1 for c, low in zip(columns, lows, strict=True)]
    if math.prod(radices) >= 1 << 62:
        return np.stack(columns, axis=1)
    key = np.zeros(columns[0].shape, np.int64)
    for column, low, radix in zip(columns, lows, radices, strict=True):
        key = key * radix + (column.astype(np.int64) - low)
    return key


class Spread:
    """A record computed on the distinct rows, read per grid row.

    Each field is gathered to the grid's rows the first time it is read, so fields a
    caller never reads cost nothing.
    """

    def __init__(self, record: Any, rows: DistinctRows) -> None:
        self._record = record
        self._rows = rows
        self._cache: dict[str, np.ndarray] = {}

    def __getattr__(self, name: str) -> np.ndarray:
        if name.startswith('_'):
            raise AttributeError(name)
        cache = self._cache
        if name not in cache:
            cache[name] = self._rows.spread(getattr(self._record, name))
        return cache[name]
