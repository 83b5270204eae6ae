"""GUI latency: cold start to a drawn window, and an input change to an updated table and plots.

Prints a markdown table. Run offscreen::

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_gui.py

* cold start: from spawning a fresh interpreter to the window drawn with the worked
  example's plan (table, details and plots: ``plan_shown``, then ``grab()``), the child's
  exit not counted; the child asserts torch was never imported. Bytecode is cached as an
  installed app has it; one start without batchfit's bytecode is reported too.
* input change: the time from a field edit (the debounce timer is part of it) to the
  table and plots showing the new plan, for one 64-GPU and one 1,024-GPU cluster; and the
  longest time the GUI thread was blocked meanwhile (a 5 ms heartbeat timer's largest gap).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault('QT_QPA_PLATFORM', 'offscreen')
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The child reports the moment the window is drawn with the plan (table, details and the
# four plots: ``plan_shown``), then the steps it took; the parent times it from the spawn.
COLD_START = r"""
import sys, time
t0 = time.perf_counter()
marks = {}
import ui
from ui.app import make_app
app = make_app(['bench'])
from ui.main_window import MainWindow
marks['imports'] = time.perf_counter() - t0
from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer
w = MainWindow(restore=False, poll_hardware=False)
w.show()
marks['window built'] = time.perf_counter() - t0
# the real event loop until the plan is shown, a 5 ms heartbeat timing its longest block
beat, worst, loop = QElapsedTimer(), [0], QEventLoop()
heart = QTimer(interval=5)
heart.timeout.connect(lambda: worst.__setitem__(0, max(worst[0], beat.restart())))
w.plan_shown.connect(lambda _o: QTimer.singleShot(0, loop.quit))  # after its paints
beat.start()
heart.start()
loop.exec()
heart.stop()
worst[0] = max(worst[0], beat.elapsed())
w.grab()
marks['plan drawn'] = time.perf_counter() - t0
print('drawn', flush=True)
assert 'torch' not in sys.modules
print(' '.join(f'{k}={v:.3f}' for k, v in marks.items()) + f' longest_block={worst[0]}ms',
      flush=True)
