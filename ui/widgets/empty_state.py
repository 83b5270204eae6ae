"""The table's place when nothing fits: why, and buttons for the nearest changes that fit.

Written against a plain interface (a headline, a reason text, a list of suggestions each
with a label and the input changes it makes), so any explanation can feed it
(:class:`ui.no_plan_view.NoPlanView` has that shape).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from ui.i18n import translate


class EmptyState(QWidget):
    """Says why nothing fits; :attr:`suggestion_chosen` emits the changes of a button."""

    suggestion_chosen = Signal(object)  # dict of PlanInputs fields

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName('empty_state')
        self._layout = QVBoxLayout(self)
        self.headline = QLabel()
        self.headline.setObjectName('empty_headline')
        font = self.headline.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        self.headline.setFont(font)
        self.reason = QLabel()
        self.reason.setObjectName('empty_reason')
        self.reason.setWordWrap(True)
        self.reason.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.offer = QLabel(translate('EmptyState', 'Nearest changes that give a plan:'))
        self._layout.addWidget(self.headline)
        self._layout.addWidget(self.reason)
        self._layout.addWidget(self.offer)
        self.buttons: list[QPushButton] = []
        self.none_label = QLabel(translate(
            'EmptyState', 'No single change checked here gives a plan: try a smaller model, '
            'a shorter sequence, or a GPU with more memory.'))
        self.none_label.setWordWrap(True)
        self._layout.addWidget(self.none_label)
        self._layout.addStretch(1)

    def show_explanation(self, headline: str, reason: str,
                         suggestions: list[tuple[str, dict[str, Any]]]) -> None:
        """Show ``headline``, ``reason`` and one button per (label, changes) suggestion."""
        self.headline.setText(headline)
        self.reason.setText(reason)
        for button in self.buttons:
            self._layout.removeWidget(button)
            button.deleteLater()
        self.buttons = []
        for i, (label, changes) in enumerate(suggestions):
            button = QPushButton(label)
            button.setObjectName(f'suggestion_{i}')
            button.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
            button.clicked.connect(lambda _=False, c=changes: self.suggestion_chosen.emit(c))
            self._layout.insertWidget(3 + i, button)
            self.buttons.append(button)
        self.offer.setVisible(bool(suggestions))
        self.none_label.setVisible(not suggestions)
