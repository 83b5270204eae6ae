"""The one path from what a user asks to a plan: ask -> request -> search -> guidance.

Every front end goes through here, so the same inputs give the same answer everywhere:

* the command line (``batchfit plan``: :mod:`planner.cli.plan`; ``batchfit estimate``
  takes its calibration from :func:`calibration_for` too);
* the desktop app (``ui.plan_inputs`` turns the window's fields into a :class:`PlanAsk`,
  ``ui.plan_compute`` runs :func:`build_request`, the search and :func:`guidance_for`);
* plan files (:mod:`planner.planfile.document` builds the guidance of the chosen row
  with :func:`guidance_for`);
* the Python API (:func:`plan`).

The steps:

1. :func:`calibration_for`: the calibration profile the ask names (``auto``, the
   default, is the newest profile measured on the GPU; ``none``; or a file), applied
   the way ``planner.calibrate.apply.use_profile`` says (memory overheads always;
   GEMM efficiencies and the fixed step cost only for the dtype and eager kernels
   they were measured with);
2. :func:`build_request`: names resolved (model, GPU, network), the training length,
   the guidance inputs checked, the profile applied: a validated ``PlanRequest``;
3. ``planner.plans.search.search``;
4. :func:`guidance_for`: batch, learning-rate and warmup guidance for one candidate
   (the best, or any row the user picks).

Defaults come from :mod:`planner.defaults` and ``PlanRequest``; nothing here is Qt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.defaults import (
    DEFAULT_ATTENTION,
    DEFAULT_MARGIN_FRACTION,
    DEFAULT_OPTIMIZER,
    DEFAULT_SORT_KEY,
    DEFAULT_TOP_K,
    RECOMPUTE_MODES,
    ZERO_STAGES,
)
from planner.errors import InputError
from planner.memory.training import LOOPS, LoraSpec
from planner.plans.guidance import GuidanceInputs
from planner.plans.request import LayoutLimits, PlanRequest

if TYPE_CHECKING:
    from planner.calibrate.apply import CalibrationUse
    from planner.plans.guidance import Guidance
    from planner.plans.result import Candidate, SearchResult


@dataclass(frozen=True)
class PlanAsk:
    """What a user asks for, in the words every front end has (names, counts, flags).

    Attributes:
        model: a preset, a size such as ``7B``, or a ``config.json`` path.
        seq_len: tokens per sequence.
        gpu: catalog GPU key.
        global_batch: the target batch in sequences (or give ``global_batch_tokens``).
        global_batch_tokens: the target batch in tokens.
        tokens: training tokens (or give ``samples``).
        samples: sequences in the data set.
        epochs: passes over ``samples`` (None: one; needs ``samples``).
        nodes: nodes available (the plan may use fewer).
        gpus_per_node: GPUs per node.
        inter_node: catalog network key ('' or None: the GPU family's default).
        zero_stages, recompute_modes: what the search tries.
        precision, optimizer, attention, framework, loss: the recipe.
        loop: what the training loop holds of the model output (``LOOPS``).
        margin_fraction: fraction of GPU memory kept free.
        price_per_gpu_hour_usd: None for the catalog price.
        sort_by: ``time``, ``cost``, ``gpus`` or ``headroom``.
        top_k: candidates to report.
        limits: layout constraints.
        lora: LoRA/QLoRA adapters on a frozen base; None for full training.
        profile: ``auto`` (the newest profile of ``gpu``), ``none``, or a profile file.
        guidance: the reference LR, batch, warmup and noise scale.
        compile: the stack's per-block torch.compile (torchtitan; off by default).
        async_tp: torchtitan's async TP (needs ``compile``).
        overlap_grad_reduce: Megatron's ``--overlap-grad-reduce`` (off by default).
        partition_activations: DeepSpeed's ``partition_activations`` (off by default).
        zero_bubble: torchtitan's zero-bubble pipeline schedule (off by default).
        tp_comm_overlap: Megatron's ``--tp-comm-overlap`` (off by default).
        grad_reduce_in_bf16: Megatron's ``--grad-reduce-in-bf16`` (off by default: fp32
            main grads, the larger).
    """

    model: str
    seq_len: int
    gpu: str
    global_batch: int | None = None
    global_batch_tokens: int | None = None
    tokens: float | None = None
    samples: int | None = None
    epochs: float | None = None
    nodes: int = 1
    gpus_per_node: int = 8
    inter_node: str | None = None
    zero_stages: tuple[int, ...] = ZERO_STAGES
    recompute_modes: tuple[str, ...] = RECOMPUTE_MODES
    precision: str = ''  # each stack's own recipe
    optimizer: str = DEFAULT_OPTIMIZER
    attention: str = DEFAULT_ATTENTION
    framework: str = ''  # every stack that runs the request
    loss: str = ''
    loop: str = LOOPS[0]
    margin_fraction: float = DEFAULT_MARGIN_FRACTION
    price_per_gpu_hour_usd: float | None = None
    sort_by: str = DEFAULT_SORT_KEY
    top_k: int = DEFAULT_TOP_K
    limits: LayoutLimits = field(default_factory=LayoutLimits)
    lora: LoraSpec | None = None
    profile: str = 'auto'
    guidance: GuidanceInputs = field(default_factory=GuidanceInputs)
    compile: bool = False
    async_tp: bool = False
    overlap_grad_reduce: bool = False
    partition_activations: bool = False
    zero_bubble: bool = False
    tp_comm_overlap: bool = False
    grad_reduce_in_bf16: bool = False


@dataclass(frozen=True)
class PlanAnswer:
    """Everything :func:`plan` produced.

    Attributes:
        ask: what was asked.
        request: the validated request that was searched.
        calibration: what the calibration profile gave (None without one).
        result: the search result.
        guidance: guidance for the best candidate (or the target batch alone).
    """

    ask: PlanAsk
    request: PlanRequest
    calibration: CalibrationUse | None
    result: SearchResult
    guidance: Guidance


def calibration_for(profile: str | None, gpu_key: str | None, model: str | None = None, *,
                    precision: str | None = None, framework: str = '',
                    step_time: bool = True) -> CalibrationUse | None:
    """What the profile ``profile`` (``auto``, ``none`` or a path) gives a plan on ``gpu_key``.

    ``step_time=False`` takes the memory overheads only (``batchfit estimate``).

    Raises:
        InputError: an unknown GPU or model, or a bad profile file.
    """
    from planner.calibrate.apply import use_profile
    from planner.calibrate.profile import choose_profile
    from planner.hardware.catalog import find_gpu
    from planner.models.source import resolve_model

    gpu = find_gpu(gpu_key) if gpu_key else None
    loaded = choose_profile(profile, gpu)
    if loaded is None:
        return None
    return use_profile(loaded, model=None if model is None else resolve_model(model), gpu=gpu,
                       precision=precision, framework=framework, step_time=step_time)


def ask_calibration(ask: PlanAsk) -> CalibrationUse | None:
    """:func:`calibration_for` the ask's profile, GPU, model and recipe."""
    return calibration_for(ask.profile, ask.gpu, ask.model, precision=ask.precision,
                           framework=ask.framework)


