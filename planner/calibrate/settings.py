"""What the calibration child was asked to measure (its command line, as one record).

Shared by the pipeline and its stages (``edge`` reads it too), below both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.models.spec import ModelSpec


@dataclass(frozen=True)
class Settings:
    """What the child was asked to calibrate.

    Attributes:
        spec: the target model (full depth).
        seq_len: tokens per sequence.
        precision: a ``PROXY_PRECISIONS`` recipe.
        attention: ``flash`` or ``eager``.
        device: ``cuda`` or ``cpu``.
        micro_batches: micro-batches to time (empty: chosen from the predicted capacity).
        repeats: timed rounds per configuration (min of k).
        warmup: untimed steps per configuration.
        depths: proxy depths (two or more separate per-layer from fixed cost).
        memory_limit_bytes: emulate a smaller device (None: the whole device).
        collectives: run the all-reduce sweep.
        collective_max_bytes: largest all-reduce (default 1 GiB on CUDA, 64 MiB on CPU).
        python: the interpreter for probe processes.
    """

    spec: ModelSpec
    seq_len: int
    precision: str
    attention: str = 'flash'
    device: str = 'cuda'
    micro_batches: tuple[int, ...] = ()
    repeats: int = 5
    warmup: int = 2
    depths: tuple[int, ...] = (1, 2)
    memory_limit_bytes: int | None = None
    collectives: bool = False
    collective_max_bytes: int | None = None
    python: str = ''
