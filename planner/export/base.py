"""What every exporter shares: options, the result type, refusals and common mappings."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.errors import InputError
from planner.export.shell import check_text

if TYPE_CHECKING:
    from planner.export.batch import BatchNumbers
    from planner.plan_file import PlanFile

RENDEZVOUS: tuple[str, ...] = ('static', 'c10d')
SHARDING: tuple[str, ...] = ('deepspeed', 'fsdp')
PAYLOADS: tuple[str, ...] = ('torchrun', 'hf', 'megatron')
_TIME = re.compile(r'(\d+-)?\d{1,2}:\d{2}:\d{2}')
_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]{0,63}')


@dataclass(frozen=True)
class ExportOptions:
    """How to launch, beyond what the plan says.

    Attributes:
        script: the training script (None: the format's usual one, e.g. train.py or
            Megatron's pretrain_gpt.py).
        script_args: extra arguments for the script, passed verbatim (quoted).
        master_addr: the first node's address; None writes ``$MASTER_ADDR``, read on
            each node at run time.
        master_port: the rendezvous port.
        rdzv: multi-node torchrun rendezvous, ``static`` (node ranks) or ``c10d``.
        rdzv_id: the c10d job id shared by all nodes.
        sharding: ZeRO stages > 0 with ``deepspeed`` (default) or ``fsdp``.
        payload: what the Slurm script runs under torchrun: ``torchrun`` (the script
            and its arguments), ``hf`` or ``megatron`` (their arguments too); None picks
            megatron for a Megatron plan, else hf when the layout is pure data
            parallel, else torchrun.
        job_name: Slurm job name (default from the model).
        time_limit: Slurm ``--time`` (``HH:MM:SS`` or ``D-HH:MM:SS``).
        partition: Slurm partition.
        output_dir: where the HF Trainer / LLaMA-Factory write checkpoints.
    """

    script: str | None = None
    script_args: tuple[str, ...] = ()
    master_addr: str | None = None
    master_port: int = 29500
    rdzv: str = 'static'
    rdzv_id: str = 'batchfit'
    sharding: str = 'deepspeed'
    payload: str | None = None
    job_name: str | None = None
    time_limit: str | None = None
    partition: str | None = None
    output_dir: str = 'output'

    def __post_init__(self) -> None:
        if self.script is not None:
            check_text(self.script, '--script')
            if not self.script.strip() or self.script.startswith('-'):
                raise InputError('--script', f'{self.script!r} would be read as a launcher '
                                 'option', 'a file path (write ./-x.py for a name starting '
                                 'with -)')
        for arg in self.script_args:
            check_text(arg, 'script argument')
        for name in ('master_addr', 'output_dir'):
            value = getattr(self, name)
            if value is not None and (not check_text(value, _flag(name)).strip()
                                      or value.startswith('-')):
                raise InputError(_flag(name), f'{value!r} is not usable here')
        if not isinstance(self.master_port, int) or not 1 <= self.master_port <= 65535:
            raise InputError('--master-port', f'{self.master_port!r} is not a port',
                             '1 to 65535')
        _choice('--rdzv', self.rdzv, RENDEZVOUS)
        _choice('--sharding', self.sharding, SHARDING)
        if self.payload is not None:
            _choice('--payload', self.payload, PAYLOADS)
        for name in ('rdzv_id', 'job_name', 'partition'):
            value = getattr(self, name)
            if value is not None and not _NAME.fullmatch(value):
                raise InputError(_flag(name), f'{value!r} is not a plain name',
                                 'letters, digits, ".", "_" and "-", up to 64')
        if self.time_limit is not None and not _TIME.fullmatch(self.time_limit):
            raise InputError('--time', f'{self.time_limit!r} is not a Slurm time',
                             'HH:MM:SS or D-HH:MM:SS')

    def script_or(self, default: str) -> str:
        """The script, or the format's usual one."""
        return self.script if self.script is not None else default


@dataclass(frozen=True)
class Export:
    """One exported text.

    Attributes:
        text: the command script or config file, ending in a newline.
        filename: a sensible file name for it.
        notes: what the launcher cannot express, or what the user must still do (also
            written as comments in the text where its format has comments).
    """

    text: str
    filename: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exporter:
    """One launcher format.

    Attributes:
        name: the ``--format`` value.
        summary: one line for ``--help``.
        render: builds the text from a checked plan and its batch numbers.
    """

    name: str
    summary: str
    render: Callable[[PlanFile, BatchNumbers, ExportOptions], Export]


def refuse(fmt: str, message: str, allowed: str | None = None) -> InputError:
    """The error for a plan this launcher cannot run as planned."""
    return InputError(f'--format {fmt}', message, allowed)


def require_data_parallel(plan: PlanFile, fmt: str) -> None:
    """Refuse TP/PP/CP layouts for launchers that only shard data (HF, Lightning...)."""
    c = plan.candidate
    if c.tp * c.pp * c.cp > 1:
        raise refuse(fmt, f'the plan splits the model (tp/pp/cp/dp {c.layout}); {fmt} runs '
                     'only data parallelism (DDP, ZeRO, FSDP)',
                     'export it as megatron or torchtitan, or re-plan with --tp 1 --pp 1 --cp 1')


def sharding_backend(plan: PlanFile, options: ExportOptions, fmt: str) -> str:
    """``ddp``, ``deepspeed`` or ``fsdp`` for the plan's ZeRO stage.

    FSDP's FULL_SHARD is ZeRO-3 and SHARD_GRAD_OP ZeRO-2; it has no ZeRO-1.
    """
    zero = plan.candidate.zero
    if zero == 0:
        return 'ddp'
    if options.sharding == 'fsdp' and zero == 1:
        raise refuse(fmt, 'FSDP has no ZeRO-1 (optimizer-only) sharding',
                     '--sharding deepspeed, or re-plan with --zero 0,2,3')
    return options.sharding


def precision_kind(plan: PlanFile) -> str:
    """The plan's precision recipe as a launcher sees it.

    Returns ``bf16`` or ``fp16`` (mixed precision, however the master weights are
    kept), ``fp32``, ``tf32``, ``fp8`` or ``bf16-pure`` (weights and states in bf16).
    """
    return {'amp-bf16': 'bf16', 'bf16-mixed': 'bf16', 'amp-fp16': 'fp16',
            'fp16-mixed': 'fp16', 'fp32': 'fp32', 'tf32': 'tf32', 'fp8': 'fp8',
            'bf16': 'bf16-pure'}[plan.constraints.precision]


def learning_rate(plan: PlanFile) -> float | None:
    """The plan's peak learning rate to 3 significant digits (as people write them)."""
    lr = plan.guidance.learning_rate
    return None if lr is None else float(f'{lr:.3g}')


def header(plan: PlanFile, n: BatchNumbers, tool: str) -> list[str]:
    """The lines every export starts with (as comment text)."""
    c, m = plan.candidate, plan.model
    name = m.spec.name + (f' ({m.ref})' if m.ref and m.ref != m.spec.name else '')
    g = plan.guidance
    lines = [
        f'batchfit plan exported for {tool}: {name}, {m.spec.total_params() / 1e9:,.2f} B '
        f'parameters, sequence {plan.targets.seq_len}',
        f'{n.nodes} node(s) x {n.gpus_per_node} {plan.cluster.gpu_name or plan.cluster.gpu}; '
        f'tp/pp/cp/dp {c.layout}; ZeRO {c.zero}; recompute {c.recompute}; '
        f'{plan.constraints.precision}',
        f'global batch {n.global_batch} = micro-batch {n.micro_batch} x accumulation '
        f'{n.grad_accum} x DP {n.dp}',
    ]
    if g.learning_rate is not None:
        lines.append(f'learning rate {learning_rate(plan)}: {g.learning_rate_source}')
    if g.warmup_steps is not None:
        lines.append(f'warmup {g.warmup_steps} steps: {g.warmup_note}')
    if plan.steps is not None:
        lines.append(f'{plan.steps:,} optimizer steps')
    return lines


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InputError(flag, f'unknown value {value!r}', ', '.join(allowed))


def _flag(name: str) -> str:
    return '--' + name.replace('_', '-')
