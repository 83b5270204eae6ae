"""Frozen entry point of ``batchfit`` (the console script ``planner.cli.main:main``)."""

import sys

from planner.cli.main import main

if __name__ == '__main__':
    sys.exit(main())
