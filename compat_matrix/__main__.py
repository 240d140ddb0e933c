"""``python -m spyre_compat``: the matrix commands without the main ``spyre-adapter`` CLI."""

from spyre_compat.cli import main

raise SystemExit(main())
