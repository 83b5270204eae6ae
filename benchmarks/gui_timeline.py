"""Where an edit's time goes in the window: search, first drawing turn, all turns, paint.

Run offscreen from the repository root::

    QT_QPA_PLATFORM=offscreen python -m benchmarks.gui_timeline [--nodes 8] [--runs 8]

Each row is one edit of the global batch (1280 or 1536, then back to 1024), timed from
the edit: ``search`` ends when the worker's search returns; ``table`` when the first
drawing turn (table, details, memory plot) has run; ``shown`` when every turn has run;
``painted`` when Qt has painted the last one. Medians over the runs at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault('QT_QPA_PLATFORM', 'offscreen')
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_gui import _run_until

PHASES = ('search', 'table', 'shown', 'painted')


def main(argv: list[str] | None = None) -> int:
    """Print one line per edit and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--nodes', type=int, default=8, help='nodes of 8 GPUs')
    parser.add_argument('--runs', type=int, default=8)
    args = parser.parse_args(argv)

    import ui.controllers.plan_controller as plan_controller
    from ui.app import dispose, make_app
    from ui.main_window import MainWindow

    app = make_app(['timeline'])
    marks: dict[str, float] = {}
    started = [0.0]

    def mark(name: str) -> None:
        marks.setdefault(name, time.perf_counter() - started[0])

    search = plan_controller.compute_main

    def timed_search(*a, **k):
        result = search(*a, **k)
        mark('search')
        return result

    plan_controller.compute_main = timed_search
    w = MainWindow(restore=False, poll_hardware=False)
    w.inputs.nodes_spin.setValue(args.nodes)
    w.resize(1600, 1000)
    w.show()
    w.controller.outcome_ready.connect(lambda _o: mark('table'))  # after the first turn
    w.plan_shown.connect(lambda _o: (mark('shown'), app.poke()))
    _run_until(app, lambda: w.outcome is not None and not w.updating, 20)
    rows = []
    for i in range(args.runs):
        batch = (1280, 1536)[i % 2]
        for value in (batch, 1024):
            marks.clear()
            started[0] = time.perf_counter()
            w.inputs.batch_edit.setText(str(value))
            _run_until(app, lambda v=value: 'shown' in marks
                       and w.outcome.inputs.batch_value == v)
            mark('painted')
            if value != 1024:
                rows.append([marks[p] * 1000 for p in PHASES])
                print(f'batch {value}: ' + ' | '.join(
                    f'{p} {marks[p] * 1000:.0f} ms' for p in PHASES))
            _run_until(app, lambda: not w.updating, 20)
    print('median: ' + ' | '.join(f'{p} {statistics.median(r[i] for r in rows):.0f} ms'
                                  for i, p in enumerate(PHASES)))
    w.shutdown(remember=False)
    dispose(w)
    plan_controller.compute_main = search
    return 0


if __name__ == '__main__':
    sys.exit(main())
