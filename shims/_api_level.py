"""The stable API's level, in a module with no imports: the package root and the
light registration path (``import torch`` through an entry point) read it without
loading the Kernel IR or sympy."""

#: The stable API's level; raised on additive changes, breaking changes follow
#: the deprecation policy in docs/api-policy.md.
API_LEVEL = 1
