"""accelerate exports: config loader, launch parser, env builders, torchrun."""

from __future__ import annotations

import pytest

from planner.export import ExportOptions, export_plan
from planner.memory.training import LoraSpec
from tests.export_helpers import edited, hsdp_plan, make_plan, recorded_argv, run_script

pytest.importorskip('accelerate')

from tests.launchers.accelerate_check import accelerate_launch, parallelism_config


def launched(tmp_path, text, rank='1'):
    run_script(text, tmp_path, {'NODE_RANK': rank, 'MASTER_ADDR': '10.0.0.1'})
    argv = recorded_argv(tmp_path, 'accelerate')
    assert argv[:3] == ['launch', '--config_file', argv[2]]
    argv[2] = str(tmp_path / 'calls' / 'accelerate_config.yaml')  # the script's temp copy
    home = tmp_path / 'hf_home'
    home.mkdir(exist_ok=True)
    return accelerate_launch(argv[1:], str(home))


def torchrun_launch(torchrun_args):
    from torch.distributed.run import config_from_args

    if torchrun_args.master_port is None:
        torchrun_args.master_port = 29500
    return config_from_args(torchrun_args)[0]


@pytest.mark.parametrize(('zero', 'sharding'), [(0, 'deepspeed'), (2, 'deepspeed'),
                                                (3, 'deepspeed'), (2, 'fsdp'), (3, 'fsdp')])
def test_two_nodes(tmp_path, zero, sharding):
    pytest.importorskip('deepspeed')
    # the stack decides the engine: accelerate's FSDP2 (hf) or DeepSpeed (hf-deepspeed)
    framework = 'hf' if sharding == 'fsdp' or not zero else 'hf-deepspeed'
    plan = make_plan(nodes=2, micro_batch=2, zero=zero, recompute='full', global_batch=256,
                     framework=framework)
    exported = export_plan(plan, 'accelerate', ExportOptions(sharding=sharding))
    args, env, config = launched(tmp_path, exported.text)
    assert config.num_processes == 16  # the total, not per node (accelerate #2521)
    assert config.num_machines == 2
    launch = torchrun_launch(args)
    assert launch.min_nodes == launch.max_nodes == 2
    assert launch.nproc_per_node == 8
    assert launch.rdzv_configs['rank'] == 1
    assert launch.rdzv_endpoint == '10.0.0.1:29500'
    c = plan.candidate
    if zero and sharding == 'deepspeed':
        assert env['ACCELERATE_GRADIENT_ACCUMULATION_STEPS'] == str(c.grad_accum)
        assert env['ACCELERATE_DEEPSPEED_ZERO_STAGE'] == str(zero)
    else:
        assert f'gradient_accumulation_steps={c.grad_accum}' in exported.text  # the comment
    if sharding == 'fsdp' and zero:
        assert env['FSDP_VERSION'] == '2'
        assert env['FSDP_ACTIVATION_CHECKPOINTING'] == 'true'
        assert env['FSDP_RESHARD_AFTER_FORWARD'] == str(zero == 3).lower()
    assert env['ACCELERATE_MIXED_PRECISION'] == 'bf16'


def test_one_node_c10d_free(tmp_path):
    plan = make_plan(nodes=1, zero=0, global_batch=128, framework='hf')
    args, _, config = launched(tmp_path, export_plan(plan, 'accelerate').text)
    assert config.num_processes == 8
    launch = torchrun_launch(args)
    assert (launch.max_nodes, launch.nproc_per_node) == (1, 8)


def test_nested_keys_are_known():
    """accelerate does not check nested keys: compare them with the plugin fields."""
    import dataclasses

    from accelerate.utils import DeepSpeedPlugin

    from planner.export.accelerate import accelerate_config
    from planner.plans.batch import check_candidate

    plan = make_plan(nodes=2, zero=3)
    config, _ = accelerate_config(plan, check_candidate(plan.candidate), ExportOptions())
    known = {f.name for f in dataclasses.fields(DeepSpeedPlugin)} | {
        'deepspeed_multinode_launcher'}
    known |= {'offload_optimizer_device', 'offload_param_device'}
    assert set(config['deepspeed_config']) <= known


