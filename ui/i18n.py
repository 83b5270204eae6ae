"""The app's languages: English (the source texts) and Simplified Chinese, with Qt's .ts/.qm.

Marking a string: ``translate('Context', 'text')`` at display time, or
``QT_TRANSLATE_NOOP('Context', 'text')`` in a module-level table that is translated later.
``pyside6-lupdate`` finds exactly these spellings (a literal context and a literal text;
it does not see calls through a local helper), so every module calls :func:`translate`
by that name. ``make translations`` extracts them into ``ui/translations/*.ts`` and
compiles the ``.qm`` files; docs/translations.md has the whole workflow.

Start-up (``ui/app.py``), after the ``QApplication`` and its names exist and before any
widget is built::

    language = i18n.resolve_language(args.language)   # --language, else saved, else system
    i18n.install_translators(app, language)

Switching (a settings menu): ``i18n.set_saved_language(code)`` (``''`` = follow the
system), then ``i18n.install_translators(app, i18n.resolve_language())``. The widgets
translate their texts when they build them and do not handle ``QEvent.LanguageChange``,
so the open window keeps its language until it is rebuilt or the app restarts: rebuild
the window, or tell the user the change applies at the next start.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import (
    QCoreApplication,
    QLibraryInfo,
    QLocale,
    QTranslator,
)

log = logging.getLogger(__name__)


def QT_TRANSLATE_NOOP(context: str, text: str) -> str:  # noqa: N802 (the name lupdate finds)
    """Mark ``text`` for lupdate in ``context`` and return it unchanged.

    PySide6's own ``QT_TRANSLATE_NOOP`` does the same but is typed as returning ``object``;
    this one keeps tables of marked texts typed as ``str``.
    """
    return text


ENGLISH = 'en'
CHINESE = 'zh_CN'
# Code -> the language's own name (a language menu shows each in its own script).
LANGUAGES: dict[str, str] = {ENGLISH: 'English', CHINESE: '简体中文'}
SETTINGS_KEY = 'ui/language'  # '' (or absent) = follow the system locale
TRANSLATIONS_DIR = Path(__file__).resolve().parent / 'translations'
APP_CATALOG = 'batchfit'  # batchfit_zh_CN.qm
QT_CATALOGS = ('qtbase',)  # Qt's own: standard buttons, file and message dialogs
_FOLLOW_SYSTEM = QT_TRANSLATE_NOOP('Language', 'System default')

_installed: list[QTranslator] = []  # ours, so a switch can remove them again
_current = ENGLISH


def translate(context: str, text: str, disambiguation: str | None = None, n: int = -1) -> str:
    """``QCoreApplication.translate`` under the name lupdate looks for.

    ``context`` groups the messages (one per widget class: 'InputPanel', 'Core'...);
    ``disambiguation`` tells apart two uses of the same English text in one context;
    ``n`` >= 0 picks a plural form (``%n`` in the text). Without a translator, or for a
    text the catalog lacks, ``text`` comes back unchanged.
    """
    return QCoreApplication.translate(context, text, disambiguation, n)


# ---- choosing the language -------------------------------------------------------------

def match_language(ui_languages: list[str]) -> str:
    """The first supported language in a preference list of BCP 47 names, else English.

    ``QLocale.uiLanguages()`` gives names such as ``zh-Hans-CN``, ``zh-CN``, ``zh-SG``,
    ``zh-TW``, ``en-US``. Simplified Chinese (script Hans, or a region that writes it:
    CN, SG, or plain ``zh``) maps to ``zh_CN``. Traditional Chinese (Hant, TW, HK, MO)
    is not offered, so the next preference decides; Qt ends a zh_TW list with a bare
    ``zh`` (``zh-Hant-TW, zh-TW, zh-Hant, zh``), which then stands for Traditional too
    and is skipped: a Taiwanese desktop gets English, not Simplified, unless the user
    also lists Simplified Chinese or picks it in the settings.
    """
    traditional = False
    for name in ui_languages:
        parts = name.replace('_', '-').split('-')
        lang, rest = parts[0].lower(), {p.upper() for p in parts[1:]}
        if lang == 'en':
            return ENGLISH
        if lang == 'zh':
            if rest & {'HANT', 'TW', 'HK', 'MO'}:
                traditional = True
                continue
            if rest or not traditional:
                return CHINESE
    return ENGLISH


def _system_locale() -> QLocale:
    """The desktop's locale (a seam for tests)."""
    return QLocale.system()


