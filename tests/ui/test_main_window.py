"""Drive the planner window as a user would."""

from __future__ import annotations

import csv
import io
import logging

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from ui.main_window import MainWindow
from ui.plan_compute import memory_estimate_for
from ui.plan_inputs import PlanInputs
from ui.widgets.field_check import error_of

GIB = 2**30


def _wait_for_plan(qtbot, w: MainWindow, check=None, timeout: int = 20_000):
    """Wait on the main-thread controller signal until the outcome satisfies ``check``."""
    def ok(outcome) -> bool:
        return check is None or check(outcome)

    latest = w.shown_outcome
    if latest is not None and check is not None and ok(latest):
        return latest  # already shown (the signal fired before we started waiting)
    with qtbot.waitSignal(w.plan_shown, timeout=timeout, check_params_cb=ok) as sig:
        pass
    return sig.args[0]


def test_opens_on_the_worked_example(qtbot, window):
    o = window.outcome
    assert o.inputs == PlanInputs()
    assert o.request.model.name == 'Llama-3.1-8B'
    assert o.request.global_batch == 1024
    assert o.result.target_batch_samples * o.request.seq_len == 4_194_304
    assert o.request.gpu.key == 'h100-sxm'
    assert o.request.max_nodes * o.request.gpus_per_node == 8
    assert window.results.model.rowCount() > 0
    assert window.results.selected_candidate() is not None
    assert 'B parameters' in window.inputs.model_info.text()
    assert not window.isWindowModified()
    # the global-batch sweep follows the table, for the same request
    qtbot.waitUntil(lambda: window.outcome.by_batch.x.size == 5, timeout=20_000)
    xs, _ = window.batch_plot.data()
    assert 4_194_304 in xs.tolist()


def test_the_first_plan_on_screen_is_logged_once(qtbot, caplog):
    """benchmarks/bench_gui.py times a start of the real app to this line."""
    caplog.set_level(logging.INFO, logger='ui.main_window')
    w = MainWindow(restore=False, poll_hardware=False, debounce_ms=10)
    qtbot.addWidget(w)
    w.show()
    _wait_for_plan(qtbot, w)
    w.inputs.batch_edit.setText('2048')
    _wait_for_plan(qtbot, w, lambda o: o.inputs.batch_value == 2048)
    qtbot.waitUntil(lambda: not w.updating, timeout=20_000)
    lines = [r.getMessage() for r in caplog.records if r.name == 'ui.main_window']
    assert len([line for line in lines if line.startswith('first plan on screen')]) == 1
    w._saved_inputs = w.inputs.read_inputs()[0]
    w.shutdown()


