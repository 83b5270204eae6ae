"""batchfit's desktop app (PySide6 + pyqtgraph) on top of the Qt-free ``planner`` core.

PySide6 is imported before pyqtgraph so that pyqtgraph binds to it, never to a stray
PyQt6 (pyqtgraph/Qt/__init__.py tries PyQt6 first).
"""

from __future__ import annotations

import os

os.environ.setdefault('PYQTGRAPH_QT_LIB', 'PySide6')

# isort: off
import PySide6  # noqa: F401  (before pyqtgraph: it picks the binding on import)
import pyqtgraph
# isort: on

pyqtgraph.setConfigOptions(antialias=True, useOpenGL=False, background='w', foreground='k')

APP_ID = 'io.github.batchfit.batchfit'
ORG_NAME = 'batchfit'
APP_NAME = 'batchfit'
