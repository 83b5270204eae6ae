"""The Python API (planner.plans.path.plan) gives what ``batchfit plan`` gives."""

from __future__ import annotations

import json

import pytest

from planner.errors import InputError
from planner.memory.training import LoraSpec
from planner.plans.guidance import GuidanceInputs
from planner.plans.path import PlanAsk, plan
from tests.cli_helpers import run_cli


def test_the_api_and_the_cli_agree(capsys):
    code, out, err = run_cli(capsys, 'plan', '--model', 'llama-3.2-1b', '--seq-len', '2048',
                             '--gpu', 'h100-sxm', '--global-batch-tokens', '131072',
                             '--tokens', '1e9', '--base-lr', '3e-4', '--base-batch', '65536',
                             '--lora-rank', '8', '--top', '5', '--json')
    assert code == 0, err
    doc = json.loads(out)
    answer = plan(PlanAsk(model='llama-3.2-1b', seq_len=2048, gpu='h100-sxm',
                          global_batch_tokens=131072, tokens=1e9, top_k=5,
                          lora=LoraSpec(rank=8, targets=('q', 'k', 'v', 'o')),
                          guidance=GuidanceInputs(base_lr=3e-4, base_batch_samples=32.0)))
    assert [json.loads(json.dumps(c.to_dict())) for c in answer.result.top()] == [
        {k: v for k, v in row.items() if k not in ('layout', 'cost', 'lr')}
        for row in doc['candidates']]
    assert json.loads(json.dumps(answer.guidance.to_dict())) == doc['guidance']
    assert answer.guidance.learning_rates is not None  # --base-batch in tokens -> sequences


def test_a_reference_lr_needs_its_batch_wherever_it_comes_from(capsys):
    with pytest.raises(InputError, match='--base-lr'):
        GuidanceInputs(base_lr=3e-4)
    code, _, err = run_cli(capsys, 'plan', '--model', 'llama-3.2-1b', '--seq-len', '2048',
                           '--gpu', 'h100-sxm', '--global-batch', '64', '--tokens', '1e9',
                           '--base-lr', '3e-4')
    assert code == 2
    assert 'give --base-lr and --base-batch together' in err
