"""Reading Hugging Face config.json files: every supported family, quirks and errors.

The fixtures in ``data/hf_configs`` reproduce the public config.json of each model.
Every count asserted below was also worked out by hand, e.g. pythia-160m:
embed_in + embed_out 2·50304·768 = 77,266,944; per layer 4·768² + 4·768 (attention
with biases) + 2·768·3072 + 3072 + 768 (MLP) + 4·768 (two LayerNorms) = 7,087,872;
12 layers + final LayerNorm 1,536 → 162,322,944.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.models.hf_config import SUPPORTED_MODEL_TYPES, spec_from_hf_config
from planner.models.presets import find_preset

DATA = Path(__file__).parent / 'data' / 'hf_configs'

# fixture file, exact parameter count of the checkpoint, matching preset
CHECKPOINTS = [
    ('llama-3.1-8b.json', 8_030_261_248, 'llama-3.1-8b'),
    ('mistral-7b-v0.1.json', 7_241_732_096, 'mistral-7b'),
    ('mixtral-8x7b-v0.1.json', 46_702_792_704, 'mixtral-8x7b'),
    ('qwen2.5-7b.json', 7_615_616_512, 'qwen2.5-7b'),
    ('qwen2.5-0.5b.json', 494_032_768, 'qwen2.5-0.5b'),
    ('qwen3-8b.json', 8_190_735_360, 'qwen3-8b'),
    ('gemma-2b.json', 2_506_172_416, 'gemma-2b'),
    ('gemma-2-9b.json', 9_241_705_984, 'gemma-2-9b'),
    ('gpt2.json', 124_439_808, 'gpt2-124m'),
    ('pythia-160m.json', 162_322_944, 'pythia-160m'),
    ('phi-3-mini-4k-instruct.json', 3_821_079_552, 'phi-3-mini'),
    # transformers' GptOssForCausalLM built from this config on the meta device
    ('gpt-oss-120b.json', 116_829_156_672, 'gpt-oss-120b'),
]

LLAMA_FIELDS = {
    'model_type': 'llama', 'hidden_size': 256, 'num_hidden_layers': 2,
    'num_attention_heads': 4, 'intermediate_size': 512, 'vocab_size': 1000,
}


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text(encoding='utf-8'))


def _shape(spec):
    return dataclasses.replace(spec, name='', source='')


@pytest.mark.parametrize(('name', 'count', 'preset'), CHECKPOINTS)
def test_published_counts(name, count, preset):
    spec = spec_from_hf_config(DATA / name)
    assert spec.total_params() == count
    # The preset was written from the same config.json: same shape, field for field.
    assert _shape(spec) == _shape(find_preset(preset))


def test_gpt_oss_active_parameters_match_the_model_card():
    # OpenAI's gpt-oss model card: 116.83B total, 5.13B active per token, the input
    # embedding (a lookup, not a matmul) left out of the active count
    spec = spec_from_hf_config(DATA / 'gpt-oss-120b.json')
    assert round(spec.total_params() / 1e9, 2) == 116.83
    assert round((spec.active_params() - spec.embedding_params()) / 1e9, 2) == 5.13
    assert spec.moe is not None
    assert spec.moe.router_bias
    assert spec.attention_sinks
    assert spec.attention_masks == 2  # sliding and full layers alternate


def test_llama_fields():
    spec = spec_from_hf_config(DATA / 'llama-3.1-8b.json')
    assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads) == (
        32, 4096, 32, 8)
    assert spec.head_dim == 128
    assert spec.activation == 'silu'
    assert not spec.tied_embeddings
    assert spec.max_position_embeddings == 131072
    assert spec.norm == 'rmsnorm'
    assert spec.name == 'llama-3.1-8b'  # the file's stem when it is not config.json
    assert 'model_type llama' in spec.source


def test_folder_and_dict_inputs(tmp_path):
    folder = tmp_path / 'Mistral-7B-v0.1'
    folder.mkdir()
    (folder / 'config.json').write_text((DATA / 'mistral-7b-v0.1.json').read_text())
    spec = spec_from_hf_config(folder)
    assert spec.name == 'Mistral-7B-v0.1'
    assert spec.total_params() == 7_241_732_096
    from_dict = spec_from_hf_config(_load('mistral-7b-v0.1.json'), name='mine')
    assert from_dict.name == 'mine'
    assert _shape(from_dict) == _shape(spec)


def test_name_or_path_names_the_spec():
    assert spec_from_hf_config(DATA / 'phi-3-mini-4k-instruct.json').name == (
        'Phi-3-mini-4k-instruct')


def test_qwen2_bias_and_tying():
    small = spec_from_hf_config(DATA / 'qwen2.5-0.5b.json')
    big = spec_from_hf_config(DATA / 'qwen2.5-7b.json')
    assert small.tied_embeddings
    assert not big.tied_embeddings
    for spec in (small, big):
        assert spec.qkv_bias
        assert not spec.attn_out_bias
        assert not spec.mlp_bias
    assert (small.vocab_size, big.vocab_size) == (151936, 152064)


def test_qwen3_qk_norm_and_head_dim():
    spec = spec_from_hf_config(DATA / 'qwen3-8b.json')
    assert spec.qk_norm
    assert spec.head_dim == 128
    assert not spec.qkv_bias
    # head_dim defaults to 128 in Qwen3 even when hidden/heads says otherwise.
    cfg = {**_load('qwen3-8b.json'), 'head_dim': None, 'hidden_size': 2048}
    assert spec_from_hf_config(cfg).head_dim == 128


def test_gemma_quirks():
    gemma = spec_from_hf_config(DATA / 'gemma-2b.json')
    # hidden_act says "gelu" but transformers runs the tanh approximation.
    assert gemma.activation == 'gelu_tanh'
    assert gemma.tied_embeddings
    assert gemma.num_kv_heads == 1
    assert gemma.head_dim == 256
    assert gemma.norms_per_layer == 2
    gemma2 = spec_from_hf_config(DATA / 'gemma-2-9b.json')
    assert gemma2.norms_per_layer == 4
    assert gemma2.q_size == 4096 != gemma2.hidden_size
    untied = spec_from_hf_config({**_load('gemma-2b.json'), 'tie_word_embeddings': False})
    assert untied.total_params() == gemma.total_params() + 256000 * 2048


def test_gpt2_quirks():
    spec = spec_from_hf_config(DATA / 'gpt2.json')
    assert spec.ffn_size == 4 * 768  # n_inner absent (null) -> 4h
    assert spec.attention_dropout == spec.hidden_dropout == 0.1
    assert spec.position_embedding == 'learned'
    assert spec.max_position_embeddings == 1024
    assert spec.norm == 'layernorm'
    assert spec.tied_embeddings
    assert not spec.gated_mlp
    assert spec.qkv_bias
    assert spec.attn_out_bias
    assert spec.mlp_bias
    assert spec.activation == 'gelu_tanh'
    inner = spec_from_hf_config({**_load('gpt2.json'), 'n_inner': 1024})
    assert inner.ffn_size == 1024


def test_gpt_neox_quirks():
    spec = spec_from_hf_config(DATA / 'pythia-160m.json')
    assert not spec.tied_embeddings
    assert spec.position_embedding == 'rotary'
    assert spec.norm == 'layernorm'
    assert not spec.gated_mlp
    assert spec.activation == 'gelu'
    assert spec.qkv_bias
    assert spec.attn_out_bias
    assert spec.mlp_bias
    dropped = spec_from_hf_config({**_load('pythia-160m.json'), 'hidden_dropout': 0.1,
                                   'attention_dropout': 0.05})
    assert (dropped.hidden_dropout, dropped.attention_dropout) == (0.1, 0.05)


def test_phi3_fused_projections_and_dropout():
    spec = spec_from_hf_config({**_load('phi-3-mini-4k-instruct.json'), 'resid_pdrop': 0.1})
    assert spec.hidden_dropout == 0.1
    assert spec.num_kv_heads == 32
    assert spec.total_params() == 3_821_079_552  # dropout adds no weights


def test_how_hf_modules_compute():
    gpt2 = spec_from_hf_config(DATA / 'gpt2.json')
    assert gpt2.fused_qkv  # one c_attn projection
    assert gpt2.python_gelu  # "gelu_new" is written as Python ops
    assert not spec_from_hf_config({**_load('gpt2.json'),
                                    'activation_function': 'gelu_pytorch_tanh'}).python_gelu
    neox = spec_from_hf_config(DATA / 'pythia-160m.json')
    assert neox.fused_qkv
    assert not neox.python_gelu
    phi3 = spec_from_hf_config(DATA / 'phi-3-mini-4k-instruct.json')
    assert phi3.fused_qkv
    assert phi3.fused_gate_up
    llama = spec_from_hf_config(DATA / 'llama-3.1-8b.json')
    assert (llama.fused_qkv, llama.fused_gate_up, llama.python_gelu) == (False, False, False)


def test_mixtral_experts():
    spec = spec_from_hf_config(DATA / 'mixtral-8x7b-v0.1.json')
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.expert_ffn_size) == (8, 2, 14336)
    assert spec.active_params() / 1e9 == pytest.approx(12.88, abs=0.01)


def test_qwen2_moe_shared_expert():
    spec = spec_from_hf_config(DATA / 'qwen1.5-moe-a2.7b.json')
    moe = spec.moe
    assert moe is not None
    assert (moe.num_experts, moe.top_k, moe.expert_ffn_size) == (60, 4, 1408)
    assert (moe.shared_experts, moe.shared_ffn_size, moe.first_dense_layers) == (1, 5632, 0)
    # The checkpoint's 14,315,784,192 includes a 2048x1 shared-expert gate per layer.
    assert spec.total_params() == 14_315_784_192 - 24 * 2048
    assert 'shared-expert gate' in spec.source
    assert _shape(spec) == _shape(find_preset('qwen1.5-moe-a2.7b'))


def test_qwen3_moe_matches_preset():
    cfg = {**_load('qwen3-8b.json'), 'model_type': 'qwen3_moe', 'hidden_size': 2048,
           'num_hidden_layers': 48, 'num_key_value_heads': 4, 'intermediate_size': 6144,
           'num_experts': 128, 'num_experts_per_tok': 8, 'moe_intermediate_size': 768,
           'decoder_sparse_step': 1, 'mlp_only_layers': []}
    spec = spec_from_hf_config(cfg)
    assert spec.total_params() == 30_532_122_624  # Qwen3-30B-A3B
    assert _shape(spec) == _shape(find_preset('qwen3-30b-a3b'))


def test_moe_leading_dense_layers_and_interleaving():
    base = {**_load('qwen1.5-moe-a2.7b.json'), 'mlp_only_layers': [0, 1]}
    assert spec_from_hf_config(base).moe.first_dense_layers == 2
    with pytest.raises(InputError) as info:
        spec_from_hf_config({**base, 'mlp_only_layers': [], 'decoder_sparse_step': 2})
    assert info.value.field == 'mlp_only_layers'


def test_missing_kv_heads_means_multi_head_and_head_dim_key_wins():
    spec = spec_from_hf_config(LLAMA_FIELDS)
    assert spec.num_kv_heads == 4
    assert spec.head_dim == 64
    assert not spec.tied_embeddings
    nemo_like = spec_from_hf_config({**LLAMA_FIELDS, 'model_type': 'mistral', 'head_dim': 32,
                                     'num_key_value_heads': None})
    assert nemo_like.head_dim == 32
    assert nemo_like.q_size == 128


def test_llama_attention_and_mlp_bias():
    spec = spec_from_hf_config({**LLAMA_FIELDS, 'attention_bias': True, 'mlp_bias': True})
    assert spec.qkv_bias
    assert spec.attn_out_bias
    assert spec.mlp_bias


def test_olmo2_notes_what_it_cannot_count():
    spec = spec_from_hf_config({**LLAMA_FIELDS, 'model_type': 'olmo2'})
    assert spec.qk_norm
    assert 'not counted' in spec.source


def test_text_config_of_a_multimodal_wrapper():
    wrapper = {'model_type': 'llava', 'architectures': ['LlavaForConditionalGeneration'],
               'text_config': {k: v for k, v in _load('llama-3.1-8b.json').items()
                               if k != 'architectures'},
               'vision_config': {'model_type': 'clip_vision_model', 'hidden_size': 1024}}
    assert spec_from_hf_config(wrapper).total_params() == 8_030_261_248
    gemma3 = {'model_type': 'gemma3', 'tie_word_embeddings': True,
              'text_config': {k: v for k, v in _load('gemma-2-9b.json').items()
                              if k not in ('model_type', 'tie_word_embeddings')}}
    spec = spec_from_hf_config(gemma3)
    assert spec.qk_norm
    assert spec.norms_per_layer == 4
    assert spec.tied_embeddings


def test_generic_fallback_is_flagged():
    spec = spec_from_hf_config({**LLAMA_FIELDS, 'model_type': 'my_new_llm'})
    assert 'generically' in spec.source
    assert spec.num_layers == 2


def test_unsupported_model_type_lists_what_is_needed():
    with pytest.raises(InputError) as info:
        spec_from_hf_config({'model_type': 'mamba', 'd_model': 768, 'n_layer': 24})
    message = str(info.value)
    assert info.value.field == 'config.json'
    assert "unsupported model_type 'mamba'" in message
    for needed in ('num_hidden_layers', 'hidden_size', 'num_attention_heads',
                   'intermediate_size', 'vocab_size', 'num_key_value_heads'):
        assert needed in message
    assert all(kind in message for kind in SUPPORTED_MODEL_TYPES)


def test_malformed_and_truncated_json(tmp_path):
    text = (DATA / 'llama-3.1-8b.json').read_text()
    truncated = tmp_path / 'config.json'
    truncated.write_text(text[: len(text) // 2])
    with pytest.raises(InputError, match='not valid JSON') as info:
        spec_from_hf_config(tmp_path)
    assert info.value.field == 'config.json'
    truncated.write_text('[1, 2]')
    with pytest.raises(InputError, match='JSON object'):
        spec_from_hf_config(truncated)
    truncated.write_bytes(b'\xff\xfe{')
    with pytest.raises(InputError, match='UTF-8'):
        spec_from_hf_config(truncated)
    with pytest.raises(InputError, match='does not exist'):
        spec_from_hf_config(tmp_path / 'nowhere.json')


@pytest.mark.parametrize(('change', 'field', 'match'), [
    ({'num_hidden_layers': None}, 'num_hidden_layers', 'missing'),
    ({'vocab_size': None}, 'vocab_size', 'missing'),
    ({'hidden_size': -4096}, 'hidden_size', 'positive'),
    ({'intermediate_size': 0}, 'intermediate_size', 'positive'),
    ({'hidden_size': '4096'}, 'hidden_size', 'integer'),
    ({'num_attention_heads': 32.0}, 'num_attention_heads', 'integer'),
    ({'num_hidden_layers': True}, 'num_hidden_layers', 'integer'),
    ({'tie_word_embeddings': 'no'}, 'tie_word_embeddings', 'true or false'),
    ({'attention_dropout': 1.5}, 'attention_dropout', 'probability'),
    ({'hidden_act': 'mish'}, 'hidden_act', 'unsupported activation'),
    ({'num_key_value_heads': 5}, 'num_kv_heads', 'divide'),
])
def test_bad_fields_are_named(change, field, match):
    cfg = {**_load('llama-3.1-8b.json'), **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(InputError, match=match) as info:
        spec_from_hf_config(cfg)
    assert info.value.field == field


def test_gpt2_missing_field_uses_its_own_name():
    cfg = {k: v for k, v in _load('gpt2.json').items() if k != 'n_embd'}
    with pytest.raises(InputError) as info:
        spec_from_hf_config(cfg)
    assert info.value.field == 'n_embd'
