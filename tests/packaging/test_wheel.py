"""The wheel and sdist as ``python -m build`` makes them, and the wheel installed.

``python -m build`` builds the sdist, then the wheel from the sdist, so a file the
sdist forgets breaks the wheel here. The installed wheel runs from a fresh venv (what
``pipx install`` makes), away from the source tree: both commands work, the GUI renders
offscreen, and torch stays out unless the ``calibrate`` extra is asked for.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SDIST_REQUIRED = ('pyproject.toml', 'README.md', 'resources/gpus.toml', 'resources/models.toml',
                  'resources/interconnects.toml', 'planner/__init__.py', 'ui/app.py',
                  'packaging/linux/io.github.batchfit.batchfit.desktop',
                  'packaging/batchfit.spec', 'tests/conftest.py')
JUNK_PARTS = ('.venv', '.venv-dist', '.venv-bench', '__pycache__', '.git', '.pytest_cache',
              '.ruff_cache', '.hypothesis', 'dist', 'build')


@pytest.fixture(scope='module')
def built(tmp_path_factory) -> dict[str, Path]:
    """{'wheel': ..., 'sdist': ...} from ``python -m build`` (sdist first, wheel from it)."""
    out = tmp_path_factory.mktemp('build')
    done = subprocess.run([sys.executable, '-m', 'build', '--outdir', str(out), str(ROOT)],
                          capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob('batchfit-*.whl')
    (sdist,) = out.glob('batchfit-*.tar.gz')
    return {'wheel': wheel, 'sdist': sdist}


@pytest.fixture(scope='module')
def wheel(built) -> Path:
    return built['wheel']


@pytest.fixture(scope='module')
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed, as pipx would make it (its bin folder)."""
    folder = tmp_path_factory.mktemp('venv') / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', str(folder)], check=True, timeout=300)
    done = subprocess.run([str(folder / 'bin' / 'python'), '-m', 'pip', 'install', '--quiet',
                           str(wheel)], capture_output=True, text=True, check=False,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / 'bin'


def isolated_env(home: Path) -> dict[str, str]:
    """No user file read or written; Qt offscreen."""
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / 'config'),
               XDG_DATA_HOME=str(home / 'data'), XDG_STATE_HOME=str(home / 'state'),
               QT_QPA_PLATFORM='offscreen')
    return env


@pytest.mark.slow
def test_wheel_contains_the_resources(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for data in ('gpus.toml', 'interconnects.toml', 'models.toml'):
        assert f'planner/_resources/{data}' in names
    assert not any(name.startswith('tests/') for name in names)


@pytest.mark.slow
def test_installed_wheel_runs_away_from_the_source_tree(wheel, tmp_path):
    site = tmp_path / 'site'
    subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', '--quiet', '--target',
                    str(site), str(wheel)], check=True, capture_output=True, text=True)
    probe = (
        'import sys, json; sys.path.insert(0, sys.argv[1]);'
        'import planner, planner.resources as r;'
        'from planner.cli.main import main;'
        'print(json.dumps({"file": planner.__file__, "res": str(r.resources_dir())}));'
        'sys.exit(main(["estimate", "--model", "gpt2", "--seq-len", "128", "--micro-batch", "1",'
        '"--gpu", "a100-80g-sxm", "--json"]))'
    )
    done = subprocess.run([sys.executable, '-c', probe, str(site)], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    where, report = done.stdout.split('\n', 1)
    paths = json.loads(where)
    assert paths['file'].startswith(str(site))
    assert paths['res'].startswith(str(site))
    assert json.loads(report)['model']['parameters'] == 124_439_808


@pytest.mark.slow
def test_sdist_has_what_a_build_needs_and_no_junk(built):
    with tarfile.open(built['sdist']) as tar:
        names = [n.split('/', 1)[1] for n in tar.getnames() if '/' in n]
    for required in SDIST_REQUIRED:
        assert required in names
    junk = [n for n in names
            if set(Path(n).parts) & set(JUNK_PARTS) or n.endswith(('.pyc', '.so', '.whl'))]
    assert junk == []


@pytest.mark.slow
def test_wheel_metadata_keeps_torch_in_extras(wheel):
    with zipfile.ZipFile(wheel) as archive:
        meta_name = next(n for n in archive.namelist() if n.endswith('.dist-info/METADATA'))
        meta = Parser().parsestr(archive.read(meta_name).decode())
        entry_points = archive.read(meta_name.replace('METADATA', 'entry_points.txt')).decode()
        names = archive.namelist()
    from packaging.requirements import Requirement

    requires = [Requirement(r) for r in meta.get_all('Requires-Dist')]
    torch = [r for r in requires if r.name == 'torch']
    assert torch  # declared...
    assert not any(r.marker is None or r.marker.evaluate({'extra': ''}) for r in torch)
    assert any(r.marker.evaluate({'extra': 'calibrate'}) for r in torch)  # ...behind extras
    assert 'calibrate' in meta.get_all('Provides-Extra')
    assert 'batchfit = planner.cli.main:main' in entry_points
    assert '[gui_scripts]' in entry_points
    assert 'batchfit-gui = ui.app:main' in entry_points
    assert 'ui/_desktop/io.github.batchfit.batchfit.desktop' in names
    assert 'ui/_desktop/icons/hicolor/scalable/apps/io.github.batchfit.batchfit.svg' in names


@pytest.mark.slow
def test_installed_wheel_has_no_torch(venv):
    probe = 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is not None)'
    assert subprocess.run([str(venv / 'python'), '-c', probe], check=False).returncode == 0


