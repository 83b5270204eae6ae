"""The Llama-style size rule: within 5 % of every size from 10M to 2T, sane shapes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InputError
from planner.models.size_rule import parse_size, preferred_depth, spec_from_size


def _check_shape(spec):
    h = spec.hidden_size
    assert spec.num_heads * spec.head_dim == h
    assert spec.head_dim == (64 if h < 2048 else 128)
    assert spec.num_kv_heads == (spec.num_heads if h < 3072 else 8)
    assert spec.ffn_size % 256 == 0
    assert spec.ffn_size >= 8 * h / 3
    assert spec.gated_mlp
    assert spec.norm == 'rmsnorm'
    assert spec.vocab_size == 32000
    assert spec.tied_embeddings == (h < 2048)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=math.log(10e6), max_value=math.log(2e12)))
def test_within_5_percent_10m_to_2t(log_target):
    target = math.exp(log_target)
    spec = spec_from_size(f'{target / 1e6:.6f}M')
    assert spec.total_params() == pytest.approx(target, rel=0.05)
    _check_shape(spec)


def test_log_sweep_within_5_percent():
    worst = 0.0
    for i in range(401):
        target = 10e6 * (2e12 / 10e6) ** (i / 400)
        spec = spec_from_size(f'{target / 1e9:.9f}B')
        worst = max(worst, abs(spec.total_params() / target - 1))
    assert worst < 0.05


@pytest.mark.parametrize(('text', 'layers', 'hidden'), [
    ('124M', 14, 768),
    ('350M', 25, 1024),
    ('7B', 38, 4096),
    ('70B', 80, 9216),
])
def test_familiar_sizes_get_familiar_shapes(text, layers, hidden):
    spec = spec_from_size(text)
    assert (spec.num_layers, spec.hidden_size) == (layers, hidden)
    assert spec.total_params() == pytest.approx(parse_size(text), rel=0.02)


@pytest.mark.parametrize('text', ['10M', '1.5b', '13B', '175B', '405B', '1T', '2T', '10T'])
def test_named_sizes(text):
    spec = spec_from_size(text)
    assert spec.total_params() == pytest.approx(parse_size(text), rel=0.05)
    # The depth stays near the preferred depth for the width once sizes are real.
    if parse_size(text) >= 1e9:
        assert 0.5 < spec.num_layers / preferred_depth(spec.hidden_size) < 2
    assert text.upper() in spec.name
    assert 'size rule' in spec.source
    _check_shape(spec)


def test_deterministic():
    assert spec_from_size('7B') == spec_from_size('7b')


@pytest.mark.parametrize(('text', 'value'), [
    ('7B', 7e9), ('7b', 7e9), (' 1.5B ', 1.5e9), ('350M', 350e6), ('1T', 1e12),
    ('.5B', 0.5e9), ('125 m', 125e6), ('800k', 800e3),
])
def test_parse_size(text, value):
    assert parse_size(text) == pytest.approx(value)


@pytest.mark.parametrize('text', ['7', 'B', '7GB', 'seven B', '7B7', '-7B', 'llama-7b'])
def test_not_a_size(text):
    assert parse_size(text) is None
    with pytest.raises(InputError) as info:
        spec_from_size(text)
    assert info.value.field == '--model'


@pytest.mark.parametrize('text', ['1M', '800k', '20T'])
def test_out_of_range(text):
    with pytest.raises(InputError, match='outside') as info:
        spec_from_size(text)
    assert info.value.field == '--model'


def test_preferred_depth_reproduces_its_anchors():
    assert preferred_depth(4096) == pytest.approx(32)
    assert preferred_depth(12288) == pytest.approx(96)
    assert preferred_depth(384) == pytest.approx(6)  # constant aspect below GPT-2 small
    assert preferred_depth(51200) == pytest.approx(256)  # and above Megatron 1T
