"""What torch's ring attention (torchtitan's context parallelism) holds during one attention.

Run ``PYTHONPATH=. .venv/bin/python -m tests.stacks.cp_ring_memory [--json | --sweep]`` from
the repository root (needs torch and torchtitan; CPU only, under a second a configuration).

torchtitan 0.2.2 applies CP to its attention modules (torchtitan/distributed/
context_parallel.py ``apply_cp_to_attention_module``: torch's ``_ContextParallel`` hooks
and the CP DTensor dispatcher), so every SDPA call of a layer goes to torch's
``_templated_ring_attention`` / ``_templated_ring_attention_backward``
(torch/distributed/tensor/experimental/_context_parallel/_attention.py, torch 2.13:
head-tail load balancing, the ``allgather`` rotate method by default, ``convert_to_f32``).
This runs that path for one torchtitan ``Attention`` module (torchtitan/models/llama3/
model/model.py) on one rank of a fake process group of ``c`` ranks
(``init_process_group("fake", ...)``: collectives return at once, their buffers are
allocated), with real CPU tensors, and reads every allocation and free from the profiler
(``profile_memory=True``).

Where the CPU departs from CUDA, and what is done about it:

* ``F.scaled_dot_product_attention`` on CPU picks ``_scaled_dot_product_flash_attention_for_cpu``,
  which the CP dispatcher does not intercept (it handles the CUDA flash, efficient and
  cuDNN ops only). On CUDA the flash backend calls ``aten._scaled_dot_product_flash_attention``
  (aten/src/ATen/native/transformers/attention.cpp); here ``F.scaled_dot_product_attention``
  is replaced by that call, and the CUDA op and its backward get CPU kernels that run the
  CPU flash kernels (``torch.library``). The ring, the merges, the collectives and the
  autograd around them are torch's own code.
* The kernels' own workspace differs (CPU flash keeps per-thread fp32 blocks; CUDA's
  FlashAttention-2 backward a fp32 dQ accumulator and, for GQA, dK/dV expanded to every
  query head): allocations made and freed inside a kernel call are left out of
  ``*_ring_bytes`` and reported apart (batchfit counts the CUDA kernel's workspace from its
  source: ``planner/memory/cp_attention.py``).
* CPU ``add_`` of a bf16 tensor into an fp32 one materialises an fp32 copy of the operand
  (TensorIterator casts CPU inputs to the common dtype; CUDA kernels cast on the fly): the
  ring's fp32 accumulation (``grad_key += grad_key_``) does this. Those copies are left out
  of ``*_ring_bytes`` too.

Measured quantities, bytes above what is alive when the op starts: ``forward_ring_bytes``,
the peak inside the forward SDPA op (the ring's buffers and the op's outputs), and
``backward_ring_bytes``, the peak inside the SDPA autograd node's backward (the ring's
buffers and dQ, dK, dV), both without the two CPU departures above; ``*_raw_bytes`` with
everything.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

FORWARD_OP = 'aten::_scaled_dot_product_flash_attention'
BACKWARD_NODE = 'ScaledDotProductFlashAttentionBackward0'
KERNELS = ('aten::_scaled_dot_product_flash_attention_for_cpu',
           'aten::_scaled_dot_product_flash_attention_for_cpu_backward')


@dataclass(frozen=True)
class RingShape:
    """The attention measured: torchtitan's Llama-3 ``Attention`` in bf16, one rank's chunk."""

    cp: int
    rank: int
    batch: int = 2
    local_tokens: int = 1024  # tokens on this rank (two head-tail chunks)
    dim: int = 512
    heads: int = 8
    kv_heads: int = 2
    rotate: str = 'allgather'  # torch's default; 'alltoall' is torchtitan's other choice


@dataclass(frozen=True)
class RingMemory:
    """Bytes above the op's entry (see the module docstring)."""

    shape: RingShape
    forward_ring_bytes: int
    backward_ring_bytes: int
    forward_raw_bytes: int
    backward_raw_bytes: int
    backward_kernel_workspace_bytes: int  # the CPU kernel's own, at its widest
    cpu_cast_bytes: int  # the widest CPU-only fp32 copy of an add_ operand


_REGISTERED: list[Any] = []


