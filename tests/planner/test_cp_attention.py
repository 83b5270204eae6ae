"""Context parallelism's ring attention in the memory estimate (planner.memory.cp_attention).

The torchtitan terms are checked against torch's ring on the CPU in
tests/stacks/test_cp_attention_memory.py; these are the properties every CP stack's
estimate keeps, with no torch needed.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.defaults import RECOMPUTE_MODES
from planner.memory.cp_attention import cp_ring_bytes
from planner.memory.peak import ConfigArrays, MemoryOptions, estimate, estimate_arrays
from planner.memory.recipes import RECIPES
from planner.memory.training import TrainingSetup
from planner.models.presets import find_preset

STACK_SETUPS = {
    'torchtitan': {'precision': 'fsdp-bf16', 'zero': 3},
    'megatron': {'precision': 'bf16-mixed', 'zero': 1},
}


@pytest.mark.parametrize('framework', sorted(STACK_SETUPS))
def test_cp_grid_matches_single_configurations(framework):
    """estimate_arrays over CP x recompute x micro-batch gives, cell by cell, what
    estimate() gives alone (the ring's terms are vectorised like the rest)."""
    model = find_preset('llama-3.1-8b')
    base = TrainingSetup(seq_len=65536, framework=framework, dp=2, **STACK_SETUPS[framework])
    cps = (1, 2, 4, 8)
    cfg = ConfigArrays.from_setup(base)
    cfg.cp = np.array(cps)[:, None, None]
    cfg.recompute = np.arange(len(RECOMPUTE_MODES))[None, :, None]
    cfg.micro_batch = np.array([1, 2])[None, None, :]
    grid = estimate_arrays(model, MemoryOptions.from_setup(base), cfg)
    for i, c in enumerate(cps):
        for j, mode in enumerate(RECOMPUTE_MODES):
            for k, b in enumerate((1, 2)):
                one = estimate(model, base.with_changes(cp=c, recompute=mode, micro_batch=b))
                assert float(grid.tensor_peak_bytes[i, j, k]) == pytest.approx(
                    one.tensor_peak_bytes, abs=1)
                for phase, total in one.phases.items():
                    assert float(grid.phase_bytes[phase][i, j, k]) == pytest.approx(total, abs=1)


@pytest.mark.parametrize('framework', sorted(STACK_SETUPS))
def test_a_layers_backward_grows_with_cp_at_the_same_tokens_per_rank(framework):
    """torchtitan's Table 2 layouts (8 GPUs, FSDP x CP, 32k tokens per rank, full
    recompute): the model states shard over dp x cp = 8 and the activations are those of
    CP 1 in every row, but a layer's attention holds more with more ranks (torch's ring:
    the keys and values of all of them; Transformer Engine's: every step's keys, values
    and output in forward, which full recompute re-runs in backward), so the bottom
    layer's backward (``backward_end``) never falls and at CP 8 is above CP 1. Without the
    ring's terms it stayed where CP 1 had it."""
    model = find_preset('llama-3.1-8b')
    ends = []
    for c in (1, 2, 4, 8):
        setup = TrainingSetup(seq_len=32768 * c, cp=c, dp=8 // c, recompute='full',
                              framework=framework, **STACK_SETUPS[framework])
        ends.append(estimate(model, setup).phases['backward_end'])
    assert ends[0] < ends[1] <= ends[2] < ends[3]


def test_no_ring_without_cp():
    model = find_preset('llama-3.1-8b')
    one = np.float64(1)
    for stack in ('torchtitan', 'megatron', 'hf'):
        ring = cp_ring_bytes(stack, model, RECIPES['bf16-mixed'], one, np.float64(8192), one,
                             one)
        assert float(ring.forward) == float(ring.backward) == 0.0


def test_the_torch_ring_holds_every_ranks_keys_and_values():
    """Llama-3.1-8B at 262,144 tokens over CP 8 (torchtitan's Table 2 layout): the gathered
    K and V alone are 1 GiB a layer-call (2 x 262,144 x 1,024 bf16 elements); the forward
    and backward hold more (fp32 merges, dQ/dK/dV accumulators)."""
    model = find_preset('llama-3.1-8b')
    ring = cp_ring_bytes('torchtitan', model, RECIPES['fsdp-bf16'], np.float64(1),
                         np.float64(262144), np.float64(1), np.float64(8))
    gathered = 2 * 262144 * 1024 * 2
    assert gathered == 2**30
    assert float(ring.forward) > gathered
    assert float(ring.backward) > gathered
