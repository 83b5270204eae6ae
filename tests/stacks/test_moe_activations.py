"""An MoE layer's saved activations: batchfit's count against the frameworks' own code.

* Megatron-Core: its ``MoELayer`` (router, alltoall and allgather dispatchers,
  SequentialMLP experts with the weighted fused activations, shared experts) run on the
  CPU over real gloo ranks, EP 1 and 2, with exactly balanced routing
  (tests/stacks/megatron_moe.py). Each case is compared with
  :func:`planner.memory.activations.megatron_moe_block` at the same switches, which must
  agree to 0.5 % and never be low; batchfit's estimate (the switches that keep the most,
  :func:`megatron_moe_terms`) must be at least every one of them.

Per-layer tensors that do not grow with the tokens (the load-balancing loss's int64
count per expert, the loss scalars, the GEGLU offset scalar of each local expert) are
taken off the measurement: batchfit counts bytes per token.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from planner.memory.activations import MegatronMoEChoices, megatron_moe_block, megatron_moe_terms
from planner.memory.recipes import RECIPES
from planner.models.spec import ModelSpec, MoESpec

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec('megatron') is None
                       or importlib.util.find_spec('torch') is None,
                       reason='not installed: megatron-core'),
    pytest.mark.filterwarnings('ignore::UserWarning'),
    pytest.mark.filterwarnings('ignore::DeprecationWarning'),
    pytest.mark.filterwarnings('ignore::FutureWarning'),
]


def _cases():
    from tests.stacks.megatron_moe import MoECase

    return [
        MoECase('alltoall'),
        MoECase('allgather', dispatcher='allgather'),
        MoECase('alltoall-ep2', ep=2),
        MoECase('allgather-ep2', dispatcher='allgather', ep=2),
        MoECase('e16-k4-ep2', experts=16, topk=4, ep=2),
        MoECase('bf16-router', router_fp32=False),
        MoECase('no-aux-loss', aux_loss=False),
        MoECase('z-loss', z_loss=True),
        MoECase('pre-softmax', score='softmax_pre'),
        MoECase('sigmoid', score='sigmoid', expert_bias=True),
        MoECase('sigmoid-bf16', score='sigmoid', router_fp32=False),
        MoECase('gpt-oss', gpt_oss=True),
        MoECase('gpt-oss-allgather-ep2', gpt_oss=True, dispatcher='allgather', ep=2),
        MoECase('shared', shared_ffn=48),
        MoECase('shared-gate', shared_ffn=48, shared_gate=True),
    ]


@cache
def _measured():
    from tests.stacks.megatron_moe import measure

    cases = _cases()
    return {c.name: m for c, m in zip(cases, measure(cases), strict=True)}


def _spec(case) -> ModelSpec:
    moe = MoESpec(num_experts=case.experts, top_k=case.topk, expert_ffn_size=case.expert_ffn,
                  shared_experts=1 if case.shared_ffn else 0,
                  shared_ffn_size=case.shared_ffn)
    return ModelSpec(name=case.name, num_layers=1, hidden_size=case.hidden, num_heads=4,
                     num_kv_heads=4, head_dim=case.hidden // 4, ffn_size=4 * case.hidden,
                     vocab_size=256, moe=moe, clamped_glu=case.gpt_oss)


def _choices(case) -> MegatronMoEChoices:
    return MegatronMoEChoices(
        dispatcher=case.dispatcher, router=case.score,
        aux=(case.score if case.score != 'softmax_pre' else 'softmax') if case.aux_loss
        else 'none',
        z_loss=case.z_loss, permute_fused=False, router_fp32=case.router_fp32,
        shared_gate=case.shared_gate)


def _per_layer_constants(case) -> int:
    """Saved tensors that do not scale with the tokens (megatron/core/transformer/moe/
    moe_utils.py): the aux loss's int64 tokens per expert and its fp32 scalar, the z-loss
    scalar, and GPT-OSS's ``linear_offset`` (a 0-d tensor in the activations' dtype per
    local expert, fusions/fused_bias_geglu.py ``weighted_bias_quick_geglu_impl``)."""
    n = 0
    if case.aux_loss:
        n += 8 * case.experts + 4
    if case.z_loss:
        n += 4 if case.router_fp32 else 2
    if case.gpt_oss:
        n += 2 * (case.experts // case.ep)
    return n


def _bytes(terms, case) -> float:
    one = np.ones(())
    return float(terms.bytes(case.batch * one, case.seq * one, one, one, np.zeros((), bool),
                             case.hidden, 4, et=one, ep=case.ep * one))


@pytest.mark.parametrize('name', [c.name for c in _cases()])
def test_megatron_moe_block_matches_megatron_core(name):
    got = _measured()[name]
    case = got.case
    # balanced routing: each rank's experts received k x its tokens
    assert got.routed_copies == case.topk * case.tokens
    measured = got.saved_bytes - _per_layer_constants(case)
    est = _bytes(megatron_moe_block(_spec(case), RECIPES['bf16-mixed'], _choices(case)), case)
    assert est >= measured, (name, est, measured, got.storages)
    assert est == pytest.approx(measured, rel=0.005), (name, est, measured, got.storages)


@pytest.mark.parametrize('name', [c.name for c in _cases()])
def test_batchfit_moe_layer_is_at_least_every_measured_variant(name):
    got = _measured()[name]
    case = got.case
    est = _bytes(megatron_moe_terms(_spec(case), RECIPES['bf16-mixed']), case)
    assert est >= got.saved_bytes, (name, est, got.saved_bytes)


def test_the_fused_kernels_counted_from_source_keep_more_than_the_unfused_ones():
    """TE's fused router and permutation keep E-wide maps: at Qwen3-30B-A3B's shape (E 128,
    top-8) each saves more per token than the unfused ops measured above, so batchfit's
    estimate must take them (it would be low with the unfused count alone)."""
    from planner.models.source import resolve_model

    m = resolve_model('qwen3-30b-a3b')
    r = RECIPES['fp8']
    base = MegatronMoEChoices(dispatcher='alltoall', router='softmax', aux='softmax',
                              router_fp32=True)
    unfused = megatron_moe_block(m, r, base)
    assert megatron_moe_block(m, r, replace(base, router='fused')).sp_token > unfused.sp_token
    assert megatron_moe_block(m, r, replace(base, permute_fused=True)).sp_token \
        > unfused.sp_token


@pytest.mark.parametrize('shape', [(128, 8), (128, 4), (8, 2), (4, 4)], ids=str)
def test_batchfit_moe_layer_is_at_least_every_switch_setting(shape):
    """At every TP, SP, expert-TP and EP size, batchfit's MoE block keeps at least what
    any setting of Megatron's switches keeps (E 4, top-4 takes the path where the
    alltoall dispatcher can keep more than the allgather one)."""
    import itertools

    experts, topk = shape
    m = ModelSpec(name='moe', num_layers=2, hidden_size=256, num_heads=4, num_kv_heads=4,
                  head_dim=64, ffn_size=512, vocab_size=256,
                  moe=MoESpec(num_experts=experts, top_k=topk, expert_ffn_size=96,
                              shared_experts=1, shared_ffn_size=64, first_dense_layers=1))
    one = np.ones(())
    for r in (RECIPES['bf16-mixed'], RECIPES['fp8']):
        est = megatron_moe_terms(m, r)
        settings = itertools.product(('allgather', 'alltoall'),
                                     ('softmax', 'softmax_pre', 'sigmoid', 'fused'),
                                     ('none', 'softmax', 'sigmoid', 'fused'),
                                     (False, True), (False, True), (False, True), (False, True))
        for dispatcher, router, aux, z, fused, fp32, gate in settings:
            terms = megatron_moe_block(m, r, MegatronMoEChoices(
                dispatcher=dispatcher, router=router, aux=aux, z_loss=z, permute_fused=fused,
                router_fp32=fp32, shared_gate=gate))
            for t, sp, et, ep in itertools.product((1, 2, 4), (False, True), (1, None),
                                                   (1, 2, experts)):
                args = (2 * one, 512 * one, t * one, one, np.asarray(sp), 256, 4)
                kw = {'et': None if et is None else et * one, 'ep': ep * one}
                assert est.bytes(*args, **kw) >= terms.bytes(*args, **kw), (
                    dispatcher, router, aux, z, fused, fp32, gate, t, sp, et, ep)


# ---- torchtitan ----------------------------------------------------------------------------
def _titan_cases():
    from tests.stacks.titan_moe import TitanMoECase

    return [
        TitanMoECase('qwen3'),  # softmax, route_norm, combine by bmm (Qwen3's MoEArgs)
        TitanMoECase('deepseek', route_norm=False, score_before_experts=True, shared=1),
        TitanMoECase('sigmoid', score_func='sigmoid'),
        TitanMoECase('gpt-oss', gpt_oss=True),
        TitanMoECase('e16-k4', experts=16, topk=4, seq=64),
        TitanMoECase('qwen3-fp32', fp32=True),
        TitanMoECase('gpt-oss-fp32', gpt_oss=True, fp32=True),
    ]


def _titan_recipe(case):
    return RECIPES['fp32' if case.fp32 else 'fsdp-bf16']


def _titan_estimate(case) -> float:
    """batchfit's :func:`torchtitan_moe_block` for ``case`` plus the block's input (the norm
    output, counted with the norms), in bytes."""
    from planner.memory.stack_activations import torchtitan_moe_block

    m = ModelSpec(name=case.name, num_layers=1, hidden_size=case.hidden, num_heads=4,
                  num_kv_heads=4, head_dim=case.hidden // 4, ffn_size=4 * case.hidden,
                  vocab_size=256, clamped_glu=case.gpt_oss, mlp_bias=case.gpt_oss,
                  moe=MoESpec(num_experts=case.experts, top_k=case.topk,
                              expert_ffn_size=case.expert_ffn, shared_experts=case.shared,
                              shared_ffn_size=case.expert_ffn if case.shared else 0))
    r = _titan_recipe(case)
    one = np.ones(())
    return float(torchtitan_moe_block(m, r).bytes(
        case.batch * one, case.seq * one, one, one, np.zeros((), bool), case.hidden, 4,
        et=one, ep=one)) + r.act_bytes * case.hidden * case.tokens


@pytest.mark.skipif(importlib.util.find_spec('torchtitan') is None,
                    reason='not installed: torchtitan')
@pytest.mark.parametrize('case', _titan_cases(), ids=lambda c: c.name)
def test_torchtitan_moe_block_matches_torchtitan(case):
    """torchtitan's own MoE block against :func:`torchtitan_moe_block` plus its input (the
    norm output, counted with the norms): never low, within 1 % (the count takes the
    larger of torchtitan's two combine paths and, for ``route_norm`` off, its division)."""
    from tests.stacks.titan_moe import measure

    got, storages = measure(case)
    est = _titan_estimate(case)
    assert est >= got, (case.name, est, got, storages)
    assert est == pytest.approx(got, rel=0.01), (case.name, est, got, storages)
