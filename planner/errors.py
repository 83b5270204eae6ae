"""Errors the core raises for bad input.

Every user-facing check raises :class:`InputError`, which names the field and
what is allowed, so the CLI can print one line and exit 2 and the GUI can mark
the field.
"""

from __future__ import annotations


class InputError(ValueError):
    """A user input is invalid.

    Attributes:
        field: the input's name as the user sees it (``--seq-len``, ``tp``...).
        message: what is wrong with it.
        allowed: what would be accepted, in words.
    """

    def __init__(self, field: str, message: str, allowed: str | None = None) -> None:
        self.field = field
        self.message = message
        self.allowed = allowed
        text = f'{field}: {message}'
        if allowed:
            text += f' (allowed: {allowed})'
        super().__init__(text)
