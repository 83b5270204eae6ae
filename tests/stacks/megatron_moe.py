"""What megatron-core's MoE layer saves for backward, measured on the CPU.

megatron-core's own ``MoELayer`` (megatron/core/transformer/moe/moe_layer.py: its
``TopKRouter``, its alltoall or allgather token dispatcher, ``SequentialMLP`` experts of
its ``MLP`` with the weighted fused activations of megatron/core/fusions/) is built from
``get_moe_module_spec(use_te=False)`` in bf16 on real gloo process groups (one rank per
process, ``world_size`` = the EP size) and run forward once inside
``torch.autograd.graph.saved_tensors_hooks``: the bytes of every distinct storage autograd
keeps, parameters excluded, are the layer's saved activations. The layer's input (the
pre-MLP norm's output) is one of them: the router's linear keeps it.

What is not the GPU path, and why the count still holds there:

* The experts are ``SequentialMLP`` (per-expert ``MLP``s of megatron's own linears) where
  Megatron-Bridge runs ``TEGroupedMLP`` (``moe_grouped_gemm``): Transformer Engine's
  ``GroupedLinear`` saves the same inputs (its per-expert splits are views of one
  tensor), the weighted fused activation the same fc1 output and probabilities. fp8
  changes what a linear keeps (``linear_input_bytes``), counted from TE's source.
* The router and the permutation run unfused (Megatron-LM's defaults,
  ``moe_router_fusion`` and ``moe_permute_fusion`` False): the fused kernels are TE's
  (CUDA only) and are counted from TE's source in ``planner.memory.activations``.
* On this CPU-only torch, megatron-core's calls into CUDA streams, events and
  ``torch.cuda.current_device`` are pointed at no-ops for the duration (they order
  host-device copies, which a CPU run does not need), and ``moe_utils.te_general_gemm``
  is set to None where megatron-core 0.16.1 leaves it undefined without TE.

Routing is made exactly balanced: the router's weight reads the first E input features
and token i carries a large value on experts (i·k + j) mod E, j < k, so every expert
receives T·k/E copies and, with every rank given the same tokens, every EP rank k·T.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class MoECase:
    """One MoE layer configuration (megatron-core ``TransformerConfig`` fields)."""

    name: str
    hidden: int = 64
    experts: int = 8
    topk: int = 2
    expert_ffn: int = 32
    dispatcher: str = 'alltoall'  # or 'allgather'
    ep: int = 1
    router_fp32: bool = True  # --moe-router-dtype fp32 (else the input's, bf16)
    aux_loss: bool = True  # --moe-aux-loss-coeff > 0 (load_balancing_type aux_loss)
    z_loss: bool = False  # --moe-z-loss-coeff
    score: str = 'softmax'  # 'softmax' (top-k first), 'softmax_pre', 'sigmoid'
    expert_bias: bool = False  # --moe-router-enable-expert-bias (sigmoid only)
    gpt_oss: bool = False  # quick-GEGLU clamped at 7 with offset 1 (GPT-OSS)
    shared_ffn: int = 0  # --moe-shared-expert-intermediate-size (0: none)
    shared_gate: bool = False  # --moe-shared-expert-gate
    seq: int = 32
    batch: int = 2

    @property
    def tokens(self) -> int:
        return self.seq * self.batch


@dataclass
class MoEMeasurement:
    """Saved bytes of one MoE layer forward on rank 0."""

    case: MoECase
    saved_bytes: int
    routed_copies: int  # rows the local experts received
    storages: list[tuple[int, tuple[int, ...], str]] = field(default_factory=list)


@contextlib.contextmanager
def _cpu_cuda_shims():
    """megatron-core's CUDA stream/device calls as no-ops on a CPU-only torch."""
    import torch

    class _Stream:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def wait_stream(self, *args: Any) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def record_event(self) -> _Stream:
            return self

        def __eq__(self, other: object) -> bool:
            return isinstance(other, _Stream)

        def __hash__(self) -> int:
            return 0

    import megatron.core.transformer.moe.token_dispatcher as dispatcher

    def to_host(tensor, as_numpy=False, record_stream=False):
        # what maybe_move_tensor_to_cpu hands the collectives from a GPU tensor
        return tensor.numpy() if as_numpy and torch.is_tensor(tensor) else tensor

    saved = {name: getattr(torch.cuda, name)
             for name in ('current_device', 'Stream', 'stream', 'current_stream')}
    saved_move = dispatcher.maybe_move_tensor_to_cpu
    torch.cuda.current_device = lambda: torch.device('cpu')
    torch.cuda.Stream = _Stream
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    torch.cuda.current_stream = lambda *a, **k: _Stream()
    dispatcher.maybe_move_tensor_to_cpu = to_host
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)
        dispatcher.maybe_move_tensor_to_cpu = saved_move


