"""Fingerprint the planner's figures, to show that a refactor changed none of them.

Run it once per tree and compare::

    git archive <before> | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/output_fingerprint.py /tmp/before.txt
    PYTHONPATH=$PWD .venv/bin/python benchmarks/output_fingerprint.py /tmp/after.txt
    diff /tmp/before.txt /tmp/after.txt && echo identical

Each line is a case and a hash of its bytes (numpy arrays: dtype, shape and raw bytes, so
a change in the last bit shows):

* ``cli``: ``batchfit plan`` / ``estimate --json`` on presets covering every stack,
  LoRA/QLoRA, MoE, pipelines with interleaving, recompute and sort keys (the search's
  ``elapsed_s`` dropped), with the exit status;
* ``mem`` / ``time``: ``estimate_arrays`` and ``step_time_arrays`` over a grid of 5,184
  layouts (micro-batch, accumulation, TP, PP, VPP, CP, ZeRO, recompute, offload) per
  model x stack x recipe x optimizer x attention x loss x loop x LoRA;
* ``act`` / ``casts`` / ``scores``: the LoRA layer terms per model x recipe x LoRA x
  attention x recompute x input-grad.

About 30 s on the 2-core VM. An exception is a line too (its type and message).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from planner.cli.main import main as cli_main
from planner.hardware.catalog import find_gpu, find_interconnect
from planner.memory import activations
from planner.memory.peak import ConfigArrays, MemoryOptions, estimate_arrays
from planner.memory.recipes import RECIPES
from planner.memory.training import LoraSpec
from planner.models.source import resolve_model
from planner.stacks import STACKS
from planner.timing.step_time import LayoutArrays, step_time_arrays

PLAN = ('plan', '--json')
ESTIMATE = ('estimate', '--json')
H100_NODES = ('--gpu', 'h100-sxm', '--gpus-per-node', '8')
CLI_CASES: tuple[tuple[str, ...], ...] = (
    (*PLAN, '--model', 'llama-2-7b', '--seq-len', '4096', '--gpu', 'h100-sxm', '--nodes', '2',
     '--global-batch', '512', '--tokens', '100B', '--top', '20'),
    (*PLAN, '--model', 'llama-3-70b', '--seq-len', '4096', '--gpu', 'h100-sxm', '--nodes', '8',
     '--global-batch', '1024', '--tokens', '1T', '--top', '20', '--framework', 'megatron'),
    (*PLAN, '--model', 'llama-3-70b', '--seq-len', '8192', '--gpu', 'h100-sxm', '--nodes', '4',
     '--global-batch', '512', '--tokens', '1T', '--top', '20', '--framework', 'torchtitan'),
    (*PLAN, '--model', 'llama-2-7b', '--seq-len', '2048', '--gpu', 'a100-80g-sxm',
     '--global-batch', '64', '--tokens', '1B', '--top', '20', '--framework', 'hf'),
    (*PLAN, '--model', 'llama-2-7b', '--seq-len', '2048', '--gpu', 'a100-80g-sxm',
     '--global-batch', '64', '--tokens', '1B', '--top', '20', '--framework', 'hf-deepspeed'),
    (*PLAN, '--model', 'llama-2-13b', '--seq-len', '4096', '--gpu', 'h100-sxm', '--nodes', '2',
     '--global-batch', '256', '--tokens', '10B', '--top', '20', '--framework', 'deepspeed'),
    (*PLAN, '--model', 'llama-2-7b', '--seq-len', '2048', '--gpu', 'a10g', '--global-batch', '32',
     '--tokens', '100M', '--top', '20', '--lora-rank', '16'),
    (*PLAN, '--model', 'llama-3-8b', '--seq-len', '4096', '--gpu', 'rtx-3090',
     '--global-batch', '16', '--tokens', '100M', '--top', '20', '--lora-rank', '64', '--qlora'),
    (*PLAN, '--model', 'llama-3-8b', '--seq-len', '4096', '--gpu', 'a100-80g-sxm',
     '--global-batch', '16', '--tokens', '100M', '--top', '20', '--lora-rank', '8',
     '--lora-targets', 'q,k,v,o,gate,up,down', '--framework', 'hf', '--attention', 'eager',
     '--loop', 'trainer'),
    (*PLAN, '--model', 'mixtral-8x7b', '--seq-len', '4096', '--gpu', 'h100-sxm', '--nodes', '4',
     '--global-batch', '512', '--tokens', '100B', '--top', '20', '--framework', 'megatron'),
    (*PLAN, '--model', 'qwen3-30b-a3b', '--seq-len', '4096', '--gpu', 'h100-sxm', '--nodes', '2',
     '--global-batch', '256', '--tokens', '100B', '--top', '20'),
    (*PLAN, '--model', 'llama-3-70b', '--seq-len', '4096', '--gpu', 'h100-sxm', '--nodes', '8',
     '--global-batch', '1024', '--tokens', '1T', '--pp', '4', '--tp', '8',
     '--framework', 'megatron', '--recompute', 'full'),
    (*PLAN, '--model', 'llama-3-70b', '--seq-len', '4096', '--gpu', 'a100-80g-sxm',
     '--nodes', '8', '--global-batch', '512', '--tokens', '1T', '--pp', '8', '--vpp', '2',
     '--framework', 'megatron', '--recompute', 'selective'),
    (*PLAN, '--model', 'llama-2-7b', '--seq-len', '4096', '--gpu', 'h100-sxm', '--nodes', '2',
     '--global-batch', '512', '--tokens', '100B', '--sort', 'cost', '--zero', '0,3',
     '--recompute', 'none,full'),
    (*PLAN, '--model', 'llama-2-7b', '--seq-len', '4096', '--gpu', 'h100-sxm', '--nodes', '4',
     '--global-batch', '512', '--tokens', '100B', '--top', '30', '--sort', 'gpus'),
    (*PLAN, '--model', 'llama-2-7b', '--seq-len', '4096', '--gpu', 'h100-sxm', '--nodes', '4',
     '--global-batch', '512', '--tokens', '100B', '--top', '30', '--sort', 'headroom'),
    (*PLAN, '--model', 'llama-3-8b', '--seq-len', '4096', '--gpu', 'a100-80g-sxm', '--nodes', '2',
     '--global-batch', '256', '--tokens', '10B'),
    (*ESTIMATE, '--model', 'llama-2-7b', '--seq-len', '4096', '--micro-batch', '2',
     '--grad-accum', '8', *H100_NODES, '--zero', '3'),
    (*ESTIMATE, '--model', 'llama-3-70b', '--seq-len', '4096', '--micro-batch', '1',
     *H100_NODES, '--nodes', '8', '--tp', '8', '--pp', '4', '--vpp', '2',
     '--recompute', 'selective', '--framework', 'megatron'),
    (*ESTIMATE, '--model', 'mixtral-8x7b', '--seq-len', '4096', '--micro-batch', '1',
     *H100_NODES, '--nodes', '4', '--tp', '2', '--ep', '8', '--pp', '2',
     '--framework', 'megatron'),
    (*ESTIMATE, '--model', 'llama-3-8b', '--seq-len', '4096', '--micro-batch', '4',
     '--gpu', 'a10g', '--lora-rank', '16', '--qlora'),
    (*ESTIMATE, '--model', 'llama-3-8b', '--seq-len', '2048', '--micro-batch', '2',
     '--gpu', 'a100-80g-sxm', '--lora-rank', '16', '--attention', 'eager', '--framework', 'hf'),
    (*ESTIMATE, '--model', 'llama-2-7b', '--seq-len', '2048', '--micro-batch', '2',
     '--gpu', 'a100-80g-sxm', '--lora-rank', '16', '--lora-targets', 'q,k,v,o,gate,up,down',
     '--loop', 'trainer', '--loss', 'chunked'),
    (*ESTIMATE, '--model', 'llama-3-8b', '--seq-len', '8192', '--micro-batch', '1',
     *H100_NODES, '--nodes', '2', '--cp', '2', '--tp', '2', '--framework', 'torchtitan',
     '--zero', '3', '--recompute', 'full'),
    (*ESTIMATE, '--model', 'llama-2-13b', '--seq-len', '4096', '--micro-batch', '1',
     *H100_NODES, '--nodes', '2', '--zero', '1', '--framework', 'deepspeed'),
    (*ESTIMATE, '--model', 'llama-2-7b', '--seq-len', '4096', '--micro-batch', '2',
     '--gpu', 'a100-80g-sxm', '--zero', '2', '--framework', 'hf-deepspeed'),
    (*ESTIMATE, '--model', 'qwen3-30b-a3b', '--seq-len', '4096', '--micro-batch', '1',
     *H100_NODES, '--nodes', '2', '--lora-rank', '16', '--framework', 'hf'),
    # a refused input: the message and the exit status
    (*PLAN, '--model', 'llama-3-8b', '--seq-len', '4096', '--gpu', 'a100-80g-sxm',
     '--global-batch', '256', '--tokens', '10B', '--zero', '5'),
)
MODELS = ('gpt2-124m', 'llama-2-7b', 'llama-3-70b', 'mixtral-8x7b', 'qwen3-30b-a3b',
          'qwen2.5-7b', 'gemma-2-9b')
LORAS: tuple[LoraSpec | None, ...] = (
    None, LoraSpec(16), LoraSpec(8, ('q', 'k', 'v', 'o', 'gate', 'up', 'down'), 4),
    LoraSpec(64, ('q', 'v'), 8), LoraSpec(4, ('down', 'up'), 32))
SEQ_LEN = 2048


def digest(value: Any) -> str:
    """A short hash of ``value``'s bytes: dicts by sorted key, dataclasses field by field,
    sequences item by item, anything else as a numpy array (dtype, shape, raw bytes)."""
    h = hashlib.sha256()

    def feed(o: Any) -> None:
        if isinstance(o, dict):
            for k in sorted(o):
                h.update(str(k).encode())
                feed(o[k])
        elif isinstance(o, (list, tuple)):
            for x in o:
                feed(x)
        elif hasattr(o, '__dataclass_fields__'):
            for k in o.__dataclass_fields__:
                h.update(k.encode())
                feed(getattr(o, k))
        elif isinstance(o, str):
            h.update(o.encode())
        else:
            a = np.ascontiguousarray(np.asarray(o))
            h.update(f'{a.dtype}{a.shape}'.encode())
            h.update(a.tobytes())

    feed(value)
    return h.hexdigest()[:16]


def _without_elapsed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_elapsed(v) for k, v in value.items() if k != 'elapsed_s'}
    if isinstance(value, list):
        return [_without_elapsed(v) for v in value]
    return value


def cli_line(argv: tuple[str, ...]) -> str:
    """One CLI run: its exit status and the hash of its output (JSON without timings)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main(list(argv))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    try:
        text = json.dumps(_without_elapsed(json.loads(out.getvalue())), sort_keys=True)
    except json.JSONDecodeError:
        text = out.getvalue()
    return f'cli {" ".join(argv)} rc={rc} {digest(text + err.getvalue())}'


