"""``batchfit plan``: which layout reaches a global batch fastest, and is the batch wise?

Registered by ``planner.cli.main.build_parser`` through :func:`add_plan_command`. The text
output is a ranked table, the Pareto front, a short explanation of the winner and the
batch-size/learning-rate guidance; ``--json`` prints one document (docs/cli-plan-json.md).

Exit codes: 0 with a plan, 1 when no layout reaches the batch (the nearest batches
that do are offered), 2 for bad input (one line naming the flag).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from planner.cli.args import (
    GlobalBatchAction,
    add_memory_option_args,
    add_model_args,
    add_profile_arg,
    count,
    guidance_inputs_from_args,
    int_list,
    lora_from_args,
    positive_int,
    positive_number,
    word_list,
)
from planner.cli.export import add_save_export_args, save_and_export
from planner.defaults import (
    DEFAULT_SORT_KEY,
    DEFAULT_TOP_K,
    RECOMPUTE_MODES,
    SORT_KEYS,
    ZERO_STAGES,
)
from planner.stacks import switch_label
from planner.units import DAY, GIB, si

if TYPE_CHECKING:
    from planner.hardware.devices import GpuSpec
    from planner.plans.guidance import Guidance
    from planner.plans.path import PlanAsk
    from planner.plans.request import PlanRequest
    from planner.plans.result import Candidate, SearchResult

EXIT_NO_PLAN = 1
PLAN_SCHEMA = 'batchfit.plan-result/1'  # plan files are 'batchfit.plan/N'
PARETO_ROWS = 8


# ---- parser -----------------------------------------------------------------------------

def add_plan_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``batchfit plan`` on the top-level subparsers."""
    p = sub.add_parser('plan', help='search layouts for a global batch: time, cost, LR guidance',
                       description='Every (GPUs, TP, PP, CP, DP, micro-batch, accumulation, '
                                   'ZeRO, recompute) that reaches the global batch exactly and '
                                   'fits, ranked by time-to-train (docs/time-model.md). With '
                                   '--lora-rank (and --qlora) it plans LoRA/QLoRA fine-tuning '
                                   'as PEFT runs it: data parallel with ZeRO 0-3 only.')
    add_model_args(p)
    p.add_argument('--gpu', required=True, help='catalog GPU (batchfit gpus --catalog)')
    p.add_argument('--nodes', type=positive_int('--nodes'), default=1,
                   help='nodes available (the plan may use fewer)')
    p.add_argument('--gpus-per-node', type=positive_int('--gpus-per-node'), default=8)
    p.add_argument('--inter-node', help='network between nodes (default by GPU family: '
                   'ib-ndr for Hopper, ib-hdr for Ampere, ...)')
    batch = p.add_mutually_exclusive_group(required=True)
    batch.add_argument('--global-batch', action=GlobalBatchAction,
                       help='sequences per optimizer step (1024, 1kseq), or tokens with a '
                            'unit (4Mtok = 4,000,000; 4Mitok = 4,194,304); a bare 4M is '
                            'refused as ambiguous')
    batch.add_argument('--global-batch-tokens', type=count('--global-batch-tokens'),
                       help='tokens per optimizer step (4M = 4,000,000; 4Mi = 4,194,304)')
    length = p.add_mutually_exclusive_group(required=True)
    length.add_argument('--tokens', type=count('--tokens', integer=False),
                        help='training tokens, e.g. 2T')
    length.add_argument('--samples', type=count('--samples'), help='sequences in the data set')
    p.add_argument('--epochs', type=positive_number('--epochs'), default=None,
                   help='passes over --samples (default 1)')
    p.add_argument('--zero', type=int_list('--zero', ZERO_STAGES), default=ZERO_STAGES,
                   help='ZeRO stages to try, e.g. 0,1 (default 0,1,2,3)')
    p.add_argument('--recompute', type=word_list('--recompute', RECOMPUTE_MODES),
                   default=RECOMPUTE_MODES, help='recompute modes to try (default all)')
    add_memory_option_args(p)
    p.add_argument('--base-lr', type=positive_number('--base-lr'),
                   help='a learning rate known to work at --base-batch')
    p.add_argument('--base-batch', type=count('--base-batch'),
                   help='the batch --base-lr was tuned at, in the unit of the target batch '
                        '(sequences, or tokens with --global-batch-tokens)')
    p.add_argument('--base-warmup-steps', type=positive_int('--base-warmup-steps'),
                   help='warmup steps of the reference recipe (kept in tokens)')
    p.add_argument('--b-noise', type=count('--b-noise', integer=False),
                   help='measured gradient noise scale (critical batch), in tokens')
    p.add_argument('--price', type=positive_number('--price'),
                   help='USD per GPU-hour (default: the catalog price)')
    p.add_argument('--top', type=positive_int('--top'), default=DEFAULT_TOP_K,
                   help='rows to show')
    p.add_argument('--sort', choices=SORT_KEYS, default=DEFAULT_SORT_KEY,
                   help='rank by time-to-train (default), cost, GPUs used or memory headroom')
    for axis in ('tp', 'pp', 'cp', 'vpp', 'ep', 'micro-batch'):
        p.add_argument(f'--max-{axis}', type=positive_int(f'--max-{axis}'),
                       help=f'largest {axis} to consider')
    for axis in ('tp', 'pp', 'cp', 'vpp', 'ep', 'micro-batch', 'gpus'):
        p.add_argument(f'--{axis}', type=int_list(f'--{axis}'), default=(),
                       help=f'only these {axis} values (comma-separated)')
    p.add_argument('--uneven-pipeline', action='store_true',
                   help='allow PP sizes that do not divide the layers')
    p.add_argument('--no-sp', dest='sequence_parallel', action='store_false',
                   help='no sequence parallelism with TP')
    p.add_argument('--compile', action='store_true',
                   help="the stack's per-block torch.compile (torchtitan [compile]; off by "
                        'default, as in torchtitan)')
    p.add_argument('--async-tp', action='store_true',
                   help="torchtitan's async tensor parallelism (needs --compile)")
    p.add_argument('--overlap-grad-reduce', action='store_true',
                   help="Megatron's --overlap-grad-reduce: the gradient reduce-scatter "
                        'overlaps the backward (off by default, as in Megatron-LM)')
    p.add_argument('--partition-activations', action='store_true',
                   help="DeepSpeed's activation checkpointing option: each recomputed "
                        "layer's input split over the TP ranks, gathered before the layer "
                        'is recomputed (off by default, as in DeepSpeed)')
    p.add_argument('--zero-bubble', action='store_true',
                   help="torchtitan's InterleavedZeroBubble pipeline schedule where a rank "
                        'runs 2+ stages (--vpp > 1): the weight gradients fill the bubble '
                        '(off by default, as in torchtitan; not with --compile)')
    p.add_argument('--tp-comm-overlap', action='store_true',
                   help="Megatron's --tp-comm-overlap: Transformer Engine's userbuffers hide "
                        'part of the TP collectives behind the GEMMs where TP > 1 (needs '
                        'sequence parallelism; off by default, as in Megatron-LM)')
    p.add_argument('--grad-reduce-in-bf16', action='store_true',
                   help="Megatron's --grad-reduce-in-bf16: a bf16 main-grad buffer (2 B a "
                        'parameter instead of 4), reduced in bf16 (off by default, as in '
                        'Megatron-LM)')
    add_profile_arg(p)
    add_save_export_args(p)
    p.add_argument('--json', action='store_true', help='one JSON document on stdout')
    p.set_defaults(run=run_plan)
    return p


