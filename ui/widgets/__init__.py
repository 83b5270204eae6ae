"""Widgets built in code; each module runs alone as a preview (``python -m ui.widgets.x``)."""
