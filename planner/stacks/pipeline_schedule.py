"""Pipeline schedules as torch runs them: each rank's action order, an event simulation
of it, the bubble and the first rank's in-flight micro-batches.

The orders are ports of torch's schedule generators (pytorch/pytorch
torch/distributed/pipelining/schedules.py): ``_get_1f1b_rank_ops`` with
``_get_warmup_ops`` for ``ScheduleInterleaved1F1B`` (warm-up factor 2, full backward) and
``ScheduleInterleavedZeroBubble`` (ZB1P: warm-up factor 1, the backward split into the
input gradient B and the weight gradient W, W deferred after ``rank`` steady-state
micro-batches). ``tests/planner/test_pipeline_schedule.py`` checks the ports against
torch's own ``_calculate_single_rank_operations``. The plain 1F1B order is the textbook
one (``p - 1 - rank`` warm-up forwards, then one forward one backward).

The simulation runs each rank's actions in order, each as soon as its rank is free and
its dependency is done (F of stage s after F of s-1; B of s after B of s+1, the last
stage's after its own F; W after B on its rank); communication is free. Costs are per
stage chunk, as fractions of one micro-batch's work: ``f + b + w = 1``. The bubble is the
makespan less one rank's busy time, in micro-batch times (``t_mb``: all of a rank's
chunks). The search uses the closed forms below, checked against the simulation.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

F, B, W, FULL = 'F', 'B', 'W', 'FULL'
Action = tuple[int, str, int]  # (stage index, kind, micro-batch)

SCHEDULE_1F1B = '1F1B'
SCHEDULE_INTERLEAVED_1F1B = 'Interleaved1F1B'
SCHEDULE_INTERLEAVED_ZB = 'InterleavedZeroBubble'


def schedule_name(pp: int, vpp: int, zero_bubble: bool) -> str:
    """torchtitan's ``parallelism.pipeline_parallel_schedule`` for a layout: zero bubble
    only with 2+ stages per rank (torch's ZB schedules are multi-stage; torchtitan needs
    2+ stages per rank for those: torchtitan/distributed/pipeline_parallel.py)."""
    if vpp > 1:
        return SCHEDULE_INTERLEAVED_ZB if zero_bubble else SCHEDULE_INTERLEAVED_1F1B
    return SCHEDULE_1F1B


def rank_orders(schedule: str, pp: int, vpp: int, m: int) -> list[list[Action]]:
    """Each rank's actions in the order torch runs them (no idle slots)."""
    if schedule == SCHEDULE_1F1B:
        return [_one_f_one_b(pp, m, r) for r in range(pp)]
    zb = schedule == SCHEDULE_INTERLEAVED_ZB
    return [_interleaved(pp, vpp, m, r, zb) for r in range(pp)]


def _one_f_one_b(p: int, m: int, rank: int) -> list[Action]:
    warmup = min(m, p - 1 - rank)
    ops: list[Action] = [(rank, F, i) for i in range(warmup)]
    for i in range(m - warmup):
        ops += [(rank, F, warmup + i), (rank, FULL, i)]
    return ops + [(rank, FULL, i) for i in range(m - warmup, m)]


