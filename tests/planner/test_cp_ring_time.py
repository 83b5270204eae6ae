"""torchtitan's context parallelism timed as torch's ring attention runs it, and the flash
backward's recomputed scores left out of torch.compile's divisor (docs/time-model.md §1.4)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.hardware.catalog import find_gpu
from planner.models.presets import find_preset
from planner.timing.step_time import (
    LayoutArrays,
    StepTimeOptions,
    flash_backward_rescore_flops,
    step_time_arrays,
    training_flops_per_token,
)

MODEL = find_preset('llama-3.1-8b')
GPU = find_gpu('h100-sxm')
RANK_TOKENS = 32768  # per CP rank, as in torchtitan's Table 2


def cp_layout(cp: int, recompute: int = 2) -> LayoutArrays:
    """One node of 8 GPUs: FSDP over dp x cp, micro-batch 1, full AC (code 2)."""
    a = np.asarray
    return LayoutArrays(nodes=a(1), gpus_per_node=a(8), tp=a(1), pp=a(1), vpp=a(1), cp=a(cp),
                        dp=a(8 // cp), micro_batch=a(1), grad_accum=a(1), zero=a(3),
                        recompute=a(recompute), sequence_parallel=a(True))


def cp_step(cp: int, framework: str = 'torchtitan', **options):
    return step_time_arrays(MODEL, RANK_TOKENS * cp, GPU, None, cp_layout(cp),
                            precision='fsdp-bf16', framework=framework,
                            options=StepTimeOptions(**options))


def _chunk_s(o: StepTimeOptions) -> tuple[float, float]:
    """(seconds per bf16 K+V chunk of one rank, per-hop latency) on NVLink."""
    kv_chunk = 2 * RANK_TOKENS * MODEL.kv_size * 2
    bps = GPU.intra_node_bandwidth_bytes_per_s * o.intra_node_link_efficiency
    return kv_chunk / bps, o.intra_node_latency_s


@pytest.mark.parametrize('cp', [2, 4, 8])
def test_compiled_ring_exchange_is_exposed(cp):
    """Compiled, nothing hides the exchange: the forward all-gather ((c-1) chunks) of the
    forward and of full AC's second forward, the backward's, and the c fp32 dK/dV sends
    (twice a chunk's bytes each)."""
    o = StepTimeOptions(compute_speedup=1.2)
    chunk, lat = _chunk_s(o)
    gather = (cp - 1) * (chunk + lat)
    per_layer = 3 * gather + cp * (2 * chunk + lat)
    got = float(cp_step(cp, compute_speedup=1.2).cp_comm_s)
    assert got == pytest.approx(MODEL.num_layers * per_layer, rel=1e-9)


def test_eager_ring_exposes_only_the_last_dkv_send():
    """Eager, each dK/dV send waits behind the next step's SDPA backward; the last one, and
    nothing else at this length, is exposed."""
    o = StepTimeOptions()
    chunk, lat = _chunk_s(o)
    got = float(cp_step(4).cp_comm_s)
    assert got == pytest.approx(MODEL.num_layers * (2 * chunk + lat), rel=1e-9)


def test_forward_gather_hides_behind_one_ring_step_only():
    """Short chunks: the all-gather outlasts the local step's attention (1/c of the pass),
    so part of it shows in the forward even though the whole core would hide it."""
    seq, cp = 2048 * 8, 8
    lay = cp_layout(cp)
    eager = step_time_arrays(MODEL, seq, GPU, None, lay, precision='fsdp-bf16',
                             framework='torchtitan')
    megatron = step_time_arrays(MODEL, seq, GPU, None, lay, precision='fsdp-bf16',
                                framework='megatron')
    o = StepTimeOptions()
    bps = GPU.intra_node_bandwidth_bytes_per_s * o.intra_node_link_efficiency
    send = 2 * (2 * seq / cp * MODEL.kv_size * 2) / bps + o.intra_node_latency_s
    assert float(megatron.cp_comm_s) == 0.0  # Megatron's ring: the whole core hides it
    assert float(eager.cp_comm_s) > MODEL.num_layers * send  # more than the last send


def test_cp_exchange_grows_with_the_ring():
    compiled = [float(cp_step(c, compute_speedup=1.2).cp_comm_s) for c in (1, 2, 4, 8)]
    assert compiled[0] == 0.0
    assert compiled[1] < compiled[2] < compiled[3]


def test_compile_leaves_the_flash_backward_rescore_alone():
    """With everything compile speeds up made free, what is left is the attention core:
    the forward, full AC's second forward, and the flash backward at 2.5x its forward
    (the recomputed scores run inside the same SDPA backward kernel)."""
    seq = RANK_TOKENS
    compiled, eager = cp_step(1, compute_speedup=1e12), cp_step(1)
    core = MODEL.num_layers * 2.0 * seq * MODEL.q_size * (2 + 2.5)  # per token, causal
    everything = (training_flops_per_token(MODEL, seq, 'full')
                  + flash_backward_rescore_flops(MODEL, seq))
    # the same rate for both: their compute times stand as the FLOPs they run
    assert float(compiled.compute_s / eager.compute_s) == pytest.approx(core / everything,
                                                                        rel=1e-6)
