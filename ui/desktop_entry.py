"""``batchfit-gui --install-desktop`` / ``--uninstall-desktop``: the Linux menu entry.

A wheel cannot reliably put files in ``share/applications`` (pipx and ``pip --user``
ignore wheel data files, or put them under a venv no desktop looks in), and a frozen
folder has no installer. So the app installs its own desktop integration for the
current user, from the files it carries (``packaging/linux`` in a checkout,
``ui/_desktop`` in the wheel and the frozen folder):

* ``$XDG_DATA_HOME/applications/<app id>.desktop`` (``~/.local/share`` by default), with
  ``Exec``/``TryExec`` set to this launcher's absolute path, since a menu started from
  the desktop session often lacks ``~/.local/bin`` on ``PATH``;
* ``$XDG_DATA_HOME/metainfo/<app id>.metainfo.xml`` (AppStream: software centres);
* ``$XDG_DATA_HOME/icons/hicolor/<size>/apps/<app id>.{png,svg}``.

Uninstall removes exactly those files. Qt-free on purpose (plain file copies), so it is
tested without a display.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

APP_ID = 'io.github.batchfit.batchfit'  # ui.APP_ID (kept here: no Qt import needed)


def source_dir() -> Path:
    """The folder holding the ``.desktop``, metainfo and ``icons/hicolor`` to install."""
    here = Path(__file__).resolve().parent
    for candidate in (here / '_desktop', here.parent / 'packaging' / 'linux'):
        if (candidate / f'{APP_ID}.desktop').is_file():
            return candidate
    raise FileNotFoundError(f'the desktop files were not found next to {here}')


def data_home(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME`` when absolute, else ``~/.local/share``."""
    env = os.environ if environ is None else environ
    value = env.get('XDG_DATA_HOME', '')
    return Path(value) if os.path.isabs(value) else Path.home() / '.local' / 'share'


def launcher_path() -> str:
    """The absolute path of the ``batchfit-gui`` being run (script or frozen binary)."""
    if getattr(sys, 'frozen', False):
        return os.path.abspath(sys.executable)
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ''
    if Path(argv0).name.startswith('batchfit-gui'):
        return os.path.abspath(argv0)
    return shutil.which('batchfit-gui') or 'batchfit-gui'


def desktop_entry_text(template: str, launcher: str) -> str:
    """The ``.desktop`` file with ``Exec`` and ``TryExec`` pointing at ``launcher``."""
    quoted = launcher if launcher == shlex.quote(launcher) else \
        '"' + launcher.replace('\\', '\\\\').replace('"', '\\"') + '"'
    lines = []
    for line in template.splitlines():
        if line.startswith('Exec='):
            line = f'Exec={quoted} %f'
        elif line.startswith('TryExec='):
            line = f'TryExec={launcher}'
        lines.append(line)
    return '\n'.join(lines) + '\n'


def planned_files(source: Path, target: Path) -> list[tuple[Path, Path]]:
    """(from, to) for every file: the entry, the metainfo, each icon."""
    pairs = [(source / f'{APP_ID}.desktop', target / 'applications' / f'{APP_ID}.desktop'),
             (source / f'{APP_ID}.metainfo.xml', target / 'metainfo' / f'{APP_ID}.metainfo.xml')]
    icons = source / 'icons'
    for icon in sorted(icons.rglob(f'{APP_ID}.*')):
        pairs.append((icon, target / 'icons' / icon.relative_to(icons)))
    return pairs


def install(target: Path | None = None, launcher: str | None = None) -> list[Path]:
    """Copy the desktop files into ``target`` (default :func:`data_home`); the paths."""
    source, target = source_dir(), data_home() if target is None else target
    launcher = launcher_path() if launcher is None else launcher
    written = []
    for src, dst in planned_files(source, target):
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == '.desktop':
            dst.write_text(desktop_entry_text(src.read_text(encoding='utf-8'), launcher),
                           encoding='utf-8')
        else:
            shutil.copyfile(src, dst)
        written.append(dst)
    _refresh_caches(target)
    return written


def uninstall(target: Path | None = None) -> list[Path]:
    """Remove what :func:`install` wrote; the paths removed."""
    source, target = source_dir(), data_home() if target is None else target
    removed = []
    for _src, dst in planned_files(source, target):
        if dst.is_file():
            dst.unlink()
            removed.append(dst)
    _refresh_caches(target)
    return removed


def _refresh_caches(target: Path) -> None:
    """Refresh the user's icon cache, only where one exists (best effort).

    Creating one would be worse than none: a cache goes stale when another app adds
    icons without refreshing it, and GTK then misses them. Menus watch the applications
    folder themselves; ``update-desktop-database`` only matters for MIME types, which
    batchfit does not register.
    """
    hicolor = target / 'icons' / 'hicolor'
    if (hicolor / 'icon-theme.cache').is_file() and shutil.which('gtk-update-icon-cache'):
        subprocess.run(['gtk-update-icon-cache', '-q', '-t', str(hicolor)], check=False,
                       capture_output=True, timeout=60)


def run(install_it: bool) -> int:
    """The command: do it, list the files, return an exit code."""
    if not sys.platform.startswith('linux'):
        print('batchfit-gui: desktop integration files are for Linux; see packaging/README.md '
              'for Windows and macOS', file=sys.stderr if sys.stderr else None)
        return 2
    try:
        paths = install() if install_it else uninstall()
    except OSError as exc:
        print(f'batchfit-gui: {exc}', file=sys.stderr if sys.stderr else None)
        return 1
    verb = 'installed' if install_it else 'removed'
    if sys.stdout is not None:
        for path in paths:
            print(f'{verb} {path}')
        if not paths:
            print('nothing to remove')
    return 0
