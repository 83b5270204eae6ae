"""torch's pipeline schedules: the ported action orders, the simulated bubble and
in-flight micro-batches, and torchtitan's zero-bubble switch end to end."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from planner.memory.peak import ConfigArrays, _inflight
from planner.stacks import pipeline_schedule as ps

GRID = [(p, v, k * p) for p in (2, 3, 4, 6, 8) for v in (2, 3, 4) for k in (1, 2, 3)]


def _torch_orders(cls, p: int, v: int, m: int) -> list[list[tuple[int, str, int]]]:
    """torch's own per-rank order, from its generator on a bare schedule object (no
    stages, no process group)."""
    from torch.distributed.pipelining import schedules as s

    o = object.__new__(cls)
    o.pp_group_size, o.n_local_stages, o._n_microbatches = p, v, m
    o.number_of_rounds = max(1, m // p)
    o.microbatches_per_round = m // o.number_of_rounds
    kinds = {s._ComputationType.FORWARD: ps.F, s._ComputationType.FULL_BACKWARD: ps.FULL,
             s._ComputationType.BACKWARD_INPUT: ps.B, s._ComputationType.BACKWARD_WEIGHT: ps.W}
    return [[(a.stage_index, kinds[a.computation_type], a.microbatch_index)
             for a in o._calculate_single_rank_operations(r) if a is not None]
            for r in range(p)]


@pytest.mark.parametrize(('name', 'cls'), [
    (ps.SCHEDULE_INTERLEAVED_1F1B, 'ScheduleInterleaved1F1B'),
    (ps.SCHEDULE_INTERLEAVED_ZB, 'ScheduleInterleavedZeroBubble')])
def test_ported_orders_are_torchs(name, cls):
    schedules = pytest.importorskip('torch.distributed.pipelining.schedules')
    for p, v, m in [*GRID, (4, 2, 1), (4, 2, 3), (4, 2, 5), (8, 3, 10)]:
        if m % max(1, m // p):
            continue  # torch refuses these (and so does the search)
        assert ps.rank_orders(name, p, v, m) == _torch_orders(getattr(schedules, cls), p, v, m)


def test_simulated_1f1b_bubbles_are_the_p_minus_1_over_v_formula():
    for p, v, m in GRID:
        f, w = 0.3, 0.3
        assert ps.bubble_fraction(ps.SCHEDULE_1F1B, p, 1, m, f, w) == pytest.approx(p - 1)
        assert ps.bubble_fraction(ps.SCHEDULE_INTERLEAVED_1F1B, p, v, m, f, w) \
            == pytest.approx((p - 1) / v)


# B holds the same GEMMs as W plus the attention core's backward: B >= W
@pytest.mark.parametrize(('f', 'w'), [(f, w) for f in (0.2, 0.3, 1 / 3, 0.45)
                                      for w in (0.1, 0.25, 1 / 3) if 1 - f - w >= w])
def test_zero_bubble_closed_form_is_the_simulation_and_smaller_than_1f1b(f, w):
    for p, v, m in GRID:
        sim = ps.bubble_fraction(ps.SCHEDULE_INTERLEAVED_ZB, p, v, m, f, w)
        closed = float(ps.zero_bubble_fraction(np.asarray(p), np.asarray(v), f, w))
        assert closed == pytest.approx(sim, abs=1e-9)
        assert closed < (p - 1) / v  # strictly smaller for p > 1


def test_zero_bubble_inflight_from_torchs_order():
    """Held until W: rank 0 peaks at p micro-batches (p·v chunks), never fewer than 1F1B's
    min(m, p), and no rank holds more than rank 0; interleaved 1F1B's count is the memory
    model's formula."""
    for p, v, m in [*GRID, (4, 2, 2), (8, 2, 4)]:
        zb = ps.inflight_microbatches(ps.SCHEDULE_INTERLEAVED_ZB, p, v, m)
        assert zb == float(ps.zero_bubble_inflight(np.asarray(p), np.asarray(m)))
        assert zb >= ps.inflight_microbatches(ps.SCHEDULE_1F1B, p, 1, m) == min(m, p)
        for order in ps.rank_orders(ps.SCHEDULE_INTERLEAVED_ZB, p, v, m)[1:]:
            held = np.cumsum([1 if k == ps.F else -1 if k == ps.W else 0 for _, k, _ in order])
            assert held.max() / v <= zb
        cfg = ConfigArrays(seq_len=np.asarray(4096), micro_batch=np.asarray(1),
                           grad_accum=np.asarray(m), tp=np.asarray(1), pp=np.asarray(p),
                           vpp=np.asarray(v), cp=np.asarray(1), ep=np.asarray(1),
                           dp=np.asarray(1), zero=np.asarray(3), offload=np.asarray(0),
                           recompute=np.asarray(0), sequence_parallel=np.asarray(False),
                           etp=np.asarray(1), dp_replicate=np.asarray(1))
        assert float(_inflight(cfg)) == ps.inflight_microbatches(
            ps.SCHEDULE_INTERLEAVED_1F1B, p, v, m)
        assert float(_inflight(cfg, zero_bubble=True)) == zb


