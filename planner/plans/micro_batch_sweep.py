"""One candidate's layout at every micro-batch: throughput, MFU and memory, fitting or not.

The search keeps the layouts that fit, so its rows for one layout often hold a single
micro-batch: the largest that fits is usually the fastest. :func:`micro_batch_sweep`
scores the same layout (GPUs, TP/PP/CP/DP, ZeRO, recompute) at every micro-batch
that divides the batch per data-parallel rank, with the search's own memory and
step-time models, and says which fit. The window plots it, so the trade-off shows:
the throughput a larger micro-batch would give, and the memory it would take.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.memory.activations import RECOMPUTE_CODES
from planner.plans.request import PlanRequest
from planner.plans.result import Candidate
from planner.plans.search import divisors
from planner.timing.step_time import LayoutArrays


@dataclass(frozen=True)
class MicroBatchSweep:
    """A layout at each micro-batch, ascending.

    Attributes:
        micro_batch: sequences per micro-batch.
        grad_accum: micro-batches accumulated per step (the global batch is kept).
        tokens_per_s: training throughput of the whole job.
        mfu: model FLOPs utilisation (0 to 1).
        total_bytes: per-GPU peak memory.
        usable_bytes: per-GPU memory a plan may take (capacity less the margin).
    """

    micro_batch: np.ndarray
    grad_accum: np.ndarray
    tokens_per_s: np.ndarray
    mfu: np.ndarray
    total_bytes: np.ndarray
    usable_bytes: float

    @property
    def fits(self) -> np.ndarray:
        """Whether each micro-batch's peak fits in the usable memory."""
        return self.total_bytes <= self.usable_bytes


def micro_batch_sweep(req: PlanRequest, c: Candidate) -> MicroBatchSweep:
    """Candidate ``c``'s layout at every micro-batch the search would allow it (with its
    own stack and recipe)."""
    req = req.for_stack(c.framework, c.precision)
    per_rank = c.global_batch // c.dp
    micro = req.limits.allowed('micro_batch', divisors(per_rank))
    accum = per_rank // micro
    if c.vpp > 1:  # interleaving runs whole rounds of pp micro-batches, as in the search
        keep = accum % c.pp == 0
        micro, accum = micro[keep], accum[keep]
    n = micro.size

    def same(value) -> np.ndarray:
        return np.full(n, value)

    layout = LayoutArrays(
        nodes=same(c.nodes), gpus_per_node=same(c.gpus_per_node), tp=same(c.tp),
        pp=same(c.pp), vpp=same(c.vpp), cp=same(c.cp), dp=same(c.dp), micro_batch=micro,
        grad_accum=accum, zero=same(c.zero), recompute=same(RECOMPUTE_CODES[c.recompute]),
        sequence_parallel=same(c.sequence_parallel), ep=same(c.ep),
        etp=same(c.etp), dp_replicate=same(c.dp_replicate))
    memory = req.memory_arrays(layout)
    step = req.step_times(layout)
    return MicroBatchSweep(
        micro_batch=micro, grad_accum=accum,
        tokens_per_s=np.broadcast_to(step.tokens_per_s, (n,)).astype(float),
        mfu=np.broadcast_to(step.mfu, (n,)).astype(float),
        total_bytes=np.broadcast_to(memory.total_bytes, (n,)).astype(float),
        usable_bytes=req.usable_bytes)
