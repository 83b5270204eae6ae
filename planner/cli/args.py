"""The argument types and option groups the ``batchfit`` commands share.

Every command module (``plan``, ``export``, ``calibrate``, ``gpus``, ``paths``) imports
from here and the dispatcher (:mod:`planner.cli.main`) imports the command modules, so
the command line has no import cycle. The number readers themselves are the core's
(:mod:`planner.units`), shared with the app and plan files.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from planner import limits
from planner.defaults import DEFAULT_ATTENTION, DEFAULT_MARGIN_FRACTION, DEFAULT_OPTIMIZER
from planner.errors import InputError
from planner.memory.training import (
    ATTENTION_KINDS,
    LOOPS,
    LORA_TARGETS,
    LOSSES,
    LoraSpec,
)

if TYPE_CHECKING:
    from planner.plans.guidance import GuidanceInputs

EXIT_BAD_INPUT = 2


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f'batchfit: error: {message}\n')


def limited(flag: str) -> Callable[[str], int | float]:
    """An argparse type checked against the flag's range in :mod:`planner.limits`
    (argparse names the flag when it rejects)."""
    key = limits.key_of(flag)
    if key not in limits.RANGES:
        return _positive_real(flag)

    def parse(text: str) -> int | float:
        try:
            return limits.parse(key, text)
        except limits.LimitError as exc:
            raise argparse.ArgumentTypeError(_reason(exc)) from None
    return parse


def _positive_real(flag: str) -> Callable[[str], float]:
    """A finite number > 0, for flags without a range of their own (calibration's
    --timeout, --memory-limit-gib)."""
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f'{text!r} is not a number') from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f'{text!r} must be a positive finite number')
        return value
    return parse


def _reason(exc: InputError) -> str:
    """An error without its field (argparse names the flag itself)."""
    text = str(exc)
    prefix = f'{exc.field}: '
    return text[len(prefix):] if text.startswith(prefix) else text


def positive_int(flag: str) -> Callable[[str], int]:
    """An argparse type for a whole number >= 1, in the flag's range when it has one
    (:mod:`planner.limits`), else below 2^31."""
    if limits.key_of(flag) in limits.RANGES:
        return limited(flag)  # type: ignore[return-value]

    def parse(text: str) -> int:
        try:
            value = int(text.replace('_', '').strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f'{text!r} is not a whole number (allowed: an integer >= 1)') from None
        if not 1 <= value < 2**31:
            raise argparse.ArgumentTypeError(f'{text.strip()} is out of range '
                                             '(allowed: 1 to 2,147,483,647)')
        return value
    return parse


def fraction(flag: str) -> Callable[[str], float]:
    """An argparse type for a fraction such as ``--margin`` (its range in planner.limits)."""
    return limited(flag)


def count(flag: str, integer: bool = True):
    """An argparse type for a count in the flag's range (:mod:`planner.limits`):
    ``4096``, ``4_194_304``, ``2e12``, ``300B``, ``4M``, ``4Mi``.

    Suffixes k, M, B/G, T are powers of ten; Ki, Mi, Gi, Ti powers of two. Counts are
    parsed exactly (no float round trip).
    """
    return limited(flag)


def positive_number(flag: str):
    """An argparse type for a number in the flag's range (:mod:`planner.limits`)."""
    return limited(flag)


