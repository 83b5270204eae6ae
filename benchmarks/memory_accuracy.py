"""Peak-memory accuracy: MemTracker's measurement vs batchfit and llm-analysis.

Run ``.venv/bin/python -m benchmarks.memory_accuracy [--repeat N] [--json OUT]`` from the
repository root (needs torch, from the ``test`` extra; the llm-analysis columns need
``.venv/bin/pip install llm-analysis``, a benchmark-only dependency, and are skipped
with a note when it is not importable).

For every case of ``tests/groundtruth/cases.py`` it prints the measured training peak
(PyTorch's ``MemTracker``, torch/distributed/_tools/mem_tracker.py, under
``FakeTensorMode``: exact live tensor bytes of a real model's two training steps),
batchfit's ``estimate(...).tensor_peak_bytes`` and llm-analysis's estimate of the same
configuration, each with its signed error, and the time one estimate takes (batchfit:
``estimate()`` averaged over ``--repeat`` calls; llm-analysis: constructing ``LLMAnalysis``
and calling ``training()``).

How a case maps onto llm-analysis 0.2.2 (:func:`llm_analysis_run`):

* ``ModelConfig``: the case's layers, heads, KV heads, hidden, ffn (with
  ``expansion_ratio = ffn / hidden``, since it requires ffn to be a multiple of hidden
  otherwise), vocabulary and ``max_seq_len``. It has no notion of biases, learned
  positions, an untied head (it counts one embedding matrix) or a gated MLP's third
  matrix (MLP = 2·h·ffn parameters).
* ``GPUConfig``: a custom 1 PB GPU so no configuration is rejected.
* ``DtypeConfig``: weight / activation / embedding bits of the recipe: fp32 = w32a32e32,
  amp-bf16 = w32a16e32 (fp32 weights, bf16 activations), bf16 = w16a16e16.
  llm-analysis asserts 16-bit GEMMs in its *time* model, so :class:`_AnyBits` maps
  32-bit weights onto the fp16 peak there; the memory numbers do not use it.
* ``training()``: the micro-batch, gradient accumulation, sequence length,
  ``activation_recomputation`` NONE or FULL, ``ds_zero`` NONE, ``flash_attn`` for SDPA
  cases, ``softmax_dropout`` when the model has attention dropout and attention is eager
  (flash kernels keep the mask in-kernel), ``layernorm_dtype_bytes``
  = the residual stream's bytes, ``mlp_gated_linear_units`` for SwiGLU models,
  ``master_weights_dtype_bytes`` = the gradient's bytes and ``other_op_bytes`` = the
  optimizer's state bytes (AdamW 2, SGD-momentum 1 state per parameter, in the recipe's
  state dtype). llm-analysis adds a master copy on top of ``other_op_bytes`` regardless,
  so these plain-PyTorch recipes (no separate master weights) get ``grad_bytes`` extra
  per parameter: that is its model, not a mapping choice. Its attention dropout mask
  (1 B/element) is always counted and cannot be turned off.

The peak field is ``'(weight+op_state+grad+act)_memory_per_gpu'``: in 0.2.2 the only
total in the training summary (``memory_left_per_gpu`` is the capacity minus it). It is
weights + gradients + optimizer state + activations of all layers, the logits and the
final norm's input, added as if all were live at once.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import statistics
import time

from planner.memory.peak import estimate
from planner.memory.recipes import OPTIMIZERS, RECIPES
from planner.memory.training import TrainingSetup
from planner.models.spec import ModelSpec
from tests.groundtruth.cases import CASES, Case, measure

MB = 1e6
PEAK_FIELD = '(weight+op_state+grad+act)_memory_per_gpu'

try:
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
    from llm_analysis.config import DtypeConfig, GPUConfig, ModelConfig, ParallelismConfig
    from llm_analysis.logger import logger as _lla_logger

    _lla_logger.setLevel(logging.ERROR)  # it logs every term at INFO
    LLM_ANALYSIS_VERSION = importlib.metadata.version('llm-analysis')
except ImportError:  # pragma: no cover - depends on the environment
    LLMAnalysis = None
    LLM_ANALYSIS_VERSION = None
SKIP_NOTE = ('llm-analysis is not installed (`.venv/bin/pip install llm-analysis`): '
             'its columns are left out.')

if LLMAnalysis is not None:
    class _AnyBits(LLMAnalysis):
        """llm-analysis whose time model accepts 32-bit weights (at the fp16 peak)."""

        def get_TFLOPS_per_gpu(self) -> float:  # noqa: N802 (overrides its name)
            if max(self.dtype_config.weight_bits, self.dtype_config.activation_bits) > 16:
                return self.gpu_config.peak_fp16_TFLOPS * self.flops_efficiency
            return super().get_TFLOPS_per_gpu()


def big_gpu(name: str = 'no-limit', peak_tflops: float = 989.0) -> GPUConfig:
    """A GPU with 1 PB of memory (nothing is rejected); H100-SXM speeds."""
    return GPUConfig(name=name, mem_per_GPU_in_GB=1e6, hbm_bandwidth_in_GB_per_sec=3350,
                     intra_node_bandwidth_in_GB_per_sec=450,
                     intra_node_min_message_latency=8e-6, peak_fp16_TFLOPS=peak_tflops)


def llm_analysis_model(model: ModelSpec, max_seq_len: int | None = None) -> ModelConfig:
    """The model's shape in llm-analysis's terms (head_dim is hidden / heads there)."""
    return ModelConfig(name=model.name, num_layers=model.num_layers, n_head=model.num_heads,
                       hidden_dim=model.hidden_size, vocab_size=model.vocab_size,
                       max_seq_len=max_seq_len or model.max_position_embeddings,
                       num_key_value_heads=model.num_kv_heads, ffn_embed_dim=model.ffn_size,
                       expansion_ratio=model.ffn_size / model.hidden_size)


def llm_analysis_dtype(precision: str) -> DtypeConfig:
    """Weight, activation and embedding bits of a batchfit recipe."""
    r = RECIPES[precision]
    w, a = 8 * r.weight_bytes, 8 * r.act_bytes
    return DtypeConfig(name=f'w{w}a{a}e{w}', weight_bits=w, activation_bits=a, embedding_bits=w)


def llm_analysis_run(model: ModelSpec, setup: TrainingSetup, gpu: GPUConfig | None = None,
                     max_seq_len: int | None = None, flops_efficiency: float | None = None,
                     model_config: ModelConfig | None = None) -> dict:
    """llm-analysis's training summary for one batchfit configuration."""
    r, opt = RECIPES[setup.precision], OPTIMIZERS[setup.optimizer]
    analysis = _AnyBits(
        model_config or llm_analysis_model(model, max_seq_len), gpu or big_gpu(),
        llm_analysis_dtype(setup.precision),
        ParallelismConfig(tp_size=setup.tp, pp_size=setup.pp, dp_size=setup.dp,
                          sp_size=setup.tp if setup.sequence_parallel else 1),
        flops_efficiency=flops_efficiency)
    recompute = {'none': ActivationRecomputation.NONE, 'full': ActivationRecomputation.FULL,
                 'selective': ActivationRecomputation.SELECTIVE}[setup.recompute]
    return analysis.training(
        batch_size_per_gpu=setup.micro_batch, gradient_accumulation_steps=setup.grad_accum,
        seq_len=setup.seq_len, activation_recomputation=recompute,
        ds_zero=DSZeRO(setup.zero), layernorm_dtype_bytes=r.residual_bytes,
        master_weights_dtype_bytes=r.grad_bytes,
        other_op_bytes=opt.states * (opt.state_bytes_override or r.state_bytes),
        flash_attn=setup.attention == 'flash',
        softmax_dropout=model.attention_dropout > 0 and setup.attention == 'eager',
        mlp_gated_linear_units=model.gated_mlp)


