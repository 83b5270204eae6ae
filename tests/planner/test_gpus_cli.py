"""`batchfit gpus` as a user runs it: local GPUs (fake NVML), no GPU, --json, --watch."""

from __future__ import annotations

import io
import json
import os

import pytest

from planner.cli import gpus as gpus_cli
from planner.cli.main import main
from planner.hardware.local import nvml
from tests.cli_helpers import run_cli
from tests.planner import fake_nvml as fk
from tests.planner.fake_nvml import FakeNvml, install, real_driver_present

HINT = 'showing the catalog: batchfit gpus --catalog'


@pytest.fixture
def fake(monkeypatch):
    """An 8x H100 NVLink node as ``pynvml``, in a fresh NVML session."""
    node = FakeNvml()
    install(monkeypatch, node)
    yield node
    nvml.shutdown()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_table_and_topology(fake, capsys):
    fake.gpus[0].memory_used_bytes = 40 * 2**30
    fake.gpus[0].utilization = (97, 41)
    fake.gpus[0].processes = [(os.getpid(), 40 * 2**30)]
    code, out, err = run_cli(capsys, 'gpus')
    assert code == 0
    assert err == ''
    assert out.startswith('8 NVIDIA GPUs: 8 x NVIDIA H100 80GB HBM3 (h100-sxm)')
    header = next(line for line in out.splitlines() if line.startswith('GPU  name'))
    for column in ('memory used/total GiB', 'util', 'temp', 'power/limit W', 'SM/max MHz',
                   'PCIe', 'NVLink', 'catalog', 'procs'):
        assert column in header
    row0 = next(line for line in out.splitlines() if line.lstrip().startswith('0  NVIDIA'))
    assert '40.0/79.6 [#####.....]' in row0
    assert '97%' in row0
    assert '41%' in row0
    assert '33C' in row0
    assert '71/700' in row0
    assert '345/1980' in row0
    assert 'gen5 x16' in row0
    assert '18/18' in row0
    assert 'h100-sxm' in row0
    assert 'processes' in out
    assert '40.00 GiB' in out
    # the topology matrix, as nvidia-smi topo -m
    matrix = out[out.index('topology'):].splitlines()
    assert matrix[1].split() == [f'GPU{i}' for i in range(8)]
    assert matrix[2].split() == ['GPU0', 'X'] + ['NV18'] * 7
    assert matrix[9].split() == ['GPU7'] + ['NV18'] * 7 + ['X']
    assert 'legend:' in out
    assert HINT not in out


def test_lost_unknown_and_unsupported_in_text(fake, capsys):
    fake.gpus[3].lost_at = 'nvmlDeviceGetMemoryInfo'
    fake.gpus[7].name = 'NVIDIA Quasar Q9'
    fake.gpus[2].fail['nvmlDeviceGetPowerUsage'] = fk.NOT_SUPPORTED
    fake.gpus[1].pcie = (1, 16)  # idle link trained down
    code, out, _ = run_cli(capsys, 'gpus')
    assert code == 0
    assert 'NVIDIA H100 80GB HBM3 (lost)' in out
    assert 'GPU 3 stopped answering NVML' in out
    assert 'unknown' in next(line for line in out.splitlines() if 'Quasar' in line and
                             line.lstrip().startswith('7'))
    assert '[gpus.<key>]' in out
    assert 'gen1 x16 (max gen5 x16)' in out
    assert 'GPU 2: power_draw_w: Not Supported' in out
    matrix = out[out.index('\ntopology'):].splitlines()
    assert matrix[4].split() == ['GPU1', 'NV18', 'X', 'NV18', 'lost'] + ['NV18'] * 4


def test_json_snapshot(fake, capsys):
    code, out, _ = run_cli(capsys, 'gpus', '--json')
    assert code == 0
    doc = json.loads(out)
    assert doc['status'] == 'ok'
    assert doc['driver_version'] == '550.54.15'
    assert doc['cuda_driver_version'] == '12.4'
    assert len(doc['gpus']) == 8
    gpu = doc['gpus'][0]
    assert gpu['catalog'] == 'h100-sxm'
    assert gpu['memory_total_bytes'] == 81559 * 2**20
    assert gpu['compute_capability'] == [9, 0]
    assert gpu['power_limit_w'] == 700.0
    assert gpu['processes'] == []
    assert len(doc['topology']) == 28
    assert {li['label'] for li in doc['topology']} == {'NV18'}


def test_no_driver_shows_why_then_the_catalog(monkeypatch, capsys):
    install(monkeypatch, FakeNvml(init_error=fk.LIBRARY_NOT_FOUND))
    code, out, err = run_cli(capsys, 'gpus')
    assert code == 0
    assert err == ''
    lines = out.splitlines()
    assert lines[0].startswith('no NVIDIA driver found')
    assert lines[1] == HINT
    assert 'h100-sxm' in out  # the catalog follows
    assert 'InfiniBand' in out
    code, out, _ = run_cli(capsys, 'gpus', '--json')
    assert code == 0
    assert json.loads(out)['status'] == 'no_driver'


