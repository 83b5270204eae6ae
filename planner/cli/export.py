"""``batchfit show`` and ``batchfit export``, and the ``plan --save/--export`` hooks.

Registered by ``planner.cli.main.build_parser`` through :func:`add_export_commands`.
``batchfit plan`` calls :func:`save_and_export` after its search (its flags come from
:func:`add_save_export_args`). Every failure is an :class:`InputError`: one line, exit 2,
and no file written.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from planner.cli.args import guidance_inputs_from_args, positive_int
from planner.errors import InputError
from planner.stacks import SWITCHES, switch_label
from planner.units import DAY, GIB

if TYPE_CHECKING:
    from planner.export import Export, ExportOptions
    from planner.planfile.document import PlanFile
    from planner.plans.guidance import GuidanceInputs
    from planner.plans.request import PlanRequest
    from planner.plans.result import SearchResult

FORMATS: tuple[str, ...] = ('torchrun', 'accelerate', 'deepspeed', 'hf', 'megatron', 'lightning',
                            'torchtitan', 'llamafactory', 'slurm')
# planner.export.base.PAYLOADS (not imported: the CLI loads the exporters only to export)
PAYLOADS: tuple[str, ...] = ('torchrun', 'hf', 'megatron', 'torchtitan', 'deepspeed')


OWN_PRECISION = "each stack's own precision"


def add_export_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``batchfit show`` and ``batchfit export``."""
    show = sub.add_parser('show', help='print a saved plan file',
                          description='Validate a plan file (migrating older schemas) and '
                                      'print it (docs/plan-file.md).')
    show.add_argument('plan', help='a plan file (batchfit plan ... --save FILE)')
    show.add_argument('--json', action='store_true', help='the plan as current-schema JSON')
    show.set_defaults(run=run_show)

    exp = sub.add_parser('export', help='a saved plan as launcher arguments or config',
                         description='Write the command line or config file that runs a saved '
                                     'plan with a launcher (docs/export.md). Nothing is run.')
    exp.add_argument('plan', help='a plan file (batchfit plan ... --save FILE)')
    exp.add_argument('--format', required=True, choices=FORMATS)
    exp.add_argument('-o', '--output', help='write here (atomically) instead of stdout')
    add_launch_args(exp, positive_int)
    exp.set_defaults(run=run_export)


def add_launch_args(p: argparse.ArgumentParser, positive_int: Any) -> None:
    """The launch options shared by ``export`` and ``plan --export``."""
    p.add_argument('--script', help='training script (default: the format\'s usual one)')
    p.add_argument('--master-addr', help='address of the first node (default: $MASTER_ADDR '
                                         'read on each node at run time)')
    p.add_argument('--master-port', type=positive_int('--master-port'), default=29500)
    p.add_argument('--rdzv', choices=('static', 'c10d'), default='static',
                   help='multi-node torchrun rendezvous (default static: NODE_RANK per node)')
    p.add_argument('--rdzv-id', default='batchfit', help='c10d rendezvous id')
    p.add_argument('--sharding', choices=('deepspeed', 'fsdp'), default='deepspeed',
                   help='run ZeRO stages with DeepSpeed (default) or FSDP')
    p.add_argument('--payload', choices=PAYLOADS,
                   help='slurm: what runs under torchrun, one the plan\'s stack runs '
                        '(default: the stack\'s own)')
    p.add_argument('--job-name', help='slurm job name')
    p.add_argument('--time', dest='time_limit', help='slurm time limit, HH:MM:SS')
    p.add_argument('--partition', help='slurm partition')
    p.add_argument('--output-dir', default='output', help='HF / LLaMA-Factory output_dir')
    p.add_argument('--script-args', nargs=argparse.REMAINDER, default=[],
                   help='everything after this goes to the training script (put it last)')


