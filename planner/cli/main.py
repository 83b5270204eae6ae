"""The ``batchfit`` command line.

Bad input never ends in a traceback: every error is one line naming the field and
what is allowed, and the exit code is 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from planner import __version__
from planner.cli.args import (
    EXIT_BAD_INPUT,
    Parser,
    add_memory_option_args,
    add_model_args,
    add_profile_arg,
    lora_from_args,
    positive_int,
)
from planner.cli.calibrate import add_calibrate_command
from planner.cli.export import add_export_commands
from planner.cli.gpus import add_gpus_command
from planner.cli.paths import add_paths_command
from planner.cli.plan import add_plan_command
from planner.defaults import ZERO_STAGES
from planner.errors import InputError
from planner.memory.training import OFFLOAD_MODES, RECOMPUTE_MODES, TrainingSetup, check_fits_model

__all__ = ['EXIT_BAD_INPUT', 'build_parser', 'main']


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = Parser(prog='batchfit', description='Capacity planner for distributed training.')
    parser.add_argument('--version', action='version', version=f'batchfit {__version__}')
    sub = parser.add_subparsers(dest='command', required=True, parser_class=Parser)

    est = sub.add_parser('estimate', help='per-GPU training memory of one configuration')
    add_model_args(est)
    est.add_argument('--micro-batch', type=positive_int('--micro-batch'), required=True,
                     help='sequences per GPU per forward/backward')
    est.add_argument('--grad-accum', type=positive_int('--grad-accum'), default=1)
    est.add_argument('--gpu', help='catalog GPU (batchfit gpus --catalog) to check the fit')
    est.add_argument('--nodes', type=positive_int('--nodes'), default=1)
    est.add_argument('--gpus-per-node', type=positive_int('--gpus-per-node'), default=1)
    for flag in ('--tp', '--pp', '--cp', '--ep', '--vpp'):
        est.add_argument(flag, type=positive_int(flag), default=1)
    est.add_argument('--dp-replicate', type=positive_int('--dp-replicate'), default=1,
                     help='HSDP: replicas of the FSDP shard group (torchtitan '
                          'data_parallel_replicate_degree; default 1, FSDP over all of DP)')
    est.add_argument('--etp', type=positive_int('--etp'), default=0,
                     help='expert tensor parallelism: each expert split over this many ranks '
                          '(default: the TP size); megatron folds ep x etp out of tp x dp x cp')
    est.add_argument('--no-sp', dest='sequence_parallel', action='store_false',
                     help='no sequence parallelism with TP (replicate norms and dropout)')
    est.add_argument('--zero', type=int, choices=ZERO_STAGES, default=0,
                     help='ZeRO stage (= FSDP no-shard / grad-op / full-shard)')
    est.add_argument('--offload', choices=OFFLOAD_MODES, default='none')
    est.add_argument('--recompute', choices=RECOMPUTE_MODES, default='none')
    est.add_argument('--partition-activations', action='store_true',
                     help="DeepSpeed's activation checkpointing option: a recomputed layer's "
                          'input split over the TP ranks (the deepspeed stack)')
    est.add_argument('--zero-bubble', action='store_true',
                     help="torchtitan's InterleavedZeroBubble pipeline schedule with --vpp > 1 "
                          '(the torchtitan stack): fewer micro-batches in flight')
    est.add_argument('--grad-reduce-in-bf16', action='store_true',
                     help="Megatron's --grad-reduce-in-bf16 (the megatron stack): a bf16 "
                          'main-grad buffer, 2 B a parameter instead of 4')
    add_memory_option_args(est)
    add_profile_arg(est)  # --profile PATH|auto|none
    est.add_argument('--json', action='store_true', help='one JSON document on stdout')
    est.set_defaults(run=_cmd_estimate)
    add_plan_command(sub)

    models = sub.add_parser('models', help='list the model presets')
    models.add_argument('--json', action='store_true')
    models.set_defaults(run=_cmd_models)

    add_gpus_command(sub)
    add_export_commands(sub)  # plan files: show, export
    add_calibrate_command(sub)  # measure a GPU or the CPU
    add_paths_command(sub)  # where settings, data and logs live
    return parser


def _cmd_estimate(args: argparse.Namespace) -> int:
    from planner.hardware.catalog import find_gpu
    from planner.memory.peak import estimate
    from planner.memory.report import estimate_json, estimate_text
    from planner.models.source import resolve_model
    from planner.plans.path import calibration_for

    model = resolve_model(args.model)
    gpu = find_gpu(args.gpu) if args.gpu else None
    if args.tp > args.gpus_per_node:
        raise InputError('--tp', f'{args.tp} exceeds the {args.gpus_per_node} GPUs of a node '
                         '(TP stays inside a node)', f'at most {args.gpus_per_node}')
    layout = {'tp': args.tp, 'pp': args.pp, 'vpp': args.vpp, 'cp': args.cp, 'ep': args.ep}
    # The model's own limits first (heads, layers): they name the flag to change.
    check_fits_model(TrainingSetup(seq_len=args.seq_len, **layout,
                                   dp=max(args.ep, 1)), model)
    world = args.nodes * args.gpus_per_node
    per_replica = args.tp * args.pp * args.cp
    if world % per_replica:
        raise InputError('--gpus-per-node', f'{world} GPUs are not divisible by tp x pp x cp '
                         f'= {per_replica}', f'a multiple of {per_replica} GPUs')
    lora = lora_from_args(args)
    stack = estimate_stack(args, lora is not None, model.hf_model_type)
    precision = (stack.recipe_of(args.precision, args.zero) if args.precision
                 else stack.recipe_for(args.zero, lora is not None))
    setup = TrainingSetup(
        seq_len=args.seq_len, micro_batch=args.micro_batch, grad_accum=args.grad_accum,
        precision=precision, optimizer=args.optimizer, zero=args.zero,
        offload=args.offload, tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, ep=args.ep,
        etp=args.etp, dp_replicate=args.dp_replicate, dp=world // per_replica,
        sequence_parallel=args.sequence_parallel,
        recompute=args.recompute, attention=args.attention, framework=stack.key,
        loss=args.loss, lora=lora, foreach=args.foreach, loop=args.loop,
        partition_activations=args.partition_activations, zero_bubble=args.zero_bubble,
        grad_reduce_in_bf16=args.grad_reduce_in_bf16)
    # A profile of this GPU replaces the default overheads with measured ones (the plan's
    # path, memory only).
    calibration = calibration_for(args.profile, args.gpu, args.model, step_time=False,
                                  precision=precision, framework=stack.key)
    est = estimate(model, setup, gpu, margin_fraction=args.margin,
                   overheads=None if calibration is None else calibration.overheads)
    assumed = not args.framework
    if args.json:
        doc = estimate_json(model, setup, est, gpu)
        doc['calibration'] = None if calibration is None else calibration.summary()
        doc['stack'] = {'key': stack.key, 'assumed': assumed}
        print(json.dumps(doc, indent=2))
    else:
        print(estimate_text(model, setup, est, gpu))
        print(f'Stack: {stack.key} ({stack.label}, {setup.precision})'
              + (' assumed: the first stack that runs this layout; --framework to choose'
                 if assumed else ''))
        if calibration is not None:
            print(calibration.line())
    return 0


def estimate_stack(args: argparse.Namespace, lora: bool, model_type: str = ''):
    """The stack an estimate is for: ``--framework``, checked against the layout and
    overrides (``--loss`` on a model of Hugging Face type ``model_type`` among them), else
    the first stack that runs them (``planner.stacks.STACKS`` order).

    Raises:
        InputError: the named stack (or every stack) cannot run the configuration.
    """
    from planner.stacks import STACKS, get_stack

    switches = tuple(o for o in ('partition_activations', 'zero_bubble', 'grad_reduce_in_bf16')
                     if getattr(args, o))
    having = {f'{o}_allowed': 'off, or --framework ' + ' or '.join(
        s.key for s in STACKS.values() if o in s.options) for o in switches}

    def check(stack) -> None:
        stack.check(precision=args.precision, zero_stages=(args.zero,),
                    recompute_modes=(args.recompute,), lora=lora,
                    options=switches, loss=args.loss, model_type=model_type,
                    field_names=having)
        stack.check_layout(tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, ep=args.ep,
                           zero=args.zero, etp=args.etp, dp_replicate=args.dp_replicate,
                           lora=lora)

    if args.framework:
        stack = get_stack(args.framework)
        check(stack)
        return stack
    if args.loss and not any(s.runs_loss(args.loss, model_type) for s in STACKS.values()):
        # every stack with this loss refuses the model (Liger's model types): say why
        next(s for s in STACKS.values() if args.loss in s.losses).check(
            loss=args.loss, model_type=model_type)
    for stack in STACKS.values():
        try:
            check(stack)
        except InputError:
            continue
        return stack
    check(STACKS['megatron'])  # raises, naming what the most general stack allows
    raise AssertionError('unreachable')


def _cmd_models(args: argparse.Namespace) -> int:
    from planner.models.presets import load_presets, preset_info

    presets = load_presets()
    if args.json:
        print(json.dumps([{'key': k, 'name': m.name, 'parameters': m.total_params(),
                           **preset_info(k)} for k, m in presets.items()], indent=2))
        return 0
    print(f'{"preset":<24}{"parameters":>16}  {"layers":>6} {"hidden":>7} {"heads":>9}  name')
    for key, m in presets.items():
        heads = f'{m.num_heads}/{m.num_kv_heads}'
        print(f'{key:<24}{m.total_params():>16,}  {m.num_layers:>6} {m.hidden_size:>7} '
              f'{heads:>9}  {m.name}')
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``batchfit`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except InputError as exc:
        print(f'batchfit: error: {exc}', file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `batchfit models | head`
        return 0


if __name__ == '__main__':
    sys.exit(main())