# ---- the ask -----------------------------------------------------------------------------

def ask_from_args(args: argparse.Namespace) -> PlanAsk:
    """The :class:`~planner.plans.path.PlanAsk` the flags describe (names not resolved yet).

    Raises:
        InputError: ``--qlora`` without ``--lora-rank``, or a reference LR without its batch.
    """
    from planner.plans.path import PlanAsk
    from planner.plans.request import LayoutLimits

    lora = lora_from_args(args)  # LoRA/QLoRA: PEFT on a frozen base, data parallel only
    limits = LayoutLimits(
        max_tp=args.max_tp, max_pp=args.max_pp, max_cp=args.max_cp, max_vpp=args.max_vpp,
        max_micro_batch=args.max_micro_batch, max_ep=args.max_ep, tp=args.tp, pp=args.pp,
        cp=args.cp, vpp=args.vpp, ep=args.ep, micro_batch=args.micro_batch, gpus=args.gpus,
        uneven_pipeline=args.uneven_pipeline, sequence_parallel=args.sequence_parallel)
    return PlanAsk(
        model=args.model, seq_len=args.seq_len, gpu=args.gpu, global_batch=args.global_batch,
        global_batch_tokens=args.global_batch_tokens, tokens=args.tokens, samples=args.samples,
        epochs=args.epochs, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
        inter_node=args.inter_node, zero_stages=args.zero, recompute_modes=args.recompute,
        precision=args.precision, optimizer=args.optimizer, attention=args.attention,
        framework=args.framework, loss=args.loss, loop=args.loop,
        margin_fraction=args.margin,
        price_per_gpu_hour_usd=args.price, sort_by=args.sort, top_k=args.top, limits=limits,
        lora=lora, profile=args.profile, compile=args.compile, async_tp=args.async_tp,
        overlap_grad_reduce=args.overlap_grad_reduce,
        partition_activations=args.partition_activations, zero_bubble=args.zero_bubble,
        tp_comm_overlap=args.tp_comm_overlap, grad_reduce_in_bf16=args.grad_reduce_in_bf16,
        guidance=guidance_inputs_from_args(args, args.seq_len))


