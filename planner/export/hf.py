"""Hugging Face Trainer: ``TrainingArguments`` flags, launched by torchrun.

The flags are transformers' (src/transformers/training_args.py).

Integer ``--warmup_steps`` (``--warmup_ratio`` is gone in transformers 5.23), one of
``--bf16``/``--fp16``, ``--gradient_checkpointing``, and ZeRO through an inline
DeepSpeed JSON (``--deepspeed '{...}'``) whose batch numbers equal the flags, so the
Trainer's own comparison catches a launch on the wrong number of GPUs. FSDP uses the
transformers 5 form (bare ``--fsdp`` and an inline ``--fsdp_config``). HSDP has no
Trainer flag (``TrainingArguments.parallelism_config`` is a Python object): the script
exports accelerate's ``PARALLELISM_CONFIG_*`` variables, from which the Trainer's
``Accelerator`` builds its ``ParallelismConfig`` (:func:`environment`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.export.base import (
    Export,
    ExportOptions,
    chunked_loss,
    header,
    hybrid_shard_sizes,
    learning_rate,
    lora_notes,
    precision_kind,
    require_data_parallel,
    sharding_backend,
)
from planner.export.deepspeed import deepspeed_dict
from planner.export.launch import (
    bash_script,
    exports,
    launch_line,
    multi_node_notes,
    script_words,
    torchrun_words,
)
from planner.export.shell import quote
from planner.export.textfmt import json_text

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

HF_OPTIMIZERS = {'adamw': 'adamw_torch', 'adam': 'adamw_torch', 'adamw-8bit': 'adamw_bnb_8bit',
                 'sgd': 'sgd', 'sgd-momentum': 'sgd', 'adafactor': 'adafactor'}


def training_arguments(plan: PlanFile, n: BatchNumbers, options: ExportOptions,
                       fmt: str = 'hf') -> tuple[dict[str, Any], list[str]]:
    """``TrainingArguments`` values (by field name) for the plan, and notes.

    Values are Python values (True for a bare flag); DeepSpeed and FSDP configs are dicts.

    Raises:
        InputError: the layout splits the model (TP/PP/CP), or FSDP with ZeRO-1.
    """
    require_data_parallel(plan, fmt)
    c, g, notes = plan.candidate, plan.guidance, []
    args: dict[str, Any] = {
        'output_dir': options.output_dir,
        'per_device_train_batch_size': n.micro_batch,
        'gradient_accumulation_steps': n.grad_accum,
    }
    if g.learning_rate is not None:
        args['learning_rate'] = learning_rate(plan)
    else:
        notes.append('no learning rate in the plan: the Trainer default (5e-5) applies; plan '
                     'with --base-lr and --base-batch')
    if g.warmup_steps is not None:
        args['warmup_steps'] = int(g.warmup_steps)
    if plan.steps is not None:
        args['max_steps'] = plan.steps
    notes += _precision(plan, args)
    backend = sharding_backend(plan, options, fmt)
    hybrid_shard_sizes(plan, n, backend, fmt)  # refuses HSDP outside FSDP2
    if backend == 'fsdp':
        args['fsdp'] = True
        args['fsdp_config'] = {'version': 2, 'reshard_after_forward': c.zero == 3,
                               'activation_checkpointing': c.recompute != 'none'}
    elif c.recompute != 'none':
        args['gradient_checkpointing'] = True
    if c.recompute == 'selective':
        notes.append('the Trainer has no selective recompute: full activation checkpointing '
                     'instead (less memory than planned, steps about a third slower)')
    if backend == 'deepspeed':
        config, ds_notes = deepspeed_dict(plan, n, fmt, standalone=False)
        args['deepspeed'] = config
        notes += ds_notes
    if chunked_loss(plan):
        # Liger's fused linear cross-entropy, as planned: the Trainer calls
        # _apply_liger_kernel_to_instance(model) (huggingface/transformers
        # src/transformers/trainer.py, src/transformers/integrations/liger.py)
        args['use_liger_kernel'] = True
        notes.append(liger_trainer_note(plan))
    optim = HF_OPTIMIZERS[plan.constraints.optimizer]
    args['optim'] = optim
    if plan.constraints.optimizer == 'sgd-momentum':
        args['optim_args'] = 'momentum=0.9'
    return args, notes


def liger_trainer_note(plan: PlanFile) -> str:
    """What the Trainer's Liger switch needs: the package (transformers raises without
    it), and a ``PreTrainedModel`` of a type Liger patches (another model is only warned
    about, and keeps its logits: src/transformers/integrations/liger.py)."""
    return (f"Liger's kernels (the planned --loss chunked, its fused linear cross-entropy): "
            f'pip install liger-kernel; the model must be a transformers PreTrainedModel '
            f'of model_type {plan.model.spec.hf_model_type}, as planned')


def environment(plan: PlanFile, n: BatchNumbers, options: ExportOptions,
                fmt: str = 'hf') -> dict[str, object]:
    """The variables that make the Trainer's ``Accelerator`` run the plan's HSDP (empty
    without HSDP).

    The Trainer passes no ``parallelism_config`` unless its argument is set, and then
    ``Accelerator`` builds ``ParallelismConfig()`` from these (huggingface/accelerate
    src/accelerate/accelerator.py ``ACCELERATE_USE_PARALLELISM_CONFIG``;
    src/accelerate/parallelism_config.py ``__post_init__``), as ``accelerate launch``
    would export them (src/accelerate/utils/launch.py
    ``prepare_extend_env_parallelism_config``).
    """
    hsdp = hybrid_shard_sizes(plan, n, sharding_backend(plan, options, fmt), fmt)
    if hsdp is None:
        return {}
    return {'ACCELERATE_USE_PARALLELISM_CONFIG': 'true',
            'PARALLELISM_CONFIG_DP_REPLICATE_SIZE': hsdp[0],
            'PARALLELISM_CONFIG_DP_SHARD_SIZE': hsdp[1]}


def _precision(plan: PlanFile, args: dict[str, Any]) -> list[str]:
    kind = precision_kind(plan)
    if kind in ('bf16', 'fp8'):
        args['bf16'] = True
    elif kind == 'fp16':
        args['fp16'] = True
    elif kind == 'tf32':
        args['tf32'] = True
    if kind == 'fp8':
        return ['the Trainer flags have no fp8 recipe: bf16 instead (less memory than planned, '
                'slower GEMMs)']
    if kind == 'bf16-pure':
        return ['pure bf16: load the model with torch_dtype=torch.bfloat16 in your script '
                '(no --bf16: autocast would keep fp32 weights and need more memory)']
    return []


def argv(args: dict[str, Any]) -> list[str]:
    """Command-line fragments (``--name value``, quoted) for ``training_arguments`` values."""
    words: list[str] = []
    for name, value in args.items():
        if value is True and name in ('bf16', 'fp16', 'gradient_checkpointing', 'fsdp'):
            words.append(f'--{name}')
            continue
        if isinstance(value, dict):
            value = json_text(value, indent=None)
        elif isinstance(value, bool):
            value = str(value).lower()
        words.append(f'--{name} {quote(value, f"--{name}")}')
    return words


def render(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> Export:
    """torchrun + the Trainer script + TrainingArguments flags."""
    args, notes = training_arguments(plan, n, options)
    notes = multi_node_notes(n, options) + notes + lora_notes(plan)
    words = (torchrun_words(n, options) + script_words(options.script_or('train.py'))
             + argv(args) + [quote(a, 'script argument') for a in options.script_args])
    body = [*exports(environment(plan, n, options)), launch_line(words)]
    text = bash_script(header(plan, n, 'Hugging Face Trainer'), notes, body)
    return Export(text, 'launch_hf.sh', tuple(notes))