def _config(case: MoECase):
    import torch
    from megatron.core.fusions.fused_bias_geglu import quick_gelu
    from megatron.core.transformer.transformer_config import TransformerConfig
    from torch.nn.functional import silu

    extra: dict[str, Any] = {}
    if case.gpt_oss:
        # Megatron-Bridge src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py (v0.4.1)
        # GPT-OSS's linears have biases; they are parameters, which keep no activation
        # (the fc2 bias's ``output += bias * probs`` saves the bias and a view of the
        # probabilities), and megatron-core's SequentialMLP cannot add it at EP/TP 1 (the
        # in-place add on the row-parallel output, returned as-is, raises); TEGroupedMLP
        # adds it out of place (experts.py ``_apply_bias``).
        extra.update(activation_func=quick_gelu, activation_func_clamp_value=7.0,
                     glu_linear_offset=1.0)
    else:
        extra.update(activation_func=silu)
    if case.shared_ffn:
        extra.update(moe_shared_expert_intermediate_size=case.shared_ffn,
                     moe_shared_expert_gate=case.shared_gate)
    return TransformerConfig(
        num_layers=1, hidden_size=case.hidden, num_attention_heads=4,
        ffn_hidden_size=4 * case.hidden, num_moe_experts=case.experts,
        moe_router_topk=case.topk, moe_ffn_hidden_size=case.expert_ffn,
        gated_linear_unit=True, bias_activation_fusion=True, add_bias_linear=False,
        bf16=True, params_dtype=torch.bfloat16, use_cpu_initialization=True,
        expert_model_parallel_size=case.ep,
        moe_token_dispatcher_type=case.dispatcher,
        moe_router_dtype='fp32' if case.router_fp32 else None,
        moe_aux_loss_coeff=1e-2 if case.aux_loss else 0.0,
        moe_z_loss_coeff=1e-3 if case.z_loss else None,
        moe_router_score_function='sigmoid' if case.score == 'sigmoid' else 'softmax',
        moe_router_pre_softmax=case.score == 'softmax_pre',
        moe_router_enable_expert_bias=case.expert_bias,
        normalization='RMSNorm', **extra)


def _balanced_input(case: MoECase, layer):
    """Tokens and a router weight that send token i to experts (i·k + j) mod E."""
    import torch

    h, n_exp, k, n = case.hidden, case.experts, case.topk, case.tokens
    assert h >= n_exp
    assert (n * k) % n_exp == 0
    gen = torch.Generator().manual_seed(0)
    x = 0.01 * torch.randn(n, h, generator=gen)
    for i in range(n):
        for j in range(k):
            x[i, (i * k + j) % n_exp] += 1.0 + 0.01 * j
    with torch.no_grad():
        w = torch.zeros_like(layer.router.weight)
        w[:, :n_exp] = torch.eye(n_exp, dtype=w.dtype)
        layer.router.weight.copy_(w)
        if layer.router.bias is not None:
            layer.router.bias.zero_()
    return x.view(case.seq, case.batch, h).to(torch.bfloat16).requires_grad_(True)


