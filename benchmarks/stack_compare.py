"""batchfit's estimate of a measured stack configuration, under either flag set.

Shared by benchmarks/stack_memory.py and tests/stacks: the flags come from
benchmarks/stack_flags.py, so switching to the stacks' flags is one change there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.stack_flags import SMALL_LLAMA, StackConfig, setup_kwargs
from planner.errors import InputError
from planner.memory.peak import estimate
from planner.memory.training import TrainingSetup
from planner.models.hf_config import spec_from_hf_config


@dataclass(frozen=True)
class Estimate:
    """batchfit's tensor peak for one configuration, or why it has none."""

    flags: str
    kwargs: dict[str, Any]
    tensor_peak_bytes: int | None
    components: dict[str, int]
    unreachable: str = ''


def batchfit_estimate(config: StackConfig, flags: str) -> Estimate:
    """batchfit's ``estimate`` of ``config`` with the ``today`` or ``target`` flags.

    A flag set the core does not accept yet (``--framework torchtitan`` before the stacks
    land) gives ``unreachable`` with the core's message instead of raising.
    """
    kwargs = setup_kwargs(config, flags)
    spec = spec_from_hf_config(SMALL_LLAMA, name='small-llama')
    try:
        result = estimate(spec, TrainingSetup(**kwargs))
    except (InputError, TypeError, ValueError) as exc:
        return Estimate(flags, kwargs, None, {}, unreachable=str(exc))
    return Estimate(flags, kwargs, result.tensor_peak_bytes, dict(result.components))


def best_available(config: StackConfig) -> Estimate:
    """The ``target`` flags once the core accepts them, else ``today``'s."""
    target = batchfit_estimate(config, 'target')
    return target if target.tensor_peak_bytes is not None else batchfit_estimate(config, 'today')


def relative_error(estimate_bytes: float, measured_bytes: float) -> float:
    """(estimate - measured) / measured: positive when batchfit is high (the safe side)."""
    return (estimate_bytes - measured_bytes) / measured_bytes
