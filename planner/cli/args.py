"""The argument types and option groups the ``batchfit`` commands share.

Every command module (``plan``, ``export``, ``calibrate``, ``gpus``, ``paths``) imports
from here and the dispatcher (:mod:`planner.cli.main`) imports the command modules, so
the command line has no import cycle. The number readers themselves are the core's
(:mod:`planner.units`), shared with the app and plan files.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from planner.defaults import DEFAULT_FRAMEWORK, DEFAULT_MARGIN_FRACTION, DEFAULT_PRECISION
from planner.errors import InputError
from planner.memory.training import (
    ATTENTION_KINDS,
    FRAMEWORKS,
    LOOPS,
    LORA_TARGETS,
    LOSSES,
    LoraSpec,
)
from planner.units import parse_count, parse_positive

if TYPE_CHECKING:
    from planner.plans.guidance import GuidanceInputs

EXIT_BAD_INPUT = 2


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f'batchfit: error: {message}\n')


def positive_int(flag: str) -> Callable[[str], int]:
    """An argparse type for an integer >= 1 (argparse names the flag when it rejects)."""
    def parse(text: str) -> int:
        try:
            value = int(text.replace('_', ''))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f'{text!r} is not a whole number (allowed: an integer >= 1)') from None
        if value < 1:
            raise argparse.ArgumentTypeError(f'{value} is too small (allowed: >= 1)')
        return value
    return parse


def fraction(flag: str) -> Callable[[str], float]:
    """An argparse type for a number in [0, 1)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f'{text!r} is not a number (allowed: 0 <= x < 1)') from None
        if not 0.0 <= value < 1.0:
            raise argparse.ArgumentTypeError(f'{value} is out of range (allowed: 0 <= x < 1)')
        return value
    return parse


def count(flag: str, integer: bool = True) -> Callable[[str], float]:
    """An argparse type for a positive count (:func:`planner.units.parse_count`)."""
    def parse(text: str) -> float:
        try:
            return parse_count(text, integer)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def positive_number(flag: str) -> Callable[[str], float]:
    """An argparse type for a number > 0 (or >= 0 for ``--price``)."""
    def parse(text: str) -> float:
        try:
            return parse_positive(text, allow_zero=flag == '--price')
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def int_list(flag: str, allowed: tuple[int, ...] | None = None
             ) -> Callable[[str], tuple[int, ...]]:
    """An argparse type for a comma-separated list of positive integers."""
    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(part) for part in text.split(',') if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f'{text!r} is not a comma-separated list of integers') from None
        if not values:
            raise argparse.ArgumentTypeError('is empty')
        bad = [v for v in values if (allowed is not None and v not in allowed)
               or (allowed is None and v < 1)]
        if bad:
            words = ', '.join(map(str, allowed)) if allowed else 'integers >= 1'
            raise argparse.ArgumentTypeError(f'{bad} not allowed (allowed: {words})')
        return values
    return parse


def word_list(flag: str, allowed: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
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
    p.add_argument('--precision', choices=tuple(RECIPES), default=DEFAULT_PRECISION,
                   help=f'precision recipe (default {DEFAULT_PRECISION}: torch.autocast over '
                        'fp32)')
    p.add_argument('--optimizer', choices=tuple(OPTIMIZERS), default='adamw')
    p.add_argument('--attention', choices=ATTENTION_KINDS, default='flash',
                   help='flash (fused SDPA kernels, no s^2 term) or eager')
    p.add_argument('--framework', choices=FRAMEWORKS, default=DEFAULT_FRAMEWORK,
                   help='whose kernels decide the saved tensors: hf (PyTorch eager, '
                        'transformers) or megatron (fused, Korthikanti accounting)')
    p.add_argument('--loss', choices=LOSSES[1:], default='',
                   help="loss implementation (default: the framework's): hf (fp32 upcast of "
                        "the logits), chunked (fused/chunked CE such as Liger's), "
                        "vocab-parallel (Megatron's; also spelled megatron)")
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