def _register_cpu_flash() -> None:
    """CPU kernels for the CUDA flash op and its backward (the CPU flash kernels inside)."""
    if _REGISTERED:
        return
    import torch

    aten = torch.ops.aten
    lib = torch.library.Library('aten', 'IMPL')

    def forward(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
                scale=None):
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout_p, is_causal, scale=scale)
        # the CUDA op's other outputs: empty cumulative lengths, the sequence lengths, the
        # RNG state (replicated under CP) and no debug mask
        zero = q.new_zeros(())
        return (out, lse, zero, zero, q.size(2), k.size(2),
                q.new_zeros(2, dtype=torch.int64), zero, q.new_empty(0))

    def backward(grad, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, dropout_p, is_causal,
                 seed, offset, *, scale=None):
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad, q, k, v, out, lse, dropout_p, is_causal, scale=scale)

    lib.impl('_scaled_dot_product_flash_attention', forward, 'CPU')
    lib.impl('_scaled_dot_product_flash_attention_backward', backward, 'CPU')
    _REGISTERED.append(lib)


def _sdpa_as_cuda_flash(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                        enable_gqa=False):
    """What CUDA's flash backend calls (attention.cpp): the flash op, its first output."""
    import torch

    if attn_mask is not None:
        raise ValueError('the flash backend takes no mask')
    return torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, dropout_p, is_causal, False, scale=scale)[0]