def test_driver_mismatch_exits_zero(monkeypatch, capsys):
    install(monkeypatch, FakeNvml(init_error=fk.LIB_RM_VERSION_MISMATCH))
    code, out, _ = run_cli(capsys, 'gpus')
    assert code == 0
    assert 'reboot' in out.splitlines()[0]
    assert out.splitlines()[1] == HINT


@pytest.mark.skipif(real_driver_present(), reason='an NVIDIA driver is present')
def test_real_machine_without_driver(capsys):
    nvml.shutdown()
    code, out, err = run_cli(capsys, 'gpus')
    assert code == 0
    assert err == ''
    assert out.splitlines()[0].startswith('no NVIDIA driver found')
    assert HINT in out
    code, out, _ = run_cli(capsys, 'gpus', '--json')
    assert code == 0
    assert json.loads(out)['status'] == 'no_driver'


def test_catalog_listing_unchanged(fake, capsys):
    code, out, _ = run_cli(capsys, 'gpus', '--catalog', '--json')
    assert code == 0
    catalog = json.loads(out)
    assert 'h100-sxm' in {g['key'] for g in catalog['gpus']}
    assert catalog['interconnects']
    code, out, _ = run_cli(capsys, 'gpus', '--catalog')
    assert code == 0
    assert out.startswith('gpu ')
    assert fake.calls['nvmlInit'] == 0  # --catalog never touches NVML


def test_watch_with_catalog_is_bad_input(capsys):
    code, _, err = run_cli(capsys, 'gpus', '--catalog', '--watch')
    assert code == 2
    assert err.startswith('batchfit: error: --watch:')
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize('value', ['0', '-1', 'soon', 'inf'])
def test_watch_interval_must_be_positive(capsys, value):
    with pytest.raises(SystemExit) as exit_:
        main(['gpus', '--watch', value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith('batchfit: error: argument --watch')
    assert len(err.splitlines()) == 1


def test_watch_two_frames(fake):
    pauses = []
    stream = io.StringIO()
    assert gpus_cli.watch(0.5, iterations=2, sleep=pauses.append, stream=stream) == 0
    assert pauses == [0.5]  # no pause after the last frame
    text = stream.getvalue()
    assert text.count('8 NVIDIA GPUs') == 2
    assert text.count('every 0.5 s, Ctrl-C to stop') == 2
    assert '\x1b[' not in text  # not a terminal: frames are appended, not redrawn
    assert fake.calls['nvmlInit'] == 1
    assert fake.calls['nvmlDeviceGetPowerUsage'] == 16  # polled per frame


def test_watch_redraws_on_a_terminal(fake):
    stream = _Tty()
    gpus_cli.watch(1, iterations=2, sleep=lambda s: None, stream=stream)
    assert stream.getvalue().count('\x1b[H\x1b[2J') == 2


def test_watch_json_lines(fake):
    stream = _Tty()
    fake.gpus[0].power_mw = 100_000

    def pause(seconds):
        fake.gpus[0].power_mw = 350_000  # the load rises between frames

    gpus_cli.watch(1, json_output=True, iterations=2, sleep=pause, stream=stream)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    docs = [json.loads(line) for line in lines]
    assert [d['gpus'][0]['power_draw_w'] for d in docs] == [100.0, 350.0]
    assert '\x1b[' not in stream.getvalue()  # JSON lines stay machine-readable


def test_watch_without_gpu(monkeypatch):
    install(monkeypatch, FakeNvml(init_error=fk.LIBRARY_NOT_FOUND))
    stream = io.StringIO()
    gpus_cli.watch(1, iterations=2, sleep=lambda s: None, stream=stream)
    assert stream.getvalue().count(HINT) == 2


def test_watch_ends_cleanly_on_ctrl_c(fake, capsys, monkeypatch):
    pauses = []

    def pause(seconds):
        pauses.append(seconds)
        if len(pauses) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(gpus_cli, 'pause', pause)
    code, out, err = run_cli(capsys, 'gpus', '--watch')
    assert code == 0
    assert err == ''
    assert pauses == [1.0, 1.0]  # the default interval
    assert out.count('8 NVIDIA GPUs') == 2
    pauses.clear()
    code, out, _ = run_cli(capsys, 'gpus', '--watch', '0.25', '--json')
    assert code == 0
    assert pauses == [0.25, 0.25]
    assert [json.loads(line)['status'] for line in out.splitlines()] == ['ok', 'ok']
