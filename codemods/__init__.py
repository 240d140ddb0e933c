"""libcst codemods (work in progress)."""