def measure(shape: RingShape) -> RingMemory:
    """One rank's attention forward and backward under CP (``shape.cp`` > 1) or without."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as functional
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental._context_parallel import _attention as ring
    from torch.profiler import ProfilerActivity, profile
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from tests.stacks.fake_pg import _stub_triton_kernels

    _stub_triton_kernels()
    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Attention, precompute_freqs_cis

    _register_cpu_flash()
    saved_sdpa = functional.scaled_dot_product_attention
    functional.scaled_dot_product_attention = _sdpa_as_cuda_flash
    saved_options = (ring._cp_options.enable_load_balance, ring._cp_options.rotate_method)
    try:
        args = TransformerModelArgs(dim=shape.dim, n_heads=shape.heads,
                                    n_kv_heads=shape.kv_heads, vocab_size=256, n_layers=1)
        torch.manual_seed(0)
        attn = Attention(args).to(torch.bfloat16)
        if shape.cp > 1:
            from torchtitan.distributed.context_parallel import apply_cp_to_attention_module

            if dist.is_initialized():
                dist.destroy_process_group()
            dist.init_process_group('fake', store=FakeStore(), rank=shape.rank,
                                    world_size=shape.cp)
            mesh = init_device_mesh('cpu', (shape.cp,))
            apply_cp_to_attention_module([attn.inner_attention], mesh, 'sdpa')
            # torchtitan shards its inputs with the head-tail load balancer, which turns
            # load balancing on (torch's _context_parallel_shard)
            ring._cp_options.enable_load_balance = True
            ring.set_rotate_method(shape.rotate)
        n = shape.local_tokens
        freqs = precompute_freqs_cis(shape.dim // shape.heads, n, args.rope_theta)
        x = torch.randn(shape.batch, n, shape.dim, dtype=torch.bfloat16, requires_grad=True)
        grad = torch.randn(shape.batch, n, shape.dim, dtype=torch.bfloat16)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = attn(x, freqs, None)
            out.backward(grad)
        events = _events(prof)
    finally:
        functional.scaled_dot_product_attention = saved_sdpa
        ring._cp_options.enable_load_balance, ring._cp_options.rotate_method = saved_options
        if shape.cp > 1:
            from torch.distributed.tensor.experimental._context_parallel._attention import (
                _disable_cp_dtensor_dispatcher,
            )

            _disable_cp_dtensor_dispatcher()
            dist.destroy_process_group()
    return _summarise(shape, events)


@dataclass(frozen=True)
class _Events:
    allocs: list[tuple[int, int, int]]  # (time, signed bytes, ptr)
    spans: dict[str, tuple[int, int]]  # the first (outermost) span of each name
    kernel_spans: list[tuple[int, int]]
    add_spans: list[tuple[int, int]]  # aten::add_ calls that cast an operand (aten::to)


def _events(prof: Any) -> _Events:
    from torch._C._profiler import _EventType

    allocs: list[tuple[int, int, int]] = []
    spans: dict[str, tuple[int, int]] = {}
    kernel_spans: list[tuple[int, int]] = []
    add_spans: list[tuple[int, int]] = []

    def walk(node: Any) -> None:
        if node.tag == _EventType.Allocation:
            allocs.append((node.start_time_ns, node.extra_fields.alloc_size,
                           node.extra_fields.ptr))
            return
        span = (node.start_time_ns, node.end_time_ns)
        if node.name in (FORWARD_OP, BACKWARD_NODE) and node.name not in spans:
            spans[node.name] = span
        if node.name in KERNELS:
            kernel_spans.append(span)
        if node.name == 'aten::add_' and any(ch.name == 'aten::to' for ch in node.children):
            add_spans.append(span)
        for child in node.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    allocs.sort()
    return _Events(allocs, spans, kernel_spans, add_spans)


def _inside(ptr_spans: list[tuple[int, int]], allocs: list[tuple[int, int, int]]) -> set[int]:
    """Indices of the allocations (and their frees) made and freed within one of the spans."""
    out: set[int] = set()
    born: dict[int, int] = {}
    for i, (t, size, ptr) in enumerate(allocs):
        if size > 0:
            born[ptr] = i
        elif ptr in born:
            j = born.pop(ptr)
            t0 = allocs[j][0]
            if any(a <= t0 and t <= b for a, b in ptr_spans):
                out.update((i, j))
    return out


def _peak_above_entry(allocs: list[tuple[int, int, int]], span: tuple[int, int],
                      skip: set[int]) -> int:
    live = peak = 0
    entry: int | None = None
    for i, (t, size, _) in enumerate(allocs):
        if t >= span[0] and entry is None:
            entry = live
        if i not in skip:
            live += size
        if span[0] <= t <= span[1]:
            peak = max(peak, live)
    return peak - (entry or 0)


def _widest(allocs: list[tuple[int, int, int]], spans: list[tuple[int, int]]) -> int:
    """The most bytes held at once by allocations made and freed within one span."""
    widest = 0
    for a, b in spans:
        live = 0
        for t, size, _ in allocs:
            if a <= t <= b:
                live += size
                widest = max(widest, live)
    return widest


def _summarise(shape: RingShape, ev: _Events) -> RingMemory:
    kernel = _inside(ev.kernel_spans, ev.allocs)
    casts = _inside(ev.add_spans, ev.allocs)
    cpu_only = kernel | casts
    fwd, bwd = ev.spans[FORWARD_OP], ev.spans[BACKWARD_NODE]
    bwd_kernels = [s for s in ev.kernel_spans if bwd[0] <= s[0] <= bwd[1]]
    return RingMemory(
        shape=shape,
        forward_ring_bytes=_peak_above_entry(ev.allocs, fwd, cpu_only),
        backward_ring_bytes=_peak_above_entry(ev.allocs, bwd, cpu_only),
        forward_raw_bytes=_peak_above_entry(ev.allocs, fwd, set()),
        backward_raw_bytes=_peak_above_entry(ev.allocs, bwd, set()),
        backward_kernel_workspace_bytes=_widest(
            [a for i, a in enumerate(ev.allocs) if i in kernel], bwd_kernels),
        cpu_cast_bytes=_widest([a for i, a in enumerate(ev.allocs) if i in casts],
                               ev.add_spans))


# GQA (4 query heads a key/value head), every rank of CP 2 and three of CP 4, both rotate
# methods; then multi-head attention (as many key/value heads as query heads), one sequence
MHA = {'batch': 1, 'local_tokens': 512, 'dim': 256, 'heads': 4, 'kv_heads': 4}
DEFAULT_SHAPES = tuple(
    RingShape(cp=c, rank=r, rotate=rot, **kw)
    for kw, runs in (({}, ((1, (0,), 'allgather'), (2, (0, 1), 'allgather'),
                           (4, (0, 1, 3), 'allgather'), (2, (1,), 'alltoall'),
                           (4, (1,), 'alltoall'))),
                     (MHA, ((1, (0,), 'allgather'), (2, (0, 1), 'allgather'),
                            (8, (0, 1, 7), 'allgather'))))
    for c, ranks, rot in runs
    for r in ranks)


# A wider sweep (``--sweep``): multi-query, a wider GQA and a two-head model, CP 2, 3, 5
# and 6, every rank, both rotate methods; the most loaded rank against batchfit
SWEEP_MODELS = ({'batch': 1, 'local_tokens': 256, 'dim': 256, 'heads': 8, 'kv_heads': 1},
                {'batch': 3, 'local_tokens': 128, 'dim': 512, 'heads': 16, 'kv_heads': 4},
                {'batch': 1, 'local_tokens': 384, 'dim': 192, 'heads': 2, 'kv_heads': 2})


def sweep() -> list[dict[str, Any]]:
    """The most loaded rank of every ``SWEEP_MODELS`` layout, with batchfit's figures."""
    out = []
    for kw in SWEEP_MODELS:
        for c in (2, 3, 5, 6):
            for rotate in ('allgather', 'alltoall'):
                rows = [measure(RingShape(cp=c, rank=r, rotate=rotate, **kw)) for r in range(c)]
                fwd, bwd = _batchfit(rows[0].shape)
                out.append({'shape': asdict(rows[0].shape) | {'rank': 'all'},
                            'forward_ring_bytes': max(r.forward_ring_bytes for r in rows),
                            'backward_ring_bytes': max(r.backward_ring_bytes for r in rows),
                            'batchfit_forward': fwd, 'batchfit_backward': bwd})
    return out


