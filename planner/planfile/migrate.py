"""Plan-file schema versions and the migrations between them (docs/plan-file.md).

Each migration takes the parsed document of version ``n`` and returns the document of
version ``n + 1``; :func:`migrate` chains them up to :data:`CURRENT_SCHEMA`. A document
from a newer batchfit is refused rather than half-read.

Versions:
    0: the pre-release draft: flat keys (``gpu``, ``nodes``, ``seq_len``...), the
       candidate under ``plan``, the learning rate as ``lr``; the search space was not
       recorded.
    1: sections ``model``, ``cluster``, ``targets``, ``constraints``,
       ``guidance_inputs``, ``guidance``, ``candidate``, ``calibration``.
    2: ``constraints.lora``: the LoRA/QLoRA settings of a fine-tuning plan (rank, targets,
       base bits), null for full training.
    3: stacks: ``candidate.framework`` (the stack that runs it), ``candidate.precision``
       (its recipe) and ``candidate.ep`` (expert parallelism); ``constraints.framework``
       and ``constraints.precision`` may be '' (every stack, each stack's own recipe).
       ``constraints.loop``: the training loop whose hold on the model output is counted
       (``keep-outputs`` or ``trainer``, ``planner/memory/model_outputs.py``).
    4: ``constraints.compile`` and ``constraints.async_tp``: torchtitan's torch.compile and
       async TP switches (the plan's step time counts them; its export turns them on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.errors import InputError

SCHEMA_PREFIX = 'batchfit.plan/'
CURRENT_VERSION = 4
CURRENT_SCHEMA = f'{SCHEMA_PREFIX}{CURRENT_VERSION}'
_V0_LAYOUT = ('nodes', 'gpus_per_node', 'gpus', 'tp', 'pp', 'vpp', 'cp', 'dp', 'micro_batch',
              'grad_accum', 'global_batch', 'zero', 'recompute', 'sequence_parallel')


def schema_version(data: Any, where: str) -> int:
    """The schema version of a parsed document.

    Raises:
        InputError: not an object, no schema, another file type, or a newer version.
    """
    if not isinstance(data, dict):
        raise InputError(where, 'must hold a JSON object: not a batchfit plan file')
    schema = data.get('schema')
    if schema is None:
        raise InputError(where, 'has no "schema": not a batchfit plan file')
    if schema == 'batchfit.plan-result/1':
        raise InputError(where, 'is `batchfit plan --json` output, not a plan file: save one '
                         'with `batchfit plan ... --save FILE`')
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise InputError(where, f'unknown schema {schema!r}: not a batchfit plan file '
                         f'(expected {CURRENT_SCHEMA})')
    number = schema[len(SCHEMA_PREFIX):]
    if not number.isdigit():
        raise InputError(where, f'unknown schema {schema!r} (expected {CURRENT_SCHEMA})')
    version = int(number)
    if version > CURRENT_VERSION:
        raise InputError(where, f'schema {schema} was written by a newer batchfit; this one '
                         f'reads up to {CURRENT_SCHEMA}: upgrade batchfit')
    return version


def migrate(data: Any, where: str) -> dict[str, Any]:
    """``data`` brought up to :data:`CURRENT_SCHEMA` (a new dict; the input is untouched).

    Raises:
        InputError: see :func:`schema_version`, or an old document missing what its
            migration needs.
    """
    version = schema_version(data, where)
    while version < CURRENT_VERSION:
        data = _MIGRATIONS[version](data, where)
        version += 1
    return data


def _v0_to_v1(old: dict[str, Any], where: str) -> dict[str, Any]:
    """Draft flat layout -> sections. The search space was not saved: defaults stand in."""
    from planner.models.size_rule import parse_size

    def need(key: str, source: dict[str, Any] = old) -> Any:
        if source.get(key) is None:
            raise InputError(f'{where}: {key}', f'missing (needed to migrate {old["schema"]})')
        return source[key]

    plan = need('plan')
    if not isinstance(plan, dict):
        raise InputError(f'{where}: plan', 'must be a JSON object')
    ref = str(old.get('model') or '')
    kind = 'size' if ref and parse_size(ref) is not None else 'preset' if ref else 'spec'
    if ref.lower().endswith('.json'):
        kind = 'spec'  # v0 did not embed the config.json: only its shape survives
    memory: dict[str, Any] = plan['memory'] if isinstance(plan.get('memory'), dict) else {}
    candidate = {key: need(key, plan) for key in _V0_LAYOUT}
    candidate['estimates'] = {k: v for k, v in plan.items() if k not in _V0_LAYOUT}
    return {
        'schema': f'{SCHEMA_PREFIX}1',
        'created_by': f'{old.get("created_by") or "batchfit"} (migrated from {old["schema"]})',
        'model': {'kind': kind, 'ref': ref, 'hf_id': '', 'spec': need('model_spec'),
                  'config': None},
        'cluster': {'gpu': need('gpu'), 'gpu_name': '',
                    'gpu_memory_bytes': memory.get('capacity_bytes'),
                    'max_nodes': need('nodes'), 'gpus_per_node': need('gpus_per_node'),
                    'inter_node': old.get('inter_node')},
        'targets': {'seq_len': need('seq_len'), 'global_batch': need('global_batch'),
                    'global_batch_tokens': None, 'tokens': need('tokens'), 'samples': None,
                    'epochs': None},
        # What a v1 plan was computed with (fixed by that schema, not today's defaults).
        'constraints': {'precision': old.get('precision', 'amp-bf16'),
                        'optimizer': old.get('optimizer', 'adamw'),
                        'attention': old.get('attention', 'flash'),
                        'framework': old.get('framework', 'hf'),
                        'zero_stages': [0, 1, 2, 3], 'recompute_modes': ['none', 'selective',
                                                                         'full'],
                        'margin_fraction': 0.05},
        'guidance_inputs': {},
        'guidance': {'learning_rate': old.get('lr'),
                     'learning_rate_source': f'recorded by {old["schema"]} (rule unknown)',
                     'warmup_steps': old.get('warmup_steps'), 'warmup_note': '',
                     'details': {}},
        'candidate': candidate,
        'calibration': None,
    }


def _v1_to_v2(old: dict[str, Any], where: str) -> dict[str, Any]:
    """Version 1 planned full training only: ``constraints.lora`` is null."""
    constraints = old.get('constraints')
    if not isinstance(constraints, dict):
        raise InputError(f'{where}: constraints', 'must be a JSON object')
    return {**old, 'schema': f'{SCHEMA_PREFIX}2', 'constraints': {**constraints, 'lora': None}}


def _v2_to_v3(old: dict[str, Any], where: str) -> dict[str, Any]:
    """Version 2 planned for one framework and recipe, named in its constraints: the
    candidate ran with those (``hf`` with amp-bf16 by default), without EP. It counted no
    model output: the loop becomes ``keep-outputs``, the one that needs more memory, so a
    re-evaluated plan errs on the safe side."""
    constraints, candidate = old.get('constraints'), old.get('candidate')
    if not isinstance(constraints, dict):
        raise InputError(f'{where}: constraints', 'must be a JSON object')
    if not isinstance(candidate, dict):
        raise InputError(f'{where}: candidate', 'must be a JSON object')
    framework = constraints.get('framework') or 'hf'
    precision = constraints.get('precision') or 'amp-bf16'
    searched = {'framework': framework, 'precision': precision}
    try:  # a search space its stack does not run is searched over every stack again
        from planner.stacks import get_stack

        get_stack(framework).check(
            precision=precision, zero_stages=tuple(constraints.get('zero_stages') or ()),
            recompute_modes=tuple(constraints.get('recompute_modes') or ()),
            lora=constraints.get('lora') is not None)
    except (InputError, TypeError):
        searched = {'framework': '', 'precision': ''}
    return {**old, 'schema': f'{SCHEMA_PREFIX}3',
            'constraints': {**constraints, **searched, 'loop': 'keep-outputs'},
            'candidate': {**candidate, 'framework': framework, 'precision': precision,
                          'ep': 1}}


def _v3_to_v4(old: dict[str, Any], where: str) -> dict[str, Any]:
    """Version 3 had no stack switches: its plans were timed without torch.compile and
    async TP, and their exports left them off."""
    constraints = old.get('constraints')
    if not isinstance(constraints, dict):
        raise InputError(f'{where}: constraints', 'must be a JSON object')
    return {**old, 'schema': f'{SCHEMA_PREFIX}4',
            'constraints': {**constraints, 'compile': False, 'async_tp': False}}


_MIGRATIONS: dict[int, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    0: _v0_to_v1, 1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}
