"""What the user typed, as one frozen Qt-free record, and the request it makes.

:class:`PlanInputs` holds every input of the window with units in the field names
(STYLE.md §1.5). :func:`build_request` turns it into a validated
:class:`planner.plans.request.PlanRequest`; every bad value raises the core's
:class:`~planner.errors.InputError`, whose ``field`` (``--seq-len``...) names the
widget to mark red. :func:`inputs_to_dict` / :func:`inputs_from_dict` give the session
state kept in QSettings between runs (``batchfit.session/1``); files the user saves are
plan files (:mod:`ui.plan_document`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.memory.training import LoraSpec
    from planner.plans.request import PlanRequest

SESSION_SCHEMA = 'batchfit.session/1'
BATCH_UNITS: tuple[str, ...] = ('samples', 'tokens')
TUNING_KINDS: tuple[str, ...] = ('full', 'lora', 'qlora')
# The adapted projections of each choice (PEFT's ``target_modules`` by role).
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    'attention': ('q', 'k', 'v', 'o'),
    'all': ('q', 'k', 'v', 'o', 'gate', 'up', 'down'),
}
LENGTH_KINDS: tuple[str, ...] = ('tokens', 'samples')


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
        precision: ``RECIPES`` key.
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
    precision: str = 'amp-bf16'
    optimizer: str = 'adamw'
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute_modes: tuple[str, ...] = ('none', 'selective', 'full')
    margin_percent: float = 5.0
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

    def with_changes(self, **changes: Any) -> PlanInputs:
        """A copy with some fields replaced."""
        return replace(self, **changes)

    @property
    def global_batch_samples(self) -> float:
        """The target batch in sequences (fractional when tokens do not divide)."""
        if self.batch_unit == 'tokens':
            return self.batch_value / self.seq_len
        return float(self.batch_value)


def build_request(inputs: PlanInputs, top_k: int = 100) -> PlanRequest:
    """The validated plan request ``inputs`` describe.

    Raises:
        InputError: naming the field (``--model``, ``--seq-len``, ``--gpu``...).
    """
    from planner.hardware.catalog import find_gpu, inter_node_link
    from planner.models.source import resolve_model
    from planner.plans.request import PlanRequest
    from planner.timing.step_time import StepTimeOptions, TrainingLength

    model = resolve_model(inputs.model)
    gpu = find_gpu(inputs.gpu)
    link = inter_node_link(gpu, inputs.nodes, inputs.inter_node)
    if inputs.length_kind == 'samples':
        length = TrainingLength(samples=inputs.length_samples, epochs=inputs.length_epochs)
    else:
        length = TrainingLength(tokens=inputs.length_tokens)
    if inputs.batch_unit not in BATCH_UNITS:
        raise InputError('--global-batch', f'unknown unit {inputs.batch_unit!r}',
                         ', '.join(BATCH_UNITS))
    tokens = inputs.batch_unit == 'tokens'
    if not 0 <= inputs.margin_percent < 100:
        raise InputError('--margin', f'must be in [0, 100) percent, got {inputs.margin_percent}')
    if inputs.b_noise_tokens is not None and not inputs.b_noise_tokens > 0:
        raise InputError('--b-noise', f'must be positive, got {inputs.b_noise_tokens!r}')
    if (inputs.base_lr is None) != (inputs.base_batch_samples is None):
        raise InputError('--base-lr', 'give the base LR and the base batch together')
    lora = lora_spec(inputs)
    calibration = calibration_use(inputs, model, gpu)
    return PlanRequest(
        model=model, seq_len=inputs.seq_len, gpu=gpu, max_nodes=inputs.nodes,
        gpus_per_node=inputs.gpus_per_node, inter_node=link,
        global_batch=None if tokens else inputs.batch_value,
        global_batch_tokens=inputs.batch_value if tokens else None, length=length,
        zero_stages=tuple(inputs.zero_stages), recompute_modes=tuple(inputs.recompute_modes),
        precision=inputs.precision, optimizer=inputs.optimizer,
        margin_fraction=inputs.margin_percent / 100.0,
        price_per_gpu_hour_usd=inputs.price_per_gpu_hour_usd, top_k=top_k, lora=lora,
        loop=inputs.loop, loss=inputs.loss,
        **({} if calibration is None else {
            'calibration': calibration.efficiency, 'overheads': calibration.overheads,
            'step_options': calibration.step_options or StepTimeOptions()}))


def calibration_use(inputs: PlanInputs, model, gpu):
    """What the calibration profile gives the plan (None without one), as the CLI's
    ``--profile`` (``planner.cli.plan.calibration_from_args``).

    Raises:
        InputError: the profile file is missing, malformed or of another device.
    """
    from planner.calibrate.apply import use_profile
    from planner.calibrate.profile import choose_profile

    loaded = choose_profile(inputs.profile, gpu)
    if loaded is None:
        return None
    return use_profile(loaded, model=model, gpu=gpu, precision=inputs.precision,
                       framework='hf', step_time=True)


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
    if isinstance(value, bool):
        return False
    if key in _OPTIONAL or isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))
