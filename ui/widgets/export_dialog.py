"""The selected plan as launcher commands and configs: one tab per ``planner.export`` format.

Each tab shows the text (comments and flags highlighted), the caveats the exporter
notes, and Copy / Save buttons. A format that refuses the plan says why in its tab. The
exporters' summaries are translated (:mod:`ui.core_terms`); their notes and refusals are
the core's English messages, and the exported text itself is never translated.
``planner.export`` and ``planner.planfile.document`` are imported when the dialog opens, not
when the window starts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QRegularExpression
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QSyntaxHighlighter,
    QTextCharFormat,
)
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from planner.errors import InputError
from ui.core_terms import core_text
from ui.export_hints import refusal_text
from ui.i18n import translate

if TYPE_CHECKING:
    from planner.plans.result import Candidate
    from ui.plan_compute import PlanOutcome




class _Highlighter(QSyntaxHighlighter):
    """Comments grey, ``--flags`` blue, ``KEY=`` and ``key:`` purple."""

    def __init__(self, document) -> None:
        super().__init__(document)
        self.rules = []
        for pattern, colour, bold in ((r'--[A-Za-z0-9_.-]+', '#1565c0', False),
                                      (r'^\s*[A-Za-z_][A-Za-z0-9_.-]*\s*[:=]', '#6a1b9a', True),
                                      (r'(^|\s)#.*$', '#757575', False)):
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(colour))
            if bold:
                fmt.setFontWeight(QFont.Weight.Bold)
            self.rules.append((QRegularExpression(pattern), fmt))

    def highlightBlock(self, text: str) -> None:  # noqa: N802
        for regex, fmt in self.rules:
            it = regex.globalMatch(text)
            while it.hasNext():
                m = it.next()
                self.setFormat(m.capturedStart(), m.capturedLength(), fmt)


class ExportDialog(QDialog):
    """One tab per launcher for candidate ``c`` of ``outcome``."""

    def __init__(self, outcome: PlanOutcome, c: Candidate, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        from planner.export import EXPORTERS, export_plan, stack_formats
        from ui.plan_document import plan_for

        self.setWindowTitle(translate('ExportDialog', 'Export plan #{rank} to a launcher').format(
            rank=c.rank))
        self.resize(900, 650)
        layout = QVBoxLayout(self)
        self.tabs = QTabWidget()
        layout.addWidget(self.tabs)
        self.texts: dict[str, str] = {}
        self._highlighters: list[_Highlighter] = []  # kept alive with their documents
        self.errors: dict[str, str] = {}
        self.done_labels: dict[str, QLabel] = {}
        try:
            plan = plan_for(outcome, c)  # what File › Save plan writes
        except InputError as exc:
            plan = None
            layout.insertWidget(0, QLabel(str(exc)))
        # a plan exports to its own stack's launchers only: the other tabs are disabled,
        # their tooltip saying why (planner.export.check_stack_format)
        self.formats: tuple[str, ...] = tuple(EXPORTERS) if plan is None else stack_formats(plan)
        for name, exporter in EXPORTERS.items():
            page = QWidget()
            page_layout = QVBoxLayout(page)
            summary = QLabel(core_text(exporter.summary))
            summary.setWordWrap(True)
            page_layout.addWidget(summary)
            try:
                if plan is None:
                    raise InputError('--format', translate('ExportDialog', 'no plan'))
                result = export_plan(plan, name)
            except InputError as exc:
                self.errors[name] = refusal_text(exc)
                message = QLabel(translate('ExportDialog', 'Not exported: {e}').format(
                    e=self.errors[name]))
                message.setWordWrap(True)
                message.setStyleSheet('color: #c62828;')
                page_layout.addWidget(message)
                page_layout.addStretch(1)
                index = self.tabs.addTab(page, name)
                if name not in self.formats:
                    self.tabs.setTabEnabled(index, False)
                    self.tabs.setTabToolTip(index, self.errors[name])
                continue
            self.texts[name] = result.text
            view = QPlainTextEdit(result.text)
            view.setObjectName(f'export_{name}')
            view.setReadOnly(True)
            view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
            self._highlighters.append(_Highlighter(view.document()))
            page_layout.addWidget(view, 1)
            if result.notes:
                notes = QLabel('\n'.join(f'• {n}' for n in result.notes))
                notes.setWordWrap(True)
                notes.setStyleSheet('color: #ef6c00;')
                page_layout.addWidget(notes)
            row = QHBoxLayout()
            done = QLabel()  # says what Copy or Save did
            done.setObjectName(f'done_{name}')
            done.setStyleSheet('color: #2e7d32;')
            self.done_labels[name] = done
            row.addWidget(done, 1)
            copy = QPushButton(translate('ExportDialog', 'Copy'))
            copy.clicked.connect(lambda _=False, t=result.text, d=done: self._copy(t, d))
            save = QPushButton(translate('ExportDialog', 'Save…'))
            save.clicked.connect(lambda _=False, r=result, d=done: self._save(r.text,
                                                                              r.filename, d))
            row.addWidget(copy)
            row.addWidget(save)
            page_layout.addLayout(row)
            self.tabs.addTab(page, name)
        first = next((i for i in range(self.tabs.count()) if self.tabs.isTabEnabled(i)), 0)
        self.tabs.setCurrentIndex(first)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def _copy(self, text: str, done: QLabel) -> None:
        QGuiApplication.clipboard().setText(text)
        done.setText(translate('ExportDialog', 'Copied {n} lines to the clipboard').format(
            n=text.count('\n')))

    def _save(self, text: str, filename: str, done: QLabel | None = None) -> None:
        path, _ = QFileDialog.getSaveFileName(self, translate('ExportDialog', 'Save'), filename)
        if path:
            self.save_text(text, path, done)

    def save_text(self, text: str, path: str, done: QLabel | None = None) -> bool:
        """Write ``text`` to ``path`` atomically (scripts executable) and say so."""
        from planner.planfile.document import write_text_atomic

        try:
            write_text_atomic(path, text)
            if re.search(r'\.(sh|bash|sbatch)$', path):
                Path(path).chmod(0o755)
        except (OSError, InputError) as exc:
            QMessageBox.warning(self, translate('ExportDialog', 'Cannot save'), str(exc))
            return False
        if done is not None:
            done.setText(translate('ExportDialog', 'Saved {path}').format(path=path))
        return True


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    from ui.plan_compute import compute_plan
    from ui.plan_inputs import PlanInputs

    app = QApplication([])
    o = compute_plan(PlanInputs())
    assert o.best is not None
    ExportDialog(o, o.best).exec()
