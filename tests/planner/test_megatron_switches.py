"""Megatron's --tp-comm-overlap and --grad-reduce-in-bf16: what each changes in the time and
memory models, what is refused, and how a plan keeps and exports them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.errors import InputError
from planner.hardware.catalog import find_gpu, find_interconnect
from planner.memory.model_states import stage_params
from planner.memory.peak import estimate
from planner.memory.training import TrainingSetup
from planner.models.presets import find_preset
from planner.plans.request import LayoutLimits, PlanRequest
from planner.plans.search import search
from planner.timing.stack_speed import TP_COMM_OVERLAP
from tests.cli_helpers import run_cli

PLAN = ('plan', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--gpu', 'h100-sxm',
        '--nodes', '2', '--inter-node', 'ib-ndr', '--global-batch', '64', '--tokens', '1B',
        '--top', '1')


def _base(**limits) -> dict:
    return {'model': find_preset('llama-3.1-8b'), 'seq_len': 4096, 'gpu': find_gpu('h100-sxm'),
            'max_nodes': 2, 'gpus_per_node': 8, 'inter_node': find_interconnect('ib-ndr'),
            'global_batch': 64, 'top_k': 1, 'framework': 'megatron', 'zero_stages': (1,),
            'recompute_modes': ('selective',),
            'limits': LayoutLimits(**{'pp': (1,), 'cp': (1,), 'micro_batch': (1,), **limits})}


def test_tp_comm_overlap_hides_its_share_of_the_tp_collectives():
    """On the same layout the switch takes TP_COMM_OVERLAP of the TP collectives' time off
    the step and changes nothing else; at TP 1 there is nothing to hide."""
    off = search(PlanRequest(**_base(tp=(4,)))).best
    on = search(PlanRequest(**_base(tp=(4,)), tp_comm_overlap=True)).best
    assert off is not None
    assert on is not None
    assert (on.tp, on.dp, on.micro_batch) == (off.tp, off.dp, off.micro_batch) == (4, 4, 1)
    tp_off, tp_on = off.step_breakdown_s['tp_comm_s'], on.step_breakdown_s['tp_comm_s']
    assert tp_off > 0
    assert tp_on == pytest.approx((1 - TP_COMM_OVERLAP) * tp_off)
    for part in ('compute_s', 'elementwise_s', 'dp_comm_s', 'optimizer_s'):
        assert on.step_breakdown_s[part] == pytest.approx(off.step_breakdown_s[part])
    assert on.step_time_s < off.step_time_s
    assert on.memory.total_bytes == off.memory.total_bytes  # a time switch only
    # the switch asked for, TP 1 rows (no TP traffic) are timed as without it
    req = PlanRequest(**_base(tp=(1, 2)), tp_comm_overlap=True)
    one = search(PlanRequest(**_base(tp=(1,)))).best
    lay = search(req).layout
    ones = np.flatnonzero(np.asarray(lay.tp) == 1)
    assert ones.size
    plain = PlanRequest(**_base(tp=(1, 2))).step_times(lay.take(ones)).step_time_s
    assert np.allclose(req.step_times(lay.take(ones)).step_time_s, plain)
    assert one is not None


@pytest.mark.parametrize(('change', 'words'), [
    ({'framework': 'torchtitan', 'zero_stages': (3,)}, 'megatron'),
    ({'limits': LayoutLimits(tp=(1,))}, 'TP > 1'),
    ({'limits': LayoutLimits(max_tp=1)}, 'TP > 1'),
    ({'gpus_per_node': 1, 'max_nodes': 16}, 'TP > 1'),
    ({'limits': LayoutLimits(sequence_parallel=False)}, 'sequence parallelism'),
])
def test_tp_comm_overlap_is_refused_where_megatron_refuses_it(change, words):
    """Megatron asserts sequence parallelism with --tp-comm-overlap and turns SP off at
    TP 1 (megatron/training/arguments.py); other stacks have no such switch."""
    with pytest.raises(InputError, match=words) as err:
        PlanRequest(**{**_base(), **change}, tp_comm_overlap=True)
    assert err.value.field == '--tp-comm-overlap'


def test_an_open_search_with_megatron_switches_searches_megatron_only():
    base = {k: v for k, v in _base().items() if k not in ('framework', 'zero_stages')}
    for switch in ('tp_comm_overlap', 'grad_reduce_in_bf16'):
        req = PlanRequest(**base, **{switch: True})
        assert [s.key for s in req.stacks()] == ['megatron']


def _setup(**kw) -> TrainingSetup:
    return TrainingSetup(**{'seq_len': 4096, 'micro_batch': 1, 'dp': 8, 'zero': 1,
                            'framework': 'megatron', 'precision': 'bf16-mixed',
                            'recompute': 'selective', **kw})


@pytest.mark.parametrize('zero', [0, 1])
def test_grad_reduce_in_bf16_halves_the_main_grads_and_adds_the_steps_fp32_copy(zero):
    """A bf16 main-grad buffer: 2 B per parameter instead of 4 in every phase; at the
    optimizer step the optimizer's fp32 copy of the rank's shard (of everything at ZeRO-0:
    megatron/core/optimizer/optimizer.py, distrib_optimizer.py ``.float()``) is there too."""
    m = find_preset('llama-3.1-8b')
    params = stage_params(m, 1, 1, 1, 'first', None)
    n = float(params.trainable_dense + params.trainable_expert)
    off = estimate(m, _setup(zero=zero))
    on = estimate(m, _setup(zero=zero, grad_reduce_in_bf16=True))
    for phase in ('forward_end', 'backward_start', 'backward_end'):
        assert off.phases[phase] - on.phases[phase] == pytest.approx(2 * n, rel=1e-6)
    shard = n / 8 if zero == 1 else n
    assert on.phases['optimizer_step'] - off.phases['optimizer_step'] == pytest.approx(
        -2 * n + 4 * shard, rel=1e-6)
    assert on.total_bytes < off.total_bytes  # the peak is not the optimizer step here


def test_grad_reduce_in_bf16_can_cost_memory_without_sharding():
    """Unsharded (ZeRO-0) the step's fp32 copy (4 B) outweighs the 2 B saved: at the
    optimizer step the switch needs more, not less, so it is never counted as free."""
    m = find_preset('llama-3.2-1b')
    off = estimate(m, _setup(zero=0, dp=1, seq_len=256))
    on = estimate(m, _setup(zero=0, dp=1, seq_len=256, grad_reduce_in_bf16=True))
    assert on.phases['optimizer_step'] > off.phases['optimizer_step']


def test_an_fp16_megatron_buffer_is_copied_to_fp32_at_the_step():
    """Megatron's fp16 main grads are fp16 already: the switch changes nothing there, and
    the optimizer's fp32 copy is counted with or without it."""
    m = find_preset('llama-3.2-1b')
    params = stage_params(m, 1, 1, 1, 'first', None)
    n = float(params.trainable_dense + params.trainable_expert)
    fp16 = estimate(m, _setup(precision='fp16-mixed', seq_len=256))
    assert fp16.phases == estimate(m, _setup(precision='fp16-mixed', seq_len=256,
                                             grad_reduce_in_bf16=True)).phases
    bf16 = estimate(m, _setup(seq_len=256))
    # fp16: grads 2 B, copy 4/8 B; bf16-mixed: grads 4 B, no copy
    assert fp16.phases['optimizer_step'] - bf16.phases['optimizer_step'] == pytest.approx(
        (-2 + 4 / 8) * n, rel=1e-6)


