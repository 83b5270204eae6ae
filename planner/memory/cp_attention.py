"""What context parallelism's ring attention holds while one layer's attention runs.

Context parallelism (CP, ``c`` ranks) splits the sequence; each rank keeps its own T = b·s/c
tokens' activations, as without CP (``planner.memory.activations``). What CP adds is
transient: while one layer's attention runs (forward, its recomputation, or backward), the
ring holds the K and V of other ranks, fp32 merge and accumulation buffers, and its steps'
outputs. They die when the layer's attention returns, so they are no saved activation; they
are counted at the moments a layer's attention runs (``planner.memory.peak``).

Per rank and TP rank, in elements: Q = T·q_size/t (queries, and the attention output),
K = T·kv_size/t (keys, or values: at least one head per TP rank), H = T·heads/t (the
log-sum-exp); ``e`` the activation bytes (bf16: 2). Every term is bytes, from the
frameworks' source; ``tests/stacks/test_cp_attention_memory.py`` runs torch's ring on the CPU
and checks the torchtitan terms against it.

* **torchtitan**: torch's ring (torch/distributed/tensor/experimental/_context_parallel/
  _attention.py, torch 2.13: ``_templated_ring_attention`` and
  ``_templated_ring_attention_backward``, head-tail load balancing, ``convert_to_f32``).
  K and V of every rank: the ``allgather`` rotater's gathered buffer, 2·c·e·K, alive through
  the pass (torchtitan's default ``context_parallel_rotate_method``); the ``alltoall`` one
  holds three 2·K buffers (the chunk in use, the next one's send and receive buffers: an
  async collective's input stays alive until it is waited for, torch/csrc/distributed/c10d/
  ProcessGroupNCCL.cpp ``stashed_for_allocator_safety_``), so 2·max(c, 3)·e·K covers both.
  Forward: ``_SDPAMerger`` keeps the output in fp32 and merges each step as
  ``out - sigmoid(block_lse - lse) * (out - block_out)``: the fp32 output, the step's output
  cast to fp32, their difference and its product with the sigmoid (4 × 4Q), the step's own
  output (e·Q), and lse-sized fp32 temporaries (4 × 4H). Backward: the fp32 dQ accumulator
  (4Q, and its copy when a step updates only its second half: 4Q more), the fp32 dK and dV
  passed on every step (``dkv_rotater``, always all-to-all: the held accumulators, the
  concatenation being sent and the buffer receiving, 3 × 8K), the concatenated K/V sent to
  the all-gather (2·e·K), two steps' dQ, dK, dV (the previous step's are released after the
  next SDPA backward returns: 2·e·(Q + 2K)) and the half log-sum-exp made contiguous (2H).
* **megatron**: Transformer Engine's ``AttnFuncWithCPAndKVP2P`` (the default
  ``--cp-comm-type p2p``; NVIDIA/TransformerEngine transformer_engine/pytorch/attention/
  dot_product_attention/context_parallel.py). Forward: ``p2p_comm_buffers`` keeps every
  step's received K/V (c × 2·e·K) and ``out_per_step`` / ``softmax_lse_per_step`` every
  step's output and log-sum-exp (c × e·Q, c × 4H) until the outputs are corrected after the
  loop; the corrected output (e·Q) with an fp32 product beside it (4Q), and the lse clone
  (4H). Backward: ``dq_buffer`` (e·Q), two [K/V, dK/dV] p2p buffers (2 × 4·e·K), one step's
  dQ, dK, dV (e·(Q + 2K)), and the contiguous copies the fused (cuDNN) backend makes of a
  step's q, out and dout halves (3·e·Q/2) or K and V halves (e·K).
* **The attention kernel's backward workspace**, on every step: FlashAttention-2's
  ``mha_bwd`` (Dao-AILab/flash-attention csrc/flash_attn/flash_api.cpp, vendored by torch as
  aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp) allocates a fp32 dQ
  accumulator (4Q), ``softmax_d`` (4H) and, for GQA, dK and dV expanded to every query head
  (2·e·Q). cuDNN's backward workspace is not in any source read here (not isolated); the
  FlashAttention-2 figure is counted for both.

Not counted, each on the safe side: torch.compile fusing the merges (torchtitan's compiled
runs), fp8 attention (Transformer Engine's ``fp8_dpa``: 1-byte buffers), and the layer's
MLP activations, freed before its attention's backward but kept in the count.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from planner.memory.recipes import PrecisionRecipe
from planner.models.spec import ModelSpec

FP32 = 4.0


class RingSizes(NamedTuple):
    """One rank's attention tensors, in elements (see the module docstring)."""

    q: np.ndarray  # Q: queries (and the attention output)
    kv: np.ndarray  # K: keys, or values
    lse: np.ndarray  # H: one log-sum-exp per head and query
    gqa: bool  # fewer key/value heads than query heads