def _batchfit(shape: RingShape) -> tuple[float, float]:
    """batchfit's forward and backward ring bytes for ``shape`` (the backward without the
    CUDA kernel's workspace, which the CPU run leaves out too); 0 without CP."""
    import numpy as np

    from planner.memory.cp_attention import ring_sizes, torch_ring_bytes
    from planner.models.spec import ModelSpec

    if shape.cp == 1:
        return 0.0, 0.0
    spec = ModelSpec('cp-ring', 1, shape.dim, shape.heads, shape.kv_heads,
                     shape.dim // shape.heads, 768, 256)
    c = np.float64(shape.cp)
    ring = torch_ring_bytes(ring_sizes(spec, np.float64(shape.batch),
                                       np.float64(shape.local_tokens) * c, np.float64(1), c),
                            c, 2.0)
    return float(ring.forward), float(ring.backward_ring)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--json', action='store_true', help='one JSON list on stdout')
    parser.add_argument('--sweep', action='store_true',
                        help='the wider sweep (SWEEP_MODELS; about two minutes)')
    args = parser.parse_args(argv)
    if args.sweep:
        print('heads  cp rotate     fwd: measured batchfit   bwd: measured batchfit  (MiB, '
              'the most loaded rank)')
        for row in sweep():
            s, mib = row['shape'], 2**20
            f, b = row['forward_ring_bytes'], row['backward_ring_bytes']
            bf, bb = row['batchfit_forward'], row['batchfit_backward']
            print(f'{s["heads"]:>2d}/{s["kv_heads"]:<2d} {s["cp"]:3d} {s["rotate"]:9s} '
                  f'{f / mib:9.3f} {bf / mib:8.3f} ({bf / f - 1:+6.1%}) '
                  f'{b / mib:9.3f} {bb / mib:8.3f} ({bb / b - 1:+6.1%})')
        return 0
    rows = [measure(shape) for shape in DEFAULT_SHAPES]
    if args.json:
        json.dump([asdict(r) for r in rows], sys.stdout)
        print()
        return 0
    mib = 2**20
    print('MiB above the op\'s entry; "ring": without the CPU kernels\' workspace and the '
          'CPU-only fp32 casts;\nbatchfit: planner.memory.cp_attention (torch\'s ring, the '
          'kernel\'s workspace left out as here)')
    print(f'{"heads":>5s} {"cp":>3s} {"rank":>4s} {"rotate":9s} {"fwd ring":>9s} '
          f'{"batchfit":>8s} {"bwd ring":>9s} {"batchfit":>8s} {"fwd raw":>8s} '
          f'{"bwd raw":>8s} {"cpu kern":>8s} {"cpu cast":>8s}')
    for r in rows:
        s = r.shape
        fwd, bwd = _batchfit(s)
        print(f'{s.heads:>2d}/{s.kv_heads:<2d} {s.cp:3d} {s.rank:4d} {s.rotate:9s} '
              f'{r.forward_ring_bytes / mib:9.3f} {fwd / mib:8.3f} '
              f'{r.backward_ring_bytes / mib:9.3f} {bwd / mib:8.3f} '
              f'{r.forward_raw_bytes / mib:8.3f} {r.backward_raw_bytes / mib:8.3f} '
              f'{r.backward_kernel_workspace_bytes / mib:8.3f} {r.cpu_cast_bytes / mib:8.3f}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