def test_grad_reduce_in_bf16_moves_bf16_gradients():
    """The distributed optimizer reduce-scatters the gradients (4 B -> 2 B) and all-gathers
    the bf16 parameters (2 B): the step's DP traffic goes from 6 to 4 units."""
    off = search(PlanRequest(**_base(tp=(1,)))).best
    on = search(PlanRequest(**_base(tp=(1,)), grad_reduce_in_bf16=True)).best
    assert off is not None
    assert on is not None
    assert (on.tp, on.dp) == (off.tp, off.dp) == (1, 16)
    assert on.memory.total_bytes < off.memory.total_bytes
    assert on.step_breakdown_s['compute_s'] == pytest.approx(off.step_breakdown_s['compute_s'])
    assert on.step_time_s < off.step_time_s


def test_grad_reduce_in_bf16_dp_traffic_is_two_thirds():
    from planner.timing.step_time import LayoutArrays, step_time_arrays

    m = find_preset('llama-3.1-8b')
    lay = LayoutArrays(tp=np.array([1]), pp=np.array([1]), cp=np.array([1]), dp=np.array([16]),
                       micro_batch=np.array([1]), grad_accum=np.array([4]), vpp=np.array([1]),
                       zero=np.array([1]), recompute=np.array([1]), nodes=np.array([2]),
                       gpus_per_node=np.array([8]), sequence_parallel=np.array([True]))
    kw = {'precision': 'bf16-mixed', 'framework': 'megatron'}
    off = step_time_arrays(m, 4096, find_gpu('h100-sxm'), find_interconnect('ib-ndr'), lay, **kw)
    on = step_time_arrays(m, 4096, find_gpu('h100-sxm'), find_interconnect('ib-ndr'), lay,
                          grad_reduce_in_bf16=True, **kw)
    assert float(on.dp_traffic_s[0]) == pytest.approx(float(off.dp_traffic_s[0]) * 4 / 6,
                                                      rel=1e-3)
    assert float(on.optimizer_s[0]) > float(off.optimizer_s[0])  # the fp32 copy's traffic


