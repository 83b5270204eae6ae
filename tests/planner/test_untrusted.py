"""Untrusted files: size and depth bounds, one clear error, no RecursionError, nothing written."""

from __future__ import annotations

import json

import pytest

from planner import untrusted
from planner.calibrate.profile import load_profile
from planner.errors import InputError
from planner.models.hf_config import spec_from_hf_config
from planner.planfile.document import read_plan
from planner.user_config import parse_user_toml

DEEP = 100_000


def _deep_json(depth: int) -> str:
    return '[' * depth + ']' * depth


@pytest.mark.parametrize('reader', [spec_from_hf_config, read_plan, load_profile])
def test_deeply_nested_json_is_one_input_error(tmp_path, reader):
    path = tmp_path / 'config.json'
    path.write_text('{"a": ' + _deep_json(DEEP) + '}')
    with pytest.raises(InputError, match=r'deeper|not valid|nests'):
        reader(path)


@pytest.mark.parametrize('reader', [spec_from_hf_config, read_plan, load_profile])
def test_moderately_nested_json_is_refused_by_depth(tmp_path, reader):
    path = tmp_path / 'config.json'
    path.write_text('{"a": ' + _deep_json(500) + '}')
    with pytest.raises(InputError, match='deeper than 64'):
        reader(path)


def test_oversized_file_is_refused_before_parsing(tmp_path, monkeypatch):
    monkeypatch.setitem(untrusted.MAX_BYTES, 'plan', 1000)
    path = tmp_path / 'big.json'
    path.write_text(json.dumps({'x': 'a' * 2000}))
    with pytest.raises(InputError, match='larger than'):
        read_plan(path)


def test_huge_integer_literal_is_an_input_error(tmp_path):
    path = tmp_path / 'config.json'
    path.write_text('{"hidden_size": ' + '9' * 5000 + '}')
    with pytest.raises(InputError):
        spec_from_hf_config(path)


def test_deep_toml_is_one_input_error(tmp_path):
    with pytest.raises(InputError, match='deeper'):
        parse_user_toml('a = ' + '[' * DEEP + ']' * DEEP, tmp_path / 'user.toml')


def test_bad_profile_writes_nothing(tmp_path):
    path = tmp_path / 'profile.json'
    path.write_text(_deep_json(DEEP))
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(InputError):
        load_profile(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(('config', 'kind'), [
    ({'model_type': 'bert', 'architectures': ['BertForMaskedLM'], 'hidden_size': 768,
      'num_hidden_layers': 12, 'num_attention_heads': 12, 'intermediate_size': 3072,
      'vocab_size': 30522}, 'an encoder'),
    ({'model_type': 't5', 'is_encoder_decoder': True, 'd_model': 512}, 'encoder-decoder'),
    ({'model_type': 'newthing', 'architectures': ['NewThingForSequenceClassification'],
      'hidden_size': 768, 'num_hidden_layers': 12, 'num_attention_heads': 12,
      'intermediate_size': 3072, 'vocab_size': 30522}, 'classifier'),
])
def test_non_decoders_are_refused_with_the_supported_list(config, kind):
    with pytest.raises(InputError, match=kind) as info:
        spec_from_hf_config(config)
    assert 'llama' in str(info.value)
    assert 'not a causal decoder' in str(info.value)


def test_unknown_causal_decoder_is_still_read_generically():
    spec = spec_from_hf_config({'model_type': 'newthing', 'architectures': ['NewForCausalLM'],
                                'hidden_size': 768, 'num_hidden_layers': 12,
                                'num_attention_heads': 12, 'intermediate_size': 3072,
                                'vocab_size': 32000})
    assert spec.num_layers == 12


@pytest.mark.parametrize(('section', 'key', 'value'), [
    ('targets', 'seq_len', 2**40), ('targets', 'global_batch', 9007199254740993),
    ('cluster', 'max_nodes', 10**9), ('targets', 'seq_len', 1e300)])
def test_plan_file_numbers_are_range_checked(tmp_path, section, key, value):
    from planner.planfile.document import write_plan
    from tests.export_helpers import make_plan

    path = tmp_path / 'plan.json'
    write_plan(path, make_plan(global_batch=64))
    doc = json.loads(path.read_text())
    doc[section][key] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=key):
        read_plan(path)
