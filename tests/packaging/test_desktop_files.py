"""The Linux desktop entry, AppStream metainfo and icons: consistent, valid, installable.

The structural checks always run (pure Python plus QImage); ``desktop-file-validate``
and ``appstreamcli validate`` run when installed (``apt-get install desktop-file-utils
appstream``), as the validators a distribution or Flathub would apply.
"""

from __future__ import annotations

import configparser
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import ui
from planner import __version__
from planner.toml_compat import tomllib
from ui import desktop_entry

ROOT = Path(__file__).resolve().parents[2]
LINUX = ROOT / 'packaging' / 'linux'
APP_ID = 'io.github.batchfit.batchfit'
DESKTOP = LINUX / f'{APP_ID}.desktop'
METAINFO = LINUX / f'{APP_ID}.metainfo.xml'
HICOLOR = LINUX / 'icons' / 'hicolor'
PNG_SIZES_PX = (16, 24, 32, 48, 64, 128, 256, 512)


def desktop_entry_of(text: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in a .desktop file
    parser.read_string(text)
    return dict(parser['Desktop Entry'])


def test_one_app_id_everywhere():
    assert ui.APP_ID == desktop_entry.APP_ID == APP_ID
    entry = desktop_entry_of(DESKTOP.read_text(encoding='utf-8'))
    assert entry['Icon'] == entry['StartupWMClass'] == APP_ID
    root = ET.parse(METAINFO).getroot()
    assert root.findtext('id') == APP_ID
    assert root.find('launchable').text == DESKTOP.name
    assert root.find('launchable').get('type') == 'desktop-id'


def test_desktop_entry_has_what_menus_need():
    entry = desktop_entry_of(DESKTOP.read_text(encoding='utf-8'))
    assert entry['Type'] == 'Application'
    assert entry['Terminal'] == 'false'
    assert entry['Exec'].split()[0] == entry['TryExec'] == 'batchfit-gui'
    assert entry['Exec'].endswith(' %f')  # batchfit-gui opens one plan file
    assert 'Development' in entry['Categories'].split(';')
    assert entry['Categories'].endswith(';')
    assert entry['Keywords'].endswith(';')


def test_metainfo_matches_the_project():
    root = ET.parse(METAINFO).getroot()
    assert root.get('type') == 'desktop-application'
    project = tomllib.loads((ROOT / 'pyproject.toml').read_text(encoding='utf-8'))['project']
    assert root.findtext('project_license') == project['license']
    assert root.findtext('metadata_license') == 'CC0-1.0'
    assert root.find('content_rating').get('type') == 'oars-1.1'
    assert root.find('releases/release').get('version') == __version__  # newest first
    assert root.find("url[@type='homepage']").text == project['urls']['Homepage']
    binaries = {b.text for b in root.findall('provides/binary')}
    assert binaries == set(project['scripts']) | set(project['gui-scripts'])
    assert root.find('description/p').text.strip()


def test_every_png_size_is_there_and_has_its_size(qapp):
    from PySide6.QtGui import QImage

    for size in PNG_SIZES_PX:
        image = QImage(str(HICOLOR / f'{size}x{size}' / 'apps' / f'{APP_ID}.png'))
        assert (image.width(), image.height()) == (size, size)
        assert image.hasAlphaChannel()
        corner, centre = image.pixelColor(0, 0), image.pixelColor(size // 2, size * 3 // 4)
        assert corner.alpha() == 0
        assert centre.alpha() == 255


def test_svg_renders(qapp):
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(HICOLOR / 'scalable' / 'apps' / f'{APP_ID}.svg'))
    assert renderer.isValid()
    assert renderer.defaultSize().width() == renderer.defaultSize().height() == 256


def test_ico_and_icns_hold_pngs_of_the_sizes_they_claim():
    ico = (ROOT / 'packaging' / 'windows' / 'batchfit.ico').read_bytes()
    reserved, kind, count = struct.unpack_from('<HHH', ico)
    assert (reserved, kind) == (0, 1)
    assert count >= 5
    edges = []
    for i in range(count):
        width, _h, _c, _r, _planes, _bits, size, offset = struct.unpack_from(
            '<BBBBHHII', ico, 6 + 16 * i)
        assert ico[offset:offset + 8] == b'\x89PNG\r\n\x1a\n'
        assert offset + size <= len(ico)
        edges.append(width or 256)
    assert {16, 32, 48, 256} <= set(edges)

    icns = (ROOT / 'packaging' / 'macos' / 'batchfit.icns').read_bytes()
    assert icns[:4] == b'icns'
    assert struct.unpack_from('>I', icns, 4)[0] == len(icns)
    kinds, at = [], 8
    while at < len(icns):
        kind, length = icns[at:at + 4], struct.unpack_from('>I', icns, at + 4)[0]
        assert icns[at + 8:at + 16] == b'\x89PNG\r\n\x1a\n'
        kinds.append(kind)
        at += length
    assert at == len(icns)
    assert {b'ic07', b'ic08', b'ic09', b'ic10'} <= set(kinds)  # 128 to 1024 px


@pytest.mark.skipif(shutil.which('desktop-file-validate') is None,
                    reason='desktop-file-validate not installed (apt-get install '
                           'desktop-file-utils)')
def test_desktop_file_validate_accepts_it(tmp_path):
    installed = tmp_path / DESKTOP.name
    installed.write_text(desktop_entry.desktop_entry_text(
        DESKTOP.read_text(encoding='utf-8'), '/opt/batch fit/batchfit-gui'), encoding='utf-8')
    for path in (DESKTOP, installed):  # as shipped, and as --install-desktop writes it
        done = subprocess.run(['desktop-file-validate', str(path)], capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not done.stdout.strip(), done.stdout  # no warnings or hints either


@pytest.mark.skipif(shutil.which('appstreamcli') is None,
                    reason='appstreamcli not installed (apt-get install appstream)')
def test_appstreamcli_validates_the_metainfo():
    done = subprocess.run(['appstreamcli', 'validate', '--no-net', str(METAINFO)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_install_and_uninstall_into_a_data_home(tmp_path):
    launcher = str(tmp_path / 'my apps' / 'batchfit-gui')
    written = desktop_entry.install(tmp_path / 'share', launcher=launcher)
    share = tmp_path / 'share'
    entry_path = share / 'applications' / DESKTOP.name
    assert entry_path in written
    assert (share / 'metainfo' / METAINFO.name).read_bytes() == METAINFO.read_bytes()
    for size in PNG_SIZES_PX:
        assert (share / 'icons' / 'hicolor' / f'{size}x{size}' / 'apps' / f'{APP_ID}.png'
                ).is_file()
    assert (share / 'icons' / 'hicolor' / 'scalable' / 'apps' / f'{APP_ID}.svg').is_file()
    entry = desktop_entry_of(entry_path.read_text(encoding='utf-8'))
    assert entry['Exec'] == f'"{launcher}" %f'
    assert entry['TryExec'] == launcher
    assert entry['Icon'] == APP_ID

    removed = desktop_entry.uninstall(share)
    assert sorted(removed) == sorted(written)
    assert not [p for p in share.rglob('*') if p.is_file()]


def test_a_plain_launcher_path_is_not_quoted():
    text = desktop_entry.desktop_entry_text('Exec=batchfit-gui %f\nTryExec=batchfit-gui\n',
                                            '/home/u/.local/bin/batchfit-gui')
    assert text == ('Exec=/home/u/.local/bin/batchfit-gui %f\n'
                    'TryExec=/home/u/.local/bin/batchfit-gui\n')


def test_data_home_follows_xdg(tmp_path):
    assert desktop_entry.data_home({'XDG_DATA_HOME': str(tmp_path)}) == tmp_path
    assert desktop_entry.data_home({'XDG_DATA_HOME': 'relative'}) == \
        Path.home() / '.local' / 'share'


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='Linux desktop files')
def test_gui_flag_installs_for_the_user(tmp_path, monkeypatch, capsys):
    from ui.app import main

    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path))
    assert main(['--install-desktop']) == 0
    assert (tmp_path / 'applications' / DESKTOP.name).is_file()
    assert 'installed' in capsys.readouterr().out
    assert main(['--uninstall-desktop']) == 0
    assert not (tmp_path / 'applications' / DESKTOP.name).exists()
