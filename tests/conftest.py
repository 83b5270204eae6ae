"""Shared test set-up: no display, no user files touched."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault('QT_QPA_PLATFORM', 'offscreen')


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Point the user config and data folders at a fresh temporary folder."""
    root = tmp_path_factory.mktemp('user')
    monkeypatch.setenv('BATCHFIT_CONFIG_DIR', str(root / 'config'))
    monkeypatch.setenv('BATCHFIT_DATA_DIR', str(root / 'data'))
    return root
