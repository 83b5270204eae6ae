"""Stacks: every candidate is one its stack runs and exports, and the published runs hold."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.cli.main import main
from planner.errors import InputError
from planner.export import export_plan
from planner.hardware.catalog import find_gpu, find_interconnect
from planner.memory.peak import estimate
from planner.memory.training import TrainingSetup
from planner.models.hf_config import spec_from_hf_config
from planner.models.presets import find_preset
from planner.planfile.document import GuidanceInputs, plan_file_from_search
from planner.plans.request import LayoutLimits, PlanRequest
from planner.plans.search import search
from planner.stacks import STACKS
from planner.timing.step_time import TrainingLength
from planner.units import DAY

GIB = 2**30


def _request(model='llama-3.2-1b', nodes=2, batch=64, seq_len=2048, **kw) -> PlanRequest:
    return PlanRequest(model=find_preset(model), seq_len=seq_len, gpu=find_gpu('h100-sxm'),
                       max_nodes=nodes, gpus_per_node=8,
                       inter_node=find_interconnect('ib-ndr') if nodes > 1 else None,
                       global_batch=batch, length=TrainingLength(tokens=1e10), **kw)


def _legal(stack, c) -> None:
    """``c`` is a layout, ZeRO stage, recompute mode and recipe ``stack`` runs."""
    stack.check_layout(tp=c.tp, pp=c.pp, vpp=c.vpp, cp=c.cp, ep=c.ep, zero=c.zero,
                       dp_replicate=c.dp_replicate)
    assert c.recompute in stack.recompute
    assert any(c.zero in m.zero_stages and c.precision == m.precision for m in stack.modes)
    if c.tp > 1:
        assert c.sequence_parallel == stack.sequence_parallel


CASES = {
    'dense': {'model': 'llama-3.2-1b'},
    'moe': {'model': 'qwen1.5-moe-a2.7b', 'nodes': 4, 'batch': 128},
}


@pytest.mark.parametrize('framework', list(STACKS))
@pytest.mark.parametrize('case', CASES)
def test_every_candidate_is_legal_for_its_stack_and_exports_without_refusal(framework, case):
    stack = STACKS[framework]
    req = _request(**CASES[case], framework=framework)
    result = search(req)
    assert result.status == 'ok', result.message
    lay = result.layout
    # every row of the search, not only the shown ones
    assert set(np.unique(lay.mode)) == {0} or len(req.plan_modes()) > 1
    assert all(req.plan_modes()[k].stack == framework for k in np.unique(lay.mode))
    if not stack.pipeline_parallel:
        assert np.all(lay.pp == 1)
    if not stack.tensor_parallel:
        assert np.all(lay.tp == 1)
    if not stack.expert_parallel:
        assert np.all(lay.ep == 1)
    piped = lay.pp > 1
    assert np.all(np.isin(lay.zero[piped], stack.zero_with_pp))
    shown = result.top(8)
    inputs = GuidanceInputs(base_lr=3e-4, base_batch_samples=64.0)
    for i, c in enumerate(shown):
        assert c.framework == framework
        _legal(stack, c)
        plan = plan_file_from_search(req, result, i, model_arg=CASES[case]['model'],
                                     guidance_inputs=inputs)
        assert plan.candidate.framework == framework
        for fmt in stack.launchers:
            exported = export_plan(plan, fmt)  # never refused
            assert exported.text.strip()


@pytest.mark.parametrize('framework', ['megatron', 'torchtitan'])
@pytest.mark.parametrize('vpp', [(1,), (2, 3, 5)])
def test_every_uneven_pipeline_candidate_exports_without_refusal(framework, vpp):
    """--uneven-pipeline: PP sizes that do not divide the 16 layers, with and without
    virtual stages (also more virtual stages than divide a rank's layers)."""
    limits = LayoutLimits(uneven_pipeline=True, pp=(3, 5, 6, 7), vpp=vpp)
    req = _request(nodes=4, batch=120, framework=framework, limits=limits)
    result = search(req)
    assert result.status == 'ok', result.message
    rows = result.top(40, distinct=False)
    layers = req.model.num_layers
    assert rows
    assert all(layers % c.pp for c in rows)
    assert any(layers % (c.pp * c.vpp) for c in rows)
    inputs = GuidanceInputs(base_lr=3e-4, base_batch_samples=64.0)
    for c in rows:
        plan = plan_file_from_search(req, result, model_arg='llama-3.2-1b',
                                     guidance_inputs=inputs, chosen=c)
        assert (plan.candidate.pp, plan.candidate.vpp) == (c.pp, c.vpp)
        assert export_plan(plan, framework).text.strip()  # never refused


def test_with_no_stack_named_the_search_ranks_across_stacks():
    req = _request(nodes=4, batch=128)
    result = search(req)
    seen = {c.framework for c in result.top(200, distinct=False)}
    assert len(seen) >= 3
    for c in result.top(20):
        _legal(STACKS[c.framework], c)
    assert {s.key for s in req.stacks()} == set(STACKS)


def test_ep_is_searched_for_moe_and_changes_the_time():
    req = _request('qwen1.5-moe-a2.7b', nodes=4, batch=128, framework='megatron')
    result = search(req)
    ep = np.asarray(result.layout.ep)
    assert ep.max() > 1
    lay = result.layout
    etp = np.where(lay.etp == 0, lay.tp, lay.etp)
    # experts split over the TP ranks: EP inside dp x cp; whole experts (Megatron's
    # expert tensor parallelism 1): EP folded out of tp x dp x cp
    assert np.all((lay.dp * lay.cp * lay.tp) % (ep * etp) == 0)
    assert np.all(((lay.dp * lay.cp) % ep == 0) | (etp == 1))
    assert np.any((etp == 1) & (lay.tp > 1) & ((lay.dp * lay.cp) % ep != 0))
    split = np.flatnonzero(ep > 1)
    assert np.all(np.asarray(result.step.ep_comm_s)[split] > 0)
    assert np.all(np.asarray(result.step.ep_comm_s)[ep == 1] == 0)


def test_overrides_outside_a_stack_are_refused_naming_the_stack(capsys):
    with pytest.raises(InputError, match='megatron stack does not run amp-bf16'):
        _request(framework='megatron', precision='amp-bf16')
    with pytest.raises(InputError, match='deepspeed stack runs none of ZeRO 2,3'):
        _request(framework='deepspeed', zero_stages=(2, 3))
    with pytest.raises(InputError, match='hf stack runs none of selective'):
        _request(framework='hf', recompute_modes=('selective',))
    with pytest.raises(InputError, match='--pp: the hf-deepspeed stack does not run pp > 1'):
        _request(framework='hf-deepspeed', limits=LayoutLimits(pp=(2,)))
    code = main(['plan', '--model', 'llama-3.2-1b', '--seq-len', '2048', '--gpu', 'h100-sxm',
                 '--global-batch', '64', '--tokens', '1e10', '--framework', 'megatron',
                 '--zero', '3'])
    assert code == 2
    assert 'megatron stack runs none of ZeRO 3 (allowed: 0, 1)' in capsys.readouterr().err


def test_framework_alone_implies_the_stack_recipe():
    for key, stack in STACKS.items():
        req = _request(framework=key)
        assert {m.precision for m in req.plan_modes()} == {m.precision for m in stack.modes}


def test_zero_2_and_3_never_run_with_a_pipeline_where_the_stack_refuses_it():
    for key in ('megatron', 'deepspeed'):
        result = search(_request('llama-3.1-8b', nodes=4, batch=128, framework=key))
        lay = result.layout
        assert np.any(lay.pp > 1)
        assert np.all(lay.zero <= 1)


def test_autocast_copies_are_held_once_whatever_the_micro_batches_in_flight():
    """torch's autocast cache holds one copy per weight (aten/src/ATen/autocast_mode.cpp)."""
    m = find_preset('llama-3.1-8b')
    copies = []
    for accum in (2, 3, 4, 8):  # 2, 3, 4 and 4 micro-batches in flight on the first stage
        setup = TrainingSetup(seq_len=4096, micro_batch=1, grad_accum=accum, pp=4, dp=2,
                              precision='amp-bf16', framework='hf')
        est = estimate(m, setup)
        assert est.peak_phase == 'backward_start'
        copies.append(est.components['autocast_copies'])
    assert copies[0] > 0
    assert len(set(copies)) == 1  # the same copies however many are in flight
    # and none where the weights are already bf16
    for framework, precision in (('torchtitan', 'fsdp-bf16'), ('megatron', 'bf16-mixed'),
                                 ('hf-deepspeed', 'ds-bf16')):
        setup = TrainingSetup(seq_len=4096, micro_batch=1, grad_accum=4, dp=8, zero=3 if
                              framework != 'megatron' else 1, precision=precision,
                              framework=framework)
        assert estimate(m, setup).components.get('autocast_copies', 0) == 0


def test_torchtitan_table_1_fits_a_96_gb_h100_within_10_percent_of_published():
    """pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 1: Llama-3.1-8B,
    FSDP 8, local batch 2, sequence 8192, selective (op) AC: 82.4 GiB reserved. The
    allocator reserve was fitted on Table 3 (128 GPUs); this row was not used to fit."""
    h100_96 = dataclasses.replace(find_gpu('h100-sxm'), memory_bytes=96 * 10**9)
    setup = TrainingSetup(seq_len=8192, micro_batch=2, dp=8, zero=3, recompute='selective',
                          precision='fsdp-bf16', framework='torchtitan')
    est = estimate(find_preset('llama-3.1-8b'), setup, h100_96)
    assert est.fits
    assert est.total_bytes / GIB == pytest.approx(82.4, rel=0.10)
    # and it is what a torchtitan search with the layout pinned reports
    req = PlanRequest(model=find_preset('llama-3.1-8b'), seq_len=8192, gpu=h100_96,
                      max_nodes=1, gpus_per_node=8, global_batch=16, framework='torchtitan',
                      zero_stages=(3,), recompute_modes=('selective',),
                      limits=LayoutLimits(micro_batch=(2,), gpus=(8,), tp=(1,), pp=(1,),
                                          cp=(1,)))
    best = search(req).best
    assert best is not None
    assert best.memory.total_bytes == est.total_bytes


GPT3_CONFIG = {'model_type': 'gpt2', 'n_layer': 96, 'n_embd': 12288, 'n_head': 96,
               'vocab_size': 51200, 'n_positions': 2048, 'activation_function': 'gelu_new',
               'resid_pdrop': 0.0, 'embd_pdrop': 0.0, 'attn_pdrop': 0.0}


def test_gpt3_175b_with_no_flags_plans_a_megatron_class_layout_in_15_to_45_days():
    """Narayanan et al. 2021: GPT-3 175B on 1,536 A100-40GB, batch 1536, 300B tokens, about
    23 days with Megatron (TP8 PP8)."""
    req = PlanRequest(model=spec_from_hf_config(GPT3_CONFIG, name='GPT-3 175B'), seq_len=2048,
                      gpu=find_gpu('a100-40g-sxm'), max_nodes=192, gpus_per_node=8,
                      inter_node=find_interconnect('ib-hdr'), global_batch=1536,
                      length=TrainingLength(tokens=300e9))
    best = search(req).best
    assert best is not None
    assert best.framework in ('megatron', 'deepspeed')
    assert best.tp > 1
    assert best.pp > 1
    assert best.zero <= 1
    assert 15 <= best.time_to_train_s / DAY <= 45


def test_a_setup_with_no_precision_takes_its_stack_recipe():
    for key, stack in STACKS.items():
        for zero in stack.zero_stages:
            setup = TrainingSetup(seq_len=2048, dp=8, zero=zero, framework=key, precision='')
            assert setup.precision == stack.recipe_for(zero)
    assert TrainingSetup(seq_len=2048, dp=8, zero=3, framework='torchtitan',
                         precision='').precision == 'fsdp-bf16'


def test_megatron_overlap_grad_reduce_hides_dp_communication():
    """Megatron exposes the gradient reduce-scatter unless --overlap-grad-reduce is set
    (NVIDIA/Megatron-LM megatron/training/arguments.py); the README's weak-scaling runs set
    it. Asked for, the Megatron stack overlaps as DDP's buckets do; other stacks refuse it."""
    m = find_preset('llama-3.1-8b')
    base = {'model': m, 'seq_len': 4096, 'gpu': find_gpu('h100-sxm'), 'max_nodes': 4,
            'gpus_per_node': 8, 'inter_node': find_interconnect('ib-ndr'), 'global_batch': 32,
            'limits': LayoutLimits(tp=(1,), pp=(1,), cp=(1,), micro_batch=(1,)), 'top_k': 1,
            'framework': 'megatron', 'zero_stages': (1,), 'recompute_modes': ('selective',)}
    off = search(PlanRequest(**base)).best
    on = search(PlanRequest(**base, overlap_grad_reduce=True)).best
    assert off is not None
    assert on is not None
    dp_off, dp_on = off.step_breakdown_s['dp_comm_s'], on.step_breakdown_s['dp_comm_s']
    assert dp_off > 0
    assert dp_on < 0.5 * dp_off
    assert on.step_time_s < off.step_time_s
    with pytest.raises(InputError, match='torchtitan') as err:  # not a torchtitan switch
        PlanRequest(**{**base, 'framework': 'torchtitan', 'zero_stages': (3,)},
                    overlap_grad_reduce=True)
    assert err.value.field == '--overlap-grad-reduce'


def test_overlap_grad_reduce_is_a_megatron_switch_end_to_end(capsys, tmp_path):
    """``--overlap-grad-reduce``: refused for a stack without it, named in the header,
    kept by the plan file and written by the Megatron export (with the parameter-gather
    overlap under the distributed optimizer)."""
    from tests.cli_helpers import run_cli

    base = ('plan', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--gpu', 'h100-sxm',
            '--nodes', '2', '--inter-node', 'ib-ndr', '--global-batch', '64', '--tokens',
            '1B', '--top', '1')
    code, _, err = run_cli(capsys, *base, '--framework', 'torchtitan', '--overlap-grad-reduce')
    assert code == 2
    assert '--overlap-grad-reduce' in err
    assert 'megatron' in err
    path = tmp_path / 'plan.json'
    code, out, _ = run_cli(capsys, *base, '--framework', 'megatron', '--zero', '1',
                           '--overlap-grad-reduce', '--save', str(path))
    assert code == 0
    assert 'overlap grad reduce · ' in out
    code, out, _ = run_cli(capsys, 'show', str(path))
    assert code == 0
    assert 'overlap grad reduce · ' in out
    code, out, _ = run_cli(capsys, 'export', str(path), '--format', 'megatron')
    assert code == 0
    assert '--overlap-grad-reduce' in out
    assert '--overlap-param-gather' in out
    # a plan without the switch exports neither (Megatron's default)
    code, _, _ = run_cli(capsys, *base, '--framework', 'megatron', '--save', str(path))
    code, out, _ = run_cli(capsys, 'export', str(path), '--format', 'megatron')
    assert code == 0
    assert '--overlap-grad-reduce' not in out


def test_megatron_folds_expert_parallelism_out_of_tensor_parallelism(capsys, tmp_path):
    """Megatron-Core forms the expert groups from tp x cp x dp (expert-data-parallel =
    tp*cp*dp / (ep*etp), megatron/core/parallel_state.py): Qwen3-235B-A22B at TP 2, PP 8,
    EP 32 on 256 GPUs (Megatron-Bridge's published layout) needs whole experts (ETP 1),
    since EP 32 exceeds dp x cp = 16."""
    from planner.models.presets import find_preset as preset
    from tests.cli_helpers import run_cli

    m = preset('qwen3-235b-a22b')
    split = TrainingSetup(seq_len=4096, tp=2, pp=8, dp=16, ep=8, zero=1,
                          framework='megatron', precision='bf16-mixed')
    whole = split.with_changes(etp=1)
    a, b = estimate(m, split), estimate(m, whole)
    # the same EP with whole experts: each rank holds twice the expert weights ...
    assert b.components['weights'] > 1.5 * a.components['weights']
    # ... and EP may now reach past dp x cp
    with pytest.raises(InputError):
        estimate(m, split.with_changes(ep=32))
    folded = estimate(m, whole.with_changes(ep=32))
    assert folded.components['weights'] < b.components['weights']
    path = tmp_path / 'plan.json'
    # a plan whose EP (8) exceeds dp x cp (4): only whole experts fold it in
    code, out, _ = run_cli(capsys, 'plan', '--model', 'qwen3-30b-a3b', '--seq-len', '4096',
                           '--gpu', 'h100-sxm', '--nodes', '2', '--inter-node', 'ib-ndr',
                           '--global-batch', '256', '--tokens', '10B', '--framework',
                           'megatron', '--tp', '2', '--pp', '2', '--ep', '8', '--top', '1',
                           '--save', str(path))
    assert code == 0
    assert 'ep8 etp1' in out
    code, out, _ = run_cli(capsys, 'export', str(path), '--format', 'megatron')
    assert code == 0
    assert '--expert-model-parallel-size 8' in out
    assert '--expert-tensor-parallel-size 1' in out
    code, _, err = run_cli(capsys, 'estimate', '--model', 'qwen3-235b-a22b', '--seq-len',
                           '4096', '--micro-batch', '1', '--nodes', '32', '--gpus-per-node',
                           '8', '--tp', '2', '--pp', '8', '--ep', '32', '--etp', '1', '--zero',
                           '3', '--framework', 'torchtitan')
    assert code == 2
    assert '--etp' in err


def test_hf_runs_hsdp_with_fsdp2_only(capsys):
    """The hf stack's FSDP2 mode runs HSDP (accelerate's ParallelismConfig): the search
    adds HSDP rows for its ZeRO 2-3 only (not DDP, not under LoRA, where ZeRO 2-3 may be
    DeepSpeed), hf-deepspeed never; estimate --dp-replicate works for hf ZeRO 2-3 and is
    refused (exit 2, naming the stack and what is allowed) elsewhere."""
    from planner.memory.training import LoraSpec
    from tests.cli_helpers import run_cli

    assert STACKS['hf'].hybrid_shard_stages() == (2, 3)
    assert STACKS['hf'].hybrid_shard_stages(lora=True) == ()
    assert STACKS['torchtitan'].hybrid_shard_stages() == (2, 3)
    assert not any(STACKS[k].hybrid_shard for k in ('hf-deepspeed', 'megatron', 'deepspeed'))
    lay = search(_request('llama-3.1-8b', nodes=4, batch=128, framework='hf')).layout
    replicas = np.asarray(lay.dp_replicate)
    assert replicas.max() > 1
    assert set(np.unique(np.asarray(lay.zero)[replicas > 1])) == {2, 3}
    # every HSDP row is an FSDP row of the same layout with one node per shard group
    shard = lay.dp * lay.cp // replicas
    assert np.all(shard[replicas > 1] == 8)
    # the precision override merges DDP and FSDP into one scored mode: still FSDP rows only
    lay = search(_request('llama-3.1-8b', nodes=4, batch=128, framework='hf',
                          precision='amp-bf16')).layout
    assert np.all(np.asarray(lay.zero)[np.asarray(lay.dp_replicate) > 1] >= 2)
    for kw in ({'framework': 'hf-deepspeed'},
               {'framework': 'hf', 'lora': LoraSpec(16, ('q', 'v'))}):
        lay = search(_request('llama-3.1-8b', nodes=4, batch=128, **kw)).layout
        assert np.asarray(lay.dp_replicate).max() == 1, kw
    one = ('estimate', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--micro-batch', '1',
           '--gpus-per-node', '8', '--framework', 'hf', '--zero', '3')
    code, hsdp_text, _ = run_cli(capsys, *one, '--nodes', '4', '--dp-replicate', '4')
    code8, fsdp_text, _ = run_cli(capsys, *one, '--nodes', '1')
    assert code == code8 == 0
    # the same model states per GPU as plain FSDP2 on the 8 GPUs of one shard group
    lines = [line for line in hsdp_text.splitlines() if 'optimizer states' in line]
    assert lines
    assert lines == [line for line in fsdp_text.splitlines() if 'optimizer states' in line]
    base = ('estimate', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--micro-batch', '1',
            '--nodes', '4', '--gpus-per-node', '8', '--dp-replicate', '4')
    for args, allowed in ((('--framework', 'hf', '--zero', '0'), '1, or --zero 2 or 3'),
                          (('--framework', 'hf-deepspeed', '--zero', '3'), '1'),
                          (('--framework', 'hf', '--zero', '3', '--lora-rank', '16'), '1')):
        code, _, err = run_cli(capsys, *base, *args)
        assert code == 2, args
        assert f'the {args[1]} stack has no HSDP' in err
        assert f'(allowed: {allowed})' in err
    assert 'MiCS' in run_cli(capsys, *base, '--framework', 'hf-deepspeed', '--zero', '3')[2]


def test_hsdp_shards_within_a_replica_and_all_reduces_across():
    """HSDP (torchtitan's data_parallel_replicate_degree): model states are sharded over
    one replica's dp x cp / R ranks, as plain FSDP on that many GPUs; the search offers it
    for torchtitan's FSDP rows only, and its DP time adds a cross-replica all-reduce of
    the shards instead of a network-wide reduce-scatter."""
    m = find_preset('llama-3.1-8b')
    hsdp = TrainingSetup(seq_len=8192, micro_batch=2, dp=32, zero=3, dp_replicate=4,
                         framework='torchtitan', recompute='selective', precision='')
    fsdp8 = hsdp.with_changes(dp=8, dp_replicate=1)
    a, b = estimate(m, hsdp), estimate(m, fsdp8)
    for part in ('weights', 'gradients', 'optimizer_states'):
        assert a.components.get(part, 0) == b.components.get(part, 0), part
    assert a.tensor_peak_bytes == b.tensor_peak_bytes
    with pytest.raises(InputError, match='--dp-replicate'):
        estimate(m, hsdp.with_changes(zero=1, precision=''))
    req = _request('llama-3.1-8b', nodes=4, batch=128, framework='torchtitan')
    lay = search(req).layout
    replicas = np.asarray(lay.dp_replicate)
    assert replicas.max() > 1
    assert np.all(np.asarray(lay.zero)[replicas > 1] >= 2)
    shard = lay.dp * lay.cp // replicas
    assert np.all((shard * lay.tp)[replicas > 1] == lay.gpus_per_node[replicas > 1])
    assert np.asarray(search(_request('llama-3.1-8b', nodes=4, batch=128,
                                      framework='megatron')).layout.dp_replicate).max() == 1
    # On a slow network (25 Gb/s Ethernet a GPU), without overlap: HSDP's all-gathers stay
    # on NVLink and only each GPU's 1/8 shard of the gradient crosses nodes. (On 8 rails of
    # NDR the network ring is about as fast as NVLink, and HSDP's extra all-reduce costs.)
    from planner.timing.step_time import LayoutArrays, StepTimeOptions, step_time_arrays

    def dp_time(r: int) -> float:
        x = np.asarray
        lay = LayoutArrays(nodes=x(4), gpus_per_node=x(8), tp=x(1), pp=x(1), vpp=x(1),
                           cp=x(1), dp=x(32), micro_batch=x(2), grad_accum=x(1), zero=x(3),
                           recompute=x(1), sequence_parallel=x(True), dp_replicate=x(r))
        st = step_time_arrays(m, 8192, find_gpu('h100-sxm'), find_interconnect('eth-25g'),
                              lay, framework='torchtitan', precision='fsdp-bf16',
                              options=StepTimeOptions(dp_overlap=0.0))
        return float(st.dp_comm_s)

    assert dp_time(4) < dp_time(1)


@pytest.mark.parametrize(('framework', 'precision', 'zero'),
                         [('torchtitan', 'fsdp-bf16', 3), ('megatron', 'bf16-mixed', 1)])
@pytest.mark.parametrize(('pp', 'vpp'), [(1, 1), (4, 1), (4, 2)])
def test_half_recompute_keeps_half_the_layers_whole(framework, precision, zero, pp, vpp):
    """``half``: the stage's saved activations are those of its kept layers whole plus a
    checkpoint input for each recomputed one, and its time sits between none and full."""
    from planner.memory.activations import RECOMPUTE_CODES, half_recomputed_layers
    from planner.timing.step_time import LayoutArrays, step_time_arrays

    m = find_preset('llama-3.1-8b')  # 32 layers: chunks of 32, 8 and 4 layers
    by_mode = {}
    for recompute in ('none', 'full', 'half'):
        setup = TrainingSetup(seq_len=4096, micro_batch=1, grad_accum=8, pp=pp, vpp=vpp, dp=2,
                              zero=zero, precision=precision, framework=framework,
                              recompute=recompute)
        axes = {'nodes': 1, 'gpus_per_node': 8, 'tp': 1, 'pp': pp, 'vpp': vpp, 'cp': 1,
                'dp': 2, 'micro_batch': 1, 'grad_accum': 8, 'zero': zero,
                'recompute': RECOMPUTE_CODES[recompute], 'sequence_parallel': False}
        lay = LayoutArrays(**{k: np.asarray(v) for k, v in axes.items()})
        by_mode[recompute] = (estimate(m, setup), step_time_arrays(
            m, 4096, find_gpu('h100-sxm'), None, lay, precision=precision,
            framework=framework))
    layers = m.num_layers // pp
    recomputed = int(half_recomputed_layers(m.num_layers, pp, vpp))
    assert recomputed == layers // 2
    none_layer = by_mode['none'][0].activations_per_layer_bytes
    ckpt_layer = by_mode['full'][0].activations_per_layer_bytes
    fwd_end = {mode: est.phases['forward_end'] for mode, (est, _) in by_mode.items()}
    assert fwd_end['full'] < fwd_end['half'] < fwd_end['none']
    if pp == 1:  # one micro-batch in flight: the layers' saved bytes alone differ
        kept = layers - recomputed
        assert fwd_end['none'] - fwd_end['half'] == pytest.approx(
            layers * none_layer - (kept * none_layer + recomputed * ckpt_layer), rel=1e-6)
    times = {mode: float(t.step_time_s) for mode, (_, t) in by_mode.items()}
    assert times['none'] < times['half'] < times['full']


def test_half_recompute_is_offered_only_where_the_stack_runs_it(capsys):
    for framework in ('hf', 'hf-deepspeed', 'deepspeed'):
        assert 'half' not in STACKS[framework].recompute
        code = main(['estimate', '--model', 'llama-3.1-8b', '--seq-len', '4096',
                     '--micro-batch', '1', '--framework', framework, '--recompute', 'half'])
        assert code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert '--recompute' in err[0]
        assert framework in err[0]
    result = search(_request(model='llama-3.1-8b', framework='torchtitan',
                             recompute_modes=('half',)))
    assert result.best is not None
    assert result.best.recompute == 'half'


def test_a_stack_without_sequence_parallelism_is_estimated_without_it():
    """DeepSpeed's pipeline engine replicates the norms' activations over the TP ranks: the
    plan's memory is that of the same layout estimated with SP off, never with it on."""
    from planner.memory.training import TrainingSetup as Setup

    assert not STACKS['deepspeed'].sequence_parallel
    req = _request(model='llama-3.1-8b', nodes=1, batch=64, seq_len=4096,
                   framework='deepspeed', recompute_modes=('none',),
                   limits=LayoutLimits(tp=(2,), pp=(2,), micro_batch=(1,)))
    best = search(req).best
    assert best is not None
    assert not best.sequence_parallel
    m = find_preset('llama-3.1-8b')
    kwargs = {'seq_len': 4096, 'micro_batch': 1, 'grad_accum': best.grad_accum, 'tp': 2,
              'pp': 2, 'dp': best.dp, 'zero': best.zero, 'framework': 'deepspeed',
              'precision': best.precision}
    no_sp = estimate(m, Setup(**kwargs, sequence_parallel=False))
    asked_sp = estimate(m, Setup(**kwargs, sequence_parallel=True))  # the stack turns it off
    assert best.memory.tensor_peak_bytes == pytest.approx(no_sp.tensor_peak_bytes, rel=1e-9)
    assert asked_sp.tensor_peak_bytes == no_sp.tensor_peak_bytes


def test_partition_activations_splits_deepspeed_checkpoints_over_tp(capsys, tmp_path):
    """DeepSpeed's ``partition_activations``: each recomputed layer keeps 1/t of its input
    and all-gathers it before recomputing (deepspeed/runtime/activation_checkpointing/
    checkpointing.py): less memory, more TP traffic; only the deepspeed stack has it, and
    its export writes it."""
    import json

    from tests.cli_helpers import run_cli

    m = find_preset('llama-3.1-8b')
    kwargs = {'seq_len': 4096, 'micro_batch': 1, 'grad_accum': 8, 'tp': 4, 'dp': 2,
              'zero': 1, 'framework': 'deepspeed', 'precision': 'ds-bf16',
              'recompute': 'full'}
    plain = estimate(m, TrainingSetup(**kwargs))
    split = estimate(m, TrainingSetup(**kwargs, partition_activations=True))
    saved = m.num_layers * 4096 * m.hidden_size * 2  # one micro-batch's bf16 layer inputs
    assert plain.phases['forward_end'] - split.phases['forward_end'] == pytest.approx(
        saved * (1 - 1 / 4), rel=1e-6)
    base = ('plan', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--gpu', 'h100-sxm',
            '--global-batch', '64', '--tokens', '1B', '--tp', '4', '--pp', '2',
            '--micro-batch', '1', '--recompute', 'full', '--top', '1', '--json')
    code, out, _ = run_cli(capsys, *base, '--framework', 'deepspeed')
    assert code == 0
    without = json.loads(out)['candidates'][0]
    path = tmp_path / 'plan.json'
    code, out, _ = run_cli(capsys, *base, '--framework', 'deepspeed', '--partition-activations',
                           '--save', str(path))
    assert code == 0
    with_it = json.loads(out)['candidates'][0]
    assert with_it['memory']['tensor_peak_bytes'] < without['memory']['tensor_peak_bytes']
    assert with_it['step_breakdown_s']['tp_comm_s'] > without['step_breakdown_s']['tp_comm_s']
    code, out, _ = run_cli(capsys, 'export', str(path), '--format', 'deepspeed')
    assert code == 0
    assert json.loads(out)['activation_checkpointing']['partition_activations'] is True
    for framework in ('megatron', 'torchtitan'):
        code, _, err = run_cli(capsys, *base, '--framework', framework,
                               '--partition-activations')
        assert code == 2
        assert '--partition-activations' in err
        assert 'deepspeed' in err
    code, _, err = run_cli(capsys, 'estimate', '--model', 'llama-3.1-8b', '--seq-len', '4096',
                           '--micro-batch', '1', '--gpus-per-node', '8', '--tp', '2',
                           '--framework', 'megatron', '--partition-activations')
    assert code == 2
    assert 'deepspeed' in err


@pytest.mark.parametrize(('framework', 'own_loop'), [('hf', True), ('torchtitan', False),
                                                      ('megatron', False)])
def test_estimate_names_the_loop_the_stack_really_runs(capsys, framework, own_loop):
    """``--loop`` is the user's training loop: it applies to the hf stack only; the other
    stacks' trainers keep only the loss, and the estimate says so."""
    code = main(['estimate', '--model', 'llama-3.1-8b', '--seq-len', '4096',
                 '--micro-batch', '1', '--gpus-per-node', '8', '--framework', framework,
                 '--zero', '3' if framework != 'megatron' else '1'])
    assert code == 0
    out = capsys.readouterr().out
    assert ('loop keep-outputs' in out) == own_loop
    assert ("the stack's own" in out) == (not own_loop)
