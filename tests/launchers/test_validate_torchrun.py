"""torchrun exports, parsed by torch.distributed.run itself (torch/distributed/run.py)."""

from __future__ import annotations

import pytest

from planner.export import ExportOptions, export_plan
from tests.export_helpers import make_plan, recorded_argv, recorded_env, run_script
from tests.launchers.torchrun_check import check_launch

pytest.importorskip('torch.distributed.run')

HOSTILE_SCRIPT = 'my dir/tr"ain $(touch pwned) `touch pwned2`; touch pwned3 \'q\'.py'


def test_single_node_is_standalone(tmp_path):
    plan = make_plan(nodes=1, gpus_per_node=8, micro_batch=4, global_batch=128, framework='hf')
    run_script(export_plan(plan, 'torchrun').text, tmp_path)
    argv = recorded_argv(tmp_path, 'torchrun')
    config, _script_args = check_launch(argv, 1, 8)
    assert config.rdzv_backend == 'c10d'  # --standalone
    assert argv[-1] == 'train.py'
    env = recorded_env(tmp_path, 'torchrun')
    assert int(env['BATCHFIT_MICRO_BATCH']) * int(env['BATCHFIT_GRAD_ACCUM']) * 8 == 128
    assert env['BATCHFIT_GLOBAL_BATCH'] == '128'


@pytest.mark.parametrize(('tp', 'pp', 'cp', 'zero', 'recompute'), [
    (2, 2, 1, 1, 'selective'), (1, 1, 2, 3, 'full'), (1, 1, 1, 0, 'none')])
def test_the_script_gets_the_whole_layout(tmp_path, tp, pp, cp, zero, recompute):
    """TP, PP, CP, DP, ZeRO and recompute reach the training script, not only a comment."""
    # a migrated schema-2 'hf' plan may split the model (torchrun is an hf launcher)
    plan = make_plan(nodes=2, tp=tp, pp=pp, cp=cp, zero=zero, recompute=recompute,
                     micro_batch=1, global_batch=128, framework='hf', precision='amp-bf16')
    c = plan.candidate
    for fmt in ('torchrun', 'slurm'):
        options = ExportOptions(payload='torchrun') if fmt == 'slurm' else ExportOptions()
        run_script(export_plan(plan, fmt, options).text, tmp_path,
                   {'NODE_RANK': '0', 'MASTER_ADDR': 'h0', 'SLURM_JOB_NODELIST': 'h0',
                    'SLURM_JOB_ID': '1'})
        env = recorded_env(tmp_path, 'torchrun')
        got = {k: env[f'BATCHFIT_{k.upper()}'] for k in ('tp', 'pp', 'vpp', 'cp', 'dp', 'zero',
                                                          'recompute')}
        assert got == {'tp': str(c.tp), 'pp': str(c.pp), 'vpp': str(c.vpp), 'cp': str(c.cp),
                       'dp': str(c.dp), 'zero': str(zero), 'recompute': recompute}
        assert int(got['tp']) * int(got['pp']) * int(got['cp']) * int(got['dp']) == 16
        assert int(env['BATCHFIT_MICRO_BATCH']) * int(env['BATCHFIT_GRAD_ACCUM']) * c.dp == 128


def test_multi_node_static_each_node_its_rank(tmp_path):
    plan = make_plan(nodes=4, gpus_per_node=8, micro_batch=2, global_batch=256, framework='hf')
    text = export_plan(plan, 'torchrun').text
    for rank in (0, 3):
        run_script(text, tmp_path, {'NODE_RANK': str(rank), 'MASTER_ADDR': '10.0.0.1'})
        config, _ = check_launch(recorded_argv(tmp_path, 'torchrun'), 4, 8)
        assert config.rdzv_backend == 'static'
        assert config.rdzv_endpoint == '10.0.0.1:29500'
        assert config.rdzv_configs['rank'] == rank


def test_multi_node_stops_without_node_rank(tmp_path):
    plan = make_plan(nodes=2, framework='hf')
    done = run_script(export_plan(plan, 'torchrun').text, tmp_path, {'MASTER_ADDR': 'h'},
                      check=False)
    assert done.returncode != 0
    assert 'set NODE_RANK' in done.stderr
    assert not (tmp_path / 'calls' / 'torchrun.argv').exists()


def test_multi_node_c10d(tmp_path):
    plan = make_plan(nodes=2, framework='hf')
    options = ExportOptions(rdzv='c10d', master_addr='head.example', master_port=29400,
                            rdzv_id='job-7')
    run_script(export_plan(plan, 'torchrun', options).text, tmp_path)
    config, _ = check_launch(recorded_argv(tmp_path, 'torchrun'), 2, 8)
    assert config.rdzv_backend == 'c10d'
    assert config.rdzv_endpoint == 'head.example:29400'
    assert config.run_id == 'job-7'


def test_hostile_script_and_args_arrive_verbatim(tmp_path):
    plan = make_plan(nodes=1, framework='hf')
    args = ('--data', '/d a/$HOME;x', '`id`', "it's")
    options = ExportOptions(script=HOSTILE_SCRIPT, script_args=args)
    run_script(export_plan(plan, 'torchrun', options).text, tmp_path)
    argv = recorded_argv(tmp_path, 'torchrun')
    _, _script_args = check_launch(argv, 1, 8)
    assert argv[-5:] == [HOSTILE_SCRIPT, *args]
    assert not list(tmp_path.glob('pwned*'))


@pytest.mark.parametrize('fmt', ['hf', 'megatron'])
def test_trainer_formats_launch_the_same_processes(tmp_path, fmt):
    plan = make_plan(nodes=2, framework='megatron' if fmt == 'megatron' else 'hf',
                     precision='bf16-mixed')
    run_script(export_plan(plan, fmt).text, tmp_path, {'NODE_RANK': '1', 'MASTER_ADDR': 'h0'})
    argv = recorded_argv(tmp_path, 'torchrun')
    config, _ = check_launch(argv, 2, 8)
    assert config.rdzv_configs['rank'] == 1


def test_chunked_loss_plan_launches_with_the_liger_note(tmp_path):
    """torchrun runs the user's script: a --loss chunked plan is the same launch (the
    script's arguments untouched), with a NOTE saying to build the model through Liger."""
    plan = make_plan(nodes=2, zero=2, global_batch=256, framework='hf', loss='chunked')
    text = export_plan(plan, 'torchrun').text
    assert '# NOTE: --loss chunked' in text
    assert 'apply_liger_kernel_to_llama()' in text
    run_script(text, tmp_path, {'NODE_RANK': '0', 'MASTER_ADDR': 'h0'})
    argv = recorded_argv(tmp_path, 'torchrun')
    check_launch(argv, 2, 8)
    assert argv[-1] == 'train.py'
