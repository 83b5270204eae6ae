"""Typed, located reads from a parsed JSON document (plan files).

Every error names the document and the dotted field (``plan.json: candidate.tp``),
so ``batchfit`` can print one line that says which value to fix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from planner.errors import InputError

_REQUIRED: Any = object()


class Reader:
    """One JSON object of a document, with checked getters.

    Args:
        data: the object.
        where: the document's name (a path), used in every error.
        path: the object's dotted position in the document ('' at the top).
    """

    def __init__(self, data: Any, where: str, path: str = '') -> None:
        if not isinstance(data, dict):
            raise InputError(f'{where}: {path}' if path else where,
                             f'must be a JSON object, not {_kind(data)}')
        self.data: dict[str, Any] = data
        self.where = where
        self.path = path

    def error(self, key: str, message: str) -> InputError:
        """An :class:`InputError` naming ``key`` of this object."""
        name = '.'.join(part for part in (self.path, key) if part)
        return InputError(f'{self.where}: {name}' if name else self.where, message)

    def only(self, keys: Iterable[str]) -> None:
        """Reject keys outside ``keys`` (typos in a hand-edited file must not pass)."""
        unknown = sorted(set(self.data) - set(keys))
        if unknown:
            raise self.error(unknown[0], 'unknown key (allowed: ' + ', '.join(keys) + ')')

    def _get(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise self.error(key, 'missing')
            return default
        return value

    def section(self, key: str) -> Reader:
        """The required nested object ``key``."""
        name = '.'.join(part for part in (self.path, key) if part)
        return Reader(self._get(key, _REQUIRED), self.where, name)

    def mapping(self, key: str, default: Any = _REQUIRED) -> dict[str, Any] | None:
        """A nested object kept as a plain dict (or ``default`` when absent or null)."""
        value = self._get(key, default)
        if value is not default and not isinstance(value, dict):
            raise self.error(key, f'must be a JSON object, not {_kind(value)}')
        return value

    def text(self, key: str, default: Any = _REQUIRED) -> Any:
        """A string."""
        value = self._get(key, default)
        if value is not default and not isinstance(value, str):
            raise self.error(key, f'must be a string, not {_kind(value)}')
        return value

    def number(self, key: str, default: Any = _REQUIRED) -> Any:
        """A finite number (an int is read as a float)."""
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
                value):
            raise self.error(key, f'must be a finite number, not {_kind(value)} {value!r}')
        return float(value)

    def whole(self, key: str, default: Any = _REQUIRED, minimum: int = 0) -> Any:
        """An integer >= ``minimum``."""
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f'must be an integer >= {minimum}, got {value!r}')
        return value

    def count(self, key: str, default: Any = _REQUIRED) -> Any:
        """An integer >= 1."""
        return self.whole(key, default, minimum=1)

    def flag(self, key: str, default: Any = _REQUIRED) -> Any:
        """A boolean."""
        value = self._get(key, default)
        if value is not default and not isinstance(value, bool):
            raise self.error(key, f'must be true or false, got {value!r}')
        return value

    def choice(self, key: str, allowed: tuple[Any, ...]) -> Any:
        """One of ``allowed`` (required)."""
        value = self._get(key, _REQUIRED)
        if isinstance(value, bool) or value not in allowed:
            raise self.error(key, f'unknown value {value!r} (allowed: '
                             + ', '.join(map(str, allowed)) + ')')
        return value

    def int_list(self, key: str) -> list[int]:
        """A non-empty list of integers."""
        value = self._get(key, _REQUIRED)
        if not isinstance(value, list) or not value or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.error(key, f'must be a non-empty list of integers, got {value!r}')
        return value

    def text_list(self, key: str) -> list[str]:
        """A non-empty list of strings."""
        value = self._get(key, _REQUIRED)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise self.error(key, f'must be a non-empty list of strings, got {value!r}')
        return value


def _kind(value: Any) -> str:
    """A JSON type name for messages."""
    return {dict: 'an object', list: 'a list', str: 'a string', bool: 'a boolean',
            int: 'a number', float: 'a number', type(None): 'null'}.get(type(value),
                                                                     type(value).__name__)
