"""``--loss``: only a loss the stack's launchers switch on is planned, and the export
switches it on (Liger's fused linear cross-entropy for ``chunked``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from planner.cli.main import EXIT_BAD_INPUT
from planner.errors import InputError
from planner.export import EXPORTERS, ExportOptions, export_plan
from planner.export.hf import training_arguments
from planner.export.llamafactory import llamafactory_config
from planner.hardware.catalog import find_gpu, find_interconnect
from planner.memory.training import LOSSES
from planner.models.hf_config import spec_from_hf_config
from planner.models.presets import find_preset
from planner.models.size_rule import spec_from_size
from planner.planfile.document import plan_from_dict
from planner.plans.batch import check_candidate
from planner.plans.request import PlanRequest
from planner.plans.search import search
from planner.stacks import STACKS
from planner.stacks.catalog import LIGER_MODEL_TYPES
from planner.timing.step_time import TrainingLength
from tests.cli_helpers import run_cli
from tests.export_helpers import edited, make_plan

DATA = Path(__file__).parent / 'data' / 'hf_configs'
# What each stack's launchers switch on (planner/stacks/catalog.py): Liger's kernels in the
# Hugging Face stacks, torchtitan's one cross-entropy, Megatron's vocab-parallel loss.
RUNS = {'hf': {'hf', 'chunked'}, 'hf-deepspeed': {'hf', 'chunked'}, 'torchtitan': {'hf'},
        'megatron': {'vocab-parallel', 'megatron'}, 'deepspeed': {'vocab-parallel', 'megatron'}}


def _request(model='llama-3.2-1b', **kw) -> PlanRequest:
    spec = find_preset(model) if isinstance(model, str) else model
    return PlanRequest(model=spec, seq_len=2048, gpu=find_gpu('h100-sxm'), max_nodes=2,
                       gpus_per_node=8, inter_node=find_interconnect('ib-ndr'),
                       global_batch=64, length=TrainingLength(tokens=1e10), **kw)


@pytest.mark.parametrize('stack', list(STACKS))
@pytest.mark.parametrize('loss', LOSSES[1:])
def test_a_named_stack_refuses_a_loss_it_cannot_run(stack, loss):
    if loss in RUNS[stack]:
        assert _request(framework=stack, loss=loss).stacks() == (STACKS[stack],)
        return
    with pytest.raises(InputError, match=f'^--loss: the {stack} stack does not run the '
                                         f'{loss} loss') as err:
        _request(framework=stack, loss=loss)
    assert set(err.value.allowed.split('; ')[0].split(', ')) == RUNS[stack]


@pytest.mark.parametrize(('loss', 'stacks'), [
    ('chunked', ['hf', 'hf-deepspeed']), ('hf', ['hf', 'hf-deepspeed', 'torchtitan']),
    ('vocab-parallel', ['megatron', 'deepspeed']), ('megatron', ['megatron', 'deepspeed']),
    ('', list(STACKS))])
def test_an_open_search_keeps_the_stacks_that_run_the_loss(loss, stacks):
    request = _request(loss=loss)
    assert [s.key for s in request.stacks()] == stacks
    result = search(request)
    assert result.fitting > 0
    assert {m.stack for m in request.plan_modes()} == set(stacks)


@pytest.mark.parametrize('model', ['gpt2-124m', 'pythia-160m', 'qwen1.5-moe-a2.7b',
                                   'gpt3-175b', 'deepseek-moe-16b'])
def test_chunked_needs_a_model_type_liger_patches(model):
    spec = find_preset(model)
    assert spec.hf_model_type not in LIGER_MODEL_TYPES
    for framework in ('hf', 'hf-deepspeed', ''):
        with pytest.raises(InputError, match=r"^--loss: chunked is Liger's fused linear") as err:
            _request(model, framework=framework, loss='chunked')
        assert (f'of type {spec.hf_model_type}' if spec.hf_model_type
                else 'model_type is not known') in str(err.value)
        assert 'llama' in err.value.allowed
    _request(model, framework='hf', loss='hf')  # the stack's own loss still plans


@pytest.mark.parametrize('model', [
    'llama-3.2-1b', 'mistral-7b', 'mixtral-8x7b', 'qwen2.5-0.5b', 'qwen3-8b', 'qwen3-30b-a3b',
    'gemma-2b', 'gemma-2-2b', 'phi-3-mini', 'gpt-oss-20b', 'tinyllama-1.1b'])
def test_chunked_plans_the_model_types_liger_patches(model):
    assert find_preset(model).hf_model_type in LIGER_MODEL_TYPES
    assert [s.key for s in _request(model, loss='chunked').stacks()] == ['hf', 'hf-deepspeed']


def test_the_model_type_comes_with_every_kind_of_model():
    assert spec_from_size('1B').hf_model_type == 'llama'  # a LlamaConfig builds the shape
    for name, kind in (('llama-3.1-8b.json', 'llama'), ('gpt2.json', 'gpt2'),
                       ('qwen1.5-moe-a2.7b.json', 'qwen2_moe')):
        assert spec_from_hf_config(DATA / name).hf_model_type == kind
    # a multimodal checkpoint loads as its top-level type, which is what Liger patches
    wrapped = {'model_type': 'mistral3', 'text_config': {
        'model_type': 'mistral', 'hidden_size': 256, 'num_hidden_layers': 2,
        'num_attention_heads': 4, 'intermediate_size': 512, 'vocab_size': 1000}}
    assert spec_from_hf_config(wrapped).hf_model_type == 'mistral3'


def test_cli_refusals_exit_2_naming_the_loss(capsys):
    plan = ['plan', '--model', 'llama-3.2-1b', '--seq-len', '2048', '--gpu', 'h100-sxm',
            '--global-batch', '64', '--tokens', '1e10']
    estimate = ['estimate', '--model', 'llama-3.2-1b', '--seq-len', '2048', '--micro-batch',
                '1', '--gpu', 'h100-sxm']
    for argv, message in (
            ([*plan, '--framework', 'megatron', '--loss', 'chunked'],
             '--loss: the megatron stack does not run the chunked loss'),
            ([*plan, '--framework', 'hf', '--loss', 'vocab-parallel'],
             '--loss: the hf stack does not run the vocab-parallel loss'),
            ([*plan, '--model', 'gpt2', '--loss', 'chunked'], 'the model is of type gpt2'),
            ([*estimate, '--framework', 'torchtitan', '--loss', 'chunked'],
             '--loss: the torchtitan stack does not run the chunked loss'),
            ([*estimate, '--model', 'pythia-160m', '--loss', 'chunked'],
             'the model is of type gpt_neox')):
        code, out, err = run_cli(capsys, *argv)
        assert code == EXIT_BAD_INPUT, argv
        assert message in err
        assert len(err.strip().splitlines()) == 1
        assert out == ''


def test_estimate_without_a_stack_takes_the_first_that_runs_the_loss(capsys):
    base = ['estimate', '--model', 'llama-3.2-1b', '--seq-len', '2048', '--micro-batch', '1',
            '--gpu', 'h100-sxm', '--gpus-per-node', '8', '--tp', '2']
    code, out, _ = run_cli(capsys, *base, '--loss', 'chunked', '--tp', '1')
    assert code == 0
    assert 'Stack: hf ' in out
    code, out, _ = run_cli(capsys, *base, '--loss', 'vocab-parallel')
    assert code == 0
    assert 'Stack: megatron ' in out  # torchtitan (the first with TP) runs no such loss


@pytest.fixture(scope='module')
def chunked_plan():
    return make_plan(nodes=2, zero=2, recompute='full', global_batch=256, framework='hf',
                     loss='chunked')


@pytest.fixture(scope='module')
def chunked_ds_plan():
    return make_plan(nodes=2, zero=3, recompute='none', global_batch=256,
                     framework='hf-deepspeed', loss='chunked')


def test_the_trainer_arguments_switch_liger_on(chunked_plan, chunked_ds_plan):
    for plan in (chunked_plan, chunked_ds_plan):
        n = check_candidate(plan.candidate)
        args, notes = training_arguments(plan, n, ExportOptions())
        assert args['use_liger_kernel'] is True
        assert any('pip install liger-kernel' in note for note in notes)
        assert '--use_liger_kernel true' in export_plan(plan, 'hf').text
        config, _ = llamafactory_config(plan, n, ExportOptions())
        assert config['enable_liger_kernel'] is True
        assert 'use_liger_kernel' not in config  # LLaMA-Factory applies it itself
    plain = make_plan(nodes=2, zero=2, recompute='full', global_batch=256, framework='hf')
    args, _ = training_arguments(plain, check_candidate(plain.candidate), ExportOptions())
    assert 'use_liger_kernel' not in args
    assert 'liger' not in export_plan(plain, 'llamafactory').text.lower()


@pytest.mark.parametrize('fmt', ['accelerate', 'torchrun', 'lightning', 'deepspeed'])
def test_launchers_of_the_users_script_carry_a_note(chunked_plan, chunked_ds_plan, fmt):
    plan = chunked_ds_plan if fmt == 'deepspeed' else chunked_plan
    exported = export_plan(plan, fmt)
    note = next(n for n in exported.notes if n.startswith('--loss chunked'))
    assert 'AutoLigerKernelForCausalLM' in note
    assert 'apply_liger_kernel_to_llama()' in note
    if fmt != 'deepspeed':  # JSON has no comments: the note goes to stderr only
        assert f'# NOTE: {note}' in exported.text


@pytest.mark.parametrize(('payload', 'switch'), [('hf', True), ('torchrun', False)])
def test_slurm_payloads(chunked_plan, payload, switch):
    exported = export_plan(chunked_plan, 'slurm', ExportOptions(payload=payload))
    assert ('--use_liger_kernel true' in exported.text) == switch
    assert any('liger' in n.lower() for n in exported.notes)


@pytest.mark.parametrize('fmt', list(EXPORTERS))
def test_every_launcher_of_the_stack_runs_the_chunked_loss(chunked_plan, chunked_ds_plan, fmt):
    launchers = set(STACKS['hf'].launchers) | set(STACKS['hf-deepspeed'].launchers)
    plan = chunked_ds_plan if fmt == 'deepspeed' else chunked_plan
    if fmt not in launchers:  # Megatron's and torchtitan's trainers run their own loss
        with pytest.raises(InputError, match=f'--format {fmt}: the plan was estimated for the '
                           'Hugging Face stack'):
            export_plan(plan, fmt)
        legacy = edited(plan, framework=fmt)  # refused by the trainer itself
        with pytest.raises(InputError, match=f"--format {fmt}: the plan counts Liger's"):
            export_plan(legacy, fmt)
        return
    exported = export_plan(plan, fmt)
    assert any('liger' in n.lower() for n in exported.notes)
    if fmt != 'deepspeed':
        assert "loss: Liger's fused linear cross-entropy (--loss chunked)" in exported.text


def test_a_plan_file_with_a_loss_its_stack_cannot_run_is_refused(chunked_plan):
    doc = chunked_plan.to_dict()
    assert doc['model']['spec']['hf_model_type'] == 'llama'
    plan_from_dict(doc, 'p.json')
    bad = {**doc, 'candidate': {**doc['candidate'], 'framework': 'megatron'}}
    with pytest.raises(InputError, match=r'^p\.json: constraints\.loss: the megatron stack does '
                                         r'not run the chunked loss: re-plan'):
        plan_from_dict(bad, 'p.json')
    gpt2 = {**doc, 'model': {**doc['model'], 'spec': {**doc['model']['spec'],
                                                       'hf_model_type': 'gpt2'}}}
    with pytest.raises(InputError, match=r'constraints\.loss: chunked is Liger'):
        plan_from_dict(gpt2, 'p.json')
    typo = {**doc, 'constraints': {**doc['constraints'], 'loss': 'liger'}}
    with pytest.raises(InputError, match=r"constraints\.loss: unknown value 'liger'"):
        plan_from_dict(typo, 'p.json')


@pytest.mark.parametrize(('kind', 'ref', 'config', 'expected'), [
    ('preset', 'llama-3.2-1b', None, 'llama'), ('size', '1B', None, 'llama'),
    ('config', 'x/config.json', {'model_type': 'qwen3'}, 'qwen3'),
    ('preset', 'gone-from-the-catalog', None, ''), ('spec', '', None, '')])
def test_an_older_file_gets_the_model_type_batchfit_gives_today(chunked_plan, kind, ref,
                                                                config, expected):
    doc = chunked_plan.to_dict()
    spec = {k: v for k, v in doc['model']['spec'].items() if k != 'hf_model_type'}
    old = {**doc, 'model': {**doc['model'], 'kind': kind, 'ref': ref, 'config': config,
                            'spec': spec},
           'constraints': {**doc['constraints'], 'loss': ''}}
    assert plan_from_dict(old, 'p.json').model.spec.hf_model_type == expected
    # saved by the search before exports switched Liger on: exported with the switch now
    old['constraints']['loss'] = 'chunked'
    if expected in LIGER_MODEL_TYPES:
        assert '--use_liger_kernel true' in export_plan(plan_from_dict(old, 'p.json'),
                                                        'hf').text
    else:
        with pytest.raises(InputError, match=r'constraints\.loss'):
            plan_from_dict(old, 'p.json')


def test_the_issue_reproduction_exports_the_liger_switch(tmp_path, capsys):
    """`plan --framework hf --loss chunked --save` then `export --format hf`: the Trainer
    command carries the Liger switch (it did not before)."""
    path = tmp_path / 'pc.toml'
    code, _, err = run_cli(capsys, 'plan', '--model', '1B', '--seq-len', '4096', '--gpu',
                           'h100-sxm', '--nodes', '1', '--global-batch', '64', '--tokens',
                           '10B', '--framework', 'hf', '--loss', 'chunked', '--save',
                           str(path))
    assert code == 0, err
    code, out, err = run_cli(capsys, 'export', '--format', 'hf', str(path))
    assert code == 0, err
    assert '--use_liger_kernel true' in out


def test_stack_json_lists_its_losses():
    doc = STACKS['hf'].to_dict()
    assert doc['losses'] == ['hf', 'chunked']
    assert 'llama' in doc['loss_model_types']['chunked']
    assert dataclasses.replace(STACKS['megatron']).to_dict()['loss_model_types'] == {}
