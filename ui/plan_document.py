"""The window's document is a plan file (``batchfit.plan``, :mod:`planner.planfile.document`).

Saving writes the same file ``batchfit plan --save`` writes: the inputs on screen, the
selected candidate with its estimates and guidance. Opening turns a plan file (made here
or by the CLI) back into the window's :class:`~ui.plan_inputs.PlanInputs`, and names what
the window cannot show (a CLI-only option) so nothing changes silently. Qt-free.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.defaults import DEFAULT_ATTENTION, DEFAULT_SORT_KEY
from planner.errors import InputError
from ui.plan_inputs import LORA_TARGETS, PlanInputs

if TYPE_CHECKING:
    from planner.memory.training import LoraSpec
    from planner.planfile.document import ChosenCandidate, PlanFile
    from planner.plans.result import Candidate, SearchResult
    from ui.plan_compute import PlanOutcome

# What ``batchfit plan`` can set but the window does not offer; the window plans with
# these defaults, and says so when a file used another value.
_WINDOW_DEFAULTS = {'attention': DEFAULT_ATTENTION, 'sort_by': DEFAULT_SORT_KEY}


@dataclass(frozen=True)
class OpenedPlan:
    """A plan file as the window shows it.

    Attributes:
        inputs: the inputs to put on screen.
        chosen: the candidate the file chose (to select it again after the search).
        notes: what the window recomputes differently from the file, in words.
    """

    inputs: PlanInputs
    chosen: ChosenCandidate
    notes: tuple[str, ...]


def plan_for(outcome: PlanOutcome, c: Candidate) -> PlanFile:
    """The plan file for row ``c`` of ``outcome`` (as ``batchfit plan --save`` writes it).

    Raises:
        InputError: ``c`` is not one of the outcome's rows, or the search found no plan.
    """
    from planner.planfile.document import GuidanceInputs, plan_file_from_search

    if not outcome.result.fitting:
        raise InputError('plan', 'no layout fits these inputs, so there is no plan')
    inputs = outcome.inputs
    guidance = GuidanceInputs(base_lr=inputs.base_lr,
                              base_batch_samples=inputs.base_batch_samples,
                              b_noise_tokens=inputs.b_noise_tokens)
    return plan_file_from_search(outcome.request, outcome.result, model_arg=inputs.model,
                                 guidance_inputs=guidance, chosen=c)


def opened_plan(plan: PlanFile, models_dir: Path | None = None) -> OpenedPlan:
    """The window's inputs for ``plan``.

    A model given as a ``config.json`` that is no longer where it was is written from the
    copy embedded in the plan to ``models_dir`` (default: the user data dir), so the
    window can read it.

    Raises:
        InputError: the plan names its model only by shape (no preset, size or config).
    """
    m, cl, t, c, g = (plan.model, plan.cluster, plan.targets, plan.constraints,
                      plan.guidance_inputs)
    notes = []
    if m.kind in ('preset', 'size'):
        model = m.ref
    elif m.kind == 'config':
        model = m.ref if m.ref and Path(m.ref).is_file() else str(
            _restore_config(m.config or {}, models_dir))
        if model != m.ref:
            notes.append(f'{m.ref} is gone; using the config.json saved in the plan ({model})')
    else:
        raise InputError('model', f'the plan gives only the shape of {m.spec.name}; the window '
                                  'needs a preset, a size or a config.json', 'preset, size, config')
    if t.global_batch is not None:
        batch_value, batch_unit = t.global_batch, 'samples'
    else:
        batch_value, batch_unit = int(t.global_batch_tokens or 0), 'tokens'
    defaults = PlanInputs()
    tuning, tuning_notes = _tuning(c.lora_spec)
    notes.extend(tuning_notes)
    if t.tokens is not None:
        length = {'length_kind': 'tokens', 'length_tokens': float(t.tokens)}
    elif t.samples is not None:
        length = {'length_kind': 'samples', 'length_samples': int(t.samples),
                  'length_epochs': float(t.epochs or 1.0)}
    else:
        length = {}
    inputs = defaults.with_changes(
        model=model, seq_len=t.seq_len, batch_value=batch_value, batch_unit=batch_unit,
        gpu=cl.gpu, nodes=cl.max_nodes, gpus_per_node=cl.gpus_per_node,
        inter_node=cl.inter_node or '', precision=c.precision, framework=c.framework,
        optimizer=c.optimizer,
        zero_stages=tuple(c.zero_stages), recompute_modes=tuple(c.recompute_modes),
        margin_percent=round(c.margin_fraction * 100.0, 6),
        price_per_gpu_hour_usd=c.price_per_gpu_hour_usd, base_lr=g.base_lr,
        base_batch_samples=g.base_batch_samples, b_noise_tokens=g.b_noise_tokens, **length,
        **tuning, loop=c.loop, loss=c.loss, compile=c.compile, async_tp=c.async_tp,
        overlap_grad_reduce=c.overlap_grad_reduce,
        partition_activations=c.partition_activations, zero_bubble=c.zero_bubble,
        tp_comm_overlap=c.tp_comm_overlap, grad_reduce_in_bf16=c.grad_reduce_in_bf16)
    for name, default in _WINDOW_DEFAULTS.items():
        value = getattr(c, name)
        if value not in (default, None):
            notes.append(f'{name} {value!r} from the file is not offered here; the window '
                         f'plans with {default or "the default"!r}')
    for name in ('limits', 'step_options', 'overheads'):
        if getattr(c, name):
            notes.append(f'the file\'s {name.replace("_", " ")} are not applied here '
                         '(`batchfit plan` keeps them)')
    if g.base_warmup_steps is not None:
        notes.append('the reference warmup steps are not shown here')
    return OpenedPlan(inputs=inputs, chosen=plan.candidate, notes=tuple(notes))


def _tuning(lora: LoraSpec | None) -> tuple[dict[str, Any], list[str]]:
    """The window's fine-tuning fields for a plan's LoRA spec, and what they change."""
    if lora is None:
        return {'tuning': 'full'}, []
    notes = []
    if lora.base_bits not in (4, 16):
        notes.append(f'the file\'s {lora.base_bits}-bit base is planned here as a 16-bit one')
    targets = next((name for name, wanted in LORA_TARGETS.items()
                    if set(wanted) == set(lora.targets)), None)
    if targets is None:
        targets = 'all' if set(lora.targets) - set(LORA_TARGETS['attention']) else 'attention'
        notes.append(f'the file adapts {", ".join(lora.targets)}; the window offers '
                     f'{", ".join(LORA_TARGETS[targets])}')
    return {'tuning': 'qlora' if lora.base_bits == 4 else 'lora', 'lora_rank': lora.rank,
            'lora_targets': targets}, notes


def matching_index(result: SearchResult, chosen: ChosenCandidate) -> int | None:
    """Array index of the candidate with ``chosen``'s layout, or None when the search
    no longer has it."""
    from planner.timing.step_time import RECOMPUTE_MODES

    if not result.fitting or result.layout is None or chosen.recompute not in RECOMPUTE_MODES:
        return None
    n = result.fitting
    hit = np.ones(n, bool)
    for key in ('nodes', 'tp', 'pp', 'vpp', 'cp', 'dp', 'micro_batch', 'grad_accum', 'zero'):
        want = getattr(chosen, key, None)
        if want is None:
            continue
        hit &= np.broadcast_to(np.asarray(getattr(result.layout, key)), (n,)) == want
    hit &= np.broadcast_to(np.asarray(result.layout.recompute), (n,)) == RECOMPUTE_MODES.index(
        chosen.recompute)
    found = np.flatnonzero(hit)
    return int(found[0]) if found.size else None


def _restore_config(config: dict, models_dir: Path | None) -> Path:
    """Write an embedded ``config.json`` once, under a name derived from its content."""
    from planner.planfile.document import write_text_atomic
    from planner.user_config import data_dir

    text = json.dumps(config, indent=2, sort_keys=True) + '\n'
    folder = (models_dir or data_dir() / 'models')
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f'config-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json'
    if not path.is_file():
        write_text_atomic(path, text)
    return path

