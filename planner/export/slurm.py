"""Slurm batch script: one torchrun per node through ``srun``, c10d rendezvous.

The pattern of pytorch/examples' ``sbatch_run.sh``: ``--ntasks-per-node=1``, the first
host of the allocation as the c10d endpoint, the job id as the rendezvous id. Nothing
per node is expanded in the batch script itself (with c10d no node rank is needed), so
every node joins with its own rank instead of all claiming rank 0. What runs under
torchrun is the plain script (``torchrun``), or the HF Trainer or Megatron arguments.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from planner.export import hf, megatron
from planner.export.base import Export, ExportOptions, header, liger_notes, lora_notes
from planner.export.launch import (
    SCRIPT_READS,
    bash_script,
    exports,
    launch_line,
    plan_variables,
    script_words,
    torchrun_words,
)
from planner.export.shell import quote

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

# sed reads the whole list: `head -n 1` would exit early, scontrol would die of SIGPIPE on a
# long node list, and `set -o pipefail` would stop the job.
HEAD_NODE = 'head_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"'


def payload_kind(plan: PlanFile, options: ExportOptions) -> str:
    """What runs under torchrun: the option, else Megatron or HF when the plan suits them."""
    if options.payload is not None:
        return options.payload
    if plan.candidate.framework == 'megatron':
        return 'megatron'
    c = plan.candidate
    return 'hf' if c.tp * c.pp * c.cp == 1 else 'torchrun'


def sbatch_lines(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> list[str]:
    """The ``#SBATCH`` lines (plain names only: sbatch has its own tokenizer)."""
    name = options.job_name or re.sub(r'[^A-Za-z0-9._-]+', '-', plan.model.spec.name)[:64]
    lines = [f'#SBATCH --job-name={name.strip("-.") or "batchfit"}',
             f'#SBATCH --nodes={n.nodes}', '#SBATCH --ntasks-per-node=1',
             f'#SBATCH --gpus-per-node={n.gpus_per_node}']
    if options.partition:
        lines.append(f'#SBATCH --partition={options.partition}')
    if options.time_limit:
        lines.append(f'#SBATCH --time={options.time_limit}')
    return lines


def render(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> Export:
    """The sbatch script."""
    kind = payload_kind(plan, options)
    notes: list[str] = []
    env: dict[str, object] = {}
    if kind == 'hf':
        args, notes = hf.training_arguments(plan, n, options, fmt='slurm --payload hf')
        program = script_words(options.script_or('train.py')) + hf.argv(args)
        env = hf.environment(plan, n, options, fmt='slurm --payload hf')
    elif kind == 'megatron':
        margs, notes = megatron.megatron_arguments(plan, n)
        env = megatron.environment(plan)
        program = script_words(options.script_or('pretrain_gpt.py')) + megatron.argv(margs)
    else:
        env = plan_variables(plan, n)
        program = script_words(options.script_or('train.py'))
        notes = [SCRIPT_READS, *liger_notes(plan)]
    notes = notes + lora_notes(plan)
    program += [quote(a, 'script argument') for a in options.script_args]
    endpoint = f'"$head_node":{options.master_port}'
    launch = torchrun_words(n, options, slurm_endpoint=endpoint)
    words = [f'srun {launch[0]}', *launch[1:], *program]
    body = [*exports(env), HEAD_NODE, launch_line(words)]
    text = bash_script(header(plan, n, f'Slurm + torchrun ({kind})'), notes, body)
    lines = text.split('\n')
    text = '\n'.join([lines[0], *sbatch_lines(plan, n, options), *lines[1:]])
    return Export(text, 'train.sbatch', tuple(notes))
