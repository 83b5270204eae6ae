"""``python -m planner.cli.main``: the same entry point as the ``batchfit`` console script."""

import sys

from planner.cli.main import main

sys.exit(main())
