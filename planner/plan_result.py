"""What a plan search found: ranked candidates as arrays, and as plain records on demand.

:class:`SearchResult` keeps every fitting candidate as numpy arrays (layout, memory rows,
step time, training time) with a ranking and the Pareto front; :meth:`SearchResult.top`
turns the best of them into :class:`Candidate` records for display and JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.memory import PHASES, MemoryArrays
from planner.plan_request import PlanRequest
from planner.step_time import RECOMPUTE_MODES, LayoutArrays, StepTimeArrays, TrainingTimeArrays

STATUS_OK = 'ok'
STATUS_NO_FACTORISATION = 'no_factorisation'
STATUS_NO_FIT = 'no_fit'


def time_bucket(values: np.ndarray) -> np.ndarray:
    """Values rounded to 0.1 % (log scale), so that near-ties go to the tie-breakers."""
    return np.round(np.log(np.maximum(np.asarray(values, float), 1e-300)) * 1000.0)


@dataclass(frozen=True)
class CandidateMemory:
    """One candidate's per-GPU memory, as in ``batchfit estimate --json``."""

    components: dict[str, int]
    overhead: dict[str, int]
    phases: dict[str, int]
    peak_phase: str
    activations_per_layer_bytes: int
    tensor_peak_bytes: int
    total_bytes: int
    capacity_bytes: int
    usable_bytes: int
    headroom_bytes: int
    margin_fraction: float

    @property
    def fits(self) -> bool:
        """Whether the peak fits with the margin (always True for a reported candidate)."""
        return self.headroom_bytes >= 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {'components': dict(self.components), 'overhead': dict(self.overhead),
                'phases': dict(self.phases), 'peak_phase': self.peak_phase,
                'activations_per_layer_bytes': self.activations_per_layer_bytes,
                'tensor_peak_bytes': self.tensor_peak_bytes,
                'total_bytes': self.total_bytes, 'capacity_bytes': self.capacity_bytes,
                'margin_fraction': self.margin_fraction, 'usable_bytes': self.usable_bytes,
                'headroom_bytes': self.headroom_bytes, 'fits': self.fits}


@dataclass(frozen=True)
class Candidate:
    """One fitting configuration, its memory, step time and cost (plain scalars)."""

    rank: int
    nodes: int
    gpus_per_node: int
    gpus: int
    tp: int
    pp: int
    vpp: int
    cp: int
    dp: int
    micro_batch: int
    grad_accum: int
    zero: int
    recompute: str
    sequence_parallel: bool
    global_batch: int
    memory: CandidateMemory
    step_time_s: float
    step_breakdown_s: dict[str, float]
    tokens_per_s: float
    samples_per_s: float
    mfu: float
    hfu: float
    efficiency: float
    achieved_flops_per_gpu: float
    steps: float
    time_to_train_s: float
    time_per_epoch_s: float
    gpu_hours: float
    cost_usd: float
    on_pareto: bool

    @property
    def layout(self) -> str:
        """``tp/pp/cp/dp`` with the virtual stages when interleaved."""
        pp = f'{self.pp}x{self.vpp}' if self.vpp > 1 else f'{self.pp}'
        return f'{self.tp}/{pp}/{self.cp}/{self.dp}'

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN becomes None)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == 'memory':
                value = value.to_dict()
            elif isinstance(value, float) and not math.isfinite(value):
                value = None
            out[name] = value
        return out


