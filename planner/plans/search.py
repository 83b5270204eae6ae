"""Plan search: every parallel layout that reaches a global batch, scored at once.

Given a model, a sequence length, a cluster and a target global batch B, the search
enumerates every candidate

    (stack, nodes, GPUs per node, TP, PP, virtual stages, CP, DP, EP, micro-batch,
     accumulation, ZeRO stage, recompute mode)

with ``tp * pp * cp * dp == GPUs used`` and ``micro_batch * grad_accum * dp == B``
exactly, builds them as numpy arrays (broadcasting and masks, no Python loop per
candidate), prices the memory of the whole grid with one call of
:func:`planner.memory.peak.estimate_arrays` per (stack, recipe) mode
(``PlanRequest.plan_modes``: the stack decides the layouts, ZeRO stages, recompute modes
and recipe its candidates may have; ``planner.stacks``), times the candidates that fit
with one call of :func:`planner.timing.step_time.step_time_arrays` per mode, and ranks
them all together.

Rules a candidate obeys (Megatron-LM's, megatron/training/arguments.py and
megatron/core/parallel_state.py; Narayanan et al. 2021 §3):

* TP divides the attention heads and the KV heads, and stays inside a node
  (``tp <= GPUs per node``, which it divides);
* PP is at most the layers (and divides them unless ``uneven_pipeline``); virtual
  stages need ``pp > 1``, ``grad_accum % pp == 0`` and a whole number of layers per
  chunk (with ``uneven_pipeline``, at least one layer per chunk: the exports then write
  the split, ``planner.export.base.stage_layers``);
* CP splits the sequence into ``2 * cp`` load-balanced chunks (``seq_len % 2cp == 0``);
* ZeRO stages above 0 only where there is something to shard (``dp * cp > 1``); with a
  pipeline only those the stack runs there (DeepSpeed's pipeline engine and Megatron's
  distributed optimizer: ZeRO <= 1); ZeRO-0 beside TP/PP/CP only where the stack composes
  them (torchtitan does not);
* EP (MoE models, stacks with EP) divides the experts and ``dp * cp``;
* with ``request.lora`` (LoRA/QLoRA fine-tuning) TP = PP = CP = 1: PEFT runs data
  parallel only (DDP, ZeRO 1-3 or FSDP), and an LLM.int8 base cannot be sharded by
  ZeRO-3 (bitsandbytes shards only 4-bit weights), so it gets ZeRO 0-2;
* each GPU count is placed on the fewest nodes that hold it (same GPUs, more of the
  traffic on NVLink: spreading it wider is never faster in this model).

The worker follows Orange3's pattern (Orange/widgets/utils/concurrent.py): :func:`search` is a pure
function taking a ``progress(fraction)`` callback and a ``should_stop()`` poll, and
raises :class:`SearchCancelled` when asked to stop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from planner.distinct_rows import packed_key
from planner.errors import InputError
from planner.limits import FigureError
from planner.memory.activations import RECOMPUTE_CODES, RECOMPUTE_ORDER
from planner.memory.peak import MemoryArrays
from planner.plans.request import SORT_KEYS, LayoutLimits, PlanMode, PlanRequest
from planner.plans.result import (
    STATUS_NO_FACTORISATION,
    STATUS_NO_FIT,
    STATUS_OK,
    Candidate,
    CandidateMemory,
    SearchResult,
    time_bucket,
)
from planner.stacks import STACKS, Stack
from planner.timing.step_time import (
    LayoutArrays,
    StepTimeArrays,
    TrainingTimeArrays,
    training_time,
)
from planner.units import GIB

__all__ = [
    'MAX_GRID_ROWS',
    'SORT_KEYS',
    'STATUS_NO_FACTORISATION',
    'STATUS_NO_FIT',
    'STATUS_OK',
    'Candidate',
    'CandidateMemory',
    'GridTooLarge',
    'LayoutLimits',
    'PlanRequest',
    'SearchCancelled',
    'SearchResult',
    'divisors',
    'enumerate_grid',
    'nearest_global_batches',
    'pareto_front',
    'plan_units',
    'ranking_by',
    'search',
]


class SearchCancelled(Exception):  # noqa: N818 (a signal, not an error)
    """``should_stop()`` returned True; the search stopped between two stages."""


# ---- enumeration ------------------------------------------------------------------------

def divisors(n: int) -> np.ndarray:
    """All positive divisors of ``n``, ascending."""
    small = np.arange(1, math.isqrt(n) + 1)
    small = small[n % small == 0]
    large = n // small[::-1]  # ascending; equals small[-1] once when n is a square
    # not np.unique: its masked-array check imports numpy.ma (20 ms of the app's start)
    return np.concatenate([small, large[large > small[-1]]])


def _gpu_counts(req: PlanRequest) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every usable GPU count with the fewest nodes that hold it: (gpus, nodes, per node)."""
    node_grid, per_node_grid = np.meshgrid(np.arange(1, req.max_nodes + 1),
                                           np.arange(1, req.gpus_per_node + 1), indexing='ij')
    nodes, per_node = node_grid.ravel(), per_node_grid.ravel()
    gpus = nodes * per_node
    order = np.lexsort((nodes, gpus))  # by GPUs, then fewest nodes
    gpus, nodes, per_node = gpus[order], nodes[order], per_node[order]
    first = np.concatenate([[True], gpus[1:] != gpus[:-1]])
    gpus, nodes, per_node = gpus[first], nodes[first], per_node[first]
    if req.limits.gpus:
        keep = np.isin(gpus, np.asarray(req.limits.gpus))
        gpus, nodes, per_node = gpus[keep], nodes[keep], per_node[keep]
    return gpus, nodes, per_node