def build_request(ask: PlanAsk, calibration: CalibrationUse | None = None) -> PlanRequest:
    """The validated :class:`PlanRequest` ``ask`` describes, with ``calibration`` applied.

    Raises:
        InputError: naming the field (``--model``, ``--seq-len``, ``--gpu``...).
    """
    from planner.hardware.catalog import find_gpu, inter_node_link
    from planner.models.source import resolve_model
    from planner.timing.step_time import StepTimeOptions, TrainingLength

    if ask.epochs is not None and ask.samples is None:
        raise InputError('--epochs', 'needs --samples')
    model = resolve_model(ask.model)
    gpu = find_gpu(ask.gpu)
    link = inter_node_link(gpu, ask.nodes, ask.inter_node or None)
    if ask.samples is not None:
        length = TrainingLength(samples=ask.samples, epochs=ask.epochs or 1.0)
    else:
        length = TrainingLength(tokens=ask.tokens)
    measured: dict[str, Any] = {} if calibration is None else {
        'calibration': calibration.efficiency, 'overheads': calibration.overheads,
        'step_options': calibration.step_options or StepTimeOptions()}
    return PlanRequest(
        model=model, seq_len=ask.seq_len, gpu=gpu, max_nodes=ask.nodes,
        gpus_per_node=ask.gpus_per_node, inter_node=link, global_batch=ask.global_batch,
        global_batch_tokens=ask.global_batch_tokens, length=length,
        zero_stages=tuple(ask.zero_stages), recompute_modes=tuple(ask.recompute_modes),
        precision=ask.precision, optimizer=ask.optimizer, attention=ask.attention,
        framework=ask.framework, loss=ask.loss, loop=ask.loop,
        margin_fraction=ask.margin_fraction,
        price_per_gpu_hour_usd=ask.price_per_gpu_hour_usd, sort_by=ask.sort_by,
        top_k=ask.top_k, limits=ask.limits, lora=ask.lora, compile=ask.compile,
        async_tp=ask.async_tp, overlap_grad_reduce=ask.overlap_grad_reduce,
        partition_activations=ask.partition_activations, zero_bubble=ask.zero_bubble,
        tp_comm_overlap=ask.tp_comm_overlap, grad_reduce_in_bf16=ask.grad_reduce_in_bf16,
        **measured)


