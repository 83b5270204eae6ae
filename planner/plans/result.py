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

from planner.distinct_rows import packed_key
from planner.memory.peak import PHASES, MemoryArrays
from planner.plans.request import PlanRequest
from planner.timing.step_time import (
    RECOMPUTE_MODES,
    LayoutArrays,
    StepTimeArrays,
    TrainingTimeArrays,
)

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
    """One fitting configuration, its memory, step time and cost (plain scalars).

    ``step_breakdown_s`` adds up to ``step_time_s``; ``dequant_s`` is the part of its
    ``elementwise_s`` that dequantizes a QLoRA base (0 otherwise).
    """

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
    dequant_s: float = 0.0
    framework: str = 'hf'
    precision: str = 'amp-bf16'
    ep: int = 1
    etp: int = 0  # experts split over etp ranks; 0: over the TP ranks (Megatron's default)
    dp_replicate: int = 1  # HSDP: copies of the FSDP shard group (1: plain FSDP)

    @property
    def expert_tp(self) -> int:
        """The expert-tensor-parallel size (``--expert-tensor-parallel-size``)."""
        return self.etp or self.tp

    @property
    def layout(self) -> str:
        """``tp/pp/cp/dp`` with the virtual stages when interleaved (and ``ep`` when
        experts are split, with ``etp`` when it is not the TP size)."""
        pp = f'{self.pp}x{self.vpp}' if self.vpp > 1 else f'{self.pp}'
        ep = f' ep{self.ep}' if self.ep > 1 else ''
        if self.ep > 1 and self.expert_tp != self.tp:
            ep += f' etp{self.expert_tp}'
        hsdp = f' hsdp{self.dp_replicate}' if self.dp_replicate > 1 else ''
        return f'{self.tp}/{pp}/{self.cp}/{self.dp}{ep}{hsdp}'

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN becomes None)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == 'memory':
                value = value.to_dict()
            elif name == 'etp':
                value = self.expert_tp
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
    GPU-hours front (fastest first). The search keeps memory totals only (``memory``
    without ``components``); :meth:`candidates` estimates the named parts of the rows
    it returns.

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
        return self.candidates([index], [rank])[0]

    def candidates(self, indices, ranks) -> list[Candidate]:
        """The fitting candidates at array ``indices`` (not ranks) as plain scalars.

        Every array is broadcast and indexed once for all of them (a table of 100 rows
        costs about as much as one row).
        """
        idx = np.asarray(indices, dtype=np.intp).reshape(-1)
        if not idx.size:
            return []
        lay, st, tr, mem = self.layout, self.step, self.train, self.memory
        if lay is None or st is None or tr is None or mem is None:
            raise IndexError('the search found no candidates')
        rows = np.asarray(self.memory_rows)[idx]
        req = self.request
        if not mem.components:  # the search kept totals only: estimate these rows' parts
            mem = req.memory_arrays(lay.take(idx), parts=True)
            rows = np.arange(idx.size)
        capacity = req.gpu.memory_bytes
        usable = int(capacity * (1 - req.margin_fraction))
        shape, mem_shape = np.shape(st.step_time_s), mem.total_bytes.shape

        def at(array) -> list[float]:
            return np.broadcast_to(array, shape)[idx].astype(float).tolist()

        def ints(array) -> list[int]:
            return np.broadcast_to(array, shape)[idx].astype(np.int64).tolist()

        def mem_at(array) -> list[int]:
            return np.round(np.broadcast_to(array, mem_shape)[rows].astype(float)
                            ).astype(np.int64).tolist()

        def columns(table) -> list[dict[str, int]]:
            values = {k: mem_at(v) for k, v in table.items()}
            return [{k: v[j] for k, v in values.items()} for j in range(len(idx))]

        breakdown_names = ('compute_s', 'elementwise_s', 'bubble_s', 'tp_comm_s', 'cp_comm_s',
                           'pp_comm_s', 'dp_comm_s', 'ep_comm_s', 'optimizer_s', 'overhead_s')
        breakdown = {name: at(getattr(st, name)) for name in breakdown_names}
        components, overhead = columns(mem.components), columns(mem.overhead)
        phases = columns(mem.phase_bytes)
        per_layer = mem_at(mem.activations_per_layer_bytes)
        tensor_peak, total = mem_at(mem.tensor_peak_bytes), mem_at(mem.total_bytes)
        peak_phase = np.asarray(mem.peak_phase)[rows].tolist()
        nodes, per_node, gpus = ints(lay.nodes), ints(lay.gpus_per_node), ints(st.gpus)
        tp, pp, vpp, cp, dp = (ints(lay.tp), ints(lay.pp), ints(lay.vpp), ints(lay.cp),
                               ints(lay.dp))
        micro, accum, zero = ints(lay.micro_batch), ints(lay.grad_accum), ints(lay.zero)
        recompute, sp = ints(lay.recompute), ints(lay.sequence_parallel)
        ep, etp, modes = ints(lay.ep), ints(lay.etp), ints(lay.mode)
        replicas = ints(lay.dp_replicate)
        plan_modes = req.plan_modes()
        scalars = {name: at(getattr(st, name)) for name in (
            'step_time_s', 'tokens_per_s', 'samples_per_s', 'mfu', 'hfu', 'efficiency',
            'achieved_flops_per_gpu', 'dequant_s')}
        scalars.update({name: at(getattr(tr, name)) for name in (
            'steps', 'time_to_train_s', 'time_per_epoch_s', 'gpu_hours', 'cost_usd')})
        on_pareto = np.isin(idx, self.pareto).tolist()
        out = []
        for j, rank in enumerate(ranks):
            out.append(Candidate(
                rank=int(rank), nodes=nodes[j], gpus_per_node=per_node[j], gpus=gpus[j],
                tp=tp[j], pp=pp[j], vpp=vpp[j], cp=cp[j], dp=dp[j], micro_batch=micro[j],
                grad_accum=accum[j], zero=zero[j], recompute=RECOMPUTE_MODES[recompute[j]],
                sequence_parallel=bool(sp[j]) and tp[j] > 1,
                global_batch=micro[j] * accum[j] * dp[j],
                memory=CandidateMemory(
                    components=components[j], overhead=overhead[j], phases=phases[j],
                    peak_phase=PHASES[int(peak_phase[j])],
                    activations_per_layer_bytes=per_layer[j], tensor_peak_bytes=tensor_peak[j],
                    total_bytes=total[j], capacity_bytes=capacity, usable_bytes=usable,
                    headroom_bytes=usable - total[j], margin_fraction=req.margin_fraction),
                step_breakdown_s={name: breakdown[name][j] for name in breakdown_names},
                on_pareto=bool(on_pareto[j]), framework=plan_modes[modes[j]].stack,
                precision=plan_modes[modes[j]].precision, ep=ep[j], etp=etp[j],
                dp_replicate=replicas[j],
                **{name: values[j] for name, values in scalars.items()}))
        return out

    def top(self, k: int | None = None, distinct: bool = True) -> list[Candidate]:
        """The best ``k`` candidates (default: the request's ``top_k``) by the sort key.

        With ``distinct``, a candidate is skipped when a better-ranked one has the same
        GPUs, TP, PP, virtual stages, ZeRO stage and recompute mode and a step time within
        0.1 %: it only trades CP against micro-batch (or DP against accumulation) to the
        same effect. The ranks shown stay the full ranking's.
        """
        k = self.request.top_k if k is None else k
        if not distinct:
            chosen = self.ranking[:k]
            return self.candidates(chosen, range(1, len(chosen) + 1))
        if self.layout is None or self.step is None:
            return []
        head = self.ranking[:max(50 * k, 1000)]  # enough for k distinct
        ranks = np.flatnonzero(self.first_distinct(head))[:k]
        return self.candidates(head[ranks], ranks + 1)

    def first_distinct(self, order: np.ndarray) -> np.ndarray:
        """For candidates at array indices ``order``: True where none before it in
        ``order`` is a near-duplicate (same GPUs, TP, PP, virtual stages, ZeRO stage,
        recompute mode, EP and stack mode, step time within 0.1 %; see :meth:`top`)."""
        lay, st = self.layout, self.step
        order = np.asarray(order, dtype=np.intp)
        mask = np.zeros(order.size, bool)
        if lay is None or st is None or not order.size:
            return mask
        shape = np.shape(st.step_time_s)
        columns = [np.broadcast_to(a, shape)[order].astype(np.int64) for a in (
            time_bucket(st.step_time_s), st.gpus, lay.tp, lay.pp, lay.vpp, lay.zero,
            lay.recompute, lay.ep, lay.etp, lay.dp_replicate, lay.mode)]
        keys = packed_key(columns)
        _, first = np.unique(keys, axis=0 if keys.ndim == 2 else None, return_index=True)
        mask[first] = True
        return mask

    def pareto_front(self) -> list[Candidate]:
        """Candidates no other beats on both time-to-train and GPU-hours, fastest first."""
        rank_of = np.empty(len(self.ranking), int)
        rank_of[self.ranking] = np.arange(1, len(self.ranking) + 1)
        return self.candidates(self.pareto, rank_of[self.pareto])

    def request_for(self, candidate: Candidate) -> PlanRequest:
        """The request with ``candidate``'s stack and recipe fixed: what its plan file,
        its export and a re-run of its layout use."""
        return self.request.for_stack(candidate.framework, candidate.precision)

    @property
    def best(self) -> Candidate | None:
        """The top-ranked candidate, or None when nothing fits."""
        return self.candidate(int(self.ranking[0]), 1) if len(self.ranking) else None