def test_user_plans_a_preset_on_a_catalog_gpu(qtbot, window):
    panel = window.inputs
    panel.model_edit.clear()
    qtbot.keyClicks(panel.model_edit, 'qwen2.5-7b')
    assert 'Qwen2.5-7B' in panel.model_info.text()  # the parameter count shows at once
    panel.batch_edit.clear()
    qtbot.keyClicks(panel.batch_edit, '512')
    panel.gpu_combo.setCurrentIndex(panel.gpu_combo.findData('a100-80g-sxm'))
    panel.nodes_spin.setValue(2)
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.model == 'qwen2.5-7b'
                       and o.inputs.batch_value == 512 and o.inputs.gpu == 'a100-80g-sxm'
                       and o.inputs.nodes == 2)
    assert o.result.status == 'ok'
    assert window.isWindowModified()

    # sort by memory, pick the second row: the detail panel and the plots follow
    table = window.results.table
    table.sortByColumn(7, Qt.SortOrder.AscendingOrder)
    window.results.select_row(1)
    qtbot.waitUntil(lambda: not window.updating, timeout=5_000)  # details, then plots
    c = window.results.selected_candidate()
    assert c is not None
    assert c.global_batch == 512
    mems = [window.results.model.index(r, 7).data(Qt.ItemDataRole.UserRole)
            for r in range(window.results.model.rowCount())]
    assert mems == sorted(mems)

    est = memory_estimate_for(o, c)
    assert est.total_bytes == c.memory.total_bytes
    plot = window.memory_plot
    for key, value in est.components.items():
        assert plot.heights_gib[f'components.{key}'] == pytest.approx(value / GIB)
    for key, value in est.overhead.items():
        assert plot.heights_gib[f'overhead.{key}'] == pytest.approx(value / GIB)
    assert plot.total_gib() == pytest.approx(est.total_bytes / GIB)
    assert plot.capacity_line.value() == pytest.approx(o.request.gpu.memory_bytes / GIB)
    assert plot.usable_line.value() == pytest.approx(est.usable_bytes / GIB)
    bar = plot.bars['components.weights']
    assert bar.opts['height'][0] == pytest.approx(est.components['weights'] / GIB)

    d = window.details.values
    assert d['mem.total'] == f'{est.total_bytes / GIB:,.2f} GiB'
    assert d['layout'] == c.layout
    assert d['batch'].endswith(f'= {c.global_batch}')
    assert 'g.critical' in d
    # the selected plan is highlighted in the scaling plot
    xs, _ = window.gpus_plot.data()
    assert c.gpus in xs
    hx, _ = window.gpus_plot.series.highlight.getData()
    assert list(hx) == [c.gpus]
    # throughput against the micro-batch, MFU on the right axis: both the candidate's own
    mx, my = window.micro_plot.data()
    here = list(mx).index(c.micro_batch)
    assert my[here] == pytest.approx(c.tokens_per_s)
    assert window.micro_plot.mfu_percent()[here] == pytest.approx(100 * c.mfu)
    # every micro-batch of the layout is drawn; one that does not fit says what it needs
    assert list(mx) == sorted(mx)
    assert window.micro_plot.fits()[here]
    assert 'does not fit' not in window.micro_plot.readout_at(c.micro_batch)


def test_micro_batches_that_do_not_fit_are_drawn_apart(qtbot, window):
    """The worked example's best plan runs micro-batch 1; 2 and more need more memory than
    an H100 has, drawn hollow on a dashed line with the memory they would need."""
    c = window.results.selected_candidate()
    window.finish_updates()
    plot = window.micro_plot
    mx, _ = plot.data()
    fits = plot.fits()
    assert c.micro_batch == 1
    assert fits.tolist() == [True] + [False] * (len(mx) - 1)
    assert len(mx) > 2
    hollow_x, _ = plot.too_big_points.getData()  # log10 of the micro-batch (a log axis)
    assert np.allclose(10 ** hollow_x, mx[~fits])
    drawn_x, _ = plot.series.curve.getData()
    assert np.allclose(10 ** drawn_x, mx[fits])
    assert plot.legend.isVisibleTo(plot.getPlotItem().getViewBox())
    text = plot.readout_at(float(mx[1]))
    usable = c.memory.usable_bytes / GIB
    assert 'does not fit' in text
    assert f'of {usable:,.1f} GiB usable' in text


def test_exports(qtbot, window, tmp_path):
    for key in window.plots:
        png, svg = tmp_path / f'{key}.png', tmp_path / f'{key}.svg'
        window.export_plot(key, str(png))
        window.export_plot(key, str(svg))
        assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
        text = svg.read_text()
        assert '<svg' in text
        assert '</svg>' in text
    assert 'capacity' in (tmp_path / 'memory.svg').read_text()

    path = tmp_path / 'plans.csv'
    window.export_table(str(path))
    rows = list(csv.reader(io.StringIO(path.read_text())))
    assert rows[0][:4] == ['#', 'GPUs', 'nodes', 'TP/PP/CP/DP']
    assert len(rows) - 1 == window.results.model.rowCount()
    best = window.outcome.best
    assert float(rows[1][7]) == pytest.approx(best.memory.total_bytes / GIB)


def test_filters(qtbot, window):
    model = window.results.model
    total = model.rowCount()
    window.results.pareto_check.setChecked(True)
    assert 0 < model.rowCount() <= total
    assert all(model.candidate(r).on_pareto for r in range(model.rowCount()))
    window.results.pareto_check.setChecked(False)
    mode = model.candidate(model.rowCount() - 1).recompute  # one the table holds
    window.results.filter_edit.setText(mode)
    assert model.rowCount()
    assert all(model.candidate(r).recompute == mode for r in range(model.rowCount()))
    window.results.filter_edit.clear()
    window.results.headroom_spin.setValue(20.0)
    assert all(model.candidate(r).memory.headroom_bytes >= 20 * GIB
               for r in range(model.rowCount()))
    assert model.hidden.filtered == total - model.rowCount()


