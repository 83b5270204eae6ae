"""Shared by the stack tests: measurements are taken once per configuration per session."""

from __future__ import annotations

import functools

import pytest

from benchmarks.stack_flags import CONFIGS, StackConfig
from tests.stacks.fake_pg import StackMeasurement, frameworks_missing, measure

BY_NAME = {c.name: c for c in CONFIGS}


@functools.cache
def measured(name: str, fake: bool | None = None, seq_len: int | None = None
             ) -> StackMeasurement:
    """The measurement of configuration ``name`` (optionally another mode or sequence)."""
    import dataclasses

    config = BY_NAME[name]
    if seq_len is not None:
        config = dataclasses.replace(config, seq_len=seq_len)
    return measure(config, fake=fake)


def require(config: StackConfig) -> None:
    """Skip when the framework that runs ``config`` is not installed."""
    missing = frameworks_missing(config)
    if missing:
        pytest.skip(missing)
