"""``python -m spyre_matrix``: the matrix commands without the main ``spyre-adapter`` CLI."""

from spyre_matrix.cli import main

raise SystemExit(main())
