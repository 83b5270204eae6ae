"""Long-context context parallelism: torchtitan's Tables 2 and 6 against batchfit.

Run ``PYTHONPATH=. .venv/bin/python -m benchmarks.long_context_cp`` from the repository
root (no torch needed).

pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 2 (Llama-3.1-8B, 8
H100, FSDP x CP over one node) and Table 6 (Llama-3.1-405B, TP 8 x PP 8 x CP, 512 H100),
both 32,768 tokens per CP rank, full AC, compile and float8. The TOML lists Table 6's CP 1
and CP 8 rows; its CP 2 and CP 4 rows (47 and 31 tokens/s/GPU, local batch 8) are added
here with the same layout. Printed for each row:

* batchfit's throughput with its torchtitan CP (torch's ring: K and V at the model's
  key/value width, as torchtitan 0.2.2 passes ``enable_gqa``), and with the ring's K and V
  at the query width, as the Dec-2024 run exchanged them (torchtitan 9dec370
  torchtitan/models/llama/model.py repeats K and V to every head before SDPA); only the
  CP exchange is widened, not the projections;
* the published and the modelled seconds each extra ring step adds (Table 2);
* FlashAttention-2's published H100 rates combined in the ring's mix of kernels, against
  the rate batchfit charges the attention core.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.published_runs import load_runs, predict
from planner.timing import step_time
from planner.timing.efficiency import gemm_flops, matmul_efficiency

# FlashAttention-2 on H100 80GB SXM5, head dim 128, sequence 16k, bf16 (TFLOP/s): Shah et
# al. 2024, FlashAttention-3 (arXiv:2407.08608), Figure 5 (forward: 335 causal, 370
# non-causal) and Figure 6 (backward: 322), as labelled on the bars.
FA2_FWD_CAUSAL, FA2_FWD, FA2_BWD = 335.0, 370.0, 322.0


class _QueryWidthKV:
    """The model with K and V as wide as Q, for the CP exchange only."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return self._model.q_size if name == 'kv_size' else getattr(self._model, name)


def _tps(run: dict[str, Any], repeated_kv: bool) -> float:
    original = step_time._cp_comm_s

    def wide(model, *args, **kwargs):
        return original(_QueryWidthKV(model), *args, **kwargs)

    step_time._cp_comm_s = wide if repeated_kv else original
    try:
        return predict(run, 'target')['tokens_per_s_per_gpu']
    finally:
        step_time._cp_comm_s = original


def rows() -> list[dict[str, Any]]:
    """Table 2's four rows and Table 6's CP 1, 2, 4, 8."""
    runs = {r['id']: r for r in load_runs()}
    out = [runs[f'titan-t2-fsdp{8 // c}-cp{c}'] for c in (1, 2, 4, 8)]
    t6 = runs['titan-t6-fsdp1-cp8']
    for cp, published in ((1, 76), (2, 47), (4, 31), (8, 16)):
        out.append({**t6, 'id': f'titan-t6-fsdp{8 // cp}-cp{cp}', 'cp': cp,
                    'seq_len': 32768 * cp, 'global_batch': 64 // cp,
                    'published_tokens_per_s_per_gpu': published})
    return out


def fa2_ring_rate(cp: int) -> float:
    """FlashAttention-2's TFLOP/s over a ring pass of ``cp`` steps (one causal step, the
    rest full), run twice forward (full AC) and once backward at 2.5x the forward."""
    fwd = cp / (1 / FA2_FWD_CAUSAL + (cp - 1) / FA2_FWD)
    return 4.5 / (2 / fwd + 2.5 / FA2_BWD)


def main() -> int:
    print(f'{"run":24s} {"published":>9s} {"batchfit":>16s} {"Dec-2024 K/V":>16s}')
    table: dict[str, tuple[float, float, float]] = {}
    for run in rows():
        pub = run['published_tokens_per_s_per_gpu']
        today, dec = _tps(run, False), _tps(run, True)
        table[run['id']] = (pub, today, dec)
        print(f'{run["id"]:24s} {pub:9.1f} {today:8.1f} ({today / pub - 1:+6.1%})'
              f' {dec:8.1f} ({dec / pub - 1:+6.1%})')
    print('\nTable 2, seconds per step (32,768 tokens per GPU) and per extra ring step:')
    prev = None
    for cp in (1, 2, 4, 8):
        pub, today, _ = table[f'titan-t2-fsdp{8 // cp}-cp{cp}']
        step = (32768 / pub, 32768 / today)
        extra = ('' if prev is None else
                 f'  per extra step: published {(step[0] - prev[1][0]) / (cp - prev[0]):.2f} s,'
                 f' batchfit {(step[1] - prev[1][1]) / (cp - prev[0]):.2f} s')
        print(f'  CP {cp}: published {step[0]:6.2f} s, batchfit {step[1]:6.2f} s{extra}')
        prev = (cp, step)
    eta = matmul_efficiency('hopper', gemm_flops(4096, np.array(32768.0), np.array(1)),
                            np.array(1), None, 'torchtitan')
    print(f'\nattention core rate: batchfit {float(eta) * 989:.0f} TFLOP/s (Table 2);'
          ' FlashAttention-2 (FA3 paper, H100 SXM5) in the ring\'s mix: '
          + ', '.join(f'CP {c} {fa2_ring_rate(c):.0f}' for c in (1, 2, 4, 8)))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
