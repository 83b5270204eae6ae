"""What the user typed, as one frozen Qt-free record, and the request it makes.

:class:`PlanInputs` holds every input of the window with units in the field names.
:func:`plan_ask` turns it into the core's :class:`planner.plans.path.PlanAsk`; the core
(:mod:`planner.plans.path`) turns that into a validated request by the same path the
command line takes (calibration profile included); every bad value raises the core's
:class:`~planner.errors.InputError`, whose ``field`` (``--seq-len``...) names the
widget to mark red. :func:`inputs_to_dict` / :func:`inputs_from_dict` give the session
state kept in QSettings between runs (``batchfit.session/1``); files the user saves are
plan files (:mod:`ui.plan_document`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from planner.defaults import (
    DEFAULT_MARGIN_FRACTION,
    DEFAULT_OPTIMIZER,
    RECOMPUTE_MODES,
    ZERO_STAGES,
)
from planner.errors import InputError

if TYPE_CHECKING:
    from planner.memory.training import LoraSpec
    from planner.plans.path import PlanAsk

SESSION_SCHEMA = 'batchfit.session/1'
BATCH_UNITS: tuple[str, ...] = ('samples', 'tokens')
TUNING_KINDS: tuple[str, ...] = ('full', 'lora', 'qlora')
# The adapted projections of each choice (PEFT's ``target_modules`` by role).
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    'attention': ('q', 'k', 'v', 'o'),
    'all': ('q', 'k', 'v', 'o', 'gate', 'up', 'down'),
}


@dataclass(frozen=True)
class PlanInputs:
    """Every input of the planner window.

    Attributes:
        model: a preset, a size such as ``7B``, or a ``config.json`` path.
        seq_len: tokens per sequence.
        batch_value: the target global batch, in ``batch_unit``.
        batch_unit: ``samples`` (sequences) or ``tokens``.
        length_kind: ``tokens`` (a token budget) or ``samples`` (data set x epochs).
        length_tokens: training tokens.
        length_samples: sequences in the data set.
        length_epochs: passes over it.
        gpu: catalog GPU key.
        nodes: nodes available.
        gpus_per_node: GPUs per node.
        inter_node: catalog network key ('' for the GPU family's default).
        framework: the stack (``planner.stacks``), '' for every stack.
        precision: ``RECIPES`` key, '' for each stack's own recipe.
        optimizer: ``OPTIMIZERS`` key.
        zero_stages: ZeRO stages to try.
        recompute_modes: recompute modes to try.
        margin_percent: GPU memory kept free, percent.
        price_per_gpu_hour_usd: None for the catalog price.
        base_lr: a learning rate known to work at ``base_batch_samples``.
        base_batch_samples: the batch it was tuned at, in sequences.
        b_noise_tokens: measured gradient noise scale (critical batch), tokens.
        tuning: ``full`` (every weight trains), ``lora`` or ``qlora`` (adapters on a
            frozen 16-bit or 4-bit NF4 base).
        lora_rank: the adapters' rank r (LoRA and QLoRA).
        lora_targets: ``attention`` (q, k, v, o) or ``all`` (every linear of a layer).
        loop: ``keep-outputs`` or ``trainer`` (``planner/memory/model_outputs.py``).
        loss: '' (the framework's), ``hf``, ``chunked`` or ``vocab-parallel``.
        profile: calibration profile, as the CLI's ``--profile``: ``auto`` (the newest
            profile of the GPU, as a calibration on this machine saves it), ``none``, or
            a profile file.
        compile: the stack's torch.compile switch (torchtitan's ``--compile``).
        async_tp: torchtitan's async TP (``--async-tp``; needs ``compile``).
        overlap_grad_reduce: Megatron's ``--overlap-grad-reduce``.
        partition_activations: DeepSpeed's ``--partition-activations``.
        zero_bubble: torchtitan's zero-bubble pipeline schedule (``--zero-bubble``).
        tp_comm_overlap: Megatron's ``--tp-comm-overlap``.
        grad_reduce_in_bf16: Megatron's ``--grad-reduce-in-bf16``.
    """

    model: str = 'llama-3.1-8b'
    seq_len: int = 4096
    batch_value: int = 1024
    batch_unit: str = 'samples'
    length_kind: str = 'tokens'
    length_tokens: float = 1e12
    length_samples: int = 1_000_000
    length_epochs: float = 1.0
    gpu: str = 'h100-sxm'
    nodes: int = 1
    gpus_per_node: int = 8
    inter_node: str = ''
    framework: str = ''  # every stack
    precision: str = ''  # each stack's own recipe
    optimizer: str = DEFAULT_OPTIMIZER
    zero_stages: tuple[int, ...] = ZERO_STAGES
    recompute_modes: tuple[str, ...] = RECOMPUTE_MODES
    margin_percent: float = DEFAULT_MARGIN_FRACTION * 100
    price_per_gpu_hour_usd: float | None = None
    base_lr: float | None = None
    base_batch_samples: float | None = None
    b_noise_tokens: float | None = None
    tuning: str = 'full'
    lora_rank: int = 16
    lora_targets: str = 'attention'
    loop: str = 'keep-outputs'
    loss: str = ''
    profile: str = 'auto'
    compile: bool = False
    async_tp: bool = False
    overlap_grad_reduce: bool = False
    partition_activations: bool = False
    zero_bubble: bool = False
    tp_comm_overlap: bool = False
    grad_reduce_in_bf16: bool = False

    def with_changes(self, **changes: Any) -> PlanInputs:
        """A copy with some fields replaced."""
        return replace(self, **changes)


def plan_ask(inputs: PlanInputs, top_k: int = 100) -> PlanAsk:
    """The window's fields as the core's :class:`~planner.plans.path.PlanAsk`.

    The app plans with the newest calibration profile of the GPU, as the command line
    does (``profile='auto'``).

    Raises:
        InputError: naming the field (``--global-batch``, ``--margin``, ``--lora-rank``...).
    """
    from planner.plans.guidance import GuidanceInputs
    from planner.plans.path import PlanAsk

    if inputs.batch_unit not in BATCH_UNITS:
        raise InputError('--global-batch', f'unknown unit {inputs.batch_unit!r}',
                         ', '.join(BATCH_UNITS))
    tokens = inputs.batch_unit == 'tokens'
    if not 0 <= inputs.margin_percent < 100:
        raise InputError('--margin', f'must be in [0, 100) percent, got {inputs.margin_percent}')
    by_samples = inputs.length_kind == 'samples'
    return PlanAsk(
        model=inputs.model, seq_len=inputs.seq_len, gpu=inputs.gpu,
        global_batch=None if tokens else inputs.batch_value,
        global_batch_tokens=inputs.batch_value if tokens else None,
        tokens=None if by_samples else inputs.length_tokens,
        samples=inputs.length_samples if by_samples else None,
        epochs=inputs.length_epochs if by_samples else None, nodes=inputs.nodes,
        gpus_per_node=inputs.gpus_per_node, inter_node=inputs.inter_node,
        zero_stages=tuple(inputs.zero_stages), recompute_modes=tuple(inputs.recompute_modes),
        precision=inputs.precision, framework=inputs.framework, optimizer=inputs.optimizer,
        margin_fraction=inputs.margin_percent / 100.0,
        price_per_gpu_hour_usd=inputs.price_per_gpu_hour_usd, top_k=top_k,
        lora=lora_spec(inputs), loop=inputs.loop, loss=inputs.loss, profile=inputs.profile,
        compile=inputs.compile, async_tp=inputs.async_tp,
        overlap_grad_reduce=inputs.overlap_grad_reduce,
        partition_activations=inputs.partition_activations, zero_bubble=inputs.zero_bubble,
        tp_comm_overlap=inputs.tp_comm_overlap, grad_reduce_in_bf16=inputs.grad_reduce_in_bf16,
        guidance=GuidanceInputs(base_lr=inputs.base_lr,
                                base_batch_samples=inputs.base_batch_samples,
                                b_noise_tokens=inputs.b_noise_tokens))


def lora_spec(inputs: PlanInputs) -> LoraSpec | None:
    """The adapters ``inputs`` train (None for full training).

    Raises:
        InputError: on ``--lora-rank`` or ``--lora-targets`` when a value is not allowed.
    """
    from planner.memory.training import LoraSpec

    if inputs.tuning not in TUNING_KINDS:
        raise InputError('--lora-rank', f'unknown fine-tuning kind {inputs.tuning!r}',
                         ', '.join(TUNING_KINDS))
    if inputs.tuning == 'full':
        return None
    if inputs.lora_targets not in LORA_TARGETS:
        raise InputError('--lora-targets', f'unknown choice {inputs.lora_targets!r}',
                         ', '.join(LORA_TARGETS))
    return LoraSpec(rank=inputs.lora_rank, targets=LORA_TARGETS[inputs.lora_targets],
                    base_bits=4 if inputs.tuning == 'qlora' else 16)


# ---- the window state kept between runs ----------------------------------------------

def inputs_to_dict(inputs: PlanInputs) -> dict[str, Any]:
    """JSON-ready, with the schema."""
    data = asdict(inputs)
    data['zero_stages'] = list(inputs.zero_stages)
    data['recompute_modes'] = list(inputs.recompute_modes)
    return {'schema': SESSION_SCHEMA, 'inputs': data}


def inputs_from_dict(doc: Any, where: str = 'session') -> PlanInputs:
    """The inputs a session document holds; unknown keys are an error, missing ones default.

    Raises:
        InputError: not a session document, or a field of the wrong type.
    """
    if not isinstance(doc, dict) or doc.get('schema') != SESSION_SCHEMA:
        raise InputError(where, f'not a batchfit session (schema {SESSION_SCHEMA!r} expected)')
    data = doc.get('inputs')
    if not isinstance(data, dict):
        raise InputError(where, '"inputs" must be an object')
    defaults = PlanInputs()
    known = {f.name: f for f in fields(PlanInputs)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise InputError(f'{where}: {key}', 'unknown field', ', '.join(known))
        default = getattr(defaults, key)
        if isinstance(default, tuple):
            if not isinstance(value, list):
                raise InputError(f'{where}: {key}', f'must be a list, got {value!r}')
            value = tuple(value)
        elif not _type_ok(key, default, value):
            raise InputError(f'{where}: {key}', f'wrong type: {value!r}')
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f'{where}: {key}', 'must be finite')
        values[key] = value
    return replace(defaults, **values)


_OPTIONAL = ('price_per_gpu_hour_usd', 'base_lr', 'base_batch_samples', 'b_noise_tokens')


def _type_ok(key: str, default: Any, value: Any) -> bool:
    if value is None:
        return key in _OPTIONAL
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if key in _OPTIONAL or isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))
