"""``python -m spyre_codemods upgrade|migrate ...`` (same parsers as ``spyre-adapter``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
