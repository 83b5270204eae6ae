"""The recompute behind the window, as pure Qt-free functions (as Orange3's
``run`` functions, e.g. Orange/widgets/data/owoutliers.py).

:func:`compute_plan` runs in a worker thread: the search, the candidates for the
table, the best time-to-train at each GPU count and a sweep of the global batch. What a
row selection calls (:func:`guidance_for`, ``planner.plans.micro_batch_sweep``) takes a few
milliseconds and runs on the GUI thread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ui.plan_inputs import PlanInputs, plan_ask

if TYPE_CHECKING:
    from planner.calibrate.apply import CalibrationUse
    from planner.plans.guidance import Guidance
    from planner.plans.no_plan import NoPlanExplanation
    from planner.plans.path import PlanAsk
    from planner.plans.request import PlanRequest
    from planner.plans.result import Candidate, SearchResult
    from ui.no_plan_view import NoPlanView

BATCH_SWEEP = (0.25, 0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class SeriesXY:
    """A plotted series: x, y and the x of the highlighted point (or None)."""

    x: np.ndarray
    y: np.ndarray


@dataclass(frozen=True)
class PlanOutcome:
    """What one recompute produced, handed from the worker to the GUI thread.

    Attributes:
        inputs: the inputs it was computed for.
        request: the validated request.
        result: the search result (arrays: every fitting candidate, the table's rows).
        best: the top-ranked candidate (None when nothing fits).
        by_gpus: best time-to-train (s) at each GPU count.
        by_batch: best time-to-train (s) at each global batch (tokens), NaN without a plan.
        elapsed_s: wall time of the whole recompute.
        explanation: why there is no plan (``planner.plans.no_plan``; the CLI's words),
            computed in the worker; None with a plan.
        ask: what the core was asked (the guidance inputs included).
        calibration: what the calibration profile gave (None without one).
        no_plan: when nothing fits, why and the nearest changes that would fit.
    """

    inputs: PlanInputs
    request: PlanRequest
    result: SearchResult
    best: Candidate | None
    by_gpus: SeriesXY
    by_batch: SeriesXY
    elapsed_s: float
    explanation: NoPlanExplanation | None = None
    ask: PlanAsk | None = None
    calibration: CalibrationUse | None = None
    no_plan: NoPlanView | None = None

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """The best distinct candidates (the request's ``top_k``), estimated on demand;
        the table shows every one (``result``)."""
        return tuple(self.result.top()) if self.result.fitting else ()


def compute_plan(inputs: PlanInputs, should_stop: Callable[[], bool] | None = None
                 ) -> PlanOutcome:
    """Search ``inputs`` and prepare everything the table and the plots show.

    Raises:
        InputError: a bad input (names the field).
        SearchCancelled: ``should_stop()`` became true.
    """
    outcome = compute_main(inputs, should_stop)
    return replace(outcome, by_batch=batch_sweep(outcome, should_stop),
                   elapsed_s=outcome.elapsed_s)


def compute_main(inputs: PlanInputs, should_stop: Callable[[], bool] | None = None
                 ) -> PlanOutcome:
    """The search, its best candidate and the GPU-count series (no batch sweep yet).

    Raises:
        InputError: a bad input (names the field).
        SearchCancelled: ``should_stop()`` became true.
    """
    from planner.plans.path import ask_calibration, build_request
    from planner.plans.search import search

    started = time.perf_counter()
    ask = plan_ask(inputs)
    calibration = ask_calibration(ask)
    request = build_request(ask, calibration)
    result = search(request, should_stop=should_stop)
    explanation = no_plan = None
    if not result.fitting:
        from planner.plans.no_plan import explain_no_plan
        from ui.no_plan_view import explain

        explanation = explain_no_plan(request, result)
        no_plan = explain(inputs, request, result, should_stop, explanation)
    return PlanOutcome(inputs=inputs, request=request, result=result, best=result.best,
                       no_plan=no_plan,
                       by_gpus=best_by_gpus(result),
                       by_batch=SeriesXY(np.zeros(0), np.zeros(0)),
                       elapsed_s=time.perf_counter() - started, explanation=explanation,
                       ask=ask, calibration=calibration)


def batch_sweep(outcome: PlanOutcome, should_stop: Callable[[], bool] | None = None
                ) -> SeriesXY:
    """Best time-to-train at /4, /2, x1, x2 and x4 the target batch (x: tokens).

    Raises:
        SearchCancelled: ``should_stop()`` became true.
    """
    from planner.errors import InputError
    from planner.plans.search import SearchCancelled, search

    request, result = outcome.request, outcome.result
    xs, ys = [], []
    base = result.target_batch_samples
    for factor in BATCH_SWEEP:
        if should_stop is not None and should_stop():
            raise SearchCancelled
        batch = base * factor
        xs.append(batch * request.seq_len)
        if factor == 1.0:
            best = result.best
        elif batch != int(batch) or batch < 1:
            best = None
        else:
            try:  # x4 may pass the batch's range or the search bound: no point, not an error
                best = search(replace(request, global_batch=int(batch),
                                      global_batch_tokens=None), should_stop=should_stop).best
            except InputError:
                best = None
        ys.append(math.nan if best is None else best.time_to_train_s)
    return SeriesXY(np.asarray(xs), np.asarray(ys))


def best_by_gpus(result: SearchResult) -> SeriesXY:
    """The shortest time-to-train (step time without a data size) at each GPU count."""
    if result.step is None or result.train is None or not result.fitting:
        return SeriesXY(np.zeros(0), np.zeros(0))
    gpus = np.asarray(result.step.gpus)
    key = np.asarray(result.train.time_to_train_s, float)
    if not np.isfinite(key).any():
        key = np.asarray(result.step.step_time_s, float)
    counts, where = np.unique(gpus, return_inverse=True)
    best = np.full(len(counts), np.inf)
    np.minimum.at(best, where, key)
    return SeriesXY(counts.astype(float), best)


def guidance_for(outcome: PlanOutcome, c: Candidate | None) -> Guidance:
    """Batch and learning-rate guidance for candidate ``c`` (or the target batch alone).

    The core's :func:`planner.plans.path.guidance_for`, as the CLI and plan files use it.
    """
    from planner.plans.path import guidance_for as core_guidance_for

    ask = outcome.ask if outcome.ask is not None else plan_ask(outcome.inputs)
    return core_guidance_for(outcome.request, outcome.result, c, ask.guidance)


def memory_estimate_for(outcome: PlanOutcome, c: Candidate):
    """``planner.memory.peak.estimate`` of candidate ``c`` (single-configuration path)."""
    from planner.memory.peak import estimate
    from planner.memory.training import TrainingSetup
    from planner.stacks import STACKS

    req = outcome.request
    options = STACKS[c.framework].options  # the request's switches its stack has (as the search)
    setup = TrainingSetup(seq_len=req.seq_len, micro_batch=c.micro_batch,
                          grad_accum=c.grad_accum, precision=c.precision,
                          optimizer=req.optimizer, zero=c.zero, tp=c.tp, pp=c.pp, vpp=c.vpp,
                          cp=c.cp, dp=c.dp, sequence_parallel=req.limits.sequence_parallel,
                          recompute=c.recompute, attention=req.attention,
                          framework=c.framework, loss=req.loss, lora=req.lora, ep=c.ep, etp=c.etp,
                          dp_replicate=c.dp_replicate,
                          loop=req.loop,
                          partition_activations=req.partition_activations
                          and 'partition_activations' in options,
                          zero_bubble=req.zero_bubble and 'zero_bubble' in options,
                          grad_reduce_in_bf16=req.grad_reduce_in_bf16
                          and 'grad_reduce_in_bf16' in options)
    return estimate(req.model, setup, req.gpu, margin_fraction=req.margin_fraction,
                    overheads=req.overheads)
