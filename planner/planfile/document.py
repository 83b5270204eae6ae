"""Plan files: one chosen plan with everything that produced it, as versioned JSON.

A plan file (schema ``batchfit.plan/4``, docs/plan-file.md) holds the whole input of a
search (the model as a preset, a size or the embedded ``config.json``, and always its
resolved shape; the cluster; the targets; the constraints; the guidance inputs), the
chosen candidate with its estimates, the learning rate and warmup it was given, and the
calibration profile the search used, if any.

:func:`write_plan` saves atomically (a temporary file in the same folder, then
``os.replace``), so a crash or a full disk never leaves half a file where a good one
was. :func:`read_plan` validates every field and migrates older schemas
(``planner.planfile.migrate``); a malformed, truncated or unknown file raises one
:class:`~planner.errors.InputError` naming the file and the field, and changes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner import __version__
from planner.defaults import (
    DEFAULT_ATTENTION,
    DEFAULT_MARGIN_FRACTION,
    DEFAULT_OPTIMIZER,
)
from planner.errors import InputError
from planner.memory.training import RECOMPUTE_MODES, LoraSpec
from planner.models.spec import ModelSpec, MoESpec
from planner.planfile.fields import Reader
from planner.planfile.migrate import CURRENT_SCHEMA, migrate
from planner.plans.batch import check_candidate
from planner.plans.guidance import GuidanceInputs
from planner.plans.path import guidance_for

if TYPE_CHECKING:
    from planner.plans.guidance import Guidance
    from planner.plans.request import PlanRequest
    from planner.plans.result import Candidate, SearchResult

MODEL_KINDS: tuple[str, ...] = ('preset', 'size', 'config', 'spec')
TOP_LEVEL_KEYS: tuple[str, ...] = (
    'schema', 'created_by', 'model', 'cluster', 'targets', 'constraints', 'guidance_inputs',
    'guidance', 'candidate', 'calibration')
# The layout fields of a candidate; everything else it carries is an estimate.
LAYOUT_FIELDS: tuple[str, ...] = (
    'nodes', 'gpus_per_node', 'gpus', 'tp', 'pp', 'vpp', 'cp', 'dp', 'micro_batch',
    'grad_accum', 'global_batch', 'zero')
# The stack that runs the candidate, its recipe and expert parallelism (schema 3).
STACK_FIELDS: tuple[str, ...] = ('framework', 'precision', 'ep', 'etp', 'dp_replicate')


# ---- records ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelRecord:
    """The model as the user named it, and its resolved shape.

    Attributes:
        kind: ``preset``, ``size``, ``config`` (a ``config.json`` embedded in the plan)
            or ``spec`` (only the shape is known).
        ref: what ``--model`` said ('' for ``spec``).
        spec: the resolved shape the plan was computed for (authoritative: a later
            preset change does not change a saved plan).
        hf_id: the Hugging Face repository of a preset ('' when unknown).
        config: the embedded ``config.json`` (kind ``config`` only).
    """

    kind: str
    ref: str
    spec: ModelSpec
    hf_id: str = ''
    config: dict[str, Any] | None = None


@dataclass(frozen=True)
class ClusterRecord:
    """The cluster the search could use (the chosen plan may use less of it)."""

    gpu: str
    gpu_name: str
    gpu_memory_bytes: int
    max_nodes: int
    gpus_per_node: int
    inter_node: str | None = None


@dataclass(frozen=True)
class Targets:
    """What one step and the whole run must reach.

    Attributes:
        seq_len: tokens per sequence.
        global_batch: target sequences per step (or None with ``global_batch_tokens``).
        global_batch_tokens: target tokens per step (or None).
        tokens: training tokens (or None with ``samples``).
        samples: sequences in the data set (with ``epochs``).
        epochs: passes over ``samples``.
    """

    seq_len: int
    global_batch: int | None = None
    global_batch_tokens: int | None = None
    tokens: float | None = None
    samples: int | None = None
    epochs: float | None = None


@dataclass(frozen=True)
class Constraints:
    """The search space and the modelling choices (``PlanRequest`` fields, JSON-ready).

    ``lora`` is ``{"rank", "targets", "base_bits"}`` for a LoRA/QLoRA plan, None for full
    training. ``compile`` and ``async_tp`` are torchtitan's switches (off: not asked);
    ``overlap_grad_reduce``, ``tp_comm_overlap`` and ``grad_reduce_in_bf16`` are
    Megatron's, ``partition_activations`` DeepSpeed's and ``zero_bubble`` torchtitan's
    pipeline schedule (optional in the file: absent is off, as plans were made before
    they existed).
    """

    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute_modes: tuple[str, ...] = RECOMPUTE_MODES
    precision: str = ''
    optimizer: str = DEFAULT_OPTIMIZER
    attention: str = DEFAULT_ATTENTION
    framework: str = ''
    loss: str = ''
    loop: str = 'keep-outputs'
    margin_fraction: float = DEFAULT_MARGIN_FRACTION
    price_per_gpu_hour_usd: float | None = None
    sort_by: str = 'time'
    top_k: int = 10
    limits: dict[str, Any] = field(default_factory=dict)
    step_options: dict[str, float] = field(default_factory=dict)
    overheads: dict[str, Any] | None = None
    lora: dict[str, Any] | None = None
    compile: bool = False
    async_tp: bool = False
    overlap_grad_reduce: bool = False
    partition_activations: bool = False
    zero_bubble: bool = False
    tp_comm_overlap: bool = False
    grad_reduce_in_bf16: bool = False

    @property
    def lora_spec(self) -> LoraSpec | None:
        """The LoRA settings as a :class:`LoraSpec` (None for full training)."""
        if self.lora is None:
            return None
        return LoraSpec(rank=self.lora['rank'], targets=tuple(self.lora['targets']),
                        base_bits=self.lora['base_bits'])


@dataclass(frozen=True)
class GuidanceRecord:
    """The learning rate and warmup the exporters write, and where they come from.

    Attributes:
        learning_rate: peak learning rate, or None when nothing suggests one.
        learning_rate_source: how it was chosen, in words.
        warmup_steps: linear warmup in optimizer steps (an integer, as every tool wants).
        warmup_note: how the warmup was chosen.
        details: the full guidance (``Guidance.to_dict()``) for ``batchfit show``.
    """

    learning_rate: float | None = None
    learning_rate_source: str = ''
    warmup_steps: int | None = None
    warmup_note: str = ''
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChosenCandidate:
    """The chosen layout, and its estimates as the search reported them.

    ``micro_batch * grad_accum * dp == global_batch`` and
    ``tp * pp * cp * dp == gpus == nodes * gpus_per_node`` hold (checked on load).
    """

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
    global_batch: int
    zero: int
    recompute: str
    sequence_parallel: bool
    estimates: dict[str, Any] = field(default_factory=dict)
    framework: str = 'hf'
    precision: str = 'amp-bf16'
    ep: int = 1
    etp: int = 0  # the expert-tensor-parallel size (0, or absent in a file: the TP size)
    dp_replicate: int = 1  # HSDP replicas of the FSDP shard group (absent in a file: 1)

    @property
    def layout(self) -> str:
        """``tp/pp/cp/dp``, with ``PxV`` when interleaved."""
        pp = f'{self.pp}x{self.vpp}' if self.vpp > 1 else str(self.pp)
        return f'{self.tp}/{pp}/{self.cp}/{self.dp}'


@dataclass(frozen=True)
class PlanFile:
    """A saved plan: the inputs, the chosen candidate, its guidance and calibration."""

    model: ModelRecord
    cluster: ClusterRecord
    targets: Targets
    constraints: Constraints
    guidance_inputs: GuidanceInputs
    guidance: GuidanceRecord
    candidate: ChosenCandidate
    calibration: dict[str, Any] | None = None
    created_by: str = f'batchfit {__version__}'

    @property
    def steps(self) -> int | None:
        """Optimizer steps of the whole run (rounded up), or None when unknown."""
        steps = self.candidate.estimates.get('steps')
        if isinstance(steps, (int, float)) and math.isfinite(steps) and steps > 0:
            return math.ceil(steps - 1e-9)
        return None

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (key order as in docs/plan-file.md)."""
        model = {'kind': self.model.kind, 'ref': self.model.ref, 'hf_id': self.model.hf_id,
                 'spec': dataclasses.asdict(self.model.spec), 'config': self.model.config}
        candidate = {f.name: getattr(self.candidate, f.name) for f in fields(self.candidate)
                     if f.name != 'estimates'}
        candidate['estimates'] = self.candidate.estimates
        constraints = dataclasses.asdict(self.constraints)
        constraints['zero_stages'] = list(self.constraints.zero_stages)
        constraints['recompute_modes'] = list(self.constraints.recompute_modes)
        return {
            'schema': CURRENT_SCHEMA, 'created_by': self.created_by, 'model': model,
            'cluster': dataclasses.asdict(self.cluster),
            'targets': dataclasses.asdict(self.targets), 'constraints': constraints,
            'guidance_inputs': dataclasses.asdict(self.guidance_inputs),
            'guidance': dataclasses.asdict(self.guidance), 'candidate': candidate,
            'calibration': self.calibration,
        }

    def to_request(self) -> PlanRequest:
        """The :class:`PlanRequest` this plan was searched with (to search again).

        The GPU and network are looked up in the catalog by key.

        Raises:
            InputError: the catalog no longer has the GPU or network.
        """
        from planner.hardware.catalog import find_gpu, find_interconnect
        from planner.memory.peak import Overheads
        from planner.plans.request import LayoutLimits, PlanRequest
        from planner.timing.efficiency import CalibrationProfile
        from planner.timing.step_time import StepTimeOptions, TrainingLength

        c, t = self.constraints, self.targets
        limits: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in c.limits.items()}
        length = (TrainingLength(tokens=t.tokens) if t.tokens is not None
                  else TrainingLength(samples=t.samples, epochs=t.epochs or 1.0))
        calibration = None
        if self.calibration is not None:
            calibration = CalibrationProfile(
                axis=self.calibration['axis'],
                points=tuple((float(x), float(y)) for x, y in self.calibration['points']),
                source=self.calibration.get('source', 'calibration'))
        return PlanRequest(
            model=self.model.spec, seq_len=t.seq_len, gpu=find_gpu(self.cluster.gpu),
            max_nodes=self.cluster.max_nodes, gpus_per_node=self.cluster.gpus_per_node,
            inter_node=(find_interconnect(self.cluster.inter_node)
                        if self.cluster.inter_node else None),
            global_batch=t.global_batch, global_batch_tokens=t.global_batch_tokens,
            length=length, zero_stages=c.zero_stages, recompute_modes=c.recompute_modes,
            precision=c.precision, optimizer=c.optimizer, attention=c.attention,
            framework=c.framework, loss=c.loss, loop=c.loop,
            margin_fraction=c.margin_fraction,
            price_per_gpu_hour_usd=c.price_per_gpu_hour_usd, sort_by=c.sort_by,
            top_k=c.top_k, limits=LayoutLimits(**limits),
            step_options=StepTimeOptions(**c.step_options),
            calibration=calibration,
            overheads=None if c.overheads is None else Overheads(**c.overheads),
            lora=c.lora_spec, compile=c.compile, async_tp=c.async_tp,
            overlap_grad_reduce=c.overlap_grad_reduce,
            partition_activations=c.partition_activations, zero_bubble=c.zero_bubble,
            tp_comm_overlap=c.tp_comm_overlap, grad_reduce_in_bf16=c.grad_reduce_in_bf16)