def test_bad_values_turn_fields_red(qtbot, window):
    panel = window.inputs
    panel.seq_len_edit.setText('abc')
    assert 'not a number' in error_of(panel.seq_len_edit)
    assert 'not a number' in panel.seq_len_edit.toolTip()
    assert 'not a number' in panel.note_of(panel.seq_len_edit)  # next to the field
    assert panel.error_label.text() == ''  # not at the bottom, in CLI words
    panel.seq_len_edit.setText('4096')
    assert error_of(panel.seq_len_edit) == ''
    assert panel.note_of(panel.seq_len_edit) == ''

    panel.model_edit.setText('no-such-model-xyz')
    assert 'unknown model' in error_of(panel.model_edit)
    panel.model_edit.setText('llama-3.1-8b')
    assert error_of(panel.model_edit) == ''

    for box in panel.zero_boxes.values():
        box.setChecked(False)
    assert error_of(panel.zero_row)
    for box in panel.zero_boxes.values():
        box.setChecked(True)

    panel.price_edit.setText('-3')
    assert 'too small' in error_of(panel.price_edit)
    panel.price_edit.setText('')
    assert error_of(panel.price_edit) == ''


def test_core_input_error_marks_its_field(qtbot, window):
    # the core (not the parser) rejects a base LR given without its batch
    window.inputs.base_lr_edit.setText('3e-4')
    assert error_of(window.inputs.base_batch_edit)
    window.inputs.base_batch_edit.setText('256')
    assert not error_of(window.inputs.base_batch_edit)
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.base_lr == 3e-4)
    assert window.details.values['g.lr']
    # an InputError raised in the worker comes back on the GUI thread and marks the field

    with qtbot.waitSignal(window.controller.input_error, timeout=10_000):
        window.controller.compute_now(o.inputs.with_changes(gpu='no-such-gpu'))
    assert error_of(window.inputs.gpu_combo)


def test_a_loss_the_stack_cannot_run_is_greyed_and_refused_on_its_field(qtbot, window):
    """As with the stacks' switches: the loss combo offers only what the chosen stack's
    launchers switch on, and a loss kept from another stack is refused by the core,
    which marks the loss field with what the stack allows."""
    panel = window.inputs
    items = panel.loss_combo.model()

    def enabled(key):
        return items.item(panel.loss_combo.findData(key)).isEnabled()

    panel.loss_combo.setCurrentIndex(panel.loss_combo.findData('chunked'))
    assert all(enabled(k) for k in ('', 'hf', 'chunked', 'vocab-parallel'))  # any stack
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.loss == 'chunked')
    assert {m.stack for m in o.request.plan_modes()} == {'hf', 'hf-deepspeed'}
    with qtbot.waitSignal(window.controller.input_error, timeout=10_000):
        panel.framework_combo.setCurrentIndex(panel.framework_combo.findData('megatron'))
    assert [enabled(k) for k in ('', 'hf', 'chunked', 'vocab-parallel')] == [
        True, False, False, True]
    assert 'megatron stack does not run the chunked loss' in error_of(panel.loss_combo)
    panel.loss_combo.setCurrentIndex(panel.loss_combo.findData('vocab-parallel'))
    _wait_for_plan(qtbot, window, lambda o: o.inputs.loss == 'vocab-parallel')
    assert error_of(panel.loss_combo) == ''


def _saved(path):
    from planner.planfile.document import read_plan

    return read_plan(path)


