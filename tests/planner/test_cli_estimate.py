"""`batchfit estimate`, `models` and `gpus --catalog` as a user runs them."""

from __future__ import annotations

import json

import pytest

from planner.cli.main import main
from planner.models.presets import find_preset
from tests.cli_helpers import run_cli

EXAMPLE = ['estimate', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--micro-batch', '2',
           '--gpu', 'h100-sxm', '--gpus-per-node', '8', '--zero', '1']




def test_estimate_json_schema(capsys):
    code, out, err = run_cli(capsys, *EXAMPLE, '--json')
    assert code == 0, err
    doc = json.loads(out)
    assert doc['model']['parameters'] == 8_030_261_248
    config = doc['config']
    # every input with its default filled in
    assert config['seq_len'] == 4096
    assert config['micro_batch'] == 2
    assert config['dp'] == 8
    # no --framework: the first stack that runs ZeRO-1 (HF + DeepSpeed), with its recipe
    assert config['framework'] == 'hf-deepspeed'
    assert config['precision'] == 'ds-bf16'
    assert doc['stack'] == {'key': 'hf-deepspeed', 'assumed': True}
    assert config['optimizer'] == 'adamw'
    assert config['recompute'] == 'none'
    assert config['attention'] == 'flash'
    assert config['global_batch'] == 16
    memory = doc['memory']
    for part in ('weights', 'gradients', 'optimizer_states', 'activations'):
        assert part in memory['components']
    assert sum(memory['components'].values()) == pytest.approx(memory['tensor_peak_bytes'],
                                                               abs=16)
    assert memory['total_bytes'] > memory['tensor_peak_bytes']
    assert memory['capacity_bytes'] == 81559 * 2**20
    assert memory['fits'] is (memory['headroom_bytes'] >= 0)
    assert memory['peak_phase'] in memory['phases']


def test_estimate_text_names_every_part_and_the_verdict(capsys):
    code, out, _ = run_cli(capsys, *EXAMPLE, '--recompute', 'full')
    assert code == 0
    for words in ('weights', 'optimizer states', 'activations', 'tensor peak', 'CUDA context',
                  'allocator reserve', 'total', 'GiB'):
        assert words in out
    assert 'fits' in out or 'DOES NOT FIT' in out


def test_zero_and_recompute_lower_the_peak(capsys):
    def peak(*extra):
        code, out, _ = run_cli(capsys, *EXAMPLE, '--json', *extra)
        assert code == 0
        return json.loads(out)['memory']['total_bytes']

    assert peak('--recompute', 'full') < peak()
    assert peak('--zero', '3') < peak('--zero', '1')


def test_fits_verdict_follows_the_gpu(capsys):
    tiny = ['estimate', '--model', 'gpt2', '--seq-len', '1024', '--micro-batch', '1', '--json']
    _, out, _ = run_cli(capsys, *tiny, '--gpu', 'h100-sxm')
    assert json.loads(out)['memory']['fits'] is True
    _, out, _ = run_cli(capsys, 'estimate', '--model', 'llama-3.1-70b', '--seq-len', '4096',
                    '--micro-batch', '1', '--gpu', 't4', '--json')
    assert json.loads(out)['memory']['fits'] is False


def test_hf_config_and_size_sources(capsys, tmp_path):
    config = tmp_path / 'config.json'
    config.write_text(json.dumps({
        'model_type': 'llama', 'hidden_size': 4096, 'intermediate_size': 14336,
        'num_hidden_layers': 32, 'num_attention_heads': 32, 'num_key_value_heads': 8,
        'vocab_size': 128256, 'tie_word_embeddings': False}))
    code, out, _ = run_cli(capsys, 'estimate', '--model', str(config), '--seq-len', '2048',
                       '--micro-batch', '1', '--json')
    assert code == 0
    assert json.loads(out)['model']['parameters'] == 8_030_261_248
    code, out, _ = run_cli(capsys, 'estimate', '--model', '7B', '--seq-len', '2048',
                       '--micro-batch', '1', '--json')
    assert code == 0
    assert json.loads(out)['model']['parameters'] == pytest.approx(7e9, rel=0.05)


@pytest.mark.parametrize(('argv', 'field'), [
    (['--model', 'lama-3.1-8b'], '--model'),
    (['--seq-len', '0'], '--seq-len'),
    (['--seq-len', 'abc'], '--seq-len'),
    (['--micro-batch', '-3'], '--micro-batch'),
    (['--tp', '3', '--gpus-per-node', '3'], '--tp'),
    (['--pp', '64'], '--pp'),
    (['--tp', '16'], '--tp'),
    (['--gpus-per-node', '6', '--tp', '4'], '--gpus-per-node'),
    (['--gpu', 'h1000'], '--gpu'),
    (['--zero', '5'], '--zero'),
    (['--precision', 'fp12'], '--precision'),
    (['--lora-rank', '0'], '--lora-rank'),
    (['--margin', '1.5'], '--margin'),
    (['--offload', 'params'], '--offload'),
])
def test_bad_input_exits_2_with_one_line_naming_the_field(capsys, argv, field):
    base = {'--model': 'llama-3.1-8b', '--seq-len': '2048', '--micro-batch': '1',
            '--gpus-per-node': '8'}
    for i in range(0, len(argv), 2):
        base[argv[i]] = argv[i + 1]
    args = ['estimate'] + [x for kv in base.items() for x in kv]
    with pytest.raises(SystemExit) if _argparse_level(field) else _no_raise():
        code = main(args)
        assert code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert field in lines[0]
    assert 'Traceback' not in err
    assert out == ''


def _argparse_level(field: str) -> bool:
    # argparse itself rejects types and choices (and exits 2 through SystemExit).
    return field in ('--seq-len', '--micro-batch', '--zero', '--precision', '--lora-rank',
                     '--margin')


class _no_raise:  # noqa: N801 - used like pytest.raises
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_malformed_config_json(capsys, tmp_path):
    bad = tmp_path / 'config.json'
    bad.write_text('{"model_type": "llama", "hidden_size": ')
    code = main(['estimate', '--model', str(bad), '--seq-len', '128', '--micro-batch', '1'])
    _, err = capsys.readouterr()
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert 'config.json' in err


def test_unknown_model_type_names_the_needed_fields(capsys, tmp_path):
    cfg = tmp_path / 'config.json'
    cfg.write_text(json.dumps({'model_type': 'mamba', 'd_model': 768}))
    code = main(['estimate', '--model', str(cfg), '--seq-len', '128', '--micro-batch', '1'])
    _, err = capsys.readouterr()
    assert code == 2
    assert 'num_hidden_layers' in err
    assert 'mamba' in err


def test_models_and_gpu_catalog_listings(capsys):
    code, out, _ = run_cli(capsys, 'models', '--json')
    assert code == 0
    presets = json.loads(out)
    assert len(presets) >= 25
    by_key = {p['key']: p for p in presets}
    assert by_key['llama-3.1-8b']['parameters'] == find_preset('llama-3.1-8b').total_params()
    code, out, _ = run_cli(capsys, 'gpus', '--catalog', '--json')
    assert code == 0
    catalog = json.loads(out)
    assert len(catalog['gpus']) >= 25
    assert len(catalog['interconnects']) >= 5
    code, out, _ = run_cli(capsys, 'gpus', '--catalog')
    assert 'H100' in out
    assert 'InfiniBand' in out