@pytest.mark.slow
def test_installed_commands_run(venv, tmp_path):
    from planner import __version__

    env = isolated_env(tmp_path)
    version = subprocess.run([str(venv / 'batchfit'), '--version'], env=env, cwd=tmp_path,
                             capture_output=True, text=True, check=True, timeout=120)
    assert version.stdout.strip() == f'batchfit {__version__}'
    estimate = subprocess.run(
        [str(venv / 'batchfit'), 'estimate', '--model', 'gpt2', '--seq-len', '128',
         '--micro-batch', '1', '--gpu', 'a100-80g-sxm', '--json'],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(estimate.stdout)['model']['parameters'] == 124_439_808
    paths = subprocess.run([str(venv / 'batchfit'), 'paths', '--json'], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(paths.stdout)['gui_settings'] == str(
        tmp_path / 'config' / 'batchfit' / 'batchfit.ini')


@pytest.mark.slow
def test_installed_gui_renders_offscreen(venv, tmp_path, qapp):
    from tests.packaging.test_dist_scripts import smoke_test

    shot = tmp_path / 'shot.png'
    done = subprocess.run([str(venv / 'batchfit-gui'), '--screenshot', str(shot)],
                          env=isolated_env(tmp_path), cwd=tmp_path, capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert smoke_test.fatal_markers(done.stdout + done.stderr) == []
    assert smoke_test.image_problems(shot, (1600, 1000)) == []


@pytest.mark.slow
def test_installed_gui_adds_itself_to_the_menu(venv, tmp_path):
    env = isolated_env(tmp_path)
    subprocess.run([str(venv / 'batchfit-gui'), '--install-desktop'], env=env, cwd=tmp_path,
                   capture_output=True, text=True, check=True, timeout=120)
    entry = (tmp_path / 'data' / 'applications' / 'io.github.batchfit.batchfit.desktop')
    assert f'Exec={venv / "batchfit-gui"} %f' in entry.read_text(encoding='utf-8').splitlines()
    subprocess.run([str(venv / 'batchfit-gui'), '--uninstall-desktop'], env=env, cwd=tmp_path,
                   capture_output=True, text=True, check=True, timeout=120)
    assert not entry.exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which('pipx') is None, reason='pipx not installed (a venv + pip, '
                                                         'tested above, is what it does)')
def test_pipx_install_gives_both_commands(wheel, tmp_path):
    env = dict(isolated_env(tmp_path), PIPX_HOME=str(tmp_path / 'pipx'),
               PIPX_BIN_DIR=str(tmp_path / 'bin'))
    subprocess.run(['pipx', 'install', str(wheel)], env=env, capture_output=True, text=True,
                   check=True, timeout=900)
    for command in ('batchfit', 'batchfit-gui'):
        assert (tmp_path / 'bin' / command).exists()
    done = subprocess.run([str(tmp_path / 'bin' / 'batchfit'), '--version'], env=env,
                          capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.startswith('batchfit ')
