"""torchtitan's context parallelism: the ring attention's buffers, against torch's own ring.

``tests.stacks.cp_ring_memory`` runs torch 2.13's ring (torchtitan's ``Attention`` under
``apply_cp_to_attention_module``, a fake process group of 2, 4 and 8 ranks, real CPU
tensors, the profiler's allocations) and reports the bytes one attention holds above its
entry, forward and backward, without the CPU kernels' own workspace and the CPU-only fp32
copies of ``add_`` operands (the module docstring says why). batchfit's terms
(``planner.memory.cp_attention``) must never be below the most loaded rank's, and at most
20 % above it with the ``allgather`` rotate method, torchtitan's default (the ``alltoall``
one is not an input: batchfit counts the larger of the two, so only the lower bound holds
for it). The widest gap measured is +15.5 % (multi-head attention, CP 2, forward: the
alltoall-safe count of three K/V buffers against allgather's two).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.memory.cp_attention import cp_ring_bytes
from planner.memory.peak import estimate
from planner.memory.recipes import RECIPES
from planner.memory.training import TrainingSetup
from planner.models.spec import ModelSpec

pytestmark = [pytest.mark.torch]

ROOT = Path(__file__).resolve().parents[2]
HIGH = 0.20  # at most this much above the measured, torchtitan's default rotate method


def _need_torch() -> None:
    for name in ('torch', 'torchtitan'):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f'not installed: {name}')


@functools.cache
def _measured() -> tuple[dict, ...]:
    """Every configuration of ``cp_ring_memory.DEFAULT_SHAPES``, in a fresh process (the CP
    dispatcher and the CPU flash kernels are process-wide)."""
    out = subprocess.run([sys.executable, '-m', 'tests.stacks.cp_ring_memory', '--json'],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def _spec(shape: dict, ffn: int = 768) -> ModelSpec:
    """The attention measured, as a one-layer Llama (its MLP and vocabulary small)."""
    return ModelSpec('cp-ring', 1, shape['dim'], shape['heads'], shape['kv_heads'],
                     shape['dim'] // shape['heads'], ffn, 256)


def _by_layout() -> dict[tuple, list[dict]]:
    """The measured ranks of each (shape, CP, rotate method)."""
    groups: dict[tuple, list[dict]] = {}
    for row in _measured():
        s = row['shape']
        if s['cp'] > 1:
            key = tuple(sorted((k, v) for k, v in s.items() if k != 'rank'))
            groups.setdefault(key, []).append(row)
    return groups


def _batchfit(shape: dict):
    b, c = shape['batch'], shape['cp']
    return cp_ring_bytes('torchtitan', _spec(shape), RECIPES['fsdp-bf16'], np.float64(b),
                         np.float64(shape['local_tokens'] * c), np.float64(1), np.float64(c))


def test_torch_ring_buffers_are_never_above_batchfits_count():
    _need_torch()
    groups = _by_layout()
    assert len(groups) == 6
    for rows in groups.values():
        shape = rows[0]['shape']
        ring = _batchfit(shape)
        forward = max(r['forward_ring_bytes'] for r in rows)
        backward = max(r['backward_ring_bytes'] for r in rows)
        what = f"CP {shape['cp']} {shape['rotate']} {shape['heads']}/{shape['kv_heads']} heads"
        assert float(ring.forward) >= forward, f'{what}: forward {float(ring.forward)} < {forward}'
        assert float(ring.backward_ring) >= backward, (
            f'{what}: backward {float(ring.backward_ring)} < {backward}')
        if shape['rotate'] == 'allgather':
            assert float(ring.forward) <= (1 + HIGH) * forward, what
            assert float(ring.backward_ring) <= (1 + HIGH) * backward, what


def test_the_ring_grows_with_cp_as_its_gathered_keys_and_values_do():
    """What CP 4 holds beyond CP 2 at the same tokens per rank is the all-gathered K and V
    of two more ranks: 2 x 2 x K bf16 elements (4 MiB at K = 256 Ki elements), measured."""
    _need_torch()
    groups = _by_layout()
    gqa = {rows[0]['shape']['cp']: max(r['backward_ring_bytes'] for r in rows)
           for rows in groups.values()
           if rows[0]['shape']['rotate'] == 'allgather' and rows[0]['shape']['kv_heads'] == 2}
    kv = 2 * 1024 * 128  # batch x local tokens x key/value width
    assert gqa[4] - gqa[2] == 2 * 2 * kv * 2


def test_a_layers_backward_in_the_estimate_holds_the_measured_ring():
    """The estimate of the measured attention as a one-layer torchtitan model, at CP 4:
    the backward temporaries at its peak (a layer's backward) hold at least what torch's
    ring held above the backward's entry. Before the ring was counted the peak was the
    loss's backward (53 MiB of tensors, no backward temporaries at all); now a layer's
    backward (74 MiB, 33 MiB of it the attention's)."""
    _need_torch()
    rows = next(rows for rows in _by_layout().values()
                if rows[0]['shape']['cp'] == 4 and rows[0]['shape']['rotate'] == 'allgather')
    shape = rows[0]['shape']
    setup = TrainingSetup(seq_len=shape['local_tokens'] * 4, micro_batch=shape['batch'], cp=4,
                          framework='torchtitan', precision='fsdp-bf16', zero=3)
    est = estimate(_spec(shape, ffn=256), setup)
    assert est.peak_phase in ('backward_start', 'backward_end')
    assert est.components['backward_temp'] >= max(r['backward_ring_bytes'] for r in rows)