# ---- output -----------------------------------------------------------------------------

def plan_json(req: PlanRequest, result: SearchResult, guidance: Guidance) -> dict[str, Any]:
    """The ``batchfit plan --json`` document (schema in docs/cli-plan-json.md)."""
    lr = guidance.learning_rates.recommended if guidance.learning_rates else None

    def row(c: Candidate) -> dict[str, Any]:
        return {**c.to_dict(), 'layout': c.layout, 'cost': c.cost_usd, 'lr': lr}

    below, above = result.nearest_global_batches
    return {
        'schema': PLAN_SCHEMA,
        'status': result.status,
        'message': result.message,
        'nearest_global_batches': {'below': below, 'above': above},
        'search': {'grid_size': result.grid_size, 'fitting': result.fitting,
                   'elapsed_s': result.elapsed_s,
                   'target_batch_samples': result.target_batch_samples},
        'candidates': [row(c) for c in result.top()],
        'pareto': [row(c) for c in result.pareto_front()],
        'guidance': guidance.to_dict(),
        'request': req.to_dict(),
        'explanation': _explanation(req, result),
        'input_warnings': [w.text for w in request_warnings(req)],
    }


def _explanation(req: PlanRequest, result: SearchResult) -> dict[str, Any] | None:
    """Why there is no plan (None with one): planner.plans.no_plan's record."""
    from planner.plans.no_plan import explain_no_plan

    why = explain_no_plan(req, result)
    return None if why is None else why.to_dict()


def _table(candidates: list[Candidate], has_length: bool) -> list[str]:
    """The ranked rows; every column as wide as its widest cell (plus a space), so wide
    values (a 2^20 micro-batch, a million GPUs) never run into the next column."""
    columns = [('#', 7), ('stack', 14), ('GPUs', 6), ('nodes', 6), ('tp/pp/cp/dp', 14),
               ('micro×acc', 10), ('ZeRO', 5), ('recompute', 10), ('mem GiB', 8),
               ('free GiB', 9), ('step s', 8), ('tok/s', 8), ('MFU', 6), ('days', 7),
               ('GPU-h', 8), ('$', 8)]
    rows = []
    for c in candidates:
        days = c.time_to_train_s / DAY
        rows.append([str(c.rank), c.framework, str(c.gpus), str(c.nodes), c.layout,
                     f'{c.micro_batch}×{c.grad_accum}', str(c.zero), c.recompute,
                     f'{c.memory.total_bytes / GIB:.1f}',
                     f'{c.memory.headroom_bytes / GIB:.1f}', f'{c.step_time_s:.3g}',
                     si(c.tokens_per_s), f'{c.mfu:.1%}',
                     (f'{days:.1f}' if days < 1e5 else si(days)) if has_length else '-',
                     si(c.gpu_hours) if has_length else '-',
                     si(c.cost_usd) if has_length else '-'])
    widths = [max([w] + [len(r[i]) + 1 for r in rows]) for i, (_, w) in enumerate(columns)]

    def line(cells: list[str]) -> str:
        return ''.join(f'{cell:>{w}}' if i else f'{cell:<{w}}'
                       for i, (cell, w) in enumerate(zip(cells, widths, strict=True)))

    return [line([name for name, _ in columns]), *(line(r) for r in rows)]


