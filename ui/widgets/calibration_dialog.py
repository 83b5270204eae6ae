"""Measure this machine: a calibration run in a child process, with progress and cancel.

The child is ``python -m planner.calibrate`` (the interpreter can be another one, with
torch: the user's training environment); before it starts, the interpreter is checked
for what the child imports, and a missing module is named with the command that installs
it. On the CPU a quick check (a few tokens, fp32) runs first and says how long a full
calibration would take. A finished run shows its numbers (measured against predicted
step time and memory, :mod:`ui.calibration_numbers`); its profile is saved where
``batchfit plan --profile auto`` and the window's plans (``PlanInputs.profile``) find it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ui.controllers.calibration_controller import CalibrationController
from ui.core_terms import core_text
from ui.i18n import QT_TRANSLATE_NOOP, translate

PYTHON_SETTING = 'calibration/python'  # the "Python with torch" last used, in QSettings
GIB = 2**30
QUICK, FULL_CPU = 'cpu-quick', 'cpu'
# The child's outcome codes (planner.calibrate.protocol.ERROR_KINDS), in words.
STATUS_WORDS = {
    'ok': QT_TRANSLATE_NOOP('CalibrationDialog', 'Done'),
    'cancelled': QT_TRANSLATE_NOOP('CalibrationDialog', 'Cancelled'),
    'torch_missing': QT_TRANSLATE_NOOP('CalibrationDialog', 'torch or numpy is missing'),
    'no_cuda': QT_TRANSLATE_NOOP('CalibrationDialog', 'no usable CUDA device'),
    'oom': QT_TRANSLATE_NOOP('CalibrationDialog', 'out of memory'),
    'does_not_fit': QT_TRANSLATE_NOOP('CalibrationDialog', 'the model does not fit'),
    'bad_input': QT_TRANSLATE_NOOP('CalibrationDialog', 'an input was refused'),
    'timeout': QT_TRANSLATE_NOOP('CalibrationDialog', 'timed out'),
    'crash': QT_TRANSLATE_NOOP('CalibrationDialog', 'the calibration failed'),
}

if TYPE_CHECKING:
    from planner.calibrate.records import MeasuredProfile


def status_words(status: str) -> str:
    """An outcome code in words (never the code itself)."""
    return translate('CalibrationDialog', STATUS_WORDS.get(status, STATUS_WORDS['crash']))


def minutes_text(seconds: float) -> str:
    """'about 40 s' / 'about 12 min' / 'about 3.5 h'."""
    if seconds < 90:
        return translate('CalibrationDialog', 'about {n:.0f} s').format(n=max(seconds, 1))
    if seconds < 5400:
        return translate('CalibrationDialog', 'about {n:.0f} min').format(n=seconds / 60)
    return translate('CalibrationDialog', 'about {n:.1f} h').format(n=seconds / 3600)


class CalibrationDialog(QDialog):
    """Check, start, follow and cancel one calibration; show and apply what it measured.

    Signals:
        profile_saved(str): a calibration saved a profile (the window re-plans with it).
    """

    profile_saved = Signal(str)

    def __init__(self, model_text: str, seq_len: int, gpu_uuids: tuple[str, ...] = (),
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(translate('CalibrationDialog', 'Calibrate on this machine'))
        self.resize(640, 460)
        self.model_text, self.seq_len = model_text, seq_len
        self.controller = CalibrationController(self)
        # the last quick check (for the full run's estimate)
        self._quick_profile: MeasuredProfile | None = None
        self._running_kind = ''
        layout = QVBoxLayout(self)
        intro = QLabel(translate(
            'CalibrationDialog', 'Times matmuls and a proxy training step of {m} (sequence {s}) '
            'in a separate process with torch, then saves a profile that plans use instead of '
            'the default efficiency curve.').format(m=model_text, s=seq_len))
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.device_combo = QComboBox()
        for uuid in gpu_uuids:
            self.device_combo.addItem(translate('CalibrationDialog', 'GPU {u}').format(u=uuid),
                                      f'cuda:{uuid}')
        self.device_combo.addItem(translate(
            'CalibrationDialog', 'CPU: quick check (a few tokens, under a minute on 2 cores)'),
            QUICK)
        self.device_combo.addItem(translate(
            'CalibrationDialog', 'CPU: full calibration (not a GPU profile)'), FULL_CPU)
        self.device_combo.currentIndexChanged.connect(self._update_estimate)
        form.addRow(translate('CalibrationDialog', 'device'), self.device_combo)
        self.python_edit = QLineEdit()
        self.python_edit.setPlaceholderText(translate('CalibrationDialog', 'this interpreter'))
        self.python_edit.setToolTip(translate(
            'CalibrationDialog', 'A Python with torch installed (your training environment); '
            'blank: the one running batchfit.'))
        from planner.calibrate.interpreter import is_frozen
        from ui.settings import settings

        if is_frozen():  # no Python of its own: one on PATH with torch, if any
            self.python_edit.setPlaceholderText(translate(
                'CalibrationDialog', 'python3 or python on PATH, if it has torch'))
        self.python_edit.setText(str(settings().value(PYTHON_SETTING, '') or ''))
        form.addRow(translate('CalibrationDialog', 'Python with torch'), self.python_edit)
        layout.addLayout(form)
        self.estimate_label = QLabel()
        self.estimate_label.setObjectName('calibration_estimate')
        self.estimate_label.setWordWrap(True)
        layout.addWidget(self.estimate_label)
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1000)
        layout.addWidget(self.progress_bar)
        self.status_label = QLabel(translate('CalibrationDialog', 'Not started.'))
        self.status_label.setObjectName('calibration_status')
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status_label)
        self.numbers = QTableWidget(0, 5)
        self.numbers.setObjectName('calibration_numbers')
        self.numbers.setHorizontalHeaderLabels([
            translate('CalibrationDialog', 'quantity'),
            translate('CalibrationDialog', 'micro-batch × sequence'),
            translate('CalibrationDialog', 'measured'),
            translate('CalibrationDialog', 'batchfit predicts'),
            translate('CalibrationDialog', 'difference')])
        self.numbers.verticalHeader().setVisible(False)
        self.numbers.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.numbers.horizontalHeader().setStretchLastSection(True)
        self.numbers.setVisible(False)
        layout.addWidget(self.numbers, 1)
        row = QHBoxLayout()
        row.addStretch(1)
        self.start_button = QPushButton(translate('CalibrationDialog', 'Start'))
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton(translate('CalibrationDialog', 'Cancel run'))
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.controller.cancel)
        close = QPushButton(translate('CalibrationDialog', 'Close'))
        close.clicked.connect(self.close)
        for b in (self.start_button, self.cancel_button, close):
            row.addWidget(b)
        layout.addLayout(row)
        self.controller.progress.connect(self._progress)
        self.controller.finished.connect(self._finished)
        # (status, message, saved profile) of the last run; not QDialog.result()
        self.last_result: tuple[str, str, object] | None = None
        self.step_rows: list = []
        self.memory_rows: list = []
        self._update_estimate()

    # ---- what to run ------------------------------------------------------------------

    def kind(self) -> str:
        """``cuda``, ``cpu-quick`` or ``cpu``."""
        return str(self.device_combo.currentData() or QUICK).split(':', 1)[0]

    def options(self, python: str | None = None, **extra):
        """The ``CalibrationOptions`` the dialog's fields describe (``python`` overrides
        the field)."""
        from planner.calibrate.runner import CalibrationOptions
        from planner.models.source import resolve_model
        from ui import calibration_numbers as quick

        kind = self.kind()
        uuid = str(self.device_combo.currentData()).split(':', 1)[1] if kind == 'cuda' else ''
        model = resolve_model(self.model_text)
        fields: dict[str, Any] = {}
        if kind == QUICK:
            fields = {'seq_len': min(self.seq_len, quick.QUICK_SEQ_LEN),
                      'micro_batches': quick.QUICK_MICRO_BATCHES,
                      'repeats': quick.QUICK_REPEATS, 'precision': quick.QUICK_PRECISION,
                      'memory_limit_bytes': quick.quick_memory_limit_bytes(
                          model.total_params())}
        elif kind == FULL_CPU:  # bf16 is emulated on most CPUs: slow and not a GPU's figure
            fields = {'precision': quick.QUICK_PRECISION}
        fields = {'seq_len': self.seq_len, **fields, **extra}
        return CalibrationOptions(model=model,
                                  device='cuda' if kind == 'cuda' else 'cpu',
                                  gpu_uuids=(uuid,) if uuid else (),
                                  python=python or self.python_edit.text().strip() or None,
                                  **fields)

    @Slot()
    def _update_estimate(self, _index: int = 0) -> None:
        from ui.calibration_numbers import full_cpu_estimate_s

        kind = self.kind()
        if kind == QUICK:
            text = translate('CalibrationDialog', 'The quick check times a few tokens on the '
                             'CPU and then says how long a full calibration would take.')
        elif kind == FULL_CPU and self._quick_profile is not None:
            text = translate('CalibrationDialog', 'A full CPU calibration at sequence {s} '
                             'takes {t} here (estimated from the quick check).').format(
                s=self.seq_len, t=minutes_text(full_cpu_estimate_s(self._quick_profile,
                                                                    self.seq_len)))
        elif kind == FULL_CPU:
            text = translate('CalibrationDialog', 'A full CPU calibration can take many '
                             'minutes: run the quick check first to see how long.')
        else:
            text = ''
        self.estimate_label.setText(text)

    # ---- running ----------------------------------------------------------------------

    def check_interpreter(self, python: str) -> str:
        """'' when ``python`` can run the child, else what is missing and how to get it."""
        from planner.calibrate.interpreter import install_command, missing_modules

        missing = missing_modules(python)
        if missing is None:
            return translate('CalibrationDialog', '{p} does not run: enter the path of a '
                             'Python 3.10 or later that has torch.').format(p=python)
        if missing:
            return translate('CalibrationDialog', '{p} lacks {m}. Install with:\n{cmd}\nor enter '
                             'another Python above.').format(
                p=python, m=', '.join(missing), cmd=install_command(python, missing))
        return ''

    @Slot()
    def start(self, **extra) -> None:
        """Check the interpreter, then start the child (a frozen build has no Python)."""
        from planner.calibrate.interpreter import choose_interpreter
        from ui.settings import settings

        named = self.python_edit.text().strip()
        settings().setValue(PYTHON_SETTING, named)
        choice = choose_interpreter(named)
        if choice.python is None:
            self.status_label.setText(translate(
                'CalibrationDialog', 'No Python with torch found: run "pip install torch" in a '
                'Python 3.10 or later, then enter that python above.'))
            return
        problem = self.check_interpreter(choice.python)
        if problem:
            self.status_label.setText(problem)
            return
        if choice.source == 'path':  # show (and remember) the one found
            self.python_edit.setText(choice.python)
            settings().setValue(PYTHON_SETTING, choice.python)
        self.last_result = None
        self._running_kind = self.kind()
        self.numbers.setVisible(False)
        self.controller.start(self.options(
            python=None if choice.source == 'self' else choice.python, **extra))
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.status_label.setText(translate('CalibrationDialog', 'Starting…'))

    @Slot(float, str, str)
    def _progress(self, fraction: float, stage: str, message: str) -> None:
        self.progress_bar.setValue(round(1000 * fraction))
        # stage and message come from the core (English; ui.core_terms translates them)
        stage, message = core_text(stage), core_text(message)
        self.status_label.setText(f'{stage}: {message}' if message else stage)

    @Slot(str, str, object)
    def _finished(self, status: str, message: str, saved) -> None:
        self.last_result = (status, message, saved)
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        text = f'{status_words(status)}: {core_text(message)}' if message else \
            status_words(status)
        if saved:
            self.progress_bar.setValue(1000)
            text = self._show_numbers(str(saved))
        self.status_label.setText(text)

    def _show_numbers(self, path: str) -> str:
        """Measured against predicted, in the table; the status line says what applies."""
        from planner.calibrate.profile import load_profile
        from planner.errors import InputError
        from ui.calibration_numbers import result_rows

        try:
            profile = load_profile(path).profile
            self.step_rows, self.memory_rows = result_rows(profile)
        except (InputError, OSError, ValueError) as exc:
            return translate('CalibrationDialog', 'Profile saved to {p}, but it cannot be '
                             'read back: {e}').format(p=path, e=exc)
        rows = [(translate('CalibrationDialog', 'step time (s)'), r.micro_batch, r.seq_len,
                 r.measured_s, r.predicted_s, '{:.3g}') for r in self.step_rows]
        rows += [(translate('CalibrationDialog', 'peak memory (GiB)'), r.micro_batch, r.seq_len,
                  r.measured_bytes / GIB, r.estimated_bytes / GIB, '{:.2f}')
                 for r in self.memory_rows]
        self.numbers.setRowCount(len(rows))
        for i, (name, b, s, measured, predicted, fmt) in enumerate(rows):
            diff = (predicted - measured) / measured * 100 if measured else float('nan')
            for j, cell in enumerate((name, f'{b} × {s}', fmt.format(measured),
                                      fmt.format(predicted), f'{diff:+.0f} %')):
                self.numbers.setItem(i, j, QTableWidgetItem(cell))
        self.numbers.resizeColumnsToContents()
        self.numbers.setVisible(bool(rows))
        kind = self._running_kind
        if kind == QUICK:
            self._quick_profile = profile
            self.device_combo.setCurrentIndex(self.device_combo.findData(FULL_CPU))
            self._update_estimate()
        if profile.device.kind == 'cuda':
            self.profile_saved.emit(path)
            applied = translate('CalibrationDialog', 'Applied: plans for this GPU now use it.')
        else:
            applied = translate('CalibrationDialog', 'A CPU profile is not applied to GPU '
                                'plans.')
        return translate('CalibrationDialog', 'Done in {t:.0f} s. Profile saved to {p}. '
                         '{applied}').format(t=profile.elapsed_s, p=path, applied=applied)

    def closeEvent(self, event) -> None:  # noqa: N802
        self.controller.shutdown()
        event.accept()


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    CalibrationDialog('gpt2-124m', 1024).exec()
