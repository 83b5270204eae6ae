"""An exporter's refusal in the app's terms: what to change on screen, never a CLI flag.

The core's refusals (``planner.export.base.refuse``) end with what the command line would
accept (``re-plan with --zero 0,1``). The window has no such flags: each clause is said
as the field or table row to change, and a clause the window has no control for (such as
``--sharding``) is left out.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ui.i18n import QT_TRANSLATE_NOOP, translate

if TYPE_CHECKING:
    from planner.errors import InputError

# (pattern of one clause of the core's "allowed" text, the window's words for it)
_CLAUSES: tuple[tuple[str, str], ...] = (
    (r'export (?:it )?as (?P<names>.+)',
     QT_TRANSLATE_NOOP('ExportHints', 'use the {names} tab')),
    (r're-plan with --tp 1 --pp 1 --cp 1',
     QT_TRANSLATE_NOOP('ExportHints', 'select a plan whose TP/PP/CP are 1/1/1 (type "1/1/1/" '
                                      'in the table filter)')),
    (r're-plan with --zero 0,1',
     QT_TRANSLATE_NOOP('ExportHints', 'untick ZeRO stages 2 and 3 under Options')),
    (r're-plan with --zero 0,2,3',
     QT_TRANSLATE_NOOP('ExportHints', 'untick ZeRO stage 1 under Options')),
    (r're-plan with --precision (?P<value>\S+)',
     QT_TRANSLATE_NOOP('ExportHints', 'choose precision {value} under Options')),
    (r're-plan with --optimizer (?P<value>\S+)',
     QT_TRANSLATE_NOOP('ExportHints', 'choose optimizer {value} under Options')),
    (r're-plan with --framework (?P<value>\S+)',
     QT_TRANSLATE_NOOP('ExportHints', 'choose stack {value} under Options')),
)


def app_hint(allowed: str | None) -> str:
    """The core's ``allowed`` text as changes in the window ('' when none applies)."""
    if not allowed:
        return ''
    said = []
    for clause in re.split(r',\s*or\s+|;\s*', allowed):
        clause = clause.strip()
        for pattern, words in _CLAUSES:
            m = re.fullmatch(pattern, clause)
            if m:
                said.append(translate('ExportHints', words).format(**m.groupdict()))
                break
        else:
            if '--' not in clause:  # plain words: keep them
                said.append(clause)
    return translate('ExportHints', ' or ').join(said)


def refusal_text(exc: InputError) -> str:
    """The refusal without the CLI field name or flags, with the window's hint."""
    text = str(exc)
    if exc.allowed:
        text = text.removesuffix(f' (allowed: {exc.allowed})')
    text = re.sub(r'^--format (\S+): ', r'\1: ', text)
    hint = app_hint(exc.allowed)
    if hint:
        text += '\n' + translate('ExportHints', 'To export it: {hint}.').format(hint=hint)
    return text