# ---- building a plan from a search -------------------------------------------------------

def model_record(spec: ModelSpec, model_arg: str | None = None) -> ModelRecord:
    """How the plan names its model: the ``--model`` text, classified, with its shape.

    A ``config.json`` path is read and embedded, so the plan does not depend on the file.
    """
    from planner.models.hf_config import FILE
    from planner.models.presets import preset_info
    from planner.models.size_rule import parse_size

    if not model_arg:
        return ModelRecord(kind='spec', ref='', spec=spec)
    path = Path(model_arg.strip()).expanduser()
    if path.exists():
        config_path = path / FILE if path.is_dir() else path
        try:
            config = json.loads(config_path.read_text(encoding='utf-8'))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError('--model', f'cannot embed {config_path}: {exc}') from exc
        return ModelRecord(kind='config', ref=str(model_arg), spec=spec, config=config)
    if parse_size(model_arg.strip()) is not None:
        return ModelRecord(kind='size', ref=model_arg.strip(), spec=spec)
    hf_id = ''
    with contextlib.suppress(InputError):  # a name the catalog no longer knows
        hf_id = preset_info(model_arg)['hf_id']
    return ModelRecord(kind='preset', ref=model_arg.strip(), spec=spec, hf_id=hf_id)


def plan_file_from_search(request: PlanRequest, result: SearchResult, candidate_index: int = 0,
                          *, model_arg: str | None = None,
                          guidance_inputs: GuidanceInputs | None = None,
                          chosen: Candidate | None = None) -> PlanFile:
    """The plan file for one candidate of a finished search.

    Args:
        request: the searched request.
        result: its result (status ``ok``).
        candidate_index: 0-based position in ``result.top()`` (the table's rows).
        model_arg: the ``--model`` text, to record the preset/size or embed the
            ``config.json``; None records only the resolved shape.
        guidance_inputs: the reference LR, batch, warmup and noise scale given.
        chosen: the candidate itself (any fitting one, e.g. a row of the app's full
            table); ``candidate_index`` is then ignored.

    Raises:
        InputError: the search found no plan, or ``candidate_index`` is out of range.
    """
    inputs = guidance_inputs or GuidanceInputs()
    if not result.fitting:
        raise InputError('--save', f'no plan to save: {result.message or "nothing fits"}')
    if chosen is None:
        shown = result.top(max(candidate_index + 1, request.top_k))
        if not 0 <= candidate_index < len(shown):
            raise InputError('--pick', f'candidate {candidate_index + 1} does not exist',
                             f'1 to {len(shown)}')
        chosen = shown[candidate_index]
    guidance = guidance_for(request, result, chosen, inputs)
    length = request.length
    return PlanFile(
        model=model_record(request.model, model_arg),
        cluster=ClusterRecord(
            gpu=request.gpu.key, gpu_name=request.gpu.name,
            gpu_memory_bytes=request.gpu.memory_bytes, max_nodes=request.max_nodes,
            gpus_per_node=request.gpus_per_node,
            inter_node=None if request.inter_node is None else request.inter_node.key),
        targets=Targets(
            seq_len=request.seq_len, global_batch=request.global_batch,
            global_batch_tokens=request.global_batch_tokens,
            tokens=None if length is None else length.tokens,
            samples=None if length is None else length.samples,
            epochs=None if length is None or length.samples is None else length.epochs),
        constraints=Constraints(
            zero_stages=tuple(int(z) for z in request.zero_stages),
            recompute_modes=tuple(request.recompute_modes), precision=request.precision,
            optimizer=request.optimizer, attention=request.attention,
            framework=request.framework, loss=request.loss, loop=request.loop,
            margin_fraction=request.margin_fraction,
            price_per_gpu_hour_usd=request.price_per_gpu_hour_usd, sort_by=request.sort_by,
            top_k=request.top_k, limits=request.limits.to_dict(),
            step_options=dataclasses.asdict(request.step_options),
            overheads=None if request.overheads is None
            else dataclasses.asdict(request.overheads),
            lora=None if request.lora is None else request.lora.to_dict(),
            compile=request.compile, async_tp=request.async_tp,
            overlap_grad_reduce=request.overlap_grad_reduce,
            partition_activations=request.partition_activations,
            zero_bubble=request.zero_bubble, tp_comm_overlap=request.tp_comm_overlap,
            grad_reduce_in_bf16=request.grad_reduce_in_bf16),
        guidance_inputs=inputs,
        guidance=guidance_record(guidance),
        candidate=chosen_candidate(chosen),
        calibration=_calibration_dict(request.calibration))


