"""Megatron: its published memory formulas next to batchfit's megatron figures.

Run ``PYTHONPATH=. .venv/bin/python -m benchmarks.stack_megatron [--flags today|target]``
from the repository root (no torch needed).

Two references, each re-derived here from its source (not copied):

* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models", Table 2: activation bytes of one transformer layer with 16-bit activations,
  ``s b h (34 + 5 a s / h)`` without parallelism, ``s b h (10 + 24/t + 5 a s / (h t))``
  with tensor parallelism, ``s b h (34/t + 5 a s / (h t))`` with sequence parallelism
  too, ``s b h (10 + 24/t)`` with TP and selective recompute, ``s b h 34/t`` with TP, SP
  and selective recompute, and ``2 s b h`` with full recompute (the layer input only).
  The 34 assumes a 4h MLP; Megatron-LM's own estimate generalises it to
  ``18 + 4 ffn / h`` (below).
* Megatron-LM megatron/training/theoretical_memory_usage.py (NVIDIA/Megatron-LM,
  read at d98e8a6, 2026-08-22), dense models without MLA or MoE:
  ``compute_weight_and_optimizer_memory``: parameters on the most loaded shard (the first
  stage: its 1/pp of the layers' TP-sharded matrices plus the embedding, over tp, plus its
  norms, plus the untied output layer when pp = 1) times 18 bytes, or 6 + 12/dp with the
  distributed optimizer (docs/user-guide/features/dist_optimizer.md);
  ``compute_activation_memory`` (sequence parallel and selective recompute): per layer
  ``s b h (18 + 4 ffn / h)`` times *all* layers (the first stage holds L/pp layers for
  pp micro-batches in flight), plus ``8 s b pp`` for the embedding input and
  ``s b h pp`` for its dropout mask, times the interleaving penalty
  ``1 + (pp - 1) / (pp v)``, times ``min(1, m / pp)`` without interleaving, plus
  ``4 s b h (1 + V / h)`` for the output layer and loss when pp = 1, all over tp.

batchfit is run with the flags of benchmarks/stack_flags.py's ``MEGATRON_CASES`` (the
layout pinned, the Megatron knobs in today's vocabulary, or ``--framework megatron``
alone once stacks land). Its ``activations_per_layer_bytes`` is compared with Table 2 and
its weights + gradients + optimizer states with Megatron-LM's weight-and-optimizer
figure; its whole activation component with Megatron-LM's activation figure.
``--mcore`` builds megatron-core's own GPTModel and DDP on the CPU and prints what they
keep per parameter (:func:`mcore_bytes_per_param`). Table 2's
rows are only printed for models it describes (multi-head attention, a 4h MLP), with
batchfit's ``--attention eager``: the table keeps the attention scores, which Megatron
with Transformer Engine's fused attention does not.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from benchmarks.stack_compare import relative_error
from benchmarks.stack_flags import FLAG_SETS, MEGATRON_CASES, MegatronCase
from planner.errors import InputError
from planner.memory.peak import estimate
from planner.memory.training import TrainingSetup
from planner.models.source import resolve_model
from planner.models.spec import ModelSpec

GIB = 2**30


# ---- Korthikanti et al. 2022, Table 2 -------------------------------------------------------
def korthikanti_layer_bytes(m: ModelSpec, s: int, b: int, t: int, *, sp: bool,
                            recompute: str) -> float:
    """Activation bytes of one layer per Table 2 (16-bit activations, 4h MLP assumed)."""
    h, a = m.hidden_size, m.num_heads
    if recompute == 'full':
        return 2 * s * b * h / (t if sp else 1)  # the layer input, sharded under SP
    attention_scores = 0 if recompute == 'selective' else 5 * a * s / h
    if sp:
        return s * b * h * (34 + attention_scores) / t
    return s * b * h * (10 + (24 + attention_scores) / t)


# ---- Megatron-LM theoretical_memory_usage.py, dense models ----------------------------------
def megatron_weight_and_optimizer_bytes(m: ModelSpec, *, tp: int, pp: int, dp: int,
                                        distributed_optimizer: bool) -> float:
    """Bytes of weights, main grads and optimizer on the most loaded rank (first stage)."""
    h, n_layers = m.hidden_size, m.num_layers
    query = m.num_heads * m.head_dim
    attention = 2 * h * h * (1 + m.num_kv_heads / m.num_heads) * query / h
    mlp = 2 * h * m.ffn_size * (1.5 if m.gated_mlp else 1)
    norm = 1 if m.norm == 'rmsnorm' else 2  # LayerNorm has a bias
    layer_norms = 2 * h * norm
    embedding = h * m.vocab_size
    sharded = (attention + mlp) * n_layers / pp + embedding
    replicated = (layer_norms * n_layers + norm * h) / pp
    if not m.tied_embeddings and pp == 1:
        sharded += embedding
    per_param = 6 + 12 / dp if distributed_optimizer else 18
    return (sharded / tp + replicated) * per_param


def megatron_activation_bytes(m: ModelSpec, *, s: int, b: int, tp: int, pp: int,
                              vpp: int | None, microbatches: int) -> float:
    """First-stage activation bytes with sequence parallelism and selective recompute."""
    h, n_layers = m.hidden_size, m.num_layers
    total = s * b * h * (18 + 4 * m.ffn_size / h) * n_layers
    total += 8 * s * b * pp + s * b * h * pp  # embedding input and its dropout mask
    if vpp is not None:
        total *= 1 + (pp - 1) / (pp * vpp)
    elif pp > 1:
        total *= min(1, microbatches / pp)
    if pp == 1:
        total += 4 * s * b * h * (1 + m.vocab_size / h)
    return total / tp


# ---- Megatron-Core on the CPU: what its DDP keeps per parameter ----------------------------
def mcore_bytes_per_param(dp: int = 2, grad_reduce_in_fp32: bool = True
                          ) -> tuple[float, float]:
    """(parameter, gradient-buffer) bytes per parameter of Megatron-Core's own DDP wrapper.

    megatron-core's ``GPTModel`` (local layer spec, bf16 parameters) wrapped in its
    ``DistributedDataParallel`` with ``grad_reduce_in_fp32=True`` (Megatron-LM's default for
    bf16 training; False is ``--grad-reduce-in-bf16``, Megatron-Bridge's
    ``ddp.grad_reduce_in_fp32 = False``), built on torch's fake process group.
    megatron-core allocates its buffers on ``torch.cuda.current_device()``; on this
    CPU-only torch that call is pointed at the CPU for the duration.
    ``get_megatron_optimizer`` needs gloo process groups,
    which the fake group's store cannot create, so the optimizer's 12/d is not measured.
    """
    import torch
    from megatron.core import parallel_state
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
    )
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    from benchmarks.stack_flags import SMALL_LLAMA
    from tests.stacks.fake_pg import fake_process_group

    m = SMALL_LLAMA
    saved = torch.cuda.current_device
    torch.cuda.current_device = lambda: torch.device('cpu')
    try:
        with fake_process_group(dp):
            parallel_state.initialize_model_parallel(1, 1, create_gloo_process_groups=False)
            try:
                cfg = TransformerConfig(
                    num_layers=m['num_hidden_layers'], hidden_size=m['hidden_size'],
                    num_attention_heads=m['num_attention_heads'],
                    num_query_groups=m['num_key_value_heads'],
                    ffn_hidden_size=m['intermediate_size'], gated_linear_unit=True,
                    activation_func=torch.nn.functional.silu, normalization='RMSNorm',
                    add_bias_linear=False, bf16=True, params_dtype=torch.bfloat16,
                    pipeline_dtype=torch.bfloat16, use_cpu_initialization=True)
                model = GPTModel(cfg, get_gpt_layer_local_spec(), vocab_size=m['vocab_size'],
                                 max_sequence_length=m['max_position_embeddings'],
                                 position_embedding_type='rope',
                                 share_embeddings_and_output_weights=False)
                ddp = DistributedDataParallel(
                    cfg, DistributedDataParallelConfig(grad_reduce_in_fp32=grad_reduce_in_fp32),
                    model)
                params = list(model.parameters())
                n = sum(p.numel() for p in params)
                param_bytes = sum(p.numel() * p.element_size() for p in params)
                grad_bytes = sum(b.grad_data.numel() * b.grad_data.element_size()
                                 for b in ddp.buffers)
            finally:
                parallel_state.destroy_model_parallel()
    finally:
        torch.cuda.current_device = saved
    return param_bytes / n, grad_bytes / n


@dataclass(frozen=True)
class Row:
    case: str
    reference: str
    reference_bytes: float
    batchfit_bytes: float | None
    note: str = ''


def _batchfit(case: MegatronCase, flags: str, spec: ModelSpec, **override: Any):
    kwargs = {**(case.today if flags == 'today' else case.target), **override}
    try:
        return estimate(spec, TrainingSetup(seq_len=case.seq_len, micro_batch=case.micro_batch,
                                            **kwargs)), kwargs
    except (InputError, TypeError, ValueError) as exc:
        return exc, kwargs


def rows_for(case: MegatronCase, flags: str) -> list[Row]:
    """Table 2 per layer and Megatron-LM's two figures, with batchfit's matching numbers."""
    spec = resolve_model(case.model)
    s, b = case.seq_len, case.micro_batch
    est, kwargs = _batchfit(case, flags, spec)
    rows = []
    # Table 2 assumes multi-head attention, a 4h MLP and attention scores kept in memory
    # (no flash attention): batchfit is run with --attention eager for its rows.
    table2 = (spec.ffn_size == 4 * spec.hidden_size and spec.num_kv_heads == spec.num_heads
              and not spec.gated_mlp)
    for label, t, sp, rc in () if not table2 else (('Table 2: TP', case.tp, False, 'none'),
                             ('Table 2: TP+SP', case.tp, True, 'none'),
                             ('Table 2: TP+selective', case.tp, False, 'selective'),
                             ('Table 2: TP+SP+selective', case.tp, True, 'selective'),
                             ('Table 2: full recompute', case.tp, True, 'full')):
        ref = korthikanti_layer_bytes(spec, s, b, t, sp=sp, recompute=rc)
        layer_est, _ = _batchfit(case, flags, spec, sequence_parallel=sp, recompute=rc,
                                 attention='eager')
        got = (None if isinstance(layer_est, Exception)
               else float(layer_est.activations_per_layer_bytes))
        rows.append(Row(case.name, f'{label} (per layer)', ref, got))
    if isinstance(est, Exception):
        rows.append(Row(case.name, 'batchfit', 0.0, None, note=str(est)))
        return rows
    dist_opt = int(kwargs.get('zero', 0)) >= 1
    w = megatron_weight_and_optimizer_bytes(spec, tp=case.tp, pp=case.pp, dp=case.dp,
                                            distributed_optimizer=dist_opt)
    c = est.components
    states = c['weights'] + c['gradients'] + c['optimizer_states']
    rows.append(Row(case.name, 'Megatron-LM weights+optimizer', w, float(states),
                    note='batchfit: weights + gradients + optimizer_states'))
    act = megatron_activation_bytes(spec, s=s, b=b, tp=case.tp, pp=case.pp,
                                    vpp=case.vpp if case.vpp > 1 else None,
                                    microbatches=case.microbatches)
    rows.append(Row(case.name, 'Megatron-LM activations', act,
                    float(c['activations'] + c.get('logits', 0)),
                    note='batchfit: activations + logits'))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--flags', choices=FLAG_SETS, default='today')
    parser.add_argument('--mcore', action='store_true',
                        help="also build megatron-core's GPTModel + DDP on the CPU")
    args = parser.parse_args(argv)
    if args.mcore:
        param_b, grad_b = mcore_bytes_per_param()
        print(f'megatron-core DDP: {param_b:.3f} B/param of bf16 parameters, {grad_b:.3f} '
              'B/param of fp32 main-grad buffer (the 6 of 6 + 12/d)')
    print(f'flags: {args.flags}')
    print(f'{"case":22s} {"reference":38s} {"ref GiB":>9s} {"batchfit GiB":>12s} {"error":>7s}')
    for case in MEGATRON_CASES:
        for row in rows_for(case, args.flags):
            bf = '-' if row.batchfit_bytes is None else f'{row.batchfit_bytes / GIB:12.3f}'
            err = ('    n/a' if row.batchfit_bytes is None or not row.reference_bytes else
                   f'{relative_error(row.batchfit_bytes, row.reference_bytes):+7.1%}')
            print(f'{row.case:22s} {row.reference:38s} {row.reference_bytes / GIB:9.3f} '
                  f'{bf:>12s} {err}' + (f'  ({row.note})' if row.note else ''))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