def _interleaved(p: int, v: int, m: int, rank: int, zero_bubble: bool) -> list[Action]:
    """torch's ``_get_1f1b_rank_ops`` for the interleaved schedules (Nones left out)."""
    rounds = max(1, m // p)
    per_round = m // rounds
    # _get_warmup_ops: factor 2 per hop from the last rank for 1F1B, 1 for ZB1P
    factor = 1 if zero_bubble else 2
    warmup = min((v - 1) * per_round + factor * (p - 1 - rank), m * v)
    total = v * m

    def fwd_stage(step: int) -> int:
        return (step // per_round) % v * p + rank

    def bwd_stage(step: int) -> int:
        return (v - 1 - ((step - warmup) // per_round) % v) * p + rank

    counts: dict[tuple[int, str], int] = {}

    def take(stage: int, kind: str) -> Action:
        mb = counts.get((stage, kind), 0)
        counts[(stage, kind)] = mb + 1
        return stage, kind, mb

    ops: list[Action] = []
    back_steps: list[int] = []
    weights = 0
    back = B if zero_bubble else FULL
    for step in range(total + warmup):  # warm-up + steady (F then B) + cool-down
        if step < total:
            ops.append(take(fwd_stage(step), F))
        if step >= warmup:
            ops.append(take(bwd_stage(step), back))
            back_steps.append(step)
            # ZB1P: the first ``rank`` steady micro-batches run no W
            if zero_bubble and step - warmup >= rank:
                ops.append(take(bwd_stage(back_steps[weights]), W))
                weights += 1
    while zero_bubble and weights < len(back_steps):
        ops.append(take(bwd_stage(back_steps[weights]), W))
        weights += 1
    return ops


def simulate_makespan(orders: list[list[Action]], num_stages: int,
                      cost: Callable[[str], float]) -> float:
    """The time the last action ends when every rank runs its order as soon as it can."""
    done: dict[tuple[int, str, int], float] = {}
    nxt = [0] * len(orders)
    free = [0.0] * len(orders)
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r, order in enumerate(orders):
            while nxt[r] < len(order):
                stage, kind, mb = order[nxt[r]]
                dep = _dependency(stage, kind, mb, num_stages)
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] if dep is not None else 0.0)
                free[r] = start + cost(kind)
                done[(stage, B if kind == FULL else kind, mb)] = free[r]
                nxt[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError('the pipeline order deadlocks')
    return max(free)


def _dependency(stage: int, kind: str, mb: int,
                num_stages: int) -> tuple[int, str, int] | None:
    if kind == F:
        return (stage - 1, F, mb) if stage else None
    if kind == W:
        return stage, B, mb
    return (stage + 1, B, mb) if stage < num_stages - 1 else (stage, F, mb)


@lru_cache(maxsize=4096)
def bubble_fraction(schedule: str, pp: int, vpp: int, m: int, f: float, w: float) -> float:
    """Idle time of the pipeline in micro-batch times (``t_mb``: a micro-batch's F, B and
    W through all of a rank's chunks), for chunk costs ``f``, ``w`` and ``b = 1 - f - w``
    (fractions of one micro-batch's work)."""
    if pp <= 1:
        return 0.0
    b = 1.0 - f - w
    costs = {F: f / vpp, B: b / vpp, W: w / vpp, FULL: (b + w) / vpp}
    orders = rank_orders(schedule, pp, vpp, m)
    return simulate_makespan(orders, pp * vpp, costs.__getitem__) - m


@lru_cache(maxsize=4096)
def inflight_microbatches(schedule: str, pp: int, vpp: int, m: int) -> float:
    """The first rank's peak of forwards whose activations are held, in micro-batches of
    all its layers (a chunk is 1/v): a forward's activations are held until its W under
    zero bubble (what the weight gradient needs is most of them: every linear layer's
    input; the whole chunk is counted, the safe side), until its backward otherwise."""
    if pp <= 1:
        return 1.0
    held = peak = 0
    for _, kind, _ in rank_orders(schedule, pp, vpp, m)[0]:
        held += 1 if kind == F else -1 if kind in (W, FULL) else 0
        peak = max(peak, held)
    return peak / vpp


def zero_bubble_fraction(pp: np.ndarray, vpp: np.ndarray, f: np.ndarray,
                         w: np.ndarray) -> np.ndarray:
    """InterleavedZeroBubble's bubble in micro-batch times (``t_mb``), for F, B, W shares
    ``f``, ``1 - f - w``, ``w`` of a micro-batch's work (rows with ``vpp > 1``).

    The B chain crosses the pipeline once per hop, and an F longer than its W adds the
    difference, where 1F1B idles for F + B + W: ``(p - 1)/v · (b + max(0, f - w))``. It is
    the simulation of torch's ZB1P order (``bubble_fraction``) in closed form, equal to it
    for every p, v, m = k·p and B >= W tried (tests/planner/test_pipeline_schedule.py),
    and cheap on hundreds of thousands of rows.
    """
    f, w = np.asarray(f, float), np.asarray(w, float)
    b = 1.0 - f - w
    return (np.asarray(pp) - 1) / np.maximum(vpp, 1) * (b + np.maximum(0.0, f - w))


def zero_bubble_inflight(pp: np.ndarray, m: np.ndarray) -> np.ndarray:
    """InterleavedZeroBubble's first-rank in-flight micro-batches: its warm-up runs
    (v - 1)·p + p - 1 chunk forwards (warm-up factor 1) and the first W follows the
    first B, so p·v chunks (p micro-batches) are held at most, fewer with m < p
    (``inflight_microbatches`` on torch's order)."""
    return np.minimum(np.asarray(m, float), np.asarray(pp, float))
