"""``make run`` on a fresh machine: the Qt platform plugin's system libraries are installed
(root with apt) or named in one line, before the app would fail to start."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which('make') is None, reason='make not installed')


def _fake_bin(folder: Path, *, uid: int, installed: bool) -> Path:
    folder.mkdir()
    (folder / 'id').write_text(f'#!/bin/sh\necho {uid}\n')
    (folder / 'dpkg').write_text(f'#!/bin/sh\nexit {0 if installed else 1}\n')
    for tool in ('id', 'dpkg'):
        (folder / tool).chmod(0o755)
    return folder


def _run(bin_dir: Path) -> subprocess.CompletedProcess:
    env = {'PATH': f'{bin_dir}:/usr/bin:/bin'}
    return subprocess.run(['make', '-s', '-C', str(ROOT), 'run-host-libs'], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_user_without_root_gets_one_line_naming_the_packages(tmp_path):
    done = _run(_fake_bin(tmp_path / 'bin', uid=1000, installed=False))
    assert done.returncode != 0
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout
    assert 'libxcb-cursor0' in lines[0]
    assert 'apt-get install' in lines[0]


def test_nothing_to_do_when_the_libraries_are_there(tmp_path):
    done = _run(_fake_bin(tmp_path / 'bin', uid=1000, installed=True))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ''
