"""The command line and the app give the same plan for the same inputs (one core path).

The app is driven through its window (the plan controller's worker, the table's best row,
the guidance the detail panel shows); the CLI through ``batchfit plan --json``. Both must
agree on the candidates, the guidance (warnings and notes included), the search's status
and the calibration profile they applied, with and without a profile and with LoRA.
"""

from __future__ import annotations

import json

import pytest

from planner.calibrate.profile import profile_dir
from planner.models.presets import find_preset
from tests.cli_helpers import run_cli
from tests.planner.calibration_helpers import profile_doc, write_profile
from ui.plan_inputs import PlanInputs

TOP = 10
CLI = ['plan', '--model', 'llama-3.2-1b', '--seq-len', '2048', '--gpu', 'h100-sxm',
       '--nodes', '1', '--gpus-per-node', '8', '--global-batch', '64', '--tokens', '1e9',
       '--base-lr', '3e-4', '--base-batch', '32', '--top', str(TOP), '--json']
APP = PlanInputs(model='llama-3.2-1b', seq_len=2048, gpu='h100-sxm', nodes=1, gpus_per_node=8,
                 batch_value=64, batch_unit='samples', length_kind='tokens', length_tokens=1e9,
                 base_lr=3e-4, base_batch_samples=32.0)
LORA_CLI = ['--lora-rank', '16', '--lora-targets', 'q,k,v,o']
LORA_APP = {'tuning': 'lora', 'lora_rank': 16, 'lora_targets': 'attention'}


def _plain(value):
    """What JSON keeps of a value (the CLI's document went through it)."""
    return json.loads(json.dumps(value))


def _cli(capsys, *extra: str) -> dict:
    code, out, err = run_cli(capsys, *CLI, *extra)
    assert code == 0, err
    return json.loads(out)


def _app(qtbot, inputs: PlanInputs):
    from ui.main_window import MainWindow

    w = MainWindow(restore=False, poll_hardware=False, debounce_ms=10)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.outcome is not None and not w.updating, timeout=30_000)
    w.controller.compute_now(inputs)
    qtbot.waitUntil(lambda: w.outcome is not None and w.outcome.inputs == inputs
                    and not w.updating and w._guidance is not None, timeout=30_000)
    outcome, guidance = w.outcome, w._guidance
    selected = w.results.selected_candidate()
    status = w.status.text()
    w._saved_inputs = w.inputs.read_inputs()[0]  # no save prompt
    w.shutdown()
    return outcome, guidance, selected, status


@pytest.mark.parametrize('profile', [False, True], ids=['no-profile', 'h100-profile'])
@pytest.mark.parametrize('lora', [False, True], ids=['full', 'lora'])
def test_cli_and_app_agree(qtbot, capsys, profile, lora):
    if profile:  # measured on the planned model in the planned recipe: every part applies
        write_profile(profile_dir(), profile_doc(model=find_preset('llama-3.2-1b')), 'h100.json')
    doc = _cli(capsys, *(LORA_CLI if lora else ()))
    inputs = APP.with_changes(**(LORA_APP if lora else {}))
    outcome, guidance, selected, status = _app(qtbot, inputs)

    assert (outcome.result.status, outcome.result.message) == (doc['status'], doc['message'])
    assert outcome.result.fitting == doc['search']['fitting']
    cli_rows = [{k: v for k, v in row.items() if k not in ('layout', 'cost', 'lr')}
                for row in doc['candidates']]
    app_rows = [_plain(c.to_dict()) for c in outcome.candidates[:TOP]]
    assert len(cli_rows) == TOP
    assert app_rows == cli_rows
    assert selected is not None
    assert selected.rank == 1
    assert _plain(guidance.to_dict()) == doc['guidance']
    assert list(guidance.warnings) == doc['guidance']['warnings']  # in to_dict too; said twice
    if lora:
        assert any('LoRA' in note for note in guidance.notes)
    if profile:
        assert doc['calibration'] is not None
        assert 'efficiency' in doc['calibration']['applied']
        assert _plain(outcome.calibration.summary()) == doc['calibration']
        assert outcome.request.calibration is not None
        assert 'h100.json' in status  # the window names the profile its plan used
    else:
        assert 'calibrated' not in status
        assert doc['calibration'] is None
        assert outcome.calibration is None
