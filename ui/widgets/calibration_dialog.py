"""Measure this machine: a calibration run in a child process, with progress and cancel.

The child is ``python -m planner.calibrate`` (the interpreter can be another one, with
torch: the user's training environment). Its profile is saved where
``batchfit plan --profile auto`` finds it.
"""

from __future__ import annotations

from PySide6.QtCore import Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ui.controllers.calibration_controller import CalibrationController
from ui.core_terms import core_text
from ui.i18n import translate

PYTHON_SETTING = 'calibration/python'  # the "Python with torch" last used, in QSettings


class CalibrationDialog(QDialog):
    """Start, follow and cancel one calibration."""

    def __init__(self, model_text: str, seq_len: int, gpu_uuids: tuple[str, ...] = (),
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(translate('CalibrationDialog', 'Calibrate on this machine'))
        self.resize(560, 300)
        self.model_text, self.seq_len = model_text, seq_len
        self.controller = CalibrationController(self)
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
                                      ('cuda', uuid))
        self.device_combo.addItem(
            translate('CalibrationDialog', 'CPU (a quick check, not a GPU profile)'), ('cpu', ''))
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
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1000)
        layout.addWidget(self.progress_bar)
        self.status_label = QLabel(translate('CalibrationDialog', 'Not started.'))
        self.status_label.setObjectName('calibration_status')
        self.status_label.setWordWrap(True)
        layout.addWidget(self.status_label)
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

    def options(self, python: str | None = None, **extra):
        """The ``CalibrationOptions`` the dialog's fields describe (``python`` overrides
        the field)."""
        from planner.calibrate.runner import CalibrationOptions
        from planner.models.source import resolve_model

        device, uuid = self.device_combo.currentData()
        return CalibrationOptions(model=resolve_model(self.model_text), seq_len=self.seq_len,
                                  device=device, gpu_uuids=(uuid,) if uuid else (),
                                  python=python or self.python_edit.text().strip() or None,
                                  **extra)

    @Slot()
    def start(self, **extra) -> None:
        """Start the child with a Python that has torch (a frozen build has none)."""
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
        if choice.source == 'path':  # show (and remember) the one found
            self.python_edit.setText(choice.python)
            settings().setValue(PYTHON_SETTING, choice.python)
        self.last_result = None
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
        text = f'{status}: {core_text(message)}'  # status is a code (ok, cancelled, oom...)
        if saved:
            text += '\n' + translate('CalibrationDialog', 'Profile saved to {p}').format(p=saved)
            self.progress_bar.setValue(1000)
        self.status_label.setText(text)

    def closeEvent(self, event) -> None:  # noqa: N802
        self.controller.shutdown()
        event.accept()


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    CalibrationDialog('gpt2-124m', 1024).exec()