def add_save_export_args(p: argparse.ArgumentParser) -> None:
    """``--save``, ``--export`` and ``--export-to`` for ``batchfit plan``."""
    p.add_argument('--save', metavar='PLAN.json', help='save the best plan as a plan file')
    p.add_argument('--export', choices=FORMATS, help='also write the best plan for a launcher')
    p.add_argument('--export-to', metavar='FILE', help='where --export writes (default stdout)')


def options_from_args(args: argparse.Namespace) -> ExportOptions:
    """:class:`ExportOptions` from parsed flags (absent flags keep the defaults)."""
    from planner.export import ExportOptions

    names = ('script', 'master_addr', 'master_port', 'rdzv', 'rdzv_id', 'sharding', 'payload',
             'job_name', 'time_limit', 'partition', 'output_dir')
    given = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    return ExportOptions(**given, script_args=tuple(getattr(args, 'script_args', None) or ()))


def save_and_export(args: argparse.Namespace, request: PlanRequest, result: SearchResult,
                    guidance_inputs: GuidanceInputs | None = None,
                    out: TextIO | None = None) -> None:
    """``plan --save FILE`` and ``plan --export FORMAT [--export-to FILE]``.

    Both use the best candidate (row 1 of the table). Checks everything before
    writing anything, so a refused export leaves no plan file behind either.

    Raises:
        InputError: no plan found, ``--export`` to stdout together with ``--json``, a
            plan the launcher cannot run, or a file that cannot be written.
    """
    from planner.export import export_plan
    from planner.planfile.document import plan_file_from_search, write_plan

    save, fmt = getattr(args, 'save', None), getattr(args, 'export', None)
    if not save and not fmt:
        return
    export_to = getattr(args, 'export_to', None)
    if fmt and not export_to and getattr(args, 'json', False):
        raise InputError('--export', 'with --json, give --export-to FILE (stdout holds the JSON)')
    plan = plan_file_from_search(request, result, 0, model_arg=getattr(args, 'model', None),
                                 guidance_inputs=guidance_inputs
                                 or guidance_inputs_from_args(args, request.seq_len))
    exported = export_plan(plan, fmt, options_from_args(args)) if fmt else None
    if save:
        write_plan(save, plan)
    if exported is not None:
        emit(exported, export_to, out)


def emit(exported: Export, path: str | None, out: TextIO | None = None) -> None:
    """Write the export to ``path`` (atomically) or ``out``; notes go to stderr."""
    from planner.planfile.document import write_text_atomic

    if path:
        write_text_atomic(path, exported.text)
    else:
        (out or sys.stdout).write(exported.text)
    for note in exported.notes:
        print(f'batchfit: note: {note}', file=sys.stderr)


def run_export(args: argparse.Namespace) -> int:
    """Entry point of ``batchfit export``."""
    from planner.export import export_plan
    from planner.planfile.document import read_plan

    plan = read_plan(args.plan)
    emit(export_plan(plan, args.format, options_from_args(args)), args.output)
    return 0


def run_show(args: argparse.Namespace) -> int:
    """Entry point of ``batchfit show``."""
    from planner.planfile.document import read_plan

    plan = read_plan(args.plan)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, allow_nan=False))
    else:
        print(show_text(plan, args.plan))
    return 0


