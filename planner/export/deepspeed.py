"""DeepSpeed config JSON (deepspeed/runtime/config.py, DeepSpeed 0.19).

``train_batch_size`` is micro-batch × accumulation × **DP** (DeepSpeed's "world size"
is the data-parallel size), and all three batch fields are written, so DeepSpeed never
derives one by floor division. JSON has no comments: what the config cannot express
goes to the notes (printed on stderr by ``batchfit export``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.export.base import (
    Export,
    ExportOptions,
    learning_rate,
    liger_notes,
    lora_notes,
    precision_kind,
    refuse,
    refuse_hybrid_shard,
)
from planner.export.textfmt import json_text

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

DS_OPTIMIZERS = {'adamw': 'AdamW', 'adam': 'Adam'}


def deepspeed_dict(plan: PlanFile, n: BatchNumbers, fmt: str = 'deepspeed', *,
                   standalone: bool = True) -> tuple[dict[str, Any], list[str]]:
    """The DeepSpeed config for the plan, and notes.

    Args:
        plan: the plan.
        n: its checked batch numbers.
        fmt: the export format (named in refusals).
        standalone: for ``deepspeed.initialize`` itself: adds the optimizer, the
            warmup scheduler and activation checkpointing. Under the HF Trainer or
            accelerate those come from the Trainer's own arguments instead.

    Raises:
        InputError: pure bf16 (DeepSpeed keeps fp32 master weights).
    """
    c, notes = plan.candidate, []
    precision = precision_kind(plan)
    if precision == 'bf16-pure':
        raise refuse(fmt, 'DeepSpeed keeps fp32 master weights; the plan trains in pure bf16',
                     're-plan with --precision bf16-mixed, or export as torchrun')
    config: dict[str, Any] = {
        'train_batch_size': n.global_batch,
        'train_micro_batch_size_per_gpu': n.micro_batch,
        'gradient_accumulation_steps': n.grad_accum,
        'gradient_clipping': 1.0,
        'zero_optimization': {'stage': c.zero, 'overlap_comm': True,
                              'contiguous_gradients': True},
    }
    if precision in ('bf16', 'fp8'):
        config['bf16'] = {'enabled': True}
        if plan.candidate.precision == 'ds-bf16' and c.zero <= 1:
            # as planned: ZeRO 0-1 run the BF16_Optimizer with its fp32 gradient buffer
            # (deepspeedai/DeepSpeed deepspeed/runtime/engine.py _do_optimizer_sanity_check)
            config['data_types'] = {'grad_accum_dtype': 'fp32'}
        if precision == 'fp8':
            notes.append('DeepSpeed has no fp8 recipe: bf16 instead (no fp8 weight copies, '
                         'so less memory than planned, and slower GEMMs)')
    elif precision == 'fp16':
        config['fp16'] = {'enabled': True, 'loss_scale': 0, 'initial_scale_power': 16}
    if not standalone:
        return config, notes
    lr, warmup = learning_rate(plan), plan.guidance.warmup_steps
    optimizer = DS_OPTIMIZERS.get(plan.constraints.optimizer)
    if lr is not None and optimizer is not None:
        config['optimizer'] = {'type': optimizer, 'params': {'lr': lr}}
        params: dict[str, Any] = {'warmup_min_lr': 0.0, 'warmup_max_lr': lr,
                                  'warmup_num_steps': max(1, warmup or 1), 'warmup_type': 'linear'}
        if plan.steps is not None and plan.steps > params['warmup_num_steps']:
            config['scheduler'] = {'type': 'WarmupDecayLR',
                                   'params': {**params, 'total_num_steps': plan.steps}}
        else:
            config['scheduler'] = {'type': 'WarmupLR', 'params': params}
    elif lr is None:
        notes.append('no learning rate in the plan: the optimizer and scheduler are left to '
                     'your script (plan with --base-lr and --base-batch)')
    else:
        notes.append(f'DeepSpeed has no built-in {plan.constraints.optimizer} optimizer '
                     'here: pass your own to deepspeed.initialize(optimizer=...)')
    if c.recompute != 'none':
        # the plan's own choice: its memory and TP traffic were estimated with it
        partitioned = plan.constraints.partition_activations
        config['activation_checkpointing'] = {'partition_activations': partitioned,
                                              'contiguous_memory_optimization': False,
                                              'cpu_checkpointing': False}
        notes.append(f'recompute {c.recompute}: the activation_checkpointing block only acts '
                     'through deepspeed.checkpointing (Megatron-DeepSpeed); Hugging Face models '
                     'need model.gradient_checkpointing_enable()')
    return config, notes


def standalone_config(plan: PlanFile, n: BatchNumbers) -> tuple[dict[str, Any], list[str]]:
    """The config ``deepspeed.initialize`` reads for the plan, and notes (the ``deepspeed``
    format's JSON; ``slurm --payload deepspeed`` writes the same).

    Raises:
        InputError: HSDP, or pure bf16.
    """
    refuse_hybrid_shard(plan, 'deepspeed')
    config, notes = deepspeed_dict(plan, n)
    notes += lora_notes(plan) + liger_notes(plan)
    if n.model_parallel > 1:
        notes.append(f'tp x pp x cp = {n.model_parallel}: train_batch_size counts the {n.dp} '
                     'data-parallel ranks only; pass your model-parallel unit as mpu= to '
                     'deepspeed.initialize so DeepSpeed sees the same')
    if plan.candidate.pp > 1:
        notes.append(f'pipeline: build the model as deepspeed.pipe.PipelineModule(layers=..., '
                     f'num_stages={plan.candidate.pp}) and train with engine.train_batch() '
                     '(1F1B, no virtual stages)')
    return config, notes


def render(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> Export:
    """The DeepSpeed JSON."""
    config, notes = standalone_config(plan, n)
    return Export(json_text(config) + '\n', 'ds_config.json', tuple(notes))
