"""Build the frozen folder with PyInstaller, check it, archive it, enforce the size budget.

``make dist`` runs this with the build venv's Python (``.venv-dist``, the ``freeze``
extra)::

    python packaging/build_dist.py [--budget-mb 120]

Writes ``dist/batchfit/`` (``batchfit-gui`` and ``batchfit`` sharing ``_internal/``) and
``dist/batchfit-<version>-linux-x86_64.tar.gz``, prints the sizes and times, and exits 1
when the archive is over the budget or the folder holds what must never ship (torch,
QtNetwork, a dangling link). gzip, not xz: on the 2-core CI machine xz saves a third of
the size but takes about 14x as long (docs/BENCHMARKS.md, packaging section).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / 'packaging' / 'batchfit.spec'
SIZE_BUDGET_MB = 120.0
MB = 1_000_000
# Libraries Qt's xcb/wayland plugins load that PyInstaller silently leaves out when the
# build host lacks them (the warning in Friture's
# .github/workflows/install-linux.sh); the Makefile installs their packages when root.
HOST_LIBRARIES = ('libxcb-cursor.so.0', 'libxcb-icccm.so.4', 'libxcb-keysyms.so.1',
                  'libxcb-image.so.0', 'libxcb-randr.so.0', 'libxcb-render-util.so.0',
                  'libxcb-shape.so.0', 'libxcb-xkb.so.1', 'libxkbcommon-x11.so.0',
                  'libEGL.so.1', 'libfontconfig.so.1', 'libdbus-1.so.3',
                  'libwayland-cursor.so.0', 'libwayland-egl.so.1')
# What must not be in the folder, relative to _internal/ (a glob each).
FORBIDDEN = ('torch', 'triton', 'nvidia', 'tkinter', 'PySide6/QtNetwork*',
             'PySide6/QtQml*', 'PySide6/QtQuick*', 'PySide6/Qt/lib/libQt6Network*')
REQUIRED = ('batchfit', 'batchfit-gui', '_internal/planner/_resources/gpus.toml',
            '_internal/calibration-src/planner/calibrate/__main__.py',
            '_internal/calibration-src/planner/_resources/models.toml',
            '_internal/ui/_desktop/io.github.batchfit.batchfit.desktop')


def version() -> str:
    """``planner.__version__`` without importing the package."""
    text = (ROOT / 'planner' / '__init__.py').read_text(encoding='utf-8')
    return text.split("__version__ = '", 1)[1].split("'", 1)[0]


def archive_name() -> str:
    """``batchfit-<version>-<os>-<machine>.tar.gz``."""
    return f'batchfit-{version()}-{sys.platform.rstrip("0123456789")}-{platform.machine()}.tar.gz'


def missing_host_libraries(names: tuple[str, ...] = HOST_LIBRARIES) -> list[str]:
    """The libraries in ``names`` the dynamic loader cannot find here (Linux only)."""
    if not sys.platform.startswith('linux') or shutil.which('ldconfig') is None:
        return []
    known = subprocess.run(['ldconfig', '-p'], capture_output=True, text=True,
                           check=False).stdout
    return [name for name in names if name not in known]


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder``, a link counted as a link (as ``du`` would)."""
    return sum((Path(top) / name).lstat().st_size
               for top, dirs, files in os.walk(folder) for name in files + dirs
               if name in files or (Path(top) / name).is_symlink())


def problems(folder: Path) -> list[str]:
    """What is wrong with a built folder: forbidden content, missing files, dangling links."""
    internal = folder / '_internal'
    found = [f'must not ship: {p.relative_to(folder)}'
             for pattern in FORBIDDEN for p in internal.glob(pattern)]
    found += [f'missing: {name}' for name in REQUIRED if not (folder / name).exists()]
    found += [f'dangling link: {p.relative_to(folder)}'
              for p in folder.rglob('*') if p.is_symlink() and not p.exists()]
    return found


def make_archive(folder: Path, out: Path) -> None:
    """A gzip tarball of ``folder`` (links kept as links: PyInstaller 6 relies on them)."""
    def normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ''
        return info

    with tarfile.open(out, 'w:gz', compresslevel=6) as tar:
        tar.add(folder, arcname=folder.name, filter=normalize)


def main(argv: list[str] | None = None) -> int:
    """Build, check, archive, report."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--dist', type=Path, default=ROOT / 'dist')
    parser.add_argument('--work', type=Path, default=ROOT / 'build' / 'pyinstaller')
    parser.add_argument('--budget-mb', type=float, default=SIZE_BUDGET_MB,
                        help='largest archive allowed, in MB (10^6 bytes)')
    args = parser.parse_args(argv)

    missing = missing_host_libraries()
    if missing:
        print('build_dist: WARNING: not on this build host, so not bundled (the frozen app '
              f'then needs them on the user\'s machine): {", ".join(missing)}', flush=True)
    folder = args.dist / 'batchfit'
    started = time.monotonic()
    subprocess.run([sys.executable, '-m', 'PyInstaller', '--noconfirm', '--clean',
                    '--log-level', 'WARN', '--distpath', str(args.dist),
                    '--workpath', str(args.work), str(SPEC)], check=True, cwd=ROOT)
    build_s = time.monotonic() - started
    found = problems(folder)
    for line in found:
        print(f'build_dist: {line}', file=sys.stderr)
    archive = args.dist / archive_name()
    started = time.monotonic()
    make_archive(folder, archive)
    archive_s = time.monotonic() - started
    size = {'folder_bytes': folder_bytes(folder), 'archive_bytes': archive.stat().st_size,
            'build_s': round(build_s, 1), 'archive_s': round(archive_s, 1),
            'archive': archive.name, 'budget_mb': args.budget_mb}
    (args.dist / 'sizes.json').write_text(json.dumps(size, indent=2) + '\n', encoding='utf-8')
    print(f'build_dist: {folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}'
          f' {size["folder_bytes"] / MB:.1f} MB on disk, built in {build_s:.0f} s')
    print(f'build_dist: {archive.name} {size["archive_bytes"] / MB:.1f} MB '
          f'({size["archive_bytes"] / 2**20:.1f} MiB; budget {args.budget_mb:.0f} MB), '
          f'archived in {archive_s:.0f} s')
    if size['archive_bytes'] > args.budget_mb * MB:
        print(f'build_dist: FAILED: the archive is over the {args.budget_mb:.0f} MB budget',
              file=sys.stderr)
        return 1
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
