"""Pipeline decisions that need no torch: micro-batch choice and the edge probes."""

from __future__ import annotations

import pytest

from planner.calibrate import edge, pipeline
from planner.calibrate.edge import _requested_bytes, largest_micro_batch
from planner.calibrate.pipeline import Settings
from planner.calibrate.probes import is_oom
from planner.hardware.catalog import find_gpu
from planner.memory.peak import Overheads, estimate
from planner.memory.training import TrainingSetup
from planner.models.presets import find_preset

MODEL = find_preset('llama-3.2-1b')
GPU = find_gpu('h100-sxm')
OVERHEADS = Overheads(cuda_context_bytes=600 * 2**20, allocator_fraction=0.05)


def _settings() -> Settings:
    return Settings(spec=MODEL, seq_len=2048, precision='amp-bf16', device='cuda')


def _predicted_tensor_peak(b: int) -> int:
    setup = TrainingSetup(seq_len=2048, micro_batch=b, precision='amp-bf16', framework='hf')
    return estimate(MODEL, setup).tensor_peak_bytes


def test_a_confirmed_prediction_takes_one_probe(monkeypatch):
    calls = []

    def probe(config, python):
        calls.append(config)
        return {'event': 'probe', 'micro_batch': config['micro_batch'], 'fits': True,
                'peak_allocated_bytes': 1, 'peak_reserved_bytes': 1, 'message': ''}

    monkeypatch.setattr(edge, 'run_edge_probe', probe)
    record = largest_micro_batch(_settings(), GPU, OVERHEADS, lambda *a: None)
    assert record.predicted >= 4
    assert record.confirmed == record.predicted
    assert len(calls) == 1
    assert calls[0]['model']['name'] == MODEL.name  # the full model, in a fresh process


def test_an_oom_at_the_edge_picks_the_next_size_from_the_measurement(monkeypatch):
    # The device really needs 30 % more than the estimator says.
    def probe(config, python):
        b = config['micro_batch']
        need = 1.3 * _predicted_tensor_peak(b) * 1.05 + 800 * 2**20
        fits = need <= GPU.memory_bytes
        return {'event': 'probe', 'micro_batch': b, 'fits': fits,
                'peak_allocated_bytes': int(1.3 * _predicted_tensor_peak(b)),
                'peak_reserved_bytes': 0, 'message': '' if fits else 'CUDA out of memory'}

    monkeypatch.setattr(edge, 'run_edge_probe', probe)
    record = largest_micro_batch(_settings(), GPU, OVERHEADS, lambda *a: None)
    assert not record.probes[0].fits
    assert record.probes[-1].fits
    assert 1 <= record.confirmed < record.predicted
    assert len(record.probes) <= 3
    assert record.probes[1].micro_batch < record.predicted  # not a halving search
    assert record.probes[1].micro_batch > record.predicted // 2


def test_no_fit_at_micro_batch_1_is_zero(monkeypatch):
    monkeypatch.setattr(edge, 'run_edge_probe', lambda config, python: {
        'event': 'probe', 'micro_batch': config['micro_batch'], 'fits': False,
        'peak_allocated_bytes': 0, 'peak_reserved_bytes': 0, 'message': 'oom'})
    big = Settings(spec=find_preset('llama-3.1-405b'), seq_len=2048, precision='amp-bf16')
    record = largest_micro_batch(big, GPU, OVERHEADS, lambda *a: None)
    assert (record.predicted, record.confirmed, record.probes) == (0, None, ())


def test_cpu_micro_batches_and_the_fixed_cost_probe():
    cpu = Settings(spec=MODEL, seq_len=64, precision='fp32', device='cpu')
    assert pipeline._floor_config(cpu) == (1, 8)
    assert pipeline._floor_config(_settings()) is None  # a GPU overlaps launches


def test_oom_messages_and_requested_bytes():
    pytest.importorskip('torch')  # is_oom checks torch's OOM type first
    assert is_oom(RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB'))
    assert is_oom(RuntimeError('DefaultCPUAllocator: can\'t allocate memory: you tried'))
    assert not is_oom(RuntimeError('CUDA error: device-side assert', 'two args'))
    assert not is_oom(ValueError('out of memory.'))
    assert _requested_bytes('... Tried to allocate 2.50 GiB. GPU 0 ...') == int(2.5 * 2**30)
    assert _requested_bytes('no size here') == 0


@pytest.mark.parametrize('fraction', [0.0, 0.5, 1.0])
def test_progress_maps_stages_onto_one_monotone_bar(fraction):
    seen = []

    class Writer:
        def progress(self, stage, value, message=''):
            seen.append(value)

    bar = pipeline._Progress(Writer(), collectives=False)
    bar('environment', fraction)
    bar('fit', fraction)
    assert seen[0] == pytest.approx(0.05 / 0.9 * fraction)
    assert seen[1] == pytest.approx((0.85 + 0.05 * fraction) / 0.9)
