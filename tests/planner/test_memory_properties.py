"""Properties every memory estimate must have, checked over random configurations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.defaults import RECOMPUTE_MODES
from planner.errors import InputError
from planner.memory.peak import (
    ConfigArrays,
    MemoryOptions,
    estimate,
    estimate_arrays,
    tensor_peak_floor,
)
from planner.memory.training import LoraSpec, TrainingSetup
from planner.models.presets import find_preset

MODELS = {name: find_preset(name) for name in (
    'gpt2', 'llama-3.1-8b', 'qwen2.5-0.5b', 'mixtral-8x7b', 'gemma-2-9b', 'llama-2-13b')}

setups = st.fixed_dictionaries({
    'model': st.sampled_from(sorted(MODELS)),
    'seq_len': st.sampled_from([128, 512, 2048, 4096]),
    'micro_batch': st.integers(1, 8),
    'grad_accum': st.integers(1, 4),
    'precision': st.sampled_from(['fp32', 'amp-bf16', 'bf16-mixed', 'bf16', 'fp16-mixed']),
    'optimizer': st.sampled_from(['adamw', 'adamw-8bit', 'sgd-momentum', 'adafactor']),
    'zero': st.integers(0, 3),
    'recompute': st.sampled_from(['none', 'selective', 'full']),
    'attention': st.sampled_from(['flash', 'eager']),
    'framework': st.sampled_from(['hf', 'megatron']),
    'tp': st.sampled_from([1, 2]),
    'pp': st.sampled_from([1, 2, 4]),
    'dp': st.sampled_from([1, 2, 8, 16]),
})


def _setup(d: dict, **changes) -> tuple:
    d = {**d, **changes}
    model = MODELS[d.pop('model')]
    return model, TrainingSetup(**d)


@settings(max_examples=150, deadline=None)
@given(setups)
def test_memory_never_falls_as_the_micro_batch_or_sequence_grows(d):
    model, s = _setup(d)
    base = estimate(model, s).tensor_peak_bytes
    assert estimate(model, s.with_changes(micro_batch=s.micro_batch + 1)).tensor_peak_bytes >= base
    assert estimate(model, s.with_changes(seq_len=s.seq_len * 2)).tensor_peak_bytes >= base


@settings(max_examples=150, deadline=None)
@given(setups)
def test_a_higher_zero_stage_never_needs_more(d):
    """Holds once the shard group is large enough that sharding beats gathering.

    ZeRO-3 gathers the largest unit whole (often the embedding) and holds its unsharded
    gradient; on 2 ranks that can outweigh what sharding saves for a model whose
    embedding is a third of it (GPT-2), as it does on real hardware. From 8 ranks on
    (the data-parallel sizes ZeRO is used at) stage k+1 never needs more than k.
    """
    model, s = _setup(d, dp=max(d['dp'], 8))
    peaks = [estimate(model, s.with_changes(zero=z)).tensor_peak_bytes for z in range(4)]
    assert all(b <= a for a, b in itertools.pairwise(peaks)), peaks


@settings(max_examples=100, deadline=None)
@given(setups)
def test_recompute_full_le_selective_le_none(d):
    model, s = _setup(d)
    per_layer = [estimate(model, s.with_changes(recompute=r)).activations_per_layer_bytes
                 for r in ('full', 'selective', 'none')]
    assert per_layer[0] <= per_layer[1] <= per_layer[2]


@settings(max_examples=100, deadline=None)
@given(setups, st.sampled_from(['megatron', 'torchtitan']), st.sampled_from([1, 2]))
def test_half_recompute_sits_between_full_and_none(d, framework, vpp):
    """``half`` (every other layer recomputed) keeps no less than full recompute and no
    more than none at its peak, and at the end of forward on a single stage; its parts
    add up to its peak.

    With flash attention: under eager attention a recomputed layer's (b, 1, s, s) mask is
    a checkpoint input held to the bottom layer's backward, which can lift that moment a
    mask's bytes above what no recompute holds. On whole model chunks only (layers a
    multiple of pp x vpp, as Megatron and torchtitan split them without a layout): with
    fractional chunks the per-chunk averages of kept and rebuilt layers do not order.
    The end of forward is compared with one stage only, since ``phases`` are those of
    the peak stage, which recompute can move from the first stage to the last."""
    precision = 'bf16-mixed' if framework == 'megatron' else 'fsdp-bf16'
    zero = min(d['zero'], 1) if framework == 'megatron' else max(d['zero'], 2)
    pp = d['pp'] if vpp == 1 or d['pp'] > 1 else 2
    model, s = _setup(d, framework=framework, precision=precision, zero=zero, pp=pp, vpp=vpp,
                      optimizer='adamw', attention='flash')
    assume(model.num_layers % (pp * vpp) == 0)
    full, half, none = (estimate(model, s.with_changes(recompute=r))
                        for r in ('full', 'half', 'none'))
    assert full.tensor_peak_bytes <= half.tensor_peak_bytes <= none.tensor_peak_bytes
    if pp == 1:
        assert full.phases['forward_end'] <= half.phases['forward_end'] <= none.phases[
            'forward_end']
    assert sum(half.components.values()) == pytest.approx(half.tensor_peak_bytes,
                                                          abs=len(half.components))


@settings(max_examples=100, deadline=None)
@given(setups)
def test_breakdown_adds_up(d):
    """Named parts sum to the tensor peak; the peak is the largest phase; overheads add on."""
    model, s = _setup(d)
    e = estimate(model, s)
    assert sum(e.components.values()) == pytest.approx(e.tensor_peak_bytes, abs=len(e.components))
    assert e.tensor_peak_bytes == max(e.phases.values())
    assert e.phases[e.peak_phase] == e.tensor_peak_bytes
    assert e.total_bytes == pytest.approx(e.tensor_peak_bytes + sum(e.overhead.values()), abs=4)
    assert all(v >= 0 for v in e.components.values())


@pytest.mark.parametrize('name', sorted(MODELS))
def test_zero3_shards_add_back_to_the_whole_model(name):
    """ZeRO-3 over d ranks: d shards of the weights are exactly the unsharded weights."""
    model = MODELS[name]
    for precision, bytes_per_param in (('fp32', 4), ('bf16-mixed', 2)):
        s = TrainingSetup(seq_len=128, precision=precision, dp=8)
        opts = MemoryOptions.from_setup(s)
        whole = estimate_arrays(model, opts, ConfigArrays.from_setup(s))
        sharded = estimate_arrays(model, opts, ConfigArrays.from_setup(s.with_changes(zero=3)))
        assert float(whole.components['weights']) == bytes_per_param * model.total_params() \
            or whole.peak_phase != 3
        weights_phase = _weights(model, s.with_changes(zero=3))
        assert weights_phase * 8 == pytest.approx(bytes_per_param * model.total_params())
        assert float(sharded.tensor_peak_bytes) < float(whole.tensor_peak_bytes)


def _weights(model, s) -> float:
    from planner.memory.model_states import model_state_bytes, stage_params
    from planner.memory.recipes import OPTIMIZERS, RECIPES

    params = stage_params(model, np.asarray(s.tp), np.asarray(s.pp), np.asarray(s.ep),
                          'first', None)
    ms = model_state_bytes(model, RECIPES[s.precision], OPTIMIZERS[s.optimizer], params=params,
                           dp=np.asarray(s.dp), cp=np.asarray(1), ep=np.asarray(1),
                           zero=np.asarray(s.zero), offload=np.asarray(0), framework='hf',
                           foreach=True, lora=None, prefetch_layers=1)
    return float(ms.weights)


@pytest.mark.parametrize('name', ['llama-3.1-8b', 'gpt2', 'qwen2.5-7b'])
def test_tensor_and_pipeline_shards_add_back(name):
    """Summed over TP ranks and pipeline stages, the weights are the whole model.

    TP ranks each hold 1/t of every matrix and a full copy of norms and row-parallel
    biases; with one layer per stage, the first stage adds the embedding, the last the
    final norm and head (and a tied embedding's copy), the middle stages one layer each.
    """
    model = MODELS.get(name) or find_preset(name)
    h = model.hidden_size
    replicated_per_layer = (model.norms_per_layer * model.norm_params()
                            + (h if model.attn_out_bias else 0) + (h if model.mlp_bias else 0)
                            + (2 * model.head_dim if model.qk_norm else 0))
    positions = (model.max_position_embeddings * h
                 if model.position_embedding == 'learned' else 0)
    replicated = model.num_layers * replicated_per_layer + model.norm_params() + positions
    t = 2
    tp_sum = t * _weights(model, TrainingSetup(seq_len=128, precision='fp32', tp=t)) / 4
    assert tp_sum - (t - 1) * replicated == model.total_params()

    p = model.num_layers
    first = _weights(model, TrainingSetup(seq_len=128, precision='fp32', pp=p)) / 4
    last = _last_stage_weights(model, p) / 4
    middle = (p - 2) * model.layer_params()
    tied_copy = model.vocab_size * h if model.tied_embeddings else 0
    assert first + middle + last == model.total_params() + tied_copy


def _last_stage_weights(model, pp: int) -> float:
    from planner.memory.model_states import model_state_bytes, stage_params
    from planner.memory.recipes import OPTIMIZERS, RECIPES

    one = np.asarray(1)
    params = stage_params(model, one, np.asarray(pp), one, 'last', None)
    ms = model_state_bytes(model, RECIPES['fp32'], OPTIMIZERS['adamw'], params=params, dp=one,
                           cp=one, ep=one, zero=np.asarray(0), offload=np.asarray(0),
                           framework='hf', foreach=True, lora=None, prefetch_layers=1)
    return float(ms.weights)


def test_vectorised_matches_single_configuration():
    """estimate_arrays over a grid gives, cell by cell, what estimate() gives alone."""
    model = MODELS['llama-3.1-8b']
    base = TrainingSetup(seq_len=2048, precision='amp-bf16', dp=8)
    b = np.arange(1, 5)[:, None, None]
    zero = np.arange(4)[None, :, None]
    modes = RECOMPUTE_MODES
    rc = np.arange(len(modes))[None, None, :]
    cfg = ConfigArrays.from_setup(base)
    cfg.micro_batch, cfg.zero, cfg.recompute = b, zero, rc
    grid = estimate_arrays(model, MemoryOptions.from_setup(base), cfg)
    for i in range(4):
        for z in range(4):
            for r in range(len(modes)):
                one = estimate(model, base.with_changes(micro_batch=i + 1, zero=z,
                                                        recompute=modes[r]))
                assert float(grid.tensor_peak_bytes[i, z, r]) == pytest.approx(
                    one.tensor_peak_bytes, abs=1)


lora_choices = st.one_of(st.none(), st.builds(
    LoraSpec, rank=st.sampled_from([8, 64]),
    targets=st.sampled_from([('q', 'v'), ('q', 'k', 'v', 'o', 'gate', 'up', 'down')]),
    base_bits=st.sampled_from([4, 16, 32])))


@settings(max_examples=150, deadline=None)
@given(setups, st.sampled_from(['none', 'optimizer', 'params']), lora_choices,
       st.sampled_from([1, 2]), st.sampled_from([1, 2]))
def test_the_search_floor_never_exceeds_the_peak(d, offload, lora, vpp, cp):
    """The plan search drops a layout when tensor_peak_floor alone overflows: it must be
    a true lower bound, under every option (offload, LoRA, interleaving, CP)."""
    model, s = _setup(d)
    if lora is not None and (d['framework'] != 'hf' or s.precision == 'fp32'):
        lora = None
    if s.pp == 1 or s.grad_accum % s.pp or model.num_layers % (s.pp * vpp):
        vpp = 1
    if s.zero == 0 and offload != 'none':
        offload = 'none'
    try:
        s = s.with_changes(offload=offload, lora=lora, vpp=vpp, cp=cp)
    except InputError:  # a combination TrainingSetup itself refuses
        return
    cfg, opts = ConfigArrays.from_setup(s), MemoryOptions.from_setup(s)
    floor = float(tensor_peak_floor(model, opts, cfg))
    assert floor <= float(estimate_arrays(model, opts, cfg).tensor_peak_bytes) + 1
    assert floor > 0
