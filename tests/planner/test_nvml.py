"""The NVML adapter against a fake pynvml: every failure class, caching, init, topology."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from planner.hardware.local import HardwareInventory, nvml, probe
from planner.user_config import user_toml_path
from tests.planner import fake_nvml as fk
from tests.planner.fake_nvml import FakeNvml, install, real_driver_present

MIB = 2**20
H100_BYTES = 81559 * MIB
PLANNER = Path(__file__).resolve().parents[2] / 'planner'


@pytest.fixture
def fake(monkeypatch):
    """An 8x H100 NVLink node as ``pynvml``, in a fresh NVML session."""
    node = FakeNvml()
    install(monkeypatch, node)
    yield node
    nvml.shutdown()


# ----------------------------------------------------------------- a healthy node


def test_h100_node_snapshot(fake):
    before = time.time()
    inv = probe()
    assert inv.status == 'ok'
    assert inv.driver_version == '550.54.15'
    assert inv.cuda_driver_version == '12.4'
    assert before <= inv.taken_at <= time.time()
    assert len(inv.gpus) == 8
    assert [g.index for g in inv.gpus] == list(range(8))
    assert len({g.uuid for g in inv.gpus}) == 8
    g = inv.gpus[0]
    assert g.name == 'NVIDIA H100 80GB HBM3'
    assert g.uuid.startswith('GPU-')
    assert g.pci_bus_id == '00000000:18:00.0'
    assert g.memory_total_bytes == H100_BYTES
    assert g.memory_used_bytes == 0  # v2: the driver-reserved part is not "used"
    assert g.memory_free_bytes == H100_BYTES - 519 * MIB
    assert (g.utilization_gpu_percent, g.utilization_memory_percent) == (0, 0)
    assert g.temperature_c == 33
    assert g.power_draw_w == pytest.approx(71.0)  # NVML: 71000 mW
    assert g.power_limit_w == pytest.approx(700.0)
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz) == (345, 1980)
    assert (g.mem_clock_mhz, g.mem_clock_max_mhz) == (2619, 2619)
    assert g.compute_capability == (9, 0)
    assert (g.pcie_generation, g.pcie_width, g.pcie_generation_max, g.pcie_width_max) == \
        (5, 16, 5, 16)
    assert (g.nvlink_links, g.nvlink_active_links) == (18, 18)
    assert g.processes == ()
    assert g.catalog == 'h100-sxm'
    assert not g.lost
    assert g.errors == ()
    assert all(gpu.catalog == 'h100-sxm' for gpu in inv.gpus)
    assert '8 NVIDIA GPUs' in inv.message
    assert 'h100-sxm' in inv.message


def test_topology_is_nvlink_between_all_pairs(fake):
    inv = probe()
    assert len(inv.topology) == 8 * 7 // 2
    assert {(li.gpu_a, li.gpu_b) for li in inv.topology} == {
        (a, b) for a in range(8) for b in range(a + 1, 8)}
    for li in inv.topology:
        assert li.nvlink is True
        assert li.nvlink_links == 18
        assert li.label == 'NV18'
        # PCIe path under the NVLink: same NUMA node for GPUs 0-3 and 4-7, else SYS
        assert li.pcie_path == ('NODE' if (li.gpu_a < 4) == (li.gpu_b < 4) else 'SYS')
    assert inv.link(5, 2) is inv.link(2, 5)
    assert inv.link(2, 5).gpu_a == 2


def test_pcie_only_and_degraded_nvlink(fake):
    fake.gpus[0].nvlinks = 0  # a GPU without NVLink: NvLinkState is NotSupported
    fake.gpus[1].nvlinks_down = 2
    inv = probe()
    assert (inv.gpus[0].nvlink_links, inv.gpus[0].nvlink_active_links) == (0, 0)
    assert inv.gpus[0].errors == ()  # no NVLink is not an error
    assert (inv.gpus[1].nvlink_links, inv.gpus[1].nvlink_active_links) == (18, 16)
    assert inv.link(0, 1).nvlink is False
    assert inv.link(0, 1).label == 'NODE'
    assert inv.link(0, 5).label == 'SYS'
    assert inv.link(1, 2).label == 'NV16'
    assert inv.link(2, 3).label == 'NV18'


def test_snapshot_is_immutable_and_json_ready(fake):
    inv = probe()
    with pytest.raises(dataclasses.FrozenInstanceError):
        inv.status = 'error'
    with pytest.raises(dataclasses.FrozenInstanceError):
        inv.gpus[0].name = 'x'
    assert isinstance(inv.gpus, tuple)
    assert isinstance(inv.topology, tuple)
    doc = json.loads(json.dumps(inv.to_dict()))
    assert doc['status'] == 'ok'
    assert doc['gpus'][0]['compute_capability'] == [9, 0]
    assert doc['gpus'][0]['memory_total_bytes'] == H100_BYTES
    assert doc['topology'][0]['label'] == 'NV18'


@pytest.mark.parametrize(('raw', 'text'), [(12040, '12.4'), (11080, '11.8'), (12090, '12.9'),
                                           (13000, '13.0')])
def test_cuda_driver_version_in_words(monkeypatch, raw, text):
    node = FakeNvml(cuda=raw)
    install(monkeypatch, node)
    try:
        assert probe().cuda_driver_version == text
    finally:
        nvml.shutdown()


# ----------------------------------------------------------------- session and caching


def test_static_facts_are_cached_dynamic_values_polled(fake):
    probe()
    probe()
    assert fake.calls['nvmlInit'] == 1
    for static in ('nvmlDeviceGetName', 'nvmlDeviceGetUUID', 'nvmlDeviceGetPciInfo',
                   'nvmlDeviceGetCudaComputeCapability', 'nvmlDeviceGetHandleByIndex',
                   'nvmlDeviceGetMaxPcieLinkWidth'):
        assert fake.calls[static] == 8, static
    for polled in ('nvmlDeviceGetPowerUsage', 'nvmlDeviceGetUtilizationRates',
                   'nvmlDeviceGetCurrPcieLinkGeneration'):
        assert fake.calls[polled] == 16, polled
    fake.gpus[0].memory_used_bytes = 10 * 2**30
    fake.gpus[0].power_mw = 650_000
    g = probe().gpus[0]
    assert g.memory_used_bytes == 10 * 2**30
    assert g.power_draw_w == pytest.approx(650.0)


def test_init_is_balanced_by_shutdown(fake):
    probe()
    assert fake.initialised == 1
    nvml.shutdown()
    assert fake.initialised == 0
    assert fake.calls['nvmlShutdown'] == 1
    nvml.shutdown()  # nothing open: no second nvmlShutdown
    assert fake.calls['nvmlShutdown'] == 1
    assert probe().status == 'ok'  # a new session, facts read again
    assert fake.calls['nvmlInit'] == 2
    assert fake.calls['nvmlDeviceGetName'] == 16


def test_shutdown_registered_with_atexit_once(fake, monkeypatch):
    registered = []
    monkeypatch.setattr(nvml, '_atexit_registered', False)
    monkeypatch.setattr(nvml.atexit, 'register', registered.append)
    probe()
    nvml.shutdown()
    probe()
    assert registered == [nvml.shutdown]


def test_init_is_thread_safe(fake, monkeypatch):
    real_init = fake.nvmlInitWithFlags

    def slow_init(flags):
        time.sleep(0.05)  # widen the race window
        real_init(flags)

    monkeypatch.setattr(fake, 'nvmlInitWithFlags', slow_init)
    start = threading.Barrier(8)

    def one(_):
        start.wait()
        return probe()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    assert fake.calls['nvmlInit'] == 1
    assert fake.initialised == 1
    assert {r.status for r in results} == {'ok'}
    assert all(len(r.gpus) == 8 for r in results)


# ----------------------------------------------------------------- whole-library failures


def test_no_driver(monkeypatch):
    node = FakeNvml(init_error=fk.LIBRARY_NOT_FOUND)
    install(monkeypatch, node)
    inv = probe()
    assert inv.status == 'no_driver'
    assert inv.gpus == ()
    assert inv.topology == ()
    assert inv.driver_version is None
    assert 'no NVIDIA driver' in inv.message
    assert 'catalog' in inv.message
    assert node.initialised == 0
    probe()  # not cached: a driver installed later is picked up
    assert node.calls['nvmlInit'] == 2


@pytest.mark.parametrize(('code', 'words'), [
    (fk.DRIVER_NOT_LOADED, 'modprobe'),
    (fk.LIB_RM_VERSION_MISMATCH, 'reboot'),
])
def test_driver_mismatch(monkeypatch, code, words):
    install(monkeypatch, FakeNvml(init_error=code))
    inv = probe()
    assert inv.status == 'driver_mismatch'
    assert inv.gpus == ()
    assert words in inv.message
    assert 'catalog' in inv.message


def test_bindings_missing(monkeypatch):
    install(monkeypatch, None)  # import pynvml raises ImportError
    inv = probe()
    assert inv.status == 'no_bindings'
    assert 'nvidia-ml-py' in inv.message


def test_bindings_overwritten_by_another_package(monkeypatch):
    install(monkeypatch, types.ModuleType('pynvml'))  # no nvmlInitWithFlags
    inv = probe()
    assert inv.status == 'no_bindings'
    assert 'force-reinstall nvidia-ml-py' in inv.message


def test_no_permission_and_count_failure(monkeypatch):
    install(monkeypatch, FakeNvml(init_error=fk.NO_PERMISSION))
    inv = probe()
    assert inv.status == 'error'
    assert '/dev/nvidia' in inv.message
    node = FakeNvml(count_error=fk.UNKNOWN)
    install(monkeypatch, node)
    inv = probe()
    assert inv.status == 'error'
    assert inv.driver_version == '550.54.15'
    assert 'count' in inv.message
    nvml.shutdown()


def test_never_raises_on_a_broken_binding(fake, monkeypatch, caplog):
    def broken():
        raise ZeroDivisionError('boom')

    monkeypatch.setattr(fake, 'nvmlDeviceGetCount', broken)
    with caplog.at_level(logging.ERROR, logger='planner.hardware.local.nvml'):
        inv = probe()
    assert inv.status == 'error'
    assert 'ZeroDivisionError' in inv.message
    assert any(r.exc_info for r in caplog.records)


def test_zero_gpus(monkeypatch):
    install(monkeypatch, FakeNvml(gpus=[]))
    inv = probe()
    assert inv.status == 'ok'
    assert inv.gpus == ()
    assert 'no GPUs' in inv.message
    nvml.shutdown()


# ----------------------------------------------------------------- per-field failures


def _missing_logs(caplog, name: str) -> int:
    return sum(name in r.getMessage() for r in caplog.records)


def test_memory_v2_missing_falls_back_to_v1_logged_once(fake, caplog):
    for gpu in fake.gpus:
        gpu.fail['nvmlDeviceGetMemoryInfo_v2'] = fk.FUNCTION_NOT_FOUND
        gpu.memory_used_bytes = 2 * 2**30
    with caplog.at_level(logging.INFO, logger='planner.hardware.local.nvml'):
        inv = probe()
        probe()
    g = inv.gpus[0]
    assert g.memory_total_bytes == H100_BYTES
    assert g.memory_used_bytes == 2 * 2**30 + 519 * MIB  # v1 counts reserved as used
    assert g.memory_free_bytes == H100_BYTES - g.memory_used_bytes
    assert g.errors == ()
    assert inv.status == 'ok'
    assert fake.calls['nvmlDeviceGetMemoryInfo'] > 0  # the v1 call
    assert _missing_logs(caplog, 'nvmlDeviceGetMemoryInfo_v2') == 1


def test_processes_fall_back_from_v3(fake, caplog):
    me = os.getpid()
    fake.gpus[0].processes = [(me, 3 * 2**30), (2**22 + 7, fk.VALUE_NOT_AVAILABLE),
                              (2**22 + 9, None)]
    for gpu in fake.gpus:
        gpu.fail['nvmlDeviceGetComputeRunningProcesses_v3'] = fk.FUNCTION_NOT_FOUND
    with caplog.at_level(logging.INFO, logger='planner.hardware.local.nvml'):
        inv = probe()
    procs = inv.gpus[0].processes
    assert fake.calls['nvmlDeviceGetComputeRunningProcesses_v2'] == 8
    assert [p.pid for p in procs] == [me, 2**22 + 7, 2**22 + 9]
    assert procs[0].used_memory_bytes == 3 * 2**30
    assert procs[0].name == Path(f'/proc/{me}/comm').read_text().strip()
    assert procs[1].used_memory_bytes is None  # NVML_VALUE_NOT_AVAILABLE, not 2**64 - 1
    assert procs[2].used_memory_bytes is None
    assert procs[1].name is None  # no such pid here
    assert inv.gpus[0].errors == ()
    assert _missing_logs(caplog, 'nvmlDeviceGetComputeRunningProcesses_v3') == 1


def test_processes_fall_back_to_v1(fake):
    fake.gpus[1].processes = [(4242, 2**30)]
    for version in ('_v3', '_v2'):
        fake.gpus[1].fail[f'nvmlDeviceGetComputeRunningProcesses{version}'] = \
            fk.FUNCTION_NOT_FOUND
    g = probe().gpus[1]
    assert fake.calls['nvmlDeviceGetComputeRunningProcesses'] == 1
    assert [(p.pid, p.used_memory_bytes) for p in g.processes] == [(4242, 2**30)]


def test_processes_unavailable_is_none_not_empty(fake, monkeypatch):
    for version in ('_v3', '_v2'):
        fake.gpus[2].fail[f'nvmlDeviceGetComputeRunningProcesses{version}'] = \
            fk.FUNCTION_NOT_FOUND

    def mismatch(handle):
        if handle.index == 2:  # pynvml's unversioned call on a driver without _v3
            raise fk.NVMLLibraryMismatchError('use a versioned function')
        return []

    monkeypatch.setattr(fake, 'nvmlDeviceGetComputeRunningProcesses', mismatch)
    inv = probe()
    assert inv.gpus[2].processes is None
    assert any(e.startswith('processes:') for e in inv.gpus[2].errors)
    assert inv.gpus[3].processes == ()


def test_not_supported_power_and_temperature(fake):
    fake.gpus[2].fail.update(nvmlDeviceGetPowerUsage=fk.NOT_SUPPORTED,
                             nvmlDeviceGetTemperatureV=fk.NOT_SUPPORTED)
    inv = probe()
    g = inv.gpus[2]
    assert g.power_draw_w is None
    assert g.temperature_c is None
    assert g.power_limit_w == pytest.approx(700.0)
    assert 'power_draw_w: Not Supported' in g.errors
    assert 'temperature_c: Not Supported' in g.errors
    assert fake.calls['nvmlDeviceGetTemperature'] == 0  # NotSupported is final, no fallback
    assert inv.status == 'ok'
    assert inv.gpus[1].power_draw_w == pytest.approx(71.0)


def test_temperature_falls_back_to_the_deprecated_call(fake):
    fake.gpus[0].fail['nvmlDeviceGetTemperatureV'] = fk.FUNCTION_NOT_FOUND
    assert probe().gpus[0].temperature_c == 33
    assert fake.calls['nvmlDeviceGetTemperature'] == 1


# ----------------------------------------------------------------- lost GPUs


@pytest.mark.parametrize('code', [fk.GPU_IS_LOST, fk.UNKNOWN])
def test_gpu_lost_mid_query(fake, code):
    fake.gpus[3].lost_at = 'nvmlDeviceGetMemoryInfo'
    fake.gpus[3].lost_code = code
    inv = probe()
    assert inv.status == 'partial'
    assert len(inv.gpus) == 8
    lost = inv.gpus[3]
    assert lost.lost
    assert lost.name == 'NVIDIA H100 80GB HBM3'  # read before it was lost
    assert lost.uuid == fake.gpus[3].uuid
    for field in ('memory_total_bytes', 'memory_used_bytes', 'utilization_gpu_percent',
                  'temperature_c', 'power_draw_w', 'sm_clock_mhz', 'compute_capability',
                  'nvlink_links', 'processes'):
        assert getattr(lost, field) is None, field
    assert any(e.startswith('lost:') for e in lost.errors)
    assert 'GPU 3' in inv.message
    assert 'reset' in inv.message
    assert not any(3 in (li.gpu_a, li.gpu_b) for li in inv.topology)
    assert len(inv.topology) == 7 * 6 // 2
    assert all(not g.lost and g.memory_total_bytes for g in inv.gpus if g.index != 3)


def test_gpu_lost_before_its_handle(fake):
    fake.gpus[6].lost_at = 'nvmlDeviceGetHandleByIndex'
    inv = probe()
    assert inv.status == 'partial'
    assert inv.gpus[6].lost
    assert inv.gpus[6].name is None
    assert inv.gpus[6].catalog is None


def test_gpu_lost_between_snapshots_keeps_cached_facts(fake):
    assert probe().status == 'ok'
    fake.gpus[5].is_lost = True
    inv = probe()
    assert inv.status == 'partial'
    g = inv.gpus[5]
    assert g.lost
    assert (g.name, g.uuid, g.compute_capability) == (
        'NVIDIA H100 80GB HBM3', fake.gpus[5].uuid, (9, 0))
    assert g.memory_used_bytes is None
    assert g.power_draw_w is None


# ----------------------------------------------------------------- the catalog


def test_unknown_gpu_is_listed_with_advice(fake):
    fake.gpus[7].name = 'NVIDIA Quasar Q9'
    inv = probe()
    assert inv.status == 'ok'
    g = inv.gpus[7]
    assert g.catalog is None
    assert g.memory_total_bytes == H100_BYTES
    assert 'GPU 7 (NVIDIA Quasar Q9) is not in the batchfit catalog' in inv.message
    assert '[gpus.<key>]' in inv.message
    assert 'nvml_names = ["NVIDIA Quasar Q9"]' in inv.message
    assert 'user.toml' in inv.message


def _user_toml(text: str) -> None:
    path = user_toml_path()  # a temporary folder (conftest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding='utf-8')


def test_unknown_gpu_matches_once_described_in_user_toml(fake):
    fake.gpus[7].name = 'NVIDIA Quasar Q9'
    assert probe().gpus[7].catalog is None
    _user_toml('''
[gpus.quasar-q9]
name = "NVIDIA Quasar Q9"
vendor = "nvidia"
family = "hopper"
memory_bytes = 85_520_809_984
peak_flops = { fp32 = 60e12, bf16 = 900e12 }
hbm_bandwidth_bytes_per_s = 3e12
intra_node_link = "NVLink 4 (18 links)"
intra_node_bandwidth_bytes_per_s = 450e9
nvml_names = ["NVIDIA Quasar Q9"]
''')
    inv = probe()  # user.toml is read per snapshot: no restart needed
    assert inv.gpus[7].catalog == 'quasar-q9'
    assert 'not in the batchfit catalog' not in inv.message


def test_malformed_user_toml_does_not_break_the_snapshot(fake):
    _user_toml('[gpus.broken\n')
    inv = probe()
    assert inv.status == 'ok'
    assert inv.gpus[0].catalog is None
    assert any(e.startswith('catalog:') for e in inv.gpus[0].errors)
    assert 'could not be read' in inv.message


# ----------------------------------------------------------------- structure


def test_only_nvml_module_imports_pynvml():
    pattern = re.compile(r'^\s*(import\s+pynvml\b|from\s+pynvml\b)', re.MULTILINE)
    importers = sorted(str(p.relative_to(PLANNER.parent)) for p in PLANNER.rglob('*.py')
                       if pattern.search(p.read_text(encoding='utf-8')))
    assert importers == ['planner/hardware/local/nvml.py']
    source = (PLANNER / 'hardware' / 'local' / 'nvml.py').read_text(encoding='utf-8')
    assert not re.search(r'^(import|from)\s+pynvml\b', source, re.MULTILINE), \
        'pynvml must be imported inside functions'


def test_importing_planner_hw_does_not_import_pynvml():
    code = ('import sys, planner.hardware.local, planner.cli.main; '
            'print("pynvml" in sys.modules)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True, cwd=PLANNER.parent)
    assert out.stdout.strip() == 'False'


def test_python_m_planner_hw_text_and_json(fake, capsys):
    from planner.hardware.local.__main__ import main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith('ok: 8 NVIDIA GPUs')
    assert 'GPU 7: NVIDIA H100 80GB HBM3 GPU-' in out
    assert main(['--json']) == 0
    assert len(json.loads(capsys.readouterr().out)['gpus']) == 8


def test_fake_mirrors_real_error_classes():
    pynvml = pytest.importorskip('pynvml')
    for code in (fk.LIBRARY_NOT_FOUND, fk.FUNCTION_NOT_FOUND, fk.GPU_IS_LOST,
                 fk.NOT_SUPPORTED, fk.DRIVER_NOT_LOADED, fk.LIB_RM_VERSION_MISMATCH):
        real, fake = pynvml.NVMLError(code), fk.NVMLError(code)
        assert type(real).__name__ == type(fake).__name__
        assert real.value == fake.value == code


# ----------------------------------------------------------------- the real machine


@pytest.mark.skipif(real_driver_present(), reason='an NVIDIA driver is present')
def test_real_environment_without_driver():
    nvml.shutdown()
    inv = probe()
    assert isinstance(inv, HardwareInventory)
    assert inv.status == 'no_driver'
    assert inv.gpus == ()
    assert 'no NVIDIA driver found' in inv.message


@pytest.mark.skipif(real_driver_present(), reason='an NVIDIA driver is present')
def test_python_m_planner_hw_json_without_driver():
    out = subprocess.run([sys.executable, '-m', 'planner.hardware.local', '--json'],
                         capture_output=True, text=True, cwd=PLANNER.parent, check=False)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc['status'] == 'no_driver'
    assert doc['gpus'] == []
    assert doc['message']


@pytest.mark.gpu
def test_real_gpus():
    if not real_driver_present():
        pytest.skip('nvmlInit fails: no NVIDIA driver')
    nvml.shutdown()
    try:
        inv = probe()
        again = probe()
    finally:
        nvml.shutdown()
    assert inv.status in ('ok', 'partial'), inv.message
    assert inv.gpus
    assert inv.driver_version
    assert re.fullmatch(r'\d+\.\d', inv.cuda_driver_version)
    for g in inv.gpus:
        assert g.uuid.startswith('GPU-')
        assert g.memory_total_bytes > 0
        assert g.compute_capability[0] >= 3
        assert g.memory_used_bytes is not None, g.errors
        assert g.processes is not None, g.errors
    assert len(inv.topology) == len(inv.gpus) * (len(inv.gpus) - 1) // 2
    assert [g.uuid for g in again.gpus] == [g.uuid for g in inv.gpus]
    json.dumps(inv.to_dict())
