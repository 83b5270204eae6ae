"""The calibration child's interpreter in a frozen build, simulated with ``sys.frozen``.

A frozen ``sys.executable`` is the batchfit binary, which cannot run ``-m``: the child
must be a Python the user names or one on PATH with torch, importing the ``planner``
source the build ships in ``_internal/calibration-src``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from planner.calibrate import interpreter
from planner.calibrate.interpreter import (
    InterpreterChoice,
    bundled_source_path,
    choose_interpreter,
    find_python_with_torch,
    undo_frozen_library_path,
)
from tests.cli_helpers import run_cli


@pytest.fixture
def frozen(monkeypatch, tmp_path):
    """This process looks like a PyInstaller build whose _internal is tmp_path/_internal."""
    internal = tmp_path / '_internal'
    package = internal / 'calibration-src' / 'planner'
    package.mkdir(parents=True)
    (package / '__init__.py').write_text('', encoding='utf-8')
    monkeypatch.setattr(sys, 'frozen', True, raising=False)
    monkeypatch.setattr(sys, '_MEIPASS', str(internal), raising=False)
    return internal


def test_a_named_interpreter_wins_frozen_or_not():
    for frozen in (False, True):
        choice = choose_interpreter('  /opt/py/bin/python ', frozen=frozen, find=lambda: None)
        assert choice == InterpreterChoice('/opt/py/bin/python', 'user')


def test_not_frozen_this_interpreter_runs_the_child():
    choice = choose_interpreter('', frozen=False, find=pytest.fail)  # never searches PATH
    assert choice == InterpreterChoice(sys.executable, 'self')


def test_frozen_looks_on_path_then_gives_up():
    assert choose_interpreter(None, frozen=True, find=lambda: '/usr/bin/python3') == \
        InterpreterChoice('/usr/bin/python3', 'path')
    assert choose_interpreter(None, frozen=True, find=lambda: None) == \
        InterpreterChoice(None, 'missing')


def test_find_takes_the_first_candidate_with_torch():
    probed = []

    def probe(python):
        probed.append(python)
        return python == 'b'

    assert find_python_with_torch(['a', 'b', 'c'], probe=probe) == 'b'
    assert probed == ['a', 'b']
    assert find_python_with_torch(['a'], probe=lambda _p: False) is None


def test_has_torch_asks_the_interpreter(tmp_path):
    torch_here = pytest.importorskip('torch') is not None
    assert interpreter.has_torch(sys.executable) is torch_here
    assert interpreter.has_torch(str(tmp_path / 'no-such-python')) is False


def test_path_candidates_list_each_interpreter_once(tmp_path, monkeypatch):
    for name in ('python3', 'python'):
        (tmp_path / name).symlink_to(sys.executable)
    monkeypatch.setenv('PATH', str(tmp_path))
    assert interpreter.path_candidates() == [str(tmp_path / 'python3')]
    monkeypatch.setenv('PATH', str(tmp_path / 'empty'))
    assert interpreter.path_candidates() == []


def test_bundled_source_only_in_a_frozen_build(frozen, monkeypatch):
    assert bundled_source_path() == frozen / 'calibration-src'
    monkeypatch.setattr(sys, 'frozen', False)
    assert bundled_source_path() is None


def test_frozen_library_path_is_undone_for_the_child(frozen):
    env = {'LD_LIBRARY_PATH': '/frozen/_internal:/usr/local/lib',
           'LD_LIBRARY_PATH_ORIG': '/usr/local/lib', 'DYLD_LIBRARY_PATH': '/frozen'}
    assert undo_frozen_library_path(env) == {'LD_LIBRARY_PATH': '/usr/local/lib'}


def test_library_path_untouched_when_not_frozen():
    env = {'LD_LIBRARY_PATH': '/x', 'LD_LIBRARY_PATH_ORIG': '/y'}
    assert undo_frozen_library_path(dict(env)) == env


def test_frozen_child_gets_the_bundled_planner(frozen):
    from planner.calibrate.runner import CalibrationOptions, CalibrationRunner
    from planner.models.source import resolve_model

    options = CalibrationOptions(model=resolve_model('gpt2'), seq_len=64, device='cpu',
                                 python='/opt/torch/bin/python')
    runner = CalibrationRunner(options)
    package = runner._package_path()
    assert package == str(frozen / 'calibration-src')
    env = options.environment(base={'LD_LIBRARY_PATH': str(frozen)}, package_path=package)
    assert env['PYTHONPATH'].split(os.pathsep)[0] == package
    assert 'LD_LIBRARY_PATH' not in env  # the bundled libraries stay with the frozen app
    assert options.command()[:3] == ['/opt/torch/bin/python', '-m', 'planner.calibrate']


def test_frozen_cli_without_torch_says_how_to_get_it(frozen, monkeypatch, capsys):
    monkeypatch.setattr(interpreter, 'find_python_with_torch', lambda: None)
    code, out, err = run_cli(capsys, 'calibrate', '--device', 'cpu', '--model', 'gpt2',
                             '--seq-len', '64')
    assert code == 2
    assert out == ''
    assert len(err.strip().splitlines()) == 1
    assert '--python' in err
    assert 'pip install torch' in err


def test_frozen_cli_uses_the_python_found_on_path(frozen, monkeypatch):
    import argparse

    from planner.cli.calibrate import options_from_args
    from planner.cli.main import build_parser

    monkeypatch.setattr(interpreter, 'find_python_with_torch', lambda: '/usr/bin/python3')
    args = build_parser().parse_args(['calibrate', '--device', 'cpu', '--model', 'gpt2',
                                      '--seq-len', '64'])
    assert isinstance(args, argparse.Namespace)
    assert options_from_args(args).interpreter == '/usr/bin/python3'
    monkeypatch.setattr(sys, 'frozen', False)
    assert options_from_args(args).interpreter == sys.executable


def test_bundled_source_is_what_the_spec_ships():
    """The folder name the spec writes and the one the app looks for agree."""
    spec = (Path(__file__).resolve().parents[2] / 'packaging' / 'batchfit.spec').read_text(
        encoding='utf-8')
    assert f"'{interpreter.BUNDLED_SOURCE_FOLDER}/planner'" in spec