def _line(tag: str, compute: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """``tag`` and the hash of ``compute(*args, **kwargs)``, or the exception it raised."""
    try:
        return f'{tag} {digest(compute(*args, **kwargs))}'
    except Exception as exc:  # noqa: BLE001 - a refusal is part of the behaviour
        return f'{tag} ERR {type(exc).__name__} {exc}'


def _grid() -> dict[str, np.ndarray]:
    axes = {'micro_batch': [1, 4], 'grad_accum': [1, 8], 'tp': [1, 2, 8], 'pp': [1, 4],
            'vpp': [1, 2], 'cp': [1, 2], 'zero': [0, 1, 2, 3], 'recompute': [0, 1, 2],
            'offload': [0, 1, 2]}
    mesh = np.meshgrid(*(np.asarray(v) for v in axes.values()), indexing='ij')
    return {k: m.ravel() for k, m in zip(axes, mesh, strict=True)}


def array_lines() -> list[str]:
    """The estimator, the step time and the LoRA layer terms over their grids."""
    g = _grid()
    n = g['tp'].size
    gpu, ib = find_gpu('h100-sxm'), find_interconnect('ib-ndr')
    dp = np.full(n, 2)
    gpus = g['tp'] * g['pp'] * g['cp'] * dp
    lines = []
    for key in MODELS:
        model = resolve_model(key)
        ep = np.where(g['tp'] == 1, 2, 1) if model.moe else np.ones(n, int)
        cfg = ConfigArrays(seq_len=np.full(n, SEQ_LEN), micro_batch=g['micro_batch'],
                           grad_accum=g['grad_accum'], tp=g['tp'], pp=g['pp'], vpp=g['vpp'],
                           cp=g['cp'], ep=ep, dp=dp, zero=g['zero'], offload=g['offload'],
                           recompute=g['recompute'], sequence_parallel=g['tp'] > 1)
        lay = LayoutArrays(nodes=np.maximum(gpus // 8, 1), gpus_per_node=np.minimum(gpus, 8),
                           tp=g['tp'], pp=g['pp'], vpp=g['vpp'], cp=g['cp'], dp=dp,
                           micro_batch=g['micro_batch'], grad_accum=g['grad_accum'],
                           zero=g['zero'], recompute=g['recompute'],
                           sequence_parallel=g['tp'] > 1, ep=ep)
        for fw, prec, opt, att, loss, loop, lora in itertools.product(
                STACKS, ('amp-bf16', 'bf16-mixed', 'fsdp-bf16', 'fp32', 'fp8'),
                ('adamw', 'adamw-8bit', 'adafactor'), ('flash', 'eager'),
                ('hf', 'chunked', 'vocab-parallel'), ('keep-outputs', 'trainer'), LORAS):
            # every default, and each non-default choice alone
            if (opt != 'adamw') + (loss != 'hf') + (loop != 'trainer') + (att != 'flash') > 1:
                continue
            tag = f'{key}/{fw}/{prec}/{opt}/{att}/{loss}/{loop}/{lora}'
            opts = MemoryOptions(precision=prec, optimizer=opt, attention=att, framework=fw,
                                 loss=loss, lora=lora, loop=loop)
            lines.append(_line(f'mem {tag}', estimate_arrays, model, opts, cfg))
            if opt == 'adamw' and loss == 'hf' and loop == 'trainer':
                lines.append(_line(f'time {tag}', step_time_arrays, model, SEQ_LEN, gpu, ib,
                                   lay, precision=prec, optimizer=opt, attention=att,
                                   framework=fw, lora=lora))
        for spec in LORAS[1:]:
            assert spec is not None
            for prec, r in RECIPES.items():
                for att in ('flash', 'eager'):
                    for mode, grad in itertools.product(('none', 'selective', 'full'),
                                                        (True, False)):
                        tag = f'{key}/{prec}/{spec}/{att}/{mode}/{grad}'
                        lines.append(_line(f'act {tag}', activations.hf_lora_layer_terms,
                                           model, r, spec, att, mode, grad))
                        lines.append(_line(f'casts {tag}', activations.lora_saved_base_casts,
                                           model, r, spec, att, grad))
                    lines.append(_line(f'scores {key}/{prec}/{spec}/{att}',
                                       activations.lora_scores_moment, model, r, spec))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out', help='file to write, one case per line')
    args = parser.parse_args(argv)
    lines = [cli_line(case) for case in CLI_CASES] + array_lines()
    with open(args.out, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')
    errors = sum(' ERR ' in line for line in lines)
    print(f'{len(lines)} cases ({errors} raised) -> {args.out}', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