def guidance_for(request: PlanRequest, result: SearchResult, chosen: Candidate | None,
                 inputs: GuidanceInputs | None = None) -> Guidance:
    """Batch, LR and warmup guidance for ``chosen`` (any row; None: the target batch alone).

    Without a calibration profile, the chosen micro-batch's GEMM efficiency is compared
    with the attainable one (the low-efficiency warning); the representative GEMM's
    FLOPs, the step time and LoRA (its learning-rate note) come from the plan.
    """
    from planner.plans.guidance import advise
    from planner.timing.efficiency import attainable_fraction

    inputs = inputs or GuidanceInputs()
    batch = (chosen.global_batch if chosen is not None
             else max(1, round(result.target_batch_samples)))
    fraction = gemm = None
    if chosen is not None:
        if request.calibration is None:
            fraction = attainable_fraction(chosen.efficiency, request.gpu.family,
                                           chosen.framework)
        if result.step is not None:
            gemm = float(result.step.gemm_flops[result.ranking[chosen.rank - 1]])
    tokens = None if request.length is None else request.length.total_tokens(request.seq_len)
    return advise(request.model, request.seq_len, batch, total_tokens=tokens,
                  optimizer=request.optimizer, base_lr=inputs.base_lr,
                  base_batch_samples=inputs.base_batch_samples,
                  b_noise_tokens=inputs.b_noise_tokens,
                  base_warmup_steps=inputs.base_warmup_steps,
                  micro_batch=chosen.micro_batch if chosen else None,
                  grad_accum=chosen.grad_accum if chosen else None,
                  pp=chosen.pp if chosen else 1, efficiency_fraction=fraction,
                  gemm_flops=gemm, step_time_s=chosen.step_time_s if chosen else None,
                  lora=request.lora is not None)


def plan(ask: PlanAsk, should_stop: Callable[[], bool] | None = None) -> PlanAnswer:
    """The whole path: profile, request, search and the best plan's guidance.

    Raises:
        InputError: a bad input (names the field).
        SearchCancelled: ``should_stop()`` became true.
    """
    from planner.plans.search import search

    calibration = ask_calibration(ask)
    request = build_request(ask, calibration)
    result = search(request, should_stop=should_stop)
    return PlanAnswer(ask=ask, request=request, calibration=calibration, result=result,
                      guidance=guidance_for(request, result, result.best, ask.guidance))