def chosen_candidate(c: Candidate) -> ChosenCandidate:
    """A search :class:`Candidate` as a plan-file record (NaN estimates become None)."""
    data = c.to_dict()
    layout = {name: data.pop(name) for name in (*LAYOUT_FIELDS, 'recompute',
                                                'sequence_parallel', *STACK_FIELDS)}
    return ChosenCandidate(**layout, estimates=data)


def guidance_record(g: Guidance) -> GuidanceRecord:
    """The LR the exporters use: the scaled reference LR, else DeepSeek's law, else none."""
    if g.learning_rates is not None:
        lr, source = g.learning_rates.recommended, g.learning_rates.rule
    elif g.deepseek_lr is not None:
        lr, source = g.deepseek_lr, ('DeepSeek LLM scaling law (no --base-lr given; a '
                                     'starting point, not a guarantee)')
    else:
        lr, source = None, 'none: give --base-lr and --base-batch, or a data size'
    return GuidanceRecord(learning_rate=lr, learning_rate_source=source,
                          warmup_steps=g.warmup_steps, warmup_note=g.warmup_note,
                          details=_finite(g.to_dict()))


def _calibration_dict(calibration: Any) -> dict[str, Any] | None:
    from planner.timing.efficiency import as_profile

    profile = as_profile(calibration)
    if profile is None:
        return None
    return {'axis': profile.axis, 'points': [list(p) for p in profile.points],
            'source': profile.source}


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# ---- reading ------------------------------------------------------------------------------

