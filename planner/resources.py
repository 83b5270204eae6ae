"""Where batchfit's data files are, in a source checkout and in an installed wheel."""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def resources_dir() -> Path:
    """The folder holding ``gpus.toml``, ``models.toml`` and friends.

    An installed wheel carries it as ``planner/_resources``; a source checkout has
    it at the repository's top level, beside ``planner/``.
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / '_resources', here.parent / 'resources'):
        if (candidate / 'gpus.toml').is_file():
            return candidate
    raise FileNotFoundError(f'batchfit resources not found next to {here}')


def resource_path(name: str) -> Path:
    """Path of one data file."""
    return resources_dir() / name
