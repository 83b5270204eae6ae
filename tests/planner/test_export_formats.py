"""Exporters without the launchers installed: numbers, refusals, notes, the CLI."""

from __future__ import annotations

import dataclasses
import json

import pytest

from planner.cli.main import EXIT_BAD_INPUT
from planner.errors import InputError
from planner.export import EXPORTERS, ExportOptions, export_plan, stack_formats
from planner.memory.training import LoraSpec
from planner.planfile.document import write_plan
from planner.plans.batch import check_candidate
from planner.stacks import STACKS
from planner.toml_compat import tomllib
from tests.cli_helpers import run_cli
from tests.export_helpers import edited, launch_comment, make_plan, recorded_argv, run_script


@pytest.fixture(scope='module')
def dp_plan():
    """A Hugging Face plan file from before stacks (schema 2, migrated: hf, amp-bf16) with a
    recompute mode the Trainer has not."""
    return make_plan(nodes=2, zero=2, recompute='selective', global_batch=256,
                     framework='hf', precision='amp-bf16')


@pytest.fixture(scope='module')
def tt_plan():
    return make_plan(model='llama-3.1-8b', nodes=4, tp=2, pp=2, vpp=2, zero=3,
                     global_batch=256, micro_batch=1, seq_len=4096, framework='torchtitan')


# A data-parallel plan of each stack, with a ZeRO stage it runs.
STACK_ZERO = {'hf': 2, 'hf-deepspeed': 2, 'torchtitan': 3, 'megatron': 1, 'deepspeed': 1}


@pytest.fixture(scope='module')
def stack_plans():
    return {key: make_plan(nodes=2, zero=zero, global_batch=256, framework=key)
            for key, zero in STACK_ZERO.items()}


@pytest.fixture(scope='module')
def mp_plan():
    return make_plan(model='llama-3.1-8b', nodes=4, tp=2, pp=2, vpp=2, zero=1,
                     global_batch=256, micro_batch=1, seq_len=4096, framework='megatron',
                     precision='bf16-mixed')




@pytest.mark.parametrize('stack', list(STACKS))
@pytest.mark.parametrize('fmt', list(EXPORTERS))
def test_a_plan_exports_to_its_own_stacks_launchers_only(stack_plans, tmp_path, capsys, stack,
                                                         fmt):
    """A plan and its export cannot diverge: another stack's launcher is refused (CLI:
    one line, exit 2), naming the plan's stack and the formats it runs."""
    plan = stack_plans[stack]
    assert plan.candidate.framework == stack
    path = tmp_path / 'plan.json'
    write_plan(path, plan)
    code, out, err = run_cli(capsys, 'export', str(path), '--format', fmt)
    if fmt not in STACKS[stack].launchers:
        with pytest.raises(InputError, match=f'--format {fmt}: the plan was estimated for the '
                           f'.* stack \\({stack}\\), which runs '):
            export_plan(plan, fmt)
        assert (code, out, err.count('\n')) == (EXIT_BAD_INPUT, '', 1)
        assert ', '.join(STACKS[stack].launchers) in err
        return
    exported = export_plan(plan, fmt)
    assert code == 0, err
    assert out == exported.text
    assert exported.text.endswith('\n')
    assert exported.filename
    c = plan.candidate
    if fmt != 'deepspeed':  # JSON has no comments; its notes go to stderr
        assert f'global batch 256 = micro-batch {c.micro_batch} x accumulation {c.grad_accum}' \
            f' x DP 16' in exported.text


def test_old_plans_keep_their_stacks_formats(tmp_path, capsys):
    """A schema-2 plan file (no stack: 'hf' or 'megatron') migrates to that stack and
    exports to its launchers, as before; another stack's are refused."""
    for framework, precision, zero, ok, refused in (
            ('hf', 'amp-bf16', 0, ('hf', 'accelerate', 'torchrun', 'slurm'),
             ('megatron', 'torchtitan', 'deepspeed')),
            ('megatron', 'bf16-mixed', 1, ('megatron', 'slurm'),
             ('hf', 'torchtitan', 'torchrun', 'deepspeed'))):
        plan = make_plan(nodes=1, zero=zero, global_batch=64, framework=framework,
                         precision=precision)
        data = plan.to_dict()
        data['schema'] = 'batchfit.plan/2'
        data['constraints'] = {k: v for k, v in data['constraints'].items()
                               if k not in ('loop', 'compile', 'async_tp')}
        data['candidate'] = {k: v for k, v in data['candidate'].items()
                             if k not in ('framework', 'precision', 'ep')}
        path = tmp_path / f'{framework}.json'
        path.write_text(json.dumps(data))
        for fmt in ok:
            code, _, err = run_cli(capsys, 'export', str(path), '--format', fmt)
            assert code == 0, (framework, fmt, err)
        for fmt in refused:
            code, _, err = run_cli(capsys, 'export', str(path), '--format', fmt)
            assert code == EXIT_BAD_INPUT
            assert f'stack ({framework})' in err


