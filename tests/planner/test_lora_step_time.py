"""LoRA and QLoRA step time: frozen-base FLOPs, adapter-only traffic, dequantization.

The numbers expected here are computed by hand from the rules in docs/time-model.md §1.7,
not by calling the code under test a second way.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.hardware.catalog import find_gpu, find_interconnect
from planner.memory.model_states import NF4_BYTES, lora_params
from planner.memory.peak import estimate
from planner.memory.training import LoraSpec, TrainingSetup
from planner.models.presets import find_preset
from planner.models.spec import ModelSpec
from planner.timing.step_time import (
    RECOMPUTE_MODES,
    LayoutArrays,
    StepTimeOptions,
    step_time_arrays,
    training_flops_per_token,
)

BREAKDOWN = ('compute_s', 'elementwise_s', 'bubble_s', 'tp_comm_s', 'cp_comm_s', 'pp_comm_s',
             'dp_comm_s', 'optimizer_s', 'overhead_s')
ALL = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')
H100 = 'h100-sxm'


def tiny() -> ModelSpec:
    """2 layers, h 8, 2 heads of 4, SwiGLU 16, vocabulary 32, untied."""
    return ModelSpec('tiny', num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=2,
                     head_dim=4, ffn_size=16, vocab_size=32)


def data_parallel(dp: int, micro: int, accum: int, zero: int, recompute: int,
                  per_node: int = 8) -> LayoutArrays:
    """A pure data-parallel layout (what the search gives LoRA), as 0-d arrays."""
    a = np.asarray
    return LayoutArrays(nodes=a(max(1, dp // per_node)), gpus_per_node=a(min(dp, per_node)),
                        tp=a(1), pp=a(1), vpp=a(1), cp=a(1), dp=a(dp), micro_batch=a(micro),
                        grad_accum=a(accum), zero=a(zero), recompute=a(recompute),
                        sequence_parallel=a(True))


def step(model, lay, lora=None, seq=4096, gpu=H100, **kw):
    return step_time_arrays(model, seq, find_gpu(gpu), find_interconnect('ib-ndr'), lay,
                            precision='amp-bf16', framework='hf', lora=lora, **kw)


# ---- FLOPs ------------------------------------------------------------------------------

def test_lora_flops_of_a_hand_computed_model():
    m, lora, s = tiny(), LoraSpec(rank=2, targets=('q', 'v')), 16
    # matmul weights per token: 2 layers x (2·8·8 + 2·8·8 attention + 3·8·16 MLP) + 32·8 head
    n = 2 * (128 + 128 + 384) + 256
    assert m.matmul_params_per_token() == n == 1536
    core = 4 * s * 8 * 2 / 2  # QK^T and AV over 2 layers, causal half
    adapters = 2 * (2 * (8 + 8) + 2 * (8 + 8))  # q and v, r·(in + out) per layer
    assert lora_params(m, lora) == adapters == 128
    full = 3 * (2 * n + core)
    assert training_flops_per_token(m, s) == full
    # frozen weights: forward 2N, input gradients 2N, no weight gradients; adapters 6 each
    lora_none = 4 * n + 3 * core + 6 * adapters
    assert training_flops_per_token(m, s, lora=lora) == lora_none == 8448
    assert training_flops_per_token(m, s, lora=lora) == full - 2 * n + 6 * adapters
    # full recompute runs every layer's forward again (not the head), adapters included
    assert training_flops_per_token(m, s, 'full', lora=lora) == \
        lora_none + (2 * (n - 256) + core) + 2 * adapters
    # selective recompute re-runs the attention core only
    assert training_flops_per_token(m, s, 'selective', lora=lora) == lora_none + core


def test_mfu_counts_the_lora_flops_not_6n():
    m, lora = find_preset('llama-3.1-8b'), LoraSpec(16, ALL)
    lay = data_parallel(8, 2, 4, 0, 2)
    st_ = step(m, lay, lora)
    tokens = 2 * 4 * 8 * 4096
    per_token = training_flops_per_token(m, 4096, 'none', causal=False, lora=lora)
    assert float(st_.model_flops_per_step) == pytest.approx(per_token * tokens)
    peak = find_gpu(H100).peak('bf16')
    assert float(st_.mfu) == pytest.approx(per_token * tokens / (float(st_.step_time_s) * 8
                                                                  * peak))
    six_n = 6 * m.total_params() * tokens / (float(st_.step_time_s) * 8 * peak)
    assert six_n > 1.25 * float(st_.mfu)  # quoting 6N overstates LoRA's MFU by ~30 %
    # recompute is hardware work, not model work
    assert float(st_.hfu) == pytest.approx(
        training_flops_per_token(m, 4096, 'full', causal=False, lora=lora) * tokens
        / (float(st_.step_time_s) * 8 * peak))


# ---- step time --------------------------------------------------------------------------

@pytest.mark.parametrize('recompute', [0, 1, 2])
@pytest.mark.parametrize('zero', [0, 1, 2, 3])
def test_lora_step_is_shorter_than_full_training_on_the_same_layout(zero, recompute):
    m = find_preset('llama-3.1-8b')
    lay = data_parallel(8, 2, 4, zero, recompute)
    full, lora = step(m, lay), step(m, lay, LoraSpec(16))
    assert float(lora.step_time_s) < 0.9 * float(full.step_time_s)
    assert float(lora.compute_s) < float(full.compute_s)
    assert float(lora.optimizer_s) < 0.01 * float(full.optimizer_s)


def test_the_breakdown_adds_up_under_lora_and_qlora():
    m = find_preset('llama-3.2-1b')
    lay = data_parallel(16, 1, 8, 0, 0)
    lay.zero = np.array([0, 1, 2, 3])[:, None, None]
    lay.recompute = np.array([0, 1, 2])[None, :, None]
    lay.micro_batch = np.array([1, 4])[None, None, :]
    for lora in (LoraSpec(8), LoraSpec(64, ALL, 4)):
        st_ = step(m, lay, lora, seq=2048)
        parts = sum(np.broadcast_to(getattr(st_, n), st_.step_time_s.shape) for n in BREAKDOWN)
        np.testing.assert_allclose(parts, st_.step_time_s, rtol=1e-12)
        assert np.all(st_.dequant_s <= np.broadcast_to(st_.elementwise_s, st_.step_time_s.shape))
        assert np.all((st_.dequant_s > 0) == lora.quantized)


def bus_s(size_bytes: float, n: int, gpu: str = H100) -> float:
    """Ring reduce-scatter (or all-gather) of ``size_bytes`` over ``n`` GPUs of one node."""
    o = StepTimeOptions()
    bandwidth = find_gpu(gpu).intra_node_bandwidth_bytes_per_s * o.intra_node_link_efficiency
    return (n - 1) / n * size_bytes / bandwidth + (n - 1) * o.intra_node_latency_s


def test_dp_traffic_moves_adapters_only_but_zero3_gathers_the_whole_base():
    m, lora, qlora = find_preset('llama-3.1-8b'), LoraSpec(16, ALL), LoraSpec(16, ALL, 4)
    accum = 4
    h, q, kv, f, layers = m.hidden_size, m.q_size, m.kv_size, m.ffn_size, m.num_layers
    projections = layers * (2 * h * q + 2 * h * kv + 3 * h * f)
    rest = m.total_params() - projections
    adapters = lora_params(m, lora)
    traffic = {}
    for zero in (0, 1, 2, 3):
        lay = data_parallel(8, 2, accum, zero, 0)
        traffic[zero] = [float(step(m, lay, x).dp_traffic_s) for x in (None, lora, qlora)]
    for zero in (0, 1, 2):
        full, lo, ql = traffic[zero]
        assert lo < 0.02 * full
        assert lo == pytest.approx(ql)
    assert traffic[0][1] == pytest.approx(2 * bus_s(4 * adapters, 8))  # fp32 adapter grads
    assert traffic[1][1] == pytest.approx(2 * bus_s(4 * adapters, 8))  # RS grads, AG adapters
    # ZeRO-3: per micro-batch the whole stored base (and the adapters) is gathered for the
    # forward and again for the backward; only the adapters' gradients are reduce-scattered
    bf16_base = 2 * m.total_params() + 4 * adapters
    nf4_base = NF4_BYTES * projections + 2 * rest + 4 * adapters
    assert traffic[3][1] == pytest.approx(
        accum * (2 * bus_s(bf16_base, 8) + bus_s(4 * adapters, 8)), rel=1e-9)
    assert traffic[3][2] == pytest.approx(
        accum * (2 * bus_s(nf4_base, 8) + bus_s(4 * adapters, 8)), rel=1e-9)
    gathers = accum * 2 * bus_s(bf16_base, 8)
    assert gathers > 0.95 * traffic[3][1]  # dominated by the base gathers
    assert traffic[3][2] < 0.45 * traffic[3][1]  # a 4-bit base is a third of the bytes


def test_qlora_dequantizes_before_every_use_and_costs_time_but_saves_memory():
    m = find_preset('llama-3.1-8b')
    lora, qlora = LoraSpec(16, ALL), LoraSpec(16, ALL, 4)
    o = StepTimeOptions()
    hbm = find_gpu('a100-80g-sxm').hbm_bandwidth_bytes_per_s * o.hbm_efficiency
    h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.ffn_size
    projections = m.num_layers * (2 * h * q + 2 * h * kv + 3 * h * f)
    per_use = NF4_BYTES + 2 + 4 / 64  # read NF4 (+ fp32 absmax), write the bf16 weight
    for recompute, uses in ((0, 2), (1, 2), (2, 3)):  # forward, input gradient, re-forward
        lay = data_parallel(1, 1, 4, 0, recompute)
        ql = step(m, lay, qlora, seq=1024, gpu='a100-80g-sxm')
        lo = step(m, lay, lora, seq=1024, gpu='a100-80g-sxm')
        assert float(ql.dequant_s) == pytest.approx(4 * uses * projections * per_use / hbm)
        assert float(ql.step_time_s) > float(lo.step_time_s)
        assert float(lo.dequant_s) == 0.0
        setup = TrainingSetup(seq_len=1024, micro_batch=1, grad_accum=4,
                              recompute=RECOMPUTE_MODES[recompute])
        memory_q = estimate(m, setup.with_changes(lora=qlora)).total_bytes
        memory_l = estimate(m, setup.with_changes(lora=lora)).total_bytes
        assert memory_q < memory_l - 8e9  # ~1 B per projection weight less


def test_full_training_is_unchanged_by_the_lora_argument():
    m = find_preset('llama-3.2-1b')
    lay = data_parallel(8, 2, 4, 2, 1)
    a, b = step(m, lay), step(m, lay, None)
    assert float(a.step_time_s) == float(b.step_time_s)
    assert float(a.dequant_s) == 0.0


# ---- properties -------------------------------------------------------------------------

layouts = st.fixed_dictionaries({
    'dp': st.sampled_from([1, 2, 8, 16, 64]), 'micro': st.sampled_from([1, 2, 8]),
    'accum': st.sampled_from([1, 4, 16]), 'zero': st.sampled_from([0, 1, 2, 3]),
    'recompute': st.sampled_from([0, 1, 2]), 'seq': st.sampled_from([512, 2048, 8192]),
    'rank': st.sampled_from([4, 16, 64]),
    'targets': st.sampled_from([('q', 'v'), ('q', 'k', 'v', 'o'), ALL]),
    'base_bits': st.sampled_from([4, 16]),
})


@settings(max_examples=60, deadline=None)
@given(layouts)
def test_lora_never_does_more_gemm_work_traffic_or_update_than_full_training(d):
    if d['zero'] and d['dp'] == 1:
        d['zero'] = 0
    m = find_preset('llama-3.1-8b')
    lay = data_parallel(d['dp'], d['micro'], d['accum'], d['zero'], d['recompute'])
    lora = LoraSpec(d['rank'], d['targets'], d['base_bits'])
    full, lo = step(m, lay, seq=d['seq']), step(m, lay, lora, seq=d['seq'])
    assert float(lo.compute_s) < float(full.compute_s)
    assert float(lo.optimizer_s) < float(full.optimizer_s)
    assert float(lo.model_flops_per_step) < float(full.model_flops_per_step)
    if d['zero'] < 3:
        assert float(lo.dp_traffic_s) <= float(full.dp_traffic_s)
    if set(d['targets']) <= {'q', 'k', 'v', 'o'}:  # PEFT's adapter traffic stays small
        assert float(lo.step_time_s) < float(full.step_time_s)
    parts = sum(float(getattr(lo, n)) for n in BREAKDOWN)
    assert parts == pytest.approx(float(lo.step_time_s), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(layouts)
def test_dequantization_is_paid_per_micro_batch_and_grows_with_recompute(d):
    m = find_preset('llama-3.2-1b')
    lora = LoraSpec(d['rank'], d['targets'], 4)
    lay = data_parallel(d['dp'], d['micro'], d['accum'], 0, d['recompute'])
    one = float(step(m, lay, lora, seq=d['seq']).dequant_s)
    lay.micro_batch = np.asarray(2 * d['micro'])  # more tokens per micro-batch: same cost
    assert float(step(m, lay, lora, seq=d['seq']).dequant_s) == pytest.approx(one)
    lay.grad_accum = np.asarray(2 * d['accum'])  # twice the micro-batches: twice the cost
    assert float(step(m, lay, lora, seq=d['seq']).dequant_s) == pytest.approx(2 * one)
    lay.recompute = np.asarray(2)
    assert float(step(m, lay, lora, seq=d['seq']).dequant_s) >= 2 * one
