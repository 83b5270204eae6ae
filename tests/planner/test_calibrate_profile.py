"""Calibration profiles: schema, validation, atomic save, lookup, what the planner takes."""

from __future__ import annotations

import json
import os

import pytest

from planner.calibrate import profile as profile_module
from planner.calibrate.apply import use_profile
from planner.calibrate.profile import (
    choose_profile,
    device_spec_from_profile,
    efficiency_from_profile,
    find_profile,
    load_profile,
    overheads_from_profile,
    profile_dir,
    profile_from_dict,
    save_profile,
    step_options_from_profile,
)
from planner.errors import InputError
from planner.hardware.catalog import find_gpu
from planner.models.presets import find_preset
from tests.planner.calibration_helpers import H100_UUID, TINY, profile_doc, write_profile


def test_round_trip_through_a_file(tmp_path):
    p = profile_from_dict(profile_doc())
    path = save_profile(p, tmp_path / 'a.json')
    loaded = load_profile(path)
    assert loaded.profile == p
    assert loaded.profile.model_spec() == TINY
    assert loaded.describe() == f'{path} (NVIDIA H100 80GB HBM3, 2026-05-01)'
    assert json.loads(path.read_text())['schema'] == 'batchfit.calibration/1'


def test_default_location_is_the_data_dir_and_names_device_uuid_torch_date():
    p = profile_from_dict(profile_doc())
    path = save_profile(p)
    assert path.parent == profile_dir()
    assert path.name == 'nvidia-h100-80gb-hbm3_11111111_torch-2.13.0_20260501T120000Z.json'
    cpu = profile_from_dict(profile_doc('cpu'))
    assert save_profile(cpu).name.startswith('cpu-test_cpu_torch-2.13.0_')


@pytest.mark.parametrize(('change', 'words'), [
    (lambda d: d.update(schema='batchfit.calibration/9'), 'schema'),
    (lambda d: d.pop('device'), 'device: missing'),
    (lambda d: d['device'].update(memory_bytes='80GB'), 'device.memory_bytes: must be an integer'),
    (lambda d: d['device'].update(kind='tpu'), 'device.kind'),
    (lambda d: d['step_time'].update(efficiency_points=[[1e6, 1.5]]), 'efficiency'),
    (lambda d: d['memory'].update(workspace_bytes=-1), 'non-negative'),
    (lambda d: d['model'].update(num_layers=0), 'num_layers'),
    (lambda d: d.update(created='yesterday'), 'ISO 8601'),
    (lambda d: d.update(surprise=1), 'unknown field'),
    (lambda d: d['steps'][0].update(for_efficiency='yes'), 'true or false'),
])
def test_malformed_profiles_name_the_file_and_the_field(tmp_path, change, words):
    doc = profile_doc()
    change(doc)
    path = write_profile(tmp_path, doc)
    with pytest.raises(InputError) as info:
        load_profile(path)
    assert str(path) in str(info.value)
    assert words in str(info.value)


def test_not_json_and_missing_files(tmp_path):
    bad = tmp_path / 'bad.json'
    bad.write_text('{"schema": ', encoding='utf-8')
    with pytest.raises(InputError, match='is not valid JSON'):
        load_profile(bad)
    with pytest.raises(InputError, match='no such calibration profile'):
        load_profile(tmp_path / 'missing.json')


