"""Parsing typed numbers the way the CLI does, and marking a field red with its reason.

The reasons come from the core's number readers (``planner.units``, which the CLI uses
too) and stay English, as the core's error messages do (ui/core_terms.py says why).
"""

from __future__ import annotations

import math

from PySide6.QtWidgets import QWidget

from planner.units import parse_count as read_count
from planner.units import parse_positive as read_positive
from ui.i18n import translate

ERROR_STYLE = 'border: 2px solid #c62828; background: #ffebee;'
ERROR_PROPERTY = 'batchfit_error'


class FieldError(ValueError):
    """A typed value is not acceptable; ``flag`` names the field as the CLI does."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f'{flag}: {message}')
        self.flag = flag
        self.message = message


def parse_count(flag: str, text: str, integer: bool = True) -> float:
    """``4096``, ``4_194_304``, ``2e12``, ``300B``, ``4M`` (as ``batchfit plan``)."""
    try:
        return read_count(text, integer)
    except ValueError as exc:
        raise FieldError(flag, str(exc)) from None


def parse_positive(flag: str, text: str, optional: bool = False) -> float | None:
    """A number > 0 (>= 0 for ``--price``); blank gives None when ``optional``."""
    if optional and not text.strip():
        return None
    try:
        value = read_positive(text.strip(), allow_zero=flag == '--price')
    except ValueError as exc:
        raise FieldError(flag, str(exc)) from None
    if not math.isfinite(value):
        raise FieldError(flag, translate('FieldCheck', '{text} must be finite').format(
            text=repr(text)))
    return value


def format_count(value: float) -> str:
    """1e12 -> '1T', 4194304 -> '4194304' (exact values stay digits)."""
    for factor, suffix in ((1e12, 'T'), (1e9, 'B'), (1e6, 'M')):
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
