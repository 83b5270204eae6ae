"""The JSON-lines protocol between the calibration child and its parent (stdlib only).

The child (``python -m planner.calibrate``) writes one JSON object per line on stdout:

* ``{"event": "progress", "stage": "matmul", "fraction": 0.3, "message": "..."}``;
  ``fraction`` is the whole run's, from 0 to 1, and never goes down;
* ``{"event": "result", "profile": {...}}``: the measured profile, once;
* ``{"event": "error", "kind": "oom", "message": "..."}``, kind from :data:`ERROR_KINDS`,
  then a non-zero exit (:data:`CHILD_EXIT_CODES`).

Lines that are not such objects are ignored by the parent, so a library printing to
stdout cannot break it (the child also points file descriptor 1 at stderr while it
works, see :func:`claim_stdout`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

STAGES: tuple[str, ...] = ('environment', 'matmul', 'proxy', 'max_micro_batch', 'collectives',
                           'fit')
ERROR_KINDS: tuple[str, ...] = ('bad_input', 'torch_missing', 'no_cuda', 'oom', 'does_not_fit',
                                'cancelled', 'timeout', 'crash')
# Exit codes of ``batchfit calibrate`` (and of the child, which exits 130 when cancelled).
EXIT_CODES: dict[str, int] = {'ok': 0, 'bad_input': 2, 'torch_missing': 3, 'no_cuda': 4,
                              'does_not_fit': 5, 'oom': 5, 'cancelled': 6, 'timeout': 7,
                              'crash': 8}
CHILD_CANCELLED_EXIT = 130  # 128 + SIGINT, what shells report for an interrupted program
CHILD_EXIT_CODES: dict[str, int] = {**EXIT_CODES, 'cancelled': CHILD_CANCELLED_EXIT}
TORCH_EXTRA_HINT = "pip install 'batchfit[calibrate]'"


def progress_event(stage: str, fraction: float, message: str = '') -> dict[str, Any]:
    """A progress line: ``fraction`` of the whole run done, in ``stage``."""
    return {'event': 'progress', 'stage': stage, 'fraction': round(min(max(fraction, 0.0), 1.0),
                                                                    4), 'message': message}


def error_event(kind: str, message: str) -> dict[str, Any]:
    """The failure line (``kind`` from :data:`ERROR_KINDS`)."""
    if kind not in ERROR_KINDS:
        raise ValueError(f'unknown error kind {kind!r}')
    return {'event': 'error', 'kind': kind, 'message': message}


def result_event(profile: dict[str, Any]) -> dict[str, Any]:
    """The result line carrying the profile document."""
    return {'event': 'result', 'profile': profile}


def parse_event(line: str) -> dict[str, Any] | None:
    """The event on ``line``, or None for anything that is not a protocol object."""
    line = line.strip()
    if not line.startswith('{'):
        return None
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(event, dict) or event.get('event') not in ('progress', 'result', 'error',
                                                                   'probe'):
        return None
    return event


class EventWriter:
    """Writes events as JSON lines and flushes each, so the parent sees them at once."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._fraction = 0.0

    def emit(self, event: dict[str, Any]) -> None:
        """Write one event."""
        if event.get('event') == 'progress':
            # Monotone, whatever the stages report.
            self._fraction = max(self._fraction, float(event['fraction']))
            event = {**event, 'fraction': self._fraction}
        self._stream.write(json.dumps(event, allow_nan=False) + '\n')
        self._stream.flush()

    def progress(self, stage: str, fraction: float, message: str = '') -> None:
        """Shorthand for a progress event."""
        self.emit(progress_event(stage, fraction, message))


def claim_stdout() -> TextIO:
    """A private stream on the real stdout; fd 1 and ``sys.stdout`` then go to stderr.

    Whatever torch, a CUDA library or a stray ``print`` writes to stdout afterwards
    lands on stderr, and the protocol stream stays clean.
    """
    sys.stdout.flush()
    private = os.fdopen(os.dup(1), 'w', encoding='utf-8', buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return private
