"""Parsing typed numbers with the core's own ranges, and marking a field red with why.

Every number goes through :mod:`planner.limits` (the CLI's parser too), so a value is
accepted or refused the same way in both; the reason is worded here in the user's
language from the refusal's kind and the range's bounds.
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from planner import limits
from ui.i18n import translate

ERROR_STYLE = 'border: 2px solid #c62828; background: #ffebee;'
WARNING_STYLE = 'border: 2px solid #ef6c00;'
ERROR_PROPERTY = 'batchfit_error'


class FieldError(ValueError):
    """A typed value is not acceptable; ``flag`` names the field as the CLI does and
    ``message`` says why in the user's language."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f'{flag}: {message}')
        self.flag = flag
        self.message = message


def reason(exc: limits.LimitError) -> str:
    """Why ``exc`` refused its text, and what is allowed, in the user's language."""
    rng = limits.RANGES[exc.key]
    low, high = rng.low_text, rng.high_text
    text = exc.text.strip()
    why = {
        limits.NOT_NUMBER: translate('FieldCheck', '“{text}” is not a number'),
        limits.NOT_WHOLE: translate('FieldCheck', '“{text}” is not a whole number'),
        limits.TOO_SMALL: (translate('FieldCheck', '{text} is too small')),
        limits.TOO_LARGE: translate('FieldCheck', '{text} is too large'),
        limits.AMBIGUOUS: translate('FieldCheck', '“{text}” needs a unit: tok or seq'),
        limits.EMPTY: translate('FieldCheck', 'empty: type a number'),
    }[exc.kind].format(text=text[:24])
    if rng.low_open:
        allowed = translate('FieldCheck', 'allowed: above {low} up to {high}')
    elif rng.integer:
        allowed = translate('FieldCheck', 'allowed: whole numbers {low} to {high}')
    else:
        allowed = translate('FieldCheck', 'allowed: {low} to {high}')
    return f'{why} ({allowed.format(low=low, high=high)})'


def parse_field(key: str, text: str, optional: bool = False) -> int | float | None:
    """``text`` as the value of ``key`` (a :data:`planner.limits.RANGES` key); blank gives
    None when ``optional``.

    Raises:
        FieldError: with the reason in the user's language.
    """
    if optional and not text.strip():
        return None
    try:
        return limits.parse(key, text)
    except limits.LimitError as exc:
        raise FieldError(limits.RANGES[key].flag, reason(exc)) from None


def parse_count(flag: str, text: str, integer: bool = True) -> float:
    """``4096``, ``4_194_304``, ``2e12``, ``300B``, ``4M``, ``4Mi`` (as ``batchfit plan``),
    in the range of ``flag`` (``integer`` is the range's own)."""
    del integer  # the range says whether the field counts
    return parse_field(limits.key_of(flag), text)  # type: ignore[return-value]


def parse_positive(flag: str, text: str, optional: bool = False) -> float | None:
    """A number in the range of ``flag``; blank gives None when ``optional``."""
    return parse_field(limits.key_of(flag), text, optional)


def format_count(value: float) -> str:
    """1e12 -> '1T', 4194304 -> '4194304' (exact values stay digits)."""
    for factor, suffix in ((10**12, 'T'), (10**9, 'B'), (10**6, 'M')):
        if value >= factor and value % factor == 0:
            return f'{int(value // factor)}{suffix}'
    return f'{int(value)}' if value == int(value) else f'{value:g}'


def mark_error(widget: QWidget, message: str | None, tooltip: str = '') -> None:
    """Paint ``widget`` red with ``message`` as its tooltip, or restore it (None)."""
    if message:
        widget.setStyleSheet(ERROR_STYLE)
        widget.setToolTip(message)
        widget.setProperty(ERROR_PROPERTY, message)
    else:
        widget.setStyleSheet('')
        widget.setToolTip(tooltip)
        widget.setProperty(ERROR_PROPERTY, '')


def error_of(widget: QWidget) -> str:
    """The message ``mark_error`` put on ``widget`` ('' when none)."""
    return widget.property(ERROR_PROPERTY) or ''
