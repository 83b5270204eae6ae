"""The user's own configuration: a TOML file in the platformdirs config folder.

``user.toml`` may hold ``[gpus.<key>]`` and ``[models.<key>]`` tables that add to
or override the built-in catalogs, with the same fields as ``resources/gpus.toml``
and ``resources/models.toml``. ``BATCHFIT_CONFIG_DIR`` moves the folder (tests and
portable installs use it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from planner.errors import InputError

APP_NAME = 'batchfit'
ORG_NAME = 'batchfit'  # ui.ORG_NAME: QSettings' folder and platformdirs' author
USER_TOML = 'user.toml'


def config_dir() -> Path:
    """Folder for the user's settings and catalog additions."""
    override = os.environ.get('BATCHFIT_CONFIG_DIR')
    if override:
        return Path(override)
    # imported here: the calibration child imports this module in the user's training
    # environment, which may lack platformdirs ("No module named 'platformdirs'")
    import platformdirs

    return Path(platformdirs.user_config_dir(APP_NAME))


def data_dir() -> Path:
    """Folder for calibration profiles and other data batchfit writes."""
    override = os.environ.get('BATCHFIT_DATA_DIR')
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def log_dir() -> Path:
    """Folder of the GUI's rotating log (``platformdirs.user_log_dir``)."""
    import platformdirs

    return Path(platformdirs.user_log_dir(APP_NAME, ORG_NAME))


def user_toml_path() -> Path:
    """The user's catalog additions."""
    return config_dir() / USER_TOML


def read_user_toml_text(path: Path | None = None) -> str:
    """The user TOML's text, or ``''`` when there is none.

    Callers that derive something expensive from the file (the preset catalog) key
    their cache on this text, so an edited file is seen at once.

    Raises:
        InputError: the file exists but cannot be read.
    """
    path = user_toml_path() if path is None else path
    from planner import untrusted

    try:
        return untrusted.read_text(path, 'user.toml')
    except FileNotFoundError:
        return ''
    except IsADirectoryError:
        raise InputError(str(path), 'is a folder, not the user configuration') from None


def load_user_toml(path: Path | None = None) -> dict[str, Any]:
    """The parsed user TOML, or ``{}`` when there is none.

    Raises:
        InputError: the file exists but is not valid TOML.
    """
    path = user_toml_path() if path is None else path
    return parse_user_toml(read_user_toml_text(path), path)


def parse_user_toml(text: str, path: Path) -> dict[str, Any]:
    """``text`` (the user TOML at ``path``) parsed; ``{}`` for an empty text.

    Raises:
        InputError: not valid TOML.
    """
    from planner import untrusted

    return untrusted.loads_toml(text, str(path))
