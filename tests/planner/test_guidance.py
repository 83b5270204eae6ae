"""Batch-size and learning-rate guidance (McCandlish et al. 2018; DeepSeek LLM 2024)."""

from __future__ import annotations

import math

import pytest

from planner.errors import InputError
from planner.models.spec import ModelSpec
from planner.plans.guidance import (
    advise,
    data_factor,
    deepseek_compute_flops,
    deepseek_optimal_batch_tokens,
    deepseek_optimal_lr,
    scale_learning_rate,
    steps_factor,
    suggest_warmup_steps,
    time_to_same_loss_ratio,
)
from planner.timing.efficiency import attainable_fraction, default_curve, matmul_efficiency

# DeepSeek LLM 7B: L30, h4096, 32 heads, f11008, V102400, s4096, trained on 2T tokens.
DEEPSEEK_7B = ModelSpec('DeepSeek-LLM-7B', 30, 4096, 32, 32, 128, 11008, 102400)


def test_deepseek_7b_example():
    """C ~ 8.5e22 -> B_opt ~ 9.2M tokens, eta_opt ~ 4.2e-4 (DeepSeek LLM, arXiv 2401.02954)."""
    compute = deepseek_compute_flops(DEEPSEEK_7B, 4096, 2e12)
    assert compute == pytest.approx(8.5e22, rel=0.01)
    assert deepseek_optimal_batch_tokens(compute) == pytest.approx(9.2e6, rel=0.01)
    assert deepseek_optimal_lr(compute) == pytest.approx(4.2e-4, rel=0.02)


def test_learning_rate_rules():
    adam = scale_learning_rate(3e-4, 512, 2048, 'adamw')
    assert adam.ratio == 4
    assert adam.linear == pytest.approx(1.2e-3)  # Goyal et al.: x kappa
    assert adam.square_root == pytest.approx(6e-4)  # sqrt(kappa)
    assert adam.adam_sde == pytest.approx(6e-4)  # Malladi et al.: B x kappa -> LR x sqrt(kappa)
    assert adam.recommended == adam.adam_sde
    assert 'Malladi' in adam.rule
    sgd = scale_learning_rate(0.1, 256, 8192, 'sgd-momentum')
    assert sgd.recommended == pytest.approx(3.2)
    assert 'Goyal' in sgd.rule
    assert sgd.noise_scale is None
    with pytest.raises(InputError, match='--base-lr'):
        scale_learning_rate(0.0, 256, 512)
    with pytest.raises(InputError, match='--base-batch'):
        scale_learning_rate(1e-3, 0, 512)


def test_noise_scale_rule_is_linear_below_and_flat_above_b_noise():
    lr0, b0, noise = 1e-3, 10.0, 1e6
    small = scale_learning_rate(lr0, b0, 20.0, 'sgd', noise)
    assert small.noise_scale == pytest.approx(2 * lr0, rel=1e-4)  # B << B_noise: linear
    huge = scale_learning_rate(lr0, b0, 1e12, 'sgd', noise)
    assert huge.noise_scale == pytest.approx(lr0 * (1 + noise / b0), rel=1e-4)  # eps_max


def test_mccandlish_trade_off():
    noise = 4e6
    for batch in (1e5, 4e6, 3e7):
        s, e = steps_factor(batch, noise), data_factor(batch, noise)
        assert (s - 1) * (e - 1) == pytest.approx(1.0)
    assert steps_factor(noise, noise) == 2
    assert data_factor(noise, noise) == 2
    # same step time, 4x the batch past B_noise: less than 4x fewer steps
    assert time_to_same_loss_ratio(1.0, 4 * noise, 1.0, noise, noise) == pytest.approx(1.25 / 2)
    # 4x the batch at 4x the step time (same GPUs) is slower to the same loss
    assert time_to_same_loss_ratio(4.0, 4 * noise, 1.0, noise, noise) > 1


