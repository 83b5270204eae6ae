"""YAML, TOML and JSON text for launcher configs, without a YAML or TOML library.

Strings are always written double-quoted with JSON escapes, which YAML and TOML read
the same way, so no value can turn into another type (``no``, ``1e-4``, ``null``) or
break out of its line. YAML floats always carry a dot and a signed exponent: PyYAML
(YAML 1.1) reads ``3e-05`` as a string.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

_KEY = re.compile(r'[A-Za-z_][A-Za-z0-9_.-]*')


def _key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise ValueError(f'unsafe config key {key!r}')
    return key


def _float(value: float, yaml: bool) -> str:
    if not math.isfinite(value):
        raise ValueError(f'cannot write the non-finite number {value!r}')
    text = repr(float(value))
    if not yaml:
        return text
    mantissa, _, exponent = text.partition('e')
    if '.' not in mantissa:
        mantissa += '.0'
    if exponent and exponent[0] not in '+-':
        exponent = '+' + exponent
    return f'{mantissa}e{exponent}' if exponent else mantissa


def scalar(value: Any, yaml: bool = True) -> str:
    """One scalar as YAML (or TOML with ``yaml=False``)."""
    if value is None:
        if not yaml:
            raise ValueError('TOML has no null')
        return 'null'
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value, yaml)
    if isinstance(value, str):
        return json.dumps(value)  # ASCII, JSON escapes: valid in both
    if isinstance(value, (list, tuple)):
        return '[' + ', '.join(scalar(v, yaml) for v in value) + ']'
    raise TypeError(f'cannot write {type(value).__name__}')


def yaml_lines(mapping: Mapping[str, Any], indent: int = 0) -> list[str]:
    """A block-style YAML mapping (nested mappings indented by two spaces)."""
    pad = ' ' * indent
    lines: list[str] = []
    for key, value in mapping.items():
        if isinstance(value, Mapping) and value:
            lines.append(f'{pad}{_key(key)}:')
            lines.extend(yaml_lines(value, indent + 2))
        elif isinstance(value, Mapping):
            lines.append(f'{pad}{_key(key)}: {{}}')
        else:
            lines.append(f'{pad}{_key(key)}: {scalar(value)}')
    return lines


def toml_lines(tables: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """TOML tables of scalars (None values are left out: TOML has no null)."""
    lines: list[str] = []
    for name, table in tables.items():
        if lines:
            lines.append('')
        lines.append(f'[{_key(name)}]')
        lines.extend(f'{_key(k)} = {scalar(v, yaml=False)}' for k, v in table.items()
                     if v is not None)
    return lines


def json_text(data: Any, indent: int | None = 2) -> str:
    """Strict JSON (no NaN)."""
    return json.dumps(data, indent=indent, allow_nan=False)
