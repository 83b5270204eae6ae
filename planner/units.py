"""Units shared by the core, the command line and the app: conversion factors and how a
number is shown. What a typed count such as ``4M`` means, and its allowed range, is
:mod:`planner.limits`.
"""

from __future__ import annotations

import math

GIB = 2**30  # bytes per GiB (what nvidia-smi and torch.cuda call "GB"/"GiB")
DAY = 86_400.0  # seconds per day

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