@dataclass
class SearchResult:
    """What :func:`search` found.

    The fitting candidates are kept as arrays (``layout``, ``step``, ``train`` and the
    memory rows ``memory_rows`` of ``memory``), in grid order; ``ranking`` orders them
    by the request's sort key and ``pareto`` lists those on the time-to-train vs
    GPU-hours front (fastest first).

    Attributes:
        request: the request.
        status: ``ok``, ``no_factorisation`` (no layout reaches the batch exactly) or
            ``no_fit`` (layouts exist but none fits in memory).
        message: one line explaining a non-``ok`` status ('' when ok).
        target_batch_samples: the target batch in sequences (may be fractional).
        nearest_global_batches: the nearest batches (sequences) below and above the
            target that do have a fitting plan, when the target has none.
        grid_size: candidates enumerated (valid layouts, before the memory check).
        fitting: candidates that fit in memory.
        min_total_bytes: smallest per-GPU peak over the grid (None for an empty grid).
        elapsed_s: wall time of the search.
    """

    request: PlanRequest
    status: str
    message: str
    target_batch_samples: float
    nearest_global_batches: tuple[int | None, int | None]
    grid_size: int
    fitting: int
    min_total_bytes: float | None
    elapsed_s: float
    layout: LayoutArrays | None = None
    memory: MemoryArrays | None = None
    memory_rows: np.ndarray | None = None
    step: StepTimeArrays | None = None
    train: TrainingTimeArrays | None = None
    ranking: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    pareto: np.ndarray = field(default_factory=lambda: np.zeros(0, int))

    def candidate(self, index: int, rank: int = 0) -> Candidate:
        """The fitting candidate at array ``index`` (not rank) as plain scalars."""
        lay, st, tr, mem = self.layout, self.step, self.train, self.memory
        if lay is None or st is None or tr is None or mem is None:
            raise IndexError('the search found no candidates')
        row = int(self.memory_rows[index])  # type: ignore[index]
        req = self.request
        capacity = req.gpu.memory_bytes
        usable = int(capacity * (1 - req.margin_fraction))
        total = round(float(mem.total_bytes[row]))

        def at(array) -> float:
            return float(np.broadcast_to(array, np.shape(st.step_time_s))[index])

        def mem_at(array) -> int:
            return round(float(np.broadcast_to(array, mem.total_bytes.shape)[row]))

        breakdown = {name: at(getattr(st, name)) for name in (
            'compute_s', 'elementwise_s', 'bubble_s', 'tp_comm_s', 'cp_comm_s', 'pp_comm_s',
            'dp_comm_s', 'optimizer_s', 'overhead_s')}
        return Candidate(
            rank=rank, nodes=int(lay.nodes[index]), gpus_per_node=int(lay.gpus_per_node[index]),
            gpus=int(st.gpus[index]), tp=int(lay.tp[index]), pp=int(lay.pp[index]),
            vpp=int(lay.vpp[index]), cp=int(lay.cp[index]), dp=int(lay.dp[index]),
            micro_batch=int(lay.micro_batch[index]), grad_accum=int(lay.grad_accum[index]),
            zero=int(lay.zero[index]), recompute=RECOMPUTE_MODES[int(lay.recompute[index])],
            sequence_parallel=bool(lay.sequence_parallel[index]) and int(lay.tp[index]) > 1,
            global_batch=int(lay.micro_batch[index] * lay.grad_accum[index] * lay.dp[index]),
            memory=CandidateMemory(
                components={k: mem_at(v) for k, v in mem.components.items()},
                overhead={k: mem_at(v) for k, v in mem.overhead.items()},
                phases={k: mem_at(v) for k, v in mem.phase_bytes.items()},
                peak_phase=PHASES[int(mem.peak_phase[row])],
                activations_per_layer_bytes=mem_at(mem.activations_per_layer_bytes),
                tensor_peak_bytes=mem_at(mem.tensor_peak_bytes), total_bytes=total,
                capacity_bytes=capacity, usable_bytes=usable, headroom_bytes=usable - total,
                margin_fraction=req.margin_fraction),
            step_time_s=at(st.step_time_s), step_breakdown_s=breakdown,
            tokens_per_s=at(st.tokens_per_s), samples_per_s=at(st.samples_per_s),
            mfu=at(st.mfu), hfu=at(st.hfu), efficiency=at(st.efficiency),
            achieved_flops_per_gpu=at(st.achieved_flops_per_gpu), steps=at(tr.steps),
            time_to_train_s=at(tr.time_to_train_s), time_per_epoch_s=at(tr.time_per_epoch_s),
            gpu_hours=at(tr.gpu_hours), cost_usd=at(tr.cost_usd),
            on_pareto=bool(np.isin(index, self.pareto)))

    def top(self, k: int | None = None, distinct: bool = True) -> list[Candidate]:
        """The best ``k`` candidates (default: the request's ``top_k``) by the sort key.

        With ``distinct``, a candidate is skipped when a better-ranked one has the same
        GPUs, TP, PP, virtual stages, ZeRO stage and recompute mode and a step time within
        0.1 %: it only trades CP against micro-batch (or DP against accumulation) to the
        same effect. The ranks shown stay the full ranking's.
        """
        k = self.request.top_k if k is None else k
        if not distinct:
            return [self.candidate(int(i), rank + 1) for rank, i in enumerate(self.ranking[:k])]
        lay, st = self.layout, self.step
        if lay is None or st is None:
            return []
        bucket = time_bucket(st.step_time_s)
        seen: set[tuple[int, ...]] = set()
        out: list[Candidate] = []
        for rank, i in enumerate(self.ranking[:max(50 * k, 1000)]):  # enough for k distinct
            key = tuple(int(a[i]) for a in (st.gpus, lay.tp, lay.pp, lay.vpp, lay.zero,
                                            lay.recompute, bucket))
            if key in seen:
                continue
            seen.add(key)
            out.append(self.candidate(int(i), rank + 1))
            if len(out) == k:
                break
        return out

    def pareto_front(self) -> list[Candidate]:
        """Candidates no other beats on both time-to-train and GPU-hours, fastest first."""
        rank_of = np.empty(len(self.ranking), int)
        rank_of[self.ranking] = np.arange(1, len(self.ranking) + 1)
        return [self.candidate(int(i), int(rank_of[i])) for i in self.pareto]

    @property
    def best(self) -> Candidate | None:
        """The top-ranked candidate, or None when nothing fits."""
        return self.candidate(int(self.ranking[0]), 1) if len(self.ranking) else None
