"""The ``spyre-adapter`` command line: argument parsing and checks for every
command (one module per command), run before torch is imported; each
command's implementation lives in its feature package and is imported by name
once the checks pass (:func:`.argcheck.dispatch`)."""
