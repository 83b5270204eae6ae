"""A candidate's layout at every micro-batch agrees with the search, row for row."""

from __future__ import annotations

import numpy as np
import pytest

from planner.hardware.catalog import find_gpu
from planner.memory.peak import estimate
from planner.memory.training import TrainingSetup
from planner.models.presets import find_preset
from planner.plans.micro_batch_sweep import micro_batch_sweep
from planner.plans.request import PlanRequest
from planner.plans.search import search
from planner.timing.step_time import RECOMPUTE_MODES, TrainingLength


def _request(model: str, seq_len: int, per_node: int, batch: int, **kw) -> PlanRequest:
    return PlanRequest(model=find_preset(model), seq_len=seq_len, gpu=find_gpu('h100-sxm'),
                       max_nodes=1, gpus_per_node=per_node, global_batch=batch,
                       length=TrainingLength(tokens=1e10), **kw)


CASES = {
    'eager 8B, ZeRO': _request('llama-3.1-8b', 4096, 8, 256),
    'Megatron 8B, PP with interleaving': _request('llama-3.1-8b', 2048, 8, 64,
                                                  framework='megatron',
                                                  precision='bf16-mixed'),
    'small model, many micro-batches fit': _request('llama-3.2-1b', 1024, 4, 128),
}


def _rows_of(result, c):
    """The search's rows with candidate ``c``'s layout, whatever their micro-batch."""
    lay, gpus = result.layout, np.asarray(result.step.gpus)
    modes = [k for k, m in enumerate(result.request.plan_modes())
             if (m.stack, m.precision) == (c.framework, c.precision)]
    same = (np.isin(lay.mode, modes) & (lay.ep == c.ep) & (gpus == c.gpus)
            & (lay.tp == c.tp) & (lay.pp == c.pp) & (lay.vpp == c.vpp)
            & (lay.cp == c.cp) & (lay.zero == c.zero)
            & (lay.recompute == RECOMPUTE_MODES.index(c.recompute)))
    return np.flatnonzero(same)


@pytest.mark.parametrize('name', CASES)
def test_the_sweep_is_the_search_at_every_micro_batch(name):
    req = CASES[name]
    result = search(req)
    for c in [*result.top(8), *(c for c in result.top(200) if c.vpp > 1)][:12]:
        sweep = micro_batch_sweep(req, c)
        assert np.all(np.diff(sweep.micro_batch) > 0)
        assert np.all(sweep.micro_batch * sweep.grad_accum * c.dp == c.global_batch)
        here = np.flatnonzero(sweep.micro_batch == c.micro_batch)
        assert here.size == 1
        assert sweep.tokens_per_s[here[0]] == pytest.approx(c.tokens_per_s, rel=1e-12)
        assert sweep.mfu[here[0]] == pytest.approx(c.mfu, rel=1e-12)
        assert sweep.total_bytes[here[0]] == pytest.approx(c.memory.total_bytes, abs=1)
        # the search holds exactly the micro-batches the sweep says fit, at the same speed
        rows = _rows_of(result, c)
        found = dict(zip(np.asarray(result.layout.micro_batch)[rows].tolist(),
                         np.broadcast_to(result.step.tokens_per_s,
                                         np.shape(result.step.gpus))[rows], strict=True))
        fitting = sweep.micro_batch[sweep.fits].tolist()
        assert sorted(found) == fitting
        for micro, tps in zip(sweep.micro_batch, sweep.tokens_per_s, strict=True):
            if micro in found:
                assert tps == pytest.approx(found[micro], rel=1e-12)


def test_a_micro_batch_that_does_not_fit_needs_what_the_estimator_says():
    req = CASES['eager 8B, ZeRO']
    best = search(req).best
    sweep = micro_batch_sweep(req, best)
    too_big = np.flatnonzero(~sweep.fits)
    assert too_big.size  # at s4096 on 80 GB, micro-batch 2 with no recompute does not fit
    i = int(too_big[0])
    setup = TrainingSetup(seq_len=req.seq_len, micro_batch=int(sweep.micro_batch[i]),
                          grad_accum=int(sweep.grad_accum[i]), precision=best.precision,
                          optimizer=req.optimizer, zero=best.zero, tp=best.tp, pp=best.pp,
                          vpp=best.vpp, cp=best.cp, dp=best.dp,
                          sequence_parallel=req.limits.sequence_parallel,
                          recompute=best.recompute, attention=req.attention,
                          framework=best.framework, loss=req.loss, lora=req.lora, ep=best.ep)
    single = estimate(req.model, setup, req.gpu, margin_fraction=req.margin_fraction,
                      overheads=req.overheads)
    assert sweep.total_bytes[i] == pytest.approx(single.total_bytes, rel=1e-9)
    assert not single.fits
    assert sweep.total_bytes[i] > sweep.usable_bytes
