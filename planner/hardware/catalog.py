"""The GPU and interconnect catalogs: the built-in TOML files plus the user's additions.

``resources/gpus.toml`` and ``resources/interconnects.toml`` hold one table per entry,
keyed by catalog id, with the fields of :class:`~planner.hardware.devices.GpuSpec` and
:class:`~planner.hardware.devices.LinkSpec`. The user's ``user.toml`` may add ``[gpus.<key>]`` and
``[interconnects.<key>]`` tables: a table for an existing key changes only the fields it
gives (``peak_flops`` is merged per dtype), a new key must give every required field.

The built-in files are parsed once per process (:func:`reload` forgets them); the user
file is read on every call, so edits show up without a restart.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.hardware.devices import DTYPES, GpuSpec, LinkSpec
from planner.resources import resource_path
from planner.toml_compat import tomllib
from planner.user_config import load_user_toml, user_toml_path

__all__ = [
    'find_gpu',
    'find_interconnect',
    'load_gpus',
    'load_interconnects',
    'match_nvml_name',
    'reload',
]

_KEY_RE = re.compile(r'[a-z0-9][a-z0-9._-]*')
# Words that name the vendor or brand, not the model: 'NVIDIA GeForce RTX 4090' and
# 'rtx 4090' must look the same to the lookup.
_VENDOR_WORDS = frozenset({'nvidia', 'tesla', 'geforce', 'amd', 'instinct', 'radeon'})
_SUGGESTIONS = 3


# ----------------------------------------------------------------- field checkers
# Each takes a raw TOML value and returns the stored one, or raises ValueError with the
# rule it broke, worded to follow the field name.


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError('must be a non-empty string')
    return value.strip()


def _word(value: Any) -> str:
    return _text(value).lower()


def _number(value: Any) -> float:
    # bool is an int subclass; `true` for a bandwidth is a typo, not 1 B/s.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError('must be a number')
    return float(value)


def _positive(value: Any) -> float:
    number = _number(value)
    if number <= 0:
        raise ValueError('must be positive')
    return number


def _non_negative(value: Any) -> float:
    number = _number(value)
    if number < 0:
        raise ValueError('must not be negative')
    return number


def _whole(value: Any) -> int:
    # TOML writes 80e9 as a float; accept it when it is a whole number.
    number = _number(value)
    if number != int(number):
        raise ValueError('must be a whole number')
    return int(number)


def _positive_whole(value: Any) -> int:
    number = _whole(value)
    if number <= 0:
        raise ValueError('must be positive')
    return number


def _non_negative_whole(value: Any) -> int:
    number = _whole(value)
    if number < 0:
        raise ValueError('must not be negative')
    return number


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError('must be a list of strings')
    return tuple(_text(item) for item in value)


def _peaks(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ValueError(f'must be a table of FLOP/s by dtype ({", ".join(DTYPES)})')
    unknown = sorted(set(value) - set(DTYPES))
    if unknown:
        raise ValueError(f'has unknown dtype(s) {", ".join(unknown)}; known: {", ".join(DTYPES)}')
    peaks = {}
    for dtype, flops in value.items():
        try:
            peaks[dtype] = _positive(flops)
        except ValueError as exc:
            raise ValueError(f'{dtype} {exc}') from None
    return peaks


@dataclasses.dataclass(frozen=True)
class _Kind:
    """What differs between the two catalogs."""

    section: str  # table name in user.toml
    filename: str  # built-in file under resources/
    spec: type
    checkers: Mapping[str, Callable[[Any], Any]]  # every field but `key`
    noun: str  # for messages
    cli_field: str  # the option a lookup error belongs to

    @property
    def required(self) -> tuple[str, ...]:
        """Fields a new entry must give: those without a default."""
        return tuple(
            f.name
            for f in dataclasses.fields(self.spec)
            if f.name != 'key'
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )


_GPUS = _Kind(
    section='gpus',
    filename='gpus.toml',
    spec=GpuSpec,
    checkers={
        'name': _text,
        'vendor': _word,
        'family': _word,
        'memory_bytes': _positive_whole,
        'peak_flops': _peaks,
        'hbm_bandwidth_bytes_per_s': _positive,
        'intra_node_link': _text,
        'intra_node_bandwidth_bytes_per_s': _positive,
        'price_per_gpu_hour_usd': _non_negative,
        'tdp_watts': _non_negative_whole,
        'nvml_names': _names,
        'aliases': _names,
        'source': _text,
    },
    noun='GPU',
    cli_field='--gpu',
)

_LINKS = _Kind(
    section='interconnects',
    filename='interconnects.toml',
    spec=LinkSpec,
    checkers={
        'name': _text,
        'bandwidth_bytes_per_s': _positive,
        'latency_s': _non_negative,
        'aliases': _names,
        'source': _text,
    },
    noun='interconnect',
    cli_field='--inter-node',
)


# ----------------------------------------------------------------- loading


def _check_key(key: Any, where: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key.strip().lower()):
        raise InputError(where, 'catalog ids use a-z, 0-9, ".", "_" and "-"')
    return key.strip().lower()


def _check_fields(kind: _Kind, table: Any, where: str) -> dict[str, Any]:
    """The fields of one TOML table, checked and converted."""
    if not isinstance(table, dict):
        raise InputError(where, f'must be a table of {kind.noun} fields')
    unknown = sorted(set(table) - set(kind.checkers))
    if unknown:
        raise InputError(
            where, f'unknown field(s): {", ".join(unknown)}', allowed=', '.join(kind.checkers)
        )
    given = {}
    for name, value in table.items():
        try:
            given[name] = kind.checkers[name](value)
        except ValueError as exc:
            raise InputError(where, f'{name} {exc}') from None
    return given


def _new_spec(kind: _Kind, key: str, given: dict[str, Any], where: str) -> Any:
    missing = [name for name in kind.required if name not in given]
    if missing:
        raise InputError(where, f'a new {kind.noun} needs {", ".join(missing)}')
    return _checked(kind.spec(key=key, **given), where)


def _checked(spec: Any, where: str) -> Any:
    # The planner falls back to fp32 for any missing dtype, so fp32 must be there.
    if isinstance(spec, GpuSpec) and 'fp32' not in spec.peak_flops:
        raise InputError(where, 'peak_flops needs an fp32 entry')
    return spec


_KINDS = {kind.section: kind for kind in (_GPUS, _LINKS)}


@cache
def _builtin(section: str) -> dict[str, Any]:
    kind = _KINDS[section]
    path = resource_path(kind.filename)
    try:
        data = tomllib.loads(path.read_text(encoding='utf-8'))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), f'is not valid TOML: {exc}') from exc
    specs = {}
    for raw_key, table in data.items():
        where = f'{path} [{raw_key}]'
        key = _check_key(raw_key, where)
        specs[key] = _new_spec(kind, key, _check_fields(kind, table, where), where)
    return specs


def _load(kind: _Kind, user_toml: Path | None) -> dict[str, Any]:
    specs = dict(_builtin(kind.section))  # a copy: the cached dict stays pristine
    path = user_toml_path() if user_toml is None else Path(user_toml)
    tables = load_user_toml(path).get(kind.section, {})
    if not isinstance(tables, dict):
        raise InputError(f'{path} [{kind.section}]', f'must hold [{kind.section}.<key>] tables')
    for raw_key, table in tables.items():
        where = f'{path} [{kind.section}.{raw_key}]'
        key = _check_key(raw_key, where)
        given = _check_fields(kind, table, where)
        if key not in specs:
            specs[key] = _new_spec(kind, key, given, where)
            continue
        base = specs[key]
        if 'peak_flops' in given:  # correct one dtype without restating the others
            given['peak_flops'] = {**base.peak_flops, **given['peak_flops']}
        specs[key] = _checked(dataclasses.replace(base, **given), where)
    return specs


def load_gpus(user_toml: Path | None = None) -> dict[str, GpuSpec]:
    """Every known GPU by catalog id, built-in entries updated by the user's file.

    Args:
        user_toml: the user file to merge; default ``user_config.user_toml_path()``.

    Raises:
        InputError: a catalog entry is malformed, naming the file and the key.
    """
    return _load(_GPUS, user_toml)


def load_interconnects(user_toml: Path | None = None) -> dict[str, LinkSpec]:
    """Every known inter-node network by catalog id, like :func:`load_gpus`.

    Raises:
        InputError: a catalog entry is malformed, naming the file and the key.
    """
    return _load(_LINKS, user_toml)


def reload() -> None:
    """Forget the parsed built-in files (after editing them in a running process)."""
    _builtin.cache_clear()


# ----------------------------------------------------------------- lookup


def _normal(text: str) -> str:
    """``'NVIDIA GeForce RTX-4090'`` -> ``'rtx4090'``: lower case, no punctuation or brand."""
    words = re.findall(r'[a-z0-9]+', text.lower())
    return ''.join(word for word in words if word not in _VENDOR_WORDS)


def _spellings(spec: Any) -> tuple[str, ...]:
    return (spec.key, spec.name, *spec.aliases, *getattr(spec, 'nvml_names', ()))


def _index(specs: Mapping[str, Any]) -> dict[str, list[str]]:
    """Normalised spelling -> the keys it names (more than one means ambiguous)."""
    index: dict[str, list[str]] = {}
    for key, spec in specs.items():
        for spelling in _spellings(spec):
            keys = index.setdefault(_normal(spelling), [])
            if key not in keys:
                keys.append(key)
    return index


def _find(kind: _Kind, text: str, specs: Mapping[str, Any]) -> Any:
    wanted = _normal(text)
    keys = {_normal(key): key for key in specs}
    if wanted in keys:  # a catalog id always wins over another entry's alias
        return specs[keys[wanted]]
    index = _index(specs)
    hits = index.get(wanted, []) if wanted else []
    if len(hits) == 1:
        return specs[hits[0]]
    if hits:
        raise InputError(
            kind.cli_field, f'{kind.noun} {text!r} is ambiguous', allowed=', '.join(hits)
        )
    suggestions: list[str] = []
    for near in difflib.get_close_matches(wanted, list(index), n=10, cutoff=0.6):
        for key in index[near]:
            if key not in suggestions:
                suggestions.append(key)
    message = f'unknown {kind.noun} {text!r}'
    if suggestions:
        message += f'; did you mean: {", ".join(suggestions[:_SUGGESTIONS])}?'
    raise InputError(kind.cli_field, message, allowed=', '.join(sorted(specs)))


def find_gpu(text: str, user_toml: Path | None = None) -> GpuSpec:
    """The GPU a user named by catalog id, alias, marketing name or NVML name.

    Case, spaces, punctuation and brand words (``NVIDIA``, ``GeForce``, ...) are ignored,
    so ``'H100 SXM'``, ``'h100-sxm'`` and ``'NVIDIA H100 80GB HBM3'`` are the same GPU.

    Raises:
        InputError: for field ``--gpu``, with the closest catalog ids when none matches.
    """
    return _find(_GPUS, text, load_gpus(user_toml))


def find_interconnect(text: str, user_toml: Path | None = None) -> LinkSpec:
    """The inter-node network a user named, like :func:`find_gpu`.

    Raises:
        InputError: for field ``--inter-node``, with the closest catalog ids.
    """
    return _find(_LINKS, text, load_interconnects(user_toml))


# The network assumed between nodes when none is named, by GPU family (what such
# clusters are usually built with); another family gets RoCE at 200 Gb/s.
DEFAULT_INTER_NODE = {'hopper': 'ib-ndr', 'blackwell': 'ib-xdr', 'ampere': 'ib-hdr',
                      'cdna3': 'roce-400', 'cdna2': 'slingshot-11', 'volta': 'ib-edr'}
FALLBACK_INTER_NODE = 'roce-200'


def inter_node_link(gpu: GpuSpec, nodes: int, named: str | None = None) -> LinkSpec | None:
    """The network between ``nodes`` nodes of ``gpu``: the ``named`` one, else the GPU
    family's usual one; None on a single node with none named.

    Raises:
        InputError: ``named`` is not in the catalog (field ``--inter-node``).
    """
    if named:
        return find_interconnect(named)
    if nodes > 1:
        return find_interconnect(DEFAULT_INTER_NODE.get(gpu.family, FALLBACK_INTER_NODE))
    return None


# ----------------------------------------------------------------- local GPUs

_MEMORY_TOKEN = re.compile(r'(\d+)g(?:b)?')
_FORM_TOKENS = frozenset({'sxm', 'pcie', 'nvl', 'hbm2', 'hbm2e', 'hbm3', 'hbm3e'})
# A local GPU whose memory is further than this from a candidate's is another product
# (a 16 GB laptop RTX 4090 is not the 24 GB desktop card).
_MEMORY_TOLERANCE = 0.15


def _tokens(text: str) -> set[str]:
    """Comparable words: ``'A100-SXM4-80GB'`` -> ``{'a100', 'sxm', '80gb'}``."""
    tokens = set()
    for word in re.findall(r'[a-z0-9]+', text.lower()):
        if word in _VENDOR_WORDS:
            continue
        if re.fullmatch(r'sxm\d', word):
            word = 'sxm'  # SXM2/SXM4/SXM5 are all "the SXM part"
        elif memory := _MEMORY_TOKEN.fullmatch(word):
            word = f'{memory[1]}gb'
        tokens.add(word)
    return tokens


def _is_memory(token: str) -> bool:
    return bool(re.fullmatch(r'\d+gb', token))


def _model_tokens(tokens: set[str]) -> set[str]:
    """The words naming the chip (``h100``, ``4090``): they hold a digit and are neither a
    memory size nor a form factor."""
    return {
        t for t in tokens if re.search(r'\d', t) and not _is_memory(t) and t not in _FORM_TOKENS
    }


def match_nvml_name(
    nvml_name: str, memory_bytes: int | None = None, user_toml: Path | None = None
) -> GpuSpec | None:
    """The catalog entry for a local GPU, from the name NVML (or torch) reports.

    An exact ``nvml_names`` match wins, then any spelling :func:`find_gpu` accepts. Failing
    both, a GPU whose model word matches (``H100``, ``4090``) is scored by shared words
    (``80GB``, ``PCIe``, ``SXM``); a memory size in the name, or ``memory_bytes``, rules
    out entries of another size. Ties go to the earlier catalog entry (SXM before PCIe).
    A MIG slice (``... MIG 1g.10gb``) matches its parent GPU (pass the parent's memory).

    Args:
        nvml_name: e.g. ``'NVIDIA A100-SXM4-80GB'``.
        memory_bytes: the device's total memory, when known, to tell sizes apart.
        user_toml: the user file to merge, as in :func:`load_gpus`.

    Returns:
        The GPU, or ``None`` when nothing in the catalog is close enough.
    """
    name = re.split(r'\s+MIG\s+', nvml_name.strip(), maxsplit=1)[0]
    specs = load_gpus(user_toml)

    def memory_gap(spec: GpuSpec) -> float:
        return abs(spec.memory_bytes - memory_bytes) / spec.memory_bytes if memory_bytes else 0.0

    fitting = {key: spec for key, spec in specs.items() if memory_gap(spec) <= _MEMORY_TOLERANCE}
    wanted = name.casefold()
    for spec in fitting.values():
        if any(wanted == known.casefold() for known in spec.nvml_names):
            return spec
    hits = _index(fitting).get(_normal(name), [])
    if len(hits) == 1:
        return fitting[hits[0]]

    query = _tokens(name)
    models = _model_tokens(query)
    sizes = {t for t in query if _is_memory(t)}
    if not models:
        return None
    best: tuple[float, ...] | None = None
    chosen = None
    for order, spec in enumerate(fitting.values()):
        known = set().union(*(_tokens(spelling) for spelling in _spellings(spec)))
        known_sizes = {t for t in known if _is_memory(t)}
        if not models <= known or (sizes and known_sizes and not sizes & known_sizes):
            continue  # another chip, or the same chip in another memory size
        score = (len(query & known), -memory_gap(spec), -order)
        if best is None or score > best:
            best, chosen = score, spec
    return chosen