def plan_from_dict(data: Any, where: str = 'plan') -> PlanFile:
    """A validated :class:`PlanFile` from a parsed document of any known schema.

    Args:
        data: the parsed JSON.
        where: how errors name the document (usually its path).

    Raises:
        InputError: an unknown schema, a missing or unknown key, a wrong type, or
            numbers that do not add up (``micro × accumulation × DP != global batch``).
    """
    doc = Reader(migrate(data, where), where)
    doc.only(TOP_LEVEL_KEYS)
    model = _read_model(doc.section('model'))
    cluster = doc.section('cluster')
    targets = doc.section('targets')
    plan = PlanFile(
        model=model,
        cluster=ClusterRecord(
            gpu=cluster.text('gpu'), gpu_name=cluster.text('gpu_name', ''),
            gpu_memory_bytes=cluster.count('gpu_memory_bytes'),
            max_nodes=cluster.count('max_nodes'), gpus_per_node=cluster.count('gpus_per_node'),
            inter_node=cluster.text('inter_node', None)),
        targets=Targets(
            seq_len=targets.count('seq_len'), global_batch=targets.count('global_batch', None),
            global_batch_tokens=targets.count('global_batch_tokens', None),
            tokens=targets.number('tokens', None), samples=targets.count('samples', None),
            epochs=targets.number('epochs', None)),
        constraints=_read_constraints(doc.section('constraints')),
        guidance_inputs=_read_guidance_inputs(doc.section('guidance_inputs')),
        guidance=_read_guidance(doc.section('guidance')),
        candidate=_read_candidate(doc.section('candidate')),
        calibration=_read_calibration(doc, 'calibration'),
        created_by=doc.text('created_by', ''))
    _check_ranges(plan, where)
    _check_consistent(plan, where)
    return plan


