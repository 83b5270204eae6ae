"""DeepSpeed JSON exports, checked by DeepSpeedConfig at the plan's DP size."""

from __future__ import annotations

import json

import pytest

from planner.errors import InputError
from planner.export import export_plan
from planner.memory.training import LoraSpec
from tests.export_helpers import make_plan

pytest.importorskip('deepspeed')
# DeepSpeed opens a config file given by path without closing it (config.py, hjson.load).
pytestmark = pytest.mark.filterwarnings('ignore::ResourceWarning',
                                        'ignore::pytest.PytestUnraisableExceptionWarning')

from tests.launchers.deepspeed_check import deepspeed_config  # noqa: E402


@pytest.mark.parametrize(('zero', 'precision', 'recompute'), [
    (1, 'bf16-mixed', 'none'), (2, 'amp-fp16', 'selective'), (3, 'amp-bf16', 'full'),
    (0, 'fp32', 'none')])
def test_config_accepted_with_the_plan_numbers(tmp_path, zero, precision, recompute):
    plan = make_plan(nodes=2, micro_batch=2, zero=zero, precision=precision,
                     recompute=recompute, global_batch=256, framework='hf-deepspeed')
    exported = export_plan(plan, 'deepspeed')
    path = tmp_path / exported.filename
    path.write_text(exported.text)
    config = deepspeed_config(str(path), dp=plan.candidate.dp)  # the file path: duplicate keys
    c = plan.candidate
    assert config.train_batch_size == c.global_batch == 256
    assert config.train_micro_batch_size_per_gpu == c.micro_batch
    assert config.gradient_accumulation_steps == c.grad_accum
    assert config.zero_optimization_stage == zero
    assert config.bfloat16_config.enabled == (precision in ('bf16-mixed', 'amp-bf16'))
    assert config.float16_config.enabled == (precision == 'amp-fp16')
    doc = json.loads(exported.text)
    assert doc['scheduler']['params']['warmup_num_steps'] == plan.guidance.warmup_steps
    assert doc['optimizer']['params']['lr'] == pytest.approx(plan.guidance.learning_rate,
                                                             rel=1e-2)


def test_model_parallel_plan_counts_dp_not_world():
    plan = make_plan(nodes=4, tp=2, pp=2, micro_batch=2, zero=1, global_batch=256,
                     framework='deepspeed')
    doc = json.loads(export_plan(plan, 'deepspeed').text)
    deepspeed_config(doc, dp=plan.candidate.dp)  # DP 8: accepted
    with pytest.raises(AssertionError, match='train_batch_size is not equal'):
        deepspeed_config(doc, dp=32)  # the GPU count: wrong (DeepSpeed's world size is DP)


QLORA = LoraSpec(16, ('q', 'k', 'v', 'o', 'gate', 'up', 'down'), 4)  # all linear, 4-bit

@pytest.mark.parametrize('zero', [1, 2, 3])
def test_lora_plan_config_accepted(tmp_path, zero):
    """A LoRA plan is the Hugging Face stack's: the deepspeed format (HF + DeepSpeed's)
    refuses it, and the Trainer runs its ZeRO stage through its inline DeepSpeed config."""
    plan = make_plan(nodes=2, micro_batch=2, zero=zero, global_batch=256, lora=QLORA)
    with pytest.raises(InputError, match='--format deepspeed: the plan was estimated for the '
                       'Hugging Face stack'):
        export_plan(plan, 'deepspeed')
    exported = export_plan(plan, 'hf')
    assert any('LoraConfig(' in note for note in exported.notes)
    inline = exported.text.split("--deepspeed '", 1)[1].split("'", 1)[0]
    config = deepspeed_config(json.loads(inline), dp=plan.candidate.dp)
    assert config.train_batch_size == 256
    assert config.zero_optimization_stage == zero


@pytest.mark.parametrize(('tp', 'pp', 'zero'), [(1, 1, 0), (2, 2, 1), (1, 4, 0)])
def test_deepspeed_stack_plans_are_accepted_as_planned(tmp_path, tp, pp, zero):
    """The pipeline engine's plans (ZeRO <= 1 with PP): the config DeepSpeed accepts, with
    the fp32 gradient accumulation the plan's memory counted."""
    plan = make_plan(nodes=4, tp=tp, pp=pp, micro_batch=1, zero=zero, global_batch=256,
                     framework='deepspeed')
    c = plan.candidate
    assert (c.framework, c.precision) == ('deepspeed', 'ds-bf16')
    exported = export_plan(plan, 'deepspeed')
    path = tmp_path / exported.filename
    path.write_text(exported.text)
    config = deepspeed_config(str(path), dp=c.dp)
    assert config.zero_optimization_stage == zero
    assert config.bfloat16_config.enabled
    assert json.loads(exported.text)['data_types'] == {'grad_accum_dtype': 'fp32'}
    if pp > 1:
        assert any('PipelineModule' in note for note in exported.notes)


@pytest.mark.parametrize('zero', [1, 3])
def test_chunked_loss_plan_config_accepted(tmp_path, zero):
    """The HF + DeepSpeed stack's --loss chunked plan: the same config DeepSpeed accepts, the
    Liger note aside (JSON has no comments)."""
    plan = make_plan(nodes=2, micro_batch=2, zero=zero, global_batch=256,
                     framework='hf-deepspeed', loss='chunked')
    exported = export_plan(plan, 'deepspeed')
    assert any(note.startswith('--loss chunked') for note in exported.notes)
    path = tmp_path / exported.filename
    path.write_text(exported.text)
    config = deepspeed_config(str(path), dp=plan.candidate.dp)
    assert config.train_batch_size == 256
    assert config.zero_optimization_stage == zero
