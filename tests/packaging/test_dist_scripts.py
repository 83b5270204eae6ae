"""The pieces of ``make dist`` and ``make smoke`` that decide pass or fail.

The frozen build itself is exercised by ``make dist smoke`` (CI runs both); these tests
check that its checks can fail: a blank screenshot, a traceback, torch in the folder, a
dangling link, an archive that loses PyInstaller's symbolic links.
"""

from __future__ import annotations

import importlib.util
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / 'packaging' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


smoke_test = _load('smoke_test')
build_dist = _load('build_dist')


def test_fatal_markers_are_found():
    assert smoke_test.fatal_markers('all good\n') == []
    broken = ('Traceback (most recent call last):\nModuleNotFoundError: No module named "x"\n'
              'qt.qpa.plugin: Could not load the Qt platform plugin "xcb"')
    assert smoke_test.fatal_markers(broken) == [
        'Traceback', 'ModuleNotFoundError', 'Could not load the Qt platform plugin']


def _image(tmp_path, size, draw):
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QImage, QPainter

    image = QImage(*size, QImage.Format.Format_RGB32)
    image.fill(QColor('white'))
    painter = QPainter(image)
    draw(painter, Qt, QColor)
    painter.end()
    path = tmp_path / 'shot.png'
    image.save(str(path))
    return path


def test_a_blank_screenshot_fails(qapp, tmp_path):
    blank = _image(tmp_path, (320, 200), lambda *_: None)
    problems = smoke_test.image_problems(blank, (320, 200))
    assert len(problems) == 1
    assert 'blank' in problems[0]
    assert 'expected 640x400' in smoke_test.image_problems(blank, (640, 400))[0]
    assert smoke_test.image_problems(tmp_path / 'missing.png', (1, 1)) == [
        f'{tmp_path / "missing.png"} is not a readable image']


def test_a_busy_screenshot_passes(qapp, tmp_path):
    def draw(painter, _qt, color):
        for x in range(0, 320, 8):  # blocks of many greys, as text, a table and plots give
            for y in range(0, 200, 8):
                painter.fillRect(x, y, 8, 8, color.fromHsl(0, 0, (x + 3 * y) % 256))

    busy = _image(tmp_path, (320, 200), draw)
    assert smoke_test.image_problems(busy, (320, 200)) == []


def _fake_build(folder: Path) -> Path:
    internal = folder / '_internal'
    for name in build_dist.REQUIRED:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('x', encoding='utf-8')
    (internal / 'lib').mkdir()
    (internal / 'lib' / 'libQt6Core.so.6').write_bytes(b'\0' * 1000)
    (internal / 'libQt6Core.so.6').symlink_to('lib/libQt6Core.so.6')
    return folder


def test_a_clean_folder_has_no_problems(tmp_path):
    assert build_dist.problems(_fake_build(tmp_path / 'batchfit')) == []


def test_torch_qtnetwork_dangling_links_and_missing_files_are_problems(tmp_path):
    folder = _fake_build(tmp_path / 'batchfit')
    (folder / '_internal' / 'torch').mkdir()
    (folder / '_internal' / 'PySide6').mkdir()
    (folder / '_internal' / 'PySide6' / 'QtNetwork.abi3.so').write_bytes(b'')
    (folder / '_internal' / 'libgone.so').symlink_to('lib/libgone.so')
    (folder / 'batchfit-gui').unlink()
    assert sorted(build_dist.problems(folder)) == [
        'dangling link: _internal/libgone.so', 'missing: batchfit-gui',
        'must not ship: _internal/PySide6/QtNetwork.abi3.so', 'must not ship: _internal/torch']


def test_the_archive_keeps_links_and_sizes_count_them_once(tmp_path):
    folder = _fake_build(tmp_path / 'batchfit')
    archive = tmp_path / 'out.tar.gz'
    build_dist.make_archive(folder, archive)
    with tarfile.open(archive) as tar:
        link = tar.getmember('batchfit/_internal/libQt6Core.so.6')
        assert link.issym()
        assert link.linkname == 'lib/libQt6Core.so.6'
        assert {m.uid for m in tar.getmembers()} == {0}
    assert 1000 < build_dist.folder_bytes(folder) < 1200  # the library once, plus small files


def test_archive_name_carries_version_and_platform():
    from planner import __version__

    name = build_dist.archive_name()
    assert name.startswith(f'batchfit-{__version__}-')
    assert name.endswith('.tar.gz')


@pytest.mark.parametrize('name', ['libc.so.6', 'libdefinitely-not-here.so.99'])
def test_missing_host_libraries_asks_the_loader(name):
    missing = build_dist.missing_host_libraries((name,))
    if name == 'libc.so.6':
        assert missing == []
    else:
        assert missing in ([name], [])  # [] off Linux or without ldconfig