def _check_ranges(plan: PlanFile, where: str) -> None:
    """The plan's numbers inside the ranges every input has (planner.limits)."""
    from planner import limits

    t, c = plan.targets, plan.cluster
    values = {('targets', 'seq_len'): t.seq_len, ('targets', 'global_batch'): t.global_batch,
              ('targets', 'global_batch_tokens'): t.global_batch_tokens,
              ('targets', 'tokens'): t.tokens, ('targets', 'samples'): t.samples,
              ('targets', 'epochs'): t.epochs, ('cluster', 'max_nodes'): c.max_nodes,
              ('cluster', 'gpus_per_node'): c.gpus_per_node}
    for (section, key), value in values.items():
        if value is None:
            continue
        try:
            limits.check({'max_nodes': 'nodes'}.get(key, key), value)
        except limits.LimitError as exc:
            reason = str(exc)[len(exc.field) + 2:]
            raise InputError(f'{where}: {section}.{key}', reason) from None


def read_plan(path: str | os.PathLike[str]) -> PlanFile:
    """Load, migrate and validate a plan file.

    Raises:
        InputError: the file is missing, unreadable, not UTF-8, not JSON (truncated?),
            of an unknown schema, or invalid; the message names the file and field.
    """
    path = Path(path)
    where = str(path)
    from planner import untrusted

    try:
        text = untrusted.read_text(path, 'plan', where)
    except FileNotFoundError:
        raise InputError(where, 'no such plan file') from None
    except IsADirectoryError:
        raise InputError(where, 'is a folder, not a plan file') from None
    if not text.strip():
        raise InputError(where, 'is empty: not a plan file (batchfit plan ... --save FILE)')
    return plan_from_dict(untrusted.loads_json(text, where), where)


