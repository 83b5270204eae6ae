"""The selected plan's per-GPU memory as one stacked bar, with capacity and margin lines.

One ``BarGraphItem`` per named part (planner.memory.report's labels, shown translated through
:func:`ui.core_terms.core_text`), created once and updated with
``setOpts(height=..., y0=...)`` (the pattern of pyqtgraph's examples/PanningPlot.py).
Hovering the bar shows the part under the mouse in a tooltip.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QToolTip

from planner.memory.report import COMPONENT_LABELS, OVERHEAD_LABELS
from planner.units import GIB
from ui.core_terms import core_text
from ui.i18n import translate
from ui.plots.series_plot import settle_view, shrinkable_title

if TYPE_CHECKING:
    from planner.plans.result import CandidateMemory

PARTS: tuple[tuple[str, str], ...] = (
    *((f'components.{k}', v) for k, v in COMPONENT_LABELS.items()),
    *((f'overhead.{k}', v) for k, v in OVERHEAD_LABELS.items()),
)
# One distinct colour per part, colour-blind safe: Paul Tol's "muted" scheme (9 colours)
# and four of Okabe & Ito's (https://personal.sron.nl/~pault/#sec:qualitative;
# https://jfly.uni-koeln.de/color/), neighbours in the stack apart in hue and lightness;
# the three overheads are greys of distinct lightness.
PART_COLOURS: dict[str, str] = {
    'components.weights': '#332288', 'components.gradients': '#88CCEE',
    'components.optimizer_states': '#117733', 'components.optimizer_step_temp': '#DDCC77',
    'components.activations': '#CC6677', 'components.logits': '#44AA99',
    'components.attention_scores_temp': '#882255', 'components.forward_temp': '#E69F00',
    'components.autocast_copies': '#0072B2', 'components.backward_temp': '#999933',
    'components.zero3_gathered': '#AA4499', 'components.unsharded_grad': '#F0E442',
    'components.buffers': '#D55E00', 'components.model_outputs': '#56B4E9',
    'overhead.cuda_context': '#555555',
    'overhead.workspace': '#999999', 'overhead.allocator_reserve': '#CCCCCC',
}
_SPARE = ('#000000', '#009E73', '#CC79A7')  # a part added to the core later


def part_colour(key: str, index: int) -> str:
    """The colour of memory part ``key`` (the ``index``-th part)."""
    return PART_COLOURS.get(key, _SPARE[index % len(_SPARE)])


NO_PLAN_GREY = '#bdbdbd'
LEGEND_MIN_SHARE = 0.03  # parts below 3 % of the stack share one legend row
BAR_X = 0.0
BAR_WIDTH = 0.6



class MemoryPlot(pg.PlotWidget):
    """Stacked per-GPU memory of one plan, in GiB."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        item = self.getPlotItem()
        item.setTitle(translate('MemoryPlot', 'Per-GPU memory at the peak'))
        shrinkable_title(item)
        item.setLabel('left', translate('MemoryPlot', 'memory'), units='GiB')
        item.hideAxis('bottom')
        item.getAxis('left').setStyle(autoReduceTextSpace=False)  # see plain_axes
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        # One HTML text beside the bar rather than a LegendItem: rebuilding a legend's
        # rows on every selection cost ~10 ms, and the text never covers the bar.
        self.legend = pg.TextItem(anchor=(0, 1), color='k')  # bottom-left at the bar's foot
        self.legend.setZValue(10)
        self.addItem(self.legend, ignoreBounds=True)
        self.bars: dict[str, pg.BarGraphItem] = {}
        for i, (key, _label) in enumerate(PARTS):
            bar = pg.BarGraphItem(x=[BAR_X], height=[0.0], y0=[0.0], width=BAR_WIDTH,
                                  brush=part_colour(key, i), pen=pg.mkPen('w'))
            bar.setVisible(False)
            self.addItem(bar)
            self.bars[key] = bar
        self.labels = {key: core_text(label) for key, label in PARTS}
        # One label for both lines, right-aligned inside the plot above the capacity line
        # (the band the y range keeps free): two labels a 5 % margin apart overlapped, and
        # ran past the right edge.
        self.capacity_line = pg.InfiniteLine(
            angle=0, movable=False, pen=pg.mkPen('#c62828', width=2), label=' ',
            labelOpts={'position': 0.98, 'color': '#c62828', 'anchors': [(1, 1), (1, 1)]})
        self.usable_line = pg.InfiniteLine(
            angle=0, movable=False,
            pen=pg.mkPen('#ef6c00', width=1.5, style=pg.QtCore.Qt.PenStyle.DashLine))
        self.addItem(self.capacity_line, ignoreBounds=True)
        self.addItem(self.usable_line, ignoreBounds=True)
        # nothing fits: the smallest peak any layout reaches, against this GPU's lines
        self.floor_bar = pg.BarGraphItem(x=[BAR_X], height=[0.0], y0=[0.0], width=BAR_WIDTH,
                                         brush=pg.mkBrush(NO_PLAN_GREY),
                                         pen=pg.mkPen(NO_PLAN_GREY, style=pg.QtCore.Qt.PenStyle
                                                      .DashLine))
        self.floor_bar.setVisible(False)
        self.addItem(self.floor_bar)
        self.heights_gib: dict[str, float] = {}
        self.capacity_gib: float | None = None  # the capacity line shown (None: hidden)
        self._drawn: dict[str, tuple[float, float]] = {}  # (height, foot) each bar shows
        item.setXRange(-0.45, 3.3, padding=0)
        self.scene().sigMouseMoved.connect(self._on_mouse_moved)

    def show_no_plan(self, capacity_bytes: float, usable_bytes: float,
                     smallest_peak_bytes: float | None) -> None:
        """Nothing fits: this GPU's capacity and usable lines, and the smallest peak any
        layout reached (grey) when the search estimated one."""
        self.set_memory(None)
        peak = (smallest_peak_bytes or 0.0) / GIB
        self.capacity_gib = capacity_bytes / GIB
        self.floor_bar.setOpts(height=[peak], y0=[0.0])
        self.floor_bar.setVisible(peak > 0)
        self.legend.setHtml('<div style="font-size:8pt">' + html.escape(translate(
            'MemoryPlot', 'no plan: the smallest peak is {value:.1f} GiB').format(value=peak))
            + '</div>' if peak > 0 else '')
        self._show_lines(capacity_bytes / GIB, usable_bytes / GIB, peak)

    def _show_lines(self, cap: float, usable: float, top: float) -> None:
        self.capacity_gib = cap
        # Visible first: pyqtgraph's InfLineLabel re-renders its text only on a move while
        # visible (InfLineLabel.valueChanged), so a line shown again at the same place
        # kept the previous GPU's numbers; the text is then set explicitly.
        self.capacity_line.setVisible(True)
        self.usable_line.setVisible(True)
        text = translate('MemoryPlot', 'capacity {cap:.1f} GiB · usable {usable:.1f} GiB'
                         ).format(cap=cap, usable=usable)
        label = self.capacity_line.label
        label.setFormat(text.replace('{', '{{').replace('}', '}}'))
        self.capacity_line.setPos(cap)
        self.usable_line.setPos(usable)
        label.setText(text)  # even while the window is hidden (valueChanged skips that)
        label.valueChanged()
        # room above the capacity line for its label
        self.getPlotItem().setYRange(0, max(cap * 1.18, top * 1.05), padding=0)
        settle_view(self.getPlotItem())
        # from the floor up, clear of the capacity and usable labels near the top
        self.legend.setPos(BAR_X + BAR_WIDTH / 2 + 0.1, 0.0)

    def set_memory(self, memory: CandidateMemory | None) -> None:
        """Show ``memory`` (None clears the plot)."""
        self.heights_gib = {}
        self.floor_bar.setVisible(False)
        y0 = 0.0
        rows = []
        for i, (key, bar) in enumerate(self.bars.items()):
            group, name = key.split('.', 1)
            value = 0.0 if memory is None else getattr(memory, group).get(name, 0) / GIB
            self.heights_gib[key] = value
            if value > 0 and self._drawn.get(key) != (value, y0):  # each bar redraws itself
                self._drawn[key] = (value, y0)
                bar.setOpts(height=[value], y0=[y0])
            bar.setVisible(value > 0)
            if value > 0:
                rows.append((value, f'<span style="color:{part_colour(key, i)}">&#9632;</span>'
                            f' {html.escape(self.labels[key])} {value:.2f}'))
            y0 += value
        self.legend.setHtml(self._legend_html(rows, y0))
        if memory is None:
            self.capacity_gib = None
            self.capacity_line.setVisible(False)
            self.usable_line.setVisible(False)
            return
        self._show_lines(memory.capacity_bytes / GIB, memory.usable_bytes / GIB, y0)

    @staticmethod
    def _legend_html(rows: list[tuple[float, str]], total: float) -> str:
        """The parts of at least LEGEND_MIN_SHARE of the stack, top first; the small
        ones summed in one row (each is in the hover tooltip and the detail panel)."""
        shown = [text for value, text in rows if value >= LEGEND_MIN_SHARE * total]
        small = [value for value, _ in rows if value < LEGEND_MIN_SHARE * total]
        lines = list(reversed(shown))  # top of the stack first, as drawn
        if small:
            lines.append(html.escape(translate('MemoryPlot', '{n} smaller parts {value:.2f}')
                                     .format(n=len(small), value=sum(small))))
        return '<div style="font-size:8pt">' + '<br>'.join(lines) + '</div>'

    def total_gib(self) -> float:
        """Height of the stack."""
        return sum(self.heights_gib.values())

    def part_at(self, y_gib: float) -> str | None:
        """The part key whose segment spans ``y_gib``."""
        y0 = 0.0
        for key, h in self.heights_gib.items():
            if h > 0 and y0 <= y_gib < y0 + h:
                return key
            y0 += h
        return None

    def _on_mouse_moved(self, pos: QPointF) -> None:
        vb = self.getPlotItem().vb
        if not vb.sceneBoundingRect().contains(pos):
            return
        point = vb.mapSceneToView(pos)
        if abs(point.x() - BAR_X) > BAR_WIDTH / 2:
            QToolTip.hideText()
            return
        key = self.part_at(point.y())
        if key is None:
            QToolTip.hideText()
            return
        text = translate('MemoryPlot', '{part}: {value:.2f} GiB (total {total:.2f} GiB)')
        QToolTip.showText(QCursor.pos(), text.format(part=self.labels[key],
                                                     value=self.heights_gib[key],
                                                     total=self.total_gib()), self)


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    from ui.plan_compute import compute_plan
    from ui.plan_inputs import PlanInputs

    app = QApplication([])
    w = MemoryPlot()
    best = compute_plan(PlanInputs()).best
    assert best is not None
    w.set_memory(best.memory)
    w.resize(500, 500)
    w.show()
    app.exec()
