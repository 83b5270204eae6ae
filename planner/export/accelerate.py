"""``accelerate launch`` script with its config YAML.

The flags and keys are accelerate's (src/accelerate/commands/launch.py and
src/accelerate/commands/config/config_args.py).

The script writes the YAML (a quoted heredoc: nothing in it is expanded) to a
temporary file and launches with it. ``num_processes`` is the **total** over all
machines (accelerate floors ``num_processes // num_machines`` silently). The
accumulation flag exists only for DeepSpeed: under DDP or FSDP the script must pass
``gradient_accumulation_steps`` to ``Accelerator(...)``, which a comment says.
Multi-machine DeepSpeed uses the ``standard`` launcher (torchrun on each node, no
pdsh/ssh).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.export.base import (
    Export,
    ExportOptions,
    header,
    hybrid_shard_sizes,
    liger_notes,
    lora_notes,
    precision_kind,
    refuse,
    require_data_parallel,
    sharding_backend,
)
from planner.export.launch import (
    bash_script,
    exports,
    launch_line,
    master_addr_word,
    multi_node_notes,
    node_rank_ref,
    plan_variables,
    script_words,
)
from planner.export.textfmt import yaml_lines

if TYPE_CHECKING:
    from planner.planfile.document import PlanFile
    from planner.plans.batch import BatchNumbers

HEREDOC = 'BATCHFIT_ACCELERATE_CONFIG'


def accelerate_config(plan: PlanFile, n: BatchNumbers, options: ExportOptions,
                      fmt: str = 'accelerate') -> tuple[dict[str, Any], list[str]]:
    """The ``ClusterConfig`` YAML fields, and notes.

    Raises:
        InputError: TP/PP/CP layouts, FSDP with ZeRO-1, pure bf16 with DeepSpeed, or HSDP
            outside FSDP.
    """
    require_data_parallel(plan, fmt)
    c, notes = plan.candidate, []
    backend = sharding_backend(plan, options, fmt)
    kind = precision_kind(plan)
    mixed = {'bf16': 'bf16', 'fp16': 'fp16', 'fp8': 'fp8'}.get(kind, 'no')
    config: dict[str, Any] = {
        'compute_environment': 'LOCAL_MACHINE',
        'distributed_type': 'MULTI_GPU' if n.world_size > 1 else 'NO',
        'num_machines': n.nodes, 'num_processes': n.world_size, 'machine_rank': 0,
        'mixed_precision': mixed, 'use_cpu': False, 'downcast_bf16': 'no',
    }
    if n.nodes > 1:
        config.update(rdzv_backend=options.rdzv, same_network=True,
                      main_process_port=options.master_port)
        if options.master_addr is not None:
            config['main_process_ip'] = options.master_addr
    if backend == 'deepspeed':
        if kind == 'bf16-pure':
            raise refuse(fmt, 'DeepSpeed keeps fp32 master weights; the plan trains in pure '
                         'bf16', 're-plan with --precision bf16-mixed, or --sharding fsdp')
        config['distributed_type'] = 'DEEPSPEED'
        config['deepspeed_config'] = {
            'zero_stage': c.zero, 'gradient_accumulation_steps': n.grad_accum,
            'gradient_clipping': 1.0, 'offload_optimizer_device': 'none',
            'offload_param_device': 'none', 'zero3_init_flag': c.zero == 3,
            'zero3_save_16bit_model': c.zero == 3, 'deepspeed_multinode_launcher': 'standard'}
    else:
        notes.append(f'accelerate cannot set the accumulation for {backend.upper()}: create '
                     f'Accelerator(gradient_accumulation_steps={n.grad_accum}) in your script')
    if backend == 'fsdp':
        config['distributed_type'] = 'FSDP'
        config['fsdp_config'] = {
            'fsdp_version': 2, 'fsdp_reshard_after_forward': c.zero == 3,
            'fsdp_auto_wrap_policy': 'TRANSFORMER_BASED_WRAP',
            'fsdp_state_dict_type': 'SHARDED_STATE_DICT', 'fsdp_offload_params': False,
            'fsdp_cpu_ram_efficient_loading': True,
            'fsdp_activation_checkpointing': c.recompute != 'none'}
    elif c.recompute != 'none':
        notes.append('activation recompute: call model.gradient_checkpointing_enable() in '
                     'your script (accelerate has no flag for it)')
    hsdp = hybrid_shard_sizes(plan, n, backend, fmt)
    if hsdp is not None:
        # HSDP: ClusterConfig.parallelism_config, whose keys `accelerate launch` copies onto
        # its --parallelism_config_* flags and exports as PARALLELISM_CONFIG_* for
        # ParallelismConfig (src/accelerate/commands/launch.py _validate_launch_command;
        # src/accelerate/utils/launch.py prepare_extend_env_parallelism_config)
        config['parallelism_config'] = {'parallelism_config_dp_replicate_size': hsdp[0],
                                        'parallelism_config_dp_shard_size': hsdp[1]}
    if kind == 'bf16-pure':
        notes.append('pure bf16: load the model in torch.bfloat16 (mixed_precision stays no)')
    if kind == 'tf32':
        notes.append('tf32: set torch.backends.cuda.matmul.allow_tf32 = True in your script')
    notes.append(f'your DataLoader yields micro-batches of {n.micro_batch} per process; the '
                 'BATCHFIT_* variables carry the plan numbers to your script')
    return config, notes + lora_notes(plan) + liger_notes(plan)


def launch_words(n: BatchNumbers, options: ExportOptions) -> list[str]:
    """``accelerate launch`` and the flags that differ per node."""
    words = ['accelerate launch', '--config_file "$config"']
    if n.nodes > 1:
        words.append(f'--machine_rank {node_rank_ref(n.nodes)}')
        if options.master_addr is None:
            words.append(f'--main_process_ip {master_addr_word(options)}')
    return words


def render(plan: PlanFile, n: BatchNumbers, options: ExportOptions) -> Export:
    """The launch script with its embedded config."""
    config, notes = accelerate_config(plan, n, options)
    notes = multi_node_notes(n, options) + notes
    body = [
        *exports(plan_variables(plan, n)),
        'config="$(mktemp)"',
        "trap 'rm -f -- \"$config\"' EXIT",
        f"cat > \"$config\" <<'{HEREDOC}'",
        *yaml_lines(config),
        HEREDOC,
        launch_line(launch_words(n, options) + script_words(options.script_or('train.py'),
                                                             options.script_args)),
    ]
    text = bash_script(header(plan, n, 'accelerate'), notes, body)
    return Export(text, 'launch_accelerate.sh', tuple(notes))
