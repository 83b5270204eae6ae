"""`batchfit paths`: where batchfit keeps settings, data and logs on this machine.

One place computes every path the README's "Logs and settings" section names, so a
user (or a bug report) gets the real ones for this platform and environment instead
of a table to interpret. Qt-free: the GUI's ``QSettings`` INI path is computed the way
Qt does for ``IniFormat`` in the user scope (checked against Qt itself by
tests/packaging/test_paths.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from planner.user_config import APP_NAME, ORG_NAME, log_dir

GUI_LOG_FILE = 'batchfit-gui.log'


@dataclass(frozen=True)
class UserPath:
    """One place batchfit reads or writes.

    Attributes:
        key: a stable name (the ``--json`` key).
        label: what it is, for people.
        path: where it is here.
        note: how to move it, or what it holds.
    """

    key: str
    label: str
    path: Path
    note: str


def settings_ini_path(platform: str | None = None, environ: dict[str, str] | None = None
                      ) -> Path:
    """The GUI's ``QSettings(IniFormat, UserScope, 'batchfit', 'batchfit')`` file.

    Qt's rule: ``%APPDATA%`` on Windows; elsewhere (macOS included, for the INI format)
    ``$XDG_CONFIG_HOME`` when it is an absolute path, else ``~/.config``.
    """
    platform = sys.platform if platform is None else platform
    env = os.environ if environ is None else environ
    if platform.startswith('win'):
        base = Path(env.get('APPDATA') or Path.home() / 'AppData' / 'Roaming')
    else:
        xdg = env.get('XDG_CONFIG_HOME', '')
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / '.config'
    return base / ORG_NAME / f'{APP_NAME}.ini'


def user_paths() -> list[UserPath]:
    """Every file and folder batchfit uses for the user, in the order to show them."""
    from planner.calibrate.profile import profile_dir
    from planner.user_config import config_dir, data_dir, user_toml_path

    return [
        UserPath('config_dir', 'config folder', config_dir(), 'BATCHFIT_CONFIG_DIR moves it'),
        UserPath('user_toml', 'user catalog', user_toml_path(),
                 'your GPUs and models, added to the built-in catalogs'),
        UserPath('gui_settings', 'GUI settings', settings_ini_path(),
                 'window, recent files, last session, calibration python'),
        UserPath('data_dir', 'data folder', data_dir(), 'BATCHFIT_DATA_DIR moves it'),
        UserPath('profiles_dir', 'calibration profiles', profile_dir(),
                 'written by batchfit calibrate and the GUI'),
        UserPath('gui_log', 'GUI log', log_dir() / GUI_LOG_FILE,
                 'rotated at 1 MB, 3 old copies kept'),
    ]


def add_paths_command(sub) -> None:
    """Register ``batchfit paths`` on the CLI's subparsers."""
    p = sub.add_parser('paths', help='where batchfit keeps settings, data and logs',
                       description='The files and folders batchfit reads and writes for you '
                                   'on this machine (delete them to remove every trace).')
    p.add_argument('--json', action='store_true', help='one JSON object: key -> path')
    p.set_defaults(run=_cmd_paths)


def _cmd_paths(args: argparse.Namespace) -> int:
    paths = user_paths()
    if args.json:
        print(json.dumps({p.key: str(p.path) for p in paths}, indent=2))
        return 0
    width = max(len(p.label) for p in paths) + 2
    for p in paths:
        state = '' if p.path.exists() else '  (not there yet)'
        print(f'{p.label:<{width}}{p.path}{state}')
        print(f'{"":<{width}}{p.note}')
    return 0
