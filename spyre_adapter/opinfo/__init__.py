"""The OpInfo sweep: PyTorch's own ``op_db`` sample inputs compiled for the
spyre device and compared with CPU eager, every op x dtype classified
pass / fallback / xfail / fail (see docs/testing.md).

Run with ``spyre-adapter opinfo`` (or ``nox -s opinfo``).
"""
