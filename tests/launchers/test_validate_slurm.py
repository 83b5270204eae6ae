"""Slurm exports: ``sbatch --test-only`` with a dummy slurm.conf, and the srun line.

sbatch parses every ``#SBATCH`` option before it contacts the controller; with no
controller, "Unable to contact slurm controller" means the options were accepted.
``MessageTimeout=1`` keeps the failed contact instant (the default waits ~18 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from planner.export import ExportOptions, export_plan
from planner.memory.training import LoraSpec
from tests.export_helpers import (
    hsdp_plan,
    make_plan,
    recorded_argv,
    recorded_env,
    renamed,
    run_script,
)
from tests.launchers.torchrun_check import check_launch

SLURM_CONF = """ClusterName=batchfit-test
SlurmctldHost=localhost
AuthType=auth/none
CredType=cred/none
GresTypes=gpu
MessageTimeout=1
NodeName=gpu-node-[001-999] CPUs=64 Gres=gpu:8 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
NO_CONTROLLER = 'Unable to contact slurm controller'


def sbatch_test_only(script: str, folder) -> subprocess.CompletedProcess:
    if shutil.which('sbatch') is None:
        pytest.skip('sbatch not installed (apt-get install slurm-client)')
    conf = folder / 'slurm.conf'
    conf.write_text(SLURM_CONF)
    path = folder / 'train.sbatch'
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith('SLURM_')}
    env['SLURM_CONF'] = str(conf)
    return subprocess.run(['sbatch', '--test-only', str(path)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize('options', [
    ExportOptions(), ExportOptions(partition='gpu', time_limit='2-00:00:00', job_name='run.1')])
def test_sbatch_accepts_the_options(tmp_path, options):
    plan = make_plan(nodes=4)
    done = sbatch_test_only(export_plan(plan, 'slurm', options).text, tmp_path)
    assert NO_CONTROLLER in done.stderr, done.stderr
    assert 'unrecognized option' not in done.stderr
    assert 'Invalid' not in done.stderr


def test_sbatch_would_reject_a_bad_option(tmp_path):
    text = export_plan(make_plan(nodes=2), 'slurm').text.replace('--gpus-per-node',
                                                                  '--gpu-per-node')
    done = sbatch_test_only(text, tmp_path)
    assert NO_CONTROLLER not in done.stderr


def test_hostile_model_name_makes_a_plain_job_name(tmp_path):
    plan = renamed(make_plan(nodes=2), 'evil $(touch pwned) "x";\nrm -rf ~')
    text = export_plan(plan, 'slurm').text
    done = sbatch_test_only(text, tmp_path)
    assert NO_CONTROLLER in done.stderr, done.stderr
    run_script(text, tmp_path, {'SLURM_JOB_ID': '1', 'SLURM_JOB_NODELIST': 'x',
                                'SLURM_NNODES': '2'})
    assert not list(tmp_path.glob('pwned*'))


@pytest.mark.parametrize(('payload', 'framework', 'tp'), [
    ('torchrun', 'hf', 1), ('hf', 'hf', 1), ('megatron', 'megatron', 2)])
def test_srun_line_gives_each_node_the_c10d_rendezvous(tmp_path, payload, framework, tp):
    plan = make_plan(nodes=2, tp=tp, framework=framework, precision='bf16-mixed')
    text = export_plan(plan, 'slurm', ExportOptions(payload=payload)).text
    run_script(text, tmp_path, {'SLURM_JOB_ID': '4242', 'SLURM_NNODES': '2',
                                'SLURM_JOB_NODELIST': 'gpu-node-[007-008]'})
    assert recorded_argv(tmp_path, 'srun')[0] == 'torchrun'
    argv = recorded_argv(tmp_path, 'torchrun')
    config, _ = check_launch(argv, 2, 8)
    assert config.rdzv_backend == 'c10d'
    assert config.rdzv_endpoint == 'gpu-node-007:29500'
    assert config.run_id == '4242'
    assert not any('NODE_RANK' in arg or 'node_rank' in arg for arg in argv)
    env = recorded_env(tmp_path, 'torchrun')
    assert (env.get('CUDA_DEVICE_MAX_CONNECTIONS') == '1') == (tp > 1)


QLORA = LoraSpec(16, ('q', 'k', 'v', 'o', 'gate', 'up', 'down'), 4)  # all linear, 4-bit

@pytest.mark.parametrize('payload', ['hf', 'torchrun'])
def test_lora_plan_sbatch_and_srun(tmp_path, payload):
    plan = make_plan(nodes=2, zero=3, global_batch=256, lora=QLORA)
    text = export_plan(plan, 'slurm', ExportOptions(payload=payload)).text
    assert '# NOTE: LoRA rank 16' in text
    done = sbatch_test_only(text, tmp_path)
    assert NO_CONTROLLER in done.stderr, done.stderr
    run_script(text, tmp_path, {'SLURM_JOB_ID': '7', 'SLURM_NNODES': '2',
                                'SLURM_JOB_NODELIST': 'gpu-node-[007-008]'})
    check_launch(recorded_argv(tmp_path, 'torchrun'), 2, 8)


@pytest.mark.parametrize('payload', ['hf', 'torchrun'])
def test_hsdp_plan_sbatch_exports_the_replicas(tmp_path, payload):
    """An HSDP plan under srun: the Trainer payload gets accelerate's ParallelismConfig
    variables, a plain script BATCHFIT_DP_REPLICATE."""
    plan = hsdp_plan()
    c = plan.candidate
    text = export_plan(plan, 'slurm', ExportOptions(payload=payload)).text
    run_script(text, tmp_path, {'SLURM_JOB_ID': '4242', 'SLURM_NNODES': str(c.nodes),
                                'SLURM_JOB_NODELIST': 'gpu-node-[001-004]'})
    env = recorded_env(tmp_path, 'torchrun')
    if payload == 'hf':
        pytest.importorskip('accelerate')
        from tests.launchers.accelerate_check import parallelism_config

        parallel = parallelism_config(env, world_size=c.gpus)
        assert parallel.dp_replicate_size * parallel.dp_shard_size == c.dp
        assert parallel.dp_replicate_size == c.dp_replicate
    else:
        assert env['BATCHFIT_DP_REPLICATE'] == str(c.dp_replicate)
        assert 'PARALLELISM_CONFIG_DP_REPLICATE_SIZE' not in env


@pytest.mark.parametrize('payload', ['hf', 'torchrun'])
def test_chunked_loss_plan_sbatch_and_srun(tmp_path, payload):
    """A --loss chunked plan: the Trainer payload carries --use_liger_kernel (parsed by
    TrainingArguments in test_validate_hf.py), a plain script a NOTE with Liger's loader."""
    plan = make_plan(nodes=2, zero=2, global_batch=256, framework='hf', loss='chunked')
    text = export_plan(plan, 'slurm', ExportOptions(payload=payload)).text
    assert ('--use_liger_kernel true' in text) == (payload == 'hf')
    assert ('# NOTE: --loss chunked' in text) == (payload == 'torchrun')
    done = sbatch_test_only(text, tmp_path)
    assert NO_CONTROLLER in done.stderr, done.stderr
    run_script(text, tmp_path, {'SLURM_JOB_ID': '7', 'SLURM_NNODES': '2',
                                'SLURM_JOB_NODELIST': 'gpu-node-[007-008]'})
    argv = recorded_argv(tmp_path, 'torchrun')
    check_launch(argv, 2, 8)
    if payload == 'hf':
        assert argv[argv.index('--use_liger_kernel') + 1] == 'true'
    else:
        assert '--use_liger_kernel' not in argv
