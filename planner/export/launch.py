"""torchrun launch lines and bash scripts, shared by the torchrun-based exporters.

torch/distributed/run.py: underscore flag spellings (every torch version accepts them;
the dashed aliases came with torch 2.0, pytorch PR #94505), an
integer ``--nproc_per_node``, all launcher flags before the script. On one node the
launch is ``--standalone``; on several, each node runs the same script and reads its
own rank (``NODE_RANK``) and the first node's address (``MASTER_ADDR``) at run time,
or meets the others through a c10d rendezvous.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from planner.export.base import learning_rate
from planner.export.shell import command, comments, env_ref, flag, quote

if TYPE_CHECKING:
    from planner.export.base import ExportOptions
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

NODE_RANK = 'NODE_RANK'
MASTER_ADDR = 'MASTER_ADDR'


def node_rank_ref(nodes: int) -> str:
    """This node's rank, read at run time on each node."""
    return env_ref(NODE_RANK, f'set NODE_RANK to the index of this node (0 to {nodes - 1})')


def master_addr_word(options: ExportOptions) -> str:
    """The first node's address: the given one (quoted) or ``$MASTER_ADDR`` at run time."""
    if options.master_addr is not None:
        return quote(options.master_addr, '--master-addr')
    return env_ref(MASTER_ADDR, 'set MASTER_ADDR to the address of node 0')


def torchrun_words(n: BatchNumbers, options: ExportOptions, *,
                   slurm_endpoint: str | None = None) -> list[str]:
    """``torchrun`` and its flags for ``n.nodes`` x ``n.gpus_per_node`` processes.

    Args:
        n: the checked batch numbers.
        options: rendezvous choices.
        slurm_endpoint: under Slurm, the c10d endpoint text (``"$head_node:29500"``);
            the job id becomes the rendezvous id.
    """
    words = ['torchrun', flag('--nnodes', n.nodes), flag('--nproc_per_node', n.gpus_per_node)]
    if slurm_endpoint is not None:
        return [*words, '--rdzv_backend=c10d', f'--rdzv_endpoint={slurm_endpoint}',
                '--rdzv_id="$SLURM_JOB_ID"']
    if n.nodes == 1:
        return [*words, '--standalone']
    if options.rdzv == 'c10d':
        return [*words, '--rdzv_backend=c10d',
                f'--rdzv_endpoint={master_addr_word(options)}:{options.master_port}',
                flag('--rdzv_id', options.rdzv_id)]
    return [*words, f'--node_rank={node_rank_ref(n.nodes)}',
            f'--master_addr={master_addr_word(options)}',
            flag('--master_port', options.master_port)]


def script_words(script: str, args: Sequence[str] = ()) -> list[str]:
    """The training script (or ``-m module``) and its arguments, quoted."""
    if script.startswith('-m '):
        head = ['-m ' + quote(script[3:].strip(), '--script')]
    else:
        head = [quote(script, '--script')]
    return head + [quote(a, 'script argument') for a in args]


def multi_node_notes(n: BatchNumbers, options: ExportOptions) -> list[str]:
    """What to set on each node before running a multi-node script."""
    if n.nodes == 1:
        return []
    where = ('' if options.master_addr is not None
             else ', with MASTER_ADDR set to the address of node 0')
    if options.rdzv == 'c10d':
        return [f'run this same script on all {n.nodes} nodes{where}; the c10d rendezvous '
                f'on port {options.master_port} assigns the node ranks']
    return [f'run this same script on all {n.nodes} nodes, with NODE_RANK set to 0 on the '
            f'first node (the master) up to {n.nodes - 1}{where}']


def bash_script(head: Iterable[str], notes: Iterable[str], body: Iterable[str]) -> str:
    """A bash script: shebang, comment header, notes, ``set -euo pipefail``, body."""
    lines = ['#!/usr/bin/env bash', *comments(head)]
    lines += comments(f'NOTE: {note}' for note in notes)
    lines += ['set -euo pipefail', *body]
    return '\n'.join(lines) + '\n'


def exports(variables: dict[str, object]) -> list[str]:
    """``export NAME=value`` lines (values quoted)."""
    return [f'export {name}={quote(value, name)}' for name, value in variables.items()]


SCRIPT_READS = ('your script reads the layout (BATCHFIT_TP, _PP, _VPP, _CP, _DP, _ZERO, '
                '_RECOMPUTE, _SEQUENCE_PARALLEL), the micro-batch, accumulation, learning rate '
                'and warmup from the BATCHFIT_* variables (docs/export.md)')


def plan_variables(plan: PlanFile, n: BatchNumbers) -> dict[str, object]:
    """The whole plan as ``BATCHFIT_*`` variables, for scripts with their own flags.

    The layout (TP, PP with its virtual stages, CP, DP, ZeRO stage, recompute mode,
    sequence parallelism) and the batch numbers; docs/export.md lists each variable.
    """
    c = plan.candidate
    out: dict[str, object] = {
        'BATCHFIT_TP': c.tp, 'BATCHFIT_PP': c.pp, 'BATCHFIT_VPP': c.vpp, 'BATCHFIT_CP': c.cp,
        'BATCHFIT_DP': c.dp, 'BATCHFIT_ZERO': c.zero, 'BATCHFIT_RECOMPUTE': c.recompute,
        'BATCHFIT_SEQUENCE_PARALLEL': int(bool(c.sequence_parallel and c.tp > 1)),
        'BATCHFIT_MICRO_BATCH': n.micro_batch, 'BATCHFIT_GRAD_ACCUM': n.grad_accum,
        'BATCHFIT_GLOBAL_BATCH': n.global_batch, 'BATCHFIT_SEQ_LEN': plan.targets.seq_len}
    if c.dp_replicate > 1:  # HSDP: the script builds a (replicate, shard) mesh
        out['BATCHFIT_DP_REPLICATE'] = c.dp_replicate
    if plan.guidance.learning_rate is not None:
        out['BATCHFIT_LR'] = learning_rate(plan)
    if plan.guidance.warmup_steps is not None:
        out['BATCHFIT_WARMUP_STEPS'] = plan.guidance.warmup_steps
    if plan.steps is not None:
        out['BATCHFIT_MAX_STEPS'] = plan.steps
    return out


def launch_line(words: Iterable[str]) -> str:
    """The launch command, one fragment per continued line."""
    return command(words)
