"""Exporters without the launchers installed: numbers, refusals, notes, the CLI."""

from __future__ import annotations

import dataclasses
import json

import pytest

from planner.cli.main import EXIT_BAD_INPUT
from planner.errors import InputError
from planner.export import EXPORTERS, ExportOptions, export_plan
from planner.memory.training import LoraSpec
from planner.planfile.document import write_plan
from planner.plans.batch import check_candidate
from planner.toml_compat import tomllib
from tests.cli_helpers import run_cli
from tests.export_helpers import launch_comment, make_plan, recorded_argv, run_script


@pytest.fixture(scope='module')
def dp_plan():
    return make_plan(nodes=2, zero=2, recompute='selective', global_batch=256)


@pytest.fixture(scope='module')
def mp_plan():
    return make_plan(model='llama-3.1-8b', nodes=4, tp=2, pp=2, vpp=2, zero=1,
                     global_batch=256, micro_batch=1, seq_len=4096, framework='megatron',
                     precision='bf16-mixed')




@pytest.mark.parametrize('fmt', list(EXPORTERS))
def test_every_format_exports_a_data_parallel_plan(dp_plan, fmt):
    if fmt == 'megatron':  # ZeRO 2: Megatron's distributed optimizer is ZeRO-1
        with pytest.raises(InputError, match='re-plan with --zero 0,1'):
            export_plan(dp_plan, fmt)
        return
    exported = export_plan(dp_plan, fmt)
    assert exported.text.endswith('\n')
    assert exported.filename
    c = dp_plan.candidate
    if fmt != 'deepspeed':  # JSON has no comments; its notes go to stderr
        assert f'global batch 256 = micro-batch {c.micro_batch} x accumulation {c.grad_accum}' \
            f' x DP 16' in exported.text


@pytest.mark.parametrize('fmt', ['hf', 'accelerate', 'lightning', 'llamafactory'])
def test_data_parallel_launchers_refuse_model_parallel_plans(mp_plan, fmt):
    with pytest.raises(InputError, match=f'--format {fmt}: the plan splits the model'):
        export_plan(mp_plan, fmt)


@pytest.mark.parametrize('fmt', ['megatron', 'torchtitan', 'torchrun', 'slurm', 'deepspeed'])
def test_model_parallel_launchers_take_them(mp_plan, fmt):
    assert export_plan(mp_plan, fmt).text


def test_megatron_arguments(mp_plan):
    text = export_plan(mp_plan, 'megatron').text
    for expected in ('export CUDA_DEVICE_MAX_CONNECTIONS=1', '--tensor-model-parallel-size 2',
                     '--pipeline-model-parallel-size 2', '--micro-batch-size 1',
                     '--global-batch-size 256', '--num-layers-per-virtual-pipeline-stage 8',
                     '--sequence-parallel', '--use-distributed-optimizer', '--bf16',
                     f'--lr-warmup-iters {mp_plan.guidance.warmup_steps}'):
        assert expected in text
    megatron_flags = text.split('pretrain_gpt.py', 1)[1].split()
    assert not [w for w in megatron_flags if w.startswith('--') and '_' in w]  # dashed only


@pytest.mark.parametrize(('fmt', 'changes', 'message'), [
    ('megatron', {'zero': 3}, 'ZeRO 3'),
    ('hf', {'zero': 1}, 'FSDP has no ZeRO-1'),
])
def test_refusals(fmt, changes, message):
    plan = make_plan(nodes=1, global_batch=64, **changes)
    options = ExportOptions(sharding='fsdp')
    with pytest.raises(InputError, match=message):
        export_plan(plan, fmt, options)


@pytest.mark.parametrize(('fmt', 'precision', 'message'), [
    ('torchtitan', 'amp-fp16', 'fp32 or bf16'), ('deepspeed', 'bf16', 'pure bf16'),
    ('megatron', 'bf16', 'pure bf16')])
def test_precision_refusals(fmt, precision, message):
    plan = make_plan(nodes=1, zero=0, global_batch=64, precision=precision,
                     framework='megatron' if fmt == 'megatron' else 'hf')
    with pytest.raises(InputError, match=message):
        export_plan(plan, fmt)


