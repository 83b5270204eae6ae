"""The batch arithmetic every exporter relies on, checked before anything is written.

The identities (DeepSpeed deepspeed/runtime/config.py ``_batch_assertion``; Megatron-LM
megatron/training/arguments.py; torchtitan's parallel-dims check)::

    world_size     = nodes × gpus_per_node
    model_parallel = tp × pp × cp
    dp             = world_size / model_parallel       (an integer)
    global_batch   = micro_batch × grad_accum × dp     (exactly)

Each tool checks a different part of this, or nothing (accelerate floors
``num_processes // num_machines`` silently; DeepSpeed compares against whatever world
size it sees), so batchfit checks all of it itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import InputError


@dataclass(frozen=True)
class BatchNumbers:
    """The numbers every launcher is given, derived once.

    Attributes:
        nodes: machines.
        gpus_per_node: processes per machine.
        world_size: all processes.
        model_parallel: tp × pp × cp.
        dp: data-parallel replicas (DeepSpeed's "world size" for its batch check).
        micro_batch: sequences per GPU per forward/backward.
        grad_accum: micro-batches per optimizer step (Megatron's num_microbatches).
        global_batch: sequences per optimizer step.
    """

    nodes: int
    gpus_per_node: int
    world_size: int
    model_parallel: int
    dp: int
    micro_batch: int
    grad_accum: int
    global_batch: int


def check_candidate(c: Any, where: str = 'candidate') -> BatchNumbers:
    """Check a chosen layout's identities and return its numbers.

    Args:
        c: anything with the layout fields of a plan candidate.
        where: how errors name it.

    Raises:
        InputError: a count below 1, or an identity that does not hold.
    """
    names = ('nodes', 'gpus_per_node', 'gpus', 'tp', 'pp', 'vpp', 'cp', 'dp', 'micro_batch',
             'grad_accum', 'global_batch')
    for name in names:
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f'{where}.{name}', f'must be a positive integer, got {value!r}')
    world = c.nodes * c.gpus_per_node
    if c.gpus != world:
        raise InputError(f'{where}.gpus', f'{c.gpus} != nodes × GPUs per node = {c.nodes} × '
                         f'{c.gpus_per_node}')
    model_parallel = c.tp * c.pp * c.cp
    if world % model_parallel or world // model_parallel != c.dp:
        raise InputError(f'{where}.dp', f'tp × pp × cp × dp = {model_parallel} × {c.dp} is '
                         f'not the {world} GPUs')
    if c.micro_batch * c.grad_accum * c.dp != c.global_batch:
        raise InputError(f'{where}.global_batch', f'micro-batch × accumulation × DP = '
                         f'{c.micro_batch} × {c.grad_accum} × {c.dp} is not {c.global_batch}')
    if c.tp > c.gpus_per_node or c.gpus_per_node % c.tp:
        raise InputError(f'{where}.tp', f'{c.tp} must divide the {c.gpus_per_node} GPUs of '
                         'a node (TP stays inside a node)')
    if c.vpp > 1 and (c.pp == 1 or c.grad_accum % c.pp):
        raise InputError(f'{where}.vpp', 'virtual stages need pp > 1 and an accumulation '
                         f'divisible by pp (pp {c.pp}, accumulation {c.grad_accum})')
    if getattr(c, 'zero', 0) not in (0, 1, 2, 3):
        raise InputError(f'{where}.zero', f'unknown ZeRO stage {c.zero!r}', '0, 1, 2, 3')
    return BatchNumbers(nodes=c.nodes, gpus_per_node=c.gpus_per_node, world_size=world,
                        model_parallel=model_parallel, dp=c.dp, micro_batch=c.micro_batch,
                        grad_accum=c.grad_accum, global_batch=c.global_batch)
