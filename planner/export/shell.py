"""Shell text that means exactly what it says: quoting, run-time variables, comments.

Every value from the user or the plan goes through :func:`quote` (``shlex.quote``), so
a script path or model name with spaces, quotes, ``$``, ``;`` or backticks arrives as
one literal argument and never runs anything. Newlines and other control characters
are refused (:func:`check_text`): a newline would end a comment line and start a
command. Only the constant texts of this package are written unquoted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from planner.errors import InputError

_CONTROL = re.compile(r'[\x00-\x1f\x7f]')
# What may stand inside "${NAME:?message}": no expansion, quote or brace characters.
_SAFE_MESSAGE = re.compile(r'[A-Za-z0-9 ,.:()=/_+-]*')
CONTINUATION = ' \\\n    '


def check_text(value: str, field: str) -> str:
    """``value`` if it has no newline or control character.

    Raises:
        InputError: on ``field``, naming the character.
    """
    if not isinstance(value, str):
        raise InputError(field, f'must be text, got {type(value).__name__}')
    bad = _CONTROL.search(value)
    if bad:
        raise InputError(field, f'{value!r} contains the control character {bad.group()!r}; '
                         'no launcher line can carry it safely')
    return value


def quote(value: object, field: str = 'value') -> str:
    """``value`` as one shell word (checked, then ``shlex.quote``)."""
    return shlex.quote(check_text(str(value), field))


def flag(name: str, value: object, field: str = 'value') -> str:
    """``--name=value`` as one shell word."""
    return quote(f'{name}={value}', field)


def env_ref(name: str, message: str) -> str:
    """``"${NAME:?message}"``: the variable at run time, or a clear stop when unset."""
    if not re.fullmatch(r'[A-Z_][A-Z0-9_]*', name) or not _SAFE_MESSAGE.fullmatch(message):
        raise ValueError(f'unsafe variable reference {name!r}: {message!r}')
    return f'"${{{name}:?{message}}}"'


def command(items: Iterable[str]) -> str:
    """Shell fragments (already quoted words, or ``--flag value`` pairs) as one command,
    one fragment per continued line."""
    return CONTINUATION.join(items)


def comment(text: str) -> str:
    """One comment line; control characters are escaped so nothing escapes the ``#``."""
    return '# ' + _CONTROL.sub(lambda m: repr(m.group())[1:-1], text) if text else '#'


def comments(lines: Iterable[str]) -> list[str]:
    """Several comment lines."""
    return [comment(line) for line in lines]
