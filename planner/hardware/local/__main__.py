"""``python -m planner.hardware.local [--json]``: the local GPU snapshot; exits 0 with no driver."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from planner.hardware.local import probe


def main(argv: Sequence[str] | None = None) -> int:
    """Print the snapshot: one JSON document with ``--json``, else a short summary."""
    parser = argparse.ArgumentParser(prog='python -m planner.hardware.local', description=__doc__)
    parser.add_argument('--json', action='store_true', help='the snapshot as one JSON document')
    args = parser.parse_args(argv)
    inventory = probe()
    if args.json:
        print(json.dumps(inventory.to_dict(), indent=2))
        return 0
    print(f'{inventory.status}: {inventory.message}')
    for gpu in inventory.gpus:
        print(f'GPU {gpu.index}: {gpu.name or "?"} {gpu.uuid or ""}'
              f'{" (lost)" if gpu.lost else ""}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