class GlobalBatchAction(argparse.Action):
    """``--global-batch 1024`` (sequences), ``1kseq``, ``4Mtok`` (tokens): the unit
    decides which of ``global_batch`` / ``global_batch_tokens`` is set; a size suffix
    without a unit (``4M``) is refused as ambiguous."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from planner.limits import LimitError, parse_global_batch

        try:
            value, unit = parse_global_batch(str(values))
        except LimitError as exc:
            parser.error(f'argument {option_string}: {_reason(exc)}')
        setattr(namespace, 'global_batch_tokens' if unit == 'tokens' else 'global_batch',
                value)


def int_list(flag: str, allowed: tuple[int, ...] | None = None):
    """An argparse type for a comma-separated list of whole numbers (each in the flag's
    range of :mod:`planner.limits`, or from ``allowed``)."""
    from planner.limits import RANGES, LimitError, key_of, parse

    key = key_of(flag)

    def one(part: str) -> int:
        if key in RANGES and allowed is None:
            return int(parse(key, part))
        if not (part.strip().isascii() and part.strip().isdigit()):
            raise argparse.ArgumentTypeError(
                f'{part.strip()!r} is not a whole number in {flag}')
        return int(part)

    def parse_list(text: str) -> tuple[int, ...]:
        if len(text) > 10_000:
            raise argparse.ArgumentTypeError('is too long (allowed: up to 10,000 characters)')
        try:
            values = tuple(one(part) for part in text.split(',') if part.strip())
        except LimitError as exc:
            raise argparse.ArgumentTypeError(_reason(exc)) from None
        if not values:
            raise argparse.ArgumentTypeError('is empty')
        bad = [v for v in values if (allowed is not None and v not in allowed)
               or (allowed is None and v < 1)]
        if bad:
            words = ', '.join(map(str, allowed)) if allowed else 'integers >= 1'
            raise argparse.ArgumentTypeError(f'{bad} not allowed (allowed: {words})')
        return values
    return parse_list


def word_list(flag: str, allowed: tuple[str, ...]):
    """An argparse type for a comma-separated list of words from ``allowed``."""
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(part.strip() for part in text.split(',') if part.strip())
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(
                f'{", ".join(bad) or "nothing"} not allowed (allowed: {", ".join(allowed)})')
        return values
    return parse


def add_model_args(p: argparse.ArgumentParser) -> None:
    """--model and --seq-len, shared by estimate and plan."""
    p.add_argument('--model', required=True,
                   help='a preset (batchfit models), a size such as 7B, or a config.json path')
    p.add_argument('--seq-len', type=positive_int('--seq-len'), required=True,
                   help='tokens per sequence')


def add_memory_option_args(p: argparse.ArgumentParser) -> None:
    """Precision, optimizer, attention and fine-tuning options shared by commands."""
    from planner.memory.recipes import OPTIMIZERS, RECIPES
    from planner.stacks import STACK_KEYS
    p.add_argument('--precision', choices=tuple(RECIPES), default='',
                   help="precision recipe (default: the stack's own, e.g. amp-bf16 for hf "
                        'DDP, fsdp-bf16 for FSDP2, bf16-mixed for megatron); fp8 is '
                        "Transformer Engine's for megatron and torchao float8 linears "
                        '(fsdp-fp8) for torchtitan')
    p.add_argument('--optimizer', choices=tuple(OPTIMIZERS), default=DEFAULT_OPTIMIZER)
    p.add_argument('--attention', choices=ATTENTION_KINDS, default=DEFAULT_ATTENTION,
                   help='flash (fused SDPA kernels, no s^2 term) or eager')
    p.add_argument('--framework', choices=STACK_KEYS, default='',
                   help='the stack that runs the job (its layouts, precision, recompute, '
                        'kernels, loss and launchers): ' + ', '.join(STACK_KEYS)
                        + '; default: plan searches every stack, estimate assumes the '
                        'first that runs the layout')
    p.add_argument('--loss', choices=LOSSES[1:], default='',
                   help="loss implementation (default: the stack's): hf (fp32 upcast of "
                        "the logits; hf, hf-deepspeed, torchtitan), chunked (Liger's fused "
                        'linear cross-entropy; hf, hf-deepspeed, on a model type Liger '
                        "patches), vocab-parallel (Megatron's, also spelled megatron; "
                        'megatron, deepspeed). A stack that cannot run it refuses it; '
                        'without --framework only the stacks that run it are searched')
    p.add_argument('--loop', choices=LOOPS, default=LOOPS[0],
                   help='training loop: keep-outputs (accelerate/plain loops hold the '
                        'model output, its logits, through backward and the step; the '
                        'default, more memory) or trainer (HF Trainer/TRL free it)')
    p.add_argument('--no-foreach', dest='foreach', action='store_false',
                   help="torch.optim's for-loop step (the CPU default) instead of foreach")
    p.add_argument('--lora-rank', type=positive_int('--lora-rank'),
                   help='train LoRA adapters of this rank on a frozen base')
    p.add_argument('--lora-targets', default='q,k,v,o',
                   help='comma-separated projections: ' + ','.join(LORA_TARGETS))
    p.add_argument('--qlora', action='store_true', help='4-bit NF4 frozen base (QLoRA)')
    p.add_argument('--margin', type=fraction('--margin'), default=DEFAULT_MARGIN_FRACTION,
                   help=f'fraction of GPU memory kept free (default {DEFAULT_MARGIN_FRACTION})')


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    """``--profile PATH|auto|none`` for estimate and plan."""
    p.add_argument('--profile', default='auto',
                   help='calibration profile: auto (default: the newest of --gpu in the data '
                        'folder), none, or a file from batchfit calibrate')


def lora_from_args(args: argparse.Namespace) -> LoraSpec | None:
    """The LoRA settings, or None for full fine-tuning."""
    if args.lora_rank is None:
        if args.qlora:
            raise InputError('--qlora', 'needs --lora-rank')
        return None
    targets = tuple(t.strip() for t in args.lora_targets.split(',') if t.strip())
    return LoraSpec(rank=args.lora_rank, targets=targets, base_bits=4 if args.qlora else 16)


def guidance_inputs_from_args(args: argparse.Namespace, seq_len: int) -> GuidanceInputs:
    """What ``batchfit plan`` gives the guidance (``--base-batch`` converted to sequences).

    ``--base-batch`` is in the unit of the target batch: tokens with
    ``--global-batch-tokens``.
    """
    from planner.plans.guidance import GuidanceInputs

    base_batch = getattr(args, 'base_batch', None)
    if base_batch is not None and getattr(args, 'global_batch_tokens', None) is not None:
        base_batch = base_batch / seq_len  # tokens -> sequences
    return GuidanceInputs(base_lr=getattr(args, 'base_lr', None),
                          base_batch_samples=None if base_batch is None else float(base_batch),
                          base_warmup_steps=getattr(args, 'base_warmup_steps', None),
                          b_noise_tokens=getattr(args, 'b_noise', None))
