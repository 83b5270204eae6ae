"""The empty state's explanation: the core's reason, and only changes that do fit."""

from __future__ import annotations

import pytest

from planner.plans.path import build_request as build_from_ask
from planner.plans.search import search
from ui.no_plan_view import explain
from ui.plan_inputs import PlanInputs, plan_ask


def build_request(inputs: PlanInputs):
    """The request the app builds from ``inputs`` (the core's one path)."""
    return build_from_ask(plan_ask(inputs))


# The Hugging Face stack is data parallel only, so these do not fit with it pinned.
@pytest.mark.parametrize('inputs', [
    PlanInputs(zero_stages=(0,), recompute_modes=('none',), framework='hf'),  # 8B on 8 H100
    PlanInputs(batch_value=1000, batch_unit='tokens'),  # below one sequence
    PlanInputs(model='qwen2.5-14b', gpus_per_node=4, framework='hf'),  # more nodes, or a GPU
    PlanInputs(model='qwen2.5-14b', gpu='a100-40g-sxm', framework='hf'),  # a larger GPU
])
def test_every_suggestion_gives_a_plan(qapp, inputs):
    request = build_request(inputs)
    result = search(request)
    assert not result.fitting
    view = explain(inputs, request, result)
    assert view.reason == result.message
    assert view.headline
    assert view.suggestions
    for s in view.suggestions:
        changed = inputs.with_changes(**s.changes)
        assert search(build_request(changed)).fitting, s


def test_a_batch_in_tokens_is_suggested_in_tokens(qapp):
    inputs = PlanInputs(batch_value=1000, batch_unit='tokens')
    request = build_request(inputs)
    view = explain(inputs, request, search(request))
    batch = next(s for s in view.suggestions if 'batch_value' in s.changes)
    assert batch.changes['batch_value'] % request.seq_len == 0
    assert batch.changes['batch_value'] >= request.seq_len