def lora_line(req: PlanRequest) -> str:
    """One line on the LoRA settings: rank, targets, base bits, trainable parameters."""
    from planner.plans.request import lora_dict

    d = lora_dict(req.lora, req.model)  # type: ignore[arg-type]
    base = {4: 'QLoRA: 4-bit NF4 base', 8: 'LLM.int8 base', 16: '16-bit base',
            32: 'fp32 base'}[d['base_bits']]
    share = d['trainable_parameters'] / req.model.total_params()
    return (f'LoRA rank {d["rank"]} on {",".join(d["targets"])} · {base} · '
            f'{d["trainable_parameters"] / 1e6:,.1f} M trainable parameters ({share:.2%}) · '
            'data parallel only (TP = PP = CP = 1)')


def _why(c: Candidate, gpu: GpuSpec) -> list[str]:
    """A few sentences on the winning plan."""
    from planner.stacks import STACKS

    parts = c.step_breakdown_s
    labels = {'compute_s': 'GEMMs', 'elementwise_s': 'memory-bound ops', 'bubble_s': 'bubble',
              'tp_comm_s': 'TP comm', 'cp_comm_s': 'CP comm', 'pp_comm_s': 'PP sends',
              'dp_comm_s': 'DP/ZeRO comm (exposed)', 'ep_comm_s': 'EP all-to-all',
              'optimizer_s': 'optimizer',
              'overhead_s': 'overhead'}
    split = ', '.join(f'{labels[k]} {v / c.step_time_s:.0%}' for k, v in
                      sorted(parts.items(), key=lambda kv: -kv[1]) if v / c.step_time_s >= 0.005)
    if c.dequant_s > 0:
        split += f' (QLoRA dequantization {c.dequant_s / c.step_time_s:.0%} of the step)'
    pipeline = (f'{c.pp} pipeline stages' + (f' x {c.vpp} virtual' if c.vpp > 1 else '')
                if c.pp > 1 else 'no pipeline')
    sharding = {0: 'plain data parallel', 1: 'optimizer states sharded (ZeRO-1)',
                2: 'gradients and optimizer states sharded (ZeRO-2)',
                3: 'everything sharded (ZeRO-3/FSDP)'}[c.zero]
    return [
        f'Stack: {c.framework} ({STACKS[c.framework].label}), {c.precision}.',
        f'Why #{c.rank}: {c.gpus} GPUs on {c.nodes} node(s) of {c.gpus_per_node}: TP {c.tp}'
        f'{" with sequence parallelism" if c.sequence_parallel else ""}, {pipeline}, CP {c.cp}, '
        f'DP {c.dp}; each replica runs {c.grad_accum} micro-batch(es) of {c.micro_batch} per '
        f'step; {sharding}; recompute {c.recompute}.',
        f'  Step {c.step_time_s:.3g} s: {split}. GEMM efficiency {c.efficiency:.0%} of peak, '
        f'MFU {c.mfu:.1%} (HFU {c.hfu:.1%}).',
        f'  Memory {c.memory.total_bytes / GIB:.1f} GiB of {c.memory.usable_bytes / GIB:.1f} '
        f'usable on the {gpu.name} (peak at {c.memory.peak_phase.replace("_", " ")}).',
    ]


def _guidance_lines(g: Guidance) -> list[str]:
    lines = [f'Guidance for a global batch of {g.global_batch_samples:,} sequences '
             f'({g.global_batch_tokens / 1e6:,.2f}M tokens):']
    if g.critical_batch_tokens is not None and g.steps_factor is not None:
        lines.append(f'  critical batch ~{g.critical_batch_tokens / 1e6:,.2f}M tokens '
                     f'({g.critical_batch_source}): {g.steps_factor:.2f}x the minimum steps, '
                     f'{g.data_factor:.2f}x the minimum data to reach a given loss')
        lines.append('  batch: ' + ', '.join(
            f'{p.batch_tokens / 1e6:,.3g}M -> steps x{p.relative_steps:.2f}, '
            f'data x{p.relative_tokens:.2f}' for p in g.batch_table if p.relative_steps != 1))
    if g.learning_rates is not None:
        r = g.learning_rates
        noise = '' if r.noise_scale is None else f', noise-scale {r.noise_scale:.3g}'
        lines.append(f'  learning rate {r.recommended:.3g} for x{r.ratio:.3g} the reference batch, '
                     f'by the {r.rule}; linear rule {r.linear:.3g}, square-root rule '
                     f'{r.square_root:.3g}{noise}')
    if g.warmup_steps is not None:
        lines.append(f'  warmup ~{g.warmup_steps:,} steps ({g.warmup_note})')
    lines.extend(f'  note: {n}' for n in g.notes)
    lines.extend(f'  WARNING: {w}' for w in g.warnings)
    return lines


