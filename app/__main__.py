"""``python -m app``: the command line (app/cli/)."""

import sys

from app.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
