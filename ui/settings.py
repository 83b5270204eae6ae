"""Window state, recent files and the last session, in an INI-format ``QSettings``.

Always ``IniFormat`` (tests redirect it with ``QSettings.setPath``). ``schema_version``
lets a later release migrate older keys before they are read.
"""

from __future__ import annotations

import json

from PySide6.QtCore import QCoreApplication, QSettings

from planner.errors import InputError
from ui.plan_inputs import PlanInputs, inputs_from_dict, inputs_to_dict

SCHEMA_VERSION = 1
MAX_RECENT = 8


def settings() -> QSettings:
    """The app's settings (INI, user scope)."""
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope,
                     QCoreApplication.organizationName() or 'batchfit',
                     QCoreApplication.applicationName() or 'batchfit')


def migrate(s: QSettings) -> None:
    """Bring older settings up to :data:`SCHEMA_VERSION` (nothing to do yet)."""
    if s.value('schema_version') is None:
        s.setValue('schema_version', SCHEMA_VERSION)


def recent_files() -> list[str]:
    """Most recent first."""
    value = settings().value('recent_files', [])
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else []


def add_recent_file(path: str) -> list[str]:
    """Put ``path`` first; keep :data:`MAX_RECENT`."""
    files = [path, *(p for p in recent_files() if p != path)][:MAX_RECENT]
    settings().setValue('recent_files', files)
    return files


def save_last_session(inputs: PlanInputs, path: str | None) -> None:
    """Remember the inputs on screen and the file they belong to."""
    s = settings()
    s.setValue('session/inputs', json.dumps(inputs_to_dict(inputs)))
    s.setValue('session/path', path or '')


def last_session() -> tuple[PlanInputs | None, str | None]:
    """The inputs and file of the last run (None, None when none or unreadable)."""
    s = settings()
    text = s.value('session/inputs')
    if not text:
        return None, None
    try:
        inputs = inputs_from_dict(json.loads(str(text)))
    except (InputError, ValueError):
        return None, None
    return inputs, str(s.value('session/path') or '') or None
