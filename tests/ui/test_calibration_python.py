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
    dialog.start()
    assert started[0].interpreter == '/usr/bin/python3'
    assert dialog.python_edit.text() == '/usr/bin/python3'
