"""A line edit for a number with a range in :mod:`planner.limits`.

Unlike a spin box it never clamps: ``1e12`` typed into nodes stays what was typed and
the field turns red with the range, instead of silently becoming 100000 (or 112, when
the spin box drops the letters). Empty is an error too, not the previous value.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLineEdit, QWidget

from ui.widgets.field_check import FieldError, parse_field


class CountEdit(QLineEdit):
    """A number field checked with the core's range for ``key`` (``nodes``...)."""

    def __init__(self, key: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.key = key
        self.setObjectName(f'{key}_edit')

    def parsed(self) -> int | float:
        """The value typed.

        Raises:
            FieldError: empty, not a number, or out of range (the reason translated).
        """
        value = parse_field(self.key, self.text())
        assert value is not None  # not optional
        return value

    def value(self) -> int | float | None:
        """The value typed, or None when it is not acceptable."""
        try:
            return self.parsed()
        except FieldError:
            return None

    def setValue(self, value: float) -> None:  # noqa: N802 (QSpinBox's name, for callers)
        """Show ``value`` (whole numbers without a fraction)."""
        self.setText(f'{int(value)}' if float(value) == int(value) else f'{value:g}')
