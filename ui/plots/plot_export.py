"""Export a plot as PNG (pyqtgraph's ImageExporter) or SVG (Qt's QSvgGenerator).

pyqtgraph 0.14's SVGExporter is broken on current Qt (pyqtgraph #3495, fixed on master
only), so SVG goes through
``QSvgGenerator`` and ``QGraphicsView.render``: true vector output.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyqtgraph as pg
import pyqtgraph.exporters
from PySide6.QtCore import QRect, QRectF, QSize
from PySide6.QtGui import QPainter
from PySide6.QtSvg import QSvgGenerator


def export_png(view: pg.GraphicsView, path: str | os.PathLike[str],
               width: int | None = None) -> None:
    """Write the whole scene of ``view`` as a PNG (``width`` in pixels, default as shown)."""
    exporter = pg.exporters.ImageExporter(view.scene())
    if width is not None:
        exporter.parameters()['width'] = int(width)
    exporter.export(str(Path(path)))


def export_svg(view: pg.GraphicsView, path: str | os.PathLike[str], title: str = '') -> None:
    """Write ``view`` as an SVG through ``QSvgGenerator`` (vector paths and text)."""
    rect = view.viewport().rect()
    generator = QSvgGenerator()
    generator.setFileName(str(Path(path)))
    generator.setSize(QSize(rect.width(), rect.height()))
    generator.setViewBox(QRect(0, 0, rect.width(), rect.height()))
    generator.setTitle(title or 'batchfit plot')
    generator.setDescription('exported by batchfit')
    painter = QPainter()
    if not painter.begin(generator):
        raise OSError(f'cannot write {path}')
    try:
        view.render(painter, QRectF(0, 0, rect.width(), rect.height()), rect)
    finally:
        painter.end()
