"""This machine's GPUs, live: one memory bar and a few readings per GPU.

:meth:`GpuPanel.set_inventory` takes a :class:`planner.hardware.local.HardwareInventory` snapshot
(from :class:`ui.controllers.hardware_controller.HardwareController`, once a second).
Without an NVIDIA GPU it shows one line saying why, and a button that switches the
planner to the catalog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QGridLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from planner.units import GIB
from ui.core_terms import core_text
from ui.i18n import QT_TRANSLATE_NOOP, translate

if TYPE_CHECKING:
    from planner.hardware.local import HardwareInventory




# HardwareInventory.status codes (planner.hardware.local.inventory), said in words
STATUS_WORDS: dict[str, str] = {
    'ok': QT_TRANSLATE_NOOP('GpuPanel', 'no GPU found'),
    'no_driver': QT_TRANSLATE_NOOP('GpuPanel', 'no NVIDIA driver'),
    'partial': QT_TRANSLATE_NOOP('GpuPanel', 'some GPUs were lost'),
    'no_bindings': QT_TRANSLATE_NOOP('GpuPanel', 'the NVML Python bindings are missing'),
    'driver_mismatch': QT_TRANSLATE_NOOP('GpuPanel', 'the driver library and kernel module '
                                                     'do not match'),
    'error': QT_TRANSLATE_NOOP('GpuPanel', 'NVML failed'),
}


class GpuPanel(QWidget):
    """Live NVML readings; :attr:`use_catalog` when the user picks the catalog instead."""

    use_catalog = Signal()
    use_local = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        self.status_label = QLabel(translate('GpuPanel', 'Reading the local GPUs…'))
        self.status_label.setObjectName('gpu_status')
        self.status_label.setWordWrap(True)
        layout.addWidget(self.status_label)
        self.catalog_button = QPushButton(translate('GpuPanel', 'Plan with a catalog GPU instead'))
        self.catalog_button.clicked.connect(self.use_catalog)
        self.catalog_button.setVisible(False)
        layout.addWidget(self.catalog_button)
        self.local_button = QPushButton(translate('GpuPanel', 'Plan for these GPUs'))
        self.local_button.clicked.connect(self.use_local)
        self.local_button.setVisible(False)
        layout.addWidget(self.local_button)
        self._grid_host = QWidget()
        self._grid = QGridLayout(self._grid_host)
        self._grid.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self._grid_host)
        layout.addStretch(1)
        self.bars: list[QProgressBar] = []
        self.names: list[QLabel] = []
        self.readings: list[QLabel] = []

    def _ensure_rows(self, n: int) -> None:
        while len(self.bars) < n:
            i = len(self.bars)
            name, bar, reading = QLabel(), QProgressBar(), QLabel()
            bar.setRange(0, 1000)
            bar.setTextVisible(True)
            self._grid.addWidget(name, 2 * i, 0)
            self._grid.addWidget(reading, 2 * i, 1)
            self._grid.addWidget(bar, 2 * i + 1, 0, 1, 2)
            self.names.append(name)
            self.bars.append(bar)
            self.readings.append(reading)
        for i, widgets in enumerate(zip(self.names, self.bars, self.readings, strict=True)):
            for w in widgets:
                w.setVisible(i < n)

    def set_inventory(self, inv: HardwareInventory) -> None:
        """Show one snapshot."""
        has = bool(inv.gpus)
        self.catalog_button.setVisible(not has)
        self.local_button.setVisible(has)
        if not has:
            reason = translate('GpuPanel', STATUS_WORDS[inv.status]) if inv.status in \
                STATUS_WORDS else translate('GpuPanel', 'not readable')
            self.status_label.setText(
                translate('GpuPanel', 'No NVIDIA GPU here ({status}): {message}').format(
                    status=reason, message=core_text(inv.message)))
            self._ensure_rows(0)
            return
        driver = translate('GpuPanel', ' · driver {version}').format(
            version=inv.driver_version) if inv.driver_version else ''
        cuda = f' · CUDA {inv.cuda_driver_version}' if inv.cuda_driver_version else ''
        self.status_label.setText(translate('GpuPanel', '{n} GPU(s){driver}{cuda}').format(
            n=len(inv.gpus), driver=driver, cuda=cuda))
        self._ensure_rows(len(inv.gpus))
        for g, name, bar, reading in zip(inv.gpus, self.names, self.bars, self.readings,
                                         strict=False):
            catalog = f' → {g.catalog}' if g.catalog else ''
            name.setText(f'{g.index}: {g.name or "?"}{catalog}')
            if g.lost:
                reading.setText(translate('GpuPanel', 'lost'))
                bar.setValue(0)
                bar.setFormat(translate('GpuPanel', 'not answering'))
                continue
            used, total = g.memory_used_bytes, g.memory_total_bytes
            if used is not None and total:
                bar.setValue(round(1000 * used / total))
                bar.setFormat(f'{used / GIB:,.1f} / {total / GIB:,.1f} GiB')
            else:
                bar.setValue(0)
                bar.setFormat(translate('GpuPanel', 'memory unknown'))
            parts = []
            if g.utilization_gpu_percent is not None:
                parts.append(f'{g.utilization_gpu_percent}%')
            if g.temperature_c is not None:
                parts.append(f'{g.temperature_c} °C')
            if g.power_draw_w is not None:
                parts.append(f'{g.power_draw_w:.0f} W')
            reading.setText(' · '.join(parts))


if __name__ == '__main__':
    from PySide6.QtWidgets import QApplication

    from planner.hardware.local import probe

    app = QApplication([])
    w = GpuPanel()
    w.set_inventory(probe())
    w.show()
    app.exec()