def test_a_failed_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = save_profile(profile_from_dict(profile_doc()), tmp_path / 'p.json')
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(profile_module.os, 'fsync', broken_fsync)
    newer = profile_from_dict(profile_doc(created='2026-06-01T00:00:00Z'))
    with pytest.raises(InputError, match='No space left'):
        save_profile(newer, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ['p.json']  # no temporary file left behind


def test_an_interrupted_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = save_profile(profile_from_dict(profile_doc()), tmp_path / 'p.json')
    before = path.read_bytes()

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(profile_module.os, 'replace', interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_profile(profile_from_dict(profile_doc(created='2026-06-01T00:00:00Z')), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ['p.json']


def test_find_profile_uuid_first_then_name_newest_first(tmp_path):
    other_uuid = 'GPU-99999999-0000-0000-0000-000000000000'
    write_profile(tmp_path, profile_doc(created='2026-01-01T00:00:00Z'), 'old.json')
    write_profile(tmp_path, profile_doc(created='2026-03-01T00:00:00Z', uuid=other_uuid),
                  'new-other.json')
    write_profile(tmp_path, profile_doc('cpu', created='2026-04-01T00:00:00Z'), 'cpu.json')
    (tmp_path / 'broken.json').write_text('nope', encoding='utf-8')
    gpu = find_gpu('h100-sxm')
    assert find_profile(gpu, directory=tmp_path).path.name == 'new-other.json'
    assert find_profile(gpu, uuid=H100_UUID, directory=tmp_path).path.name == 'old.json'
    assert find_profile(H100_UUID, directory=tmp_path).path.name == 'old.json'
    assert find_profile('NVIDIA H100 80GB HBM3', directory=tmp_path).path.name == 'new-other.json'
    assert find_profile(find_gpu('a100-sxm-80gb'), directory=tmp_path) is None
    assert find_profile(gpu, directory=tmp_path / 'nowhere') is None


def test_a_name_match_without_catalog_key(tmp_path):
    write_profile(tmp_path, profile_doc(catalog_key=None), 'p.json')
    assert find_profile(find_gpu('h100-sxm'), directory=tmp_path) is not None


def test_choose_profile_auto_none_path_and_mismatch(tmp_path):
    gpu = find_gpu('h100-sxm')
    path = save_profile(profile_from_dict(profile_doc()))
    assert choose_profile('auto', gpu).path == path
    assert choose_profile('auto', None) is None
    assert choose_profile('none', gpu) is None
    assert choose_profile(str(path), None).path == path
    cpu = write_profile(tmp_path, profile_doc('cpu'), 'cpu.json')
    with pytest.raises(InputError, match='measured on CPU test, not on the NVIDIA H100'):
        choose_profile(str(cpu), gpu)


def test_what_the_planner_takes():
    p = profile_from_dict(profile_doc())
    ov = overheads_from_profile(p, 'here')
    assert (ov.cuda_context_bytes, ov.workspace_bytes, ov.nccl_bytes) == \
        (600 * 2**20, 100 * 2**20, 256 * 2**20)
    assert ov.allocator_fraction == 0.12
    assert ov.source == 'here'
    eff = efficiency_from_profile(p)
    assert eff.axis == 'gemm_flops'
    assert float(eff.at(1e6)) == pytest.approx(0.3)
    assert step_options_from_profile(p).step_overhead_s == 0.002
    other = find_preset('llama-3.2-1b')  # 16 layers: fixed + 16 x per-layer
    assert step_options_from_profile(p, other).step_overhead_s == pytest.approx(
        0.0005 + 16 * 0.00075)
    spec = device_spec_from_profile(p)
    assert spec.key == 'h100-sxm'
    cpu = device_spec_from_profile(profile_from_dict(profile_doc('cpu')))
    assert (cpu.key, cpu.peak('fp32'), cpu.hbm_bandwidth_bytes_per_s) == ('cpu', 1e11, 2e10)


def test_use_profile_applies_efficiency_only_where_it_was_measured(tmp_path):
    gpu = find_gpu('h100-sxm')
    lp = load_profile(write_profile(tmp_path, profile_doc()))
    memory_only = use_profile(lp, gpu=gpu)
    assert memory_only.applied == ('memory_overheads',)
    assert memory_only.efficiency is None
    plan = use_profile(lp, gpu=gpu, model=TINY, precision='amp-bf16', step_time=True)
    assert plan.applied == ('memory_overheads', 'efficiency', 'step_overhead')
    assert plan.step_options.step_overhead_s == 0.002
    fp32 = use_profile(lp, gpu=gpu, model=TINY, precision='fp32', step_time=True)
    assert fp32.efficiency is None
    assert 'measured in bf16, planning in fp32' in fp32.line()
    megatron = use_profile(lp, gpu=gpu, precision='amp-bf16', framework='megatron',
                           step_time=True)
    assert 'eager PyTorch' in megatron.not_applied['efficiency']
    # torchtitan's fp8 is its float8 linears over bf16 compute: a bf16 profile applies
    float8 = use_profile(lp, gpu=gpu, model=TINY, precision='fp8', framework='torchtitan',
                         step_time=True)
    assert float8.efficiency is not None
    nccl = profile_doc(collectives={
        'backend': 'nccl', 'world_size': 8, 'alpha_s': 7e-5, 'beta_bytes_per_s': 2.5e11,
        'nccl_memory_bytes': 300 * 2**20,
        'points': [{'size_bytes': 2**30, 'time_s': 0.005, 'algbw_bytes_per_s': 2.1e11,
                    'busbw_bytes_per_s': 3.6e11}]})
    with_links = use_profile(load_profile(write_profile(tmp_path, nccl, 'n.json')), gpu=gpu,
                             precision='amp-bf16', step_time=True)
    assert 'link_bandwidth' in with_links.applied
    assert with_links.step_options.intra_node_link_efficiency == pytest.approx(
        3.6e11 / gpu.intra_node_bandwidth_bytes_per_s)
    assert with_links.step_options.intra_node_latency_s == pytest.approx(7e-5 / 14)
    summary = with_links.summary()
    assert summary['device'] == 'NVIDIA H100 80GB HBM3'
    assert summary['applied'] == ['memory_overheads', 'efficiency', 'step_overhead',
                                  'link_bandwidth']