@pytest.mark.parametrize('fmt', ['megatron', 'torchtitan'])
def test_more_pipeline_stages_than_layers_are_refused(mp_plan, fmt):
    """Only a hand-written plan file has them (pp 2 x 2 virtual stages for 3 layers)."""
    spec = dataclasses.replace(mp_plan.model.spec, num_layers=3)
    plan = dataclasses.replace(mp_plan, model=dataclasses.replace(mp_plan.model, spec=spec))
    with pytest.raises(InputError, match=f'--format {fmt}: pp 2 x 2 virtual stages'):
        export_plan(plan, fmt)
    spec = dataclasses.replace(spec, num_layers=5)  # 4 stages: one holds 2 layers
    assert export_plan(dataclasses.replace(plan, model=dataclasses.replace(
        plan.model, spec=spec)), fmt).text


def test_batch_identities_checked_before_export(dp_plan):
    broken = dataclasses.replace(dp_plan, candidate=dataclasses.replace(
        dp_plan.candidate, grad_accum=dp_plan.candidate.grad_accum + 1))
    for fmt in EXPORTERS:
        with pytest.raises(InputError, match='micro-batch × accumulation × DP'):
            export_plan(broken, fmt)
    with pytest.raises(InputError, match='not the 16 GPUs'):
        check_candidate(dataclasses.replace(dp_plan.candidate, dp=8))
    with pytest.raises(InputError, match='virtual stages'):
        check_candidate(dataclasses.replace(dp_plan.candidate, vpp=2))


def test_what_cannot_be_expressed_is_said(dp_plan):
    hf = export_plan(dp_plan, 'hf')
    assert any('no selective recompute' in n for n in hf.notes)
    assert '# NOTE: the Trainer has no selective recompute' in hf.text
    acc = export_plan(dp_plan, 'accelerate', ExportOptions(sharding='fsdp'))
    assert any('Accelerator(gradient_accumulation_steps=' in n for n in acc.notes)


def test_no_learning_rate_in_the_plan():
    plan = make_plan(nodes=1, zero=0, global_batch=64, base_lr=None, tokens=2e10)
    assert plan.guidance.learning_rate is not None  # DeepSeek's law stands in
    assert 'DeepSeek' in plan.guidance.learning_rate_source


def test_torchtitan_launch_comment_runs(tmp_path, mp_plan):
    text = export_plan(mp_plan, 'torchtitan', ExportOptions(master_addr='h0')).text
    tables = tomllib.loads(text)
    assert tables['training']['local_batch_size'] == mp_plan.candidate.grad_accum  # PP: all
    assert tables['parallelism']['pipeline_parallel_schedule'] == 'Interleaved1F1B'
    run_script(launch_comment(text), tmp_path, {'NODE_RANK': '1'})
    assert recorded_argv(tmp_path, 'torchrun')[:2] == ['--nnodes=4', '--nproc_per_node=8']


def test_export_cli(tmp_path, capsys, dp_plan):
    path = tmp_path / 'plan.json'
    write_plan(path, dp_plan)
    code, out, err = run_cli(capsys, 'export', str(path), '--format', 'deepspeed')
    assert code == 0, err
    assert json.loads(out)['train_batch_size'] == 256
    target = tmp_path / 'launch.sh'
    code, out, err = run_cli(capsys, 'export', str(path), '--format', 'hf', '-o', str(target),
                         '--script', 'run me.py', '--script-args', '--data', 'x y')
    assert code == 0
    assert out == ''
    assert 'batchfit: note:' in err
    text = target.read_text()
    assert "'run me.py'" in text
    assert "'x y'" in text


def test_export_cli_errors(tmp_path, capsys, mp_plan):
    path = tmp_path / 'plan.json'
    write_plan(path, mp_plan)
    code, out, err = run_cli(capsys, 'export', str(path), '--format', 'hf', '-o',
                         str(tmp_path / 'x.sh'))
    assert code == EXIT_BAD_INPUT
    assert out == ''
    assert err.startswith('batchfit: error: --format hf:')
    assert err.count('\n') == 1
    assert not (tmp_path / 'x.sh').exists()
    code, _, err = run_cli(capsys, 'export', str(path), '--format', 'nope')
    assert code == EXIT_BAD_INPUT
    code, _, err = run_cli(capsys, 'export', str(tmp_path / 'missing.json'), '--format', 'hf')
    assert code == EXIT_BAD_INPUT
    assert 'no such plan file' in err


# ---- LoRA / QLoRA plans ------------------------------------------------------------------

ALL_LINEAR = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')


@pytest.fixture(scope='module')
def lora_plan():
    return make_plan(nodes=2, zero=0, global_batch=256, lora=LoraSpec(16, ('q', 'v', 'down')))


