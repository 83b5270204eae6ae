"""Reading files a user hands over (config.json, plan files, user.toml, calibration
profiles) with bounds: size, nesting depth and number lengths.

Every failure is one :class:`~planner.errors.InputError` naming the file; nothing is
parsed past the bounds, no ``RecursionError`` or ``MemoryError`` escapes, and callers
write nothing until the whole file has been read and checked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.toml_compat import tomllib

# The largest file of each kind batchfit reads. Real ones are far smaller: a
# Hugging Face config.json is 1-50 KB (a few with id2label tables reach ~1 MB), a plan
# file ~10 KB, a calibration profile ~100 KB, a user.toml a few KB.
MAX_BYTES: dict[str, int] = {
    'config.json': 8 * 2**20, 'plan': 8 * 2**20, 'profile': 32 * 2**20,
    'user.toml': 2**20, 'session': 2**20,
}
# Deeper nesting than this is not a file batchfit wrote or reads (plans nest ~5 deep).
MAX_DEPTH = 64


def read_text(path: str | os.PathLike[str], kind: str, where: str | None = None) -> str:
    """The UTF-8 text of ``path``, at most ``MAX_BYTES[kind]`` bytes.

    Raises:
        FileNotFoundError: no such file (callers word it themselves).
        InputError: too large, not UTF-8, or unreadable.
    """
    path = Path(path)
    where = where or str(path)
    limit = MAX_BYTES[kind]
    try:
        with path.open('rb') as handle:
            data = handle.read(limit + 1)
    except (FileNotFoundError, IsADirectoryError):
        raise
    except OSError as exc:
        raise InputError(where, f'cannot read: {exc.strerror}') from None
    if len(data) > limit:
        raise InputError(where, f'is larger than {limit // 2**20} MiB: not a {kind} file '
                         'batchfit reads')
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError:
        raise InputError(where, 'is not UTF-8 text') from None


def loads_json(text: str, where: str) -> Any:
    """``json.loads`` with the depth bound; every failure an :class:`InputError`.

    Raises:
        InputError: not JSON (with the position), nested deeper than ``MAX_DEPTH``, or a
            number with more digits than Python converts.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        body = text.rstrip()
        cut = exc.pos >= len(body) or not body.endswith(('}', ']'))
        end = ' (truncated?)' if cut else ''
        raise InputError(where, f'is not valid JSON{end}: {exc.msg} at line {exc.lineno}, '
                         f'column {exc.colno}') from None
    except RecursionError:
        raise InputError(where, f'nests deeper than {MAX_DEPTH} levels') from None
    except ValueError as exc:  # e.g. an integer with more than 4,300 digits
        raise InputError(where, f'is not usable JSON: {exc}') from None
    check_depth(data, where)
    return data


def loads_toml(text: str, where: str) -> dict[str, Any]:
    """``tomllib.loads`` with the depth bound; every failure an :class:`InputError`."""
    if _bracket_depth(text) > MAX_DEPTH:
        raise InputError(where, f'nests deeper than {MAX_DEPTH} levels')
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(where, f'is not valid TOML: {exc}') from None
    except (RecursionError, ValueError) as exc:
        raise InputError(where, f'is not usable TOML: {type(exc).__name__}') from None
    check_depth(data, where)
    return data


def check_depth(data: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`InputError` when ``data`` nests deeper than ``limit`` (iteratively:
    no recursion, whatever the depth)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            raise InputError(where, f'nests deeper than {limit} levels')
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _bracket_depth(text: str) -> int:
    """An upper bound of the nesting of ``[``/``{`` in ``text`` (strings not skipped:
    only ever too high, and real TOML files nest a few levels)."""
    depth = deepest = 0
    for char in text:
        if char in '[{':
            depth += 1
            deepest = max(deepest, depth)
        elif char in ']}':
            depth = max(depth - 1, 0)
    return deepest