def test_save_and_reopen_a_plan_file(qtbot, window, tmp_path, monkeypatch):
    window.inputs.batch_edit.setText('2048')
    assert window.isWindowModified()
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.batch_value == 2048)
    window.results.select_row(2)  # not the best row: the file keeps the user's choice
    chosen = window.results.selected_candidate()
    path = tmp_path / 'plan.json'
    assert window.save_to(str(path))
    assert not window.isWindowModified()
    plan = _saved(path)  # the CLI's own plan file: `batchfit export` and `show` read it
    assert plan.targets.global_batch == 2048
    assert plan.model.ref == o.inputs.model
    assert (plan.candidate.layout, plan.candidate.micro_batch, plan.candidate.zero) == (
        chosen.layout, chosen.micro_batch, chosen.zero)
    assert plan.candidate.micro_batch * plan.candidate.grad_accum * plan.candidate.dp == 2048

    window.new_session()
    assert window.inputs.read_inputs()[0] == PlanInputs()
    assert window.open_path(str(path))
    assert window.inputs.read_inputs()[0].batch_value == 2048
    assert window.recent_menu.actions()[0].text() == str(path)
    _wait_for_plan(qtbot, window, lambda o: o.inputs.batch_value == 2048)
    again = window.results.selected_candidate()  # the file's row is selected again
    assert (again.layout, again.micro_batch, again.zero) == (chosen.layout, chosen.micro_batch,
                                                             chosen.zero)
    assert not window.isWindowModified()

    # unsaved changes are never dropped silently
    window.inputs.batch_edit.setText('4096')
    asked = []
    monkeypatch.setattr(QMessageBox, 'question',
                        lambda *a, **k: asked.append(a) or QMessageBox.StandardButton.Cancel)
    window.new_session()
    assert asked
    assert window.inputs.read_inputs()[0].batch_value == 4096
    assert not window.close()
    monkeypatch.setattr(QMessageBox, 'question',
                        lambda *a, **k: QMessageBox.StandardButton.Save)
    assert window.close()  # saving searches for the new inputs first when needed
    assert _saved(path).targets.global_batch == 4096


def test_qlora_fine_tuning_plans_data_parallel_adapters(qtbot, window, tmp_path):
    panel = window.inputs
    assert not panel.lora_rank_spin.isEnabled()  # full training: no adapter settings
    panel.tuning_combo.setCurrentIndex(panel.tuning_combo.findData('qlora'))
    assert panel.lora_targets_combo.isEnabled()
    panel.lora_rank_spin.setValue(64)
    panel.lora_targets_combo.setCurrentIndex(panel.lora_targets_combo.findData('all'))
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.tuning == 'qlora'
                       and o.inputs.lora_rank == 64 and o.inputs.lora_targets == 'all')
    assert (o.request.lora.base_bits, o.request.lora.rank) == (4, 64)
    assert o.candidates
    assert all(c.tp == c.pp == c.cp == 1 for c in o.candidates)
    c = window.results.selected_candidate()
    est = memory_estimate_for(o, c)  # the table's memory is the LoRA estimate
    assert est.total_bytes == c.memory.total_bytes
    panel.tuning_combo.setCurrentIndex(panel.tuning_combo.findData('full'))
    full = _wait_for_plan(qtbot, window, lambda o: o.inputs.tuning == 'full')
    assert full.request.lora is None
    from planner.memory.model_states import lora_params

    adapters = lora_params(o.request.model, o.request.lora)
    assert adapters < 0.03 * o.request.model.total_params()
    # AdamW keeps two fp32 states for the adapters only (not for the frozen base)
    assert c.memory.components['optimizer_states'] <= 8 * adapters
    assert full.result.best.memory.components['optimizer_states'] > 8 * adapters

    path = tmp_path / 'qlora.json'
    panel.tuning_combo.setCurrentIndex(panel.tuning_combo.findData('qlora'))
    _wait_for_plan(qtbot, window, lambda o: o.inputs.tuning == 'qlora')
    assert window.save_to(str(path))
    from planner.planfile.document import read_plan

    assert read_plan(path).constraints.lora == {'rank': 64, 'targets': [
        'q', 'k', 'v', 'o', 'gate', 'up', 'down'], 'base_bits': 4}
    window.new_session()
    assert window.open_path(str(path))
    inputs = window.inputs.read_inputs()[0]
    assert (inputs.tuning, inputs.lora_rank, inputs.lora_targets) == ('qlora', 64, 'all')


