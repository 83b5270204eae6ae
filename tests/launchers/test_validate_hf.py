"""HF Trainer exports, parsed by transformers' HfArgumentParser(TrainingArguments)."""

from __future__ import annotations

import pytest

from planner.export import ExportOptions, export_plan
from planner.memory.training import LoraSpec
from tests.export_helpers import hsdp_plan, make_plan, recorded_argv, recorded_env, run_script
from tests.launchers.accelerate_check import parallelism_config
from tests.launchers.torchrun_check import check_launch

pytest.importorskip('transformers')
pytest.importorskip('accelerate')

from tests.launchers.hf_check import resolved_deepspeed_config, training_arguments

# --gradient_checkpointing is exported on purpose: transformers 4.x and 5.x both accept it
# (5.x calls it a deprecated alias of --activation_checkpointing in training_args.py).
pytestmark = pytest.mark.filterwarnings('ignore:`gradient_checkpointing` is deprecated')


def script_argv(folder, nodes, gpus_per_node, script='train.py') -> list[str]:
    argv = recorded_argv(folder, 'torchrun')
    check_launch(argv, nodes, gpus_per_node)
    return argv[argv.index(script) + 1:]


@pytest.mark.parametrize(('zero', 'precision', 'recompute'), [
    (0, 'amp-bf16', 'none'), (2, 'fp16-mixed', 'full'), (3, 'ds-bf16', 'full')])
def test_arguments_and_deepspeed_numbers(tmp_path, zero, precision, recompute):
    pytest.importorskip('deepspeed')
    from tests.launchers.deepspeed_check import deepspeed_config

    plan = make_plan(nodes=2, micro_batch=2, zero=zero, precision=precision,
                     recompute=recompute, global_batch=256,
                     framework='hf' if precision == 'amp-bf16' else 'hf-deepspeed')
    run_script(export_plan(plan, 'hf').text, tmp_path, {'NODE_RANK': '0', 'MASTER_ADDR': 'h'})
    args = training_arguments(script_argv(tmp_path, 2, 8))
    c = plan.candidate
    assert args.per_device_train_batch_size == c.micro_batch
    assert args.gradient_accumulation_steps == c.grad_accum
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * 16 == 256
    assert args.learning_rate == pytest.approx(plan.guidance.learning_rate, rel=1e-2)
    assert args.warmup_steps == plan.guidance.warmup_steps
    assert float(args.warmup_steps).is_integer()
    assert args.warmup_steps >= 1
    assert args.max_steps == plan.steps
    assert args.bf16 == (precision != 'fp16-mixed')
    assert args.fp16 == (precision == 'fp16-mixed')
    assert bool(args.gradient_checkpointing) == (recompute != 'none')
    if zero == 0:
        assert not args.deepspeed
        return
    ds = resolved_deepspeed_config(args, c.dp, plan.model.spec.hidden_size, plan.steps)
    assert ds['train_batch_size'] == 256
    assert ds['zero_optimization']['stage'] == zero
    deepspeed_config(ds, dp=c.dp)


def test_deepspeed_mismatch_is_caught_at_another_world_size(tmp_path):
    plan = make_plan(nodes=2, zero=2, global_batch=256)
    run_script(export_plan(plan, 'hf').text, tmp_path, {'NODE_RANK': '0', 'MASTER_ADDR': 'h'})
    args = training_arguments(script_argv(tmp_path, 2, 8))
    with pytest.raises(ValueError, match='mismatch'):
        resolved_deepspeed_config(args, 8, plan.model.spec.hidden_size, plan.steps)


@pytest.mark.parametrize('zero', [2, 3])
def test_fsdp(tmp_path, zero):
    plan = make_plan(nodes=1, zero=zero, recompute='full', global_batch=128, framework='hf')
    text = export_plan(plan, 'hf', ExportOptions(sharding='fsdp', script='my train.py')).text
    run_script(text, tmp_path)
    args = training_arguments(script_argv(tmp_path, 1, 8, 'my train.py'))
    assert args.fsdp
    assert args.fsdp_config['reshard_after_forward'] is (zero == 3)
    assert args.fsdp_config['activation_checkpointing'] is True
    assert not args.deepspeed


