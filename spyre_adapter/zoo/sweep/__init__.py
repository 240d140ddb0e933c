"""The transformers family sweep: every causal-LM family transformers ships,
built from its config class with small sizes, greedy decode compiled on the
device (static and dynamic shapes) against CPU eager; results in
``results/models/``. ``spyre-adapter models --sweep`` (also ``nox -s models``)."""
