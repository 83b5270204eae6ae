"""Plan files: round trip, atomic save, clear errors that change nothing, migration."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from planner.cli.export import save_and_export
from planner.cli.main import EXIT_BAD_INPUT
from planner.errors import InputError
from planner.export import export_plan
from planner.memory.training import LoraSpec
from planner.planfile.document import (
    GuidanceInputs,
    plan_file_from_search,
    plan_from_dict,
    read_plan,
    write_plan,
)
from planner.planfile.migrate import CURRENT_SCHEMA
from planner.plans.request import LayoutLimits
from planner.plans.search import search
from planner.timing.efficiency import CalibrationProfile
from tests.cli_helpers import run_cli
from tests.export_helpers import hsdp_plan, make_plan

DATA = Path(__file__).parent / 'data'


def test_migrates_version_2_to_keep_outputs():
    """A /2 file counted no model output: it loads with the default, safer loop."""
    from planner.planfile.migrate import migrate

    doc = json.loads((DATA / 'plan_v1.json').read_text())
    v2 = migrate({**doc}, 'plan.json')
    v2 = {**v2, 'schema': 'batchfit.plan/2'}
    v2['constraints'] = {k: v for k, v in v2['constraints'].items() if k != 'loop'}
    v3 = migrate(v2, 'plan.json')
    assert v3['schema'] == 'batchfit.plan/4'
    assert v3['constraints']['loop'] == 'keep-outputs'
    assert v3['constraints']['lora'] is None


@pytest.fixture(scope='module')
def plan():
    return make_plan(nodes=2, zero=1, global_batch=256)




def test_round_trip(tmp_path, plan):
    path = tmp_path / 'plan.json'
    write_plan(path, plan)
    doc = json.loads(path.read_text())
    assert doc['schema'] == CURRENT_SCHEMA == 'batchfit.plan/4'
    assert doc['constraints']['lora'] is None
    assert list(doc) == ['schema', 'created_by', 'model', 'cluster', 'targets', 'constraints',
                         'guidance_inputs', 'guidance', 'candidate', 'calibration']
    assert read_plan(path) == plan
    assert not [p for p in tmp_path.iterdir() if p.name != 'plan.json']  # no temp left


def test_hf_hsdp_plan_round_trips(tmp_path):
    """An hf HSDP plan keeps its replicas through the file, and exports the same."""
    plan = hsdp_plan(framework='hf')
    path = tmp_path / 'plan.json'
    write_plan(path, plan)
    doc = json.loads(path.read_text())
    assert doc['candidate']['framework'] == 'hf'
    assert doc['candidate']['dp_replicate'] == plan.candidate.dp_replicate > 1
    again = read_plan(path)
    assert again == plan
    for fmt in ('accelerate', 'hf'):
        assert export_plan(again, fmt).text == export_plan(plan, fmt).text


def test_plan_holds_the_whole_input(plan):
    c = plan.candidate
    assert c.micro_batch * c.grad_accum * c.dp == c.global_batch == 256
    assert plan.model.kind == 'preset'
    assert plan.model.hf_id == 'meta-llama/Llama-3.2-1B'
    assert plan.guidance_inputs.base_lr == 3e-4
    assert plan.guidance.learning_rate > 0
    assert isinstance(plan.guidance.warmup_steps, int)
    assert plan.steps
    assert plan.steps >= c.estimates['steps']
    result = search(plan.to_request())  # the saved input searches to the same plan
    best = result.best
    assert (best.tp, best.dp, best.micro_batch, best.zero) == (c.tp, c.dp, c.micro_batch, c.zero)


def test_config_json_is_embedded(tmp_path):
    source = tmp_path / 'config.json'
    shutil.copy(DATA / 'hf_configs' / 'qwen2.5-0.5b.json', source)
    base = make_plan(model='qwen2.5-0.5b', nodes=1, zero=0, global_batch=64)
    request = dataclasses.replace(base.to_request(), top_k=3, limits=LayoutLimits())
    result = search(request)
    saved = plan_file_from_search(request, result, 2, model_arg=str(source))
    source.unlink()  # the plan no longer needs the file
    write_plan(tmp_path / 'p.json', saved)
    loaded = read_plan(tmp_path / 'p.json')
    assert loaded.model.kind == 'config'
    assert loaded.model.config['model_type'] == 'qwen2'
    assert loaded.candidate == saved.candidate
    assert loaded.candidate.estimates['rank'] >= 3  # the third row, not the best


def test_calibration_is_kept(tmp_path):
    base = make_plan(nodes=1, zero=0, global_batch=64)
    profile = CalibrationProfile(axis='micro_batch', points=((1.0, 0.3), (4.0, 0.5)),
                                 source='measured on node 7')
    request = dataclasses.replace(base.to_request(), calibration=profile)
    saved = plan_file_from_search(request, search(request))
    write_plan(tmp_path / 'p.json', saved)
    loaded = read_plan(tmp_path / 'p.json')
    assert loaded.calibration == {'axis': 'micro_batch', 'points': [[1.0, 0.3], [4.0, 0.5]],
                                  'source': 'measured on node 7'}
    assert loaded.to_request().calibration == profile


def test_no_plan_to_save():
    base = make_plan(nodes=1, zero=0, global_batch=64)
    request = dataclasses.replace(base.to_request(), global_batch=63)
    result = search(request)
    with pytest.raises(InputError, match='no plan to save'):
        plan_file_from_search(request, result)


BAD_DOCUMENTS = {
    'empty': ('', 'is empty'),
    'truncated': (None, 'truncated'),
    'list': ('[1, 2]', 'JSON object'),
    'no schema': ('{"model": {}}', 'has no "schema"'),
    'other tool': ('{"schema": "other/1"}', 'unknown schema'),
    'newer': ('{"schema": "batchfit.plan/7"}', 'newer batchfit'),
    'plan --json': ('{"schema": "batchfit.plan-result/1", "candidates": [], "request": {}}',
                    '--json` output'),
    'binary': (b'\xff\xfe\x00', 'not UTF-8'),
}


@pytest.mark.parametrize('case', BAD_DOCUMENTS)
def test_bad_files_give_one_clear_error_and_change_nothing(tmp_path, plan, case):
    text, message = BAD_DOCUMENTS[case]
    path = tmp_path / 'plan.json'
    if text is None:
        write_plan(path, plan)
        text = path.read_text()[:len(path.read_text()) // 2]
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    before = (path.read_bytes(), os.stat(path).st_mtime_ns)
    with pytest.raises(InputError, match=message) as info:
        read_plan(path)
    assert str(path) in str(info.value)
    assert '\n' not in str(info.value)
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before


@pytest.mark.parametrize(('edit', 'field', 'message'), [
    (lambda d: d['candidate'].update(micro_batch=3), 'candidate.global_batch',
     'micro-batch × accumulation × DP'),
    (lambda d: d['candidate'].update(tp='2'), 'candidate.tp', 'integer'),
    (lambda d: d['candidate'].pop('dp'), 'candidate.dp', 'missing'),
    (lambda d: d.update(extra=1), 'extra', 'unknown key'),
    (lambda d: d['constraints'].update(zero_stage=[1]), 'constraints.zero_stage',
     'unknown key'),
    (lambda d: d['model']['spec'].update(num_heads=0), 'model.spec.num_heads', 'positive'),
    (lambda d: d['candidate'].update(recompute='some'), 'candidate.recompute', 'allowed'),
    (lambda d: d['guidance'].update(learning_rate=-1), 'guidance.learning_rate', 'positive'),
    (lambda d: d['targets'].update(global_batch=512), 'candidate.global_batch',
     'target batch'),
    (lambda d: d.update(calibration={'axis': 'gemm_flops', 'points': [[1, 2]]}),
     'calibration', 'efficiency'),
])
def test_invalid_fields_are_named(plan, edit, field, message):
    doc = plan.to_dict()
    edit(doc)
    with pytest.raises(InputError, match=message) as info:
        plan_from_dict(doc, 'p.json')
    assert info.value.field.startswith(f'p.json: {field}')


def test_failed_save_keeps_the_old_file(tmp_path, plan, monkeypatch):
    path = tmp_path / 'plan.json'
    path.write_text('old')

    def disk_full(*args):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(os, 'replace', disk_full)
    with pytest.raises(InputError, match='No space left'):
        write_plan(path, plan)
    assert path.read_text() == 'old'
    assert [p.name for p in tmp_path.iterdir()] == ['plan.json']


def test_save_into_missing_folder(tmp_path, plan):
    with pytest.raises(InputError, match='cannot write'):
        write_plan(tmp_path / 'nope' / 'plan.json', plan)


def test_migrates_version_0(tmp_path):
    loaded = read_plan(DATA / 'plan_v0.json')
    assert loaded.model.kind == 'preset'
    assert loaded.model.ref == 'llama-3.2-1b'
    assert loaded.model.spec.num_layers == 16
    assert loaded.cluster.gpu_memory_bytes == 85520809984
    assert (loaded.candidate.dp, loaded.candidate.grad_accum, loaded.candidate.zero) == (16, 8, 1)
    assert loaded.candidate.estimates['step_time_s'] == 1.25
    assert loaded.guidance.learning_rate == 3e-4
    assert loaded.guidance.warmup_steps == 716
    assert loaded.steps == 38147
    assert 'migrated from batchfit.plan/0' in loaded.created_by
    write_plan(tmp_path / 'v1.json', loaded)  # saved again, as the current schema
    assert read_plan(tmp_path / 'v1.json') == loaded
    assert json.loads((tmp_path / 'v1.json').read_text())['schema'] == 'batchfit.plan/4'
    assert loaded.constraints.lora is None
    assert 'torchrun' in export_plan(loaded, 'torchrun').text


def test_show_command(tmp_path, plan, capsys):
    path = tmp_path / 'plan.json'
    write_plan(path, plan)
    code, out, err = run_cli(capsys, 'show', str(path))
    assert code == 0, err
    assert 'micro-batch 2 x accumulation 8 x DP 16 = 256' in out
    assert 'Learning rate' in out
    assert 'Warmup' in out
    code, out, _ = run_cli(capsys, 'show', str(DATA / 'plan_v0.json'), '--json')
    assert code == 0
    assert json.loads(out)['schema'] == 'batchfit.plan/4'


def test_show_bad_file_is_one_line(tmp_path, capsys):
    path = tmp_path / 'bad.json'
    path.write_text('{"schema": "batchfit.plan/1", "model"')
    code, out, err = run_cli(capsys, 'show', str(path))
    assert code == EXIT_BAD_INPUT
    assert out == ''
    assert err.count('\n') == 1
    assert 'truncated' in err


def plan_args(**given) -> argparse.Namespace:
    defaults = {'save': None, 'export': None, 'export_to': None, 'json': False,
                'model': 'llama-3.2-1b', 'base_lr': 3e-4, 'base_batch': 128,
                'base_warmup_steps': None, 'b_noise': None, 'global_batch_tokens': None}
    return argparse.Namespace(**{**defaults, **given})


def test_plan_hooks_save_and_export(tmp_path, capsys):
    plan = make_plan(nodes=2, zero=1, global_batch=256, framework='hf-deepspeed')
    request = plan.to_request()
    result = search(request)
    args = plan_args(save=str(tmp_path / 'p.json'), export='deepspeed',
                     export_to=str(tmp_path / 'ds.json'))
    save_and_export(args, request, result)
    saved = read_plan(tmp_path / 'p.json')
    assert saved.candidate == plan.candidate
    assert saved.guidance_inputs == GuidanceInputs(base_lr=3e-4, base_batch_samples=128.0)
    assert json.loads((tmp_path / 'ds.json').read_text())['train_batch_size'] == 256


def test_plan_hooks_write_nothing_when_the_export_is_refused(tmp_path):
    plan = make_plan(model='llama-3.1-8b', nodes=2, tp=2, zero=1, seq_len=4096,
                     framework='megatron', precision='bf16-mixed')
    request = plan.to_request()
    args = plan_args(save=str(tmp_path / 'p.json'), export='hf', model='llama-3.1-8b')
    with pytest.raises(InputError, match='--format hf'):
        save_and_export(args, request, search(request))
    assert not list(tmp_path.iterdir())


def test_migrates_version_1(tmp_path, capsys):
    """A /1 file (full training, written before LoRA plans) loads with lora null."""
    original = (DATA / 'plan_v1.json').read_text()
    assert json.loads(original)['schema'] == 'batchfit.plan/1'
    loaded = read_plan(DATA / 'plan_v1.json')
    assert loaded.constraints.lora is None
    assert loaded.constraints.lora_spec is None
    assert loaded.created_by == 'batchfit 0.1.0'
    c = loaded.candidate
    assert (c.dp, c.micro_batch, c.grad_accum, c.zero, c.recompute) == (8, 2, 4, 2, 'selective')
    request = loaded.to_request()
    assert request.lora is None
    best = search(request).best
    assert (best.dp, best.micro_batch, best.zero, best.recompute) == (8, 2, 2, 'selective')
    write_plan(tmp_path / 'v2.json', loaded)
    doc = json.loads((tmp_path / 'v2.json').read_text())
    assert doc['schema'] == 'batchfit.plan/4'
    assert doc['constraints']['lora'] is None
    assert read_plan(tmp_path / 'v2.json') == loaded
    assert (DATA / 'plan_v1.json').read_text() == original  # loading never writes
    assert 'llamafactory' in export_plan(loaded, 'llamafactory').filename


@pytest.fixture(scope='module')
def qlora_plan():
    return make_plan(nodes=1, zero=3, recompute='full', global_batch=64,
                     lora=LoraSpec(32, ('q', 'k', 'v', 'o', 'gate', 'up', 'down'), 4))


def test_lora_plan_round_trips_and_searches_again(tmp_path, qlora_plan, capsys):
    path = tmp_path / 'qlora.json'
    write_plan(path, qlora_plan)
    doc = json.loads(path.read_text())
    assert doc['constraints']['lora'] == {
        'rank': 32, 'targets': ['q', 'k', 'v', 'o', 'gate', 'up', 'down'], 'base_bits': 4}
    loaded = read_plan(path)
    assert loaded == qlora_plan
    request = loaded.to_request()
    assert request.lora == LoraSpec(32, ('q', 'k', 'v', 'o', 'gate', 'up', 'down'), 4)
    best = search(request).best
    c = loaded.candidate
    assert (best.dp, best.micro_batch, best.zero, best.recompute) == (c.dp, c.micro_batch,
                                                                       c.zero, c.recompute)
    assert best.step_time_s == pytest.approx(c.estimates['step_time_s'])
    assert best.memory.total_bytes == c.estimates['memory']['total_bytes']
    assert c.estimates['dequant_s'] > 0
    code, out, err = run_cli(capsys, 'show', str(path))
    assert code == 0, err
    assert 'LoRA: rank 32 on q,k,v,o,gate,up,down, QLoRA (4-bit NF4 base)' in out


@pytest.mark.parametrize(('lora', 'message'), [
    ({'rank': 0, 'targets': ['q'], 'base_bits': 16}, 'constraints.lora.rank'),
    ({'rank': 8, 'targets': ['q', 'x'], 'base_bits': 16}, 'constraints.lora.targets'),
    ({'rank': 8, 'targets': ['q'], 'base_bits': 3}, 'constraints.lora.base_bits'),
    ({'rank': 8, 'targets': ['q'], 'base_bits': 16, 'alpha': 16}, 'constraints.lora.alpha'),
    ([8], 'constraints.lora'),
])
def test_bad_lora_in_a_file_names_the_field(qlora_plan, lora, message):
    doc = qlora_plan.to_dict()
    doc['constraints']['lora'] = lora
    with pytest.raises(InputError, match=message.replace('.', r'\.')):
        plan_from_dict(doc, 'plan.json')


def test_lora_plan_must_be_data_parallel(qlora_plan):
    doc = qlora_plan.to_dict()
    grad_accum = doc['candidate']['grad_accum']
    doc['candidate'].update(tp=2, dp=4, grad_accum=2 * grad_accum)  # the batch still adds up
    with pytest.raises(InputError, match='data parallel only'):
        plan_from_dict(doc, 'plan.json')


def test_migrates_version_3_without_stack_switches():
    """A /3 plan was timed and exported without torch.compile and async TP: both off."""
    from planner.planfile.migrate import migrate

    doc = migrate(json.loads((DATA / 'plan_v1.json').read_text()), 'plan.json')
    v3 = {**doc, 'schema': 'batchfit.plan/3',
          'constraints': {k: v for k, v in doc['constraints'].items()
                          if k not in ('compile', 'async_tp')}}
    v4 = migrate(v3, 'plan.json')
    assert v4['schema'] == 'batchfit.plan/4'
    assert v4['constraints']['compile'] is False
    assert v4['constraints']['async_tp'] is False


def test_torchtitan_switches_round_trip(tmp_path):
    """A torchtitan float8 + compile + async TP plan keeps its switches through a file,
    and the request it rebuilds times the candidate as the search did."""
    plan = make_plan(nodes=2, gpus_per_node=8, tp=2, zero=3, global_batch=64, seq_len=2048,
                     framework='torchtitan', precision='fp8', compile=True, async_tp=True)
    assert plan.candidate.precision == 'fsdp-fp8'
    path = tmp_path / 'plan.json'
    write_plan(path, plan)
    doc = json.loads(path.read_text())
    assert doc['constraints']['compile'] is True
    assert doc['constraints']['async_tp'] is True
    back = read_plan(path)
    assert back == plan
    import dataclasses

    from planner.plans.search import search

    request = back.to_request()
    assert request.compile
    assert request.async_tp
    again = search(request).best
    assert again.step_time_s == pytest.approx(plan.candidate.estimates['step_time_s'], rel=1e-9)
    eager = search(dataclasses.replace(request, compile=False, async_tp=False)).best
    assert eager.step_time_s > again.step_time_s  # the switches were what made it faster