@pytest.mark.parametrize(('zero', 'sharding'), [(0, 'deepspeed'), (3, 'deepspeed'), (3, 'fsdp')])
def test_lora_plan_launches(tmp_path, zero, sharding):
    if sharding == 'deepspeed' and zero:
        pytest.importorskip('deepspeed')
    plan = make_plan(nodes=2, micro_batch=2, zero=zero, recompute='full', global_batch=256,
                     lora=LoraSpec(16, ('q', 'k', 'v', 'o', 'gate', 'up', 'down'), 4))
    exported = export_plan(plan, 'accelerate', ExportOptions(sharding=sharding))
    assert '# NOTE: LoRA rank 16' in exported.text
    args, env, config = launched(tmp_path, exported.text)
    assert config.num_processes == 16
    assert torchrun_launch(args).nproc_per_node == 8
    assert env['ACCELERATE_MIXED_PRECISION'] == 'bf16'


@pytest.mark.parametrize('zero', [2, 3])
def test_hsdp_plan_launches_as_accelerate_parallelism_config(tmp_path, zero):
    """An hf HSDP plan: the config YAML's parallelism_config keys go through accelerate's
    own launch parser into the PARALLELISM_CONFIG_* variables, from which its
    ParallelismConfig has dp_replicate x dp_shard = the plan's DP, and FSDP2 shards over
    dp_shard: the group the memory model sharded the states over."""
    plan = hsdp_plan(zero=zero)
    c = plan.candidate
    exported = export_plan(plan, 'accelerate')
    _, env, config = launched(tmp_path, exported.text)
    assert config.distributed_type == 'FSDP'
    assert config.fsdp_config['fsdp_version'] == 2
    assert env['FSDP_VERSION'] == '2'
    assert env['FSDP_RESHARD_AFTER_FORWARD'] == str(zero == 3).lower()
    parallel = parallelism_config(env, world_size=c.gpus)
    assert parallel.dp_replicate_size == c.dp_replicate > 1
    assert parallel.dp_replicate_size * parallel.dp_shard_size == c.dp
    # fsdp2_prepare_model shards over these mesh dimensions (fsdp_utils.py)
    assert parallel.fsdp_dim_names == ['dp_replicate', 'dp_shard_cp']
    # the memory model's AdamW states (fp32 m and v, 8 bytes a parameter) over the group
    states = c.estimates['memory']['components']['optimizer_states']
    assert 8 * plan.model.spec.total_params() / states == pytest.approx(parallel.dp_shard_size)


def test_hsdp_needs_fsdp():
    """A plan file can say HSDP where accelerate cannot run it (DeepSpeed, DDP): refused."""
    from planner.errors import InputError

    plan = make_plan(nodes=2, zero=2, global_batch=256, framework='hf-deepspeed')
    plan = edited(plan, dp_replicate=2)
    for fmt in ('accelerate', 'hf', 'deepspeed'):
        with pytest.raises(InputError, match='HSDP'):
            export_plan(plan, fmt)


@pytest.mark.parametrize(('framework', 'zero'), [('hf', 0), ('hf', 2), ('hf-deepspeed', 3)])
def test_chunked_loss_plan_launches_with_the_liger_note(tmp_path, framework, zero):
    """accelerate runs the user's script: a --loss chunked plan is the same launch, with a
    NOTE saying to build the model through Liger (else it keeps the logits)."""
    if framework == 'hf-deepspeed':
        pytest.importorskip('deepspeed')
    plan = make_plan(nodes=2, micro_batch=2, zero=zero, recompute='full', global_batch=256,
                     framework=framework, loss='chunked')
    exported = export_plan(plan, 'accelerate')
    assert '# NOTE: --loss chunked' in exported.text
    assert 'AutoLigerKernelForCausalLM' in exported.text
    args, env, config = launched(tmp_path, exported.text)
    assert config.num_processes == 16
    assert torchrun_launch(args).nproc_per_node == 8
    assert env['ACCELERATE_MIXED_PRECISION'] == 'bf16'
