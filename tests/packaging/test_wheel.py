"""A real (non-editable) wheel carries the data files and works outside the source tree."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope='module')
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp('wheel')
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--quiet', '-w', str(out),
                    str(ROOT)], check=True, capture_output=True, text=True)
    (wheel,) = out.glob('batchfit-*.whl')
    return wheel


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
        'from planner.cli import main;'
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
