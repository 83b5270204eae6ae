"""LLaMA-Factory training YAML (src/llamafactory/hparams/parser.py).

The HF Trainer keys (``per_device_train_batch_size``, ``gradient_accumulation_steps``,
``learning_rate``, integer ``warmup_steps``, ``bf16``, ``gradient_checkpointing``,
``deepspeed``) plus LLaMA-Factory's own (``stage: pt``, ``finetuning_type: full``, or
``lora`` with ``lora_rank``, ``lora_target`` and, for QLoRA, ``quantization_bit``).
The DeepSpeed config is embedded as a mapping. Multi-node runs are driven by
environment variables (``FORCE_TORCHRUN``, ``NNODES``, ``NODE_RANK``...), written in
the launch comment. The data set is the user's: a comment says where it goes.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from planner.export.base import (
    Export,
    ExportOptions,
    header,
    lora_modules,
    precision_kind,
)
from planner.export.hf import environment, liger_trainer_note, training_arguments
from planner.export.launch import master_addr_word, node_rank_ref
from planner.export.shell import comments
from planner.export.textfmt import yaml_lines

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers


def llamafactory_config(plan: PlanFile, n: BatchNumbers,
                        options: ExportOptions) -> tuple[dict[str, Any], list[str]]:
    """The YAML keys, and notes.

    Raises:
        InputError: as :func:`planner.export.hf.training_arguments`.
    """
    args, notes = training_arguments(plan, n, options, fmt='llamafactory')
    model = plan.model
    name = model.hf_id
    if model.kind == 'config':  # the checkpoint folder that holds the config.json
        name = str(PurePath(model.ref).parent) if model.ref.endswith('.json') else model.ref
    if not name:
        notes.append(f'set model_name_or_path to the checkpoint of {model.spec.name}')
    config: dict[str, Any] = {
        'model_name_or_path': name or f'<checkpoint of {model.spec.name}>',
        'stage': 'pt', 'do_train': True, 'finetuning_type': 'full',
        'cutoff_len': plan.targets.seq_len,
    }
    config.update(lora_keys(plan))
    spec = plan.constraints.lora_spec
    if spec is not None and spec.base_bits == 32 and precision_kind(plan) not in ('fp32', 'tf32'):
        notes.append('LLaMA-Factory loads the base in the compute dtype, not the planned fp32: '
                     'less memory than planned')
    config.update(args)
    config.pop('optim', None)  # LLaMA-Factory sets its own optimizer choice
    if config.pop('use_liger_kernel', False):
        # LLaMA-Factory applies Liger itself, before the model is built, from its model
        # argument (src/llamafactory/model/model_utils/liger_kernel.py; stage pt keeps the
        # fused linear cross-entropy), not from the Trainer's
        config['enable_liger_kernel'] = True
        notes = [note for note in notes if note != liger_trainer_note(plan)]
        notes.append("enable_liger_kernel: Liger's fused linear cross-entropy, the planned "
                     '--loss chunked (pip install liger-kernel: LLaMA-Factory stops without '
                     'it)')
    notes.append('add your data set: dataset (and template for sft) from data/dataset_info.json')
    return config, notes


def lora_keys(plan: PlanFile) -> dict[str, Any]:
    """``finetuning_type: lora`` and its keys for a LoRA plan (nothing for full training).

    ``lora_target`` is ``all`` (every linear layer but the head) or the module names;
    a quantized base is bitsandbytes' on-the-fly ``quantization_bit`` (NF4 with double
    quantization for 4 bits, LLaMA-Factory's defaults, written out as planned).
    LLaMA-Factory's ``lora_alpha`` (2 x rank) and ``lora_dropout`` (0) stay its defaults.
    """
    spec = plan.constraints.lora_spec
    if spec is None:
        return {}
    modules = lora_modules(plan)
    keys: dict[str, Any] = {'finetuning_type': 'lora', 'lora_rank': spec.rank,
                            'lora_target': 'all' if modules is None else ','.join(modules)}
    if spec.base_bits == 4:
        keys.update(quantization_bit=4, quantization_type='nf4', double_quantization=True)
    elif spec.base_bits == 8:
        keys['quantization_bit'] = 8
    return keys


def launch_text(n: BatchNumbers, options: ExportOptions,
                hsdp: dict[str, object] | None = None) -> str:
    """The ``llamafactory-cli`` line, with the variables its launcher reads (and
    ``hsdp``'s, which it hands on to torchrun: llamafactory/launcher.py copies
    ``os.environ``)."""
    if n.nodes == 1 and n.gpus_per_node == 1:
        return 'llamafactory-cli train llamafactory.yaml'
    env = [f'FORCE_TORCHRUN=1 NNODES={n.nodes} NPROC_PER_NODE={n.gpus_per_node}']
    env += [f'{name}={value}' for name, value in (hsdp or {}).items()]
    if n.nodes > 1:
        env.append(f'NODE_RANK={node_rank_ref(n.nodes)} MASTER_ADDR={master_addr_word(options)} '
                   f'MASTER_PORT={options.master_port}')
    return ' '.join([*env, 'llamafactory-cli train llamafactory.yaml'])


def render(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> Export:
    """The YAML with the launch in a comment."""
    config, notes = llamafactory_config(plan, n, options)
    launch = launch_text(n, options, environment(plan, n, options, 'llamafactory'))
    lines = [*comments(header(plan, n, 'LLaMA-Factory')),
             *comments([f'Launch: {launch}']),
             *comments(f'NOTE: {note}' for note in notes),
             *yaml_lines(config)]
    return Export('\n'.join(lines) + '\n', 'llamafactory.yaml', tuple(notes))
