"""Distinct-row evaluation: packed keys, distinct rows, and the estimate and ranking built
on them give exactly what the row-by-row computation gives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner.distinct_rows as distinct_module
from planner.distinct_rows import Spread, distinct_rows, packed_key
from planner.hardware.catalog import find_gpu, find_interconnect
from planner.memory.peak import estimate_arrays, tensor_peak_floor
from planner.memory.training import LoraSpec
from planner.models.presets import find_preset
from planner.plans.request import PlanRequest
from planner.plans.search import _ranking, _ranking_lexsort, enumerate_grid, search
from planner.timing.step_time import TrainingLength


@pytest.mark.parametrize('high', [4, 1 << 60])  # one key per row, or the stacked fallback
def test_packed_keys_match_exactly_when_the_rows_do(high):
    rng = np.random.default_rng(7)
    columns = [rng.integers(-3, 4, 500), rng.integers(1, 9, 500), rng.integers(0, high, 500),
               rng.integers(0, 2, 500)]
    keys = packed_key([c.astype(np.int64) for c in columns])
    rows = np.stack(columns, axis=1)
    for i, j in rng.integers(0, 500, (2000, 2)):
        same_row = bool(np.all(rows[i] == rows[j]))
        assert bool(np.all(keys[i] == keys[j])) == same_row
    assert (keys.ndim == 1) == (high == 4)


@given(st.lists(st.tuples(st.integers(-5, 5), st.integers(0, 300), st.booleans()),
                min_size=1, max_size=200))
@settings(max_examples=60, deadline=None)
def test_packed_key_orders_rows_as_their_columns(rows):
    a, b, c = (np.asarray(col) for col in zip(*rows, strict=True))
    key = packed_key([a, b, c])
    assert np.array_equal(np.argsort(key, kind='stable'), np.lexsort((c, b, a)))


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(1, 40), st.integers(0, 1 << 40)),
                min_size=1, max_size=300),
       st.booleans())
@settings(max_examples=80, deadline=None)
def test_distinct_rows_pick_and_spread_rebuild_every_row(rows, wide):
    a, b, c = (np.asarray(col, np.int64) for col in zip(*rows, strict=True))
    columns = [a, b, c] if wide else [a, b]  # wide: past the lookup table, np.unique
    d = distinct_rows(*columns, np.asarray(3), min_rows=1)
    assert d is not None
    for col in columns:
        assert np.array_equal(d.spread(d.pick(col)), col)
    keys = {tuple(int(x) for x in r) for r in zip(*columns, strict=True)}
    assert len(d.first) == len(keys)
    # first: where each distinct row appears first
    for k, i in enumerate(d.first):
        assert d.inverse[i] == k
        assert not np.any(d.inverse[:i] == k)


def test_distinct_rows_leaves_broadcast_and_small_grids_alone():
    assert distinct_rows(np.arange(10), np.arange(10)) is None  # under MIN_ROWS
    assert distinct_rows(np.arange(4)[:, None], np.arange(3)[None, :], min_rows=1) is None
    assert distinct_rows(np.asarray(1), np.asarray(2), min_rows=1) is None


def test_spread_gathers_a_field_when_first_read():
    d = distinct_rows(np.asarray([0, 1, 0, 1, 1]), min_rows=1)

    @dataclasses.dataclass
    class Record:
        per_row: np.ndarray
        constant: np.ndarray

    s = Spread(Record(per_row=np.asarray([10.0, 20.0]), constant=np.asarray(7.0)), d)
    assert s.per_row.tolist() == [10.0, 20.0, 10.0, 20.0, 20.0]
    assert float(s.constant) == 7.0
    with pytest.raises(AttributeError):
        _ = s.missing


def _request(**kw) -> PlanRequest:
    args = {'model': find_preset('llama-3-8b'), 'seq_len': 4096, 'gpu': find_gpu('h100-sxm'),
            'max_nodes': 8, 'gpus_per_node': 8, 'inter_node': find_interconnect('ib-ndr'),
            'global_batch': 384, 'length': TrainingLength(tokens=1e11),
            'precision': 'bf16-mixed', 'framework': 'megatron'}
    args.update(kw)
    return PlanRequest(**args)


@pytest.mark.parametrize('kw', [
    {},
    {'framework': 'hf', 'precision': 'amp-bf16', 'attention': 'eager'},
    {'framework': 'hf', 'precision': 'amp-bf16',
     'lora': LoraSpec(rank=16, targets=('q', 'k', 'v', 'o'), base_bits=4)},
], ids=['megatron', 'hf-eager', 'qlora'])
def test_estimate_on_distinct_rows_is_bit_identical(kw, monkeypatch):
    req = _request(**kw)
    grid = enumerate_grid(req, 384)
    assert len(grid) > distinct_module.MIN_ROWS  # the distinct-row path is taken
    cfg, opts = req.memory_config(grid), req.memory_options()
    fast = estimate_arrays(req.model, opts, cfg, req.overheads)
    fast_floor = tensor_peak_floor(req.model, opts, cfg)
    monkeypatch.setattr(distinct_module, 'MIN_ROWS', 10**9)  # every row computed itself
    slow = estimate_arrays(req.model, opts, cfg, req.overheads)
    slow_floor = tensor_peak_floor(req.model, opts, cfg)
    assert np.array_equal(fast_floor, slow_floor)
    for f in dataclasses.fields(slow):
        a, b = getattr(fast, f.name), getattr(slow, f.name)
        if isinstance(b, dict):
            assert a.keys() == b.keys()
            for k in b:
                assert np.array_equal(np.broadcast_to(a[k], np.shape(fast.total_bytes)),
                                      np.broadcast_to(b[k], np.shape(slow.total_bytes))), k
        else:
            assert np.array_equal(a, b), f.name


@pytest.mark.parametrize('sort_by', ['time', 'cost', 'gpus', 'headroom'])
def test_packed_ranking_matches_one_key_per_axis(sort_by):
    r = search(_request(sort_by=sort_by))
    lay, st_ = r.layout, r.step
    time_key = r.train.time_to_train_s
    usable = r.request.gpu.memory_bytes * (1 - r.request.margin_fraction)
    headroom = usable - np.asarray(r.memory.total_bytes, float)
    args = (sort_by, time_key, r.train.gpu_hours, headroom, lay, st_.gpus)
    assert len(time_key) > 1000
    assert np.array_equal(_ranking(*args), _ranking_lexsort(*args))
    assert np.array_equal(r.ranking, _ranking_lexsort(*args))