def request_warnings(req: PlanRequest) -> list:
    """Allowed but unlikely inputs (planner.limits.input_warnings) of a request."""
    from planner.limits import input_warnings

    length = req.length
    return input_warnings(
        seq_len=req.seq_len, max_positions=req.model.max_position_embeddings,
        epochs=None if length is None or length.samples is None else length.epochs,
        tokens=None if length is None else length.total_tokens(req.seq_len),
        batch_tokens=req.target_batch_samples * req.seq_len,
        gpus=req.max_nodes * req.gpus_per_node)


STACK_OWN_PRECISION = "each stack's own precision"
STACK_OWN_LOSS = "each stack's own"


def plan_text(req: PlanRequest, result: SearchResult, guidance: Guidance,
              inter_node_assumed: bool) -> str:
    """The readable report."""
    m, gpu = req.model, req.gpu
    batch = result.target_batch_samples
    link = ('' if req.inter_node is None else f', {req.inter_node.name} ({req.inter_node.key}'
            + (', assumed: set --inter-node' if inter_node_assumed else '') + ')')
    head = [
        f'{m.name}: {m.total_params() / 1e9:,.2f} B parameters · sequence {req.seq_len} · '
        f'global batch {batch:,.6g} sequences ({batch * req.seq_len:,.0f} tokens)',
        f'Cluster: up to {req.max_nodes} x {req.gpus_per_node} {gpu.name}{link}',
        f'{req.precision or STACK_OWN_PRECISION} · {req.optimizer} · {req.attention} '
        f'attention · stacks {", ".join(s.key for s in req.stacks())} · '
        + ''.join(f'{switch_label(o)} · ' for o in req.options)
        + f'loop {req.loop} · loss {req.loss_kind or STACK_OWN_LOSS} · '
        f'margin {req.margin_fraction:.0%} · ${req.price:.2f}/GPU-hour',
    ]
    if req.lora is not None:
        head.append(lora_line(req))
    head.extend(f'WARNING: {w.text}' for w in request_warnings(req))
    if req.length is not None:
        tokens = req.length.total_tokens(req.seq_len)
        head.append(f'Training: {si(tokens)} tokens = {tokens / (batch * req.seq_len):,.0f} '
                    'steps')
    head.append(f'Searched {result.grid_size:,} candidates in {result.elapsed_s:.2f} s: '
                f'{result.fitting:,} fit.')
    if not result.fitting:
        from planner.plans.no_plan import explain_no_plan

        why = explain_no_plan(req, result)
        text = why.text if why is not None else f'{result.message}.'
        return '\n'.join([*head, '', f'No plan: {text}'])
    has_length = req.length is not None
    lines = [*head, '', *_table(result.top(), has_length)]
    front = result.pareto_front()
    if len(front) > 1:
        pick = front if len(front) <= PARETO_ROWS else [
            front[round(i)] for i in
            [k * (len(front) - 1) / (PARETO_ROWS - 1) for k in range(PARETO_ROWS)]]
        axis = 'time-to-train vs GPU-hours' if has_length else 'step time vs GPU-seconds'
        lines += ['', f'Pareto front ({axis}; {len(front)} plans, # = rank):',
                  *_table(pick, has_length)]
    lines += ['', *_why(result.best, gpu), '', *_guidance_lines(guidance)]  # type: ignore[arg-type]
    return '\n'.join(lines)


def run_plan(args: argparse.Namespace) -> int:
    """Entry point of ``batchfit plan``."""
    from planner.plans.path import plan

    answer = plan(ask_from_args(args))
    req, result, guidance = answer.request, answer.result, answer.guidance
    calibration = answer.calibration
    if args.json:
        doc = plan_json(req, result, guidance)
        doc['calibration'] = None if calibration is None else calibration.summary()
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        print(plan_text(req, result, guidance, args.nodes > 1 and not args.inter_node))
        if calibration is not None:
            print(calibration.line())
    if result.status == 'ok':
        save_and_export(args, req, result, answer.ask.guidance)  # --save/--export: the best plan
    else:
        if args.json:
            print(f'batchfit: no plan: {result.message}', file=sys.stderr)
        return EXIT_NO_PLAN
    return 0
