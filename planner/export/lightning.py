"""PyTorch Lightning ``Trainer`` settings as a LightningCLI YAML (src/lightning/pytorch/cli.py).

``devices`` is GPUs **per node** and ``num_nodes`` the nodes. Lightning does not check
``accumulate_grad_batches`` (0 and 2.5 pass), so batchfit's own check stands in. The
micro-batch lives in the user's DataLoader and the learning rate in the user's module:
both are comments. Under Slurm, Lightning wants one task per GPU: ``srun python``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.export.base import (
    Export,
    ExportOptions,
    header,
    hybrid_shard_sizes,
    learning_rate,
    liger_notes,
    lora_notes,
    precision_kind,
    require_data_parallel,
    sharding_backend,
)
from planner.export.shell import comments, quote
from planner.export.textfmt import yaml_lines

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

PRECISIONS = {'bf16': 'bf16-mixed', 'fp16': '16-mixed', 'fp32': '32-true', 'tf32': '32-true',
              'bf16-pure': 'bf16-true', 'fp8': 'bf16-mixed'}


def trainer_settings(plan: PlanFile, n: BatchNumbers, options: ExportOptions,
                     fmt: str = 'lightning') -> tuple[dict[str, Any], list[str]]:
    """``Trainer`` keyword arguments, and notes.

    Raises:
        InputError: TP/PP/CP layouts, or FSDP with ZeRO-1.
    """
    require_data_parallel(plan, fmt)
    c, notes = plan.candidate, []
    backend = sharding_backend(plan, options, fmt)
    kind = precision_kind(plan)
    if backend == 'ddp':
        strategy: Any = 'ddp' if n.world_size > 1 else 'auto'
    elif backend == 'deepspeed':
        strategy = f'deepspeed_stage_{c.zero}'
    else:
        strategy = {'class_path': 'lightning.pytorch.strategies.FSDPStrategy',
                    'init_args': {'sharding_strategy': 'FULL_SHARD' if c.zero == 3
                                  else 'SHARD_GRAD_OP'}}
    hsdp = hybrid_shard_sizes(plan, n, backend, fmt)
    if hsdp is not None:
        # HSDP: FSDP's hybrid strategies over a (replication size, sharding size) mesh
        # (Lightning-AI/pytorch-lightning src/lightning/pytorch/strategies/fsdp.py
        # device_mesh; pytorch/pytorch torch/distributed/fsdp/api.py ShardingStrategy)
        strategy['init_args'] = {
            'sharding_strategy': 'HYBRID_SHARD' if c.zero == 3 else '_HYBRID_SHARD_ZERO2',
            'device_mesh': list(hsdp)}
    trainer: dict[str, Any] = {
        'accelerator': 'gpu', 'devices': n.gpus_per_node, 'num_nodes': n.nodes,
        'strategy': strategy, 'precision': PRECISIONS[kind],
        'accumulate_grad_batches': n.grad_accum, 'gradient_clip_val': 1.0,
    }
    if plan.steps is not None:
        trainer['max_steps'] = plan.steps
    if kind == 'fp8':
        notes.append('fp8 is not a Trainer precision here: bf16-mixed instead')
    if kind == 'tf32':
        notes.append('tf32: call torch.set_float32_matmul_precision("high") in your script')
    notes.append(f'your DataLoader batch_size must be the micro-batch, {n.micro_batch}')
    g = plan.guidance
    if g.learning_rate is not None:
        notes.append(f'learning rate {learning_rate(plan)} with {g.warmup_steps} warmup steps: '
                     'set them in configure_optimizers (the Trainer has no LR setting)')
    if c.recompute != 'none':
        notes.append(f'recompute {c.recompute}: enable activation checkpointing in your '
                     'LightningModule (e.g. model.gradient_checkpointing_enable())')
    return trainer, notes + lora_notes(plan) + liger_notes(plan)


def render(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> Export:
    """The ``trainer:`` YAML with the launch in comments."""
    trainer, notes = trainer_settings(plan, n, options)
    script = quote(options.script_or('train.py'), '--script')
    launch = [f'python {script} fit --config lightning.yaml']
    if n.nodes > 1:
        launch = [f'under Slurm: #SBATCH --nodes={n.nodes} --ntasks-per-node={n.gpus_per_node}'
                  f' --gpus-per-node={n.gpus_per_node}, then: srun python {script} fit '
                  '--config lightning.yaml']
    lines = [*comments(header(plan, n, 'PyTorch Lightning (LightningCLI)')),
             *comments(f'Launch: {line}' for line in launch),
             *comments(f'NOTE: {note}' for note in notes),
             *yaml_lines({'trainer': trainer})]
    return Export('\n'.join(lines) + '\n', 'lightning.yaml', tuple(notes))
