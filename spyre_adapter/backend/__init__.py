"""The Spyre backend as torch sees it: the "spyre" device, its registration
with Inductor through the stable API, the session (machine, card, report,
program cache) and the hand-written kernels.

The device half (:mod:`.device`, :mod:`.report`, :mod:`.autoload`) imports
nothing heavy, so ``import torch`` stays fast; the compiler half
(:mod:`.compiler`, :mod:`.spyre`) is imported when Inductor first compiles.
"""
