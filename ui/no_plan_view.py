"""Why nothing fits, and the nearest changes that would fit, as the window shows them.

The empty state is written against a plain interface, :class:`NoPlanView`: a reason
(text) and a list of :class:`Suggestion` (a label and the :class:`~ui.plan_inputs.PlanInputs`
fields it changes). :func:`explain` builds one locally from the search result: the core's
own message (what ``batchfit plan`` prints) and suggestions each checked by a search
before it is offered, so a button never leads to another empty table. No widgets; runs
in the plan worker after a search that found nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.defaults import RECOMPUTE_MODES, ZERO_STAGES
from planner.units import GIB
from ui.i18n import QT_TRANSLATE_NOOP, translate

if TYPE_CHECKING:
    from planner.plans.no_plan import NoPlanExplanation
    from planner.plans.request import PlanRequest
    from planner.plans.result import SearchResult
    from ui.plan_inputs import PlanInputs

MAX_NODES_FACTOR = 64  # more nodes are tried up to this multiple of the nodes given
MAX_GPU_SIZES = 4  # larger GPUs tried: one per memory size, the smallest sizes first
ALL_ZERO = ZERO_STAGES
ALL_RECOMPUTE = RECOMPUTE_MODES
HEADLINES = {
    'no_fit': QT_TRANSLATE_NOOP('NoPlan', 'Nothing fits in GPU memory'),
    'no_factorisation': QT_TRANSLATE_NOOP('NoPlan', 'No layout reaches this global batch '
                                                    'exactly'),
}


@dataclass(frozen=True)
class Suggestion:
    """One change that would give a plan: a label and the input fields it sets."""

    text: str
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NoPlanView:
    """What the empty state shows: a headline, the reason, and changes that would fit."""

    headline: str
    reason: str
    suggestions: tuple[Suggestion, ...] = ()


def explain(inputs: PlanInputs, request: PlanRequest, result: SearchResult,
            should_stop: Callable[[], bool] | None = None,
            explanation: NoPlanExplanation | None = None) -> NoPlanView:
    """The empty state for a search that found nothing, with checked suggestions; the
    reason is the core's explanation (``planner.plans.no_plan``, the words ``batchfit plan``
    prints) when given.

    Raises:
        SearchCancelled: ``should_stop()`` became true.
    """
    headline = translate('NoPlan', HEADLINES.get(result.status, HEADLINES['no_fit']))
    suggestions = [*_batches(inputs, request, result)]
    for make in (_more_nodes, _all_options, _bigger_gpu):
        found = make(inputs, should_stop)
        if found is not None:
            suggestions.append(found)
    reason = explanation.text if explanation is not None else result.message
    return NoPlanView(headline=headline, reason=reason, suggestions=tuple(suggestions))


def _fits(inputs: PlanInputs, should_stop) -> bool:
    from planner.errors import InputError
    from planner.plans.path import ask_calibration, build_request
    from planner.plans.search import search
    from ui.plan_inputs import plan_ask

    try:
        ask = plan_ask(inputs)
        request = build_request(ask, ask_calibration(ask))
        return bool(search(request, should_stop=should_stop).fitting)
    except InputError:
        return False


def _batches(inputs: PlanInputs, request: PlanRequest, result: SearchResult):
    below, above = result.nearest_global_batches
    for n in (below, above):
        if n is None:
            continue
        value = n * request.seq_len if inputs.batch_unit == 'tokens' else n
        yield Suggestion(translate('NoPlan', 'global batch {n:,} sequences ({t:,} tokens)')
                         .format(n=n, t=n * request.seq_len),
                         {'batch_value': value})


def _more_nodes(inputs: PlanInputs, should_stop) -> Suggestion | None:
    nodes = inputs.nodes * 2
    while nodes <= inputs.nodes * MAX_NODES_FACTOR:
        if _fits(inputs.with_changes(nodes=nodes), should_stop):
            return Suggestion(translate('NoPlan', '{n:,} nodes ({g:,} GPUs)').format(
                n=nodes, g=nodes * inputs.gpus_per_node), {'nodes': nodes})
        nodes *= 2
    return None


def _all_options(inputs: PlanInputs, should_stop) -> Suggestion | None:
    if set(inputs.zero_stages) >= set(ALL_ZERO) and set(inputs.recompute_modes) >= set(
            ALL_RECOMPUTE):
        return None
    changes = {'zero_stages': ALL_ZERO, 'recompute_modes': ALL_RECOMPUTE}
    if _fits(inputs.with_changes(**changes), should_stop):
        return Suggestion(translate('NoPlan', 'allow every ZeRO stage and recompute mode'),
                          changes)
    return None


def _bigger_gpu(inputs: PlanInputs, should_stop) -> Suggestion | None:
    """The catalog GPU with the least memory above this one's that gives a plan."""
    from planner.errors import InputError
    from planner.hardware.catalog import find_gpu, load_gpus

    try:
        current = find_gpu(inputs.gpu)
    except InputError:  # a GPU the catalog no longer has: no suggestion
        return None
    bigger = sorted((g for g in load_gpus().values()
                     if g.memory_bytes > current.memory_bytes),
                    key=lambda g: (g.memory_bytes, g.key))
    sizes = sorted({g.memory_bytes for g in bigger})[:MAX_GPU_SIZES]
    for gpu in [next(g for g in bigger if g.memory_bytes == size) for size in sizes]:
        if _fits(inputs.with_changes(gpu=gpu.key, inter_node=''), should_stop):
            return Suggestion(translate('NoPlan', '{name} ({m:.0f} GiB)').format(
                name=gpu.name, m=gpu.memory_bytes / GIB), {'gpu': gpu.key, 'inter_node': ''})
    return None