def time_call(fn, repeat: int) -> float:
    """Seconds per call: the median of 5 rounds of ``repeat`` calls each."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeat):
            fn()
        rounds.append((time.perf_counter() - started) / repeat)
    return statistics.median(rounds)


def evaluate(case: Case, repeat: int) -> dict:
    """One row: measurement, both estimates, errors and times."""
    m = measure(case)
    est = estimate(case.model, case.setup)
    row = {'case': case.id, 'measured_bytes': m.peak_bytes, 'measured_phase': m.peak_phase,
           'memtracker_s': m.seconds, 'batchfit_bytes': est.tensor_peak_bytes,
           'batchfit_phase': est.peak_phase,
           'batchfit_error': est.tensor_peak_bytes / m.peak_bytes - 1,
           'batchfit_s': time_call(lambda: estimate(case.model, case.setup), repeat)}
    # llm-analysis has no LoRA/QLoRA memory model: those rows compare batchfit alone.
    if LLMAnalysis is not None and case.setup.lora is None:
        summary = llm_analysis_run(case.model, case.setup)
        peak = summary[PEAK_FIELD]
        row.update({
            'llm_analysis_bytes': peak, 'llm_analysis_error': peak / m.peak_bytes - 1,
            'llm_analysis_parts': {k: summary[k] for k in (
                'weight_memory_per_gpu', 'gradient_memory_per_gpu',
                'optimizer_state_memory_per_gpu', 'activation_memory_per_gpu')},
            'llm_analysis_s': time_call(lambda: llm_analysis_run(case.model, case.setup),
                                        max(1, repeat // 10))})
    return row


def summary_line(rows: list[dict], key: str, name: str) -> str:
    errors = [abs(r[key]) for r in rows if key in r]
    return (f'{name}: mean |err| {statistics.mean(errors):.2%}, max |err| {max(errors):.2%} '
            f'({len(errors)} cases)')


def main() -> int:
    """Print the markdown table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=200, help='estimate() calls per round')
    parser.add_argument('--json', metavar='OUT', help='also write the rows as JSON')
    args = parser.parse_args()
    rows = [evaluate(case, args.repeat) for case in CASES]
    lla = LLMAnalysis is not None
    head = '| case | measured MB | phase | batchfit MB | err | '
    head += 'llm-analysis MB | err | batchfit µs | llm-analysis µs |' if lla else 'batchfit µs |'
    print(head)
    print('|---|---:|---|---:|---:|' + ('---:|---:|---:|---:|' if lla else '---:|'))
    for r in rows:
        line = (f"| {r['case']} | {r['measured_bytes'] / MB:.2f} | {r['measured_phase']} | "
                f"{r['batchfit_bytes'] / MB:.2f} | {r['batchfit_error']:+.2%} | ")
        if lla and 'llm_analysis_bytes' in r:
            line += (f"{r['llm_analysis_bytes'] / MB:.2f} | {r['llm_analysis_error']:+.2%} | "
                     f"{r['batchfit_s'] * 1e6:.0f} | {r['llm_analysis_s'] * 1e6:.0f} |")
        elif lla:  # LoRA: no llm-analysis counterpart
            line += f"n/a | | {r['batchfit_s'] * 1e6:.0f} | |"
        else:
            line += f"{r['batchfit_s'] * 1e6:.0f} |"
        print(line)
    print(f'\nMB = 10^6 B. {len(rows)} cases. '
          + summary_line(rows, 'batchfit_error', 'batchfit'), end='')
    print('; ' + summary_line(rows, 'llm_analysis_error', f'llm-analysis {LLM_ANALYSIS_VERSION}')
          if lla else f'.\n{SKIP_NOTE}')
    mt = statistics.mean(r['memtracker_s'] for r in rows)
    print(f'\nMemTracker measurement: {mt:.2f} s per case on average.')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'llm_analysis_version': LLM_ANALYSIS_VERSION, 'rows': rows}, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
