"""An MoE layer's saved activations: the frameworks' own code on the CPU against batchfit.

The numbers behind "MoE activation memory, 2026-11-25" in docs/BENCHMARKS.md. Run
``PYTHONPATH=. .venv/bin/python -m benchmarks.moe_activations`` from the repository root
(torch, megatron-core, torchtitan and transformers on the CPU; about a minute on a 2-core
VM). It prints:

1. megatron-core's ``MoELayer`` (tests/stacks/megatron_moe.py: real gloo ranks, EP 1 and
   2, balanced routing) against ``megatron_moe_block`` at the same switches, and against
   what batchfit counted for the block before (the dense MLP's count with f = k x the
   expert width: l·h + 2e·k·f + l·k·f per token);
2. torchtitan's ``MoE``/``GptOssMoE`` (tests/stacks/titan_moe.py) against
   ``torchtitan_moe_block`` plus its input, and against the count torchtitan shared with
   transformers before (``hf_moe_terms`` at the recipe's weight bytes, the router's input,
   4E + 32k + 4 B per token);
3. batchfit's per-layer bytes (b 1, s 4096) of the three Megatron-Bridge H100 MoE rows'
   models on each stack.

The per-layer checks of transformers' MoE layers are tests/groundtruth/test_hf_moe_layers.py.
"""

from __future__ import annotations

import numpy as np

from planner.memory.recipes import RECIPES


def megatron_rows() -> list[tuple[str, int, float, float]]:
    from planner.memory.activations import megatron_moe_block
    from tests.stacks.megatron_moe import measure
    from tests.stacks.test_moe_activations import (
        _bytes,
        _cases,
        _choices,
        _per_layer_constants,
        _spec,
    )

    cases = _cases()
    rows = []
    r = RECIPES['bf16-mixed']
    for case, got in zip(cases, measure(cases), strict=True):
        measured = got.saved_bytes - _per_layer_constants(case)
        est = _bytes(megatron_moe_block(_spec(case), r, _choices(case)), case)
        f = case.topk * case.expert_ffn + case.shared_ffn
        before = case.tokens * (2 * case.hidden + 2 * 2 * f + 2 * f)
        rows.append((case.name, measured, est, before))
    return rows


def titan_rows() -> list[tuple[str, int, float, float]]:
    from tests.stacks.test_moe_activations import _titan_cases, _titan_estimate, _titan_recipe
    from tests.stacks.titan_moe import measure

    rows = []
    for case in _titan_cases():
        got, _ = measure(case)
        est = _titan_estimate(case)
        r = _titan_recipe(case)
        k, h, c = case.topk, case.hidden, float(r.weight_bytes)
        wide = 7 if case.gpt_oss else 4
        before = case.tokens * (c * 2 * k * h + c * wide * k * case.expert_ffn
                                + 4 * case.experts + 32 * k + 4 + r.act_bytes * h
                                + 4 * r.act_bytes * case.shared * case.expert_ffn)
        rows.append((case.name, got, est, before))
    return rows


def per_layer_rows() -> list[tuple[str, str, str, float]]:
    from planner.memory.stack_activations import stack_layer_terms
    from planner.models.source import resolve_model
    from planner.stacks import STACKS

    out = []
    models = (('gpt-oss-120b', 'bf16-mixed', 1, 1, 8), ('qwen3-30b-a3b', 'fp8', 1, 1, 16),
              ('qwen3-235b-a22b', 'fp8', 2, 1, 32))
    recipe = {'megatron': None, 'hf': 'amp-bf16', 'torchtitan': 'fsdp-bf16'}
    one = np.ones(())
    for stack in ('megatron', 'hf', 'torchtitan'):
        for name, precision, t, etp, ep in models:
            m = resolve_model(name)
            r = RECIPES[recipe[stack] or precision]
            terms = stack_layer_terms(STACKS[stack], m, r, 'flash', 'none')
            per_token = float(terms.bytes(one, 4096 * one, t * one, one, np.asarray(t > 1),
                                          m.hidden_size, m.num_heads, et=etp * one,
                                          ep=ep * one)) / 4096
            out.append((stack, name, f'{r.key}, TP {t}, EP {ep}', per_token))
    return out


def _table(title: str, rows) -> None:
    print(f'\n{title}\n| case | measured B | batchfit B | error | before B | before error |')
    print('|---|---:|---:|---:|---:|---:|')
    for name, got, est, before in rows:
        print(f'| {name} | {got:,.0f} | {est:,.0f} | {(est - got) / got:+.2%} | '
              f'{before:,.0f} | {(before - got) / got:+.1%} |')


def main() -> int:
    _table('1. megatron-core MoELayer (bf16, h 64, E 8, top-2, f 32, 64 tokens unless named)',
           megatron_rows())
    _table('2. torchtitan MoE block (h 64, E 8, top-2, f 32, 64 tokens unless named)',
           titan_rows())
    print('\n3. batchfit per layer, b 1, s 4096 (B per token)\n| stack | model | recipe | '
          'B per token |\n|---|---|---|---:|')
    for stack, name, what, per_token in per_layer_rows():
        print(f'| {stack} | {name} | {what} | {per_token:,.0f} |')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
