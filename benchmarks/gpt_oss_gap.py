"""Why batchfit times Megatron-Bridge's GPT-OSS-120B run too fast: the numbers behind the
"GPT-OSS-120B, 2026-11-25" section of docs/BENCHMARKS.md.

Run ``PYTHONPATH=. .venv/bin/python -m benchmarks.gpt_oss_gap`` from the repository root (no
torch, no GPU; about 10 s on a 2-core VM). It prints four tables:

1. FLOPs per token: what the published TFLOP/s implies, Megatron-Bridge's own count before
   and after its fix, and batchfit's ``ModelSpec.training_flops_per_token``.
2. The step's parts for the three Megatron-Bridge H100 MoE rows (the search's best
   candidate with the layout pinned, as ``benchmarks.published_runs`` plans them).
3. Other rows of the same 26.04.01 table, planned the same way: GPT-OSS-120B on B200 (bf16,
   EP 8 in one node, no PP), the Qwen3 rows on B200 (MXFP8, planned as fp8), and a dense
   reference (Llama3-70B on GB200, MXFP8).
4. What-ifs: mechanisms that are sourced but not modelled, each applied alone on top of
   today's model (by patching ``planner.timing.step_time`` inside this process only).

Nothing here is fitted; the what-ifs are not part of batchfit.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import planner.timing.step_time as st
from benchmarks.published_runs import load_runs, predict
from planner.models.presets import find_preset
from planner.models.spec import ModelSpec

MOE_ROWS = ('bridge-gpt-oss-120b-h100-bf16', 'bridge-qwen3-30b-a3b-h100-fp8',
            'bridge-qwen3-235b-a22b-h100-fp8')
ARCHIVE = 'NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md, 26.04.01'


def bridge_flops_per_token(m: ModelSpec, seq: int, tp: int, *, version: str) -> float:
    """Megatron-Bridge's model FLOPs per token (src/megatron/bridge/training/utils/
    flop_utils.py ``transformer_flops``) for a GQA transformer with routed experts.

    ``version='0.4'`` (v0.4.0-v0.4.2, the 26.04 containers): the gated multiplier 3/2 only
    when the activation is ``F.silu`` (GPT-OSS's is ``quick_gelu``: 1) and every layer's
    core attention full causal. ``version='current'`` (from commit baa0259bd, 2026-05-28,
    v0.5.0 on): 3 GEMMs for any GLU, and GPT-OSS's sliding window (``window_size`` (127, 0),
    ``window_attn_skip_freq`` 2 from src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py)
    as the exact average causal window context. The vocabulary is padded to a multiple of
    128·TP (``make_vocab_size_divisible_by``); routers, biases and norms are not counted.
    """
    h, layers, q = m.hidden_size, m.num_layers, m.q_size
    kv = m.kv_size
    moe = m.moe
    assert moe is not None
    pad = 128 * tp
    vocab = math.ceil(m.vocab_size / pad) * pad
    silu = m.activation in ('silu', 'swiglu') and not m.clamped_glu
    glu = 3.0 if (version == 'current' or silu) else 2.0
    mlp = 6.0 * h * moe.expert_ffn_size * moe.top_k * glu * layers
    proj = h * (q + 2 * kv) + q * h
    full_core = q * seq / 2 * 2
    if version == 'current' and m.clamped_glu:  # GPT-OSS: window 128 on every other layer
        w = 128
        swa_core = q * (w - w * (w - 1) / (2 * seq)) * 2
        swa_layers = sum(1 for i in range(layers) if (i + 1) % 2 != 0)
        attn = 6.0 * ((layers - swa_layers) * (proj + full_core) + swa_layers * (proj + swa_core))
    else:
        attn = 6.0 * layers * (proj + full_core)
    return mlp + attn + 6.0 * h * vocab


def flops_table() -> None:
    runs = {r['id']: r for r in load_runs()}
    print('### 1. FLOPs per token (GFLOP, training, s 4096)\n')
    print('| run | published TFLOP/s ÷ tokens/s | Bridge 0.4 count | Bridge current count '
          '| batchfit `training_flops_per_token` |')
    print('|---|---:|---:|---:|---:|')
    for rid in MOE_ROWS:
        run = runs[rid]
        m = find_preset(run['model'])
        implied = run['published_tflops_per_gpu'] * 1e12 / run['published_tokens_per_s_per_gpu']
        old = bridge_flops_per_token(m, run['seq_len'], run['tp'], version='0.4')
        new = bridge_flops_per_token(m, run['seq_len'], run['tp'], version='current')
        ours = m.training_flops_per_token(run['seq_len'])
        print(f'| {rid} | {implied / 1e9:.2f} | {old / 1e9:.2f} | {new / 1e9:.2f} '
              f'| {ours / 1e9:.2f} |')
    print()


def _best(run: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """``predict`` of the row, and the search's best candidate (parts of its step)."""
    import benchmarks.published_runs as pr

    seen: list[Any] = []
    search = pr.search

    def keep(request):
        result = search(request)
        seen.append(result.best)
        return result

    pr.search = keep  # type: ignore[assignment]
    try:
        pred = predict(run, 'target')
    finally:
        pr.search = search
    return pred, seen[-1]