@pytest.mark.parametrize('fmt', ['hf', 'accelerate', 'lightning', 'llamafactory'])
def test_data_parallel_launchers_refuse_model_parallel_plans(mp_plan, fmt):
    """A migrated schema-2 'hf' plan may split the model (the stack did not then)."""
    legacy = edited(mp_plan, framework='hf', precision='amp-bf16')
    with pytest.raises(InputError, match=f'--format {fmt}: the plan splits the model'):
        export_plan(legacy, fmt)


@pytest.mark.parametrize('fmt', ['megatron', 'torchtitan', 'slurm'])
def test_model_parallel_launchers_take_them(mp_plan, tt_plan, fmt):
    assert export_plan(tt_plan if fmt == 'torchtitan' else mp_plan, fmt).text
    assert export_plan(tt_plan, 'slurm').text


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
    ('megatron', {'zero': 3, 'framework': 'megatron'}, 'ZeRO 3'),
    ('hf', {'zero': 1, 'framework': 'hf', 'lora': LoraSpec(16, ('q', 'v'))},
     'FSDP has no ZeRO-1'),
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
                     framework={'deepspeed': 'hf-deepspeed'}.get(fmt, fmt))
    with pytest.raises(InputError, match=message):
        export_plan(plan, fmt)


@pytest.mark.parametrize('fmt', ['megatron', 'torchtitan'])
def test_more_pipeline_stages_than_layers_are_refused(mp_plan, tt_plan, fmt):
    """Only a hand-written plan file has them (pp 2 x 2 virtual stages for 3 layers)."""
    mp_plan = tt_plan if fmt == 'torchtitan' else mp_plan
    spec = dataclasses.replace(mp_plan.model.spec, num_layers=3)
    plan = dataclasses.replace(mp_plan, model=dataclasses.replace(mp_plan.model, spec=spec))
    with pytest.raises(InputError, match=f'--format {fmt}: pp 2 x 2 virtual stages'):
        export_plan(plan, fmt)
    spec = dataclasses.replace(spec, num_layers=5)  # 4 stages: one holds 2 layers
    assert export_plan(dataclasses.replace(plan, model=dataclasses.replace(
        plan.model, spec=spec)), fmt).text


def test_batch_identities_checked_before_export(dp_plan):
    broken = edited(dp_plan, grad_accum=dp_plan.candidate.grad_accum + 1)
    for fmt in stack_formats(dp_plan):
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


def test_torchtitan_launch_comment_runs(tmp_path, tt_plan):
    text = export_plan(tt_plan, 'torchtitan', ExportOptions(master_addr='h0')).text
    tables = tomllib.loads(text)
    assert tables['training']['local_batch_size'] == tt_plan.candidate.grad_accum  # PP: all
    assert tables['parallelism']['pipeline_parallel_schedule'] == 'Interleaved1F1B'
    run_script(launch_comment(text), tmp_path, {'NODE_RANK': '1'})
    assert recorded_argv(tmp_path, 'torchrun')[:2] == ['--nnodes=4', '--nproc_per_node=8']


def test_export_cli(tmp_path, capsys, stack_plans):
    path = tmp_path / 'plan.json'
    write_plan(path, stack_plans['hf-deepspeed'])
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
    with pytest.raises(InputError, match=f'--format {fmt}: the plan was estimated for the '
                       'Hugging Face stack'):
        export_plan(lora_plan, fmt)
    legacy = edited(lora_plan, framework=fmt)  # refused by the trainer itself
    with pytest.raises(InputError, match=f'--format {fmt}: the plan fine-tunes LoRA adapters'):
        export_plan(legacy, fmt)
    path = tmp_path / 'plan.json'
    write_plan(path, lora_plan)
    code, out, err = run_cli(capsys, 'export', str(path), '--format', fmt)
    assert code == EXIT_BAD_INPUT
    assert out == ''
    assert err.count('\n') == 1
    with pytest.raises(InputError, match='--payload: megatron does not run the Hugging Face'):
        export_plan(lora_plan, 'slurm', ExportOptions(payload='megatron'))


@pytest.mark.parametrize('fmt', ['hf', 'accelerate', 'torchrun', 'lightning', 'slurm'])
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
    full = export_plan(make_plan(nodes=1, zero=0, global_batch=64, framework='hf'),
                       'llamafactory').text
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
