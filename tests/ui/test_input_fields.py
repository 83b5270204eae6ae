"""Every numeric field of the input panel, driven with hostile text: it is refused in
place (red, the reason under it, no plan from it) or accepted and gives a request whose
search shows only finite, non-negative figures. No exception, no clamping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import InputError
from planner.plans.path import build_request
from planner.plans.search import search
from tests.planner.test_hostile_inputs import HOSTILE_TEXT
from ui.plan_inputs import PlanInputs, plan_ask
from ui.widgets.field_check import error_of
from ui.widgets.input_panel import InputPanel

# field attribute -> the flag its errors carry
FIELDS = {
    'seq_len_edit': '--seq-len', 'batch_edit': '--global-batch', 'tokens_edit': '--tokens',
    'nodes_spin': '--nodes', 'gpus_per_node_spin': '--gpus-per-node',
    'margin_spin': '--margin', 'price_edit': '--price', 'b_noise_edit': '--b-noise',
    'samples_edit': '--samples', 'epochs_edit': '--epochs', 'lora_rank_spin': '--lora-rank',
}


@pytest.fixture(scope='module')
def panel(qapp):
    p = InputPanel()
    yield p
    p.deleteLater()


def _prepare(panel: InputPanel, name: str) -> None:
    panel.set_inputs(PlanInputs())  # the defaults
    if name in ('samples_edit', 'epochs_edit'):
        panel.length_kind_combo.setCurrentIndex(panel.length_kind_combo.findData('samples'))
    if name == 'lora_rank_spin':
        panel.tuning_combo.setCurrentIndex(panel.tuning_combo.findData('lora'))


@pytest.mark.timeout(1200)
@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(FIELDS)), text=HOSTILE_TEXT)
def test_each_field_refuses_in_place_or_plans_finite(panel, name, text):
    _prepare(panel, name)
    widget = getattr(panel, name)
    widget.setText(text)
    inputs, errors = panel.read_inputs()
    panel.show_errors(errors)
    if inputs is None:
        flags = set(errors)
        assert flags, 'no inputs and no error'
        widgets = {panel.field_for(f) for f in flags}
        assert widget in widgets or flags & {'--nodes', '--global-batch-tokens'}
        shown = [w for w in widgets if w is not None]
        assert all(error_of(w) and panel.note_of(w) for w in shown)
        return
    try:
        req = build_request(plan_ask(inputs))
    except InputError:
        return  # the core refuses a combination: main_window marks the field it names
    result = search(req)
    for array in (result.step.step_time_s, result.step.mfu, result.train.cost_usd,
                  result.memory.total_bytes) if result.fitting else ():
        values = np.asarray(array, float)
        assert np.isfinite(values).all()
        assert (values >= 0).all()


def test_count_fields_never_clamp(panel):
    _prepare(panel, 'nodes_spin')
    panel.nodes_spin.setText('1e12')
    inputs, errors = panel.read_inputs()
    assert inputs is None
    assert 'too large' in errors['--nodes']
    panel.nodes_spin.setText('')
    inputs, errors = panel.read_inputs()
    assert 'empty' in errors['--nodes']  # not the previous value silently kept
    panel.nodes_spin.setText('4')
    assert panel.read_inputs()[0].nodes == 4


@pytest.mark.parametrize(('text', 'flag'), [('4096.5', '--seq-len'), ('0', '--nodes'),
                                            ('-', '--margin')])
def test_issue_examples_turn_red(panel, text, flag):
    _prepare(panel, 'seq_len_edit')
    widget = panel.field_for(flag)
    widget.setText(text)
    inputs, errors = panel.read_inputs()
    panel.show_errors(errors)
    assert inputs is None
    assert error_of(widget)
    assert panel.note_of(widget)


def _samples(inputs: PlanInputs) -> float:
    """The target batch in sequences, as the core reads it (fractional when tokens do not
    divide into whole sequences)."""
    request = build_request(plan_ask(inputs))
    return request.target_batch_samples


def test_unit_change_keeps_the_batch(panel):
    _prepare(panel, 'batch_edit')
    panel.batch_edit.setText('1024')
    panel.batch_unit_combo.setCurrentIndex(panel.batch_unit_combo.findData('tokens'))
    assert panel.batch_edit.text() == str(1024 * 4096)
    inputs, _ = panel.read_inputs()
    assert _samples(inputs) == 1024
    panel.batch_unit_combo.setCurrentIndex(panel.batch_unit_combo.findData('samples'))
    assert panel.batch_edit.text() == '1024'


def test_typed_unit_picks_the_unit(panel):
    _prepare(panel, 'batch_edit')
    panel.batch_edit.setText('4Mitok')
    inputs, errors = panel.read_inputs()
    assert errors == {}
    assert inputs.batch_unit == 'tokens'
    assert inputs.batch_value == 4 * 2**20
    assert _samples(inputs) == 1024


def test_suffixes_mean_what_the_cli_means(panel):
    from planner.limits import parse

    _prepare(panel, 'tokens_edit')
    for text in ('4k', '4Ki', '2T', '1.5B'):
        panel.tokens_edit.setText(text)
        assert panel.read_inputs()[0].length_tokens == parse('tokens', text)


def test_warnings_do_not_block(panel):
    _prepare(panel, 'seq_len_edit')
    panel.seq_len_edit.setText('262144')  # beyond Llama-3.1-8B's 131,072
    inputs, errors = panel.read_inputs()
    panel.show_errors(errors)
    assert inputs is not None
    assert 'context' in panel.warnings['--seq-len']
    assert 'context' in panel.note_of(panel.seq_len_edit)
    assert not error_of(panel.seq_len_edit)


def test_token_batch_not_whole_offers_round_batches(panel):
    _prepare(panel, 'batch_edit')
    panel.batch_unit_combo.setCurrentIndex(panel.batch_unit_combo.findData('tokens'))
    panel.batch_edit.setText('4M')
    panel.read_inputs()
    assert '1,024 sequences' in panel.batch_info.text()
    assert math.isfinite(_samples(panel.read_inputs()[0]))


def test_outcome_explains_no_plan_in_the_clis_words():
    from planner.plans.no_plan import explain_no_plan
    from ui.plan_compute import compute_main

    o = compute_main(PlanInputs(model='llama-3.1-70b', zero_stages=(0,),
                                recompute_modes=('none',)))
    assert o.explanation is not None
    assert o.explanation.constraint == 'memory'
    assert o.explanation.text == explain_no_plan(o.request, o.result).text


def test_batch_sweep_past_the_batch_range_is_a_gap_not_an_error():
    from ui.plan_compute import compute_plan

    o = compute_plan(PlanInputs(model='gpt2', seq_len=1, batch_value=5 * 10**9))
    assert o.result.fitting
    assert math.isnan(o.by_batch.y[-1])  # x4 = 2e10 sequences: beyond the range


def test_a_chosen_stack_shows_its_own_recompute_words(panel):
    from planner.stacks import STACKS

    combo = panel.framework_combo
    combo.setCurrentIndex(combo.findData('megatron'))
    megatron = STACKS['megatron']
    assert panel.recompute_boxes['selective'].text() == megatron.recompute['selective']
    assert not panel.zero_boxes[3].isEnabled()  # the distributed optimizer is ZeRO-1
    combo.setCurrentIndex(combo.findData('hf'))
    assert not panel.recompute_boxes['selective'].isEnabled()  # whole layers only
    inputs, _ = panel.read_inputs()
    assert 'selective' not in inputs.recompute_modes
    combo.setCurrentIndex(combo.findData(''))
    assert panel.recompute_boxes['selective'].isEnabled()
    assert panel.recompute_boxes['selective'].text() == 'selective'


def test_megatron_switches_only_for_megatron(panel):
    """Megatron's TP comm overlap and bf16 grad reduce boxes are enabled for megatron alone,
    reach the ask and the request, and a stack without them reads them as off."""
    panel.set_inputs(PlanInputs())
    combo, boxes = panel.framework_combo, panel.switch_boxes
    combo.setCurrentIndex(combo.findData('megatron'))
    for name in ('overlap_grad_reduce', 'tp_comm_overlap', 'grad_reduce_in_bf16'):
        assert boxes[name].isEnabled()
        boxes[name].setChecked(True)
    inputs, errors = panel.read_inputs()
    assert not errors
    assert inputs.tp_comm_overlap
    assert inputs.grad_reduce_in_bf16
    ask = plan_ask(inputs)
    assert ask.tp_comm_overlap
    assert ask.grad_reduce_in_bf16
    request = build_request(ask)
    assert request.tp_comm_overlap
    assert request.grad_reduce_in_bf16
    combo.setCurrentIndex(combo.findData('torchtitan'))
    assert not boxes['tp_comm_overlap'].isEnabled()
    inputs, _ = panel.read_inputs()
    assert not inputs.tp_comm_overlap
    assert not inputs.grad_reduce_in_bf16
    panel.set_inputs(PlanInputs())


def test_torchtitan_switches_only_for_torchtitan(panel):
    """The compile and async-TP boxes are enabled for torchtitan alone (async TP only with
    compile), reach the ask, and a stack without them reads them as off."""
    panel.set_inputs(PlanInputs())
    combo, boxes = panel.framework_combo, panel.switch_boxes
    assert not any(box.isEnabled() for box in boxes.values())  # any stack: off
    combo.setCurrentIndex(combo.findData('torchtitan'))
    assert boxes['compile'].isEnabled()
    assert not boxes['async_tp'].isEnabled()  # needs compile first
    boxes['compile'].setChecked(True)
    assert boxes['async_tp'].isEnabled()
    boxes['async_tp'].setChecked(True)
    inputs, errors = panel.read_inputs()
    assert not errors
    assert inputs.compile
    assert inputs.async_tp
    ask = plan_ask(inputs)
    assert ask.compile
    assert ask.async_tp
    combo.setCurrentIndex(combo.findData('megatron'))
    assert not boxes['compile'].isEnabled()
    inputs, _ = panel.read_inputs()
    assert not inputs.compile
    assert not inputs.async_tp
    panel.set_inputs(PlanInputs())
