"""torchtitan job config (TOML, torchtitan 0.2.x) (torchtitan/config/job_config.py).

DP is split into ``data_parallel_replicate_degree`` (DDP) and
``data_parallel_shard_degree`` (FSDP2): ZeRO-3 shards over all of DP; ZeRO 1-2 also
shard, with parameters kept gathered between forward and backward
(``fsdp_reshard_after_forward = "never"``, ZeRO-2's memory, less than ZeRO-1's);
ZeRO-0 replicates, unless the model is also split (torchtitan composes TP/PP/CP with
FSDP, not with DDP). With a pipeline, one torchtitan step takes the whole
accumulation through the pipeline (``local_batch_size = micro × accumulation``,
``pipeline_parallel_microbatch_size = micro``); without one, torchtitan accumulates
``global / (local × DP)`` micro-batches itself.

torchtitan builds models from its own registry: known presets map to a flavor;
others get a flavor that torchtitan rejects at start-up, so nothing trains the wrong
model by accident.
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any

from planner.export.base import (
    Export,
    ExportOptions,
    header,
    learning_rate,
    precision_kind,
    refuse,
    refuse_chunked_loss,
    refuse_empty_stages,
    refuse_lora,
    stage_layers,
)
from planner.export.launch import multi_node_notes, script_words, torchrun_words
from planner.export.shell import command, comments
from planner.export.textfmt import toml_lines
from planner.stacks.pipeline_schedule import schedule_name

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

# Hugging Face ids of presets -> (torchtitan model, flavor).
FLAVORS = {
    'meta-llama/Llama-3.1-8B': ('llama3', '8B'), 'meta-llama/Meta-Llama-3-8B': ('llama3', '8B'),
    'meta-llama/Llama-3.1-70B': ('llama3', '70B'),
    'meta-llama/Meta-Llama-3-70B': ('llama3', '70B'),
    'meta-llama/Llama-3.1-405B': ('llama3', '405B'),
    'Qwen/Qwen3-0.6B': ('qwen3', '0.6B'), 'Qwen/Qwen3-1.7B': ('qwen3', '1.7B'),
    'Qwen/Qwen3-4B': ('qwen3', '4B'), 'Qwen/Qwen3-8B': ('qwen3', '8B'),
    'Qwen/Qwen3-14B': ('qwen3', '14B'), 'Qwen/Qwen3-32B': ('qwen3', '32B'),
}
OPTIMIZERS = {'adamw': 'AdamW', 'adam': 'Adam'}


# batchfit's recompute mode -> torchtitan's [activation_checkpoint] table
# (torchtitan/config/job_config.py ActivationCheckpoint): op-level SAC for ``selective``,
# every layer of even index checkpointed for ``half`` (selective_ac_option "2").
AC_CONFIG: dict[str, dict[str, str]] = {
    'none': {'mode': 'none'}, 'full': {'mode': 'full'},
    'selective': {'mode': 'selective', 'selective_ac_option': 'op'},
    'half': {'mode': 'selective', 'selective_ac_option': '2'},
}

def job_config(plan: PlanFile, n: BatchNumbers) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """TOML tables, and notes.

    Raises:
        InputError: a LoRA plan, more pipeline stages than layers, fp16, pure bf16, or
            an optimizer other than Adam(W).
    """
    c, m, notes = plan.candidate, plan.model.spec, []
    refuse_lora(plan, 'torchtitan', 'torchtitan')
    # torchtitan 0.2.2 has one loss (torchtitan/components/loss.py cross_entropy_loss)
    refuse_chunked_loss(plan, 'torchtitan', 'torchtitan', 'cross_entropy_loss')
    refuse_empty_stages(plan, 'torchtitan')
    kind = precision_kind(plan)
    if kind in ('fp16', 'bf16-pure'):
        raise refuse('torchtitan', f'torchtitan trains in fp32 or bf16 mixed precision, not '
                     f'{plan.candidate.precision}', 're-plan with --framework torchtitan')
    optimizer = OPTIMIZERS.get(plan.constraints.optimizer)
    if optimizer is None:
        raise refuse('torchtitan', f'torchtitan has no {plan.constraints.optimizer} optimizer',
                     're-plan with --optimizer adamw')
    name, flavor = FLAVORS.get(plan.model.hf_id, ('llama3', None))
    if flavor is None:
        flavor = 'choose-a-flavor-for-' + re.sub(r'[^A-Za-z0-9.]+', '-', m.name)
        notes.append(f'torchtitan has no flavor known to match {m.name}: set model.name and '
                     'model.flavor (as written, torchtitan stops at start-up)')
    replicate, shard, reshard = _data_parallel(plan, n, notes)
    local = n.micro_batch * n.grad_accum if c.pp > 1 else n.micro_batch
    training: dict[str, Any] = {
        'local_batch_size': local, 'global_batch_size': n.global_batch,
        'seq_len': plan.targets.seq_len, 'max_norm': 1.0,
        # the plan's recipe (fsdp-bf16: MixedPrecisionPolicy(param bf16, reduce fp32))
        'mixed_precision_param': 'float32' if kind in ('fp32', 'tf32') else 'bfloat16',
        'mixed_precision_reduce': 'float32',
        'steps': plan.steps}
    parallelism: dict[str, Any] = {
        'data_parallel_replicate_degree': replicate, 'data_parallel_shard_degree': shard,
        'fsdp_reshard_after_forward': reshard, 'tensor_parallel_degree': c.tp,
        'pipeline_parallel_degree': c.pp, 'context_parallel_degree': c.cp}
    if c.ep > 1:
        parallelism['expert_parallel_degree'] = c.ep
    if c.pp > 1:
        parallelism['pipeline_parallel_microbatch_size'] = n.micro_batch
        # torch's schedule names (torch/distributed/pipelining/schedules.py
        # get_schedule_class): zero bubble only where a rank runs 2+ stages
        parallelism['pipeline_parallel_schedule'] = schedule_name(
            c.pp, c.vpp, plan.constraints.zero_bubble)
        parallelism.update(_pipeline_split(m.num_layers, c.pp, c.vpp))
    model: dict[str, Any] = {'name': name, 'flavor': flavor}
    switches = _switches(plan, parallelism, model, kind, notes)
    g = plan.guidance
    tables: dict[str, dict[str, Any]] = {
        'job': {'description': f'batchfit plan: {m.name} on {n.world_size} GPUs'},
        'model': model,
        'optimizer': {'name': optimizer, 'lr': learning_rate(plan)},
        'lr_scheduler': {'warmup_steps': g.warmup_steps},
        'training': training, 'parallelism': parallelism,
        'activation_checkpoint': AC_CONFIG[c.recompute],
        **switches,
    }
    if g.learning_rate is None:
        notes.append('no learning rate in the plan: torchtitan\'s default applies (plan with '
                     '--base-lr and --base-batch)')
    if plan.steps is None:
        notes.append('the plan has no data size: set training.steps')
    return tables, notes


def _pipeline_split(num_layers: int, pp: int, vpp: int) -> dict[str, Any]:
    """The stages' layers, as the plan charged them (``stage_layers``).

    torchtitan counts the embedding and the head as a layer of the first and the last
    stage unless told otherwise (``pipeline_parallel_first/last_stage_less_layers``,
    default 1); the plan holds them beside the layers, so both are 0. Equal stages are
    given by their size (``pipeline_llm`` makes ``ceil(layers / size)`` stages:
    torchtitan/distributed/pipeline_parallel.py); any other split is named module by
    module (``module_fqns_per_model_part``: one list per stage in layer order, which
    ``pipeline_module_split`` deals out to the ranks looped, stage ``rank + k * pp``).
    """
    if num_layers % (pp * vpp) == 0:
        return {'pipeline_parallel_first_stage_less_layers': 0,
                'pipeline_parallel_last_stage_less_layers': 0,
                'pipeline_parallel_layers_per_stage': num_layers // (pp * vpp)}
    split = stage_layers(num_layers, pp, vpp)
    sizes = [split[r][v] for v in range(vpp) for r in range(pp)]
    ends = itertools.accumulate(sizes)
    parts = [[f'layers.{i}' for i in range(e - k, e)] for e, k in zip(ends, sizes, strict=True)]
    parts[0].insert(0, 'tok_embeddings')
    parts[-1] += ['norm', 'output']
    return {'module_fqns_per_model_part': parts}


def _switches(plan: PlanFile, parallelism: dict[str, Any], model: dict[str, Any], kind: str,
              notes: list[str]) -> dict[str, dict[str, Any]]:
    """torchtitan's float8, torch.compile and async TP as its 0.2.2 JobConfig spells them
    (torchtitan/config/job_config.py ``Model.converters``, ``Float8Linear``, ``Compile``,
    ``Parallelism.enable_async_tensor_parallel``); fills ``parallelism`` and ``model``,
    returns the extra tables."""
    tables: dict[str, dict[str, Any]] = {}
    c = plan.constraints
    if kind == 'fp8':
        # torchao Float8Linear, tensorwise dynamic scaling with the FSDP all-gather in fp8
        # (torchtitan docs/float8.md); the output head stays bf16, as batchfit timed it
        model['converters'] = ['quantize.linear.float8']
        tables['quantize.linear.float8'] = {
            'enable_fsdp_float8_all_gather': True,
            'precompute_float8_dynamic_scale_for_fsdp': True, 'filter_fqns': ['output']}
        notes.append('float8 needs torchao and an SM89+ GPU (H100, L40S...)')
        if plan.candidate.precision != 'fsdp-fp8':
            notes.append(f'the plan counted {plan.candidate.precision} (Transformer Engine fp8 '
                         'copies); torchtitan\'s float8 needs less memory than planned')
        if not c.compile:
            notes.append('float8 without [compile]: torchtitan calls compile "required for '
                         'competitive performance" (casts unfused); planned that way')
    if c.compile:
        tables['compile'] = {'enable': True, 'components': ['model', 'loss']}
    if c.async_tp:
        parallelism['enable_async_tensor_parallel'] = True
        if plan.candidate.tp == 1:
            notes.append('async TP has nothing to overlap without TP (tp 1)')
    return tables


def _data_parallel(plan: PlanFile, n: BatchNumbers, notes: list[str]) -> tuple[int, int, str]:
    """(replicate, shard, fsdp_reshard_after_forward) for the plan's ZeRO stage."""
    c = plan.candidate
    if c.zero >= 2 and c.dp_replicate > 1:  # HSDP: FSDP in each replica's shard group
        return (c.dp_replicate, n.dp // c.dp_replicate,
                'default' if c.zero == 3 else 'never')
    if c.zero == 3:
        return 1, n.dp, 'default'
    if c.zero == 0 and n.model_parallel == 1:
        return n.dp, 1, 'default'
    if c.zero == 0:
        notes.append('ZeRO 0 with TP/PP/CP: torchtitan composes them with FSDP, not DDP; '
                     'parameters stay gathered (reshard never), gradients and optimizer '
                     'states are sharded: less memory than planned')
    elif c.zero == 1:
        notes.append('ZeRO 1: torchtitan has no optimizer-only sharding; FSDP with reshard '
                     'never (ZeRO-2 memory: less than planned)')
    return 1, n.dp, 'never'


def program_words(options: ExportOptions, config_file: str) -> list[str]:
    """What torchrun runs: torchtitan's trainer (or ``--script``) reading the job config
    at ``config_file`` (shell text, already quoted) through ``--job.config_file``
    (torchtitan/config/manager.py ``ConfigManager.parse_args``)."""
    return [*script_words(options.script_or('-m torchtitan.train')),
            f'--job.config_file {config_file}']


def render(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> Export:
    """The TOML job config with the launch in comments."""
    tables, notes = job_config(plan, n)
    launch = command(torchrun_words(n, options) + program_words(options, 'torchtitan.toml'))
    notes = multi_node_notes(n, options) + notes
    lines = [*comments(header(plan, n, 'torchtitan')), '# Launch:',
             *comments(launch.splitlines()), *comments(f'NOTE: {note}' for note in notes),
             *toml_lines(tables)]
    return Export('\n'.join(lines) + '\n', 'torchtitan.toml', tuple(notes))
