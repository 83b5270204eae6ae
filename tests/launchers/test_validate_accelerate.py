"""accelerate exports: config loader, launch parser, env builders, torchrun (§3)."""

from __future__ import annotations

import pytest

from planner.export import ExportOptions, export_plan
from planner.memory.training import LoraSpec
from tests.export_helpers import make_plan, recorded_argv, run_script

pytest.importorskip('accelerate')

from tests.launchers.accelerate_check import accelerate_launch


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
    plan = make_plan(nodes=1, zero=0, global_batch=128)
    args, _, config = launched(tmp_path, export_plan(plan, 'accelerate').text)
    assert config.num_processes == 8
    launch = torchrun_launch(args)
    assert (launch.max_nodes, launch.nproc_per_node) == (1, 8)


def test_nested_keys_are_known():
    """accelerate does not check nested keys (§3): compare them with the plugin fields."""
    import dataclasses

    from accelerate.utils import DeepSpeedPlugin

    from planner.export.accelerate import accelerate_config
    from planner.export.batch import check_candidate

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