PARTS = ('compute_s', 'elementwise_s', 'bubble_s', 'tp_comm_s', 'pp_comm_s', 'dp_comm_s',
         'ep_comm_s', 'optimizer_s')


def parts_table() -> None:
    runs = {r['id']: r for r in load_runs()}
    print('### 2. The step, part by part (seconds per step; `--flags target`)\n')
    print('| run | published step | batchfit step | ' + ' | '.join(PARTS) + ' |')
    print('|---|---:|---:|' + '---:|' * len(PARTS))
    for rid in MOE_ROWS:
        run = runs[rid]
        _, best = _best(run)
        published = (run['global_batch'] * run['seq_len']
                     / (run['gpus'] * run['published_tokens_per_s_per_gpu']))
        cells = ' | '.join(f'{best.step_breakdown_s.get(p, 0.0):.2f}' for p in PARTS)
        print(f'| {rid} | {published:.2f} | {best.step_time_s:.2f} | {cells} |')
    print()


def _row(base: dict[str, Any], rid: str, **changes: Any) -> dict[str, Any]:
    return {**base, 'id': rid, **changes}


def other_rows() -> list[tuple[str, dict[str, Any]]]:
    """Rows of the 26.04.01 table that the published-runs file does not hold."""
    runs = {r['id']: r for r in load_runs()}
    oss, q30 = runs['bridge-gpt-oss-120b-h100-bf16'], runs['bridge-qwen3-30b-a3b-h100-fp8']
    q235, llama = runs['bridge-qwen3-235b-a22b-h100-fp8'], runs['bridge-llama3-70b-h100-fp8']
    return [
        ('GPT OSS 120B, DGX-B200, BF16, GBS 1280, MBS 4, TP 1, PP 1, EP 8',
         _row(oss, 'b200-gpt-oss', gpu='b200', micro_batch=4, pp=1,
              published_tokens_per_s_per_gpu=13568)),
        ('Qwen3_30B_a3B, DGX-B200, MXFP8 (as fp8), 8 GPUs, GBS 512, MBS 4, EP 8',
         _row(q30, 'b200-qwen3-30b', gpu='b200', gpus=8, global_batch=512, micro_batch=4,
              ep=8, published_tokens_per_s_per_gpu=27136)),
        ('Qwen3_235B_a22B, DGX-B200, MXFP8 (as fp8), 256 GPUs, GBS 8192, TP 1, PP 8, EP 8',
         _row(q235, 'b200-qwen3-235b', gpu='b200', tp=1, pp=8, vpp=1, ep=8,
              published_tokens_per_s_per_gpu=3776)),
        ('LLAMA3_70B, DGX-GB200, MXFP8 (as fp8), 64 GPUs, TP 2, PP 4, VP 5 (dense)',
         _row(llama, 'gb200-llama3-70b', gpu='gb200', tp=2, pp=4, vpp=5,
              published_tokens_per_s_per_gpu=3712)),
    ]


def other_rows_table() -> None:
    print(f'### 3. Other rows of the same table ({ARCHIVE})\n')
    print('| row | published tokens/s/GPU | batchfit | error | fits |')
    print('|---|---:|---:|---:|---|')
    for label, run in other_rows():
        pred = predict(run, 'target')
        tok = pred['tokens_per_s_per_gpu']
        pub = run['published_tokens_per_s_per_gpu']
        print(f'| {label} | {pub:,} | {tok:,.0f} | {tok / pub - 1:+.1%} '
              f'| {"yes" if pred["fits"] else "no"} |')
    print()


@contextlib.contextmanager
def _extra_elementwise(per_token_layer) -> Iterator[None]:
    """Add ``per_token_layer(model, act_bytes)`` bytes to every recompute mode's
    memory-bound bytes per token per layer."""
    original = st._elementwise_bytes_per_token

    def patched(model, seq_len, attention, act_bytes):
        return original(model, seq_len, attention, act_bytes) + per_token_layer(model, act_bytes)

    st._elementwise_bytes_per_token = patched
    try:
        yield
    finally:
        st._elementwise_bytes_per_token = original


