"""The calibration dialog's "Python with torch": remembered, and found or asked for when frozen."""

from __future__ import annotations

import sys

import pytest

from planner.calibrate import interpreter


@pytest.fixture
def frozen(monkeypatch, tmp_path):
    """A simulated frozen build (no Python of its own)."""
    monkeypatch.setattr(sys, 'frozen', True, raising=False)
    monkeypatch.setattr(sys, '_MEIPASS', str(tmp_path), raising=False)


def _dialog(qtbot):
    from ui.widgets.calibration_dialog import CalibrationDialog

    dialog = CalibrationDialog('gpt2-124m', 256)
    qtbot.addWidget(dialog)
    return dialog


def test_the_python_field_is_remembered(qtbot, monkeypatch):
    first = _dialog(qtbot)
    assert first.python_edit.text() == ''
    first.python_edit.setText('/no/such/python')
    started = []
    monkeypatch.setattr(first.controller, 'start', started.append)
    monkeypatch.setattr(first, 'check_interpreter', lambda _python: '')
    first.start()
    assert started[0].interpreter == '/no/such/python'
    assert _dialog(qtbot).python_edit.text() == '/no/such/python'


def test_frozen_without_torch_says_how_to_get_it(qtbot, frozen, monkeypatch):
    monkeypatch.setattr(interpreter, 'find_python_with_torch', lambda: None)
    dialog = _dialog(qtbot)
    assert 'PATH' in dialog.python_edit.placeholderText()
    dialog.start()
    assert not dialog.controller.running
    assert dialog.start_button.isEnabled()
    assert 'pip install torch' in dialog.status_label.text()


def test_frozen_uses_and_shows_the_python_found(qtbot, frozen, monkeypatch):
    monkeypatch.setattr(interpreter, 'find_python_with_torch', lambda: '/usr/bin/python3')
    dialog = _dialog(qtbot)
    started = []
    monkeypatch.setattr(dialog.controller, 'start', started.append)
    monkeypatch.setattr(dialog, 'check_interpreter', lambda _python: '')
    dialog.start()
    assert started[0].interpreter == '/usr/bin/python3'
    assert dialog.python_edit.text() == '/usr/bin/python3'


def test_the_interpreter_check_names_what_is_missing_and_how_to_get_it(qtbot, tmp_path):
    """A Python without torch once failed only inside the child ("No module named ...")."""
    bare = tmp_path / 'python'
    bare.write_text('#!/bin/sh\nPYTHONPATH= exec python3 -S -I "$@"\n')
    bare.chmod(0o755)
    dialog = _dialog(qtbot)
    dialog.python_edit.setText(str(bare))
    dialog.start()
    assert not dialog.controller.running
    text = dialog.status_label.text()
    assert 'torch' in text
    assert f'{bare} -m pip install torch' in text
    dialog.python_edit.setText('/no/such/python')
    dialog.start()
    assert 'does not run' in dialog.status_label.text()
    assert not dialog.controller.running


def test_the_quick_check_is_small_and_the_full_run_is_estimated(qtbot):
    from planner.calibrate.profile import profile_from_dict
    from ui.calibration_numbers import QUICK_SEQ_LEN, full_cpu_estimate_s
    from ui.widgets.calibration_dialog import FULL_CPU, QUICK

    dialog = _dialog(qtbot)
    dialog.device_combo.setCurrentIndex(dialog.device_combo.findData(QUICK))
    quick = dialog.options()
    assert quick.device == 'cpu'
    assert quick.seq_len == min(256, QUICK_SEQ_LEN)
    assert quick.micro_batches == (1,)
    assert quick.precision == 'fp32'  # bf16 is emulated on most CPUs (12 min for GPT-2)
    dialog.device_combo.setCurrentIndex(dialog.device_combo.findData(FULL_CPU))
    assert 'quick check first' in dialog.estimate_label.text()
    # a quick profile: the full run's estimate grows with the work
    doc = _tiny_profile()
    p = profile_from_dict(doc)
    short, long = full_cpu_estimate_s(p, 256), full_cpu_estimate_s(p, 1024)
    assert 0 < p.elapsed_s < short < long
    dialog._quick_profile = p
    dialog._update_estimate()
    assert 'about' in dialog.estimate_label.text()


def _tiny_profile() -> dict:
    """A real profile document: the quick pipeline on a 2-layer toy model in-process."""
    import io

    from planner.calibrate.pipeline import Settings, run
    from planner.calibrate.protocol import EventWriter
    from planner.models.spec import ModelSpec

    pytest.importorskip('torch')
    spec = ModelSpec(name='toy', num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4,
                     head_dim=16, ffn_size=128, vocab_size=256)
    return run(Settings(spec=spec, seq_len=32, precision='fp32', device='cpu',
                        micro_batches=(1,), repeats=2, warmup=1, python=sys.executable,
                        memory_limit_bytes=2**30), EventWriter(io.StringIO()))
