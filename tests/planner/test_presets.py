"""Model presets: the catalog, lookup, suggestions, user overrides; and resolve_model."""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.models.presets import find_preset, load_presets, normalize, preset_info
from planner.models.source import resolve_model

DATA = Path(__file__).parent / 'data' / 'hf_configs'

REQUIRED = [
    'gpt2-124m', 'gpt2-355m', 'gpt2-774m', 'gpt2-1.5b', 'gpt3-175b',
    'llama-2-7b', 'llama-2-13b', 'llama-2-70b', 'llama-3.1-8b', 'llama-3.1-70b',
    'llama-3.1-405b', 'mistral-7b', 'mixtral-8x7b', 'qwen2.5-0.5b', 'qwen2.5-1.5b',
    'qwen2.5-7b', 'qwen2.5-14b', 'qwen2.5-32b', 'qwen2.5-72b', 'megatron-22b',
    'megatron-175b', 'megatron-530b', 'megatron-1t', 'llama-3.2-1b', 'llama-3.2-3b',
    'gemma-2-2b', 'gemma-2-9b', 'gemma-2-27b', 'phi-3-mini', 'qwen3-8b', 'mistral-nemo-12b',
]


def _write_user_toml(text: str) -> None:
    folder = Path(os.environ['BATCHFIT_CONFIG_DIR'])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / 'user.toml').write_text(text, encoding='utf-8')


def test_catalog_size_and_required_presets():
    presets = load_presets()
    assert len(presets) >= 30
    assert set(REQUIRED) <= set(presets)
    assert all(key == key.lower() for key in presets)


def test_published_counts_hold():
    checked = 0
    for key, spec in load_presets().items():
        info = preset_info(key)
        assert info['source'] == spec.source != ''
        if info['published_params'] is not None:
            assert spec.total_params() == info['published_params'], key
            checked += 1
    assert checked >= 25


def test_every_lookup_name_is_unambiguous():
    owners = defaultdict(set)
    for key in load_presets():
        spec, info = load_presets()[key], preset_info(key)
        names = [key, spec.name, *info['aliases'], *([info['hf_id']] if info['hf_id'] else [])]
        names += [name.rsplit('/', 1)[1] for name in names if '/' in name]
        for name in names:
            owners[normalize(name)].add(key)
    assert {name: keys for name, keys in owners.items() if len(keys) > 1} == {}


@pytest.mark.parametrize('text', [
    'llama-3.1-8b', 'LLAMA-3.1-8B', 'llama 3.1 8b', 'Llama_3.1_8B', 'meta-llama/Llama-3.1-8B',
    'Llama-3.1-8B', 'llama3.1-8b', 'meta-llama/Llama-3.1-8B-Instruct', ' llama-3.1-8b ',
])
def test_lookup_forms(text):
    assert find_preset(text) == find_preset('llama-3.1-8b')


@pytest.mark.parametrize(('text', 'key'), [
    ('gpt2', 'gpt2-124m'), ('gpt2-xl', 'gpt2-1.5b'), ('openai-community/gpt2-medium', 'gpt2-355m'),
    ('Qwen/Qwen2.5-7B-Instruct', 'qwen2.5-7b'), ('Llama-3.3-70B', 'llama-3.1-70b'),
    ('mistralai/Mistral-7B-v0.1', 'mistral-7b'), ('Mixtral-8x7B-v0.1', 'mixtral-8x7b'),
    ('EleutherAI/pythia-160m', 'pythia-160m'), ('GPT-3', 'gpt3-175b'),
])
def test_aliases_and_hf_ids(text, key):
    assert find_preset(text) == find_preset(key)


def test_unknown_model_suggests_close_names():
    with pytest.raises(InputError) as info:
        find_preset('lama-3.1-8b')
    assert info.value.field == '--model'
    message = str(info.value)
    assert "unknown model 'lama-3.1-8b'; did you mean: llama-3.1-8b, " in message
    with pytest.raises(InputError, match='did you mean: mixtral-8x7b, '):
        find_preset('Mixtral 8x7')
    with pytest.raises(InputError, match="unknown model 'xyzzy'") as info:
        find_preset('xyzzy')
    assert 'did you mean' not in str(info.value)


def test_preset_info_for_listing():
    info = preset_info('Llama-3.1-8B')
    assert set(info) == {'aliases', 'hf_id', 'published_params', 'source', 'user'}
    assert info['hf_id'] == 'meta-llama/Llama-3.1-8B'
    assert info['published_params'] == 8_030_261_248
    assert 'llama3.1-8b' in info['aliases']
    assert not info['user']
    assert preset_info('gpt3-175b')['published_params'] is None
    json.dumps(info)  # the CLI lists it as JSON


