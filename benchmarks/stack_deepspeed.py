"""DeepSpeed's own model-state estimators side by side with batchfit's model states.

Run ``PYTHONPATH=. .venv/bin/python -m benchmarks.stack_deepspeed [--flags today|target]``
from the repository root (needs deepspeed from the ``launchers`` extra; torch for the
``_all_live`` call on the small model).

DeepSpeed (deepspeedai/DeepSpeed) ships ``estimate_zero2_model_states_mem_needs_all_live``
(deepspeed/runtime/zero/stage_1_and_2.py) and
``estimate_zero3_model_states_mem_needs_all_live`` (deepspeed/runtime/zero/stage3.py).
They print; the numbers they print come from ``estimate_zero2_model_states_mem_needs``
(GPU: ``2 P + 18 P / N`` without offload: bf16/fp16 params, and per its comment
"2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit" sharded over
N GPUs) and ``estimate_zero3_model_states_mem_needs`` (GPU: ``4 L + 18 P / N``, L the
largest layer's parameters). ``_all_live`` is called on the small Llama (its printout
is parsed), the numeric functions on the presets (``P`` from batchfit's model spec, ``L``
from the largest ``nn.Module`` with direct parameters: the embedding or the head).

batchfit's side is the sum of its model-state components (weights, gradients,
optimizer states, ZeRO-3's gathered units and ZeRO buckets) with the flags of
``DEEPSPEED_CASES`` in benchmarks/stack_flags.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re

from benchmarks.stack_compare import relative_error
from benchmarks.stack_flags import DEEPSPEED_CASES, FLAG_SETS, SMALL_LLAMA, DeepSpeedCase
from planner.errors import InputError
from planner.memory.peak import estimate
from planner.memory.training import TrainingSetup
from planner.models.hf_config import spec_from_hf_config
from planner.models.source import resolve_model
from planner.models.spec import ModelSpec

GIB = 2**30
MODEL_STATE_PARTS = ('weights', 'gradients', 'optimizer_states', 'zero3_gathered', 'buffers')


def deepspeed_gpu_bytes(stage: int, total_params: int, largest_layer_params: int,
                        gpus: int) -> int:
    """DeepSpeed's per-GPU model-state estimate without offload (its numeric function)."""
    if stage == 3:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

        _, gpu, _ = estimate_zero3_model_states_mem_needs(
            total_params, largest_layer_params, num_gpus_per_node=gpus, num_nodes=1,
            cpu_offload=False, cpu_offload_params=False, zero_init=True)
        return gpu
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    _, gpu = estimate_zero2_model_states_mem_needs(total_params, num_gpus_per_node=gpus,
                                                   num_nodes=1, cpu_offload=False)
    return gpu


def all_live_printout(stage: int, gpus: int) -> str:
    """What DeepSpeed's ``_all_live`` estimator prints for the small Llama (a real model)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in SMALL_LLAMA.items()
                                            if k != 'model_type'}))
    if stage == 3:
        from deepspeed.runtime.zero.stage3 import (
            estimate_zero3_model_states_mem_needs_all_live as live,
        )
    else:
        from deepspeed.runtime.zero.stage_1_and_2 import (
            estimate_zero2_model_states_mem_needs_all_live as live,
        )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        live(model, num_gpus_per_node=gpus, num_nodes=1)
    return out.getvalue()


def parse_all_live_no_offload_gib(text: str) -> float:
    """Per-GPU GB of the no-offload row of an ``_all_live`` printout (ZeRO-3: zero_init=1).

    The printout rounds to 0.01 GB, so on the small model it only shows that
    ``_all_live`` and the numeric function agree to that precision.
    """
    for line in text.splitlines():
        if line.rstrip().endswith(('offload_optimizer=none',
                                   'offload_optimizer=none, zero_init=1')):
            match = re.search(r'([\d.]+)GB\s*\|\s*([\d.]+)GB', line)
            if match:
                return float(match.group(2))
    raise ValueError(f'no no-offload row in:\n{text}')


def largest_module_params(m: ModelSpec) -> int:
    """Parameters of the largest module with direct parameters (DeepSpeed's ``model_to_params``)."""
    h = m.hidden_size
    linears = [h * m.num_heads * m.head_dim, h * m.ffn_size, h * m.vocab_size]
    return max(linears)


def batchfit_model_states(spec: ModelSpec, case: DeepSpeedCase, flags: str) -> int | str:
    """Sum of batchfit's model-state components, or the core's message."""
    kwargs = case.today if flags == 'today' else case.target
    try:
        est = estimate(spec, TrainingSetup(seq_len=1, micro_batch=1, **kwargs))
    except (InputError, TypeError, ValueError) as exc:
        return str(exc)
    return sum(est.components.get(k, 0) for k in MODEL_STATE_PARTS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--flags', choices=FLAG_SETS, default='today')
    args = parser.parse_args(argv)
    print(f'flags: {args.flags}')
    print(f'{"model":14s} {"ZeRO":>4s} {"GPUs":>4s} {"DeepSpeed GiB":>13s} '
          f'{"batchfit GiB":>12s} {"error":>7s}  batchfit flags')
    for case in DEEPSPEED_CASES:
        spec = (spec_from_hf_config(SMALL_LLAMA, name='small-llama') if case.model == 'small'
                else resolve_model(case.model))
        total = spec.total_params()
        ds = deepspeed_gpu_bytes(case.stage, total, largest_module_params(spec), case.gpus)
        if case.model == 'small':
            live = parse_all_live_no_offload_gib(all_live_printout(case.stage, case.gpus))
            print(f'{"":14s} _all_live printout, no offload: {live:.2f} GB '
                  f'(the numeric function: {ds / 2**30:.2f} GiB)')
        bf = batchfit_model_states(spec, case, args.flags)
        kwargs = case.today if args.flags == 'today' else case.target
        flags = ' '.join(f'--{k.replace("_", "-")} {v}' for k, v in kwargs.items() if k != 'dp')
        if isinstance(bf, str):
            print(f'{case.model:14s} {case.stage:4d} {case.gpus:4d} {ds / GIB:13.3f} '
                  f'{"-":>12s} {"n/a":>7s}  {flags} [{bf}]')
            continue
        print(f'{case.model:14s} {case.stage:4d} {case.gpus:4d} {ds / GIB:13.3f} '
              f'{bf / GIB:12.3f} {relative_error(bf, ds):+7.1%}  {flags}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
