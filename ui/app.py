"""``batchfit-gui``: start the planner window.

Sets the application name, organisation and desktop file name (Wayland matches the
window to ``io.github.batchfit.batchfit.desktop``), logs to
``platformdirs.user_log_dir`` (a rotating file; stderr only when there is one, as
frozen Windows apps have none), shows uncaught exceptions in a dialog instead of
dying, and stops the workers on ``aboutToQuit``.

``batchfit-gui --screenshot FILE.png [PLAN.json]`` renders the window offscreen
once the plan is computed, writes the PNG and exits.
"""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import sys
import traceback
from pathlib import Path

import ui  # noqa: F401  (PySide6 before pyqtgraph)
from ui import APP_ID, APP_NAME, ORG_NAME

log = logging.getLogger('batchfit.gui')
SCREENSHOT_TIMEOUT_MS = 30_000


def log_dir() -> Path:
    """Where the GUI writes its log (``batchfit paths`` prints it too)."""
    from planner.user_config import log_dir as planner_log_dir

    return planner_log_dir()


def setup_logging() -> Path:
    """A rotating log file, plus stderr when the process has one."""
    folder = log_dir()
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(folder / 'batchfit-gui.log',
                                                       maxBytes=1_000_000, backupCount=3,
                                                       encoding='utf-8')
        handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(name)s: %(message)s'))
        root.addHandler(handler)
    except OSError:
        pass
    if sys.stderr is not None:
        root.addHandler(logging.StreamHandler(sys.stderr))
    return folder


def excepthook(exc_type, exc, tb) -> None:
    """Log an uncaught exception and show it; the app keeps running."""
    text = ''.join(traceback.format_exception(exc_type, exc, tb))
    log.error('uncaught exception:\n%s', text)
    from PySide6.QtWidgets import QApplication, QMessageBox

    from ui.i18n import translate

    if QApplication.instance() is None:
        return
    box = QMessageBox(QMessageBox.Icon.Critical, 'batchfit', translate(
        'App', 'Something went wrong: {error}\n\nThe details are in the log folder:\n{folder}'
    ).format(error=f'{exc_type.__name__}: {exc}', folder=log_dir()))
    box.setDetailedText(text)
    box.addButton(translate('App', 'Ignore and try to continue'),
                  QMessageBox.ButtonRole.AcceptRole)
    box.exec()


def make_app(argv: list[str] | None = None):
    """The QApplication with names set (reused when one exists)."""
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QApplication

    from ui.allocator import keep_freed_memory

    keep_freed_memory()  # before the worker thread allocates its first arrays
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv[:1])
    QApplication.setApplicationName(APP_NAME)
    QApplication.setOrganizationName(ORG_NAME)
    QApplication.setOrganizationDomain('batchfit.github.io')
    QGuiApplication.setDesktopFileName(APP_ID)
    set_window_icon(app)
    from planner import __version__

    QApplication.setApplicationVersion(__version__)
    return app


def set_window_icon(app) -> None:
    """The app's icon for X11 and Windows title bars (Wayland takes it from the .desktop)."""
    from PySide6.QtGui import QIcon

    from ui.desktop_entry import APP_ID as ICON_NAME
    from ui.desktop_entry import source_dir

    try:
        hicolor = source_dir() / 'icons' / 'hicolor'
    except FileNotFoundError:
        return
    icon = QIcon()
    for png in sorted(hicolor.glob(f'*/apps/{ICON_NAME}.png')):
        icon.addFile(str(png))
    if not icon.isNull():
        app.setWindowIcon(icon)


def take_screenshot(window, path: str, app) -> int:
    """Wait for the plan, render the window to ``path``, return an exit code."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    done = {'ok': False}

    def finish(*_args) -> None:
        latest = window.controller.latest
        shown = window.inputs.read_inputs()[0]
        if latest is not None and shown is not None and latest.inputs != shown:
            return  # a result for earlier inputs (the worked example before a session)
        QTimer.singleShot(300, loop.quit)
        done['ok'] = True

    window.controller.sweep_ready.connect(finish)
    window.controller.input_error.connect(finish)
    if window.controller.latest is not None and window.controller.latest.by_batch.x.size:
        finish()
    QTimer.singleShot(SCREENSHOT_TIMEOUT_MS, loop.quit)
    loop.exec()
    window.finish_updates()
    app.processEvents()
    ok = window.grab().save(str(path))
    return 0 if ok and done['ok'] else 1


def dispose(window) -> None:
    """Delete the window while the QApplication still exists (else exit may segfault)."""
    from PySide6.QtCore import QCoreApplication, QEvent

    window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``batchfit-gui``."""
    parser = argparse.ArgumentParser(prog='batchfit-gui', description='batchfit desktop app')
    parser.add_argument('plan', nargs='?', metavar='PLAN.json',
                        help='a plan file to open (saved here or by `batchfit plan --save`)')
    parser.add_argument('--screenshot', metavar='FILE.png',
                        help='render the window offscreen once the plan is computed, then exit')
    parser.add_argument('--language', '--lang', dest='language', metavar='LANG',
                        help='UI language: en or zh_CN (default: the one chosen in View > '
                             'Language, else the system\'s)')
    parser.add_argument('--size', default='1600x1000', help='window size for --screenshot')
    parser.add_argument('--model', help='start on this model (a preset, size or config.json) '
                        'instead of the worked example\'s')
    parser.add_argument('--install-desktop', action='store_true',
                        help='add batchfit to this user\'s desktop menu (Linux), then exit')
    parser.add_argument('--uninstall-desktop', action='store_true',
                        help='remove what --install-desktop added, then exit')
    args = parser.parse_args(argv)
    if args.install_desktop or args.uninstall_desktop:
        from ui import desktop_entry

        return desktop_entry.run(install_it=args.install_desktop)
    if args.screenshot:
        import os

        os.environ.setdefault('QT_QPA_PLATFORM', 'offscreen')
    setup_logging()
    app = make_app()
    from ui.i18n import install_translators, resolve_language

    install_translators(app, resolve_language(args.language))
    sys.excepthook = excepthook
    from ui.main_window import MainWindow

    window = MainWindow(restore=not args.screenshot and not args.plan, poll_hardware=True)
    app.aboutToQuit.connect(window.shutdown)
    if args.plan and args.screenshot:
        from planner.errors import InputError

        try:  # no dialog offscreen: a bad file is one line on stderr and exit 2
            window.open_plan_file(args.plan)
        except InputError as exc:
            print(f'batchfit-gui: error: {exc}', file=sys.stderr)
            window.shutdown(remember=False)
            dispose(window)
            return 2
    if args.plan:
        window.open_path(args.plan, confirm=False)
    elif args.model:
        window.inputs.model_edit.setText(args.model)
    if args.screenshot:
        w, h = (int(v) for v in args.size.lower().split('x'))
        window.resize(w, h)
        window.show()
        code = take_screenshot(window, args.screenshot, app)
        # no prompt on the way out
        window._saved_inputs = window.inputs.read_inputs()[0] or window._saved_inputs
        window.shutdown(remember=False)
        window.close()
        dispose(window)
        return code
    window.show()
    log.info('Init finished, entering the main loop')
    code = app.exec()
    dispose(window)
    return code


if __name__ == '__main__':
    sys.exit(main())