def ring_sizes(m: ModelSpec, b: np.ndarray, s: np.ndarray, t: np.ndarray,
               c: np.ndarray) -> RingSizes:
    """Q, K and H on one CP and TP rank (a TP rank holds at least one key/value head)."""
    tokens = b * s / c
    kv_heads = np.maximum(m.num_kv_heads / t, 1.0)
    return RingSizes(q=tokens * m.q_size / t, kv=tokens * kv_heads * m.head_dim,
                     lse=tokens * m.num_heads / t, gqa=m.num_kv_heads < m.num_heads)


class RingBytes(NamedTuple):
    """Bytes one layer's ring attention holds at its widest, its outputs included."""

    forward: np.ndarray  # a forward pass (or its recomputation)
    backward: np.ndarray  # the backward, the kernel's workspace included
    backward_ring: np.ndarray  # the backward without the kernel's workspace


def flash_backward_workspace(z: RingSizes) -> np.ndarray:
    """FlashAttention-2's backward workspace for one call (flash_api.cpp ``mha_bwd``): the
    fp32 dQ accumulator, ``softmax_d``, and dK/dV expanded to every query head under GQA."""
    expanded = 2 * 2.0 * z.q if z.gqa else 0.0
    return FP32 * z.q + FP32 * z.lse + expanded


def torch_ring_bytes(z: RingSizes, c: np.ndarray, e: float) -> RingBytes:
    """torch's ring attention (torchtitan's CP), per the module docstring."""
    q, k, h = z.q, z.kv, z.lse
    gathered = 2 * np.maximum(c, 3) * e * k
    merge = 4 * FP32 * q + e * q + 4 * FP32 * h  # a step's fp32 merge (ranks > 0)
    first = FP32 * q + e * q + 4 * e * k + FP32 * h  # step 0: K/V copies and send buffer
    forward = gathered + np.maximum(merge, first)
    # the fp32 dQ accumulator and dK/dV chain (held, being sent, received), in every step
    held = gathered + FP32 * q + 3 * 2 * FP32 * k + 2 * h
    # before step 1's SDPA: the K/V concatenated for the all-gather twice over (the last
    # one and the new one) and step 0's contiguous K/V copies; step 0's dQ, dK, dV
    boundary = held + 3 * 2 * e * k + e * (q + 2 * k)
    during_step = held + 2 * e * k + 2 * e * (q + 2 * k)  # two steps' dQ, dK, dV
    after_step = held + 2 * e * k + FP32 * q + e * (q / 2 + 2 * k)  # dQ's half: a copy
    ring = np.maximum(np.maximum(boundary, during_step), after_step)
    backward = np.maximum(ring, during_step + flash_backward_workspace(z))
    return RingBytes(forward=np.asarray(forward, float), backward=np.asarray(backward, float),
                     backward_ring=np.asarray(ring, float))


def te_p2p_ring_bytes(z: RingSizes, c: np.ndarray, e: float) -> RingBytes:
    """Transformer Engine's ``AttnFuncWithCPAndKVP2P`` (Megatron's CP), per the module
    docstring."""
    q, k, h = z.q, z.kv, z.lse
    forward = c * 2 * e * k + c * e * q + c * FP32 * h + e * q + FP32 * q + FP32 * h
    ring = (e * q + 2 * 4 * e * k + e * (q + 2 * k)
            + np.maximum(1.5 * e * q, e * k) + 2 * h)
    backward = ring + flash_backward_workspace(z)
    return RingBytes(forward=np.asarray(forward, float), backward=np.asarray(backward, float),
                     backward_ring=np.asarray(ring, float))


def cp_ring_bytes(stack_key: str, m: ModelSpec, r: PrecisionRecipe, b: np.ndarray,
                  s: np.ndarray, t: np.ndarray, c: np.ndarray) -> RingBytes:
    """One layer's ring attention at its widest, by stack; zero where ``c`` is 1.

    Megatron runs Transformer Engine's p2p ring; every other stack with CP runs torch's
    (torchtitan, and accelerate's ``context_parallel``).
    """
    z = ring_sizes(m, b, s, t, c)
    e = float(r.act_bytes)
    ring = te_p2p_ring_bytes(z, c, e) if stack_key == 'megatron' else torch_ring_bytes(z, c, e)
    on = np.asarray(c) > 1
    return RingBytes(*(np.where(on, part, 0.0) for part in ring))
