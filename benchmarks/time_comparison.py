"""Throughput against Narayanan et al. 2021, Table 1: batchfit vs llm-analysis vs the paper.

Run ``.venv/bin/python -m benchmarks.time_comparison [--json OUT]`` from the repository
root (llm-analysis columns need ``.venv/bin/pip install llm-analysis``; skipped with a
note when it is absent).

Each row of the paper's Table 1 (GPT with V = 51200, s = 2048, f = 4h,
A100-80GB, full recompute, no ZeRO) is planned as ``tests/planner/test_step_time.py``
does: ``planner.plans.search`` at the paper's t, p, GPU count and global batch, eager attention,
Megatron ``bf16-mixed``; the micro-batch and interleaving are the search's choice (the
paper does not list them). llm-analysis gets the same model, t, p, d, micro-batch, global
batch and full recompute on an A100 (312 TFLOP/s bf16; the memory is made unlimited so
its batch check passes), at its default ``flops_efficiency`` 1.0 and at 0.5. Its step
time is ``latency_per_iter``: FLOPs / (t·p · peak · efficiency) × micro-batches, with no
bubble and no communication.

TF/GPU is the paper's own count: eq. 3 FLOPs per step, 96·B·s·L·h²·(1 + s/6h + V/16Lh),
over (step time × GPUs), for all three columns. Times per configuration: batchfit's
search per candidate it priced (memory, step time and ranking of the whole grid, divided
by the grid size), batchfit's ``step_time_arrays`` for the one chosen layout, and one
llm-analysis ``training()`` call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from benchmarks.memory_accuracy import SKIP_NOTE, LLMAnalysis, big_gpu, llm_analysis_run
from planner.hardware.catalog import find_gpu, find_interconnect
from planner.memory.training import TrainingSetup
from planner.models.spec import ModelSpec
from planner.plans.request import LayoutLimits, PlanRequest
from planner.plans.search import search
from planner.timing.step_time import LayoutArrays, step_time_arrays

SEQ, VOCAB, A100_BF16_TFLOPS = 2048, 51200, 312.0
TABLE1 = [  # billions, heads, hidden, layers, t, p, GPUs, B, TF/GPU
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


def megatron_gpt(heads: int, hidden: int, layers: int) -> ModelSpec:
    """The GPT of Table 1 (the same spec as tests/planner/test_step_time.py)."""
    return ModelSpec(f'gpt-{hidden}', layers, hidden, heads, heads, hidden // heads, 4 * hidden,
                     VOCAB, gated_mlp=False, activation='gelu', tied_embeddings=True,
                     position_embedding='learned', max_position_embeddings=SEQ,
                     norm='layernorm', qkv_bias=True, attn_out_bias=True, mlp_bias=True,
                     attention_dropout=0.1, hidden_dropout=0.1)


def eq3_flops(batch: int, layers: int, hidden: int) -> float:
    """Narayanan eq. 3: FLOPs of one step with full recompute."""
    return 96 * batch * SEQ * layers * hidden**2 * (
        1 + SEQ / (6 * hidden) + VOCAB / (16 * layers * hidden))


def seconds_per_call(fn, repeat: int = 20) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat


def evaluate(row: tuple) -> dict:
    """One Table 1 row through batchfit and llm-analysis."""
    billions, heads, hidden, layers, t, p, gpus, batch, paper_tf = row
    model, gpu = megatron_gpt(heads, hidden, layers), find_gpu('a100-80g-sxm')
    req = PlanRequest(
        model=model, seq_len=SEQ, gpu=gpu, max_nodes=max(1, gpus // 8), gpus_per_node=8,
        inter_node=find_interconnect('ib-hdr'), global_batch=batch, zero_stages=(0,),
        recompute_modes=('full',), precision='bf16-mixed', framework='megatron',
        attention='eager', limits=LayoutLimits(tp=(t,), pp=(p,), cp=(1,), gpus=(gpus,)))
    result = search(req)
    best = result.best
    flops = eq3_flops(batch, layers, hidden)
    a = np.asarray
    one = LayoutArrays(nodes=a(best.nodes), gpus_per_node=a(best.gpus_per_node), tp=a(t),
                       pp=a(p), vpp=a(best.vpp), cp=a(1), dp=a(best.dp),
                       micro_batch=a(best.micro_batch), grad_accum=a(best.grad_accum),
                       zero=a(0), recompute=a(2), sequence_parallel=a(True))
    link = find_interconnect('ib-hdr')
    out = {'params_b': billions, 'gpus': gpus, 't': t, 'p': p, 'd': best.dp, 'batch': batch,
           'micro_batch': best.micro_batch, 'vpp': best.vpp, 'paper_tf': paper_tf,
           'paper_step_s': flops / (paper_tf * 1e12 * gpus),
           'batchfit_step_s': best.step_time_s,
           'batchfit_tf': flops / (best.step_time_s * gpus) / 1e12,
           'grid_size': result.grid_size,
           'batchfit_search_s_per_candidate': statistics.median(
               search(req).elapsed_s for _ in range(3)) / result.grid_size,
           'batchfit_step_time_s_per_config': seconds_per_call(lambda: step_time_arrays(
               model, SEQ, gpu, link, one, precision='bf16-mixed', attention='eager',
               framework='megatron'))}
    if LLMAnalysis is not None:
        setup = TrainingSetup(seq_len=SEQ, micro_batch=best.micro_batch,
                              grad_accum=best.grad_accum, precision='bf16-mixed', tp=t, pp=p,
                              dp=best.dp, recompute='full', attention='eager',
                              framework='megatron')
        a100 = big_gpu('a100-sxm (unlimited memory)', A100_BF16_TFLOPS)
        for eff in (1.0, 0.5):
            summary = llm_analysis_run(model, setup, gpu=a100, flops_efficiency=eff)
            out[f'llm_analysis_step_s@{eff}'] = summary['latency_per_iter']
            out[f'llm_analysis_tf@{eff}'] = flops / (summary['latency_per_iter'] * gpus) / 1e12
        out['llm_analysis_s_per_config'] = seconds_per_call(
            lambda: llm_analysis_run(model, setup, gpu=a100))
    return out


def err(value: float, ref: float) -> str:
    return f'{value:.0f} ({value / ref - 1:+.0%})'


def main() -> int:
    """Print the markdown tables (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--json', metavar='OUT', help='also write the rows as JSON')
    args = parser.parse_args()
    rows = [evaluate(row) for row in TABLE1]
    lla = LLMAnalysis is not None
    print('| Ψ (B) | GPUs | t·p·d | b, v | paper TF/GPU | batchfit TF/GPU | '
          + ('llm-analysis η=1.0 | llm-analysis η=0.5 | ' if lla else '')
          + 'paper step s | batchfit step s |' + (' llm-analysis step s (η=1.0) |' if lla else ''))
    print('|---:|---:|---|---|---:|---:|' + ('---:|---:|' if lla else '') + '---:|---:|'
          + ('---:|' if lla else ''))
    for r in rows:
        line = (f"| {r['params_b']} | {r['gpus']} | {r['t']}·{r['p']}·{r['d']} | "
                f"{r['micro_batch']}, {r['vpp']} | {r['paper_tf']} | "
                f"{err(r['batchfit_tf'], r['paper_tf'])} | ")
        if lla:
            line += (f"{err(r['llm_analysis_tf@1.0'], r['paper_tf'])} | "
                     f"{err(r['llm_analysis_tf@0.5'], r['paper_tf'])} | ")
        line += f"{r['paper_step_s']:.2f} | {r['batchfit_step_s']:.2f} |"
        if lla:
            line += f" {r['llm_analysis_step_s@1.0']:.2f} |"
        print(line)
    summary = {'batchfit': 'batchfit_tf'}
    if lla:
        summary.update({'llm-analysis η=1.0': 'llm_analysis_tf@1.0',
                        'llm-analysis η=0.5': 'llm_analysis_tf@0.5'})
    print('\nmean |err| of TF/GPU: ' + ', '.join(
        f"{name} {statistics.mean(abs(r[k] / r['paper_tf'] - 1) for r in rows):.1%}"
        for name, k in summary.items()))
    print('\n| time per configuration | µs (mean over the rows) |')
    print('|---|---:|')
    grid = statistics.mean(r['grid_size'] for r in rows)
    print(f'| batchfit search, per candidate priced (grids of {grid:.0f} on average: '
          'fixed costs dominate; see bench_search for large grids) | '
          f"{statistics.mean(r['batchfit_search_s_per_candidate'] for r in rows) * 1e6:.1f} |")
    print('| batchfit step_time_arrays, one layout | '
          f"{statistics.mean(r['batchfit_step_time_s_per_config'] for r in rows) * 1e6:.0f} |")
    if lla:
        print('| llm-analysis training(), one configuration | '
              f"{statistics.mean(r['llm_analysis_s_per_config'] for r in rows) * 1e6:.0f} |")
    else:
        print(f'\n{SKIP_NOTE}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
