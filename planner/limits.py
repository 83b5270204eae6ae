"""The allowed range of every numeric input, and the one parser of typed numbers.

The command line, the app, plan files and the Python API (:class:`PlanRequest`,
:class:`TrainingSetup`) all check their numbers here, so a value is accepted or refused
with the same words everywhere. docs/limits.md gives each range and why it is wide
enough for any real run and narrow enough that every figure stays finite and a search
stays bounded.

Typed counts are parsed exactly (Python integers through :class:`decimal.Decimal`,
never a float): ``9007199254740993`` stays that number or is refused by its range.
Suffixes are SI powers of ten (k 10^3, M 10^6, G or B 10^9, T 10^12) and binary
powers of two with ``i`` (Ki 2^10, Mi 2^20, Gi 2^30, Ti 2^40), the same in the CLI
and the app.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, localcontext

from planner.errors import InputError

SUFFIXES: dict[str, int] = {
    '': 1, 'k': 10**3, 'm': 10**6, 'g': 10**9, 'b': 10**9, 't': 10**12,
    'ki': 2**10, 'mi': 2**20, 'gi': 2**30, 'ti': 2**40,
}
# Digits, optional fraction and exponent, optional suffix; ASCII only (no Unicode
# digits: '٤٠٩٦' is refused rather than read). Separators _ and , are dropped first.
_NUMBER_RE = re.compile(r'([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e([+-]?[0-9]{1,5}))?'
                        r'(ki|mi|gi|ti|k|m|g|b|t)?', re.ASCII)
_MAX_TEXT = 64  # characters a typed number may have (the longest allowed value has ~20)

# Reasons a value is refused (InputError.kind): the app words each in the user's language.
NOT_NUMBER, NOT_WHOLE, TOO_SMALL, TOO_LARGE, AMBIGUOUS, EMPTY = (
    'not_number', 'not_whole', 'too_small', 'too_large', 'ambiguous', 'empty')


class LimitError(InputError):
    """A number outside its range or not a number: the field, why, and the range."""

    def __init__(self, key: str, kind: str, text: str) -> None:
        rng = RANGES[key]
        self.key, self.kind, self.text = key, kind, text
        self.low, self.high = rng.low, rng.high
        message = {
            NOT_NUMBER: f'{text!r} is not a number',
            NOT_WHOLE: f'{text!r} is not a whole number',
            TOO_SMALL: f'{text} is {"not above" if rng.low_open else "below"} {rng.low_text}',
            TOO_LARGE: f'{text} is above {rng.high_text}',
            AMBIGUOUS: f'{text!r} has a size suffix but no unit: write e.g. 4Mtok for '
                       f'tokens or 1kseq for sequences',
            EMPTY: 'is empty',
        }[kind]
        super().__init__(rng.flag, message, rng.allowed)


@dataclass(frozen=True)
class Range:
    """One input's allowed values.

    Attributes:
        flag: the CLI flag (the field name errors carry).
        low: the smallest value allowed.
        high: the largest value allowed.
        integer: a count (whole numbers only) rather than a real number.
        low_open: ``low`` itself is refused (a value must be above it).
        unit: what the number counts, for the message.
    """

    flag: str
    low: float
    high: float
    integer: bool = True
    low_open: bool = False
    unit: str = ''

    @property
    def low_text(self) -> str:
        """The low bound as the messages write it."""
        return _plain(self.low)

    @property
    def high_text(self) -> str:
        """The high bound as the messages write it."""
        return _plain(self.high)

    @property
    def allowed(self) -> str:
        """The range in words (the ``allowed`` part of an error)."""
        kind = 'a whole number' if self.integer else 'a number'
        low = f'above {self.low_text}' if self.low_open else f'from {self.low_text}'
        unit = f' {self.unit}' if self.unit else ''
        return f'{kind} {low} to {self.high_text}{unit}'

    def contains(self, value: float) -> bool:
        """Whether ``value`` is allowed (the caller checked it is a finite number)."""
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high


def _plain(value: float) -> str:
    """10**12 -> '10^12' for large powers of ten, else digits with separators."""
    if value == int(value):
        v = int(value)
        e = len(str(v)) - 1
        return f'10^{e}' if e >= 9 and v == 10**e else f'{v:,}'
    return f'{value:g}'


# The largest cluster a plan may use. The largest published training clusters hold
# about 100,000-200,000 GPUs (xAI's Colossus, announced 2024); 2^20 leaves a margin of
# five while the search's arrays stay a few megabytes per axis.
MAX_GPUS = 2**20
# ---- the ranges (docs/limits.md says why each bound) -------------------------------
RANGES: dict[str, Range] = {
    # Longest published context: Llama 4 Scout, 10M tokens (Meta, April 2025).
    'seq_len': Range('--seq-len', 1, 2**24, unit='tokens'),
    'micro_batch': Range('--micro-batch', 1, 2**20, unit='sequences'),
    'grad_accum': Range('--grad-accum', 1, 2**20, unit='micro-batches'),
    'nodes': Range('--nodes', 1, 2**17),
    # GB200 NVL72 puts 72 GPUs in one NVLink domain; 1,024 covers NVL576 and beyond.
    'gpus_per_node': Range('--gpus-per-node', 1, 1024),
    'gpus': Range('--gpus', 1, MAX_GPUS),
    'tp': Range('--tp', 1, 1024), 'pp': Range('--pp', 1, 4096),
    'cp': Range('--cp', 1, 2**16), 'ep': Range('--ep', 1, 2**16),
    # 0: the TP size (Megatron's default --expert-tensor-parallel-size)
    'etp': Range('--etp', 0, 1024), 'dp_replicate': Range('--dp-replicate', 1, MAX_GPUS),
    'vpp': Range('--vpp', 1, 4096), 'dp': Range('--dp', 1, MAX_GPUS),
    # Largest published global batches are ~6e7 tokens (DeepSeek-V3: 15,360 x 4K).
    'global_batch': Range('--global-batch', 1, 10**10, unit='sequences'),
    'global_batch_tokens': Range('--global-batch-tokens', 1, 10**12, unit='tokens'),
    'base_batch': Range('--base-batch', 1, 10**12),
    # Largest published pretraining budgets: 36T tokens (Qwen3, 2025).
    'tokens': Range('--tokens', 1, 10**16, integer=False, unit='tokens'),
    'samples': Range('--samples', 1, 10**14, unit='sequences'),
    'epochs': Range('--epochs', 0, 10**6, integer=False, low_open=True),
    'margin': Range('--margin', 0, 0.9, integer=False),
    'margin_percent': Range('--margin', 0, 90, integer=False, unit='%'),  # the app's unit
    'price': Range('--price', 0, 10**4, integer=False, unit='USD per GPU-hour'),
    'top_k': Range('--top', 1, 10**7),
    'base_lr': Range('--base-lr', 0, 10, integer=False, low_open=True),
    'base_warmup_steps': Range('--base-warmup-steps', 1, 10**9, unit='steps'),
    'b_noise': Range('--b-noise', 0, 10**14, integer=False, low_open=True, unit='tokens'),
    'lora_rank': Range('--lora-rank', 1, 2**16),
    'max_tp': Range('--max-tp', 1, 1024), 'max_pp': Range('--max-pp', 1, 4096),
    'max_cp': Range('--max-cp', 1, 2**16), 'max_vpp': Range('--max-vpp', 1, 4096),
    'max_micro_batch': Range('--max-micro-batch', 1, 2**20),
}


def check(key: str, value: object) -> None:
    """Raise :class:`LimitError` unless ``value`` is a number in ``key``'s range.

    Booleans are refused; an integer field needs a whole number (an ``int``, a numpy
    integer, or a whole float such as 4096.0 read from JSON), a real field any finite
    number.
    """
    rng = RANGES[key]
    if isinstance(value, bool) or not (isinstance(value, (int, float)) or _np_number(value)):
        raise LimitError(key, NOT_NUMBER, repr(value))
    if not isinstance(value, int) and not _np_number(value, integer=True):
        number = float(value)  # type: ignore[arg-type]
        if not math.isfinite(number):
            raise LimitError(key, NOT_NUMBER, repr(value))
        if rng.integer and number != int(number):
            raise LimitError(key, NOT_WHOLE, repr(value))
    if not rng.contains(value):  # type: ignore[arg-type]
        raise LimitError(key, TOO_SMALL if value < rng.low else TOO_LARGE,  # type: ignore[operator]
                         _plain_value(value))


def _np_number(value: object, integer: bool = False) -> bool:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, np.integer if integer else (np.integer, np.floating))


def _plain_value(value) -> str:
    if isinstance(value, float):
        return f'{value:g}'
    v = int(value)
    if abs(v) < 10**15:
        return f'{v:,}'
    # no float() or str() of a huge int: both fail past 1e308 / 4,300 digits
    return f'{"-" if v < 0 else ""}~10^{round(abs(v).bit_length() * math.log10(2))}'


def parse(key: str, text: str) -> int | float:
    """``text`` as ``key``'s value: exact for counts, checked against the range.

    Accepts ``4096``, ``4_096``, ``4,096``, ``2e12``, ``300B``, ``4k`` (4,000),
    ``4Ki`` (4,096); leading and trailing spaces are ignored.

    Raises:
        LimitError: empty, not a number, not whole (for a count) or out of range.
    """
    cleaned = text.strip().replace('_', '').replace(',', '').lower()
    if not cleaned:
        raise LimitError(key, EMPTY, text)
    if len(cleaned) > _MAX_TEXT:
        raise LimitError(key, NOT_NUMBER, text[:20] + '...')
    match = _NUMBER_RE.fullmatch(cleaned)
    if match is None:
        if cleaned.startswith('-') and _NUMBER_RE.fullmatch(cleaned[1:]):
            raise LimitError(key, TOO_SMALL, text.strip())
        raise LimitError(key, NOT_NUMBER, text.strip())
    mantissa, exponent, suffix = match[1], match[2], match[3] or ''
    try:
        with localcontext() as ctx:  # exact: 64 characters never need more digits
            ctx.prec, ctx.Emax, ctx.Emin = 200, 10**6, -10**6
            value = Decimal(mantissa) * SUFFIXES[suffix]
            if exponent:
                value = value.scaleb(int(exponent))
    except ArithmeticError:  # pragma: no cover (bounded digits and exponent)
        raise LimitError(key, NOT_NUMBER, text.strip()) from None
    return _from_decimal(key, value, text.strip())


def _from_decimal(key: str, value: Decimal, text: str) -> int | float:
    rng = RANGES[key]
    high = Decimal(repr(rng.high)) if isinstance(rng.high, float) else Decimal(rng.high)
    if value > high:
        raise LimitError(key, TOO_LARGE, text)
    if rng.integer:
        if value != value.to_integral_value():
            raise LimitError(key, NOT_WHOLE, text)
        number: int | float = int(value)
    else:
        number = float(value)
    if not rng.contains(number):
        raise LimitError(key, TOO_SMALL, text)
    return number


def parse_optional(key: str, text: str) -> int | float | None:
    """As :func:`parse`, but blank gives None (an optional field left empty)."""
    return None if not text.strip() else parse(key, text)


# ---- a global batch with its unit ------------------------------------------------------

_UNIT_WORDS = {'tok': 'tokens', 'tokens': 'tokens', 'token': 'tokens', 't': 'tokens',
               'seq': 'sequences', 'seqs': 'sequences', 'sequences': 'sequences',
               'samples': 'sequences', 's': 'sequences'}
_BATCH_RE = re.compile(r'(.*?[0-9.])\s*(ki|mi|gi|ti|k|m|g|b|t)?\s*'
                       r'(tok|tokens|token|seq|seqs|sequences|samples)?', re.ASCII)


def parse_global_batch(text: str) -> tuple[int, str]:
    """A global batch with an optional unit: ``(value, 'sequences' | 'tokens')``.

    ``1024`` and ``1024seq`` are sequences, ``4Mtok`` 4,000,000 tokens, ``4Mitok``
    4,194,304 tokens, ``1kseq`` 1,000 sequences. A size suffix without a unit
    (``4M``) is refused: 4M sequences is rarely what was meant.

    Raises:
        LimitError: empty, ambiguous, not a whole number, or out of range.
    """
    cleaned = text.strip().replace('_', '').replace(',', '').lower()
    match = _BATCH_RE.fullmatch(cleaned) if cleaned else None
    if match is None or not cleaned.isascii():
        return int(parse('global_batch', text)), 'sequences'  # raises with the right reason
    number, suffix, unit = match[1], match[2] or '', match[3]
    if unit is None:
        if suffix:
            raise LimitError('global_batch', AMBIGUOUS, text.strip())
        return int(parse('global_batch', text)), 'sequences'
    kind = _UNIT_WORDS[unit]
    key = 'global_batch_tokens' if kind == 'tokens' else 'global_batch'
    return int(parse(key, number + suffix)), kind


# ---- figures that leave the core ----------------------------------------------------------

class FigureError(InputError):
    """A computed figure is not finite and non-negative: never shown, saved or plotted."""

    def __init__(self, what: str, value: float) -> None:
        super().__init__('result', f'{what} came out as {value!r}, not a finite '
                         'non-negative number; the inputs are beyond what the model covers',
                         'inputs inside the ranges of docs/limits.md')
        self.what, self.value = what, value


def check_figure(what: str, value: float) -> float:
    """``value`` if it is finite and >= 0, else :class:`FigureError`."""
    v = float(value)
    if not (math.isfinite(v) and v >= 0):
        raise FigureError(what, v)
    return v


def check_figures(figures: dict[str, object], prefix: str = '') -> None:
    """Every number in a (nested) dict of figures is finite and >= 0; None is allowed."""
    for name, value in figures.items():
        where = f'{prefix}{name}'
        if isinstance(value, dict):
            check_figures(value, where + '.')
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        elif isinstance(value, (int, float)) or _np_number(value):
            check_figure(where, value)  # type: ignore[arg-type]


def key_of(flag: str) -> str:
    """The :data:`RANGES` key of a CLI flag: ``--seq-len`` -> ``seq_len``."""
    key = flag.lstrip('-').replace('-', '_')
    return {'top': 'top_k'}.get(key, key)


# ---- inputs that are allowed but unlikely ------------------------------------------------

# Above these an input is allowed but probably a typo; each is ~10x the largest
# published value (sources at RANGES).
PLAUSIBLE_EPOCHS = 100
PLAUSIBLE_TOKENS = 10**14
PLAUSIBLE_BATCH_TOKENS = 10**9
PLAUSIBLE_GPUS = 250_000


@dataclass(frozen=True)
class InputWarning:
    """An allowed input that is probably not what was meant.

    Attributes:
        key: the :data:`RANGES` key of the input.
        code: ``beyond_context``, ``many_epochs``, ``huge_budget``, ``huge_batch`` or
            ``huge_cluster`` (the app words each in the user's language).
        values: the numbers the text quotes.
        text: the English sentence (the CLI prints it).
    """

    key: str
    code: str
    values: dict[str, float]
    text: str


def input_warnings(*, seq_len: int | None = None, max_positions: int | None = None,
                   epochs: float | None = None, tokens: float | None = None,
                   batch_tokens: float | None = None, gpus: int | None = None
                   ) -> list[InputWarning]:
    """Warnings for allowed inputs that are unlikely (the CLI and the app show them)."""
    out: list[InputWarning] = []
    if seq_len is not None and max_positions and seq_len > max_positions:
        out.append(InputWarning('seq_len', 'beyond_context',
                                {'seq_len': seq_len, 'context': max_positions},
                                f'sequence {seq_len:,} is beyond the model\'s context of '
                                f'{max_positions:,} tokens (max_position_embeddings): it '
                                'needs a long-context recipe (RoPE scaling) to train'))
    if epochs is not None and epochs > PLAUSIBLE_EPOCHS:
        out.append(InputWarning('epochs', 'many_epochs', {'epochs': epochs},
                                f'{epochs:,g} epochs is far more than a language model is '
                                'trained for (1-4 for pretraining, a few for fine-tuning)'))
    if tokens is not None and tokens > PLAUSIBLE_TOKENS:
        out.append(InputWarning('tokens', 'huge_budget', {'tokens': tokens},
                                f'{tokens:.3g} training tokens is over 100x the largest '
                                'published budgets (~36T)'))
    if batch_tokens is not None and batch_tokens > PLAUSIBLE_BATCH_TOKENS:
        out.append(InputWarning('global_batch', 'huge_batch', {'tokens': batch_tokens},
                                f'a global batch of {batch_tokens:.3g} tokens is over 10x the '
                                'largest published ones (~60M tokens)'))
    if gpus is not None and gpus > PLAUSIBLE_GPUS:
        out.append(InputWarning('nodes', 'huge_cluster', {'gpus': gpus},
                                f'{gpus:,} GPUs is more than any cluster built so far '
                                '(~200,000)'))
    return out
