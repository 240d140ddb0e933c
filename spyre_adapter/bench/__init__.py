"""Measurement of the scheduler and the emulator: the benchmark
(``spyre-adapter bench``, :mod:`.suite`), its baselines, the calibration of the
fitted machine constants, the comparison with IBM torch-spyre's cost model,
the emulator's checks against mutated programs and its speed against eager.
Nothing in the backend imports it."""
