"""Where Inductor waits for the collectives of torch's ring attention (context parallelism).

Run ``PYTHONPATH=. .venv/bin/python -m benchmarks.cp_ring_schedule [--cp 4] [--rank 1]``
from the repository root (needs torch; CPU only, about a minute).

torchtitan compiles each transformer block with its attention inside, so its CP ring
(torch/distributed/tensor/experimental/_context_parallel/_attention.py
``_templated_ring_attention`` and ``_templated_ring_attention_backward``) runs as Inductor
schedules it. This compiles both with torch.compile on CPU, with a fake process group of
``--cp`` ranks and the CPU flash kernels standing in for the CUDA ones (the ring's own code
is torch's), and prints the generated code's order of collectives, waits and SDPA calls:
a wait printed right after its collective, before the next SDPA, is communication that
nothing hides. batchfit's torchtitan CP time follows what this prints
(planner/timing/step_time.py ``_torch_ring_layer_s``).
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

KEYS = ('all_gather_into_tensor', 'all_to_all_single', 'wait_tensor',
        '_scaled_dot_product_flash_attention_for_cpu')


def _order(code: str) -> list[str]:
    """The collectives, waits and SDPA calls of Inductor's ``call``, in order."""
    body = code[code.index('def call(self, args)'):]
    out = []
    call = re.compile(r'^\s*(?:\w+\s*=\s*)?torch\.ops\.\w+\.(\w+)\.default\(')
    for line in body.splitlines():
        m = call.match(line)
        if m and m.group(1).removesuffix('_backward') in KEYS:
            out.append(m.group(1))
    return out


def schedules(cp: int, rank: int) -> dict[str, list[str]]:
    """{'forward': [...], 'backward': [...]} for one rank of a ``cp``-rank ring."""
    import torch
    import torch.distributed as dist
    from torch._inductor.utils import run_and_get_code
    from torch.distributed.tensor.experimental._context_parallel import _attention as ring
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_initialized():
        dist.init_process_group('fake', store=FakeStore(), rank=rank, world_size=cp)
    group = dist.group.WORLD
    aten = torch.ops.aten

    def sdpa(q, k, v, is_causal=False, **_):
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, bool(is_causal))

    def sdpa_backward(query, key, value, out, logsumexp, is_causal=False, grad_out=None, **_):
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, query, key, value, out, logsumexp, 0.0, bool(is_causal))

    def forward(q, k, v):
        return ring._templated_ring_attention(group, 2, sdpa, q, k, v, is_causal=True)[0]

    def backward(grad, q, k, v, out, lse):
        return ring._templated_ring_attention_backward(
            group, 2, sdpa_backward, grad, 'grad_out', q, k, v, out, lse, is_causal=True)[:3]

    shape = (1, 4, 256, 64)  # batch, heads, local tokens (two head-tail chunks), head dim
    q, k, v, out, grad = (torch.randn(shape) for _ in range(5))
    lse = torch.randn(shape[:3])
    torch._dynamo.reset()
    _, fwd_code = run_and_get_code(torch.compile(forward, fullgraph=True), q, k, v)
    _, bwd_code = run_and_get_code(torch.compile(backward, fullgraph=True),
                                   grad, q, k, v, out, lse)
    return {'forward': _order(fwd_code[0]), 'backward': _order(bwd_code[0])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cp', type=int, default=4, help='ranks in the ring (default 4)')
    parser.add_argument('--rank', type=int, default=1, help='the rank traced (default 1)')
    args = parser.parse_args(argv)
    if args.cp < 2 or not 0 <= args.rank < args.cp:
        parser.error('--cp must be at least 2 and --rank in [0, cp)')
    import os
    os.environ.setdefault('TORCHINDUCTOR_CACHE_DIR', str(Path(tempfile.gettempdir())
                                                           / 'batchfit-cp-ring-inductor'))
    for phase, order in schedules(args.cp, args.rank).items():
        print(f'{phase} (CP {args.cp}, rank {args.rank}):')
        for op in order:
            print(f'  {op}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