def test_a_cli_plan_file_opens(qtbot, window, tmp_path, capsys):
    from tests.cli_helpers import run_cli

    path = tmp_path / 'cli.json'
    code, _out, err = run_cli(capsys, 'plan', '--model', 'qwen2.5-0.5b', '--seq-len', '2048',
                              '--gpu', 'a100-80g-sxm', '--nodes', '2', '--global-batch', '256',
                              '--tokens', '10B', '--framework', 'megatron', '--attention',
                              'eager', '--save', str(path))
    assert code == 0, err
    assert window.open_path(str(path))
    inputs = window.inputs.read_inputs()[0]
    assert (inputs.model, inputs.seq_len, inputs.gpu, inputs.nodes, inputs.batch_value) == (
        'qwen2.5-0.5b', 2048, 'a100-80g-sxm', 2, 256)
    assert inputs.length_tokens == 10e9
    assert inputs.framework == 'megatron'  # the window offers the stack: taken from the file
    assert 'attention' in window.status.text()  # what the window plans differently is said


def test_a_plan_file_with_megatron_switches_opens_with_them(qtbot, window, tmp_path, capsys):
    """The switches come back from a plan file, and the detail panel's memory of the chosen
    candidate is the one the search counted (bf16 main grads included)."""
    from tests.cli_helpers import run_cli

    path = tmp_path / 'switches.json'
    code, _out, err = run_cli(capsys, 'plan', '--model', 'qwen2.5-0.5b', '--seq-len', '2048',
                              '--gpu', 'h100-sxm', '--nodes', '2', '--global-batch', '256',
                              '--tokens', '10B', '--framework', 'megatron', '--tp', '2',
                              '--tp-comm-overlap', '--grad-reduce-in-bf16', '--save', str(path))
    assert code == 0, err
    assert window.open_path(str(path))
    inputs = window.inputs.read_inputs()[0]
    assert inputs.tp_comm_overlap
    assert inputs.grad_reduce_in_bf16
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.grad_reduce_in_bf16)
    c = o.result.best
    assert c is not None
    assert memory_estimate_for(o, c).total_bytes == c.memory.total_bytes


def test_save_with_nothing_fitting_says_so(qtbot, window, tmp_path, monkeypatch):
    window.inputs.model_edit.setText('405B')
    window.inputs.nodes_spin.setValue(1)
    _wait_for_plan(qtbot, window, lambda o: o.inputs.model == '405B')
    warned = []
    monkeypatch.setattr(QMessageBox, 'warning', lambda *a, **k: warned.append(a[2]))
    assert not window.save_to(str(tmp_path / 'none.json'))
    assert 'no layout fits' in warned[0]
    assert not (tmp_path / 'none.json').exists()


def test_last_session_and_window_state_restored(qtbot):
    w = MainWindow(restore=True, poll_hardware=False, debounce_ms=10)
    qtbot.addWidget(w)
    w.inputs.seq_len_edit.setText('8192')
    w._saved_inputs = w.inputs.read_inputs()[0]
    w.detail_dock.hide()
    w.shutdown()
    w2 = MainWindow(restore=True, poll_hardware=False, debounce_ms=10)
    qtbot.addWidget(w2)
    assert w2.inputs.read_inputs()[0].seq_len == 8192
    assert w2.detail_dock.isHidden()  # dock layout restored (restoreState)
    qtbot.waitUntil(lambda: w2.outcome is not None and w2.outcome.inputs.seq_len == 8192,
                    timeout=20_000)
    w2.shutdown()


@pytest.mark.parametrize(('text', 'words'), [
    ('{"schema": "batchfit.session/1", "inputs": {}}', 'schema'),
    ('{"schema": "batchfit.plan/1", "model": ', 'not valid JSON'),
    ('\x00\x01binary', 'plan'),
])
def test_bad_plan_file_is_refused(qtbot, window, tmp_path, monkeypatch, text, words):
    path = tmp_path / 'broken.json'
    path.write_text(text)
    before = path.read_bytes()
    warned = []
    monkeypatch.setattr(QMessageBox, 'warning', lambda *a, **k: warned.append(a[2]))
    assert not window.open_path(str(path))
    assert words in warned[0]
    assert window.inputs.read_inputs()[0] == PlanInputs()
    assert path.read_bytes() == before  # loading never writes


