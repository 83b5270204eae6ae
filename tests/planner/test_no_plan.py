"""planner.plans.no_plan: every "no plan" names the constraint that removed the candidates."""

from __future__ import annotations

import pytest

from planner.hardware.catalog import find_gpu
from planner.models.presets import load_presets
from planner.plans.no_plan import explain_no_plan, nice_batches, nice_batches_with_plan
from planner.plans.request import LayoutLimits, PlanRequest
from planner.plans.search import search


def _request(model: str = 'llama-3.1-8b', **kw) -> PlanRequest:
    kw.setdefault('global_batch', 1024)
    return PlanRequest(model=load_presets()[model], seq_len=kw.pop('seq_len', 4096),
                       gpu=find_gpu('h100-sxm'), **kw)


def _why(req: PlanRequest):
    result = search(req)
    assert result.status != 'ok'
    return explain_no_plan(req, result)


def test_pp_not_dividing_layers_names_uneven_pipeline():
    why = _why(_request('llama-3.1-405b', global_batch=2048, limits=LayoutLimits(pp=(16,))))
    assert why.constraint == 'pp_layers'
    assert why.field == '--pp'
    assert '126 layers' in why.text
    assert '--uneven-pipeline' in why.text
    assert why.nearest['pp'] == [14, 18]
    assert 'uneven_pipeline' in why.suggestions


def test_tp_not_dividing_heads():
    why = _why(_request(limits=LayoutLimits(tp=(3,))))
    assert why.constraint == 'tp_heads'
    assert why.nearest['tp'] == [2, 4]


def test_cp_not_splitting_sequence():
    why = _why(_request(limits=LayoutLimits(cp=(3,))))
    assert why.constraint == 'cp_sequence'
    assert why.nearest['cp'] == [2, 4]


def test_tokens_not_whole_sequences_offer_powers_of_two():
    why = _why(_request(global_batch=None, global_batch_tokens=4_000_000))
    assert why.constraint == 'tokens_not_whole'
    assert why.nearest['global_batch_tokens'] == [976 * 4096, 977 * 4096]
    assert why.nearest['global_batch'] == [976, 977]
    assert '1,024 sequences' in why.text


def test_memory_names_dominant_part_and_a_cut():
    why = _why(_request('llama-3.1-70b', zero_stages=(0,), recompute_modes=('none',)))
    assert why.constraint == 'memory'
    assert why.smallest_peak_bytes > why.usable_bytes
    assert why.dominant == max((k for k in why.parts_bytes if k not in (
        'cuda_context', 'workspace', 'allocator_reserve')), key=why.parts_bytes.get)
    assert why.dominant == 'optimizer_states'
    assert why.suggestions[0] == 'zero1'
    assert 'optimizer states' in why.text
    assert 'ZeRO-1' in why.text


def test_memory_explains_the_search_own_smallest_peak_with_its_stack():
    """With every stack searched, each layout is estimated with its own stack's recipe:
    the explanation's smallest peak is the search's (the app's memory chart shows that
    one), and it names the stack that reaches it."""
    req = _request('llama-3.1-70b')
    result = search(req)
    assert result.status != 'ok'
    why = explain_no_plan(req, result)
    assert why.constraint == 'memory'
    assert why.smallest_peak_bytes == pytest.approx(result.min_total_bytes, rel=1e-9)
    stacks = {m.stack for m in req.plan_modes()}
    assert len(stacks) > 1
    assert any(f'({stack}: TP' in why.text for stack in stacks)


def test_eager_scores_suggest_flash():
    why = _why(_request('llama-3.1-8b', seq_len=65536, global_batch=8, attention='eager',
                        limits=LayoutLimits(cp=(1,), tp=(1,), pp=(1,)), zero_stages=(3,)))
    assert why.constraint == 'memory'
    if why.dominant == 'attention_scores_temp':
        assert 'flash' in why.suggestions


def test_batch_not_factorisable_with_gpu_list():
    why = _why(_request(global_batch=7, limits=LayoutLimits(gpus=(8,), tp=(1,), pp=(1,),
                                                            cp=(1,))))
    assert why.constraint == 'batch_factorisation'
    assert why.field == '--global-batch'


def test_ok_result_has_no_explanation():
    req = _request()
    assert explain_no_plan(req, search(req)) is None


@pytest.mark.parametrize(('target', 'expected'), [(976.56, [512, 1024]), (1024, [512, 2048]),
                                                  (0.5, [2])])
def test_nice_batches_are_powers_of_two(target, expected):
    assert nice_batches(target) == expected


def test_nice_batches_with_plan_have_plans():
    req = _request(global_batch=1000)
    for n in nice_batches_with_plan(req):
        assert search(_request(global_batch=n)).status == 'ok'
