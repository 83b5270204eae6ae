"""The fit machinery on synthetic timings (no torch): Theil-Sen, depth, step model, links."""

from __future__ import annotations

import numpy as np
import pytest

from planner.calibrate.fit import (
    StepPoint,
    bus_bandwidth,
    extrapolate_depth,
    fit_latency_bandwidth,
    fit_step_time,
    largest_fitting_micro_batch,
    planner_terms,
    predict_step_time,
    theil_sen,
)
from planner.calibrate.records import PROBE_LOOP
from planner.hardware.catalog import find_gpu
from planner.memory.peak import Overheads, estimate
from planner.memory.training import TrainingSetup
from planner.models.presets import find_preset
from planner.timing.efficiency import CalibrationProfile
from planner.timing.step_time import StepTimeOptions
from tests.planner.calibration_helpers import TINY


def test_theil_sen_ignores_one_outlier():
    x = np.arange(1.0, 9.0)
    y = 8.1 + 19.2 * x
    y[5] *= 4.7  # a noisy neighbour's round (CALIBRATION.md §6)
    intercept, slope = theil_sen(x, y)
    assert slope == pytest.approx(19.2)
    assert intercept == pytest.approx(8.1)
    ls_slope = np.polyfit(x, y, 1)[0]
    assert abs(ls_slope - 19.2) > 5  # least squares is pulled away


def test_theil_sen_degenerate_inputs():
    assert theil_sen([2.0, 2.0], [1.0, 3.0]) == (2.0, 0.0)  # one distinct x
    assert theil_sen([1.0], [5.0]) == (5.0, 0.0)
    with pytest.raises(ValueError, match='non-empty'):
        theil_sen([], [])


def test_extrapolate_depth_separates_fixed_and_per_layer():
    fixed, per_layer, full = extrapolate_depth({1: 3.0, 2: 5.0}, full_layers=32)
    assert (fixed, per_layer, full) == pytest.approx((1.0, 2.0, 65.0))
    assert extrapolate_depth({2: 4.0}, 8) == pytest.approx((0.0, 2.0, 16.0))
    with pytest.raises(ValueError, match='at least one depth'):
        extrapolate_depth({}, 8)


def _cpu_like_gpu():
    return find_gpu('h100-sxm')


def _synthetic(model, gpu, eta, overhead_s, points):
    """Step times the planner itself predicts with efficiency eta and a fixed overhead."""
    profile = CalibrationProfile('gemm_flops', ((1.0, eta),))
    options = StepTimeOptions(step_overhead_s=overhead_s)
    return [predict_step_time(model, s, b, gpu, 'amp-bf16', 'flash', profile, options)
            for b, s in points]


def test_fit_recovers_injected_efficiency_and_overhead_from_one_micro_batch():
    model = find_preset('llama-3.2-1b')
    gpu = _cpu_like_gpu()
    eta, overhead = 0.42, 0.015
    floor, b0 = (1, 16), (2, 2048)
    t_floor, t0 = _synthetic(model, gpu, eta, overhead, [floor, b0])

    def point(b, s, t, for_eff):
        # Split the step as a measurement does: the optimizer timed on its own.
        optimizer = planner_terms(model, b, s, gpu, 'amp-bf16', 'flash').optimizer_s
        return StepPoint(b, s, t - optimizer, optimizer, for_eff)

    fit = fit_step_time(model, [point(*floor, t_floor, False), point(*b0, t0, True)], gpu,
                        'amp-bf16', 'flash')
    assert fit.overhead_s == pytest.approx(overhead, rel=1e-6)
    assert len(fit.efficiency_points) == 1
    assert fit.efficiency_points[0][1] == pytest.approx(eta, rel=1e-6)
    # ... and so predicts other micro-batches and sequence lengths exactly.
    cal, options = fit.calibration_profile('test'), fit.step_options()
    for b, s in ((1, 2048), (8, 2048), (2, 4096)):
        expected = _synthetic(model, gpu, eta, overhead, [(b, s)])[0]
        got = predict_step_time(model, s, b, gpu, 'amp-bf16', 'flash', cal, options)
        assert got == pytest.approx(expected, rel=1e-6)


def test_fit_on_noisy_points_keeps_each_point_and_a_robust_intercept():
    model, gpu = TINY, _cpu_like_gpu()
    sizes = [(1, 64), (2, 64), (4, 64), (8, 64)]
    clean = _synthetic(model, gpu, 0.3, 0.004, sizes)
    points = []
    for (b, s), t in zip(sizes, clean, strict=True):
        optimizer = planner_terms(model, b, s, gpu, 'amp-bf16', 'flash').optimizer_s
        noisy = t * (1.5 if b == 4 else 1.0)  # one slow measurement
        points.append(StepPoint(b, s, noisy - optimizer, optimizer))
    fit = fit_step_time(model, points, gpu, 'amp-bf16', 'flash')
    assert fit.overhead_s == pytest.approx(0.004, rel=0.05)
    cal, options = fit.calibration_profile('t'), fit.step_options()
    for (b, s), t in zip(sizes, clean, strict=True):
        want = t * (1.5 if b == 4 else 1.0)  # the planner reproduces every measured point
        assert predict_step_time(model, s, b, gpu, 'amp-bf16', 'flash', cal, options) == \
            pytest.approx(want, rel=0.02)


def test_fit_needs_a_point_at_the_target_sequence():
    with pytest.raises(ValueError, match='target sequence'):
        fit_step_time(TINY, [StepPoint(1, 8, 0.01, 0.01, False)], _cpu_like_gpu(), 'fp32',
                      'flash')


def test_bus_bandwidth_and_latency_bandwidth_fit():
    algbw, busbw = bus_bandwidth(2**30, 0.01, 8)
    assert algbw == pytest.approx(2**30 / 0.01)
    assert busbw == pytest.approx(algbw * 2 * 7 / 8)
    sizes = [2**20 * 4**k for k in range(5)]
    times = [20e-6 + s / 1.2e9 for s in sizes]
    times[2] *= 3  # one outlier
    alpha, beta = fit_latency_bandwidth(sizes, times)
    assert beta == pytest.approx(1.2e9, rel=0.01)
    assert alpha == pytest.approx(20e-6, rel=0.05)
    with pytest.raises(ValueError, match='two or more sizes'):
        fit_latency_bandwidth([1.0, 1.0], [1.0, 2.0])


def test_largest_fitting_micro_batch_is_the_estimators_edge():
    model, gpu = find_preset('llama-3.2-1b'), find_gpu('h100-sxm')
    ov = Overheads(cuda_context_bytes=600 * 2**20, allocator_fraction=0.1)
    b = largest_fitting_micro_batch(model, 4096, 'amp-bf16', 'flash', gpu, ov)

    def total(n):
        setup = TrainingSetup(seq_len=4096, micro_batch=n, attention='flash', framework='hf',
                              loop=PROBE_LOOP)
        return estimate(model, setup, gpu, margin_fraction=0.0, overheads=ov).total_bytes

    assert b >= 1
    assert total(b) <= gpu.memory_bytes < total(b + 1)
    smaller = largest_fitting_micro_batch(model, 4096, 'amp-bf16', 'flash', gpu, ov, scale=1.5)
    assert smaller < b
    assert largest_fitting_micro_batch(model, 4096, 'amp-bf16', 'flash', gpu, ov, below=3) <= 2
    huge = find_preset('llama-3.1-405b')
    assert largest_fitting_micro_batch(huge, 4096, 'amp-bf16', 'flash', gpu, ov) == 0
