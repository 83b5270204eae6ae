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


SLURM_ENV = {'SLURM_JOB_ID': '4242', 'SLURM_NNODES': '2',
             'SLURM_JOB_NODELIST': 'gpu-node-[007-008]'}


def config_file(argv: list[str], flag: str, folder):
    """The file after ``flag`` in the payload's argv, written by the script's heredoc."""
    path = folder / argv[argv.index(flag) + 1]
    assert path.name.endswith(('-4242.toml', '-4242.json')), path  # one file per job
    return path


@pytest.mark.filterwarnings('ignore::DeprecationWarning')  # torch.jit, imported by torchtitan
def test_torchtitan_plan_runs_torchtitan_with_its_job_config(tmp_path):
    """The torchtitan format's job config, read by torchtitan's own ConfigManager."""
    import importlib.util

    if importlib.util.find_spec('torchtitan') is None:
        pytest.skip('torchtitan is not installed')
    from tests.launchers.torchtitan_check import parse_job_config

    plan = make_plan(model='llama-3.1-8b', nodes=2, tp=2, pp=2, zero=3, micro_batch=1,
                     global_batch=256, seq_len=4096, framework='torchtitan')
    c = plan.candidate
    text = export_plan(plan, 'slurm').text
    assert NO_CONTROLLER in sbatch_test_only(text, tmp_path).stderr
    run_script(text, tmp_path, SLURM_ENV)
    argv = recorded_argv(tmp_path, 'torchrun')
    check_launch(argv, 2, 8)
    assert argv[argv.index('-m') + 1] == 'torchtitan.train'
    config = parse_job_config(config_file(argv, '--job.config_file', tmp_path))
    p = config.parallelism
    assert (p.tensor_parallel_degree, p.pipeline_parallel_degree, p.data_parallel_shard_degree,
            p.context_parallel_degree) == (c.tp, c.pp, c.dp, c.cp)
    assert config.training.global_batch_size == 256
    assert config.training.seq_len == 4096
    # the same tables as the torchtitan format writes
    from planner.toml_compat import tomllib

    assert tomllib.loads(export_plan(plan, 'torchtitan').text) == tomllib.loads(
        config_file(argv, '--job.config_file', tmp_path).read_text())


@pytest.mark.parametrize(('framework', 'payload', 'pp', 'zero'), [
    ('deepspeed', None, 2, 1), ('deepspeed', None, 1, 0), ('hf-deepspeed', 'deepspeed', 1, 2),
    ('hf-deepspeed', None, 1, 3), ('hf-deepspeed', 'hf', 1, 1)])
def test_deepspeed_plans_run_deepspeed_with_their_zero_stage(tmp_path, framework, payload, pp,
                                                             zero):
    """The DeepSpeed pipeline: the user's script with the deepspeed format's config; HF +
    DeepSpeed: the Trainer with its inline config (or the user's DeepSpeed script)."""
    pytest.importorskip('deepspeed')
    import json

    from tests.launchers.deepspeed_check import deepspeed_config

    plan = make_plan(nodes=2, pp=pp, zero=zero, global_batch=256, framework=framework)
    c = plan.candidate
    text = export_plan(plan, 'slurm', ExportOptions(payload=payload)).text
    assert NO_CONTROLLER in sbatch_test_only(text, tmp_path).stderr
    run_script(text, tmp_path, SLURM_ENV)
    argv = recorded_argv(tmp_path, 'torchrun')
    check_launch(argv, 2, 8)
    if payload == 'hf' or (framework == 'hf-deepspeed' and payload is None):
        doc = json.loads(argv[argv.index('--deepspeed') + 1])
    else:
        assert '--deepspeed' in argv
        path = config_file(argv, '--deepspeed_config', tmp_path)
        doc = json.loads(path.read_text())
        assert doc == json.loads(export_plan(plan, 'deepspeed').text)  # the format's config
        assert recorded_env(tmp_path, 'torchrun')['BATCHFIT_PP'] == str(pp)
    config = deepspeed_config(doc, dp=c.dp)
    assert config.zero_optimization_stage == zero
    assert config.train_batch_size == 256


@pytest.mark.parametrize(('framework', 'payloads'), [
    ('hf', ('torchrun', 'hf')), ('hf-deepspeed', ('hf', 'deepspeed')),
    ('torchtitan', ('torchtitan',)), ('megatron', ('megatron',)),
    ('deepspeed', ('deepspeed',))])
def test_payloads_follow_the_stack(capsys, tmp_path, framework, payloads):
    """A payload the plan's stack does not run is refused (CLI: one line, exit 2)."""
    from planner.cli.main import EXIT_BAD_INPUT
    from planner.errors import InputError
    from planner.export.base import PAYLOADS
    from planner.planfile.document import write_plan
    from tests.cli_helpers import run_cli

    zero = {'torchtitan': 3, 'hf': 0}.get(framework, 1)
    plan = make_plan(nodes=2, zero=zero, global_batch=256, framework=framework)
    path = tmp_path / 'plan.json'
    write_plan(path, plan)
    kinds = {}
    for payload in PAYLOADS:
        code, out, err = run_cli(capsys, 'export', str(path), '--format', 'slurm',
                                 '--payload', payload)
        if payload in payloads:
            assert code == 0, err
            kinds[payload] = out
            continue
        assert (code, out, err.count('\n')) == (EXIT_BAD_INPUT, '', 1)
        with pytest.raises(InputError, match=f'--payload: {payload} does not run the .* '
                           f'stack this plan was estimated for \\({framework}\\)'):
            export_plan(plan, 'slurm', ExportOptions(payload=payload))
    assert export_plan(plan, 'slurm').text == kinds[payloads[-1] if framework == 'hf'
                                                    else payloads[0]]
