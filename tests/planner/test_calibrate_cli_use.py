"""``estimate`` and ``plan`` with a calibration profile: matching, saying so, bad files."""

from __future__ import annotations

import json

import pytest

from planner.calibrate.profile import profile_dir
from planner.models.presets import find_preset
from tests.cli_helpers import run_cli
from tests.planner.calibration_helpers import profile_doc, write_profile

LLAMA = find_preset('llama-3.2-1b')
ESTIMATE = ['estimate', '--model', 'llama-3.2-1b', '--seq-len', '2048', '--micro-batch', '2',
            '--gpu', 'h100-sxm']
PLAN = ['plan', '--model', 'llama-3.2-1b', '--seq-len', '2048', '--gpu', 'h100-sxm',
        '--gpus-per-node', '8', '--global-batch', '64', '--tokens', '1e9', '--top', '3']


@pytest.fixture
def h100_profile():
    """A profile of an H100 in the data folder, measured on llama-3.2-1b in amp-bf16."""
    return write_profile(profile_dir(), profile_doc(model=LLAMA), 'h100.json')


def test_estimate_picks_the_gpus_profile_and_says_so(capsys, h100_profile):
    code, out, err = run_cli(capsys, *ESTIMATE)
    assert code == 0, err
    assert out.rstrip().splitlines()[-1] == \
        f'calibrated: {h100_profile} (NVIDIA H100 80GB HBM3, 2026-05-01)'
    code, out, _ = run_cli(capsys, *ESTIMATE, '--json')
    doc = json.loads(out)
    assert doc['calibration']['path'] == str(h100_profile)
    assert doc['calibration']['applied'] == ['memory_overheads']
    overhead = doc['memory']['overhead']
    assert overhead['cuda_context'] == 600 * 2**20  # measured, not the 512 MiB default
    assert overhead['allocator_reserve'] == pytest.approx(
        0.12 * doc['memory']['tensor_peak_bytes'], rel=1e-6)


def test_no_profile_or_profile_none_changes_nothing(capsys, h100_profile):
    _, out, _ = run_cli(capsys, *ESTIMATE, '--profile', 'none', '--json')
    doc = json.loads(out)
    assert doc['calibration'] is None
    assert doc['memory']['overhead']['cuda_context'] == 512 * 2**20
    h100_profile.unlink()
    _, out, _ = run_cli(capsys, *ESTIMATE)
    assert 'calibrated' not in out


def test_a_profile_of_another_gpu_is_not_used(capsys):
    write_profile(profile_dir(), profile_doc(name='NVIDIA A100-SXM4-80GB',
                                             catalog_key='a100-sxm-80gb'), 'a100.json')
    _, out, _ = run_cli(capsys, *ESTIMATE)
    assert 'calibrated' not in out


def test_a_named_profile_of_another_device_is_refused(capsys, tmp_path):
    cpu = write_profile(tmp_path, profile_doc('cpu'), 'cpu.json')
    code, _, err = run_cli(capsys, *ESTIMATE, '--profile', str(cpu))
    assert code == 2
    assert err.startswith('batchfit: error: --profile: ')
    assert 'measured on CPU test, not on the NVIDIA H100' in err


def test_a_malformed_named_profile_is_one_line_naming_the_file(capsys, tmp_path):
    doc = profile_doc()
    del doc['memory']
    bad = write_profile(tmp_path, doc, 'bad.json')
    code, _, err = run_cli(capsys, *ESTIMATE, '--profile', str(bad))
    assert code == 2
    assert err == f'batchfit: error: {bad}: is not a valid calibration profile: memory: missing\n'


def test_plan_uses_the_measured_efficiency_and_says_so(capsys, h100_profile):
    code, out, err = run_cli(capsys, *PLAN, '--json')
    assert code == 0, err
    calibrated = json.loads(out)
    assert calibrated['calibration']['applied'] == ['memory_overheads', 'efficiency',
                                                     'step_overhead']
    _, out, _ = run_cli(capsys, *PLAN, '--json', '--profile', 'none')
    default = json.loads(out)
    assert default['calibration'] is None
    best, base = calibrated['candidates'][0], default['candidates'][0]
    # The profile says 30-45 % of peak (vs the default eager-Hopper curve), plus 2 ms a step.
    assert best['efficiency'] == pytest.approx(0.3, abs=0.16)
    assert best['step_time_s'] != pytest.approx(base['step_time_s'], rel=1e-3)
    _, out, _ = run_cli(capsys, *PLAN)
    assert out.rstrip().splitlines()[-1].startswith(f'calibrated: {h100_profile} (NVIDIA H100')


def test_plan_in_another_precision_keeps_only_the_memory_part(capsys, h100_profile):
    code, out, _ = run_cli(capsys, *PLAN, '--precision', 'fp32')
    assert code == 0
    last = out.rstrip().splitlines()[-1]
    assert last.startswith(f'calibrated: {h100_profile}')
    assert 'not used: efficiency (measured in bf16, planning in fp32)' in last