def test_dropped_config_json_becomes_the_model(qtbot, window):
    from pathlib import Path

    config = Path(__file__).parents[1] / 'planner' / 'data' / 'hf_configs' / 'qwen2.5-0.5b.json'
    window.drop_file(str(config))
    assert window.inputs.model_edit.text() == str(config)
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.model == str(config))
    assert o.request.model.num_layers == 24


def test_help_page_renders_the_docs(window):
    text = window.how_it_works_text()
    assert 'How batchfit estimates' in text


def test_local_gpus_offered_first(qtbot, fake_gpus):
    w = MainWindow(restore=False, poll_hardware=True, debounce_ms=10)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.hardware.latest is not None, timeout=10_000)
    panel = w.gpu_panel
    assert sum(b.isVisibleTo(panel) for b in panel.bars) == 8
    assert 'H100' in panel.names[0].text()
    assert w.inputs.gpu_combo.itemText(0).startswith('This machine: 8')
    qtbot.waitUntil(lambda: w.inputs.read_inputs()[0].gpus_per_node == 8, timeout=5_000)
    o = _wait_for_plan(qtbot, w, lambda o: o.inputs.gpu == 'h100-sxm')
    assert o.request.gpus_per_node == 8
    w._saved_inputs = w.inputs.read_inputs()[0]
    w.shutdown()
    assert not w.hardware.running


def test_no_gpu_says_why_and_offers_the_catalog(qtbot):
    w = MainWindow(restore=False, poll_hardware=True, debounce_ms=10)
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.hardware.latest is not None, timeout=10_000)
    assert w.hardware.latest.status == 'no_driver'
    assert 'No NVIDIA GPU' in w.gpu_panel.status_label.text()
    assert w.gpu_panel.catalog_button.isVisibleTo(w.gpu_panel)
    w.shutdown()


def test_export_to_launchers(qtbot, window):
    window.results.select_row(1)
    c = window.results.selected_candidate()
    dialog = window.show_export_dialog()
    qtbot.addWidget(dialog)
    assert dialog.tabs.count() >= 2
    assert set(dialog.texts) <= set(dialog.formats)  # the plan's stack's launchers only
    assert 'slurm' in dialog.texts
    assert 'torchrun' in dialog.texts['slurm']
    assert f'{c.global_batch}' in dialog.texts['slurm']
    for name, message in dialog.errors.items():  # a refused format says why
        assert name in message
        assert 're-plan' not in message  # no CLI flag the window lacks
    dialog.close()


def test_a_new_plan_repaints_each_plot_once(qtbot, window):
    """pyqtgraph repainted an updated plot two to four times (axes shrinking during the
    paint, the view moved inside it); each plot now changes once and paints once."""
    from PySide6.QtCore import QEvent, QObject

    paints: dict[str, int] = dict.fromkeys(window.plots, 0)

    class CountPaints(QObject):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

        def eventFilter(self, _obj, event) -> bool:  # noqa: N802
            if event.type() == QEvent.Type.Paint:
                paints[self.key] += 1
            return False

    counters = [CountPaints(key) for key in window.plots]
    for counter, plot in zip(counters, window.plots.values(), strict=True):
        plot.viewport().installEventFilter(counter)
    for value in ('1280', '1536'):  # the first edit lets every axis reach its width
        paints.update(dict.fromkeys(paints, 0))
        window.inputs.batch_edit.setText(value)
        _wait_for_plan(qtbot, window, lambda o, v=int(value): o.inputs.batch_value == v)
        qtbot.waitUntil(lambda: not window.updating, timeout=20_000)  # the sweep too
        qtbot.wait(50)  # anything posted after the last step
    assert paints['memory'] == paints['time_vs_gpus'] == paints['micro_batch'] == 1, paints
    assert paints['time_vs_batch'] <= 2, paints  # the new plan, then its sweep's curve