def write_plan(path: str | os.PathLike[str], plan: PlanFile) -> None:
    """Save ``plan`` as JSON, atomically.

    Raises:
        InputError: the folder does not exist or cannot be written (nothing changed).
    """
    text = json.dumps(plan.to_dict(), indent=2, allow_nan=False) + '\n'
    write_text_atomic(path, text)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder.

    ``os.replace`` is atomic on POSIX and Windows within one file system: readers see
    the old file or the new one, never a mix. The new file gets the usual umask mode.

    Raises:
        InputError: the folder is missing or not writable; the old file is untouched.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path('.')
    if target.is_dir():
        raise InputError(str(target), 'is a folder; give a file name')
    try:
        handle, temp = tempfile.mkstemp(prefix=f'.{target.name}.', suffix='.tmp', dir=folder)
    except OSError as exc:
        raise InputError(str(target), f'cannot write in {folder}: {exc.strerror}') from None
    try:
        with os.fdopen(handle, 'w', encoding='utf-8', newline='\n') as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp makes it 0600
        os.replace(temp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise InputError(str(target), f'cannot write: {exc.strerror}') from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


# ---- section readers ----------------------------------------------------------------------

def _read_model(m: Reader) -> ModelRecord:
    m.only(('kind', 'ref', 'hf_id', 'spec', 'config'))
    kind = m.choice('kind', MODEL_KINDS)
    config = m.mapping('config', None)
    if kind == 'config' and config is None:
        raise m.error('config', 'a model of kind "config" embeds its config.json here')
    spec_reader = m.section('spec')
    spec_values = dict(spec_reader.data)
    if 'hf_model_type' not in spec_values:  # a file written before the field existed
        spec_values['hf_model_type'] = _hf_model_type(kind, m.text('ref', ''), config)
    moe = spec_values.pop('moe', None)
    try:
        moe_spec = None if moe is None else MoESpec(**moe)
        spec = ModelSpec(**spec_values, moe=moe_spec)
    except TypeError as exc:  # an unknown or missing field
        raise spec_reader.error('', f'not a model shape: {exc}') from None
    except InputError as exc:
        raise spec_reader.error(exc.field, str(exc)[len(exc.field) + 2:]) from None
    return ModelRecord(kind=kind, ref=m.text('ref', ''), spec=spec,
                       hf_id=m.text('hf_id', ''), config=config)


def _hf_model_type(kind: str, ref: str, config: dict[str, Any] | None) -> str:
    """The Hugging Face ``model_type`` of a model recorded without one, as batchfit
    gives it today: the embedded config.json's, a size rule's (a Llama shape), a preset's
    ('' when the catalog no longer knows it, or for a bare shape)."""
    if kind == 'config':
        value = (config or {}).get('model_type')
        return value if isinstance(value, str) else ''
    if kind == 'size':
        return 'llama'
    if kind == 'preset':
        from planner.models.presets import find_preset

        with contextlib.suppress(InputError):
            return find_preset(ref).hf_model_type
    return ''


def _read_constraints(c: Reader) -> Constraints:
    c.only(tuple(f.name for f in fields(Constraints)))
    return Constraints(
        zero_stages=tuple(c.int_list('zero_stages')),
        recompute_modes=tuple(c.text_list('recompute_modes')),
        precision=c.text('precision'), optimizer=c.text('optimizer'),
        attention=c.text('attention'), framework=c.text('framework'),
        loss=c.text('loss', ''), loop=c.text('loop', 'keep-outputs'),
        margin_fraction=c.number('margin_fraction'),
        price_per_gpu_hour_usd=c.number('price_per_gpu_hour_usd', None),
        sort_by=c.text('sort_by', 'time'), top_k=c.count('top_k', 10),
        limits=c.mapping('limits', {}) or {}, step_options=c.mapping('step_options', {}) or {},
        overheads=c.mapping('overheads', None), lora=_read_lora(c),
        compile=c.flag('compile'), async_tp=c.flag('async_tp'),
        overlap_grad_reduce=c.flag('overlap_grad_reduce', False),
        partition_activations=c.flag('partition_activations', False),
        zero_bubble=c.flag('zero_bubble', False),
        tp_comm_overlap=c.flag('tp_comm_overlap', False),
        grad_reduce_in_bf16=c.flag('grad_reduce_in_bf16', False))


def _read_lora(c: Reader) -> dict[str, Any] | None:
    """``constraints.lora``: null, or rank, targets and base bits that make a LoraSpec."""
    if c.mapping('lora', None) is None:
        return None
    lora = c.section('lora')
    lora.only(('rank', 'targets', 'base_bits'))
    values = {'rank': lora.count('rank'), 'targets': lora.text_list('targets'),
              'base_bits': lora.choice('base_bits', (4, 8, 16, 32))}
    try:
        spec = LoraSpec(rank=values['rank'], targets=tuple(values['targets']),
                        base_bits=values['base_bits'])
    except InputError as exc:
        raise lora.error('targets', str(exc)[len(exc.field) + 2:]) from None
    return spec.to_dict()


def _read_guidance_inputs(g: Reader) -> GuidanceInputs:
    g.only(tuple(f.name for f in fields(GuidanceInputs)))
    values = {'base_lr': g.number('base_lr', None),
              'base_batch_samples': g.number('base_batch_samples', None),
              'base_warmup_steps': g.count('base_warmup_steps', None),
              'b_noise_tokens': g.number('b_noise_tokens', None)}
    try:
        return GuidanceInputs(**values)
    except InputError as exc:
        raise g.error('', exc.message) from None


def _read_guidance(g: Reader) -> GuidanceRecord:
    g.only(tuple(f.name for f in fields(GuidanceRecord)))
    lr = g.number('learning_rate', None)
    if lr is not None and not lr > 0:
        raise g.error('learning_rate', f'must be positive, got {lr!r}')
    return GuidanceRecord(
        learning_rate=lr, learning_rate_source=g.text('learning_rate_source', ''),
        warmup_steps=g.whole('warmup_steps', None), warmup_note=g.text('warmup_note', ''),
        details=g.mapping('details', {}) or {})


def _read_candidate(c: Reader) -> ChosenCandidate:
    from planner.memory.recipes import RECIPES
    from planner.stacks import STACK_KEYS

    c.only((*LAYOUT_FIELDS, 'recompute', 'sequence_parallel', 'estimates', *STACK_FIELDS))
    values: dict[str, Any] = {name: c.count(name) for name in LAYOUT_FIELDS if name != 'zero'}
    values['zero'] = c.choice('zero', (0, 1, 2, 3))
    return ChosenCandidate(**values, recompute=c.choice('recompute', RECOMPUTE_MODES),
                           sequence_parallel=c.flag('sequence_parallel'),
                           estimates=c.mapping('estimates', {}) or {},
                           framework=c.choice('framework', STACK_KEYS),
                           precision=c.choice('precision', tuple(RECIPES)), ep=c.count('ep'),
                           etp=c.whole('etp', 0), dp_replicate=c.count('dp_replicate', 1))


def _read_calibration(doc: Reader, key: str) -> dict[str, Any] | None:
    if doc.mapping(key, None) is None:
        return None
    from planner.timing.efficiency import CalibrationProfile

    cal = doc.section(key)
    cal.only(('axis', 'points', 'source'))
    points = cal.data.get('points')
    try:
        if points is None:
            raise TypeError(points)
        profile = CalibrationProfile(axis=cal.text('axis'),
                                     points=tuple((float(x), float(y)) for x, y in points),
                                     source=cal.text('source', 'calibration'))
    except (TypeError, ValueError):
        raise cal.error('points', 'must be a list of [x, efficiency] pairs') from None
    except InputError as exc:
        raise cal.error('', str(exc)) from None
    return {'axis': profile.axis, 'points': [list(p) for p in profile.points],
            'source': profile.source}


def _check_consistent(plan: PlanFile, where: str) -> None:
    """The identities every exporter relies on (:mod:`planner.plans.batch`)."""
    check_candidate(plan.candidate, f'{where}: candidate')
    t = plan.targets
    if (t.global_batch is None) == (t.global_batch_tokens is None):
        raise InputError(f'{where}: targets', 'give exactly one of global_batch and '
                         'global_batch_tokens')
    target = t.global_batch or (t.global_batch_tokens or 0) / t.seq_len
    if plan.candidate.global_batch != target:
        raise InputError(f'{where}: candidate.global_batch',
                         f'{plan.candidate.global_batch} is not the target batch {target:g}')
    if (t.tokens is None) == (t.samples is None):
        raise InputError(f'{where}: targets', 'give exactly one of tokens and samples')
    if plan.candidate.nodes > plan.cluster.max_nodes or (
            plan.candidate.gpus_per_node > plan.cluster.gpus_per_node):
        raise InputError(f'{where}: candidate', f'{plan.candidate.nodes} x '
                         f'{plan.candidate.gpus_per_node} GPUs exceed the cluster '
                         f'({plan.cluster.max_nodes} x {plan.cluster.gpus_per_node})')
    c = plan.candidate
    _check_loss(plan, where)
    if plan.constraints.lora is not None and c.tp * c.pp * c.cp > 1:
        raise InputError(f'{where}: candidate', f'tp/pp/cp/dp {c.layout}: a LoRA plan is data '
                         'parallel only (PEFT)')
    if plan.candidate.tp > 1 and plan.model.spec.num_heads % plan.candidate.tp:
        raise InputError(f'{where}: candidate.tp', f'{plan.candidate.tp} does not divide the '
                         f'{plan.model.spec.num_heads} heads')


def _check_loss(plan: PlanFile, where: str) -> None:
    """The loss the plan counted is one its stack's launchers run (a search gives no other:
    planner.plans.request; a hand-edited or older file may)."""
    from planner.memory.training import LOSSES
    from planner.stacks import STACKS

    loss, stack = plan.constraints.loss, STACKS.get(plan.candidate.framework)
    if loss not in LOSSES:
        raise InputError(f'{where}: constraints.loss', f'unknown value {loss!r}',
                         ', '.join(LOSSES[1:]))
    refusal = None if stack is None else stack.loss_refusal(loss, plan.model.spec.hf_model_type)
    if refusal is not None:
        raise InputError(f'{where}: constraints.loss', f'{refusal[0]}: re-plan',
                         refusal[1])
