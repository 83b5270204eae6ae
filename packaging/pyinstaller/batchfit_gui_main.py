"""Frozen entry point of ``batchfit-gui`` (the gui-script ``ui.app:main``)."""

import sys

from ui.app import main

if __name__ == '__main__':
    sys.exit(main())
