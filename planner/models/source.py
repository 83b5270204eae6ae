"""What ``--model`` names: a config.json, a bare size, or a preset."""

from __future__ import annotations

from pathlib import Path

from planner.errors import InputError
from planner.models.hf_config import FILE, spec_from_hf_config
from planner.models.presets import MODEL_ALLOWED, find_preset
from planner.models.size_rule import parse_size, spec_from_size
from planner.models.spec import ModelSpec


def resolve_model(text: str) -> ModelSpec:
    """The model ``text`` names, tried in this order.

    1. An existing file (read as a Hugging Face ``config.json``) or a folder
       holding ``config.json``.
    2. A size such as ``7B`` or ``350M`` (``planner.models.size_rule``).
    3. A preset key, alias, name or Hugging Face id (``planner.models.presets``).

    Raises:
        InputError: on ``--model``, saying what was wrong.
    """
    if not isinstance(text, str) or not text.strip():
        raise InputError('--model', 'is empty', MODEL_ALLOWED)
    text = text.strip()
    path = Path(text).expanduser()
    if path.is_dir() and not (path / FILE).is_file():
        raise InputError('--model', f'folder {text!r} has no {FILE}', MODEL_ALLOWED)
    if path.exists():
        try:
            return spec_from_hf_config(path)
        except InputError as exc:  # one field for the user to fix: --model
            raise InputError('--model', f'{text}: {exc}') from exc
    if text.lower().endswith('.json'):
        raise InputError('--model', f'no such file {text!r}', MODEL_ALLOWED)
    if parse_size(text) is not None:
        return spec_from_size(text)
    return find_preset(text)