w.shutdown(remember=False)
w.close()
from ui.app import dispose
dispose(w)
"""


@dataclass(frozen=True)
class ColdStart:
    """One start: seconds from the spawn to the drawn window, and the child's own steps
    (seconds from its first line: imports, window built, plan drawn; then the longest
    the GUI thread was blocked between the window shown and the plan shown)."""

    drawn_s: float
    steps: str

    @property
    def longest_block_s(self) -> float:
        return float(self.steps.rsplit('longest_block=', 1)[1].removesuffix('ms')) / 1000


def _start_once(env: dict[str, str]) -> ColdStart:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, '-c', COLD_START], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = proc.stdout.readline()
    drawn = time.perf_counter() - started
    steps = proc.stdout.readline().strip()
    proc.stdout.read()
    if proc.wait() != 0 or first.strip() != 'drawn':
        raise RuntimeError(f'the cold-start child failed (exit {proc.returncode})')
    return ColdStart(drawn, steps)


def cold_start(runs: int = 5) -> tuple[ColdStart, list[ColdStart]]:
    """The first start from a fresh checkout, then ``runs`` later starts.

    Each start is a fresh interpreter timed from the spawn to the drawn window; the
    process's exit afterwards is not counted. Bytecode goes to a temporary cache
    (``PYTHONPYCACHEPREFIX``), as Python writes it next to the sources by default and
    pip at install time, even where ``PYTHONDONTWRITEBYTECODE`` is set here. An untimed
    start fills the cache; batchfit's own bytecode is then deleted, so the first timed
    start compiles it as the first start from a fresh checkout does (the installed
    libraries come with theirs).
    """
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / 'pycache'
        env = {**os.environ, 'XDG_CONFIG_HOME': tmp, 'XDG_STATE_HOME': tmp,
               'PYTHONPYCACHEPREFIX': str(cache)}
        env.pop('PYTHONDONTWRITEBYTECODE', None)
        _start_once(env)
        ours = cache / ROOT.relative_to(ROOT.anchor)  # the cache mirrors absolute paths
        shutil.rmtree(ours)
        first = _start_once(env)
        return first, [_start_once(env) for _ in range(runs)]


FROZEN_GUI = ROOT / 'dist' / 'batchfit' / 'batchfit-gui'


def launched_to_first_plan(command: list[str], runs: int = 5,
                           timeout_s: float = 60.0) -> list[float]:
    """Seconds from spawning the real app (``command``) to its first plan on screen.

    The app runs as a user starts it (logging, translators, the NVML poll, the worked
    example from empty user folders), offscreen; the time runs to the log line it writes
    on stderr once the first plan is painted, then the app is stopped (not counted).
    One untimed start first: the files are then in the page cache, and any bytecode
    missing has been written.
    """
    from ui.main_window import FIRST_PLAN_LOG  # logged once the first plan is painted

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, 'QT_QPA_PLATFORM': 'offscreen', 'XDG_CONFIG_HOME': tmp,
               'XDG_STATE_HOME': tmp, 'XDG_DATA_HOME': tmp, 'XDG_CACHE_HOME': tmp}
        env.pop('PYTHONDONTWRITEBYTECODE', None)  # the untimed start writes what it lacks
        for i in range(runs + 1):
            started = time.perf_counter()
            proc = subprocess.Popen(command, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            watchdog = threading.Timer(timeout_s, proc.kill)  # a hang ends the reading below
            watchdog.start()
            try:
                for line in proc.stderr:
                    if FIRST_PLAN_LOG in line:
                        if i:
                            out.append(time.perf_counter() - started)
                        break
                else:
                    raise RuntimeError(f'{command[0]} showed no plan (exit {proc.wait()})')
            finally:
                watchdog.cancel()
                proc.terminate()
                proc.communicate(timeout=timeout_s)
    return out


def _run_until(app, done, check_ms: int = 0) -> None:
    """Run the real event loop (sleeping between events) until ``done()``.

    Signals call ``poke`` to re-check; ``check_ms`` > 0 also polls. A busy
    ``processEvents`` loop would hold the GIL and slow the worker it waits for.
    """
    from PySide6.QtCore import QEventLoop, QTimer

    if done():
        return
    loop = QEventLoop()

    def poke(*_args) -> None:
        if done():
            QTimer.singleShot(0, loop.quit)  # after the paints already posted

    app.poke = poke
    timer = None
    if check_ms:
        timer = QTimer()
        timer.setInterval(check_ms)
        timer.timeout.connect(poke)
        timer.start()
    loop.exec()
    if timer is not None:
        timer.stop()


def input_change(nodes: int, runs: int = 9) -> tuple[list[float], float, list[float]]:
    """Seconds from an edit to the updated table and plots; the longest GUI-thread stall.

    An edit counts as done when the window has shown the new plan (``plan_shown``: table,
    details and every plot set) and Qt has painted it (the loop quits after the posted
    paints). The stall is the largest gap of a 5 ms heartbeat timer on the GUI thread
    over that whole time, painting included, measured on separate edits (the heartbeat
    itself takes the GIL from the search every 5 ms).
    """
    from PySide6.QtCore import QElapsedTimer, QTimer

    from ui.app import make_app
    from ui.main_window import MainWindow

    app = make_app(['bench'])
    with tempfile.TemporaryDirectory() as tmp:
        from PySide6.QtCore import QSettings

        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, tmp)
        w = MainWindow(restore=False, poll_hardware=False)
        w.resize(1600, 1000)
        w.show()
        w.inputs.nodes_spin.setValue(nodes)
        w.inputs.gpus_per_node_spin.setValue(8)
        shown = []
        w.plan_shown.connect(lambda o: (shown.append(o.inputs), app.poke()))

        def wait_shown(batch: int) -> None:
            _run_until(app, lambda: bool(shown) and shown[-1].batch_value == batch
                       and shown[-1].nodes == nodes)

        def wait_idle() -> None:  # the batch sweep too (not timed: polled)
            _run_until(app, lambda: not w.updating and w.outcome.by_batch.x.size > 0, 20)

        wait_shown(1024)
        wait_idle()
        times, stalls, sweeps = [], [], []
        beat = QElapsedTimer()
        worst = [0.0]

        def heartbeat() -> None:
            worst[0] = max(worst[0], beat.restart() / 1000.0)

        heart = QTimer()
        heart.setInterval(5)
        heart.timeout.connect(heartbeat)
        for i in range(2 * runs):
            timed = i < runs
            batch = 1024 + 256 * ((i % 2) + 1)
            if not timed:
                worst[0] = 0.0
                beat.start()
                heart.start()
            started = time.perf_counter()
            w.inputs.batch_edit.setText(str(batch))
            wait_shown(batch)
            if timed:
                times.append(time.perf_counter() - started)
            else:
                heart.stop()
                stalls.append(worst[0])
            wait_idle()
            if timed:
                sweeps.append(time.perf_counter() - started)
            w.inputs.batch_edit.setText('1024')
            wait_shown(1024)
            wait_idle()
        grid, fitting = w.outcome.result.grid_size, w.outcome.result.fitting
        w.shutdown(remember=False)
        from ui.app import dispose

        dispose(w)
    print(f'<!-- {nodes * 8} GPUs: grid {grid:,}, fitting {fitting:,}; '
          f'times {[round(t, 3) for t in times]} -->')
    return times, statistics.median(stalls), sweeps


def main() -> int:
    """Print the markdown table."""
    rows = []
    first, starts = cold_start()
    drawn = [c.drawn_s for c in starts]
    print(f'<!-- cold start: first {first.drawn_s:.3f} s ({first.steps}); then '
          f'{[round(t, 3) for t in drawn]} s -->', flush=True)
    for c in starts:
        print(f'<!--   {c.drawn_s:.3f} s: {c.steps} -->', flush=True)
    block = statistics.median(c.longest_block_s for c in starts)
    rows.append(('cold start to the drawn window and plan (worked example, 8 GPUs)',
                 f'{statistics.median(drawn):.2f} s', f'{min(drawn):.2f} s', '–',
                 f'{block * 1000:.0f} ms'))
    rows.append(("the same, first start before batchfit's bytecode is compiled",
                 f'{first.drawn_s:.2f} s', '–', '–', '–'))
    apps = (('`batchfit-gui` (this environment), to its first plan on screen',
             Path(sys.executable).with_name('batchfit-gui')),
            ('frozen build (`make dist`), to its first plan on screen', FROZEN_GUI))
    for label, gui in apps:
        if not gui.exists():
            continue
        times = launched_to_first_plan([str(gui)])
        print(f'<!-- {label}: {[round(t, 3) for t in times]} s -->', flush=True)
        rows.append((label, f'{statistics.median(times):.2f} s', f'{min(times):.2f} s',
                     '–', '–'))
    for nodes in (8, 128):
        times, stall, sweeps = input_change(nodes)
        rows.append((f'input change to updated table and plots, {nodes * 8:,} GPUs',
                     f'{statistics.median(times):.2f} s', f'{min(times):.2f} s',
                     f'{statistics.median(sweeps):.2f} s', f'{stall * 1000:.0f} ms'))
    print('| measurement | median | best | + batch-sweep plot (median) '
          '| longest GUI-thread stall (median of runs) |')
    print('|---|---|---|---|---|')
    for row in rows:
        print('| ' + ' | '.join(row) + ' |')
    print()
    print('Offscreen (QT_QPA_PLATFORM=offscreen). A cold start runs from spawning a fresh '
          'interpreter to the window drawn with the worked example\'s plan in the table, '
          'the detail panel and the four plots (the process\'s exit is not counted), with '
          'the bytecode cached as an installed app has it; the first start compiles '
          'batchfit\'s own bytecode (`make run` and pip compile it at install). '
          'Its stall runs from the window shown to the plan shown (the first paint of the '
          'whole window included). '
          'The `batchfit-gui` rows start the real app as a user does (logging, translators, '
          'the NVML poll, empty user folders) and time it to the log line it writes once '
          'its first plan is painted. '
          'An input change runs from setting the '
          'field (no debounce: 0 ms) to the new plan painted in the table, the '
          'detail panel and the four plots; the time-vs-global-batch curve (4 more '
          'searches) follows. The stall is the largest gap of a 5 ms heartbeat timer on the '
          'GUI thread during an input change, painting included (median over the runs; '
          'measured on separate edits, as the heartbeat slows the search). The busy bar '
          'appears only after 300 ms.')
    return 0


if __name__ == '__main__':
    sys.exit(main())
