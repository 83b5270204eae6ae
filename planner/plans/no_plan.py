"""Why a search found no plan, and the nearest change that would give one.

:func:`explain_no_plan` names the constraint that removed the candidates, in this
order (the first that applies is the reason):

1. a token batch that is not a whole number of sequences;
2. an axis the request left without a valid value: pipeline stages that do not divide
   the layers (``--uneven-pipeline`` allows them), tensor-parallel sizes that do not
   divide the heads or do not fit in a node, context-parallel sizes the sequence cannot
   be split into, a GPU list beyond the cluster;
3. a global batch no layout factorises (``micro-batch x accumulation x DP``);
4. memory: the layout with the smallest peak, the part that dominates it, how much is
   missing, and the options that would cut that part.

The result is plain data with the English text the CLI prints; the app shows the same
text (ui/ translates it where it has a template).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.defaults import RECOMPUTE_MODES
from planner.plans.request import PlanRequest
from planner.plans.result import STATUS_NO_FIT, STATUS_OK, SearchResult

GIB = 2**30

# What cuts each memory part, in the order a practitioner would try it. The option is
# named as the request spells it; a suggestion is made only when the request does not
# already include it.
_CUTS: dict[str, tuple[str, ...]] = {  # planner.memory.report.COMPONENT_LABELS' keys
    'weights': ('zero3', 'tp', 'pp', 'more_gpus', 'larger_gpu'),
    'gradients': ('zero2', 'tp', 'pp', 'more_gpus'),
    'unsharded_grad': ('zero2', 'tp', 'pp'),
    'optimizer_states': ('zero1', 'optimizer_8bit', 'tp', 'pp', 'more_gpus'),
    'optimizer_step_temp': ('zero1', 'tp', 'pp'),
    'activations': ('recompute_full', 'micro_batch', 'cp', 'tp', 'shorter_sequence'),
    'attention_scores_temp': ('flash', 'micro_batch', 'cp', 'tp'),
    'forward_temp': ('micro_batch', 'cp', 'tp'),
    'backward_temp': ('micro_batch', 'cp', 'tp'),
    'logits': ('micro_batch', 'tp', 'shorter_sequence'),
    'autocast_copies': ('tp', 'pp', 'recompute_full'),
    'zero3_gathered': ('tp', 'pp'),
    'buffers': ('tp', 'pp'),
}
_CUT_WORDS: dict[str, str] = {
    'zero3': 'ZeRO-3 (FSDP full shard) shards the weights over the data-parallel ranks',
    'flash': 'flash attention keeps no s x s scores',
    'zero2': 'ZeRO-2 shards the gradients',
    'zero1': 'ZeRO-1 shards the optimizer states',
    'optimizer_8bit': 'an 8-bit optimizer (adamw-8bit) keeps a quarter of the states',
    'tp': 'more tensor parallelism splits every layer',
    'pp': 'more pipeline stages split the layers',
    'cp': 'context parallelism splits the sequence',
    'recompute_full': 'full recompute keeps one input per layer instead of its activations',
    'micro_batch': 'a micro-batch of 1 holds the fewest activations',
    'shorter_sequence': 'a shorter sequence',
    'more_gpus': 'more nodes (more GPUs to shard and split over)',
    'larger_gpu': 'a GPU with more memory',
    'margin': 'a smaller memory margin',
}


@dataclass(frozen=True)
class NoPlanExplanation:
    """Why there is no plan.

    Attributes:
        constraint: ``tokens_not_whole``, ``pp_layers``, ``tp_heads``, ``cp_sequence``,
            ``gpus``, ``batch_factorisation`` or ``memory``.
        field: the input to change (a CLI flag, as errors name fields).
        text: one paragraph in English (the CLI prints it; the app shows it).
        nearest: nearest allowed values by input (``pp``: [14, 18], ``global_batch``:
            [976, 977] ...).
        suggestions: option codes (see ``_CUT_WORDS``) that would help.
        dominant: the largest memory part of the smallest peak (``memory`` only).
        smallest_peak_bytes: the smallest per-GPU peak of any layout (``memory`` only).
        usable_bytes: the per-GPU memory a plan may take.
        parts_bytes: the parts of the smallest peak (``memory`` only).
    """

    constraint: str
    field: str
    text: str
    nearest: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    suggestions: tuple[str, ...] = ()
    dominant: str | None = None
    smallest_peak_bytes: float | None = None
    usable_bytes: float | None = None
    parts_bytes: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {'constraint': self.constraint, 'field': self.field, 'text': self.text,
                'nearest': {k: list(v) for k, v in self.nearest.items()},
                'suggestions': list(self.suggestions), 'dominant': self.dominant,
                'smallest_peak_bytes': self.smallest_peak_bytes,
                'usable_bytes': self.usable_bytes, 'parts_bytes': dict(self.parts_bytes)}


def explain_no_plan(request: PlanRequest, result: SearchResult) -> NoPlanExplanation | None:
    """Why ``result`` (the search of ``request``) has no plan; None when it has one."""
    if result.status == STATUS_OK:
        return None
    req = request
    target = req.target_batch_samples
    if target != int(target):
        return _tokens_not_whole(req, result)
    axis = _empty_axis(req)
    if axis is not None:
        return axis
    if result.status == STATUS_NO_FIT:
        return _memory(req, int(target))
    return _batch_factorisation(req, result)


# ---- 1. the token batch ------------------------------------------------------------------

def _tokens_not_whole(req: PlanRequest, result: SearchResult) -> NoPlanExplanation:
    tokens, s = int(req.global_batch_tokens or 0), req.seq_len
    below, above = (tokens // s) * s, (tokens // s + 1) * s
    text = (f'{tokens:,} tokens is not a whole number of sequences of {s:,} tokens '
            f'({tokens / s:,.2f})')
    nearest = {'global_batch_tokens': [t for t in (below, above) if t > 0]}
    expl = NoPlanExplanation('tokens_not_whole', '--global-batch-tokens', text,
                             nearest=nearest)
    return _with_batches(req, expl, *result.nearest_global_batches)


# ---- 2. an axis without a valid value ------------------------------------------------------

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0] if n <= 1_000_000 else [1, n]


def _closest(allowed: list[int], asked: tuple[int, ...] | int | None) -> list[int]:
    """The allowed values nearest the asked ones (at most two: below and above)."""
    if not allowed:
        return []
    if asked is None or asked == ():
        return allowed[:2]
    wanted = asked if isinstance(asked, tuple) else (asked,)
    out: set[int] = set()
    for w in wanted:
        lower = [a for a in allowed if a <= w]
        upper = [a for a in allowed if a >= w]
        if lower:
            out.add(max(lower))
        if upper:
            out.add(min(upper))
    return sorted(out)


def _empty_axis(req: PlanRequest) -> NoPlanExplanation | None:
    from planner.plans.search import _axis_values, _gpu_counts

    lim, model = req.limits, req.model
    ax = _axis_values(req)
    if not ax['pp'].size:
        layers = model.num_layers
        asked = lim.pp or lim.max_pp
        allowed = [d for d in _divisors(layers) if lim.max_pp is None or d <= lim.max_pp]
        text = (f'pipeline sizes {_words(asked)} do not divide the {layers} layers of '
                f'{model.name}; sizes that do: {", ".join(map(str, _divisors(layers)))}')
        if not lim.uneven_pipeline and any(p <= layers for p in (lim.pp or (1,))):
            text += ('; or allow uneven stages with --uneven-pipeline (no stage holds more '
                     'than ceil(layers / pp); the megatron and torchtitan exports write the '
                     'split)')
        return NoPlanExplanation('pp_layers', '--pp', text + '.',
                                 nearest={'pp': _closest(allowed, lim.pp or None)},
                                 suggestions=() if lim.uneven_pipeline else ('uneven_pipeline',))
    if not ax['tp'].size:
        g = math.gcd(model.num_heads, model.num_kv_heads)
        allowed = [d for d in _divisors(g) if d <= req.gpus_per_node]
        text = (f'tensor-parallel sizes {_words(lim.tp or lim.max_tp)} do not divide the '
                f'{model.num_heads} attention heads and {model.num_kv_heads} KV heads of '
                f'{model.name} within a node of {req.gpus_per_node} GPUs; sizes that do: '
                f'{", ".join(map(str, allowed))}')
        return NoPlanExplanation('tp_heads', '--tp', text + '.',
                                 nearest={'tp': _closest(allowed, lim.tp or None)})
    if not ax['cp'].size:
        s, floor = req.seq_len, lim.min_tokens_per_cp_rank
        allowed = [c for c in _divisors(s) if c == 1 or (s % (2 * c) == 0 and s // c >= floor)]
        text = (f'context-parallel sizes {_words(lim.cp or lim.max_cp)} cannot split a '
                f'sequence of {s:,} tokens into 2 x CP equal chunks of at least {floor:,} '
                f'tokens per rank; sizes that can: {", ".join(map(str, allowed[:12]))}')
        return NoPlanExplanation('cp_sequence', '--cp', text + '.',
                                 nearest={'cp': _closest(allowed, lim.cp or None)})
    if lim.gpus and not _gpu_counts(req)[0].size:
        most = req.max_nodes * req.gpus_per_node
        text = (f'the GPU counts {_words(lim.gpus)} are not reachable on up to '
                f'{req.max_nodes} x {req.gpus_per_node} GPUs (at most {most:,})')
        return NoPlanExplanation('gpus', '--gpus', text + '.', nearest={'gpus': [most]})
    return None


def _words(values) -> str:
    if values is None or values == ():
        return 'allowed'
    if isinstance(values, int):
        return f'up to {values}'
    return ', '.join(map(str, values))


# ---- 3. the global batch -------------------------------------------------------------------

def _batch_factorisation(req: PlanRequest, result: SearchResult) -> NoPlanExplanation:
    batch = int(req.target_batch_samples)
    below, above = result.nearest_global_batches
    most = req.max_nodes * req.gpus_per_node
    text = (f'no layout on up to {req.max_nodes} x {req.gpus_per_node} GPUs splits a global '
            f'batch of {batch:,} sequences as micro-batch x accumulation x data-parallel '
            f'size (with TP x PP x CP x DP GPUs, at most {most:,})')
    lim = req.limits
    only = [f'{name} {_words(values)}' for name, values in (
        ('micro-batches', lim.micro_batch or lim.max_micro_batch), ('GPU counts', lim.gpus))
        if values]
    if only:
        text += ' with ' + ' and '.join(only)
    return _with_batches(req, NoPlanExplanation('batch_factorisation', '--global-batch', text),
                         below, above)


def _with_batches(req: PlanRequest, expl: NoPlanExplanation, below: int | None,
                  above: int | None) -> NoPlanExplanation:
    """``expl`` with the nearest batches that have a plan, and round ones nearby."""
    s = req.seq_len
    nearest = [n for n in (below, above) if n is not None]
    text = expl.text
    if nearest:
        text += '; nearest global batches with a plan: ' + ', '.join(
            f'{n:,} sequences ({n * s:,} tokens)' for n in nearest)
        nice = nice_batches_with_plan(req)
        if nice and nice != nearest:
            text += '; round ones: ' + ', '.join(f'{n:,} sequences ({n * s:,} tokens)'
                                                 for n in nice)
    elif expl.constraint != 'memory':
        text += '; no global batch has a plan with these GPUs and options'
    return NoPlanExplanation(expl.constraint, expl.field, text + '.',
                             nearest={**expl.nearest, 'global_batch': nearest},
                             suggestions=expl.suggestions, dominant=expl.dominant,
                             smallest_peak_bytes=expl.smallest_peak_bytes,
                             usable_bytes=expl.usable_bytes, parts_bytes=expl.parts_bytes)


def nice_batches(target: float) -> list[int]:
    """The powers of two just below and above ``target``: the batches people choose."""
    below = 2 ** math.floor(math.log2(target)) if target >= 1 else None
    if below is not None and below == target:
        below //= 2
    above = 2 ** (math.floor(math.log2(max(target, 1))) + 1)
    return [b for b in (below, above) if b]


def nice_batches_with_plan(req: PlanRequest) -> list[int]:
    """The round batches nearest the target (below and above) that have a plan: powers
    of two first, else 1, 2 or 5 x 10^k sequences."""
    from planner.plans.search import GridTooLarge, plan_units

    try:
        units = plan_units(req)
    except GridTooLarge:
        return []
    if not units.size:
        return []
    target = req.target_batch_samples
    out: list[int] = []
    for candidates in ([2**k for k in range(34)],
                       [m * 10**k for k in range(10) for m in (1, 2, 5)]):
        grid = np.asarray(sorted(candidates), np.int64)
        good = grid[(grid[:, None] % units[None, :] == 0).any(axis=1)]
        below, above = good[good < target], good[good > target]
        pick = ([int(below.max())] if below.size else []) + \
            ([int(above.min())] if above.size else [])
        if pick:
            out = pick
            break
    return out


# ---- 4. memory -----------------------------------------------------------------------------

def _memory(req: PlanRequest, batch: int) -> NoPlanExplanation:
    from planner.plans.search import GridTooLarge, enumerate_grid, nearest_global_batches

    try:
        grid = enumerate_grid(req, batch)
    except GridTooLarge:
        grid = None
    usable = req.usable_bytes
    if grid is None or not len(grid):
        return NoPlanExplanation('memory', '--nodes', 'no layout fits in memory.',
                                 usable_bytes=usable)
    # each row with its own stack's recipe and kernels (the grid holds every mode)
    totals = np.broadcast_to(np.asarray(req.memory_arrays(grid).total_bytes, float),
                             (len(grid),))
    best = int(np.argmin(totals))
    row = grid.take(np.asarray([best]))
    mem = req.memory_arrays(row, parts=True)
    parts = {k: float(np.ravel(v)[0]) for k, v in mem.components.items()}
    parts.update({k: float(np.ravel(v)[0]) for k, v in mem.overhead.items()})
    peak = float(totals[best])
    tensor_parts = {k: v for k, v in parts.items() if k in mem.components and v > 0}
    dominant = (max(tensor_parts, key=lambda k: tensor_parts[k]) if tensor_parts
                else 'weights')
    cuts = [c for c in _CUTS.get(dominant, ('more_gpus', 'larger_gpu'))
            if _available(req, c, row)]
    if req.margin_fraction > 0.05:
        cuts.append('margin')
    stack = req.plan_modes()[int(np.ravel(row.mode)[0])].stack
    layout = (f'{stack}: TP {int(row.tp[0])} · PP {int(row.pp[0])} · CP {int(row.cp[0])} · '
              f'DP {int(row.dp[0])} · micro-batch {int(row.micro_batch[0])} · '
              f'ZeRO-{int(row.zero[0])} · recompute '
              f"{RECOMPUTE_MODES[int(row.recompute[0])]}")
    text = (f'none of the {len(grid):,} layouts for a global batch of {batch:,} fits in '
            f'{usable / GIB:,.1f} GiB per GPU: the smallest peak is {peak / GIB:,.1f} GiB '
            f'({layout}), {(peak - usable) / GIB:,.1f} GiB short; its largest part is '
            f'{dominant.replace("_", " ")} ({parts[dominant] / GIB:,.1f} GiB)')
    if cuts:
        text += '. What would cut it: ' + '; '.join(_CUT_WORDS[c] for c in cuts)
    expl = NoPlanExplanation('memory', _field_of(cuts[0]) if cuts else '--gpu', text,
                             suggestions=tuple(cuts), dominant=dominant,
                             smallest_peak_bytes=peak, usable_bytes=usable, parts_bytes=parts)
    try:
        below, above = nearest_global_batches(req)
    except GridTooLarge:
        below = above = None
    return _with_batches(req, expl, below, above)


def _available(req: PlanRequest, cut: str, row) -> bool:
    """Whether ``cut`` is a change from this request (not already tried)."""
    stages = set(req.zero_stages)
    if cut == 'zero3':
        return 3 not in stages and req.lora is None
    if cut == 'zero2':
        return not stages & {2, 3}
    if cut == 'zero1':
        return not stages & {1, 2, 3}
    if cut == 'recompute_full':
        return 'full' not in req.recompute_modes
    if cut == 'optimizer_8bit':
        return 'adamw' in req.optimizer and '8bit' not in req.optimizer
    if cut == 'flash':
        return req.attention == 'eager'
    if cut == 'micro_batch':
        return int(row.micro_batch[0]) > 1
    if cut in ('tp', 'pp', 'cp'):
        return req.lora is None and bool(getattr(req.limits, cut) or
                                         getattr(req.limits, f'max_{cut}'))
    return cut in ('more_gpus', 'larger_gpu', 'shorter_sequence')


def _field_of(cut: str) -> str:
    return {'zero3': '--zero', 'zero2': '--zero', 'zero1': '--zero',
            'recompute_full': '--recompute', 'optimizer_8bit': '--optimizer',
            'micro_batch': '--micro-batch', 'tp': '--tp', 'pp': '--pp', 'cp': '--cp',
            'shorter_sequence': '--seq-len', 'more_gpus': '--nodes', 'larger_gpu': '--gpu',
            'margin': '--margin', 'flash': '--attention'}[cut]