def test_family_details():
    assert find_preset('qwen2.5-0.5b').tied_embeddings
    assert find_preset('qwen2.5-1.5b').tied_embeddings
    assert not find_preset('qwen2.5-7b').tied_embeddings
    assert all(find_preset(f'qwen2.5-{s}').qkv_bias for s in ('0.5b', '7b', '72b'))
    assert find_preset('qwen2.5-0.5b').vocab_size == 151936
    assert find_preset('qwen2.5-7b').vocab_size == 152064
    gpt2 = find_preset('gpt2')
    assert gpt2.attention_dropout == gpt2.hidden_dropout == 0.1
    assert (gpt2.activation, gpt2.position_embedding, gpt2.norm) == (
        'gelu_tanh', 'learned', 'layernorm')
    gpt3 = find_preset('gpt3-175b')
    assert (gpt3.num_layers, gpt3.hidden_size, gpt3.num_heads, gpt3.vocab_size) == (
        96, 12288, 96, 50257)
    assert gpt3.max_position_embeddings == 2048
    assert gpt3.tied_embeddings
    for key in ('megatron-22b', 'megatron-1t'):
        spec = find_preset(key)
        assert spec.vocab_size == 51200
        assert spec.ffn_size == 4 * spec.hidden_size
        assert spec.hidden_dropout == spec.attention_dropout == 0.1
    assert find_preset('gemma-2-9b').norms_per_layer == 4
    assert find_preset('qwen3-8b').qk_norm


def test_user_toml_overrides_and_adds():
    _write_user_toml('''
[models."llama-3.1-8b"]
max_position_embeddings = 8192

[models."mixtral-8x7b".moe]
top_k = 1

[models."My-Tiny"]
name = "my tiny model"
num_layers = 4
hidden_size = 256
num_heads = 4
num_kv_heads = 2
head_dim = 64
ffn_size = 768
vocab_size = 1000
aliases = ["tiny"]
source = "our experiment"
''')
    overridden = find_preset('llama-3.1-8b')
    assert overridden.max_position_embeddings == 8192
    assert overridden.total_params() == 8_030_261_248  # RoPE: no weights per position
    assert preset_info('llama-3.1-8b')['user']
    mixtral = find_preset('mixtral-8x7b')
    assert mixtral.moe.top_k == 1
    assert mixtral.moe.num_experts == 8
    tiny = find_preset('TINY')
    assert tiny.name == 'my tiny model'
    assert tiny.source == 'our experiment'
    assert 'my-tiny' in load_presets()


def test_user_preset_shadows_a_builtin_alias():
    _write_user_toml('''
[models.mine]
num_layers = 2
hidden_size = 128
num_heads = 2
num_kv_heads = 2
head_dim = 64
ffn_size = 256
vocab_size = 100
aliases = ["gpt2"]
''')
    assert find_preset('gpt2').name == 'mine'


@pytest.mark.parametrize(('table', 'field'), [
    ('num_layerz = 3', 'models.llama-3.1-8b.num_layerz'),
    ('num_layers = "32"', 'models.llama-3.1-8b.num_layers'),
    ('tied_embeddings = 1', 'models.llama-3.1-8b.tied_embeddings'),
    ('num_layers = -1', 'models.llama-3.1-8b.num_layers'),
    ('activation = "tanh"', 'models.llama-3.1-8b.activation'),
    ('aliases = "x"', 'models.llama-3.1-8b.aliases'),
])
def test_bad_user_fields_are_named(table, field):
    _write_user_toml(f'[models."llama-3.1-8b"]\n{table}\n')
    with pytest.raises(InputError) as info:
        load_presets()
    assert info.value.field == field


def test_new_user_preset_needs_the_shape():
    _write_user_toml('[models.half]\nnum_layers = 2\nhidden_size = 128\n')
    with pytest.raises(InputError, match='missing') as info:
        load_presets()
    assert info.value.field == 'models.half.num_heads'


# ---- resolve_model -----------------------------------------------------------------
def test_resolve_preset_size_and_files(tmp_path):
    assert resolve_model('Llama-3.1-8B') == find_preset('llama-3.1-8b')
    assert 'size rule' in resolve_model('7B').source
    spec = resolve_model(str(DATA / 'qwen3-8b.json'))
    assert spec.total_params() == 8_190_735_360
    shutil.copy(DATA / 'gpt2.json', tmp_path / 'config.json')
    assert resolve_model(str(tmp_path)).total_params() == 124_439_808


def test_resolve_errors(tmp_path):
    for text, match in [
        ('', 'empty'),
        (str(tmp_path), 'no config.json'),
        (str(tmp_path / 'missing.json'), 'no such file'),
        ('llama-9', 'unknown model'),
        ('20T', 'outside'),
    ]:
        with pytest.raises(InputError, match=match) as info:
            resolve_model(text)
        assert info.value.field == '--model'
    bad = tmp_path / 'bad.json'
    bad.write_text('{"model_type": "llama", "hidden_size": 64')
    with pytest.raises(InputError, match='not valid JSON') as info:
        resolve_model(str(bad))
    assert info.value.field == '--model'
