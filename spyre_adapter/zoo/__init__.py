"""The models ``spyre-adapter run`` compiles: decoder blocks written with
``torch.nn`` (:mod:`.blocks`, sizes in :mod:`.config`) and transformers causal
LMs built from their configs (:mod:`.hf`); the command itself is
:mod:`.command`."""
