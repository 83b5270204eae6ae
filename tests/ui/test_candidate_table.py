"""The candidate table shows, sorts, filters and exports the whole search result."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from PySide6.QtCore import Qt

from planner.plans.path import build_request as build_from_ask
from planner.plans.search import ranking_by, search
from ui.models.candidate_table import COLUMN_KEYS, CandidateTableModel
from ui.plan_inputs import PlanInputs, plan_ask


def build_request(inputs: PlanInputs):
    """The request the app builds from ``inputs`` (the core's one path)."""
    return build_from_ask(plan_ask(inputs))

GIB = 2**30


@pytest.fixture(scope='module')
def big_result():
    """Llama-3.1-8B on up to 16 nodes of 8 H100 under Megatron: thousands of layouts."""
    from dataclasses import replace

    request = build_request(PlanInputs(nodes=16, precision='bf16-mixed'))
    return search(replace(request, framework='megatron'))


def _col(key: str) -> int:
    return COLUMN_KEYS.index(key)


def _gpus(model: CandidateTableModel) -> list[int]:
    return [model.index(r, _col('gpus')).data(Qt.ItemDataRole.UserRole)
            for r in range(model.rowCount())]


def test_every_candidate_is_a_row(qapp, big_result):
    assert big_result.fitting > 1000
    model = CandidateTableModel()
    model.set_distinct_only(False)
    model.set_result(big_result)
    assert model.rowCount() == model.total == big_result.fitting
    ranks = [model.index(r, 0).data(Qt.ItemDataRole.UserRole) for r in range(50)]
    assert ranks == list(range(1, 51))  # no gaps without near-duplicate hiding
    assert model.hidden.near_duplicates == model.hidden.filtered == 0


def test_near_duplicates_are_counted_and_the_best_one_kept(qapp, big_result):
    model = CandidateTableModel()
    model.set_result(big_result)
    shown = model.rowCount()
    assert shown + model.hidden.near_duplicates == big_result.fitting
    # the first rows are what the CLI lists (SearchResult.top, the same grouping)
    top = big_result.top(20)
    assert [model.candidate(r).rank for r in range(20)] == [c.rank for c in top]
    assert [model.index(r, 0).data(Qt.ItemDataRole.UserRole) for r in range(20)] == \
        [c.rank for c in top]


@pytest.mark.parametrize('key', ['time', 'cost', 'gpus', 'headroom'])
def test_rank_keys_order_the_full_set_as_the_cli(qapp, big_result, key):
    model = CandidateTableModel()
    model.set_distinct_only(False)
    model.set_result(big_result)
    model.set_rank_key(key)
    assert model.visible_indices().tolist() == ranking_by(big_result, key).tolist()
    if key == 'gpus':  # the smallest GPU count reachable at all comes first
        gpus = np.broadcast_to(big_result.step.gpus, (big_result.fitting,))
        assert _gpus(model)[0] == gpus.min() < gpus.max()


def test_header_sort_and_filters_run_on_the_full_set(qapp, big_result):
    model = CandidateTableModel()
    model.set_result(big_result)
    model.sort(_col('gpus'), Qt.SortOrder.DescendingOrder)
    gpus = _gpus(model)
    assert gpus == sorted(gpus, reverse=True)
    assert gpus[0] == 128
    assert gpus[-1] < 128  # not only the fastest (largest) layouts

    model.set_distinct_only(False)
    model.set_pareto_only(True)
    assert sorted(model.visible_indices().tolist()) == sorted(big_result.pareto.tolist())
    model.set_pareto_only(False)

    model.set_min_headroom_gib(30.0)
    headroom = big_result.request.usable_bytes - np.asarray(big_result.memory.total_bytes)
    assert model.rowCount() == int((headroom >= 30 * GIB).sum())
    assert model.hidden.filtered == big_result.fitting - model.rowCount()
    model.set_min_headroom_gib(0.0)

    model.set_text_filter('SELECTIVE')
    recompute = np.asarray(big_result.layout.recompute)
    from planner.timing.step_time import RECOMPUTE_MODES
    assert model.rowCount() == int((recompute == RECOMPUTE_MODES.index('selective')).sum())
    model.set_text_filter('')


def test_csv_holds_what_the_filter_shows(qapp, big_result):
    model = CandidateTableModel()
    model.set_result(big_result)
    model.set_pareto_only(True)
    rows = list(csv.reader(io.StringIO(model.to_csv())))
    assert rows[0][0] == '#'
    assert len(rows) - 1 == model.rowCount()
    for r, row in enumerate(rows[1:]):
        c = model.candidate(r)
        assert int(row[0]) == model.index(r, 0).data(Qt.ItemDataRole.UserRole)
        assert row[_col('layout')] == c.layout
        assert float(row[_col('memory')]) == pytest.approx(c.memory.total_bytes / GIB)
        assert row[_col('pareto')] == 'yes'


def test_nothing_fits_gives_an_empty_table(qapp):
    result = search(build_request(PlanInputs(model='llama-3.1-405b')))
    assert not result.fitting
    model = CandidateTableModel()
    model.set_result(result)
    model.set_pareto_only(True)
    model.set_text_filter('x')
    assert model.rowCount() == 0
    assert model.to_csv().count('\n') == 1