def show_text(plan: PlanFile, path: str) -> str:
    """The readable summary of a plan file."""
    from planner.planfile.migrate import CURRENT_SCHEMA

    m, cl, t, k, c, g = (plan.model, plan.cluster, plan.targets, plan.constraints,
                         plan.candidate, plan.guidance)
    e = c.estimates
    named = {'preset': f'preset {m.ref}', 'size': f'size {m.ref}',
             'config': f'config.json from {m.ref} (embedded)', 'spec': 'shape only'}[m.kind]
    batch = (f'{t.global_batch} sequences' if t.global_batch is not None
             else f'{t.global_batch_tokens:,} tokens')
    data = (f'{t.tokens:,.0f} tokens' if t.tokens is not None
            else f'{t.samples:,} samples x {t.epochs or 1:g} epochs')
    lines = [
        f'Plan file {path} ({CURRENT_SCHEMA}; {plan.created_by or "writer unknown"})',
        f'Model: {m.spec.name} ({named}), {m.spec.total_params() / 1e9:,.2f} B parameters, '
        f'{m.spec.num_layers} layers, hidden {m.spec.hidden_size}',
        f'Cluster: up to {cl.max_nodes} x {cl.gpus_per_node} {cl.gpu_name or cl.gpu} '
        f'({cl.gpu})' + (f', {cl.inter_node} between nodes' if cl.inter_node else ''),
        f'Targets: sequence {t.seq_len}, global batch {batch}, data {data}',
        f'Search: {k.precision or OWN_PRECISION} · {k.optimizer} · '
        f'{k.attention} attention · {k.framework or "every stack"} · '
        + ''.join(f'{switch_label(o)} · ' for o in SWITCHES if getattr(k, o))
        + f'ZeRO {",".join(map(str, k.zero_stages))} · recompute {",".join(k.recompute_modes)} · '
        f'margin {k.margin_fraction:.0%}',
        *([] if k.lora is None else [lora_text(plan)]),
        f'Chosen: {c.gpus} GPUs on {c.nodes} node(s) of {c.gpus_per_node}: tp/pp/cp/dp '
        f'{c.layout}, micro-batch {c.micro_batch} x accumulation {c.grad_accum} x DP {c.dp} = '
        f'{c.global_batch}, ZeRO {c.zero}, recompute {c.recompute}'
        + (', sequence parallel' if c.sequence_parallel else '')
        + f'; stack {c.framework}, {c.precision}',
    ]
    lines += _estimate_lines(e)
    if g.learning_rate is not None:
        lines.append(f'Learning rate: {g.learning_rate:.3g} ({g.learning_rate_source})')
    if g.warmup_steps is not None:
        lines.append(f'Warmup: {g.warmup_steps:,} steps ({g.warmup_note})')
    cal = plan.calibration
    lines.append('Calibration: ' + ('none (default efficiency curve)' if cal is None else
                                    f'{len(cal["points"])} points by {cal["axis"]} '
                                    f'({cal["source"]})'))
    lines.append(f'Export: batchfit export {path} --format {{{",".join(FORMATS)}}}')
    return '\n'.join(lines)


def lora_text(plan: PlanFile) -> str:
    """The plan's LoRA settings in one line (rank, targets, base, trainable parameters)."""
    from planner.memory.model_states import lora_params

    spec = plan.constraints.lora_spec
    assert spec is not None
    base = {4: 'QLoRA (4-bit NF4 base)', 8: 'LLM.int8 base', 16: '16-bit base',
            32: 'fp32 base'}[spec.base_bits]
    return (f'LoRA: rank {spec.rank} on {",".join(spec.targets)}, {base}, '
            f'{lora_params(plan.model.spec, spec) / 1e6:,.1f} M trainable parameters')


def _estimate_lines(e: dict[str, Any]) -> list[str]:
    parts = []
    memory: dict[str, Any] = e['memory'] if isinstance(e.get('memory'), dict) else {}
    if isinstance(memory.get('total_bytes'), (int, float)):
        usable = memory.get('usable_bytes')
        parts.append(f'memory {memory["total_bytes"] / GIB:.1f} GiB per GPU'
                     + (f' of {usable / GIB:.1f} usable' if isinstance(usable, (int, float))
                        else ''))
    for key, label, fmt in (('step_time_s', 'step', '{:.3g} s'), ('mfu', 'MFU', '{:.1%}'),
                            ('tokens_per_s', 'throughput', '{:,.0f} tokens/s'),
                            ('time_to_train_s', 'time to train', None),
                            ('gpu_hours', 'GPU-hours', '{:,.0f}'),
                            ('cost_usd', 'cost', '${:,.0f}')):
        value = e.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        text = f'{value / DAY:,.1f} days' if fmt is None else fmt.format(value)
        parts.append(f'{label} {text}')
    return ['Estimates: ' + '; '.join(parts)] if parts else []