def _moe_recompute(model: ModelSpec, e: int) -> float:
    """The run's selective recompute of ``moe_act`` and ``layernorm`` (Bridge's H100
    config): the clamp and the fused activation forward again on k·f (16 + 6 bytes per
    element), and the two RMSNorms (read and write h each)."""
    if not model.clamped_glu or model.moe is None:
        return 0.0
    kf = model.moe.top_k * model.moe.expert_ffn_size
    return (16.0 + 6.0) * kf * e / 2 + 2 * 2 * e * model.hidden_size


def _permutations(model: ModelSpec, e: int) -> float:
    """The alltoall dispatcher's four permutations (megatron/core/transformer/moe/
    token_dispatcher.py: permute h -> k·h before the all-to-all, sort by local expert and
    back, unpermute k·h -> h), each read and written, forward and backward."""
    if model.moe is None:
        return 0.0
    k, h = model.moe.top_k, model.hidden_size
    return 2.0 * e * (2 * h + 6 * k * h) * model.moe_layers / model.num_layers


@contextlib.contextmanager
def _loss_bytes(per_logit: float) -> Iterator[None]:
    """Megatron's loss at ``per_logit`` bytes. The Bridge runs set
    ``cross_entropy_fusion_impl = "te"`` (scripts/performance/utils/overrides.py, v0.4.1):
    TransformerEngine transformer_engine/common/triton/cross_entropy.py reads the bf16
    logits twice and writes the gradient over them in the forward (2 + 2 + 2), and the
    backward multiplies it by the per-token loss gradient (2 + 2): 10 B."""
    original = st.LOSS_BYTES_PER_LOGIT['megatron']
    st.LOSS_BYTES_PER_LOGIT['megatron'] = per_logit
    try:
        yield
    finally:
        st.LOSS_BYTES_PER_LOGIT['megatron'] = original


@contextlib.contextmanager
def _sliding_window() -> Iterator[None]:
    """GPT-OSS's window of 128 on every other layer: those layers' causal context is
    W - W(W-1)/(2s) = 126 tokens instead of s/2 (Bridge's current count)."""
    fwd, rescore = ModelSpec.forward_flops_per_token, st.flash_backward_rescore_flops

    def share(m: ModelSpec, s: int) -> float:
        if not m.clamped_glu:
            return 1.0
        w = 128
        return (s / 2 + (w - w * (w - 1) / (2 * s))) / 2 / (s / 2)

    def patched_fwd(self, seq_len, causal=True):
        core = 4.0 * seq_len * self.q_size * self.num_layers / (2.0 if causal else 1.0)
        return 2.0 * self.matmul_params_per_token() + core * share(self, seq_len)

    ModelSpec.forward_flops_per_token = patched_fwd  # type: ignore[method-assign]
    def patched_rescore(model: ModelSpec, seq_len: int) -> float:
        return rescore(model, seq_len) * share(model, seq_len)

    st.flash_backward_rescore_flops = patched_rescore
    try:
        yield
    finally:
        ModelSpec.forward_flops_per_token = fwd  # type: ignore[method-assign]
        st.flash_backward_rescore_flops = rescore


@contextlib.contextmanager
def _all_four() -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        stack.enter_context(_extra_elementwise(_moe_recompute))
        stack.enter_context(_extra_elementwise(_permutations))
        stack.enter_context(_loss_bytes(10.0))
        stack.enter_context(_sliding_window())
        yield


def what_if_table() -> None:
    runs = {r['id']: r for r in load_runs()}
    cases: list[tuple[str, contextlib.AbstractContextManager[Any]]] = [
        ('batchfit as committed', contextlib.nullcontext()),
        ('+ the run\'s selective recompute of moe_act and layernorm',
         _extra_elementwise(_moe_recompute)),
        ('+ the alltoall dispatcher\'s four token permutations', _extra_elementwise(_permutations)),
        ('the loss as Transformer Engine\'s Triton kernel (10 B per logit, not 52)',
         _loss_bytes(10.0)),
        ('GPT-OSS\'s sliding window counted', _sliding_window()),
        ('all four together', _all_four()),
    ]
    print('### 4. What-ifs (tokens/s/GPU and error; each alone on top of batchfit)\n')
    print('| case | ' + ' | '.join(MOE_ROWS) + ' |')
    print('|---|' + '---:|' * len(MOE_ROWS))
    for label, ctx in cases:
        with ctx:
            cells = []
            for rid in MOE_ROWS:
                run = runs[rid]
                tok = predict(run, 'target')['tokens_per_s_per_gpu']
                err = tok / run['published_tokens_per_s_per_gpu'] - 1
                cells.append(f'{tok:,.0f} ({err:+.1%})')
        print(f'| {label} | ' + ' | '.join(cells) + ' |')
    print()


def main() -> int:
    flops_table()
    parts_table()
    other_rows_table()
    what_if_table()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
