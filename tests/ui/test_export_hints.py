"""Export refusals in the window say what to change on screen, never a CLI flag."""

from __future__ import annotations

import pytest

from planner.errors import InputError
from planner.export import export_plan
from tests.export_helpers import make_plan
from ui.export_hints import refusal_text


@pytest.mark.parametrize(('plan_kwargs', 'fmt', 'hint'), [
    ({'tp': 2}, 'hf', '1/1/1/'),
    ({'tp': 2}, 'accelerate', 'megatron'),
    ({'zero': 3, 'framework': 'megatron', 'precision': 'bf16-mixed'}, 'megatron',
     'ZeRO stages 2 and 3'),
    ({'precision': 'bf16'}, 'deepspeed', 'bf16-mixed'),
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