def _axis_values(req: PlanRequest, stack: Stack | None = None) -> dict[str, np.ndarray]:
    """Valid TP, PP, CP, virtual-stage and EP values before combining them, for the
    layouts ``stack`` runs (None: every stack's)."""
    model, lim = req.model, req.limits
    tp = divisors(math.gcd(model.num_heads, model.num_kv_heads))
    tp = lim.allowed('tp', tp[tp <= req.gpus_per_node])
    layers = model.num_layers
    pp = np.arange(1, layers + 1) if lim.uneven_pipeline else divisors(layers)
    pp = lim.allowed('pp', pp)
    cp = np.concatenate([[1], divisors(req.seq_len)[1:]])
    cp = cp[(cp == 1) | ((req.seq_len % (2 * cp) == 0)
                         & (req.seq_len // cp >= lim.min_tokens_per_cp_rank))]
    cp = lim.allowed('cp', cp[cp <= req.max_nodes * req.gpus_per_node])
    vpp = lim.allowed('vpp', np.arange(1, layers + 1))
    ep = divisors(model.moe.num_experts) if model.moe is not None else np.ones(1, int)
    ep = lim.allowed('ep', ep[ep <= req.max_nodes * req.gpus_per_node])
    axes = {'tp': tp, 'pp': pp, 'cp': cp, 'vpp': vpp, 'ep': ep}
    if req.lora is not None:  # PEFT: data parallel only
        axes = {name: values[values == 1] for name, values in axes.items()}
    if stack is not None:
        runs = {'tp': stack.tensor_parallel, 'pp': stack.pipeline_parallel,
                'cp': stack.context_parallel, 'vpp': stack.virtual_stages,
                'ep': stack.expert_parallel}
        axes = {name: values if runs[name] else values[values == 1]
                for name, values in axes.items()}
    return axes


# The most candidates one search holds. A row costs about 800 bytes at the search's
# peak (layout, memory and step-time arrays and their temporaries): 3.2M rows took
# 2.5 GB and 18 s on the 2-core development machine (benchmarks/hostile_inputs.py), so
# 2M rows keep a search under ~1.6 GB. Above it the request is refused with the reason
# and what narrows it.
MAX_GRID_ROWS = 2_000_000
# Elements of one dense boolean block while masks are built (chunks of this size).
_CHUNK_ELEMENTS = 1 << 22


class GridTooLarge(InputError):  # noqa: N818 (named as the brief and docs call it)
    """The search would hold more than :data:`MAX_GRID_ROWS` candidates."""

    def __init__(self, rows: int, stage: str) -> None:
        super().__init__('--nodes', f'more than {rows:,} candidate layouts ({stage}) exceed '
                         f'the search bound of {MAX_GRID_ROWS:,}',
                         'fewer nodes or GPUs per node, a --gpus list, --max-micro-batch, '
                         'or --tp/--pp/--cp lists that narrow the search')
        self.rows, self.stage = rows, stage


def _nonzero_bounded(mask_of: Callable[[int, int], np.ndarray], n: int, width: int,
                     stage: str, cap: int, ndim: int) -> tuple[np.ndarray, ...]:
    """``np.nonzero`` of an ``n``-row mask built ``mask_of(lo, hi)`` a block at a time,
    refusing (:class:`GridTooLarge`) as soon as more than ``cap`` entries are set: the
    memory is bounded by the block and the cap, whatever the request."""
    rows = max(1, _CHUNK_ELEMENTS // max(width, 1))
    parts: list[tuple[np.ndarray, ...]] = []
    total = 0
    for lo in range(0, n, rows):
        found = np.nonzero(mask_of(lo, min(n, lo + rows)))
        total += found[0].size
        if total > cap:
            raise GridTooLarge(total, stage)
        parts.append((found[0] + lo, *found[1:]))
    if not parts:
        return tuple(np.zeros(0, np.intp) for _ in range(ndim))
    return tuple(np.concatenate(axis) for axis in zip(*parts, strict=True))


def _reachable_gpus(gpus: np.ndarray, model_parallel: np.ndarray, batch: int) -> np.ndarray:
    """Which GPU counts split as ``mp * dp`` with ``dp`` dividing the batch (a cheap
    superset of stage 1's mask, so that its dense block spans only these counts)."""
    mp = np.sort(model_parallel)  # not np.unique: it imports numpy.ma (app start-up)
    mp = mp[np.concatenate([[True], mp[1:] != mp[:-1]])] if mp.size else mp
    keep = np.zeros(gpus.size, bool)
    step = max(1, _CHUNK_ELEMENTS // max(mp.size, 1))
    for lo in range(0, gpus.size, step):
        w = gpus[lo:lo + step, None]
        keep[lo:lo + step] = ((w % mp == 0) & (batch % np.maximum(w // mp, 1) == 0)).any(1)
    return keep


def enumerate_grid(req: PlanRequest, batch_samples: int, micro_batches: np.ndarray | None = None,
                   fixed_accum: int | None = None, cap: int = MAX_GRID_ROWS) -> LayoutArrays:
    """Every valid candidate for a global batch of ``batch_samples`` sequences, for every
    (stack, recipe) mode of the request (``PlanRequest.plan_modes``; ``mode`` holds the
    index), each with only the layouts its stack runs.

    Built in stages (GPU count x TP x PP x CP, then micro-batch, then virtual stages,
    then ZeRO x recompute, then EP), each a mask built in bounded blocks and turned into
    flat indices, so the work is proportional to the valid candidates, not to the full
    cross product, and the modes together never hold more than ``cap`` rows.

    Args:
        req: the request (model, cluster, limits, modes).
        batch_samples: global batch B; ``dp`` must divide it.
        micro_batches: micro-batch values to try (default: the divisors of B allowed by
            the limits).
        fixed_accum: force this accumulation instead of ``B / (dp * micro_batch)`` (used
            to find feasible DP sizes regardless of B; then ``dp`` need not divide B).
        cap: the most rows any stage may hold.

    Raises:
        GridTooLarge: a stage would hold more than ``cap`` rows.
    """
    parts: list[LayoutArrays] = []
    for k, mode in enumerate(req.plan_modes()):
        left = cap - sum(len(part) for part in parts)
        parts.append(_enumerate_mode(req, k, mode, batch_samples, micro_batches, fixed_accum,
                                     left))
    return parts[0] if len(parts) == 1 else LayoutArrays.concatenate(parts)


def _enumerate_mode(req: PlanRequest, code: int, mode: PlanMode, batch_samples: int,
                    micro_batches: np.ndarray | None, fixed_accum: int | None,
                    cap: int) -> LayoutArrays:
    """The candidates of one plan mode (see :func:`enumerate_grid`)."""
    model = req.model
    stack = STACKS[mode.stack]
    gpus, nodes, per_node = _gpu_counts(req)
    ax = _axis_values(req, stack)
    tp, pp, cp = ax['tp'], ax['pp'], ax['cp']
    if fixed_accum is None:
        mp_all = (tp[:, None, None] * pp[None, :, None] * cp[None, None, :]).ravel()
        keep = _reachable_gpus(gpus, mp_all, batch_samples)
        gpus, nodes, per_node = gpus[keep], nodes[keep], per_node[keep]
    # Stage 1: GPU count x TP x PP x CP -> DP (TP inside a node, dividing it).
    t, p, c = tp[None, :, None, None], pp[None, None, :, None], cp[None, None, None, :]
    model_parallel = t * p * c

    def stage1(lo: int, hi: int) -> np.ndarray:
        w, g = gpus[lo:hi, None, None, None], per_node[lo:hi, None, None, None]
        ok = (w % model_parallel == 0) & (t <= g) & (g % t == 0)
        if fixed_accum is None:
            ok &= (batch_samples % np.maximum(w // model_parallel, 1) == 0)
        return ok

    iw, it, ip, ic = _nonzero_bounded(stage1, gpus.size, tp.size * pp.size * cp.size,
                                      'GPU counts x TP x PP x CP', cap, 4)
    sel = {'nodes': nodes[iw], 'gpus_per_node': per_node[iw], 'tp': tp[it], 'pp': pp[ip],
           'cp': cp[ic]}
    sel['dp'] = gpus[iw] // (sel['tp'] * sel['pp'] * sel['cp'])

    # Stage 2: micro-batch, hence accumulation.
    if micro_batches is None:
        micro_batches = req.limits.allowed('micro_batch', divisors(batch_samples))
    per_rank = batch_samples // sel['dp']

    def stage2(lo: int, hi: int) -> np.ndarray:
        if fixed_accum is not None:
            return np.ones((hi - lo, len(micro_batches)), bool)
        return per_rank[lo:hi, None] % micro_batches[None, :] == 0

    il, ib = _nonzero_bounded(stage2, sel['dp'].size, len(micro_batches), 'x micro-batch',
                              cap, 2)
    sel = {k: a[il] for k, a in sel.items()}
    sel['micro_batch'] = micro_batches[ib]
    if fixed_accum is None:
        sel['grad_accum'] = batch_samples // (sel['dp'] * sel['micro_batch'])
    else:
        sel['grad_accum'] = np.full(len(il), fixed_accum)

    # Stage 3: virtual pipeline stages (Megatron: pp > 1, accum % pp == 0, whole chunks).
    v = ax['vpp'][None, :] if fixed_accum is None else np.ones((1, 1), int)

    def stage3(lo: int, hi: int) -> np.ndarray:
        p2, m2 = sel['pp'][lo:hi, None], sel['grad_accum'][lo:hi, None]
        if req.limits.uneven_pipeline:
            whole = p2 * v <= model.num_layers
        else:
            whole = (model.num_layers // p2) % v == 0
        return (v == 1) | ((p2 > 1) & (m2 % p2 == 0) & whole)

    il, iv = _nonzero_bounded(stage3, sel['pp'].size, v.shape[1], 'x virtual stages', cap, 2)
    sel = {k: a[il] for k, a in sel.items()}
    sel['vpp'] = v[0, iv]

    # Stage 4: ZeRO stage x recompute mode (ZeRO > 0 only with something to shard; with
    # a pipeline only the stages the stack runs there; ZeRO-0 beside TP/PP/CP only where
    # the stack composes them).
    zeros = np.asarray(mode.zero_stages)
    codes = np.asarray(sorted(RECOMPUTE_CODES[r] for r in mode.recompute_modes))
    shard_all = sel['dp'] * sel['cp']
    split_all = sel['tp'] * sel['pp'] * sel['cp'] > 1
    with_pp = np.zeros(4, dtype=bool)  # a lookup, not np.isin (which imports numpy.ma)
    with_pp[list(stack.zero_with_pp)] = True
    z = zeros[None, :, None]

    def stage4(lo: int, hi: int) -> np.ndarray:
        shard = shard_all[lo:hi, None, None]
        ok = ((z == 0) | (shard > 1)) & ((sel['pp'][lo:hi] == 1)[:, None, None] | with_pp[z])
        if not stack.zero0_with_split:
            ok = ok & ((z != 0) | ~split_all[lo:hi, None, None] | (shard == 1))
        return np.broadcast_to(ok, (hi - lo, len(zeros), len(codes)))

    il, iz, ir = _nonzero_bounded(stage4, shard_all.size, len(zeros) * len(codes),
                                  'x ZeRO x recompute', cap, 3)
    sel = {k: a[il] for k, a in sel.items()}
    sel['zero'], sel['recompute'] = zeros[iz], codes[ir]

    # Stage 5: expert parallelism (MoE, stacks with EP). Each expert split over the TP
    # ranks (etp 0, "as TP"): EP divides dp x cp. A stack with expert tensor parallelism
    # (Megatron) also runs whole experts (etp 1) with EP folded out of tp x dp x cp.
    ep, etp = _expert_axes(ax['ep'], stack.expert_tensor_parallel and ax['ep'].max() > 1)
    dp_cp = sel['dp'] * sel['cp']
    tp = sel['tp']

    def stage5(lo: int, hi: int) -> np.ndarray:
        folded = np.where(etp[None, :] == 0, 1, tp[lo:hi, None])
        return ((dp_cp[lo:hi, None] * folded) % ep[None, :] == 0) & (
            (etp[None, :] == 0) | (tp[lo:hi, None] > 1))

    il, ie = _nonzero_bounded(stage5, dp_cp.size, ep.size, 'x expert parallel', cap, 2)
    layout = LayoutArrays(**{k: a[il] for k, a in sel.items()},
                          sequence_parallel=np.full(il.size, req.limits.sequence_parallel
                                                    and stack.sequence_parallel),
                          ep=ep[ie], etp=etp[ie], mode=np.full(il.size, code))
    hybrid = mode.hybrid_shard_stages
    return _with_hybrid_shards(layout, np.asarray(hybrid)) if hybrid else layout


def _with_hybrid_shards(lay: LayoutArrays, zeros: np.ndarray) -> LayoutArrays:
    """``lay`` and, for its FSDP rows (ZeRO stage in ``zeros``, the mode's HSDP stages;
    no EP) whose dp x cp ranks span several nodes, the same rows as HSDP with one node's
    ranks per shard group: FSDP's collectives stay on NVLink and only the sharded
    gradients cross the network."""
    # the dp x cp ranks on one node (PP outermost)
    per_node = np.maximum(lay.gpus_per_node // lay.tp, 1)
    dp_cp = lay.dp * lay.cp
    replicas = dp_cp // per_node
    ok = (np.isin(lay.zero, zeros) & (lay.ep == 1) & (lay.gpus_per_node % lay.tp == 0)
          & (dp_cp % per_node == 0) & (replicas > 1) & (lay.dp % np.maximum(replicas, 1) == 0))
    rows = np.flatnonzero(ok)
    if not rows.size:
        return lay
    hybrid = lay.take(rows)
    hybrid.dp_replicate = replicas[rows]
    return LayoutArrays.concatenate([lay, hybrid])


def _expert_axes(ep: np.ndarray, whole_experts: bool) -> tuple[np.ndarray, np.ndarray]:
    """(ep, etp) pairs to try: every EP size with experts split as TP (etp 0), and with
    ``whole_experts`` the EP sizes above 1 again with etp 1."""
    etp = np.zeros(ep.size, int)
    if not whole_experts:
        return ep, etp
    many = ep[ep > 1]
    return np.concatenate([ep, many]), np.concatenate([etp, np.ones(many.size, int)])


# ---- ranking ----------------------------------------------------------------------------

def pareto_front(time_s: np.ndarray, gpu_hours: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both axes, fastest first.

    A point is dominated when another is no worse on both and better on one; of
    identical points only the first is kept.
    """
    time_s, gpu_hours = np.asarray(time_s, float), np.asarray(gpu_hours, float)
    if time_s.size == 0:
        return np.zeros(0, int)
    order = np.lexsort((gpu_hours, time_s))  # by time, then GPU-hours
    best_before = np.minimum.accumulate(gpu_hours[order])
    prior = np.concatenate([[np.inf], best_before[:-1]])
    return order[gpu_hours[order] < prior]


def _ranking(sort_by: str, time_s: np.ndarray, cost: np.ndarray, headroom: np.ndarray,
             layout: LayoutArrays, gpus: np.ndarray) -> np.ndarray:
    """Indices sorted by the key; near-ties (0.1 %) go to the simpler layout.

    Simpler means, in order: fewer GPUs, a lower ZeRO stage, less recompute, no CP,
    no interleaving, less PP, less TP; then more memory headroom.
    """
    if sort_by == 'headroom':  # a float key first: no integer packing
        return _ranking_lexsort(sort_by, time_s, cost, headroom, layout, gpus)
    simpler = [layout.zero, RECOMPUTE_ORDER[layout.recompute], layout.cp, layout.vpp,
               layout.pp, layout.tp]
    by_time = time_bucket(time_s)
    primary = {  # most significant first
        'time': lambda: [by_time, gpus],
        'cost': lambda: [time_bucket(cost), by_time, gpus],
        'gpus': lambda: [gpus, by_time],
    }[sort_by]()
    columns = [np.asarray(c) for c in (*primary, *simpler)]
    if all(np.isfinite(c).all() for c in columns[:len(primary)]):
        # Every integer key packed into one (mixed radix): np.lexsort then sorts two
        # keys instead of nine (a third of the search's ranking time).
        key = packed_key([np.broadcast_to(c, np.shape(headroom)) for c in columns])
        if key.ndim == 1:
            return np.lexsort((-headroom, key))
    return _ranking_lexsort(sort_by, time_s, cost, headroom, layout, gpus)


def _ranking_lexsort(sort_by: str, time_s: np.ndarray, cost: np.ndarray,
                     headroom: np.ndarray, layout: LayoutArrays,
                     gpus: np.ndarray) -> np.ndarray:
    """:func:`_ranking` by one key per axis (any key values)."""
    # One integer per candidate, ordered as listed below (each axis < 4096).
    simpler = np.zeros(np.shape(gpus), np.int64)
    for axis in (layout.zero, RECOMPUTE_ORDER[layout.recompute], layout.cp, layout.vpp,
                 layout.pp, layout.tp):
        simpler = simpler * 4096 + np.asarray(axis, np.int64)
    primary = {  # np.lexsort: the LAST key is the primary one
        'time': (gpus, time_bucket(time_s)),
        'cost': (gpus, time_bucket(time_s), time_bucket(cost)),
        'gpus': (time_bucket(time_s), gpus),
        'headroom': (gpus, time_bucket(time_s), -headroom),
    }[sort_by]
    return np.lexsort((-headroom, simpler, *primary))


# ---- the memory pass --------------------------------------------------------------------

def _fitting_memory(req: PlanRequest, grid: LayoutArrays, usable: float
                    ) -> tuple[LayoutArrays, MemoryArrays | None, float]:
    """The layouts of ``grid`` that fit, their memory, and the smallest peak estimated.

    Layouts whose weights, optimizer states and activations alone overflow cannot fit:
    :func:`tensor_peak_floor` drops them before the full estimate (half the grid on a
    typical request); their peaks exceed every fitting one's, so the smallest peak among
    the rest is the grid's whenever anything fits. (Chunks on two threads were tried:
    numpy's loops release the GIL, but the chunking cost as much as it saved.)
    """
    floor = req.memory_floor(grid)
    kept = grid.take(np.flatnonzero(floor <= usable))
    if not len(kept):
        return kept, None, math.inf
    memory = req.memory_arrays(kept)
    total = np.broadcast_to(np.asarray(memory.total_bytes, float), (len(kept),))
    rows = np.flatnonzero(total <= usable)
    return kept.take(rows), memory.take(rows), float(total.min())


# ---- the search -------------------------------------------------------------------------

def search(request: PlanRequest, progress: Callable[[float], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> SearchResult:
    """Every candidate plan for the request, ranked, with the Pareto front.

    Args:
        request: what to plan.
        progress: called with the fraction done (0 to 1) after each stage.
        should_stop: polled between stages; True cancels the search.

    Returns:
        The ranked fitting candidates. When none exists, ``status`` says why and
        ``nearest_global_batches`` offers the nearest batches that do have a plan.

    Raises:
        SearchCancelled: ``should_stop()`` returned True.
        InputError: the request is inconsistent (checked when it was built).
    """
    started = time.perf_counter()
    req = request

    def step(fraction: float) -> None:
        if should_stop is not None and should_stop():
            raise SearchCancelled
        if progress is not None:
            progress(fraction)

    step(0.0)
    target = req.target_batch_samples
    usable = req.usable_bytes
    if target != int(target):
        return _without_plan(req, started, STATUS_NO_FACTORISATION,
                             f'{req.global_batch_tokens:,} tokens is {target:.2f} sequences of '
                             f'{req.seq_len}: no exact global batch', 0, None, step)
    batch = int(target)
    grid = enumerate_grid(req, batch)
    step(0.2)
    if len(grid) == 0:
        return _without_plan(req, started, STATUS_NO_FACTORISATION,
                             f'no layout on up to {req.max_nodes} x {req.gpus_per_node} GPUs '
                             f'factorises a global batch of {batch} exactly', 0, None, step)

    grid_size = len(grid)
    layout, memory, min_total = _fitting_memory(req, grid, usable)
    rows = np.arange(len(layout))
    step(0.6)
    if rows.size == 0:
        # the smallest peak over the whole grid, for the message
        total = np.asarray(req.memory_arrays(grid).total_bytes, float)
        return _without_plan(req, started, STATUS_NO_FIT,
                             f'none of the {len(grid):,} layouts for a global batch of {batch} '
                             f'fits in {usable / GIB:.1f} GiB per GPU (smallest peak '
                             f'{total.min() / GIB:.1f} GiB)', len(grid), float(total.min()),
                             step)

    assert memory is not None  # some layout fits, so its memory was estimated
    st = req.step_times(layout)
    step(0.85)
    if req.length is not None:
        tr = training_time(st.step_time_s, batch, req.seq_len, st.gpus, req.length, req.price)
        time_key = tr.time_to_train_s
    else:  # no data size: rank by step time; GPU-hours per step
        tr = TrainingTimeArrays(
            steps=np.full(rows.size, math.nan), time_to_train_s=np.full(rows.size, math.nan),
            time_per_epoch_s=np.full(rows.size, math.nan),
            gpu_hours=np.full(rows.size, math.nan), cost_usd=np.full(rows.size, math.nan))
        time_key = st.step_time_s
    _guard_figures(st, tr if req.length is not None else None, memory)
    cost_key = st.step_time_s * st.gpus if req.length is None else tr.gpu_hours
    headroom = usable - np.asarray(memory.total_bytes, float)
    ranking = _ranking(req.sort_by, time_key, cost_key, headroom, layout, st.gpus)
    front = pareto_front(time_key, cost_key)
    step(1.0)
    return SearchResult(
        request=req, status=STATUS_OK, message='', target_batch_samples=target,
        nearest_global_batches=(None, None), grid_size=grid_size, fitting=int(rows.size),
        # a dropped layout's peak exceeds every fitting one's: the grid's minimum is here
        min_total_bytes=min_total, elapsed_s=time.perf_counter() - started,
        layout=layout, memory=memory, memory_rows=rows, step=st, train=tr, ranking=ranking,
        pareto=front)


def _guard_figures(st: StepTimeArrays, tr: TrainingTimeArrays | None,
                   memory: MemoryArrays) -> None:
    """The final guard: every figure a result shows is finite and non-negative, else a
    :class:`~planner.limits.FigureError` (never a negative time, MFU or cost on screen)."""
    figures = {'step time': st.step_time_s, 'tokens per second': st.tokens_per_s,
               'MFU': st.mfu, 'memory': memory.total_bytes}
    if tr is not None:
        figures.update({'time to train': tr.time_to_train_s, 'GPU-hours': tr.gpu_hours,
                        'cost': tr.cost_usd, 'steps': tr.steps})
    for what, values in figures.items():
        values = np.asarray(values, float)
        bad = ~(np.isfinite(values) & (values >= 0))
        if bad.any():
            raise FigureError(what, float(values[bad].flat[0]))


def ranking_by(result: SearchResult, sort_by: str) -> np.ndarray:
    """The fitting candidates' indices in the order ``search`` gives with ``sort_by``.

    The same keys and tie-breaks as the search's own ranking, on the arrays it kept, so
    a view can re-rank every candidate without searching again.
    """
    st, tr, layout, memory = result.step, result.train, result.layout, result.memory
    if sort_by not in SORT_KEYS:
        raise InputError('--sort', f'unknown sort key {sort_by!r}', ', '.join(SORT_KEYS))
    if not result.fitting or st is None or tr is None or layout is None or memory is None:
        return np.zeros(0, int)
    req = result.request
    timed = req.length is not None
    time_key = tr.time_to_train_s if timed else st.step_time_s
    cost_key = tr.gpu_hours if timed else st.step_time_s * st.gpus
    headroom = req.usable_bytes - np.asarray(memory.total_bytes, float)
    return _ranking(sort_by, time_key, cost_key, headroom, layout, st.gpus)


def _without_plan(req: PlanRequest, started: float, status: str, message: str, grid_size: int,
                  min_total: float | None, step: Callable[[float], None]) -> SearchResult:
    """A result with no candidates, offering the nearest global batches that have one."""
    try:
        below, above = nearest_global_batches(req)
    except GridTooLarge:
        below = above = None
        message += ('; the nearest global batches were not searched (more layouts than the '
                    'search bound)')
    if below is None and above is None and 'not searched' in message:
        pass
    elif below is None and above is None:
        message += '; no global batch has a plan with these GPUs and options'
    else:
        offers = [f'{n} sequences ({n * req.seq_len:,} tokens) {side}'
                  for n, side in ((below, 'below'), (above, 'above')) if n is not None]
        message += '; nearest global batches with a plan: ' + ', '.join(offers)
    step(1.0)
    return SearchResult(request=req, status=status, message=message,
                        target_batch_samples=req.target_batch_samples,
                        nearest_global_batches=(below, above), grid_size=grid_size, fitting=0,
                        min_total_bytes=min_total, elapsed_s=time.perf_counter() - started)


def nearest_global_batches(req: PlanRequest) -> tuple[int | None, int | None]:
    """The nearest global batches (sequences) strictly below and above the target that
    have a fitting plan (see :func:`plan_units`)."""
    units = plan_units(req)
    if units.size == 0:
        return None, None
    target = req.target_batch_samples
    below = np.floor(np.nextafter(target, 0) / units) * units
    below = below[below >= units]
    above = (np.floor(target / units) + 1) * units
    return (int(below.max()) if below.size else None), int(above.min())


def plan_units(req: PlanRequest) -> np.ndarray:
    """The batch units ``dp * b`` (sequences) with a fitting layout: a global batch has a
    plan when it is a multiple of one of them.

    A layout (TP, PP, CP, DP, ZeRO, recompute) that fits at the smallest allowed
    micro-batch b with ``grad_accum >= pp`` (the most micro-batches in flight) also
    fits at any smaller accumulation, so it serves every batch that is a multiple of
    ``dp * b``. One memory call over those layouts gives the usable ``dp * b`` units.

    Raises:
        GridTooLarge: more layouts than the search bound.
    """
    b_min = min(req.limits.micro_batch, default=1)
    pp_max = max(int(_axis_values(req)['pp'].max(initial=1)), 2)
    grid = enumerate_grid(req, 1, micro_batches=np.asarray([b_min]), fixed_accum=pp_max)
    if len(grid) == 0:
        return np.zeros(0, np.int64)
    memory = req.memory_arrays(grid)  # each candidate with its own stack and recipe
    return np.unique(grid.dp[np.asarray(memory.total_bytes) <= req.usable_bytes] * b_min)
