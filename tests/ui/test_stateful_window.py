"""Random sequences of edits to the window, as a user types them (hypothesis stateful).

Every step types into a field (valid, half-typed or invalid values), switches the GPU,
the model or the batch unit, changes the nodes, or changes the table's ranking and
filters; after each, the window settles and the invariants are checked: no exception
reached Qt's event loop, the memory plot's capacity line is the current GPU's, the
table holds exactly the core's fitting candidates in the core's order, and an empty
result shows the empty state. Bounded for a 2-core CI: a few examples of a few steps.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ui.main_window import MainWindow

GIB = 2**30
SETTLE_S = 30.0
COUNTS = st.sampled_from(['4096', '2048', '1024', '8', '512', '16384'])
HALF_TYPED = st.sampled_from(['', '4', '40', '4k', '4M', '1e', '1e1', '10 ', ' 2'])
INVALID = st.sampled_from(['abc', '-1', '0', '4096.5', '1e12', '-', '١٢', '9' * 30])
TEXT_VALUES = st.one_of(COUNTS, HALF_TYPED, INVALID)
MODELS = st.sampled_from(['llama-3.1-8b', 'llama-3.1-70b', 'llama-3.1-405b', 'gpt2-124m',
                          'qwen2.5-0.5b', 'no-such-model', 'llama-3.1-'])
GPUS = st.sampled_from(['h100-sxm', 'mi300x', 'a100-40g-sxm', 'rtx-4090', 'h200', 'l4'])


class WindowMachine(RuleBasedStateMachine):
    """One window, edited step by step."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[BaseException] = []
        self._hook = sys.excepthook

        def record(kind, value, tb) -> None:
            self.errors.append(value)
            self._hook(kind, value, tb)

        sys.excepthook = record
        self.window = MainWindow(restore=False, poll_hardware=False, debounce_ms=10)
        self.window.resize(1024, 700)
        self.window.show()
        self.settle()

    def teardown(self) -> None:
        self.window._saved_inputs = self.window.inputs.read_inputs()[0]  # no save prompt
        self.window.shutdown(remember=False)
        self.window.close()
        self.window.deleteLater()
        self.settle_events()
        sys.excepthook = self._hook

    # ---- helpers ------------------------------------------------------------------

    @staticmethod
    def settle_events() -> None:
        from PySide6.QtWidgets import QApplication

        for _ in range(5):
            QApplication.processEvents()

    def settle(self) -> None:
        """Until the plan on screen is the one for the inputs on screen (or they are bad)."""
        w = self.window
        end = time.monotonic() + SETTLE_S
        quiet = 0  # polls in a row with nothing in flight (past the 10 ms debounce)
        while time.monotonic() < end and quiet < 4:
            self.settle_events()
            quiet = 0 if w.updating else quiet + 1
            time.sleep(0.02)
        w.finish_updates()
        self.settle_events()

    # ---- rules --------------------------------------------------------------------

    @rule(value=TEXT_VALUES)
    def type_sequence(self, value: str) -> None:
        self.window.inputs.seq_len_edit.setText(value)
        self.settle()

    @rule(value=TEXT_VALUES)
    def type_batch(self, value: str) -> None:
        self.window.inputs.batch_edit.setText(value)
        self.settle()

    @rule(value=st.one_of(st.sampled_from(['1T', '2e10', '15T']), HALF_TYPED, INVALID))
    def type_tokens(self, value: str) -> None:
        self.window.inputs.tokens_edit.setText(value)
        self.settle()

    @rule(model=MODELS)
    def switch_model(self, model: str) -> None:
        self.window.inputs.model_edit.setText(model)
        self.settle()

    @rule(gpu=GPUS)
    def switch_gpu(self, gpu: str) -> None:
        combo = self.window.inputs.gpu_combo
        index = combo.findData(gpu)
        if index >= 0:
            combo.setCurrentIndex(index)
        self.settle()

    @rule(nodes=st.sampled_from([1, 2, 4, 16]))
    def set_nodes(self, nodes: int) -> None:
        self.window.inputs.nodes_spin.setValue(nodes)
        self.settle()

    @rule()
    def switch_batch_unit(self) -> None:
        combo = self.window.inputs.batch_unit_combo
        combo.setCurrentIndex(1 - combo.currentIndex())
        self.settle()

    @rule(key=st.sampled_from(['time', 'cost', 'gpus', 'headroom']),
          pareto=st.booleans(), distinct=st.booleans())
    def table_view(self, key: str, pareto: bool, distinct: bool) -> None:
        results = self.window.results
        results.rank_combo.setCurrentIndex(results.rank_combo.findData(key))
        results.pareto_check.setChecked(pareto)
        results.distinct_check.setChecked(distinct)
        self.settle_events()

    # ---- invariants ---------------------------------------------------------------

    @invariant()
    def no_exception_reached_the_event_loop(self) -> None:
        assert not self.errors, self.errors

    @invariant()
    def plots_describe_the_current_plan(self) -> None:
        w = self.window
        o = w.outcome
        if o is None or w.updating:
            return
        plot = w.memory_plot
        if plot.capacity_line.isVisible():
            assert plot.capacity_gib == pytest.approx(o.request.gpu.memory_bytes / GIB)
            assert f'{o.request.gpu.memory_bytes / GIB:.1f}' in \
                plot.capacity_line.label.toPlainText()
        for series_plot in (w.gpus_plot, w.batch_plot, w.micro_plot):
            x, y = series_plot.data()
            assert np.isfinite(x).all()
            assert np.isfinite(y).all()
            assert (y >= 0).all()

    @invariant()
    def the_table_is_the_cores_result(self) -> None:
        w = self.window
        o = w.outcome
        if o is None or w.updating:
            return
        model = w.results.model
        r = o.result
        assert model.total == r.fitting
        if not r.fitting:
            assert model.rowCount() == 0
            assert w.results.stack.currentWidget() is w.empty_state
            return
        assert w.results.stack.currentWidget() is w.results.table
        if model.rank_key == 'time' and not w.results.pareto_check.isChecked() \
                and not w.results.filter_edit.text() and w.results.headroom_spin.value() == 0:
            header = w.results.table.horizontalHeader()
            if header.sortIndicatorSection() == 0:
                assert model.visible_indices()[0] == r.ranking[0]  # the core's best first
        shown = model.visible_indices()
        assert len(np.unique(shown)) == len(shown) <= r.fitting


@pytest.mark.slow
def test_random_edit_sequences(qapp, monkeypatch):
    monkeypatch.setattr('PySide6.QtWidgets.QMessageBox.question',
                        lambda *a, **k: __import__('PySide6.QtWidgets').QtWidgets.QMessageBox
                        .StandardButton.Discard)
    run = WindowMachine.TestCase
    run.settings = settings(max_examples=8, stateful_step_count=10, deadline=None,
                            suppress_health_check=list(HealthCheck), derandomize=True)
    run().runTest()
