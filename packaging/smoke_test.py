"""Smoke test of the frozen folder: the binaries start, plan, render, and exit 0.

``make smoke`` runs it after ``make dist`` (the pattern of Friture's
scripts/smoke_test.py, github.com/tlecomte/friture)::

    python packaging/smoke_test.py [dist/batchfit] [--python-with-torch PATH]

1. ``batchfit --version`` prints this version;
2. ``batchfit plan ... --save example.plan.json`` writes a ``batchfit.plan/N`` file;
3. ``batchfit-gui --screenshot shot.png example.plan.json`` with
   ``QT_QPA_PLATFORM=offscreen`` renders the window and exits 0; the PNG must be the
   requested size and not blank (pixel spread, colour count);
4. ``batchfit calibrate`` with no Python with torch on ``PATH`` says so in one line and
   exits 2 (the frozen build has no interpreter of its own);
5. with ``--python-with-torch``, a short CPU calibration through that interpreter and
   the bundled ``planner`` source saves a profile.

Every run fails on the markers of a broken freeze (a traceback, a module or Qt plugin
that did not load, an undefined symbol). User folders point into a temporary folder,
so nothing of the user's is read or written.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FATAL_MARKERS = ('Traceback', 'ModuleNotFoundError', 'ImportError',
                 'could not load the Qt platform plugin', 'Could not load the Qt platform plugin',
                 'undefined symbol', 'Failed to execute script', 'Segmentation fault',
                 'cannot open shared object file')
SHOT_SIZE_PX = (1600, 1000)
RUN_TIMEOUT_S = 180
PLAN_ARGS = ('plan', '--model', 'llama-3.1-8b', '--seq-len', '4096', '--gpu', 'h100-sxm',
             '--nodes', '2', '--gpus-per-node', '8', '--global-batch', '256',
             '--tokens', '10B', '--top', '3')
# A two-layer Llama as a Hugging Face config.json: the calibration takes seconds, not a
# minute as GPT-2 would (tests/planner/calibration_helpers.TINY_CONFIG).
TINY_CONFIG = {'model_type': 'llama', 'num_hidden_layers': 2, 'hidden_size': 64,
               'num_attention_heads': 4, 'num_key_value_heads': 4, 'intermediate_size': 256,
               'vocab_size': 512, 'max_position_embeddings': 256}


class SmokeError(RuntimeError):
    """A check of the frozen build failed."""


def fatal_markers(text: str) -> list[str]:
    """The markers of a broken freeze that ``text`` contains."""
    return [marker for marker in FATAL_MARKERS if marker in text]


def run(command: list[str], env: dict[str, str], cwd: Path, expect_code: int = 0
        ) -> subprocess.CompletedProcess[str]:
    """Run one frozen command; raise SmokeError on a wrong exit code or a fatal marker."""
    started = time.monotonic()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, check=False)
    output = done.stdout + done.stderr
    print(f'smoke: {" ".join(Path(c).name if i == 0 else c for i, c in enumerate(command))}'
          f' -> {done.returncode} in {time.monotonic() - started:.1f} s', flush=True)
    markers = fatal_markers(output)
    if done.returncode != expect_code or markers:
        raise SmokeError(f'{command[0]} exited {done.returncode} (expected {expect_code})'
                           f'{"; found " + ", ".join(markers) if markers else ""}:\n'
                           f'{output[-4000:]}')
    return done


def image_problems(path: Path, size_px: tuple[int, int]) -> list[str]:
    """Why the PNG at ``path`` is not a real screenshot of ``size_px`` (empty: it is).

    Blank means one flat colour or nearly: the grey levels of a grid of samples must
    spread (standard deviation) and take many values, which a window with a table,
    text and plots always does.
    """
    os.environ.setdefault('QT_QPA_PLATFORM', 'offscreen')
    from PySide6.QtGui import QImage

    image = QImage(str(path))
    if image.isNull():
        return [f'{path} is not a readable image']
    found = []
    if (image.width(), image.height()) != size_px:
        found.append(f'{image.width()}x{image.height()} pixels, expected '
                     f'{size_px[0]}x{size_px[1]}')
    step = 7
    greys = [image.pixelColor(x, y).lightness()
             for y in range(0, image.height(), step) for x in range(0, image.width(), step)]
    mean = sum(greys) / len(greys)
    spread = (sum((g - mean) ** 2 for g in greys) / len(greys)) ** 0.5
    if spread < 10 or len(set(greys)) < 32:
        found.append(f'looks blank: grey spread {spread:.1f}, {len(set(greys))} grey levels')
    return found


def isolated_env(home: Path) -> dict[str, str]:
    """This environment with every user folder inside ``home`` and Qt offscreen."""
    env = dict(os.environ)
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / 'config'),
               XDG_DATA_HOME=str(home / 'data'), XDG_STATE_HOME=str(home / 'state'),
               XDG_CACHE_HOME=str(home / 'cache'), BATCHFIT_CONFIG_DIR=str(home / 'bf-config'),
               BATCHFIT_DATA_DIR=str(home / 'bf-data'), QT_QPA_PLATFORM='offscreen')
    for key in ('PYTHONPATH', 'PYTHONHOME', 'VIRTUAL_ENV'):
        env.pop(key, None)
    return env


def smoke(folder: Path, python_with_torch: str | None) -> None:
    """All the checks; raises SmokeError at the first that fails."""
    cli, gui = folder / 'batchfit', folder / 'batchfit-gui'
    with tempfile.TemporaryDirectory(prefix='batchfit-smoke-') as tmp:
        work = Path(tmp)
        env = isolated_env(work)
        from_version = run([str(cli), '--version'], env, work).stdout.strip()
        expected = (ROOT / 'planner' / '__init__.py').read_text(encoding='utf-8')
        if from_version.split()[-1] not in expected:
            raise SmokeError(f'unexpected version line: {from_version!r}')

        plan = work / 'example.plan.json'
        run([str(cli), *PLAN_ARGS, '--save', str(plan)], env, work)
        schema = str(json.loads(plan.read_text(encoding='utf-8')).get('schema'))
        if not schema.startswith('batchfit.plan/'):  # docs/plan-file.md
            raise SmokeError(f'{plan.name} has schema {schema!r}')

        shot = work / 'shot.png'
        size = f'{SHOT_SIZE_PX[0]}x{SHOT_SIZE_PX[1]}'
        run([str(gui), '--screenshot', str(shot), '--size', size, str(plan)], env, work)
        found = image_problems(shot, SHOT_SIZE_PX)
        if found:
            raise SmokeError('the screenshot: ' + '; '.join(found))
        print(f'smoke: screenshot {shot.stat().st_size:,} bytes, {size}, not blank')

        no_torch = dict(env, PATH=str(work / 'empty-path'))
        tiny = work / 'config.json'
        tiny.write_text(json.dumps(TINY_CONFIG), encoding='utf-8')
        calibrate = [str(cli), 'calibrate', '--device', 'cpu', '--model', str(tiny),
                     '--seq-len', '64']
        told = run(calibrate, no_torch, work, expect_code=2).stderr
        if 'pip install torch' not in told:
            raise SmokeError(f'no install hint without torch: {told!r}')

        if python_with_torch:
            run([*calibrate, '--python', python_with_torch, '--repeats', '1',
                 '--micro-batches', '1,2', '--json'], env, work)
            profiles = list((work / 'bf-data').rglob('*.json'))
            if not profiles:
                raise SmokeError('the calibration through another Python saved no profile')
            print(f'smoke: calibration through {python_with_torch} saved {profiles[0].name}')


def main(argv: list[str] | None = None) -> int:
    """Entry point: exit 0 when every check passes."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('folder', nargs='?', type=Path, default=ROOT / 'dist' / 'batchfit')
    parser.add_argument('--python-with-torch', metavar='PATH',
                        help='also calibrate on the CPU through this interpreter')
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        torch_python = args.python_with_torch and os.path.abspath(args.python_with_torch)
        smoke(args.folder.resolve(), torch_python)  # abspath: a venv's python is a link
    except (SmokeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
        print(f'smoke: FAILED: {exc}', file=sys.stderr)
        return 1
    print(f'smoke: passed in {time.monotonic() - started:.1f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
