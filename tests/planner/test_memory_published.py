"""The memory estimator against published figures (each test names its paper and table)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.memory.activations import megatron_layer_terms
from planner.memory.model_states import StageParams, model_state_bytes
from planner.memory.recipes import OPTIMIZERS, RECIPES
from planner.models.spec import ModelSpec

GIB = 2**30


def _states(params: float, recipe: str, zero: int, dp: int, framework: str = 'megatron'):
    p = np.asarray(float(params))
    zero_ = np.zeros(())
    stage = StageParams(dense=p, expert=zero_, matmul=p, trainable_dense=p,
                        trainable_expert=zero_, top_unit=zero_, bottom_unit=zero_, layer=zero_,
                        layers=zero_, layer_matmul=zero_, head_matmul=zero_, embedding=zero_,
                        layer_out_proj=zero_)
    ms = model_state_bytes(_megatron_gpt(64, 6144, 48), RECIPES[recipe], OPTIMIZERS['adamw'],
                           params=stage, dp=np.asarray(dp), cp=np.asarray(1), ep=np.asarray(1),
                           zero=np.asarray(zero), offload=np.asarray(0), framework=framework,
                           foreach=False, lora=None, prefetch_layers=0)
    return float(ms.weights + ms.gradients + ms.optimizer_states)


@pytest.mark.parametrize(('dp', 'expected_gb'), [
    (64, (120, 31.4, 16.6, 1.9)),   # ZeRO paper Figure 1
    (4, (120, 52.5, 41.25, 30)),    # Table 1
    (16, (120, 35.6, 21.6, 7.5)),
    (1024, (120, 30.1, 15.1, 0.12)),
])
def test_zero_paper_model_states(dp, expected_gb):
    """7.5B parameters, K = 12 (fp16 mixed precision with Adam), stages 0-3."""
    for zero, expected in enumerate(expected_gb):
        got = _states(7.5e9, 'fp16-mixed', zero, dp) / 1e9
        # The paper rounds to 0.1 GB (0.01 for the smallest).
        assert got == pytest.approx(expected, abs=0.051 if expected > 1 else 0.006), zero


@pytest.mark.parametrize(('recipe', 'unsharded', 'sharded'), [
    ('bf16-mixed', 6, 12),   # Megatron distributed optimizer: 18 -> 6 + 12/d
    ('fp32', 8, 8),          # 16 -> 8 + 8/d
])
def test_megatron_distributed_optimizer(recipe, unsharded, sharded):
    d = 8
    assert _states(1e9, recipe, 1, d) == pytest.approx((unsharded + sharded / d) * 1e9)


def _megatron_gpt(a, h, layers) -> ModelSpec:
    return ModelSpec(f'megatron-{h}', layers, h, a, a, h // a, 4 * h, 51200, gated_mlp=False,
                     activation='gelu', tied_embeddings=True, position_embedding='learned',
                     max_position_embeddings=2048, norm='layernorm', qkv_bias=True,
                     attn_out_bias=True, mlp_bias=True, attention_dropout=0.1,
                     hidden_dropout=0.1)


# Korthikanti et al. 2022, Figure 1 (GiB per GPU): a, h, L, p, v, b, params+optimizer,
# activations with TP only, activations with SP + selective recompute.
KORTHIKANTI = {
    '22B': (64, 6144, 48, 1, 1, 4, 45.5625, 59.25, 9.5625),
    '175B': (96, 12288, 96, 8, 3, 1, 45.5625, 66.84375, 12.3515625),
    '530B': (128, 20480, 105, 35, 3, 1, 31.640625, 114.0234375, 23.076171875),
    '1T': (160, 25600, 128, 64, 1, 1, 32.958984375, 131.25, 26.5625),
}


@pytest.mark.parametrize('name', list(KORTHIKANTI))
def test_korthikanti_figure1(name):
    """Activations per GPU at t = 8, to 0.1 GiB, from the Megatron accounting."""
    a, h, layers, p, v, b, states_gib, tp_only, sp_sel = KORTHIKANTI[name]
    model = _megatron_gpt(a, h, layers)
    t = 8
    interleave = 1 + (p - 1) / (p * v) if v > 1 else 1.0
    for recompute, sp, expected in (('none', False, tp_only), ('selective', True, sp_sel)):
        per_layer = megatron_layer_terms(model, RECIPES['bf16-mixed'], 'eager', recompute).bytes(
            np.asarray(b), np.asarray(2048), np.asarray(t), np.asarray(1), np.asarray(sp), h, a)
        assert float(per_layer) * layers * interleave / GIB == pytest.approx(expected, abs=0.1)
    # Model states: 18 B x 12Lh^2/(t·p), the paper leaves the embedding out.
    states = _states(12 * layers * h * h / (t * p), 'bf16-mixed', 0, 1)
    assert states / GIB == pytest.approx(states_gib, abs=0.1)


def test_korthikanti_figure7_ratios():
    """Activation reductions relative to the TP baseline (Figure 7), within 1 point."""
    model = _megatron_gpt(64, 6144, 48)  # 22B
    r = RECIPES['bf16-mixed']

    def act(recompute, sp):
        return float(megatron_layer_terms(model, r, 'eager', recompute).bytes(
            np.asarray(4), np.asarray(2048), np.asarray(8), np.asarray(1), np.asarray(sp),
            6144, 64))

    base = act('none', False)
    assert 100 * act('none', True) / base == pytest.approx(66.84, abs=1)
    assert 100 * act('selective', False) / base == pytest.approx(49.42, abs=1)
    assert 100 * act('selective', True) / base == pytest.approx(16.18, abs=1)
