"""torchtitan's switches (float8, torch.compile, async TP): the speed-ups batchfit gives
against the published ones, on the rows the constants were fitted on and on the others.

Run ``PYTHONPATH=. .venv/bin/python -m benchmarks.torchtitan_switches`` from the repository
root (no torch needed). The constants live in ``planner/timing/stack_speed.py``:

* ``COMPILE_SPEEDUP`` fitted on torchtitan Table 1 (FSDP -> FSDP + compile), validated on
  Table 3;
* ``FP8_GEMM_SPEEDUP`` fitted on Table 1 (+ compile -> + compile + float8), validated on
  Table 3 (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md);
* ``ASYNC_TP_OVERLAP`` fitted on Table 4 (2D -> 2D + async TP), validated on
  benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (70B FSDP 32 x TP 8, local batch
  16, full AC; 8B FSDP 8 x TP 8, local batch 12, op-level SAC; both with compile).

Also the absolute throughput of an out-of-sample float8 + compile run on H200
(benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md: Llama-3.1-8B, FSDP over 32 and 64
GPUs, local batch 2, seq 8192, op-level SAC).
"""

from __future__ import annotations

from typing import Any

from benchmarks.published_runs import load_runs, predict


def _tps(run: dict[str, Any]) -> float:
    return predict(run, 'target')['tokens_per_s_per_gpu']


def ratio_rows() -> list[tuple[str, str, float, float]]:
    """(what, fitted or validated, published speed-up, batchfit's)."""
    runs = {r['id']: r for r in load_runs()}
    rows = []
    pairs = (('compile, Table 1', 'fitted', 'titan-t1-fsdp', 'titan-t1-fsdp-compile'),
             ('compile, Table 3', 'validated', 'titan-t3-fsdp128', 'titan-t3-fsdp128-compile'),
             ('float8, Table 1', 'fitted', 'titan-t1-fsdp-compile',
              'titan-t1-fsdp-compile-fp8'),
             ('float8, Table 3', 'validated', 'titan-t3-fsdp128-compile',
              'titan-t3-fsdp128-compile-fp8'),
             ('async TP, Table 4', 'fitted', 'titan-t4-2d', 'titan-t4-2d-asynctp'))
    for what, kind, a, b in pairs:
        pub = (runs[b]['published_tokens_per_s_per_gpu']
               / runs[a]['published_tokens_per_s_per_gpu'])
        rows.append((what, kind, pub, _tps(runs[b]) / _tps(runs[a])))
    t4 = runs['titan-t4-2d']
    eight = {**runs['titan-t1-fsdp'], 'gpus': 64, 'tp': 8, 'dp_shard': 8, 'global_batch': 96,
             'micro_batch': 12, 'compile': True}
    for name, base, prec, before, after in (
            ('70B bf16', t4, 'bf16', 597.3, 652.4), ('70B float8', t4, 'fp8', 809.8, 942.4),
            ('8B bf16', eight, 'bf16', 4378.0, 4809.4),
            ('8B float8', eight, 'fp8', 5078.1, 5570.1)):
        run = {**base, 'id': name, 'precision': prec, 'async_tp': False}
        rows.append((f'async TP, 2025-06 {name}', 'validated', after / before,
                     _tps({**run, 'async_tp': True}) / _tps(run)))
    return rows


def h200_rows() -> list[tuple[int, float, float, float, float]]:
    """(GPUs, published tokens/s/GPU, batchfit's, published GiB, batchfit's) on H200."""
    base = {**load_runs()[0], 'gpu': 'h200', 'compile': True, 'precision': 'fp8'}
    base.pop('gpu_memory_gib', None)
    base.pop('gpu_hbm_tb_per_s', None)
    out = []
    for gpus, pub, mem in ((32, 10938.0, 47.96), (64, 10753.0, 46.97)):
        p = predict({**base, 'id': f'h200-{gpus}', 'gpus': gpus, 'dp_shard': gpus,
                     'global_batch': 2 * gpus}, 'target')
        out.append((gpus, pub, p['tokens_per_s_per_gpu'], mem, p['memory_gib']))
    return out


def main() -> int:
    print(f'{"speed-up":36s} {"":9s} {"published":>9s} {"batchfit":>9s} {"error":>7s}')
    for what, kind, pub, got in ratio_rows():
        print(f'{what:36s} {kind:9s} {pub:9.3f} {got:9.3f} {got / pub - 1:+7.1%}')
    print('\nLlama-3.1-8B on H200, FSDP, compile + float8 (trainy-whitefiber, 2025-06):')
    for gpus, pub, got, mem, mem_got in h200_rows():
        print(f'  {gpus} GPUs: {pub:,.0f} published, {got:,.0f} batchfit ({got / pub - 1:+.1%});'
              f' memory {mem:.1f} GiB published, {mem_got:.1f} batchfit '
              f'({mem_got / mem - 1:+.1%})')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
