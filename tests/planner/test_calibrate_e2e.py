"""``batchfit calibrate --device cpu`` end to end on a tiny model, and its failures.

Needs torch (the ``test`` extra installs a CPU build). The full run takes ~10-15 s on
two cores; it runs once per module and the checks share it.
"""

from __future__ import annotations

import io
import json

import pytest

from planner.calibrate.fit import predict_step_time
from planner.calibrate.profile import (
    device_spec_from_profile,
    efficiency_from_profile,
    load_profile,
    profile_dir,
    step_options_from_profile,
)
from planner.cli.calibrate import ProgressBar
from planner.cli.main import main
from tests.planner.calibration_helpers import write_tiny_config

pytest.importorskip('torch')
pytestmark = pytest.mark.torch


@pytest.fixture(scope='module')
def calibrated(tmp_path_factory):
    """One CPU calibration of the tiny model: (exit code, stdout events, profile path)."""
    folder = tmp_path_factory.mktemp('calibrate')
    config = write_tiny_config(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv('BATCHFIT_DATA_DIR', str(folder / 'data'))
        out = io.StringIO()
        mp.setattr('sys.stdout', out)
        code = main(['calibrate', '--device', 'cpu', '--model', str(config), '--seq-len', '64',
                     '--repeats', '5', '--json'])
        in_data_dir = sorted(profile_dir().glob('*.json'))
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    return code, events, in_data_dir, config


def test_cpu_calibration_writes_a_profile(calibrated):
    code, events, files, _ = calibrated
    assert code == 0, events[-3:]
    saved = events[-1]
    assert saved['event'] == 'saved'
    assert saved['status'] == 'ok'
    assert [str(p) for p in files] == [saved['path']]
    p = load_profile(saved['path']).profile
    assert p.device.kind == 'cpu'
    assert p.environment.cpu_threads == 1
    assert (p.model['num_layers'], p.model['hidden_size'], p.seq_len) == (2, 64, 64)
    assert p.elapsed_s < 60
    # two depths x (three micro-batches + the few-token fixed-cost probe)
    assert sorted({(m.layers, m.micro_batch, m.seq_len) for m in p.steps}) == [
        (d, b, s) for d in (1, 2) for b, s in ((1, 8), (1, 64), (2, 64), (4, 64))]
    assert all(m.memory_source == 'memtracker' for m in p.steps)
    assert p.memory.cuda_context_bytes == 0
    assert p.memory.estimator_ratio == pytest.approx(1.0, abs=0.02)
    # the largest micro-batch: predicted by the estimator, confirmed by a fresh probe
    assert p.max_micro_batch.predicted > 4
    assert p.max_micro_batch.confirmed == p.max_micro_batch.probes[-1].micro_batch
    assert p.max_micro_batch.probes[-1].fits
    assert len(p.step_time.efficiency_points) == 3
    assert all(0 < e <= 1 for _, e in p.step_time.efficiency_points)


def test_events_cover_every_stage_in_order(calibrated):
    _, events, _, _ = calibrated
    progress = [e for e in events if e['event'] == 'progress']
    stages = list(dict.fromkeys(e['stage'] for e in progress))
    assert stages == ['environment', 'matmul', 'proxy', 'max_micro_batch', 'fit']
    fractions = [e['fraction'] for e in progress]
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1.0
    assert [e['event'] for e in events[-2:]] == ['result', 'saved']


def test_the_planner_reproduces_the_calibrated_steps(calibrated):
    path = calibrated[1][-1]['path']
    p = load_profile(path).profile
    gpu, cal = device_spec_from_profile(p), efficiency_from_profile(p)
    options = step_options_from_profile(p)
    for b, s, measured in p.step_time.full_depth_step_s:
        predicted = predict_step_time(p.model_spec(), s, b, gpu, p.precision, p.attention, cal,
                                      options)
        assert predicted == pytest.approx(measured, rel=0.35)  # fit residual on a noisy CPU


def test_estimate_uses_the_profile_and_says_so(calibrated, capsys):
    path, config = calibrated[1][-1]['path'], calibrated[3]
    args = ['estimate', '--model', str(config), '--seq-len', '64', '--micro-batch', '2',
            '--precision', 'fp32', '--profile', path]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f'calibrated: {path} (CPU' in out
    assert main([*args, '--json']) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc['calibration']['path'] == path
    assert doc['calibration']['applied'] == ['memory_overheads']
    assert doc['memory']['overhead']['cuda_context'] == 0  # measured: no CUDA context on CPU


def test_no_cuda_device_is_exit_4(tmp_path, capsys):
    config = write_tiny_config(tmp_path)
    code = main(['calibrate', '--device', 'cuda', '--model', str(config), '--seq-len', '64'])
    err = capsys.readouterr().err
    assert code == 4
    assert 'no CUDA device is usable' in err
    assert '--device cpu' in err


def test_a_model_that_does_not_fit_at_micro_batch_1_is_exit_5(tmp_path, capsys):
    config = write_tiny_config(tmp_path)
    code = main(['calibrate', '--device', 'cpu', '--model', str(config), '--seq-len', '64',
                 '--repeats', '1', '--micro-batches', '1', '--memory-limit-gib', '0.001'])
    err = capsys.readouterr().err
    assert code == 5, err
    assert 'over the 1.0 MiB limit' in err
    assert not list(profile_dir().glob('*.json'))


def test_progress_bar_draws_stage_percent_and_time_left():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    bar = ProgressBar(tty)
    bar.started -= 10  # ten seconds in
    bar.update(0.5, 'proxy', '2-layer proxy: timing')
    bar.close()
    text = tty.getvalue()
    assert text.startswith('\r[############............]  50% proxy training: 2-layer proxy')
    assert '~10 s left' in text
    plain = io.StringIO()
    bar = ProgressBar(plain)
    for stage in ('matmul', 'matmul', 'proxy'):
        bar.update(0.1, stage, '')
    assert plain.getvalue() == 'calibrate: GEMM throughput...\ncalibrate: proxy training...\n'
