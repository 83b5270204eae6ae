"""``batchfit paths``: the settings, data and log locations the README promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli.paths import settings_ini_path, user_paths
from tests.cli_helpers import run_cli

KEYS = ['config_dir', 'user_toml', 'gui_settings', 'data_dir', 'profiles_dir', 'gui_log']


def _user_root() -> Path:
    """The temporary user folder tests/conftest.py points BATCHFIT_CONFIG_DIR into."""
    return Path(os.environ['BATCHFIT_CONFIG_DIR']).parent


def test_json_names_every_path(capsys):
    code, out, err = run_cli(capsys, 'paths', '--json')
    assert (code, err) == (0, '')
    paths = json.loads(out)
    assert list(paths) == KEYS
    root = _user_root()
    assert paths['config_dir'] == str(root / 'config')  # BATCHFIT_CONFIG_DIR
    assert paths['user_toml'] == str(root / 'config' / 'user.toml')
    assert paths['data_dir'] == str(root / 'data')  # BATCHFIT_DATA_DIR
    assert Path(paths['profiles_dir']).parent == root / 'data'
    assert paths['gui_log'].endswith('batchfit-gui.log')


def test_text_marks_what_does_not_exist_yet(capsys):
    (_user_root() / 'config').mkdir()
    code, out, _err = run_cli(capsys, 'paths')
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2 * len(KEYS)  # a path line and a note line each
    config = next(line for line in lines if line.startswith('config folder'))
    user_toml = next(line for line in lines if line.startswith('user catalog'))
    assert 'not there yet' not in config
    assert user_toml.endswith('(not there yet)')


def test_the_log_is_where_the_gui_writes_it():
    from ui.app import log_dir

    log = next(p for p in user_paths() if p.key == 'gui_log')
    assert log.path == log_dir() / 'batchfit-gui.log'


def test_settings_path_per_platform(tmp_path):
    assert settings_ini_path('linux', {'XDG_CONFIG_HOME': str(tmp_path)}) == \
        tmp_path / 'batchfit' / 'batchfit.ini'
    assert settings_ini_path('linux', {'XDG_CONFIG_HOME': 'relative/ignored'}) == \
        Path.home() / '.config' / 'batchfit' / 'batchfit.ini'
    assert settings_ini_path('darwin', {}) == Path.home() / '.config' / 'batchfit' / 'batchfit.ini'
    assert settings_ini_path('win32', {'APPDATA': str(tmp_path)}) == \
        tmp_path / 'batchfit' / 'batchfit.ini'


@pytest.mark.skipif(sys.platform.startswith('win'), reason='checked against Qt on Unix')
def test_settings_path_is_the_one_qt_uses(tmp_path):
    """Qt caches its default paths per process (and the UI tests move them): ask a fresh one."""
    probe = ('from PySide6.QtCore import QSettings as S;'
             'print(S(S.Format.IniFormat, S.Scope.UserScope, "batchfit", "batchfit").fileName())')
    env = {'HOME': str(tmp_path), 'XDG_CONFIG_HOME': str(tmp_path / 'xdg'),
           'QT_QPA_PLATFORM': 'offscreen', 'PATH': '/usr/bin:/bin'}
    done = subprocess.run([sys.executable, '-c', probe], env=env, capture_output=True,
                          text=True, check=True, timeout=60)
    expected = settings_ini_path(environ={'XDG_CONFIG_HOME': str(tmp_path / 'xdg')})
    assert done.stdout.strip() == str(expected)