def system_language() -> str:
    """The supported language the system locale asks for (``'en'`` when none matches)."""
    locale = _system_locale()
    return match_language(list(locale.uiLanguages()) or [locale.name()])


def saved_language() -> str:
    """The language picked in the settings; ``''`` means follow the system."""
    from ui.settings import settings

    value = str(settings().value(SETTINGS_KEY, '') or '')
    return value if value in LANGUAGES else ''


def set_saved_language(language: str) -> None:
    """Remember ``language`` (a :data:`LANGUAGES` code, or ``''`` to follow the system).

    Raises:
        ValueError: an unsupported code (a programming error, not a user one).
    """
    if language and language not in LANGUAGES:
        raise ValueError(f'unsupported language {language!r}; one of {sorted(LANGUAGES)}')
    from ui.settings import settings

    settings().setValue(SETTINGS_KEY, language)


def resolve_language(requested: str | None = None) -> str:
    """The language to show: ``requested`` (e.g. ``--language``), else saved, else system.

    An unsupported ``requested`` is logged and ignored. Accepts ``zh-CN``/``zh`` style
    names too, through :func:`match_language`.
    """
    if requested:
        if requested in LANGUAGES:
            return requested
        matched = match_language([requested])
        if matched != ENGLISH or requested.lower().startswith('en'):
            return matched
        log.warning('unsupported language %r; using the saved or system language', requested)
    return saved_language() or system_language()


def language_choices() -> list[tuple[str, str]]:
    """(code, label) for a language menu: follow-the-system first, then each language.

    The follow-the-system label is translated; language names stay in their own script.
    """
    return [('', translate('Language', _FOLLOW_SYSTEM)),
            *((code, name) for code, name in LANGUAGES.items())]


def current_language() -> str:
    """The language :func:`install_translators` last installed (``'en'`` before)."""
    return _current


# ---- installing the catalogs -----------------------------------------------------------

def catalog_path(language: str) -> Path:
    """Where our compiled catalog for ``language`` lives (it may be missing)."""
    return TRANSLATIONS_DIR / f'{APP_CATALOG}_{language}.qm'


def remove_translators(app: QCoreApplication | None = None) -> None:
    """Uninstall every translator :func:`install_translators` installed (back to English)."""
    global _current
    app = app or QCoreApplication.instance()
    while _installed:
        translator = _installed.pop()
        if app is not None:
            app.removeTranslator(translator)
    _current = ENGLISH


def install_translators(app: QCoreApplication, language: str) -> list[str]:
    """Show ``language`` from now on: our catalog plus Qt's own; returns the files loaded.

    Replaces whatever this function installed before. English needs no file (the source
    texts are English) and returns ``[]``. A missing or unreadable catalog of ours logs a
    warning and leaves English; a missing Qt catalog (some wheels ship none) only costs
    the standard buttons' translation. Never raises: a broken translation must not stop
    the app from starting.
    """
    global _current
    loaded: list[str] = []
    try:
        remove_translators(app)
        if language == ENGLISH:
            return loaded
        if language not in LANGUAGES:
            log.warning('no translation for language %r; showing English', language)
            return loaded
        ours = catalog_path(language)
        translator = QTranslator(app)
        if not ours.is_file() or not translator.load(str(ours)):
            log.warning('cannot load %s; showing English', ours)
            return loaded
        app.installTranslator(translator)
        _installed.append(translator)
        loaded.append(str(ours))
        qt_dir = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.TranslationsPath))
        for name in QT_CATALOGS:
            path = qt_dir / f'{name}_{language}.qm'
            qt_translator = QTranslator(app)
            if path.is_file() and qt_translator.load(str(path)):
                app.installTranslator(qt_translator)
                _installed.append(qt_translator)
                loaded.append(str(path))
            else:
                log.info('no Qt catalog %s; standard dialogs stay English', path)
        _current = language
    except Exception:  # a translation problem must never keep the app from starting
        log.exception('installing the %s translation failed; showing English', language)
        remove_translators(app)
        return []
    return loaded
