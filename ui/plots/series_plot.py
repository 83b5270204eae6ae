"""Line plots with a highlighted point, an optional marker line and a hover readout.

:class:`SeriesPlot` wraps one ``PlotItem`` (curve, highlighted point, vertical marker,
crosshair readout as in pyqtgraph's ``examples/crosshair.py``); :func:`time_vs_gpus_plot`
and :func:`time_vs_batch_plot` configure it. :class:`MicroBatchPlot` draws throughput
and MFU against the micro-batch, marking the micro-batches that do not fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt

from planner.units import GIB
from ui.i18n import translate

if TYPE_CHECKING:
    from planner.plans.micro_batch_sweep import MicroBatchSweep

GRID_PEN = '#e4e4e4'
TOO_BIG_GREY = '#9e9e9e'


def plain_axes(item: pg.PlotItem) -> None:
    """Tick labels in the axis' own units, in text space that only grows.

    No ``(x0.001)`` SI rescaling of days or MFU. An axis whose labels got narrower would
    shrink its text space during the paint, re-lay the plot and paint it again (twice the
    cost of an update); growing only, it settles after the first few plans.
    """
    for name in ('left', 'bottom', 'right'):
        axis = item.getAxis(name)
        axis.enableAutoSIPrefix(False)
        axis.setStyle(autoReduceTextSpace=False)


def settle_view(item: pg.PlotItem) -> None:
    """Apply a range change now rather than in the next paint.

    pyqtgraph moves the view's items in ``prepareForPaint``, inside the paint, which marks
    the scene changed again and paints the plot a second time.
    """
    item.getViewBox().prepareForPaint()


def shrinkable_title(item: pg.PlotItem) -> None:
    """Let the plot be narrower than its title.

    pyqtgraph's ``LabelItem`` makes its text width the title row's minimum, so a long
    title in a narrow plot widened the whole plot past its widget and cut off the right
    axis (the MFU axis at 1024 px); the title is then clipped instead.
    """
    label = item.titleLabel

    def update_min() -> None:
        height = label.itemRect().height()
        label.setMinimumWidth(0)
        label.setMinimumHeight(height)
        label._sizeHint = {
            Qt.SizeHint.MinimumSize: (0, height), Qt.SizeHint.PreferredSize: (0, height),
            Qt.SizeHint.MaximumSize: (-1, -1), Qt.SizeHint.MinimumDescent: (0, 0)}
        label.updateGeometry()

    label.updateMin = update_min
    update_min()


def add_light_grid(item: pg.PlotItem) -> None:
    """A light background grid.

    Not ``showGrid``: an axis grid repaints with every tick label and triples a plot's
    repaint time (about 15 ms against 5 ms per plot offscreen); a GridItem draws once.
    """
    grid = pg.GridItem(pen=pg.mkPen(GRID_PEN), textPen=None)
    grid.setZValue(-100)
    item.addItem(grid, ignoreBounds=True)


class _Series:
    """A curve, a highlighted point, a marker line and a readout on one PlotItem."""

    def __init__(self, item: pg.PlotItem, colour: str,
                 fmt: Callable[[float, float], str]) -> None:
        self.item = item
        self.fmt = fmt
        self.curve = item.plot([], [], pen=pg.mkPen(colour, width=2), symbol='o',
                               symbolSize=6, symbolBrush=colour, symbolPen=None)
        self.highlight = item.plot([], [], pen=None, symbol='o', symbolSize=14,
                                   symbolBrush='#c62828', symbolPen='k')
        self.marker = pg.InfiniteLine(
            angle=90, movable=False,
            pen=pg.mkPen('#6a1b9a', width=1.5, style=Qt.PenStyle.DashLine), label=' ',
            labelOpts={'position': 0.8, 'color': '#6a1b9a', 'movable': False})
        self.marker.setVisible(False)
        item.addItem(self.marker, ignoreBounds=True)
        self.readout = pg.TextItem(anchor=(0, 1), color='k', fill=pg.mkBrush(255, 255, 255, 210))
        self.readout.setVisible(False)
        item.addItem(self.readout, ignoreBounds=True)
        self.x = np.zeros(0)
        self.y = np.zeros(0)
        self.on_curve = np.zeros(0, bool)
        self.highlighted: tuple[float, float] | None = None
        self.marked: tuple[float, str] | None = None
        self.x_label = item.getAxis('bottom').labelText
        # without points: no stale ranges or ticks, a line in the middle saying why
        self.note = pg.LabelItem(translate('SeriesPlot', 'no plan to show'), color='#757575')
        self.note.setParentItem(item.getViewBox())
        self.note.anchor(itemPos=(0.5, 0.5), parentPos=(0.5, 0.5))
        self.note.setVisible(False)
        self.empty: bool | None = None  # whether the note is shown (None: not yet decided)

    def set_data(self, x, y, on_curve=None) -> bool:
        """Replace the points; False when they are already drawn (nothing to repaint).

        ``on_curve`` (a mask) keeps some points off the curve; every point still counts
        for the view's range and the hover.
        """
        x, y = np.asarray(x, float), np.asarray(y, float)
        ok = np.isfinite(x) & np.isfinite(y)
        # the mask is filtered with the points, so it always has their length (a mask of
        # every point indexing the finite ones only crashed the window when nothing fit)
        on_curve = (np.ones(x.shape, bool) if on_curve is None
                    else np.asarray(on_curve, bool))[ok]
        x, y = x[ok], y[ok]
        if (np.array_equal(x, self.x) and np.array_equal(y, self.y)
                and np.array_equal(on_curve, self.on_curve) and self.empty is not None):
            return False
        self.x, self.y, self.on_curve = x, y, on_curve
        self.curve.setData(x[on_curve], y[on_curve])
        self._show_empty(not x.size)
        self.fit_view()
        return True

    def _show_empty(self, empty: bool) -> None:
        if empty == self.empty:
            return
        self.empty = empty
        self.note.setVisible(empty)
        for name in ('left', 'bottom', 'right'):
            axis = self.item.getAxis(name)
            axis.setStyle(showValues=not empty)
        if empty:
            self.set_marker(None)
            self.set_highlight(None, None)
            self.item.getViewBox().setRange(xRange=(0, 1), yRange=(0, 1), padding=0)

    def fit_view(self) -> None:
        """Show every point (explicit ranges: auto-range lags behind linked axes)."""
        if not self.x.size:
            return
        vb = self.item.getViewBox()
        xs = np.log10(self.x) if vb.state['logMode'][0] else self.x
        lo, hi = float(xs.min()), float(xs.max())
        pad = 0.06 * (hi - lo) if hi > lo else 0.5
        ylo, yhi = float(self.y.min()), float(self.y.max())
        # at least ±5 % of the values: differences of 0.01 % are drawn flat, not as cliffs
        ypad = max(0.08 * (yhi - ylo), 0.05 * max(abs(yhi), abs(ylo)), 1e-9)
        # one call: each range change re-lays the axes and asks for another repaint
        vb.setRange(xRange=(lo - pad, hi + pad), yRange=(ylo - ypad, yhi + ypad), padding=0)

    def set_highlight(self, x: float | None, y: float | None) -> None:
        point = None if x is None or y is None or not (np.isfinite(x) and np.isfinite(y)) \
            else (float(x), float(y))
        if point == self.highlighted:
            return
        self.highlighted = point
        self.highlight.setData(*(([], []) if point is None else ([x], [y])))

    def set_marker(self, x: float | None, label: str = '') -> None:
        shown = None if x is None or not np.isfinite(x) or x <= 0 else (float(x), label)
        if shown == self.marked:
            return
        self.marked = shown
        if shown is None:
            self.marker.setVisible(False)
            self.item.setLabel('bottom', self.x_label)  # no dashed line to explain
            return
        log_x = self.item.getViewBox().state['logMode'][0]
        self.marker.setPos(np.log10(shown[0]) if log_x else shown[0])
        self.marker.label.setFormat(label)
        self.marker.setVisible(True)
        self.item.setLabel('bottom', translate('SeriesPlot', '{axis}  (dashed: {marker})').format(
            axis=self.x_label, marker=label) if label else self.x_label)

    def hover(self, pos: QPointF) -> bool:
        vb = self.item.getViewBox()
        if not self.x.size or not vb.sceneBoundingRect().contains(pos):
            self.readout.setVisible(False)
            return False
        point = vb.mapSceneToView(pos)
        log_x = vb.state['logMode'][0]
        xs = np.log10(self.x) if log_x else self.x
        i = int(np.argmin(np.abs(xs - point.x())))
        self.readout.setText(self.fmt(float(self.x[i]), float(self.y[i])))
        self.readout.setPos(xs[i], self.y[i])
        self.readout.setVisible(True)
        return True


class SeriesPlot(pg.PlotWidget):
    """One series against x with a highlighted point, a marker line and a hover readout."""

    def __init__(self, title: str, x_label: str, y_label: str, fmt: Callable[[float, float], str],
                 log_x: bool = False, colour: str = '#1f77b4', parent=None) -> None:
        super().__init__(parent)
        item = self.getPlotItem()
        item.setTitle(title)
        shrinkable_title(item)
        item.setLabel('bottom', x_label)
        item.setLabel('left', y_label)
        add_light_grid(item)
        plain_axes(item)
        item.setLogMode(x=log_x, y=False)
        self.series = _Series(item, colour, fmt)
        self._x_ticks: list[tuple[float, str]] | None = None
        self.scene().sigMouseMoved.connect(self.series.hover)

    def set_data(self, x, y) -> None:
        """Replace the curve (nothing is redrawn when it is unchanged)."""
        if self.series.set_data(x, y):
            settle_view(self.getPlotItem())

    def set_highlight(self, x: float | None, y: float | None) -> None:
        """Mark the selected point (None clears it)."""
        self.series.set_highlight(x, y)

    def set_marker(self, x: float | None, label: str = '') -> None:
        """A vertical dashed line at ``x`` with ``label`` (None hides it)."""
        self.series.set_marker(x, label)

    def set_x_ticks(self, values, label: Callable[[float], str]) -> None:
        """Label the x axis at ``values`` only (log axes get their log10 positions)."""
        log_x = self.getPlotItem().getViewBox().state['logMode'][0]
        ticks = [((np.log10(v) if log_x else v), label(v)) for v in values if v > 0]
        if ticks != self._x_ticks:
            self._x_ticks = ticks
            self.getPlotItem().getAxis('bottom').setTicks([ticks, []])

    def data(self) -> tuple[np.ndarray, np.ndarray]:
        """The plotted (x, y)."""
        return self.series.x, self.series.y


def time_vs_gpus_plot(parent=None) -> SeriesPlot:
    """Best time-to-train (days) at each GPU count."""
    readout = translate('SeriesPlot', '{gpus:.0f} GPUs: {days:.2f} days')
    return SeriesPlot(translate('SeriesPlot', 'Best time-to-train vs GPUs'),
                      translate('SeriesPlot', 'GPUs'),
                      translate('SeriesPlot', 'time-to-train (days)'),
                      lambda x, y: readout.format(gpus=x, days=y), parent=parent)


def time_vs_batch_plot(parent=None) -> SeriesPlot:
    """Best time-to-train (days) at each global batch (tokens, log axis)."""
    readout = translate('SeriesPlot', '{tokens:.3g}M tokens: {days:.2f} days')
    return SeriesPlot(translate('SeriesPlot', 'Best time-to-train vs global batch'),
                      translate('SeriesPlot', 'global batch (tokens)'),
                      translate('SeriesPlot', 'time-to-train (days)'),
                      lambda x, y: readout.format(tokens=x / 1e6, days=y), log_x=True,
                      colour='#2ca02c', parent=parent)


class MicroBatchPlot(SeriesPlot):
    """Throughput against the micro-batch, the rest of the layout fixed; MFU on the right.

    Every micro-batch the layout allows is drawn (``planner.plans.micro_batch_sweep``): those
    that fit on the solid line, those that do not as hollow points on a dashed grey
    continuation, their hover saying how much memory they would need. For one layout
    MFU is throughput × FLOPs per token ÷ (GPUs × peak): the same curve on another scale,
    so one plot with a second axis shows both (and paints half as much as two plots).
    """

    def __init__(self, parent=None) -> None:
        readout = translate('SeriesPlot', 'micro {micro:.0f}: {tps:,.0f} tokens/s, {mfu:.1f}% MFU')
        too_big = translate('SeriesPlot', 'does not fit: {need:,.1f} GiB of {usable:,.1f} GiB '
                                          'usable')

        def fmt(x: float, y: float) -> str:
            text = readout.format(micro=x, tps=y, mfu=y * self.mfu_per_tps)
            need = self._need_gib.get(x)
            return text if need is None else text + '\n' + too_big.format(
                need=need, usable=self._usable_gib)

        super().__init__(translate('SeriesPlot', 'Throughput and MFU vs micro-batch'),
                         translate('SeriesPlot', 'micro-batch'),
                         translate('SeriesPlot', 'tokens/s'), fmt, log_x=True,
                         parent=parent)  # log: micro-batches double, 1 to 128 and more
        item = self.getPlotItem()
        item.showAxis('right')
        item.setLabel('right', translate('SeriesPlot', 'MFU (%)'))
        item.getAxis('right').enableAutoSIPrefix(False)
        self.mfu_per_tps = 0.0  # MFU in percent per token/s of this layout
        self.too_big_line = item.plot([], [], pen=pg.mkPen(TOO_BIG_GREY, width=1.5,
                                                           style=Qt.PenStyle.DashLine))
        self.too_big_points = item.plot([], [], pen=None, symbol='o', symbolSize=8,
                                        symbolBrush='w', symbolPen=pg.mkPen(TOO_BIG_GREY,
                                                                            width=1.5))
        self.legend = pg.LegendItem(offset=(-10, 10), labelTextColor='k',
                                    brush=pg.mkBrush(255, 255, 255, 210))
        self.legend.setParentItem(item.getViewBox())
        self.legend.addItem(self.too_big_points,
                            translate('SeriesPlot', 'does not fit in memory'))
        self.legend.setVisible(False)
        self._need_gib: dict[float, float] = {}  # micro-batch -> GiB, where it does not fit
        self._usable_gib = 0.0

    def set_sweep(self, sweep: MicroBatchSweep | None, selected_micro: int | None = None
                  ) -> None:
        """Show a layout at every micro-batch; highlight ``selected_micro`` (None clears)."""
        if sweep is None:
            micro = tps = np.zeros(0)
            fits = np.zeros(0, bool)
            need = np.zeros(0)
            self._usable_gib = 0.0
        else:
            micro = np.asarray(sweep.micro_batch, float)
            tps = np.asarray(sweep.tokens_per_s, float)
            fits = np.asarray(sweep.fits, bool)
            need = np.asarray(sweep.total_bytes, float) / GIB
            self._usable_gib = sweep.usable_bytes / GIB
            ok = tps > 0
            mfu_per_tps = float(100 * sweep.mfu[ok][0] / tps[ok][0]) if ok.any() else 0.0
            if mfu_per_tps != self.mfu_per_tps:
                self.mfu_per_tps = mfu_per_tps
                self.getPlotItem().getAxis('right').setScale(mfu_per_tps or 1.0)
        self._need_gib = {float(m): float(n) for m, n, f in zip(micro, need, fits, strict=True)
                          if not f}
        if self.series.set_data(micro, tps, on_curve=fits):
            # dashed from the largest micro-batch that fits on through those that do not
            tail = np.sort(np.concatenate([np.flatnonzero(fits)[-1:], np.flatnonzero(~fits)]))
            self.too_big_line.setData(micro[tail], tps[tail])
            self.too_big_points.setData(micro[~fits], tps[~fits])
            self.legend.setVisible(bool((~fits).any()))
            settle_view(self.getPlotItem())
        self.set_x_ticks(micro, lambda v: f'{v:.0f}')  # micro-batches are whole
        hit = (np.flatnonzero(micro == selected_micro) if selected_micro is not None
               else np.zeros(0, int))
        if len(hit):
            self.set_highlight(micro[hit[0]], float(tps[hit[0]]))
        else:
            self.set_highlight(None, None)

    def fits(self) -> np.ndarray:
        """Whether each plotted point fits in memory (those are on the solid curve)."""
        return self.series.on_curve

    def mfu_percent(self) -> np.ndarray:
        """The MFU (%) the right axis reads for each plotted point."""
        return self.series.y * self.mfu_per_tps

    def readout_at(self, micro: float) -> str:
        """The hover text of the point at ``micro``."""
        i = int(np.flatnonzero(self.series.x == micro)[0])
        return self.series.fmt(float(self.series.x[i]), float(self.series.y[i]))


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    w = time_vs_batch_plot()
    w.set_data([1e6, 2e6, 4e6, 8e6], [30, 20, 15, 14])
    w.set_highlight(4e6, 15)
    w.set_marker(3e6, 'B_crit')
    w.show()
    app.exec()