def test_estimate_takes_grad_reduce_in_bf16_for_megatron_only(capsys):
    args = ('estimate', '--model', 'llama-3.2-1b', '--seq-len', '2048', '--micro-batch', '1',
            '--gpus-per-node', '8', '--zero', '1', '--json')
    code, out, _ = run_cli(capsys, *args, '--framework', 'megatron')
    assert code == 0
    off = json.loads(out)
    code, out, _ = run_cli(capsys, *args, '--framework', 'megatron', '--grad-reduce-in-bf16')
    assert code == 0
    on = json.loads(out)
    assert on['config']['grad_reduce_in_bf16'] is True
    assert off['config']['grad_reduce_in_bf16'] is False
    assert on['memory']['total_bytes'] < off['memory']['total_bytes']
    code, out, _ = run_cli(capsys, *args[:-1], '--framework', 'megatron',
                           '--grad-reduce-in-bf16')
    assert code == 0
    assert 'stack megatron · grad reduce in bf16' in out
    code, _, err = run_cli(capsys, *args, '--framework', 'hf', '--grad-reduce-in-bf16')
    assert code == 2
    assert '--grad-reduce-in-bf16' in err
    assert 'megatron' in err


def test_megatron_switches_end_to_end(capsys, tmp_path):
    """Named in the header, kept by the plan file (and its JSON), shown, and written by the
    Megatron export; a plan without them exports neither (Megatron's defaults)."""
    from planner.planfile.document import read_plan

    path = tmp_path / 'plan.json'
    code, out, err = run_cli(capsys, *PLAN, '--framework', 'megatron', '--zero', '1',
                             '--tp', '2', '--tp-comm-overlap', '--grad-reduce-in-bf16',
                             '--save', str(path))
    assert code == 0, err
    assert 'TP comm overlap · grad reduce in bf16 · ' in out
    c = read_plan(path).constraints
    assert c.tp_comm_overlap
    assert c.grad_reduce_in_bf16
    code, out, _ = run_cli(capsys, 'show', str(path))
    assert code == 0
    assert 'TP comm overlap · grad reduce in bf16 · ' in out
    code, out, _ = run_cli(capsys, 'export', str(path), '--format', 'megatron')
    assert code == 0
    assert '--tp-comm-overlap' in out
    assert '--sequence-parallel' in out
    assert '--grad-reduce-in-bf16' in out
    code, out, _ = run_cli(capsys, *PLAN, '--framework', 'megatron', '--tp', '2',
                           '--tp-comm-overlap', '--json')
    assert code == 0
    request = json.loads(out)['request']
    assert request['tp_comm_overlap'] is True
    assert request['grad_reduce_in_bf16'] is False
    code, _, _ = run_cli(capsys, *PLAN, '--framework', 'megatron', '--save', str(path))
    assert code == 0
    code, out, _ = run_cli(capsys, 'export', str(path), '--format', 'megatron')
    assert code == 0
    assert '--tp-comm-overlap' not in out
    assert '--grad-reduce-in-bf16' not in out


def test_a_tp1_plan_asked_for_tp_comm_overlap_exports_without_it(capsys):
    """Megatron refuses --tp-comm-overlap at TP 1 (SP is off there): a plan that chose TP 1
    exports without it and says why; pinning --tp 1 with the switch is refused."""
    import dataclasses

    from planner.export import ExportOptions, export_plan
    from tests.export_helpers import make_plan

    for tp in (1, 2):
        plan = make_plan(model='llama-3.2-1b', tp=tp, zero=1, framework='megatron')
        plan = dataclasses.replace(plan, constraints=dataclasses.replace(
            plan.constraints, tp_comm_overlap=True))
        text = export_plan(plan, 'megatron').text
        assert ('--tp-comm-overlap' in text) == (tp > 1)
        assert ('TP comm overlap: not written' in text) == (tp == 1)
        # the slurm script runs the same Megatron arguments
        slurm = export_plan(plan, 'slurm', ExportOptions(payload='megatron')).text
        assert ('--tp-comm-overlap' in slurm) == (tp > 1)
    code, _, err = run_cli(capsys, *PLAN, '--framework', 'megatron', '--tp', '1',
                           '--tp-comm-overlap')
    assert code == 2
    assert '--tp-comm-overlap' in err
