"""``batchfit plan``: output, JSON schema, exit codes and one-line errors."""

from __future__ import annotations

import json

import pytest

from planner.cli.main import EXIT_BAD_INPUT
from planner.cli.plan import EXIT_NO_PLAN, PLAN_SCHEMA
from tests.cli_helpers import run_cli

BASE = ['plan', '--model', 'llama-3-8b', '--seq-len', '4096', '--gpu', 'h100', '--nodes', '4',
        '--precision', 'bf16-mixed', '--framework', 'megatron']
CANDIDATE_KEYS = {'nodes', 'gpus_per_node', 'tp', 'pp', 'vpp', 'cp', 'dp', 'micro_batch',
                  'grad_accum', 'zero', 'recompute', 'memory', 'step_time_s', 'tokens_per_s',
                  'mfu', 'hfu', 'time_to_train_s', 'gpu_hours', 'cost_usd', 'lr', 'gpus',
                  'global_batch', 'layout', 'rank', 'on_pareto', 'step_breakdown_s'}




def test_text_report(capsys):
    code, out, err = run_cli(capsys, *BASE, '--global-batch', '256', '--tokens', '100B',
                         '--base-lr', '3e-4', '--base-batch', '512')
    assert code == 0, err
    assert 'tp/pp/cp/dp' in out
    assert 'MFU' in out
    assert 'GPU-h' in out
    assert 'Why #1:' in out
    assert 'Guidance for a global batch of 256' in out
    assert 'assumed: set --inter-node' in out  # 4 nodes, no --inter-node
    assert 'learning rate' in out
    assert 'warmup' in out
    assert err == ''


def test_json_document(capsys):
    code, out, _ = run_cli(capsys, *BASE, '--global-batch-tokens', '1048576', '--samples', '100000',
                       '--epochs', '2', '--base-lr', '1e-4', '--base-batch', '524288',
                       '--inter-node', 'roce-400', '--zero', '0,1', '--recompute',
                       'none,full', '--top', '5', '--json', '--price', '2.5')
    assert code == 0
    doc = json.loads(out)
    assert doc['schema'] == PLAN_SCHEMA
    assert doc['status'] == 'ok'
    assert set(doc) >= {'candidates', 'pareto', 'guidance', 'request'}
    assert len(doc['candidates']) == 5
    assert doc['pareto']
    for c in doc['candidates'] + doc['pareto']:
        assert set(c) >= CANDIDATE_KEYS
        assert c['micro_batch'] * c['grad_accum'] * c['dp'] == 256
        assert c['tp'] * c['pp'] * c['cp'] * c['dp'] == c['gpus'] == c['nodes'] * c['gpus_per_node']
        assert c['zero'] in (0, 1)
        assert c['recompute'] in ('none', 'full')
        assert c['memory']['fits']
        assert set(c['memory']) >= {'components', 'overhead', 'phases', 'peak_phase',
                                    'tensor_peak_bytes', 'total_bytes', 'capacity_bytes',
                                    'usable_bytes', 'headroom_bytes', 'margin_fraction'}
        assert c['memory']['total_bytes'] <= c['memory']['usable_bytes']
        assert c['lr'] == pytest.approx(1e-4 * (256 / 128) ** 0.5)  # base batch in tokens
        assert c['cost_usd'] == pytest.approx(2.5 * c['gpu_hours'])
        assert c['time_per_epoch_s'] == pytest.approx(c['time_to_train_s'] / 2)
    assert doc['request']['inter_node'] == 'roce-400'
    assert doc['request']['length'] == {'tokens': None, 'samples': 100000, 'epochs': 2.0}
    assert doc['guidance']['learning_rates']['ratio'] == 2


def test_no_exact_factorisation_exits_1_with_the_nearest_batches(capsys):
    code, out, err = run_cli(capsys, *BASE, '--global-batch-tokens', '4M', '--tokens', '1T',
                         '--json')
    assert code == EXIT_NO_PLAN
    doc = json.loads(out)
    assert doc['status'] == 'no_factorisation'
    assert doc['candidates'] == []
    assert doc['nearest_global_batches'] == {'below': 976, 'above': 977}
    assert 'nearest global batches' in err
    code, out, _ = run_cli(capsys, *BASE, '--global-batch-tokens', '4M', '--tokens', '1T')
    assert code == EXIT_NO_PLAN
    assert 'No plan:' in out
    assert '976 sequences' in out