def measure_on_rank(case: MoECase) -> MoEMeasurement:
    """Build and run the layer on an initialised process group (this process's rank)."""
    import megatron.core.transformer.moe.moe_utils as moe_utils
    import torch
    from megatron.core import parallel_state
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.spec_utils import build_module

    if not hasattr(moe_utils, 'te_general_gemm'):
        moe_utils.te_general_gemm = None
    with _cpu_cuda_shims():
        parallel_state.initialize_model_parallel(
            1, 1, expert_model_parallel_size=case.ep, create_gloo_process_groups=False)
        try:
            with contextlib.suppress(Exception):
                model_parallel_cuda_manual_seed(0)
            cfg = _config(case)
            spec = get_moe_module_spec(use_te=False, num_experts=case.experts,
                                       moe_grouped_gemm=False)
            layer = build_module(spec, config=cfg)
            x = _balanced_input(case, layer)
            skip = {p.untyped_storage().data_ptr() for p in layer.parameters()}
            skip |= {b.untyped_storage().data_ptr() for b in layer.buffers()}
            seen: dict[int, tuple[int, tuple[int, ...], str]] = {}
            alive = []  # a storage freed in forward must not lend its address to another

            def pack(t):
                st = t.untyped_storage()
                alive.append(t)
                if st.data_ptr() not in skip:
                    seen.setdefault(st.data_ptr(), (st.nbytes(), tuple(t.shape), str(t.dtype)))
                return t

            routed = []

            def count_rows(module, args):
                routed.append(int(args[0].shape[0]))

            hook = layer.experts.register_forward_pre_hook(count_rows)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out, _ = layer(x)
            hook.remove()
            out.float().sum().backward()  # the graph is a real one: it runs backward
            storages = sorted(seen.values(), reverse=True)
            return MoEMeasurement(case, sum(v[0] for v in storages), routed[0], storages)
        finally:
            parallel_state.destroy_model_parallel()


def _worker(rank: int, world: int, init: str, cases: list[dict], out: str) -> None:
    import json

    import torch.distributed as dist

    dist.init_process_group('gloo', init_method=init, rank=rank, world_size=world)
    try:
        results = []
        for case in cases:
            got = measure_on_rank(MoECase(**case))
            results.append({'saved_bytes': got.saved_bytes,
                            'routed_copies': got.routed_copies, 'storages': got.storages})
        if rank == 0:
            with open(out, 'w') as fh:
                json.dump(results, fh)
    finally:
        dist.destroy_process_group()


def measure(cases: list[MoECase]) -> list[MoEMeasurement]:
    """Run every case on ``case.ep`` gloo ranks (one set of fresh processes per EP size)
    and return rank 0's counts, in order."""
    import json
    import warnings

    import torch.multiprocessing as mp

    results: dict[str, MoEMeasurement] = {}
    for ep in sorted({c.ep for c in cases}):
        group = [c for c in cases if c.ep == ep]
        with tempfile.TemporaryDirectory() as tmp:
            init = 'file://' + os.path.join(tmp, 'store')
            out = os.path.join(tmp, 'out.json')
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                mp.start_processes(_worker, args=(ep, init, [asdict(c) for c in group], out),
                                   nprocs=ep, join=True, start_method='spawn')
            with open(out) as fh:
                got = json.load(fh)
        for case, row in zip(group, got, strict=True):
            results[case.name] = MoEMeasurement(
                case, row['saved_bytes'], row['routed_copies'],
                [(a, tuple(b), c) for a, b, c in row['storages']])
    return [results[c.name] for c in cases]


if __name__ == '__main__':  # python -m tests.stacks.megatron_moe: every case's storages
    for m in measure([MoECase('a2a'), MoECase('allgather', dispatcher='allgather'),
                      MoECase('a2a-ep2', ep=2), MoECase('gpt-oss', gpt_oss=True)]):
        print(m.case.name, m.saved_bytes, m.saved_bytes / m.case.tokens, 'routed',
              m.routed_copies)
        for row in m.storages:
            print('   ', row)
