"""Parameter and FLOP counts of ModelSpec against published numbers and hand formulas."""

from __future__ import annotations

import pytest

from planner.models.presets import find_preset
from planner.models.spec import ModelSpec

# Exact counts of the released checkpoints (the Hugging Face checkpoints and model cards).
PUBLISHED = [
    ('llama-3.1-8b', 8_030_261_248),
    ('llama-3.1-70b', 70_553_706_496),
    ('llama-2-7b', 6_738_415_616),
    ('mistral-7b', 7_241_732_096),
    ('gpt2', 124_439_808),
    ('qwen2.5-7b', 7_615_616_512),
]

MEGATRON = [  # Korthikanti et al. 2022: key, heads, hidden, layers
    ('megatron-22b', 64, 6144, 48),
    ('megatron-175b', 96, 12288, 96),
    ('megatron-530b', 128, 20480, 105),
    ('megatron-1t', 160, 25600, 128),
]


@pytest.mark.parametrize(('key', 'count'), PUBLISHED)
def test_preset_counts_equal_published(key, count):
    assert find_preset(key).total_params() == count


def test_mixtral_total_and_active():
    spec = find_preset('mixtral-8x7b')
    assert spec.total_params() / 1e9 == pytest.approx(46.70, abs=0.01)
    assert spec.active_params() / 1e9 == pytest.approx(12.88, abs=0.01)
    # Active = total minus the 6 idle experts of every layer.
    idle = 6 * 3 * 4096 * 14336 * 32
    assert spec.total_params() - spec.active_params() == idle


def _matmul_weights(spec: ModelSpec) -> int:
    """Weights one token multiplies by, by hand: projections, MLP and output head."""
    h, q, kv, f = spec.hidden_size, spec.q_size, spec.kv_size, spec.ffn_size
    return spec.num_layers * (2 * h * q + 2 * h * kv + 3 * h * f) + spec.vocab_size * h


@pytest.mark.parametrize('seq_len', [2048, 8192])
def test_training_flops_are_6n_plus_attention(seq_len):
    spec = find_preset('llama-3.1-8b')
    n = _matmul_weights(spec)
    assert spec.matmul_params_per_token() == n
    core = spec.num_layers * seq_len * spec.q_size
    # Causal kernels skip the masked half of QK^T and AV: 6·L·s·q instead of PaLM's 12.
    assert spec.training_flops_per_token(seq_len) == pytest.approx(6 * n + 6 * core)
    assert spec.training_flops_per_token(seq_len, causal=False) == pytest.approx(
        6 * n + 12 * core)
    # The matmul weights are the parameters less the input embedding and the norms.
    norms = spec.num_layers * 2 * spec.hidden_size + spec.hidden_size
    assert n == spec.total_params() - spec.embedding_params() - norms


def test_full_recompute_adds_one_forward_without_the_head():
    spec = find_preset('llama-3.1-8b')
    s = 4096
    fwd = 2 * _matmul_weights(spec) + 2 * spec.num_layers * s * spec.q_size
    head = 2 * spec.vocab_size * spec.hidden_size
    base = spec.training_flops_per_token(s)
    assert base == pytest.approx(3 * fwd)
    assert spec.training_flops_per_token(s, recompute='full') == pytest.approx(base + fwd - head)
    # Selective recompute re-runs only the attention core.
    selective = base + 2 * spec.num_layers * s * spec.q_size
    assert spec.training_flops_per_token(s, recompute='selective') == pytest.approx(selective)


def test_moe_flops_count_top_k_experts_and_router():
    spec = find_preset('mixtral-8x7b')
    h, layers = spec.hidden_size, spec.num_layers
    attn = 2 * h * spec.q_size + 2 * h * spec.kv_size
    expected = layers * (attn + 2 * 3 * h * 14336 + h * 8) + spec.vocab_size * h
    assert spec.matmul_params_per_token() == expected


@pytest.mark.parametrize(('key', 'heads', 'hidden', 'layers'), MEGATRON)
def test_megatron_shapes_match_narayanan_closed_form(key, heads, hidden, layers):
    spec = find_preset(key)
    assert (spec.num_heads, spec.hidden_size, spec.num_layers) == (heads, hidden, layers)
    h, n_layers, vocab, s = hidden, layers, 51200, 2048
    closed = 12 * n_layers * h**2 * (1 + 13 / (12 * h) + (vocab + s) / (12 * n_layers * h))
    # The closed form leaves out the final LayerNorm (2h).
    assert spec.total_params() == pytest.approx(closed + 2 * h, abs=1)


def test_megatron_flops_match_narayanan_eq3():
    spec = find_preset('megatron-175b')
    h, n_layers, vocab, s = 12288, 96, 51200, 2048
    # Per token: eq. 3 divided by B·s (full attention, as the paper counts it).
    no_recompute = 72 * n_layers * h**2 * (1 + s / (6 * h) + vocab / (12 * n_layers * h))
    full = 96 * n_layers * h**2 * (1 + s / (6 * h) + vocab / (16 * n_layers * h))
    assert spec.training_flops_per_token(s, causal=False) == pytest.approx(no_recompute)
    assert spec.training_flops_per_token(s, 'full', causal=False) == pytest.approx(full)


def test_narayanan_table_1_trillion():
    assert find_preset('megatron-1t').total_params() / 1e9 == pytest.approx(1008.04, abs=0.05)


def test_gpt3_is_174_6b():
    assert find_preset('gpt3-175b').total_params() / 1e9 == pytest.approx(174.6, abs=0.05)