@pytest.mark.parametrize(('argv', 'flag'), [
    (['--gpu', 'h900', '--global-batch', '64', '--tokens', '1e9'], '--gpu'),
    (['--global-batch', '0', '--tokens', '1e9'], '--global-batch'),
    (['--global-batch', '1.5', '--tokens', '1e9'], '--global-batch'),
    (['--global-batch', '64', '--tokens', 'lots'], '--tokens'),
    (['--global-batch', '64'], '--tokens'),
    (['--tokens', '1e9'], '--global-batch'),
    (['--global-batch', '64', '--global-batch-tokens', '4096', '--tokens', '1e9'],
     '--global-batch-tokens'),
    (['--global-batch', '64', '--tokens', '1e9', '--zero', '0,5'], '--zero'),
    (['--global-batch', '64', '--tokens', '1e9', '--recompute', 'some'], '--recompute'),
    (['--global-batch', '64', '--tokens', '1e9', '--epochs', '2'], '--epochs'),
    (['--global-batch', '64', '--tokens', '1e9', '--inter-node', 'pigeon'], '--inter-node'),
    (['--global-batch', '64', '--tokens', '1e9', '--base-lr', '1e-4'], '--base-lr'),
    (['--global-batch', '64', '--tokens', '1e9', '--lora-rank', '8'], '--framework'),
    (['--global-batch', '64', '--tokens', '1e9', '--lora-rank', '0'], '--lora-rank'),
    (['--global-batch', '64', '--tokens', '1e9', '--qlora'], '--qlora'),
    (['--global-batch', '64', '--tokens', '1e9', '--lora-rank', '8', '--lora-targets', 'q,x'],
     '--lora-targets'),
    (['--global-batch', '64', '--tokens', '1e9', '--sort', 'speed'], '--sort'),
    (['--global-batch', '64', '--tokens', '1e9', '--margin', '1.5'], '--margin'),
    (['--global-batch', '64', '--tokens', '1e9', '--max-tp', '0'], '--max-tp'),
])
def test_bad_input_is_one_line_naming_the_flag(capsys, argv, flag):
    base = [a for a in BASE if a != '--gpu' and a != 'h100'] if '--gpu' in argv else BASE
    code, out, err = run_cli(capsys, *base, *argv)
    assert code == EXIT_BAD_INPUT
    assert out == ''
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith('batchfit: error:')
    assert flag in lines[0]
    assert 'Traceback' not in err


def test_unknown_model_is_an_input_error(capsys):
    code, _, err = run_cli(capsys, 'plan', '--model', 'no-such-model', '--seq-len', '4096', '--gpu',
                       'h100', '--global-batch', '8', '--tokens', '1e9')
    assert code == EXIT_BAD_INPUT
    assert '--model' in err
    assert len(err.strip().splitlines()) == 1


# ---- LoRA / QLoRA --------------------------------------------------------------------------------

LORA = ['plan', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--gpu', 'h100',
        '--global-batch', '64', '--tokens', '1B']


def test_lora_text_report(capsys):
    code, out, err = run_cli(capsys, *LORA, '--lora-rank', '16', '--qlora',
                             '--lora-targets', 'q,k,v,o,gate,up,down')
    assert code == 0, err
    assert ('LoRA rank 16 on q,k,v,o,gate,up,down · QLoRA: 4-bit NF4 base · 41.9 M trainable '
            'parameters (0.52%) · data parallel only (TP = PP = CP = 1)') in out
    assert 'QLoRA dequantization' in out
    assert 'note: LoRA: the DeepSeek law is fitted on full pretraining' in out
    assert ' 1/1/1/8 ' in out
    assert err == ''


def test_lora_json_carries_the_spec(capsys):
    code, out, _ = run_cli(capsys, *LORA, '--lora-rank', '8', '--json', '--top', '3')
    assert code == 0
    doc = json.loads(out)
    assert doc['request']['lora'] == {'rank': 8, 'targets': ['q', 'k', 'v', 'o'],
                                      'base_bits': 16, 'trainable_parameters': 6_815_744}
    for c in doc['candidates']:
        assert (c['tp'], c['pp'], c['cp'], c['vpp']) == (1, 1, 1, 1)
        assert c['dequant_s'] == 0.0
        assert sum(c['step_breakdown_s'].values()) == pytest.approx(c['step_time_s'])
    code, out, _ = run_cli(capsys, *LORA, '--json', '--top', '1')
    assert json.loads(out)['request']['lora'] is None


def test_lora_model_split_is_refused_in_one_line(capsys):
    code, out, err = run_cli(capsys, *LORA, '--lora-rank', '8', '--tp', '2')
    assert code == EXIT_BAD_INPUT
    assert out == ''
    assert err.count('\n') == 1
    assert '--tp: LoRA runs data parallel only' in err
