"""spyre_matrix: the PyTorch compatibility matrix (release catalog, static API-surface extraction,
per-release results and the maintenance-cost report). Never imports torch internals."""
