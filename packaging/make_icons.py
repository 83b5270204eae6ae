"""Render the hand-drawn SVG icon to the PNG, ICO and ICNS files that are committed.

Run after editing the source, ``packaging/linux/icons/hicolor/scalable/apps/<app id>.svg``::

    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/make_icons.py

Why a script and committed outputs: Linux menus want PNGs at the hicolor sizes (some
launchers ignore SVG), Windows' EXE wants an ``.ico`` and macOS' bundle an ``.icns``,
and a build host should not need Inkscape or iconutil. Qt's own ``QSvgRenderer``
(PySide6-Essentials ships QtSvg) does the rendering; ICO and ICNS are written here as
containers of PNGs, which both formats accept (Windows Vista+, macOS 10.7+), so no
Pillow is needed.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

os.environ.setdefault('QT_QPA_PLATFORM', 'offscreen')

HERE = Path(__file__).resolve().parent
APP_ID = 'io.github.batchfit.batchfit'
HICOLOR = HERE / 'linux' / 'icons' / 'hicolor'
SVG = HICOLOR / 'scalable' / 'apps' / f'{APP_ID}.svg'
PNG_SIZES_PX = (16, 24, 32, 48, 64, 128, 256, 512)
ICO = HERE / 'windows' / 'batchfit.ico'
ICO_SIZES_PX = (16, 24, 32, 48, 64, 128, 256)  # 256 is the largest an ICO entry can say
ICNS = HERE / 'macos' / 'batchfit.icns'
# ICNS element types that hold a PNG, by edge in pixels (Apple's icns format).
ICNS_TYPES = {16: b'icp4', 32: b'icp5', 64: b'icp6', 128: b'ic07', 256: b'ic08',
              512: b'ic09', 1024: b'ic10'}


def render_png(svg: Path, size_px: int) -> bytes:
    """The SVG drawn on a transparent square of ``size_px``, as PNG bytes."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f'{svg} is not a valid SVG')
    image = QImage(size_px, size_px, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, 'PNG')
    buffer.close()
    return bytes(data.data())


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """An ICO file holding one PNG per size (ICONDIR, ICONDIRENTRY..., data)."""
    sizes = sorted(pngs)
    header = struct.pack('<HHH', 0, 1, len(sizes))
    offset = len(header) + 16 * len(sizes)
    entries, blobs = b'', b''
    for size in sizes:
        data = pngs[size]
        edge = 0 if size >= 256 else size  # 0 means 256 in an ICO entry
        entries += struct.pack('<BBBBHHII', edge, edge, 0, 0, 1, 32, len(data), offset)
        blobs += data
        offset += len(data)
    return header + entries + blobs


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    """An ICNS file: ``icns`` + total length, then (type, length, PNG) elements."""
    body = b''.join(ICNS_TYPES[size] + struct.pack('>I', 8 + len(pngs[size])) + pngs[size]
                    for size in sorted(pngs))
    return b'icns' + struct.pack('>I', 8 + len(body)) + body


def main() -> int:
    """Write every icon file from the SVG."""
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841
    pngs = {size: render_png(SVG, size) for size in sorted({*PNG_SIZES_PX, *ICNS_TYPES})}
    for size in PNG_SIZES_PX:
        out = HICOLOR / f'{size}x{size}' / 'apps' / f'{APP_ID}.png'
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(pngs[size])
    ICO.parent.mkdir(parents=True, exist_ok=True)
    ICO.write_bytes(ico_bytes({s: pngs[s] for s in ICO_SIZES_PX}))
    ICNS.parent.mkdir(parents=True, exist_ok=True)
    ICNS.write_bytes(icns_bytes({s: pngs[s] for s in ICNS_TYPES}))
    for path in (*sorted(HICOLOR.rglob('*.*')), ICO, ICNS):
        print(f'{path.relative_to(HERE.parent)}  {path.stat().st_size:,} bytes')
    return 0


if __name__ == '__main__':
    sys.exit(main())