def test_schedule_names_are_torchs():
    names = {ps.schedule_name(8, 1, True), ps.schedule_name(8, 2, True),
             ps.schedule_name(8, 2, False), ps.schedule_name(8, 1, False)}
    assert names == {'1F1B', 'InterleavedZeroBubble', 'Interleaved1F1B'}
    schedules = pytest.importorskip('torch.distributed.pipelining.schedules')
    for name in names:
        assert schedules.get_schedule_class(name).__name__.lower().endswith(name.lower())


_BASE = ('plan', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--gpu', 'h100-sxm',
         '--nodes', '2', '--global-batch', '64', '--tokens', '1B', '--tp', '2', '--pp', '4',
         '--micro-batch', '1', '--recompute', 'none', '--top', '1', '--json')


def test_zero_bubble_switch_end_to_end(capsys, tmp_path):
    """torchtitan's switch: a smaller bubble and step where vpp > 1 (and no change at vpp
    1), fewer micro-batches in flight than interleaved 1F1B, the plan file keeps it and
    the export names torch's schedule."""
    from planner.planfile.document import read_plan
    from tests.cli_helpers import run_cli

    rows = {}
    for vpp in ('1', '2'):
        for zb in ((), ('--zero-bubble',)):
            path = tmp_path / f'plan-{vpp}-{len(zb)}.json'
            code, out, _ = run_cli(capsys, *_BASE, '--framework', 'torchtitan', '--vpp', vpp,
                                   *zb, '--save', str(path))
            assert code == 0
            rows[vpp, bool(zb)] = json.loads(out)['candidates'][0], path
    (plain, _), (zb1, _) = rows['1', False], rows['1', True]
    assert zb1['step_breakdown_s']['bubble_s'] == plain['step_breakdown_s']['bubble_s']
    (inter, _), (zb2, path) = rows['2', False], rows['2', True]
    assert (zb2['grad_accum'], zb2['vpp']) == (inter['grad_accum'], 2)
    assert 0 < zb2['step_breakdown_s']['bubble_s'] < inter['step_breakdown_s']['bubble_s']
    assert zb2['step_time_s'] < inter['step_time_s']
    assert zb2['memory']['tensor_peak_bytes'] < inter['memory']['tensor_peak_bytes']
    plan = read_plan(path)
    assert plan.constraints.zero_bubble
    code, out, _ = run_cli(capsys, 'export', str(path), '--format', 'torchtitan')
    assert code == 0
    assert "pipeline_parallel_schedule = 'InterleavedZeroBubble'" in out \
        or 'pipeline_parallel_schedule = "InterleavedZeroBubble"' in out
    saved = json.loads(path.read_text())
    saved['constraints'].pop('zero_bubble')  # optional in the file: absent is off
    path.write_text(json.dumps(saved))
    assert not read_plan(path).constraints.zero_bubble
    off = dataclasses.replace(plan, constraints=dataclasses.replace(plan.constraints,
                                                                     zero_bubble=False))
    from planner.export import export_plan

    assert 'Interleaved1F1B' in export_plan(off, 'torchtitan').text


def test_zero_bubble_is_refused_by_other_stacks_and_with_compile(capsys):
    from tests.cli_helpers import run_cli

    for framework in ('megatron', 'deepspeed', 'hf'):
        code, _, err = run_cli(capsys, *_BASE, '--framework', framework, '--zero-bubble')
        assert code == 2
        assert '--zero-bubble' in err
        assert framework in err
        assert 'torchtitan' in err
    code, _, err = run_cli(capsys, *_BASE, '--framework', 'torchtitan', '--zero-bubble',
                           '--compile')
    assert code == 2
    assert 'compile' in err


def test_estimate_takes_the_switch_for_torchtitan_only(capsys):
    from tests.cli_helpers import run_cli

    base = ('estimate', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--micro-batch', '1',
            '--gpus-per-node', '8', '--tp', '2', '--pp', '4', '--vpp', '2', '--grad-accum',
            '8', '--zero', '3', '--json')
    peaks = []
    for zb in ((), ('--zero-bubble',)):
        code, out, _ = run_cli(capsys, *base, '--framework', 'torchtitan', *zb)
        assert code == 0
        peaks.append(json.loads(out)['memory']['tensor_peak_bytes'])
    assert peaks[1] < peaks[0]  # p micro-batches in flight instead of p + (p-1)/v
    code, _, err = run_cli(capsys, *base, '--framework', 'megatron', '--zero-bubble')
    assert code == 2
    assert 'torchtitan' in err
