"""Exporters: a saved plan as the exact command line or config file of a launcher.

``EXPORTERS`` maps each ``--format`` to its :class:`Exporter`. :func:`export_plan`
checks the plan's batch arithmetic (``planner.plans.batch``) before any exporter
runs, and every exporter quotes what it writes (``planner.export.shell``). A plan a
launcher cannot run as planned is refused with an :class:`~planner.errors.InputError`
naming the format; what it can run only approximately is written with a comment (and a
note) saying what differs. A plan exports only to the launchers of the stack it was
estimated for (``Stack.launchers``, planner/stacks/catalog.py): another stack's launcher
would run other memory and step time than the plan's. docs/export.md documents each
format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.errors import InputError
from planner.export import (
    accelerate,
    deepspeed,
    hf,
    lightning,
    llamafactory,
    megatron,
    slurm,
    torchrun,
    torchtitan,
)
from planner.export.base import Export, Exporter, ExportOptions, refuse
from planner.plans.batch import BatchNumbers, check_candidate
from planner.stacks import STACKS, get_stack

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile

__all__ = ['EXPORTERS', 'BatchNumbers', 'Export', 'ExportOptions', 'Exporter', 'check_stack_format',
           'export_plan', 'stack_formats']

EXPORTERS: dict[str, Exporter] = {e.name: e for e in (
    Exporter('torchrun', 'torchrun launch script (single or multi-node, static or c10d)',
             torchrun.render),
    Exporter('accelerate', 'accelerate launch script with its config YAML (DDP, FSDP, '
             'DeepSpeed)', accelerate.render),
    Exporter('deepspeed', 'DeepSpeed config JSON', deepspeed.render),
    Exporter('hf', 'Hugging Face Trainer arguments under torchrun', hf.render),
    Exporter('megatron', 'Megatron-LM pretrain_gpt.py arguments under torchrun',
             megatron.render),
    Exporter('lightning', 'PyTorch Lightning Trainer settings (LightningCLI YAML)',
             lightning.render),
    Exporter('torchtitan', 'torchtitan job config (TOML)', torchtitan.render),
    Exporter('llamafactory', 'LLaMA-Factory training YAML', llamafactory.render),
    Exporter('slurm', 'Slurm batch script: srun + torchrun with c10d rendezvous', slurm.render),
)}


def stack_formats(plan: PlanFile) -> tuple[str, ...]:
    """The formats that run the plan: its stack's launchers (planner/stacks/catalog.py).

    A plan file written before stacks existed (schema 2 or older) migrates to the stack
    it was planned with, ``hf`` or ``megatron`` (planner/planfile/migrate.py), and keeps
    that stack's formats.
    """
    return get_stack(plan.candidate.framework, 'candidate.framework').launchers


def check_stack_format(plan: PlanFile, fmt: str) -> None:
    """Refuse a format outside the plan's stack: its memory and step time are another's.

    Raises:
        InputError: ``fmt`` is not one of the plan's stack's launchers.
    """
    stack = get_stack(plan.candidate.framework, 'candidate.framework')
    formats = stack.launchers
    if fmt not in formats:
        raise refuse(fmt, f'the plan was estimated for the {stack.label} stack '
                     f'({stack.key}), which runs {", ".join(formats)}: this launcher would '
                     'run other memory and step time than planned',
                     f'export as {" or ".join(formats)}, or re-plan with '
                     f'--framework {_first_stack(fmt)}')


def _first_stack(fmt: str) -> str:
    """The first stack whose launchers include ``fmt``."""
    return next(s.key for s in STACKS.values() if fmt in s.launchers)


def export_plan(plan: PlanFile, fmt: str, options: ExportOptions | None = None) -> Export:
    """The plan in launcher format ``fmt``.

    Raises:
        InputError: an unknown format, numbers that do not add up, or a plan the
            launcher cannot run as planned.
    """
    exporter = EXPORTERS.get(fmt)
    if exporter is None:
        raise InputError('--format', f'unknown format {fmt!r}', ', '.join(EXPORTERS))
    check_stack_format(plan, fmt)
    numbers = check_candidate(plan.candidate)
    return exporter.render(plan, numbers, options or ExportOptions())
