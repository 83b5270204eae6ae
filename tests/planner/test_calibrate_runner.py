"""The parent side: spawning, time limit, cancel, crash and torch-missing classification.

These runs never import torch: the child reports a missing torch, or hangs through its
test hook (``BATCHFIT_CALIBRATE_TEST_HANG``) before it would import it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from planner.calibrate.protocol import EventWriter, error_event, parse_event, progress_event
from planner.calibrate.runner import CalibrationOptions, CalibrationRunner, classify
from tests.planner.calibration_helpers import TINY

HANG = {'BATCHFIT_CALIBRATE_TEST_HANG': '1'}


def options(**changes) -> CalibrationOptions:
    base = {'model': TINY, 'seq_len': 64, 'precision': 'fp32', 'device': 'cpu',
            'timeout_s': 60.0}
    return CalibrationOptions(**{**base, **changes})


def test_command_and_environment_pin_the_gpu_by_uuid():
    opts = options(device='cuda', gpu_uuids=('GPU-aaaa', 'GPU-bbbb'), micro_batches=(1, 2),
                   collectives=True)
    cmd = opts.command()
    assert cmd[:3] == [sys.executable, '-m', 'planner.calibrate']
    assert cmd[cmd.index('--gpu-uuid') + 1] == 'GPU-aaaa'
    assert cmd[cmd.index('--micro-batches') + 1] == '1,2'
    assert '--collectives' in cmd
    env = opts.environment(base={}, package_path='/x')
    assert env['CUDA_VISIBLE_DEVICES'] == 'GPU-aaaa,GPU-bbbb'
    assert env['CUDA_DEVICE_ORDER'] == 'PCI_BUS_ID'
    assert env['PYTORCH_CUDA_ALLOC_CONF'] == 'expandable_segments:True'
    assert env['PYTHONPATH'] == '/x'
    # the user's allocator settings win; a CPU run hides the GPUs
    mine = options().environment(base={'PYTORCH_CUDA_ALLOC_CONF': 'backend:cudaMallocAsync'})
    assert mine['PYTORCH_CUDA_ALLOC_CONF'] == 'backend:cudaMallocAsync'
    assert mine['CUDA_VISIBLE_DEVICES'] == ''
    assert mine['OMP_NUM_THREADS'] == '1'


def test_relative_interpreter_paths_become_absolute():
    assert options(python='.venv/bin/python').interpreter == os.path.abspath('.venv/bin/python')
    assert options(python='python3').interpreter == 'python3'  # looked up on PATH


@pytest.mark.parametrize(('kwargs', 'status'), [
    ({'returncode': 0, 'events': [{'event': 'result', 'profile': {}}]}, 'ok'),
    ({'returncode': 3, 'events': [error_event('torch_missing', 'no torch')]}, 'torch_missing'),
    ({'returncode': 4, 'events': [error_event('no_cuda', 'none')]}, 'no_cuda'),
    ({'returncode': 5, 'events': [error_event('does_not_fit', 'big')]}, 'does_not_fit'),
    ({'returncode': -11, 'events': []}, 'crash'),
    ({'returncode': 1, 'events': []}, 'crash'),
    ({'returncode': 0, 'events': []}, 'crash'),  # exit 0 without a result is no success
    ({'returncode': 130, 'events': [], 'cancelled': True}, 'cancelled'),
    ({'returncode': 130, 'events': [], 'timed_out': True, 'cancelled': True}, 'timeout'),
])
def test_classify(kwargs, status):
    assert classify(**kwargs)[0] == status


def test_classify_names_the_signal_and_the_last_stderr_line():
    status, message = classify(-6, [], stderr_tail='terminate called\nAborted')
    assert status == 'crash'
    assert message == 'the calibration process was killed by SIGABRT: Aborted'


def test_protocol_ignores_noise_and_keeps_progress_monotone(tmp_path):
    assert parse_event('hello') is None
    assert parse_event('{"not": "an event"}') is None
    assert parse_event('{broken') is None
    assert parse_event('{"event": "progress", "fraction": 0.5}') == {'event': 'progress',
                                                                      'fraction': 0.5}
    path = tmp_path / 'events'
    with path.open('w') as stream:
        writer = EventWriter(stream)
        writer.progress('matmul', 0.4)
        writer.emit(progress_event('proxy', 0.2))
    fractions = [parse_event(line)['fraction'] for line in path.read_text().splitlines()]
    assert fractions == [0.4, 0.4]
    with pytest.raises(ValueError, match='unknown error kind'):
        error_event('meltdown', '')


def test_torch_missing_from_an_interpreter_without_site_packages(tmp_path):
    # A real mechanism: ``python -S`` has no site-packages, so no torch (and no numpy).
    wrapper = tmp_path / 'python-without-torch'
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n', encoding='utf-8')
    wrapper.chmod(0o755)
    outcome = CalibrationRunner(options(python=str(wrapper))).run()
    assert outcome.status == 'torch_missing', outcome.stderr_tail
    assert outcome.exit_code == 3
    assert "pip install 'batchfit[calibrate]'" in outcome.message
    assert outcome.returncode == 3


def test_an_interpreter_that_fails_without_an_event_is_a_crash():
    outcome = CalibrationRunner(options(python='/bin/false')).run()
    assert outcome.status == 'crash'
    assert outcome.exit_code == 8
    assert 'exited with code 1' in outcome.message


def test_time_limit_terminates_the_child():
    started = time.monotonic()
    outcome = CalibrationRunner(options(timeout_s=1.0, extra_env=HANG)).run()
    assert outcome.status == 'timeout'
    assert outcome.exit_code == 7
    assert outcome.returncode == 130  # it wrote its 'cancelled' event and exited itself
    assert time.monotonic() - started < 10


def test_a_child_deaf_to_sigterm_is_killed_after_the_grace_period():
    env = {'BATCHFIT_CALIBRATE_TEST_HANG': 'ignore-sigterm'}
    outcome = CalibrationRunner(options(timeout_s=0.5, grace_s=0.5, extra_env=env)).run()
    assert outcome.status == 'timeout'
    assert outcome.returncode == -signal.SIGKILL


def test_cancel_sends_sigterm_and_the_child_reports_cancelled():
    seen = []
    runner = CalibrationRunner(options(extra_env=HANG), on_event=seen.append)
    runner.on_progress = lambda *_: runner.cancel()
    outcome = runner.run()
    assert outcome.status == 'cancelled'
    assert outcome.exit_code == 6
    assert seen[-1]['event'] == 'error'
    assert seen[-1]['kind'] == 'cancelled'
    assert 'SIGTERM' in seen[-1]['message']


def test_a_child_killed_by_a_signal_is_a_crash():
    runner = CalibrationRunner(options(extra_env=HANG))
    runner.on_progress = lambda *_: os.kill(runner.pid, signal.SIGKILL)
    outcome = runner.run()
    assert outcome.status == 'crash'
    assert outcome.exit_code == 8
    assert 'killed by SIGKILL' in outcome.message


def test_wait_before_start_is_an_error():
    with pytest.raises(RuntimeError, match='start'):
        CalibrationRunner(options()).wait()


def test_the_parent_side_never_imports_torch():
    import subprocess

    code = ('import sys, planner.cli.main, planner.cli.calibrate, planner.calibrate.runner, '
            'planner.calibrate.profile, planner.calibrate.apply, planner.calibrate.fit, '
            'planner.calibrate.pipeline; planner.cli.main.build_parser(); '
            'sys.exit("torch" in sys.modules)')
    assert subprocess.run([sys.executable, '-c', code], check=False).returncode == 0