@pytest.fixture(scope='module')
def qlora_plan():
    return make_plan(nodes=1, zero=3, recompute='full', global_batch=64,
                     lora=LoraSpec(64, ALL_LINEAR, 4))


@pytest.mark.parametrize('fmt', ['megatron', 'torchtitan'])
def test_launchers_without_lora_refuse_lora_plans(lora_plan, capsys, tmp_path, fmt):
    with pytest.raises(InputError, match=f'--format {fmt}: the plan fine-tunes LoRA adapters'):
        export_plan(lora_plan, fmt)
    path = tmp_path / 'plan.json'
    write_plan(path, lora_plan)
    code, out, err = run_cli(capsys, 'export', str(path), '--format', fmt)
    assert code == EXIT_BAD_INPUT
    assert out == ''
    assert err.count('\n') == 1
    with pytest.raises(InputError, match='--format megatron: the plan fine-tunes LoRA'):
        export_plan(lora_plan, 'slurm', ExportOptions(payload='megatron'))


@pytest.mark.parametrize('fmt', ['hf', 'accelerate', 'deepspeed', 'torchrun', 'lightning',
                                 'slurm'])
def test_peft_launchers_keep_their_command_and_say_which_lora_config(lora_plan, qlora_plan,
                                                                     fmt):
    full = export_plan(make_plan(nodes=2, zero=0, global_batch=256, framework='hf'), fmt)
    lora = export_plan(lora_plan, fmt)
    config = ("LoraConfig(r=16, target_modules=['q_proj', 'v_proj', 'down_proj'], "
              "task_type='CAUSAL_LM')")
    assert any(config in note for note in lora.notes)
    assert any('torch_dtype=torch.bfloat16' in note for note in lora.notes)
    assert not any('BitsAndBytesConfig' in note for note in lora.notes)
    assert not any('LoraConfig' in note for note in full.notes)
    if fmt != 'deepspeed':  # JSON has no comments: the notes go to stderr
        assert f'# NOTE: {next(n for n in lora.notes if config in n)}' in lora.text
        assert '# LoRA fine-tuning: rank 16 on q,v,down, 16-bit frozen base' in lora.text
        strip = [line for line in lora.text.splitlines() if not line.startswith('#')]
        assert strip == [line for line in full.text.splitlines() if not line.startswith('#')]
    q = export_plan(qlora_plan, fmt)
    note = next(n for n in q.notes if 'LoraConfig' in n)
    assert ("BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
            "bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16, "
            "bnb_4bit_quant_storage=torch.bfloat16)") in note  # ZeRO-3: storage as FSDP needs
    assert "LoraConfig(r=64, target_modules='all-linear', task_type='CAUSAL_LM')" in note
    assert any('enable_input_require_grads' in n for n in q.notes)  # with checkpointing


def test_llamafactory_lora_keys(lora_plan, qlora_plan):
    text = export_plan(lora_plan, 'llamafactory').text
    assert 'finetuning_type: "lora"' in text
    assert 'finetuning_type: "full"' not in text
    assert 'lora_rank: 16' in text
    assert 'lora_target: "q_proj,v_proj,down_proj"' in text
    assert 'quantization_bit' not in text
    text = export_plan(qlora_plan, 'llamafactory').text
    for line in ('lora_rank: 64', 'lora_target: "all"', 'quantization_bit: 4',
                 'quantization_type: "nf4"', 'double_quantization: true'):
        assert line in text
    full = export_plan(make_plan(nodes=1, zero=0, global_batch=64), 'llamafactory').text
    assert 'finetuning_type: "full"' in full
    assert 'lora_rank' not in full


def test_fused_projections_get_their_module_names():
    plan = make_plan(model='phi-3-mini', nodes=1, zero=0, global_batch=64, micro_batch=1,
                     lora=LoraSpec(8, ('q', 'v', 'up')))
    note = next(n for n in export_plan(plan, 'hf').notes if 'LoraConfig' in n)
    assert "target_modules=['qkv_proj', 'gate_up_proj']" in note
    gpt2 = make_plan(model='gpt2-124m', nodes=1, zero=0, global_batch=64, seq_len=1024,
                     lora=LoraSpec(8, ('q', 'v')))
    notes = export_plan(gpt2, 'hf').notes
    assert any('GPT-2 names them c_attn' in n for n in notes)
