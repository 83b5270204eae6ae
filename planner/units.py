"""Units and number words shared by the core, the command line and the app.

Every conversion factor and every reader of a typed count lives here once, so the CLI,
the app and plan files agree on what ``4M`` or ``2T`` means and how a byte count is shown.
"""

from __future__ import annotations

import math
import re

GIB = 2**30  # bytes per GiB (what nvidia-smi and torch.cuda call "GB"/"GiB")
DAY = 86_400.0  # seconds per day

# Decimal suffixes of a typed count: k 1e3, M 1e6, B/G 1e9, T 1e12 (case-insensitive).
COUNT_SUFFIXES = {'': 1, 'k': 1e3, 'm': 1e6, 'b': 1e9, 'g': 1e9, 't': 1e12}
_COUNT_RE = re.compile(r'([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)([kmbgt]?)')


def parse_count(text: str, integer: bool = True) -> float:
    """A positive count: ``4096``, ``4_194_304``, ``2e12``, ``300B``, ``4M``.

    Suffixes are decimal (:data:`COUNT_SUFFIXES`); an integer count must come out whole
    (and is returned as an ``int``).

    Raises:
        ValueError: with a sentence saying what is allowed.
    """
    match = _COUNT_RE.fullmatch(text.replace('_', '').replace(',', '').strip().lower())
    if not match:
        raise ValueError(f'{text!r} is not a count (allowed: e.g. 4096, 2e12, 300B, 4M)')
    value = float(match[1]) * COUNT_SUFFIXES[match[2]]
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f'{text!r} must be positive')
    if integer:
        if value != int(value):
            raise ValueError(f'{text!r} is not a whole number')
        return int(value)
    return value


def parse_positive(text: str, allow_zero: bool = False) -> float:
    """A finite number > 0 (>= 0 with ``allow_zero``, as for prices).

    Raises:
        ValueError: with a sentence saying what is wrong.
    """
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f'{text!r} is not a number') from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f'{text!r} must be positive')
    return value


def si(value: float | None, unit: str = '', missing: str = '-') -> str:
    """1234567 -> '1.23M' (three significant digits; ``missing`` when None or not finite)."""
    if value is None or not math.isfinite(value):
        return missing
    for factor, suffix in ((1e12, 'T'), (1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
        if abs(value) >= factor:
            return f'{value / factor:.3g}{suffix}{unit}'
    return f'{value:.3g}{unit}'


def gib(n: float) -> str:
    """Bytes as '12.34 GiB'."""
    return f'{n / GIB:,.2f} GiB'
