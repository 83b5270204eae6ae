"""The plan search: completeness, batch arithmetic, fit, ranking, Pareto front, failures."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.errors import InputError
from planner.hardware.catalog import find_gpu, find_interconnect
from planner.memory.peak import MemoryOptions, estimate
from planner.memory.training import LoraSpec, TrainingSetup
from planner.models.presets import find_preset
from planner.plans.search import (
    STATUS_NO_FACTORISATION,
    STATUS_NO_FIT,
    STATUS_OK,
    LayoutLimits,
    PlanRequest,
    SearchCancelled,
    divisors,
    enumerate_grid,
    pareto_front,
    search,
)
from planner.stacks import STACKS
from planner.timing.step_time import RECOMPUTE_MODES, TrainingLength

H100 = 'h100-sxm'


def request(model: str = 'llama-3-8b', seq_len: int = 4096, nodes: int = 4, per_node: int = 8,
            batch: int | None = 256, **kw) -> PlanRequest:
    args = {'model': find_preset(model), 'seq_len': seq_len, 'gpu': find_gpu(H100),
            'max_nodes': nodes, 'gpus_per_node': per_node,
            'inter_node': find_interconnect('ib-ndr') if nodes > 1 else None,
            'global_batch': batch, 'length': TrainingLength(tokens=1e11),
            'precision': 'bf16-mixed', 'framework': 'megatron'}
    args.update(kw)
    return PlanRequest(**args)


@pytest.fixture(scope='module')
def result_8b():
    return search(request())


# ---- every candidate is valid and fits ------------------------------------------------------

def test_every_candidate_obeys_the_batch_arithmetic_and_fits(result_8b):
    r, req = result_8b, result_8b.request
    assert r.status == STATUS_OK
    assert r.fitting > 100
    lay, st = r.layout, r.step
    model = req.model
    assert np.all(lay.micro_batch * lay.grad_accum * lay.dp == req.global_batch)
    assert np.all(lay.tp * lay.pp * lay.cp * lay.dp == st.gpus)
    assert np.all(st.gpus == lay.nodes * lay.gpus_per_node)
    assert np.all(lay.nodes <= req.max_nodes)
    assert np.all(lay.tp <= lay.gpus_per_node)
    assert np.all(lay.gpus_per_node <= req.gpus_per_node)
    assert np.all(model.num_heads % lay.tp == 0)
    assert np.all(model.num_kv_heads % lay.tp == 0)
    assert np.all(lay.pp <= model.num_layers)
    assert np.all(model.num_layers % lay.pp == 0)
    assert np.all(lay.pp * lay.vpp <= model.num_layers)
    interleaved = lay.vpp > 1
    assert np.all(lay.pp[interleaved] > 1)
    assert np.all(lay.grad_accum[interleaved] % lay.pp[interleaved] == 0)
    assert np.all(req.seq_len % lay.cp == 0)
    assert np.all((lay.zero == 0) | (lay.dp * lay.cp > 1))
    usable = req.gpu.memory_bytes * (1 - req.margin_fraction)
    assert np.all(r.memory.total_bytes[r.memory_rows] <= usable)
    assert all(c.memory.fits and c.memory.headroom_bytes >= 0 for c in r.top(20))


def test_memory_of_a_candidate_matches_the_single_configuration_estimate(result_8b):
    c = result_8b.best
    setup = TrainingSetup(seq_len=4096, micro_batch=c.micro_batch, grad_accum=c.grad_accum,
                          precision='bf16-mixed', zero=c.zero, tp=c.tp, pp=c.pp, vpp=c.vpp,
                          cp=c.cp, dp=c.dp, recompute=c.recompute, framework='megatron')
    single = estimate(find_preset('llama-3-8b'), setup, find_gpu(H100))
    assert c.memory.total_bytes == single.total_bytes
    assert c.memory.components == single.components
    assert c.memory.phases == single.phases
    assert c.memory.peak_phase == single.peak_phase


def brute_force(req: PlanRequest, batch: int) -> set[tuple[int, ...]]:
    """Every candidate by nested loops, straight from the rules in the search's docstring."""
    model, lim = req.model, req.limits
    packing: dict[int, tuple[int, int]] = {}
    for nodes in range(1, req.max_nodes + 1):
        for per_node in range(1, req.gpus_per_node + 1):
            packing.setdefault(nodes * per_node, (nodes, per_node))
            if packing[nodes * per_node][0] > nodes:
                packing[nodes * per_node] = (nodes, per_node)
    out = set()
    for gpus, (nodes, per_node) in packing.items():
        for tp, pp, cp in itertools.product(range(1, per_node + 1), range(1, gpus + 1),
                                            range(1, gpus + 1)):
            if (per_node % tp or model.num_heads % tp or model.num_kv_heads % tp
                    or model.num_layers % pp or gpus % (tp * pp * cp)):
                continue
            if cp > 1 and (req.seq_len % (2 * cp) or req.seq_len // cp
                           < lim.min_tokens_per_cp_rank):
                continue
            dp = gpus // (tp * pp * cp)
            if batch % dp:
                continue
            for micro in range(1, batch // dp + 1):
                if (batch // dp) % micro:
                    continue
                accum = batch // (dp * micro)
                for vpp in range(1, model.num_layers + 1):
                    if vpp > 1 and (pp == 1 or accum % pp or (model.num_layers // pp) % vpp):
                        continue
                    zeros = [z for z in req.zero_stages if z in STACKS[req.framework].zero_stages]
                    codes = [RECOMPUTE_MODES.index(m) for m in STACKS[req.framework].recompute]
                    for zero, rc in itertools.product(zeros, codes):
                        if zero and dp * cp == 1:
                            continue
                        out.add((nodes, per_node, tp, pp, vpp, cp, dp, micro, accum, zero, rc))
    return out


@given(st.one_of(st.integers(1, 5000), st.integers(1, 2000).map(lambda k: k * k),
                 st.integers(1, 2 ** 40)))
def test_divisors_are_every_divisor_once_ascending(n):
    d = divisors(n)
    assert np.all(n % d == 0)
    assert np.all(np.diff(d) > 0)
    assert d[0] == 1
    assert d[-1] == n
    # divisors pair up as (k, n // k): each one's partner is in the list too
    assert np.array_equal(np.sort(n // d), d)
    if n <= 5000:
        assert d.tolist() == [k for k in range(1, n + 1) if n % k == 0]


def test_the_grid_holds_every_valid_candidate_and_nothing_else():
    req = request('llama-3.2-1b', seq_len=2048, nodes=3, per_node=4, batch=24)
    grid = enumerate_grid(req, 24)
    got = list(zip(grid.nodes, grid.gpus_per_node, grid.tp, grid.pp, grid.vpp, grid.cp, grid.dp,
                   grid.micro_batch, grid.grad_accum, grid.zero, grid.recompute, strict=True))
    assert len(got) == len(set(got))  # no duplicates
    assert {tuple(int(x) for x in row) for row in got} == brute_force(req, 24)


# ---- ranking and the Pareto front -------------------------------------------------------------

def test_pareto_front_has_no_dominated_point(result_8b):
    r = result_8b
    t, gh = r.train.time_to_train_s, r.train.gpu_hours
    front = r.pareto
    assert front.size >= 1
    for i in front:
        dominated = (t <= t[i]) & (gh <= gh[i]) & ((t < t[i]) | (gh < gh[i]))
        assert not dominated.any()
    assert np.all(np.diff(t[front]) > 0)
    assert np.all(np.diff(gh[front]) < 0)
    # every point off the front is dominated by (or equal to) one on it
    off = np.setdiff1d(np.arange(t.size), front)
    beaten = (t[front][:, None] <= t[off]) & (gh[front][:, None] <= gh[off])
    assert beaten.any(axis=0).all()
    assert all(c.on_pareto for c in r.pareto_front())


def test_pareto_front_on_hand_made_points():
    t = np.array([1.0, 2.0, 2.0, 3.0, 1.0, 4.0])
    gh = np.array([5.0, 3.0, 4.0, 3.0, 5.0, 1.0])
    assert pareto_front(t, gh).tolist() == [0, 1, 5]
    assert pareto_front(np.array([]), np.array([])).size == 0


def test_default_ranking_is_by_time_to_train(result_8b):
    top = result_8b.top(10, distinct=False)
    times = [c.time_to_train_s for c in top]
    # sorted, except that times within 0.1 % go to the simpler layout first
    assert all(b >= a * 0.9989 for a, b in itertools.pairwise(times))
    best_time = np.min(result_8b.train.time_to_train_s)
    assert top[0].time_to_train_s <= best_time * 1.001
    assert [c.rank for c in top] == list(range(1, 11))


@pytest.mark.parametrize('sort_by', ['gpus', 'headroom', 'cost'])
def test_other_sort_keys(sort_by):
    r = search(request(sort_by=sort_by))
    top = r.top(5, distinct=False)
    if sort_by == 'gpus':
        assert top[0].gpus == int(r.step.gpus.min())
        assert [c.gpus for c in top] == sorted(c.gpus for c in top)
    elif sort_by == 'headroom':
        headroom = [c.memory.headroom_bytes for c in top]
        assert headroom == sorted(headroom, reverse=True)
        assert headroom[0] >= r.request.gpu.memory_bytes * 0.95 - r.memory.total_bytes.min() - 1
    else:
        assert top[0].gpu_hours <= np.min(r.train.gpu_hours) * 1.001
        assert top[0].cost_usd == pytest.approx(top[0].gpu_hours * r.request.price)


def test_distinct_top_skips_equivalent_variants(result_8b):
    seen = set()
    for c in result_8b.top(10):
        key = (c.gpus, c.tp, c.pp, c.vpp, c.zero, c.recompute, round(c.step_time_s, 6))
        assert key not in seen
        seen.add(key)


# ---- when there is no plan ------------------------------------------------------------------

def test_tokens_that_are_not_whole_sequences_get_the_nearest_batches():
    r = search(request(batch=None, global_batch_tokens=1_000_000))  # 244.14 sequences
    assert r.status == STATUS_NO_FACTORISATION
    assert 'no exact global batch' in r.message
    below, above = r.nearest_global_batches
    assert below is not None
    assert above is not None
    assert below < 1_000_000 / 4096 < above
    for batch in (below, above):
        assert search(request(batch=batch)).status == STATUS_OK
    assert above - below <= 2  # a DP = 1 layout (model parallel only) reaches any batch


def test_no_exact_factorisation_offers_nearest_batches_both_sides():
    limits = LayoutLimits(gpus=(64,), tp=(8,), pp=(1,), cp=(1,))
    r = search(request(nodes=8, batch=100, limits=limits))  # DP = 8 does not divide 100
    assert r.status == STATUS_NO_FACTORISATION
    assert r.nearest_global_batches == (96, 104)
    assert 'nearest global batches with a plan: 96 sequences' in r.message
    assert search(request(nodes=8, batch=104, limits=limits)).status == STATUS_OK
    assert r.top() == []
    assert r.best is None


def test_nothing_fits():
    r = search(request('llama-3.1-405b', nodes=1, per_node=1, batch=8))
    assert r.status == STATUS_NO_FIT
    assert 'fits in' in r.message
    assert r.min_total_bytes > find_gpu(H100).memory_bytes
    assert r.nearest_global_batches == (None, None)


# ---- progress, cancellation, validation --------------------------------------------------------

def test_progress_reports_and_cancellation():
    seen: list[float] = []
    search(request(), progress=seen.append)
    assert seen[0] == 0.0
    assert seen[-1] == 1.0
    assert seen == sorted(seen)
    calls = iter([False, False, True])
    with pytest.raises(SearchCancelled):
        search(request(), should_stop=lambda: next(calls))


@pytest.mark.parametrize(('changes', 'field'), [
    ({'global_batch': None}, '--global-batch'),
    ({'global_batch_tokens': 4096}, '--global-batch'),
    ({'global_batch': 0}, '--global-batch'),
    ({'zero_stages': (4,)}, '--zero'),
    ({'recompute_modes': ('some',)}, '--recompute'),
    ({'precision': 'fp4'}, '--precision'),
    ({'sort_by': 'speed'}, '--sort'),
    ({'margin_fraction': 1.0}, '--margin'),
    ({'price_per_gpu_hour_usd': -1.0}, '--price'),
    ({'inter_node': None}, '--inter-node'),
    ({'seq_len': 0}, '--seq-len'),
])
def test_bad_requests_name_the_field(changes, field):
    with pytest.raises(InputError) as err:
        request(**changes)
    assert err.value.field == field


def test_limits_are_honoured():
    r = search(request(limits=LayoutLimits(max_tp=2, max_pp=2, max_micro_batch=2, cp=(1,))))
    lay = r.layout
    assert lay.tp.max() <= 2
    assert lay.pp.max() <= 2
    assert lay.micro_batch.max() <= 2
    assert np.all(lay.cp == 1)
    with pytest.raises(InputError, match='--max-tp'):
        LayoutLimits(max_tp=0)


def test_request_round_trips_to_json_types():
    req = request()
    d = req.to_dict()
    assert d['global_batch'] == 256
    assert d['gpu'] == H100
    assert d['inter_node'] == 'ib-ndr'
    assert d['recompute_modes'] == list(RECOMPUTE_MODES)
    assert d['price_per_gpu_hour_usd'] == find_gpu(H100).price_per_gpu_hour_usd
    assert MemoryOptions(precision=req.precision).precision == 'bf16-mixed'
    assert math.isfinite(search(req).best.time_to_train_s)


@pytest.mark.parametrize('kw', [{}, {'model': 'gpt2', 'seq_len': 1024, 'nodes': 2},
                                {'precision': 'amp-bf16', 'framework': 'hf', 'batch': 512},
                                {'precision': 'amp-bf16', 'framework': 'hf', 'batch': 64,
                                 'lora': LoraSpec(16, ('q', 'v', 'down'), 4)},
                                {'precision': 'fp32', 'framework': 'hf', 'batch': 64,
                                 'lora': LoraSpec(8, base_bits=32)}])
def test_dropping_layouts_below_the_floor_changes_nothing(monkeypatch, kw):
    """The search skips layouts whose memory floor overflows; without that shortcut it
    must find exactly the same plans, ranking and smallest peak."""
    import planner.plans.request as request_module

    fast = search(request(**kw))
    monkeypatch.setattr(request_module, 'tensor_peak_floor',
                        lambda model, opts, cfg: np.zeros(np.shape(cfg.micro_batch)))
    full = search(request(**kw))
    assert fast.fitting == full.fitting > 0
    assert fast.grid_size == full.grid_size
    assert fast.min_total_bytes == full.min_total_bytes
    assert [c.to_dict() for c in fast.top(30)] == [c.to_dict() for c in full.top(30)]
    assert [c.to_dict() for c in fast.pareto_front()] == [c.to_dict()
                                                          for c in full.pareto_front()]


# ---- LoRA / QLoRA fine-tuning ------------------------------------------------------------------

ALL_LINEAR = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')


def lora_request(lora: LoraSpec | None, **kw) -> PlanRequest:
    """A LoRA request as PEFT runs it: Hugging Face kernels, autocast bf16."""
    return request(**{'precision': 'amp-bf16', 'framework': 'hf', 'batch': 64, 'lora': lora,
                      **kw})


@pytest.mark.parametrize('lora', [LoraSpec(16), LoraSpec(64, ALL_LINEAR, 4),
                                  LoraSpec(8, ('q', 'v'), 8)])
def test_lora_candidates_are_data_parallel_and_their_memory_is_the_single_estimate(lora):
    req = lora_request(lora, nodes=2)
    r = search(req)
    assert r.status == STATUS_OK
    lay = r.layout
    for axis in (lay.tp, lay.pp, lay.vpp, lay.cp):
        assert np.all(axis == 1)
    assert set(np.unique(lay.zero)) == ({0, 1, 2} if lora.base_bits == 8 else {0, 1, 2, 3})
    assert np.all(lay.micro_batch * lay.grad_accum * lay.dp == 64)
    shown = r.top(12)
    assert len({(c.zero, c.recompute, c.micro_batch, c.dp) for c in shown}) == len(shown)
    for c in shown:
        setup = TrainingSetup(seq_len=4096, micro_batch=c.micro_batch, grad_accum=c.grad_accum,
                              zero=c.zero, dp=c.dp, recompute=c.recompute, lora=lora)
        single = estimate(req.model, setup, find_gpu(H100))
        assert c.memory.total_bytes == single.total_bytes
        assert c.memory.components == single.components
        assert c.memory.phases == single.phases
        assert c.memory.peak_phase == single.peak_phase
    assert (r.best.dequant_s > 0) == lora.quantized


def test_lora_grid_is_the_full_grid_restricted_to_data_parallel():
    full = request('llama-3.2-1b', seq_len=2048, nodes=3, per_node=4, batch=24)
    lora = dataclasses.replace(full, framework='hf', precision='amp-bf16', lora=LoraSpec(8))
    full = dataclasses.replace(full, framework='hf-deepspeed', precision='ds-bf16')  # ZeRO 0-3
    rows = {tuple(int(x) for x in row) for row in brute_force(full, 24)
            if row[2] == row[3] == row[4] == row[5] == 1}  # tp, pp, vpp, cp
    grid = enumerate_grid(lora, 24)
    got = {tuple(int(x) for x in row) for row in zip(
        grid.nodes, grid.gpus_per_node, grid.tp, grid.pp, grid.vpp, grid.cp, grid.dp,
        grid.micro_batch, grid.grad_accum, grid.zero, grid.recompute, strict=True)}
    assert got == rows


def test_qlora_plans_where_full_training_and_bf16_lora_do_not_fit():
    """Llama-3.1-70B on one H100: 141 GB of bf16 weights do not fit, 4-bit ones do."""
    kw = {'model': 'llama-3.1-70b', 'seq_len': 2048, 'nodes': 1, 'per_node': 1, 'batch': 16}
    assert search(lora_request(None, **kw)).status == STATUS_NO_FIT
    assert search(lora_request(LoraSpec(16), **kw)).status == STATUS_NO_FIT
    r = search(lora_request(LoraSpec(16, ALL_LINEAR, 4), **kw))
    assert r.status == STATUS_OK
    assert r.best.memory.total_bytes < 0.95 * find_gpu(H100).memory_bytes
    assert r.best.zero == 0
    assert r.best.gpus == 1


def test_lora_nearest_global_batches_have_plans():
    req = lora_request(LoraSpec(16, ALL_LINEAR, 4), nodes=1, per_node=8, batch=63,
                       limits=LayoutLimits(gpus=(8,)))
    r = search(req)
    assert r.status == STATUS_NO_FACTORISATION
    below, above = r.nearest_global_batches
    assert (below, above) == (56, 64)
    for batch in (below, above):
        assert search(dataclasses.replace(req, global_batch=batch)).status == STATUS_OK


@pytest.mark.parametrize(('changes', 'field'), [
    ({'framework': 'megatron'}, '--framework'),
    ({'limits': LayoutLimits(tp=(2,))}, '--tp'),
    ({'limits': LayoutLimits(pp=(2, 4))}, '--pp'),
    ({'limits': LayoutLimits(cp=(2,))}, '--cp'),
    ({'lora': LoraSpec(8, base_bits=8), 'zero_stages': (3,)}, '--zero'),
    ({'lora': 16}, '--lora-rank'),
])
def test_bad_lora_requests_name_the_field(changes, field):
    with pytest.raises(InputError) as err:
        lora_request(**{'lora': LoraSpec(16), **changes})
    assert err.value.field == field


def test_lora_request_to_json():
    d = lora_request(LoraSpec(16, ('q', 'v'), 4)).to_dict()
    m = find_preset('llama-3-8b')
    assert d['lora'] == {'rank': 16, 'targets': ['q', 'v'], 'base_bits': 4,
                         'trainable_parameters': m.num_layers * 16 * (
                             (m.hidden_size + m.q_size) + (m.hidden_size + m.kv_size))}
    assert request().to_dict()['lora'] is None