def test_the_detail_panel_updates_its_rows_in_place(qtbot, window):
    o = window.outcome
    details = window.details
    by_shape: dict = {}
    for c in o.candidates[:40]:  # two layouts whose rows (parts, time terms) are the same
        details.show_candidate(o.request, c, None)
        by_shape.setdefault(details._shape, {}).setdefault(c.layout, c)
    first, same = next(list(v.values())[:2] for v in by_shape.values() if len(v) > 1)
    details.show_candidate(o.request, first, None)
    items = [details.topLevelItem(i) for i in range(details.topLevelItemCount())]
    rows = [items[0].child(j) for j in range(items[0].childCount())]
    # another candidate with the same rows reuses every item
    details.show_candidate(o.request, same, None)
    assert [details.topLevelItem(i) for i in range(details.topLevelItemCount())] == items
    assert [items[0].child(j) for j in range(items[0].childCount())] == rows
    assert details.values['layout'] == same.layout
    assert rows[[r.text(0) for r in rows].index('TP / PP / CP / DP')].text(1) == same.layout
    # a section more (the guidance) rebuilds the tree
    details.show_candidate(o.request, same, window._guidance)
    assert details.topLevelItemCount() > len(items)
    assert details.values['g.batch']


@pytest.mark.parametrize(('model', 'batch'),
                         [('llama-3.1-70b', '1024'), ('llama-3.1-405b', '2048')])
def test_nothing_fits_clears_the_plots_without_an_error(qtbot, window, model, batch):
    """70B or 405B on one 8-GPU node: no plan at any global batch.

    The batch sweep is then all NaN; its plot once indexed the empty series with the
    previous update's mask and raised IndexError in a slot (pytest-qt fails the test on
    an exception raised in a slot).
    """
    panel = window.inputs
    panel.model_edit.setText(model)
    panel.batch_edit.setText(batch)
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.model == model
                       and str(o.inputs.batch_value) == batch)
    qtbot.waitUntil(lambda: not window.updating, timeout=20_000)
    assert o.result.fitting == 0
    assert window.results.selected_candidate() is None
    assert window.memory_plot.total_gib() == 0.0
    # the designed empty state: this GPU's lines, the smallest peak, why, what would fit
    assert window.memory_plot.capacity_line.isVisible()
    assert window.memory_plot.capacity_gib == pytest.approx(o.request.gpu.memory_bytes / GIB)
    assert window.memory_plot.floor_bar.isVisible()
    assert window.results.stack.currentWidget() is window.empty_state
    assert 'fits in' in window.empty_state.reason.text()
    xs, ys = window.batch_plot.data()
    assert xs.size == ys.size
    assert np.isfinite(ys).all()


def test_the_empty_state_offers_a_change_that_fits(qtbot, window):
    # the Hugging Face stack (data parallel only) does not fit 14B on 4 GPUs
    combo = window.inputs.framework_combo
    combo.setCurrentIndex(combo.findData('hf'))
    window.inputs.model_edit.setText('qwen2.5-14b')
    window.inputs.gpus_per_node_spin.setValue(4)
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.model == 'qwen2.5-14b'
                       and o.inputs.gpus_per_node == 4)
    qtbot.waitUntil(lambda: not window.updating, timeout=20_000)
    assert not o.result.fitting
    labels = [b.text() for b in window.empty_state.buttons]
    assert any('nodes' in label for label in labels), labels
    nodes = next(b for b in window.empty_state.buttons if 'nodes' in b.text())
    nodes.click()
    o = _wait_for_plan(qtbot, window, lambda o: o.inputs.nodes > 1)
    qtbot.waitUntil(lambda: not window.updating, timeout=20_000)
    assert o.result.fitting > 0
    assert window.results.stack.currentWidget() is window.results.table
    assert window.memory_plot.capacity_gib == pytest.approx(o.request.gpu.memory_bytes / GIB)


def test_the_memory_plot_follows_the_gpu(qtbot, window):
    """The capacity line is the current GPU's, with or without a plan."""
    combo = window.inputs.gpu_combo
    for key in ('mi300x', 'a100-40g-sxm', 'h100-sxm'):
        combo.setCurrentIndex(combo.findData(key))
        o = _wait_for_plan(qtbot, window, lambda o, k=key: o.inputs.gpu == k)
        qtbot.waitUntil(lambda: not window.updating, timeout=20_000)
        assert window.memory_plot.capacity_gib == pytest.approx(
            o.request.gpu.memory_bytes / GIB)
        label = window.memory_plot.capacity_line.label.toPlainText()
        assert f'{o.request.gpu.memory_bytes / GIB:.1f}' in label
