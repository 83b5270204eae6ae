"""Stacks: the software that runs a training job, as data the whole core reads.

A :class:`~planner.stacks.spec.Stack` says which layouts, ZeRO stages, recompute modes and
precision recipes a framework really runs, which kernels and loss decide its saved
tensors, how it keeps its model states, its time defaults, and the launcher formats that
run it. The memory model (``planner.memory``), the step-time model (``planner.timing``),
the plan search (``planner.plans``), the exporters (``planner.export``), the CLI and the
app all read the same records (:data:`STACKS`), so a plan and its export cannot diverge.
"""

from planner.stacks.catalog import DEFAULT_STACK, STACK_KEYS, STACKS, get_stack
from planner.stacks.spec import SWITCHES, Stack, StackMode, switch_label

__all__ = ['DEFAULT_STACK', 'STACKS', 'STACK_KEYS', 'SWITCHES', 'Stack', 'StackMode',
           'get_stack', 'switch_label']