def test_unknown_flag_would_be_caught():
    with pytest.raises(ValueError, match='not used by the HfArgumentParser'):
        training_arguments(['--per_device_train_batch_sz', '2'])


QLORA = LoraSpec(16, ('q', 'k', 'v', 'o', 'gate', 'up', 'down'), 4)  # all linear, 4-bit

@pytest.mark.parametrize(('zero', 'lora'), [(0, LoraSpec(8)), (3, QLORA)])
def test_lora_plan_arguments_still_parse(tmp_path, zero, lora):
    """A LoRA export is the same command with a NOTE: the Trainer still accepts it."""
    pytest.importorskip('deepspeed')
    from tests.launchers.deepspeed_check import deepspeed_config

    plan = make_plan(nodes=2, micro_batch=2, zero=zero, recompute='full', global_batch=256,
                     lora=lora)
    text = export_plan(plan, 'hf').text
    assert '# NOTE: LoRA rank' in text
    run_script(text, tmp_path, {'NODE_RANK': '0', 'MASTER_ADDR': 'h'})
    args = training_arguments(script_argv(tmp_path, 2, 8))
    c = plan.candidate
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (
        c.micro_batch, c.grad_accum)
    assert args.gradient_checkpointing
    if zero:
        ds = resolved_deepspeed_config(args, c.dp, plan.model.spec.hidden_size, plan.steps)
        assert ds['zero_optimization']['stage'] == zero
        deepspeed_config(ds, dp=c.dp)


@pytest.mark.parametrize('zero', [2, 3])
def test_hsdp_plan_reaches_the_trainers_accelerator(tmp_path, zero):
    """HSDP has no TrainingArguments flag: the script exports accelerate's variables, and
    with no parallelism_config argument the Trainer's Accelerator builds its
    ParallelismConfig from them: dp_replicate x dp_shard = the plan's DP, under FSDP2."""
    plan = hsdp_plan(zero=zero)
    c = plan.candidate
    run_script(export_plan(plan, 'hf').text, tmp_path, {'NODE_RANK': '0', 'MASTER_ADDR': 'h'})
    args = training_arguments(script_argv(tmp_path, c.nodes, c.gpus_per_node))
    assert args.fsdp
    assert args.fsdp_config['version'] == 2
    assert args.fsdp_config['reshard_after_forward'] is (zero == 3)
    assert args.parallelism_config is None  # else the Trainer passes its own (trainer.py)
    parallel = parallelism_config(recorded_env(tmp_path, 'torchrun'), world_size=c.gpus)
    assert (parallel.dp_replicate_size, parallel.dp_shard_size) == (
        c.dp_replicate, c.dp // c.dp_replicate)


@pytest.mark.parametrize(('framework', 'zero', 'payload'), [
    ('hf', 2, None), ('hf-deepspeed', 3, None), ('hf', 0, 'slurm')])
def test_chunked_loss_plan_switches_liger_on(tmp_path, framework, zero, payload):
    """A --loss chunked plan (Liger's fused linear cross-entropy, no logits) reaches the
    Trainer as use_liger_kernel, which makes it apply Liger's kernels to the model
    (transformers src/transformers/trainer.py); without --loss it stays off."""
    plan = make_plan(nodes=2, zero=zero, recompute='full', global_batch=256,
                     framework=framework, loss='chunked')
    env = {'NODE_RANK': '0', 'MASTER_ADDR': 'h', 'SLURM_JOB_NODELIST': 'gpu-node-[007-008]',
           'SLURM_JOB_ID': '42'}
    if payload is None:
        text = export_plan(plan, 'hf').text
    else:
        text = export_plan(plan, 'slurm', ExportOptions(payload='hf')).text
    assert '# NOTE: Liger' in text
    run_script(text, tmp_path, env)
    args = training_arguments(script_argv(tmp_path, 2, 8))
    assert args.use_liger_kernel is True
    assert args.liger_kernel_config is None  # Liger's defaults: its fused linear CE is on
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (
        plan.candidate.micro_batch, plan.candidate.grad_accum)
    plain = make_plan(nodes=2, zero=zero, recompute='full', global_batch=256,
                      framework=framework)
    run_script(export_plan(plain, 'hf').text, tmp_path, env)
    assert training_arguments(script_argv(tmp_path, 2, 8)).use_liger_kernel is False
