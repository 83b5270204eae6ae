"""Export refusals in the window say what to change on screen, never a CLI flag."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from planner.export import export_plan
from tests.export_helpers import make_plan
from ui.export_hints import refusal_text


@pytest.mark.parametrize(('plan_kwargs', 'fmt', 'hint'), [
    ({'tp': 2, 'framework': 'hf', 'precision': 'amp-bf16'}, 'hf', '1/1/1/'),  # schema 2
    ({'tp': 2}, 'accelerate', 'megatron'),
    ({'zero': 3, 'framework': 'megatron', 'precision': 'bf16-mixed'}, 'megatron',
     'ZeRO stages 2 and 3'),
    ({'precision': 'bf16', 'framework': 'hf-deepspeed'}, 'deepspeed', 'bf16-mixed'),
])
def test_refusals_name_the_window_change(qapp, plan_kwargs, fmt, hint):
    plan = make_plan(nodes=1, **plan_kwargs)
    with pytest.raises(InputError) as caught:
        export_plan(plan, fmt)
    assert '--' in (caught.value.allowed or '')  # the core's text is for the CLI
    text = refusal_text(caught.value)
    assert hint in text
    assert '--' not in text
    assert 're-plan' not in text
    assert text.startswith(f'{fmt}: ')


def test_another_stacks_format_names_the_tabs_and_the_stack(qapp):
    plan = make_plan(nodes=1, zero=1, framework='megatron', precision='bf16-mixed')
    with pytest.raises(InputError) as caught:
        export_plan(plan, 'torchtitan')
    text = refusal_text(caught.value)
    assert text.startswith('torchtitan: the plan was estimated for the Megatron-LM stack')
    assert 'use the megatron or slurm tab' in text
    assert 'choose stack torchtitan under Options' in text
    assert '--' not in text


def test_export_dialog_offers_the_plans_stack_only(qtbot):
    """Other stacks' tabs are disabled, their tooltip saying why; the first tab shown is
    one of the plan's."""
    from planner.export import EXPORTERS
    from planner.stacks import STACKS
    from ui.plan_compute import compute_plan
    from ui.plan_inputs import PlanInputs
    from ui.widgets.export_dialog import ExportDialog

    outcome = compute_plan(PlanInputs(framework='torchtitan'))
    assert outcome.best is not None
    assert outcome.best.framework == 'torchtitan'
    dialog = ExportDialog(outcome, outcome.best)
    qtbot.addWidget(dialog)
    names = [dialog.tabs.tabText(i) for i in range(dialog.tabs.count())]
    assert names == list(EXPORTERS)
    enabled = {n for i, n in enumerate(names) if dialog.tabs.isTabEnabled(i)}
    assert enabled == set(STACKS['torchtitan'].launchers) == set(dialog.texts)
    for i, name in enumerate(names):
        if name not in enabled:
            assert 'torchtitan' in dialog.tabs.tabToolTip(i)
    assert dialog.tabs.tabText(dialog.tabs.currentIndex()) in enabled
    assert '-m torchtitan.train' in dialog.texts['slurm']