def test_batch_well_above_critical_is_flagged():
    g = advise(DEEPSEEK_7B, 4096, 16384, total_tokens=2e12)  # 67M tokens vs B_opt 9.2M
    assert g.critical_batch_tokens == pytest.approx(9.22e6, rel=0.01)
    assert 'DeepSeek' in g.critical_batch_source
    assert any('more GPUs, little speed-up' in w for w in g.warnings)
    given = advise(DEEPSEEK_7B, 4096, 1024, total_tokens=2e12, b_noise_tokens=1e6)
    assert given.critical_batch_tokens == 1e6
    assert '--b-noise' in given.critical_batch_source
    assert any('critical batch' in w for w in given.warnings)
    fine = advise(DEEPSEEK_7B, 4096, 2304, total_tokens=2e12)  # DeepSeek's own choice
    assert fine.warnings == ()
    table = {round(p.batch_tokens / fine.global_batch_tokens, 2): p for p in fine.batch_table}
    assert table[1.0].relative_steps == 1
    assert table[2.0].relative_steps < 1
    assert table[2.0].relative_tokens > 1


def test_small_micro_batch_and_deep_accumulation_are_flagged():
    g = advise(DEEPSEEK_7B, 4096, 2048, micro_batch=1, grad_accum=256, pp=4,
               efficiency_fraction=0.5, gemm_flops=2e9, step_time_s=90.0)
    assert len(g.warnings) == 2
    assert 'micro-batch 1' in g.warnings[0]
    assert '50%' in g.warnings[0]
    assert '256 micro-batches' in g.warnings[1]
    ok = advise(DEEPSEEK_7B, 4096, 2048, micro_batch=4, grad_accum=16, pp=4,
                efficiency_fraction=0.95)
    assert ok.warnings == ()
    assert ok.critical_batch_tokens is None


@pytest.mark.parametrize('framework', ['hf', 'megatron'])
def test_the_framework_is_not_blamed_on_the_micro_batch(framework):
    """Eager PyTorch runs Hopper at 0.61 of the curve whatever the GEMM size; only the
    part a larger GEMM could win counts against the micro-batch."""
    curve = default_curve('hopper')
    big = 1e4 * curve.half_gemm_flops  # GEMMs this large attain the curve's maximum
    eta = float(matmul_efficiency('hopper', big, framework=framework))
    assert attainable_fraction(eta, 'hopper', framework) == pytest.approx(1, rel=1e-3)
    half = float(matmul_efficiency('hopper', curve.half_gemm_flops, framework=framework))
    assert attainable_fraction(half, 'hopper', framework) == pytest.approx(0.5)


def test_learning_rate_in_the_advice():
    g = advise(DEEPSEEK_7B, 4096, 2048, total_tokens=2e12, base_lr=4.2e-4,
               base_batch_samples=2304, optimizer='adamw')
    assert g.learning_rates.recommended == pytest.approx(4.2e-4 * math.sqrt(2048 / 2304))
    assert g.deepseek_lr == pytest.approx(4.25e-4, rel=0.01)
    with pytest.raises(InputError, match='--base-lr'):
        advise(DEEPSEEK_7B, 4096, 2048, base_lr=1e-3)
    with pytest.raises(InputError, match='--b-noise'):
        advise(DEEPSEEK_7B, 4096, 2048, b_noise_tokens=-1.0)
    as_json = g.to_dict()
    assert as_json['learning_rates']['rule'].startswith('square-root')
    assert isinstance(as_json['batch_table'], list)
    assert isinstance(as_json['warnings'], list)


def test_warmup_keeps_tokens_and_is_capped():
    steps, note = suggest_warmup_steps(4e6, total_steps=1e5, base_warmup_steps=2000,
                                       base_batch_tokens=1e6)
    assert steps == 500
    assert 'kept in tokens' in note
    steps, note = suggest_warmup_steps(1e6, total_steps=1e5)
    assert steps == 375
    assert 'GPT-3' in note
    steps, note = suggest_warmup_steps(1e6, total_steps=100)
    assert steps == 10
    assert 'capped' in note
