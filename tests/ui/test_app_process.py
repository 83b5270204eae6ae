"""``batchfit-gui`` as a separate process: no torch, a screenshot, a clean exit.

A start loads only what the first plan needs: torch never, and neither the launcher
exporters (loaded when their dialog opens) nor numpy.ma (20 ms; ``np.unique`` without
``return_*`` imports it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_screenshot_without_torch(tmp_path):
    shot = tmp_path / 'shot.png'
    env = {**os.environ, 'QT_QPA_PLATFORM': 'offscreen', 'XDG_CONFIG_HOME': str(tmp_path),
           'XDG_STATE_HOME': str(tmp_path), 'XDG_CACHE_HOME': str(tmp_path)}
    code = ('import sys\n'
            'from ui.app import main\n'
            f'rc = main(["--screenshot", {str(shot)!r}, "--size", "1200x800"])\n'
            'loaded = [m for m in ("torch", "planner.export", "planner.calibrate.runner",\n'
            '                      "numpy.ma") if m in sys.modules]\n'
            'print("loaded:", *loaded, file=sys.stderr)\n'
            'sys.exit(rc or (3 if loaded else 0))\n')
    proc = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert 'loaded:\n' in proc.stderr, proc.stderr  # nothing on the list was imported
    assert proc.returncode == 0, proc.stderr
    assert shot.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert 'Traceback' not in proc.stderr
