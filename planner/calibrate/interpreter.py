"""Which Python runs the calibration child, in a normal install and in a frozen build.

In a normal install the child is ``sys.executable -m planner.calibrate`` unless the user
names another interpreter (their training environment, where torch lives). In a frozen
(PyInstaller) build ``sys.executable`` is the ``batchfit``/``batchfit-gui`` binary,
which cannot run ``-m``, and torch is deliberately not bundled (gigabytes): the child
must be a Python the user names or, failing that, one on ``PATH`` that has torch. The
frozen folder carries ``planner`` as plain source (``calibration-src/planner``) so that
interpreter can import the same protocol as the parent; see ``packaging/batchfit.spec``.

Qt-free, so the CLI (``batchfit calibrate``) and the GUI's dialog decide alike.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# The folder inside a frozen build (next to the bundled libraries) holding ``planner/``
# as source for the child; packaging/batchfit.spec puts it there.
BUNDLED_SOURCE_FOLDER = 'calibration-src'
PATH_CANDIDATES = ('python3', 'python')
PROBE_TIMEOUT_S = 30.0
# The CLI's one line when no interpreter is found (the GUI has its own translated one).
NO_PYTHON_HINT = ('no Python with torch found, and this frozen build has none of its own: '
                  'pip install torch into a Python 3.10+ and pass it as --python PATH')


def is_frozen() -> bool:
    """Whether this process is a frozen (PyInstaller) build."""
    return bool(getattr(sys, 'frozen', False))


def has_torch(python: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``python`` runs and can find torch.

    ``find_spec`` instead of ``import torch``: importing torch takes seconds and
    hundreds of MB, and finding it is what decides whether the child can start.
    """
    probe = 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'
    try:
        done = subprocess.run([python, '-c', probe], capture_output=True, timeout=timeout_s,
                              check=False,
                              env=undo_frozen_library_path(dict(os.environ)))
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


# What the child imports from the interpreter's own environment (batchfit's planner
# package reaches it on PYTHONPATH; planner.user_config imports platformdirs lazily).
CHILD_MODULES = ('torch', 'numpy')


def missing_modules(python: str, modules: Sequence[str] = CHILD_MODULES,
                    timeout_s: float = PROBE_TIMEOUT_S) -> list[str] | None:
    """The ``modules`` that ``python`` cannot find; None when it does not run at all."""
    probe = ('import importlib.util, sys; '
             f'print(",".join(m for m in {tuple(modules)!r} '
             'if importlib.util.find_spec(m) is None))')
    try:
        done = subprocess.run([python, '-c', probe], capture_output=True, text=True,
                              timeout=timeout_s, check=False,
                              env=undo_frozen_library_path(dict(os.environ)))
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return [m for m in done.stdout.strip().split(',') if m]


def install_command(python: str, missing: Sequence[str]) -> str:
    """The command that installs ``missing`` into ``python``'s environment."""
    import shlex

    return f'{shlex.quote(python)} -m pip install {" ".join(missing)}'


def path_candidates(names: Sequence[str] = PATH_CANDIDATES) -> list[str]:
    """``python3`` then ``python`` as found on ``PATH``, each real interpreter once."""
    found: list[str] = []
    seen: set[str] = set()
    for name in names:
        where = shutil.which(name)
        if where is None:
            continue
        real = os.path.realpath(where)
        if real not in seen:
            seen.add(real)
            found.append(where)
    return found


def find_python_with_torch(candidates: Sequence[str] | None = None,
                           probe: Callable[[str], bool] = has_torch) -> str | None:
    """The first candidate (default: :func:`path_candidates`) that has torch, or None."""
    for python in path_candidates() if candidates is None else candidates:
        if probe(python):
            return python
    return None


@dataclass(frozen=True)
class InterpreterChoice:
    """The calibration child's interpreter and where it came from.

    Attributes:
        python: the interpreter, or None when none is usable (frozen, nothing found).
        source: ``user`` (named by the user), ``self`` (this interpreter), ``path``
            (found on ``PATH`` with torch) or ``missing``.
    """

    python: str | None
    source: str


def choose_interpreter(named: str | None, *, frozen: bool | None = None,
                       find: Callable[[], str | None] | None = None) -> InterpreterChoice:
    """The interpreter for the child: the one named, else this one, else (frozen) one
    with torch on ``PATH``.

    A named interpreter is taken as it is (the child reports ``torch_missing`` itself,
    with the install hint, when it lacks torch).
    """
    text = (named or '').strip()
    if text:
        return InterpreterChoice(text, 'user')
    if not (is_frozen() if frozen is None else frozen):
        return InterpreterChoice(sys.executable, 'self')
    found = (find_python_with_torch if find is None else find)()
    return InterpreterChoice(found, 'path') if found else InterpreterChoice(None, 'missing')


def bundled_source_path() -> Path | None:
    """The folder holding ``planner/`` as source in a frozen build (None otherwise)."""
    if not is_frozen():
        return None
    base = Path(getattr(sys, '_MEIPASS', Path(sys.executable).resolve().parent))
    folder = base / BUNDLED_SOURCE_FOLDER
    return folder if (folder / 'planner' / '__init__.py').is_file() else None


def undo_frozen_library_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` (changed in place and returned) without the frozen build's library path.

    PyInstaller's bootloader puts its bundled libraries on ``LD_LIBRARY_PATH`` (macOS:
    ``DYLD_LIBRARY_PATH``) and keeps the user's value in ``<name>_ORIG``; another
    interpreter must load its own libraries, not the bundled Qt or libstdc++. Outside a
    frozen build ``env`` is returned untouched.
    """
    if not is_frozen():
        return env
    for key in ('LD_LIBRARY_PATH', 'DYLD_LIBRARY_PATH'):
        original = env.pop(f'{key}_ORIG', None)
        if original is None:
            env.pop(key, None)
        else:
            env[key] = original
    return env
