"""Frozen entry point of ``batchfit`` (the console script ``planner.cli:main``)."""

import sys

from planner.cli import main

if __name__ == '__main__':
    sys.exit(main())
