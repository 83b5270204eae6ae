"""What torchtitan's MoE block saves for backward, measured on the CPU.

torchtitan 0.2.2's own ``MoE`` (torchtitan/models/moe/moe.py: ``TokenChoiceTopKRouter``,
``TokenReorderer``, ``GroupedExperts`` on ``torch._grouped_mm`` behind
``indices_padding_wrapper``) or ``GptOssMoE`` (models/gpt_oss/model/moe.py) is run forward
once on one rank without EP inside ``torch.autograd.graph.saved_tensors_hooks``: the bytes of
every distinct storage autograd keeps, parameters and buffers excluded, its input (the
norm output, which the router's gate keeps) included.

Two CPU stand-ins, neither of which saves anything:

* torchtitan/models/moe/kernels.py imports triton (no CPU wheel); its
  ``generate_permute_indices`` is replaced by the same function running torchtitan's own
  CPU reference (``fill_indices_cpu``, copied below), which fills the same int32 indices;
* ``torch.histc`` of the int64 expert indices has a CUDA kernel but no CPU one: the count
  is taken on a float copy and cast back (:class:`CudaHistc`); it has no gradient.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

KERNELS = 'torchtitan.models.moe.kernels'


def _generate_permute_indices(tokens_per_expert_group, experts_per_rank: int, num_ranks: int,
                              max_len: int, alignment: int, use_cpu: bool = False):
    """torchtitan/models/moe/kernels.py ``generate_permute_indices`` with its CPU path
    (``fill_indices_cpu``), as torchtitan writes them."""
    import torch

    start_index_values = torch.cumsum(tokens_per_expert_group, 0) - tokens_per_expert_group
    total = tokens_per_expert_group.view(num_ranks, -1).sum(0)
    total = torch.clamp_min(total, alignment)
    m_sizes = ((total + alignment - 1) // alignment * alignment).to(torch.int32)
    m_offsets = torch.cumsum(m_sizes, 0)
    write_offsets = m_offsets - m_sizes
    permuted = torch.full((max_len,), -1, dtype=torch.int32)
    for e in range(experts_per_rank):
        write_start = int(write_offsets[e].item())
        for r in range(num_ranks):
            i = r * experts_per_rank + e
            start = int(start_index_values[i].item())
            length = int(tokens_per_expert_group[i].item())
            if length > 0:
                end = min(write_start + length, max_len)
                permuted[write_start:end] = torch.arange(start, start + (end - write_start),
                                                         dtype=torch.int32)
            write_start += length
    return permuted, m_sizes, m_offsets.to(torch.int32)


def _install_cpu_kernels() -> None:
    stub = types.ModuleType(KERNELS)
    stub.generate_permute_indices = _generate_permute_indices  # type: ignore[attr-defined]
    stub.fill_indices_wrapper = None  # type: ignore[attr-defined]
    previous = sys.modules.get(KERNELS)
    if previous is not None and getattr(previous, 'generate_permute_indices', None) \
            is _generate_permute_indices:
        return
    sys.modules[KERNELS] = stub
    # modules that imported the raising stub of tests/stacks/fake_pg.py keep their name
    for name in ('torchtitan.models.moe.utils',):
        module = sys.modules.get(name)
        if module is not None:
            module.generate_permute_indices = _generate_permute_indices  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TitanMoECase:
    name: str
    hidden: int = 64
    experts: int = 8
    topk: int = 2
    expert_ffn: int = 32
    score_func: str = 'softmax'
    route_norm: bool = True
    score_before_experts: bool = False
    shared: int = 0  # num_shared_experts
    gpt_oss: bool = False
    fp32: bool = False  # the model in fp32 (else bf16, FSDP2's compute dtype)
    seq: int = 32
    batch: int = 2

    @property
    def tokens(self) -> int:
        return self.seq * self.batch


def measure(case: TitanMoECase) -> tuple[int, list[tuple[int, tuple[int, ...], str]]]:
    """Saved bytes of one forward of the block, and its storages."""
    import torch
    from torch.overrides import TorchFunctionMode

    _install_cpu_kernels()
    from torchtitan.models.moe.moe import MoE, MoEArgs

    class CudaHistc(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.histc and not args[0].is_floating_point():
                return func(args[0].float(), *args[1:], **kwargs).to(args[0].dtype)
            return func(*args, **kwargs)

    moe_args = MoEArgs(num_experts=case.experts, num_shared_experts=case.shared,
                       score_func=case.score_func, route_norm=case.route_norm,
                       top_k=case.topk, score_before_experts=case.score_before_experts,
                       load_balance_coeff=1e-3, gate_bias=case.gpt_oss)
    torch.manual_seed(0)
    block: Any
    if case.gpt_oss:
        from torchtitan.models.gpt_oss.model.args import GptOssModelArgs
        from torchtitan.models.gpt_oss.model.moe import GptOssMoE

        block = GptOssMoE(GptOssModelArgs(dim=case.hidden, moe_args=moe_args,
                                          swiglu_limit=7.0), case.hidden, case.expert_ffn)
    else:
        block = MoE(moe_args, dim=case.hidden, hidden_dim=case.expert_ffn)
    dtype = torch.float32 if case.fp32 else torch.bfloat16
    block = block.to(dtype)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.02)
    x = torch.randn(case.batch, case.seq, case.hidden, dtype=dtype, requires_grad=True)
    skip = {t.untyped_storage().data_ptr() for t in [*block.parameters(), *block.buffers()]}
    seen: dict[int, tuple[int, tuple[int, ...], str]] = {}
    alive = []

    def pack(t):
        alive.append(t)
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen.setdefault(st.data_ptr(), (st.nbytes(), tuple(t.shape), str(t.dtype)))
        return t

    with CudaHistc(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = block(x)
    with CudaHistc():
        out.float().sum().backward()
    storages = sorted(seen.values(), reverse=True)
    return sum(v[0] for v in storages), storages
