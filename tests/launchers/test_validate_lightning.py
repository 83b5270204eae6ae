"""Lightning exports: the Trainer LightningCLI builds from the YAML, with CUDA faked."""

from __future__ import annotations

import contextlib
from unittest import mock

import pytest

from planner.export import ExportOptions, export_plan
from planner.memory.training import LoraSpec
from tests.export_helpers import hsdp_plan, make_plan

pytest.importorskip('lightning')
yaml = pytest.importorskip('yaml')
# With slurm-client installed (for the sbatch test), Lightning hints at srun.
pytestmark = pytest.mark.filterwarnings('ignore:The `srun` command is available')


@contextlib.contextmanager
def eight_fake_gpus():
    """What the Trainer asks about CUDA, answered as on an 8-GPU node."""
    with contextlib.ExitStack() as stack:
        for target in ('lightning.fabric.accelerators.cuda.num_cuda_devices',
                       'lightning.pytorch.accelerators.cuda.num_cuda_devices',
                       'torch.cuda.device_count'):
            stack.enter_context(mock.patch(target, return_value=8))
        stack.enter_context(mock.patch('torch.cuda.is_available', return_value=True))
        stack.enter_context(mock.patch('torch.cuda.is_bf16_supported', return_value=True))
        stack.enter_context(mock.patch(
            'lightning.pytorch.accelerators.cuda._check_cuda_matmul_precision'))
        yield


def trainer_from(text: str):
    from jsonargparse import Namespace  # noqa: F401  (LightningCLI's parser)
    from lightning.pytorch import Trainer

    settings = yaml.safe_load(text)['trainer']
    strategy = settings['strategy']
    if isinstance(strategy, dict):  # class_path form, as LightningCLI instantiates it
        from lightning.pytorch import strategies

        cls = getattr(strategies, strategy['class_path'].rsplit('.', 1)[1])
        settings['strategy'] = cls(**strategy.get('init_args', {}))
    with eight_fake_gpus():
        return Trainer(**settings, logger=False, enable_checkpointing=False)


@pytest.mark.parametrize(('zero', 'sharding', 'strategy'), [
    (0, 'deepspeed', 'DDPStrategy'), (2, 'deepspeed', 'DeepSpeedStrategy'),
    (3, 'fsdp', 'FSDPStrategy')])
def test_trainer_accepts_settings(zero, sharding, strategy):
    if sharding == 'deepspeed' and zero:
        pytest.importorskip('deepspeed')
    # the hf stack shards with DeepSpeed under LoRA only (FSDP2 otherwise)
    lora = LoraSpec(8, ('q', 'v')) if sharding == 'deepspeed' and zero else None
    plan = make_plan(nodes=2, zero=zero, global_batch=256, framework='hf', lora=lora)
    exported = export_plan(plan, 'lightning', ExportOptions(sharding=sharding))
    trainer = trainer_from(exported.text)
    assert type(trainer.strategy).__name__ == strategy
    assert trainer.num_nodes == 2
    assert trainer.num_devices == 8
    assert trainer.world_size == 16
    assert trainer.accumulate_grad_batches == plan.candidate.grad_accum
    assert trainer.max_steps == plan.steps
    assert trainer.precision == 'bf16-mixed'
    assert f'batch_size must be the micro-batch, {plan.candidate.micro_batch}' in exported.text


# Lightning 2.6.6 itself uses jsonargparse APIs that 4.53 deprecates.
@pytest.mark.filterwarnings('ignore::DeprecationWarning')
def test_lightning_cli_reads_the_yaml(tmp_path):
    pytest.importorskip('jsonargparse')
    from lightning.pytorch import LightningDataModule, LightningModule
    from lightning.pytorch.cli import LightningCLI

    plan = make_plan(nodes=1, zero=0, global_batch=64, micro_batch=2, framework='hf')
    path = tmp_path / 'lightning.yaml'
    path.write_text(export_plan(plan, 'lightning').text)
    with eight_fake_gpus(), mock.patch('sys.argv', ['train.py']):
        cli = LightningCLI(LightningModule, LightningDataModule, run=False,
                           args=['--config', str(path)], save_config_callback=None,
                           seed_everything_default=False)
    assert cli.trainer.accumulate_grad_batches == plan.candidate.grad_accum
    assert cli.trainer.num_devices == 8


def test_lora_plan_trainer_accepts_settings():
    plan = make_plan(nodes=2, zero=0, global_batch=256, lora=LoraSpec(8, ('q', 'v')))
    exported = export_plan(plan, 'lightning')
    assert "# NOTE: LoRA rank 8 (q, v; base 16-bit)" in exported.text
    trainer = trainer_from(exported.text)
    assert trainer.world_size == 16
    assert trainer.accumulate_grad_batches == plan.candidate.grad_accum


@pytest.mark.parametrize('zero', [2, 3])
def test_hsdp_plan_is_fsdp_hybrid_shard_over_the_replica_mesh(zero):
    """Lightning's FSDPStrategy runs HSDP as FSDP's hybrid strategies over a
    (replication size, sharding size) device_mesh (LightningCLI reads the YAML list as
    the tuple the annotation asks for)."""
    from torch.distributed.fsdp import ShardingStrategy

    plan = hsdp_plan(zero=zero)
    c = plan.candidate
    strategy = trainer_from(export_plan(plan, 'lightning').text).strategy
    assert type(strategy).__name__ == 'FSDPStrategy'
    assert strategy.sharding_strategy == (ShardingStrategy.HYBRID_SHARD if zero == 3
                                          else ShardingStrategy._HYBRID_SHARD_ZERO2)
    replicas, shard = tuple(strategy.kwargs['device_mesh'])
    assert (replicas, shard) == (c.dp_replicate, c.dp // c.dp_replicate)
    assert replicas * shard == strategy.world_size


@pytest.mark.parametrize('zero', [0, 2])
def test_chunked_loss_plan_trainer_accepts_settings(zero):
    """Lightning runs the user's LightningModule: a --loss chunked plan is the same Trainer,
    with a NOTE saying to build the model through Liger."""
    plan = make_plan(nodes=2, zero=zero, global_batch=256, framework='hf', loss='chunked')
    exported = export_plan(plan, 'lightning')
    assert '# NOTE: --loss chunked' in exported.text
    assert 'AutoLigerKernelForCausalLM' in exported.text
    trainer = trainer_from(exported.text)
    assert trainer.world_size == 16
    assert trainer.accumulate_grad_batches == plan.candidate.grad_accum
