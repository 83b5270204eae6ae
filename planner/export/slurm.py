"""Slurm batch script: one torchrun per node through ``srun``, c10d rendezvous.

The pattern of pytorch/examples' ``sbatch_run.sh``: ``--ntasks-per-node=1``, the first
host of the allocation as the c10d endpoint, the job id as the rendezvous id. Nothing
per node is expanded in the batch script itself (with c10d no node rank is needed), so
every node joins with its own rank instead of all claiming rank 0. What runs under
torchrun is the plan's own stack (``payload_kind``): the HF Trainer's arguments or the
plain script (``torchrun``) for a Hugging Face plan, the Trainer with its DeepSpeed config
or the user's DeepSpeed script for HF + DeepSpeed, Megatron-LM's arguments, torchtitan's
trainer with the ``torchtitan`` format's job config, the user's DeepSpeed script with the
``deepspeed`` format's config for the DeepSpeed pipeline. A config file is written by a
heredoc next to the script (named after the job id) before ``srun``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from planner.errors import InputError
from planner.export import deepspeed, hf, megatron, torchtitan
from planner.export.base import (
    PAYLOADS,
    Export,
    ExportOptions,
    header,
    liger_notes,
    lora_notes,
)
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
from planner.export.textfmt import json_text, toml_lines
from planner.stacks import get_stack

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

DEEPSPEED_SCRIPT = ('your DeepSpeed script parses --deepspeed_config with '
                    'deepspeed.add_config_arguments(parser) and passes it to '
                    'deepspeed.initialize(args=...); it reads the layout from the BATCHFIT_* '
                    'variables (docs/export.md)')
# sed reads the whole list: `head -n 1` would exit early, scontrol would die of SIGPIPE on a
# long node list, and `set -o pipefail` would stop the job.
HEAD_NODE = 'head_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"'


# What each stack's plans run under torchrun: the payloads among its launchers
# (planner/stacks/catalog.py ``launchers``), the first being the default.
_DEFAULT_PAYLOAD = {'megatron': 'megatron', 'torchtitan': 'torchtitan',
                    'deepspeed': 'deepspeed', 'hf-deepspeed': 'hf'}
# The config file a payload reads, written by a heredoc next to the script before srun
# (one per job: two jobs from one folder do not overwrite each other's).
_CONFIG_FILES = {'torchtitan': 'torchtitan-${SLURM_JOB_ID}.toml',
                 'deepspeed': 'ds_config-${SLURM_JOB_ID}.json'}
_HEREDOC_END = 'BATCHFIT_CONFIG_END'


def stack_payloads(plan: PlanFile) -> tuple[str, ...]:
    """The payloads that run the plan's stack (its launchers that run under torchrun)."""
    launchers = get_stack(plan.candidate.framework, 'candidate.framework').launchers
    return tuple(p for p in PAYLOADS if p in launchers)


def payload_kind(plan: PlanFile, options: ExportOptions) -> str:
    """What runs under torchrun: the option, else the plan's stack's own (Megatron-LM,
    torchtitan, the DeepSpeed script, the Trainer with DeepSpeed); a Hugging Face plan
    runs the Trainer where the layout is pure data parallel, else the plain script.

    Raises:
        InputError: a ``--payload`` that does not run the plan's stack.
    """
    stack = get_stack(plan.candidate.framework, 'candidate.framework')
    allowed = stack_payloads(plan)
    if options.payload is not None:
        if options.payload not in allowed:
            raise InputError('--payload', f'{options.payload} does not run the {stack.label} '
                             f'stack this plan was estimated for ({stack.key})',
                             ', '.join(allowed))
        return options.payload
    if stack.key in _DEFAULT_PAYLOAD:
        return _DEFAULT_PAYLOAD[stack.key]
    c = plan.candidate
    return 'hf' if c.tp * c.pp * c.cp == 1 else 'torchrun'


def heredoc(path: str, lines: list[str]) -> list[str]:
    """``cat > path`` of ``lines`` verbatim (a quoted delimiter: nothing is expanded)."""
    if _HEREDOC_END in lines:  # TOML and JSON lines never are: a bare word is invalid in both
        raise InputError('--format slurm', 'the config holds the heredoc delimiter')
    return [f'cat > "{path}" <<\'{_HEREDOC_END}\'', *lines, _HEREDOC_END]


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
    config: list[str] = []
    if kind == 'hf':
        args, notes = hf.training_arguments(plan, n, options, fmt='slurm --payload hf')
        program = script_words(options.script_or('train.py')) + hf.argv(args)
        env = hf.environment(plan, n, options, fmt='slurm --payload hf')
    elif kind == 'megatron':
        margs, notes = megatron.megatron_arguments(plan, n)
        env = megatron.environment(plan)
        program = script_words(options.script_or('pretrain_gpt.py')) + megatron.argv(margs)
    elif kind == 'torchtitan':  # the job config of the torchtitan format, and its launch
        tables, notes = torchtitan.job_config(plan, n)
        path = _CONFIG_FILES[kind]
        config = heredoc(path, toml_lines(tables))
        program = torchtitan.program_words(options, f'"{path}"')
    elif kind == 'deepspeed':  # the config of the deepspeed format, for the user's script
        ds_config, notes = deepspeed.standalone_config(plan, n)
        path = _CONFIG_FILES[kind]
        config = heredoc(path, json_text(ds_config).split('\n'))
        env = plan_variables(plan, n)
        # deepspeed.add_config_arguments(parser): --deepspeed, --deepspeed_config FILE
        # (deepspeedai/DeepSpeed deepspeed/__init__.py _add_core_arguments)
        program = [*script_words(options.script_or('train.py')), '--deepspeed',
                   f'--deepspeed_config "{path}"']
        notes = [DEEPSPEED_SCRIPT, *notes, *liger_notes(plan)]
    else:
        env = plan_variables(plan, n)
        program = script_words(options.script_or('train.py'))
        notes = [SCRIPT_READS, *liger_notes(plan)]
    if config:
        notes.append(f'the config is written to {_CONFIG_FILES[kind]} in the job\'s working '
                     'folder, which every node must see (a shared filesystem)')
    notes = notes + lora_notes(plan)
    program += [quote(a, 'script argument') for a in options.script_args]
    endpoint = f'"$head_node":{options.master_port}'
    launch = torchrun_words(n, options, slurm_endpoint=endpoint)
    words = [f'srun {launch[0]}', *launch[1:], *program]
    body = [*exports(env), *config, HEAD_NODE, launch_line(words)]
    text = bash_script(header(plan, n, f'Slurm + torchrun ({kind})'), notes, body)
    lines = text.split('\n')
    text = '\n'.join([lines[0], *sbatch_lines(plan, n, options), *lines[1:]])
    return Export(text, 'train.sbatch', tuple(notes))
