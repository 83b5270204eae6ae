"""The calibration profile as a file: JSON schema, validation, atomic save, lookup.

A profile (``"schema": "batchfit.calibration/1"``, records in
``planner.calibrate.records``) is written by ``batchfit calibrate`` into
``<data dir>/calibration/`` (``planner.user_config.data_dir``), one file per run, named
after the device, its UUID, the torch version and the date. ``estimate`` and ``plan``
pick the newest profile of the GPU they are asked about (:func:`find_profile`: UUID
first, then the GPU's name) and turn it into the planner's inputs with the helpers of
``planner.calibrate.apply`` (re-exported here).

Files are saved atomically (a temporary file in the same folder, then ``os.replace``),
so a crash mid-write never leaves a truncated profile or destroys the previous one,
and loaded with validation: a malformed file raises
:class:`~planner.errors.InputError` naming the file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import types
import typing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from planner.calibrate.apply import (
    calibration_summary,
    device_spec_from_profile,
    efficiency_from_profile,
    overheads_from_profile,
    step_options_from_profile,
)
from planner.calibrate.records import DEVICE_KINDS, SCHEMA, LoadedProfile, MeasuredProfile
from planner.errors import InputError
from planner.hardware.devices import GpuSpec
from planner.user_config import data_dir

PROFILE_FOLDER = 'calibration'

__all__ = [
    'SCHEMA',
    'calibration_summary',
    'choose_profile',
    'device_spec_from_profile',
    'efficiency_from_profile',
    'find_profile',
    'load_profile',
    'overheads_from_profile',
    'profile_dir',
    'profile_filename',
    'profile_from_dict',
    'save_profile',
    'step_options_from_profile',
    'utc_now',
]


# ---- JSON <-> records, with validation -----------------------------------------------------

class _MalformedError(ValueError):
    """A value does not have the type the schema says (internal)."""


def _convert(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against the type ``hint`` (dataclass, tuple, dict, union, scalar)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, where)
            except _MalformedError:
                continue
        raise _MalformedError(f'{where}: unexpected value {value!r}')
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _record(hint, value, where)
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list):
            raise _MalformedError(f'{where}: must be a list')
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f'{where}[{i}]') for i, v in enumerate(value))
        if len(value) != len(args):
            raise _MalformedError(f'{where}: must have {len(args)} items')
        return tuple(_convert(v, a, f'{where}[{i}]') for i, (v, a) in
                     enumerate(zip(value, args, strict=True)))
    if origin is dict:
        _, value_type = typing.get_args(hint)
        if not isinstance(value, dict):
            raise _MalformedError(f'{where}: must be an object')
        if value_type is Any:
            return dict(value)
        return {k: _convert(v, value_type, f'{where}.{k}') for k, v in value.items()}
    if hint is bool:
        if not isinstance(value, bool):
            raise _MalformedError(f'{where}: must be true or false')
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _MalformedError(f'{where}: must be an integer')
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _MalformedError(f'{where}: must be a number')
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise _MalformedError(f'{where}: must be a string')
        return value
    raise _MalformedError(f'{where}: unsupported schema type {hint!r}')  # pragma: no cover


def _record(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise _MalformedError(f'{where}: must be an object')
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise _MalformedError(f'{where}: unknown field(s) {", ".join(unknown)}')
    values = {}
    for name, f in fields.items():
        path = f'{where}.{name}' if where else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _MalformedError(f'{path}: missing')
            continue
        values[name] = _convert(data[name], hints[name], path)
    return cls(**values)


def profile_from_dict(data: Any, source: str = 'profile') -> MeasuredProfile:
    """Validate a parsed profile document.

    Raises:
        InputError: for field ``source``, saying what is wrong.
    """
    if not isinstance(data, dict):
        raise InputError(source, 'is not a calibration profile (not a JSON object)')
    if data.get('schema') != SCHEMA:
        raise InputError(source, f'is not a calibration profile (schema {data.get("schema")!r}, '
                         f'expected {SCHEMA!r})')
    try:
        profile = _record(MeasuredProfile, data, '')
    except _MalformedError as exc:
        raise InputError(source, f'is not a valid calibration profile: {exc}') from None
    _check_values(profile, source)
    return profile


def _check_values(p: MeasuredProfile, source: str) -> None:
    """Ranges the types cannot express."""
    def bad(message: str) -> InputError:
        return InputError(source, f'is not a valid calibration profile: {message}')

    if p.device.kind not in DEVICE_KINDS:
        raise bad(f'device.kind {p.device.kind!r} (allowed: {", ".join(DEVICE_KINDS)})')
    if p.device.memory_bytes <= 0:
        raise bad('device.memory_bytes must be positive')
    try:
        datetime.fromisoformat(p.created.replace('Z', '+00:00'))
    except ValueError:
        raise bad(f'created {p.created!r} is not an ISO 8601 time') from None
    try:
        p.model_spec()
    except InputError as exc:
        raise bad(str(exc)) from None
    st = p.step_time
    if not st.reference_peak_flops_per_s > 0:
        raise bad('step_time.reference_peak_flops_per_s must be positive')
    try:
        efficiency_from_profile(p)
    except InputError as exc:
        raise bad(f'step_time.efficiency_points: {exc}') from None
    m = p.memory
    if min(m.cuda_context_bytes, m.workspace_bytes, m.nccl_bytes) < 0 \
            or not 0 <= m.allocator_fraction < 10:
        raise bad('memory overheads must be non-negative (allocator_fraction below 10)')


# ---- files ---------------------------------------------------------------------------------

def profile_dir() -> Path:
    """Where profiles live: ``<data dir>/calibration``."""
    return data_dir() / PROFILE_FOLDER


def _slug(text: str) -> str:
    return re.sub(r'[^a-z0-9.]+', '-', text.lower()).strip('-')[:48] or 'device'


def profile_filename(p: MeasuredProfile) -> str:
    """``<device>_<uuid prefix|cpu>_torch-<version>_<YYYYmmddTHHMMSSZ>.json``."""
    uuid = _slug(p.device.uuid.removeprefix('GPU-'))[:8] if p.device.uuid else p.device.kind
    stamp = re.sub(r'[^0-9TZ]', '', p.created)[:16]
    return f'{_slug(p.device.name)}_{uuid}_torch-{_slug(p.environment.torch_version)}_{stamp}.json'


def save_profile(p: MeasuredProfile, path: Path | None = None) -> Path:
    """Write ``p`` atomically; returns the path (default: a new file in :func:`profile_dir`).

    The document goes to a temporary file in the destination folder, is flushed and
    synced, then renamed over the destination, so readers see the old file or the
    new one, never a part.

    Raises:
        InputError: the folder cannot be created or written.
    """
    path = profile_dir() / profile_filename(p) if path is None else Path(path)
    text = json.dumps(p.to_dict(), indent=2, allow_nan=False) + '\n'
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.', suffix='.tmp', dir=path.parent)
    except OSError as exc:
        raise InputError(str(path), f'cannot write the profile: {exc.strerror}') from exc
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InputError(str(path), f'cannot write the profile: {exc.strerror}') from exc
        raise
    return path


def load_profile(path: Path | str) -> LoadedProfile:
    """Read and validate one profile file.

    Raises:
        InputError: naming the file: missing, unreadable, not JSON, or not a valid profile.
    """
    path = Path(path).expanduser()
    from planner import untrusted

    try:
        text = untrusted.read_text(path, 'profile')
    except (FileNotFoundError, IsADirectoryError):
        raise InputError(str(path), 'no such calibration profile') from None
    data = untrusted.loads_json(text, str(path))
    return LoadedProfile(path=path, profile=profile_from_dict(data, str(path)))


def _matches_name(p: MeasuredProfile, gpu: GpuSpec | str) -> bool:
    if p.device.kind != 'cuda':
        return False
    name = p.device.name.casefold()
    if isinstance(gpu, GpuSpec):
        return p.device.catalog_key == gpu.key or name in {
            n.casefold() for n in (gpu.key, gpu.name, *gpu.nvml_names, *gpu.aliases)}
    return name == gpu.casefold() or (p.device.catalog_key or '').casefold() == gpu.casefold()


def find_profile(gpu: GpuSpec | str, *, uuid: str | None = None,
                 directory: Path | None = None) -> LoadedProfile | None:
    """The newest profile of a GPU, or None.

    A profile measured on the device with ``uuid`` wins (a UUID may also be passed as
    ``gpu``); otherwise any profile of the same GPU model, by catalog key or name.
    Newest means the latest ``created`` time. Malformed files in the folder are
    skipped here (``load_profile`` on the file says what is wrong with it).
    """
    folder = profile_dir() if directory is None else directory
    if isinstance(gpu, str) and gpu.upper().startswith('GPU-') and uuid is None:
        uuid = gpu
    loaded: list[LoadedProfile] = []
    for path in sorted(folder.glob('*.json')) if folder.is_dir() else ():
        try:
            loaded.append(load_profile(path))
        except InputError:
            continue
    loaded.sort(key=lambda lp: lp.profile.created, reverse=True)
    if uuid is not None:
        for lp in loaded:
            if lp.profile.device.uuid and lp.profile.device.uuid.casefold() == uuid.casefold():
                return lp
    for lp in loaded:
        if _matches_name(lp.profile, gpu):
            return lp
    return None


def choose_profile(choice: str | None, gpu: GpuSpec | None) -> LoadedProfile | None:
    """The profile ``--profile PATH|auto|none`` names for a command about ``gpu``.

    ``auto`` (the default) is the newest profile of ``gpu`` in :func:`profile_dir`, or
    None without a GPU; ``none`` is None; anything else is a file, which must have been
    measured on ``gpu`` when one is given.

    Raises:
        InputError: the file is missing or malformed, or of another device.
    """
    choice = (choice or 'auto').strip()
    if choice.lower() == 'none':
        return None
    if choice.lower() == 'auto':
        return None if gpu is None else find_profile(gpu)
    lp = load_profile(choice)
    if gpu is not None and not _matches_name(lp.profile, gpu):
        raise InputError('--profile', f'{lp.path} was measured on {lp.profile.device.name}, '
                         f'not on the {gpu.name}', 'a profile of the same GPU, auto or none')
    return lp


def utc_now() -> str:
    """The current UTC time as ``created`` stores it."""
    return datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


