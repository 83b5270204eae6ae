"""Named model presets: ``resources/models.toml`` plus the user's own tables.

Each ``[models.<key>]`` table holds :class:`~planner.models.spec.ModelSpec` fields
(``[models.<key>.moe]`` for a :class:`~planner.models.spec.MoESpec`) and the
listing fields ``aliases``, ``hf_id``, ``published_params`` and ``source``.
``user.toml`` (``planner.user_config``) may hold the same tables: a new key adds a
preset; a built-in key overrides just the fields it names (its ``moe`` table
field by field, too).

Lookup ignores case and punctuation, so ``Llama-3.1-8B``, ``llama3.1 8b`` and
``meta-llama/Llama-3.1-8B`` all find the same preset.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import MISSING, dataclass, fields
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.models.spec import ModelSpec, MoESpec
from planner.resources import resource_path
from planner.toml_compat import tomllib
from planner.user_config import parse_user_toml, read_user_toml_text, user_toml_path

PRESET_FILE = 'models.toml'
MODEL_ALLOWED = ('a preset id, alias, name or Hugging Face id; a size such as 7B; '
                 'or a config.json file or folder')

_INFO_FIELDS = ('aliases', 'hf_id', 'published_params')
# Field types from ModelSpec's annotations (strings under postponed evaluation);
# the Literal aliases (activation, norm, ...) and str fields are read as str.
_TYPES = {'int': int, 'bool': bool, 'float': float, 'float | None': float}
_SPEC_TYPES: dict[str, type] = {
    f.name: _TYPES.get(str(getattr(f.type, '__name__', f.type)), str)
    for f in fields(ModelSpec) if f.name != 'moe'}
_MOE_TYPES = {f.name: _TYPES[str(f.type)] for f in fields(MoESpec)}
_SPEC_REQUIRED = [f.name for f in fields(ModelSpec) if f.default is MISSING and f.name != 'name']
_MOE_REQUIRED = [f.name for f in fields(MoESpec) if f.default is MISSING]


@dataclass(frozen=True)
class _Preset:
    """A preset and what a listing shows beside it (see :func:`preset_info`)."""

    key: str
    spec: ModelSpec
    aliases: tuple[str, ...] = ()
    hf_id: str = ''
    published_params: int | None = None
    user: bool = False


def normalize(text: str) -> str:
    """Lower-case ``text`` and drop everything but letters and digits."""
    return re.sub(r'[^0-9a-z]', '', text.lower())


def load_presets() -> dict[str, ModelSpec]:
    """Every preset by key: the built-in ones, then the user's additions and overrides.

    Raises:
        InputError: a table has an unknown field, a wrong type or an invalid shape.
    """
    return {key: info.spec for key, info in _catalog().items()}


def preset_info(key: str) -> dict[str, Any]:
    """What a listing shows beside a preset, found as :func:`find_preset` finds it.

    Returns:
        A JSON-ready dict: ``aliases`` (list of other names), ``hf_id`` (the Hugging
        Face repository the shape comes from, '' if none), ``published_params`` (the
        checkpoint's exact parameter count, or None when not known exactly),
        ``source`` (where the shape comes from, in words) and ``user`` (whether the
        user's ``user.toml`` added or changed it).

    Raises:
        InputError: no preset answers to ``key``.
    """
    catalog = _catalog()
    preset = catalog[_find_key(key, catalog)]
    return {'aliases': list(preset.aliases), 'hf_id': preset.hf_id,
            'published_params': preset.published_params, 'source': preset.spec.source,
            'user': preset.user}


def find_preset(text: str) -> ModelSpec:
    """The preset whose key, alias, name or Hugging Face id is ``text``.

    Case, spaces and punctuation do not matter. A Hugging Face id also matches
    without its organisation (``Llama-3.1-8B``).

    Raises:
        InputError: on ``--model``, with up to three close names, when none matches.
    """
    catalog = _catalog()
    return catalog[_find_key(text, catalog)].spec


def _find_key(text: str, catalog: dict[str, _Preset]) -> str:
    index = _index_for(catalog)
    wanted = normalize(text)
    if wanted in index:
        return index[wanted]
    close = difflib.get_close_matches(wanted, list(index), n=8, cutoff=0.6)
    suggestions = list(dict.fromkeys(index[name] for name in close))[:3]
    message = f'unknown model {text.strip()!r}'
    if suggestions:
        message += f'; did you mean: {", ".join(suggestions)}?'
    raise InputError('--model', message, MODEL_ALLOWED)


def _index(catalog: dict[str, _Preset]) -> dict[str, str]:
    """Normalized name -> key. Keys win over other names; user presets over built-ins."""
    index: dict[str, str] = {}
    for key, info in catalog.items():
        names = [info.spec.name, *info.aliases]
        if info.hf_id:
            names.append(info.hf_id)
        names += [name.rsplit('/', 1)[1] for name in names if '/' in name]
        for name in names:
            if normalize(name) and (info.user or normalize(name) not in index):
                index[normalize(name)] = key
    index.update({normalize(key): key for key in catalog})
    return index


def _catalog() -> dict[str, _Preset]:
    """Built-in presets merged with the user's, rebuilt only when user.toml changes."""
    return _catalog_for(read_user_toml_text(), str(user_toml_path()))


def _index_for(catalog: dict[str, _Preset]) -> dict[str, str]:
    """:func:`_index` of a catalog, cached alongside it."""
    entry = _INDEXES.get(id(catalog))
    if entry is None or entry[0] is not catalog:
        entry = (catalog, _index(catalog))
        _INDEXES.clear()  # only the current catalog's index is worth keeping
        _INDEXES[id(catalog)] = entry
    return entry[1]


_INDEXES: dict[int, tuple[dict[str, _Preset], dict[str, str]]] = {}


@lru_cache(maxsize=4)
def _catalog_for(user_text: str, user_path: str) -> dict[str, _Preset]:
    tables = {key: dict(table) for key, table in _builtin_tables().items()}
    user_keys = set()
    user_models = parse_user_toml(user_text, Path(user_path)).get('models', {})
    if not isinstance(user_models, dict):
        raise InputError('models', 'the user.toml entry must be a table of [models.<key>] tables')
    for key, table in user_models.items():
        key = key.lower()
        if not isinstance(table, dict):
            raise InputError(f'models.{key}', 'must be a table of model fields')
        merged = {**tables.get(key, {}), **table}
        if isinstance(tables.get(key, {}).get('moe'), dict) and isinstance(table.get('moe'), dict):
            merged['moe'] = {**tables[key]['moe'], **table['moe']}
        tables[key] = merged
        user_keys.add(key)
    return {key: _info_from_table(key, table, key in user_keys) for key, table in tables.items()}


@cache
def _builtin_tables() -> dict[str, dict[str, Any]]:
    with resource_path(PRESET_FILE).open('rb') as handle:
        return tomllib.load(handle)['models']


def _info_from_table(key: str, table: dict[str, Any], user: bool) -> _Preset:
    """A :class:`_Preset` from one ``[models.<key>]`` table, every field checked."""
    where = f'models.{key}'
    unknown = sorted(set(table) - set(_SPEC_TYPES) - {'moe', *_INFO_FIELDS})
    if unknown:
        raise InputError(f'{where}.{unknown[0]}', 'unknown field',
                         ', '.join([*_SPEC_TYPES, 'moe', *_INFO_FIELDS]))
    values = {name: _checked(where, name, table[name], kind)
              for name, kind in _SPEC_TYPES.items() if name in table}
    values.setdefault('name', key)
    _require(where, values, _SPEC_REQUIRED)
    if 'moe' in table:
        moe = table['moe']
        if not isinstance(moe, dict):
            raise InputError(f'{where}.moe', 'must be a table of MoE fields',
                             ', '.join(_MOE_TYPES))
        bad = sorted(set(moe) - set(_MOE_TYPES))
        if bad:
            raise InputError(f'{where}.moe.{bad[0]}', 'unknown field', ', '.join(_MOE_TYPES))
        _require(f'{where}.moe', moe, _MOE_REQUIRED)
        values['moe'] = MoESpec(**{name: _checked(f'{where}.moe', name, value, _MOE_TYPES[name])
                                   for name, value in moe.items()})
    try:
        spec = ModelSpec(**values)
    except InputError as exc:  # re-labelled so the user sees which table is wrong
        raise InputError(f'{where}.{exc.field}', _message(exc), exc.allowed) from exc
    aliases = table.get('aliases', [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise InputError(f'{where}.aliases', 'must be a list of strings')
    published = table.get('published_params')
    if published is not None:
        published = _checked(where, 'published_params', published, int)
    return _Preset(key=key, spec=spec, aliases=tuple(aliases),
                      hf_id=_checked(where, 'hf_id', table.get('hf_id', ''), str),
                      published_params=published, user=user)


def _checked(where: str, name: str, value: Any, kind: type) -> Any:
    """``value`` if it is a ``kind`` (an int is also a float; a bool is never an int)."""
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise InputError(f'{where}.{name}', f'must be {kind.__name__}, got {value!r}')
    return value


def _require(where: str, table: dict[str, Any], names: list[str]) -> None:
    for name in names:
        if name not in table:
            raise InputError(f'{where}.{name}', 'missing')


def _message(exc: InputError) -> str:
    """The message of ``exc`` without its field and allowed parts."""
    text = str(exc)[len(exc.field) + 2:]
    return text.removesuffix(f' (allowed: {exc.allowed})') if exc.allowed else text
