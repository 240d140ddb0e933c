"""Release advisories: behaviour that changed behind names that did not.

No rename can fix these; ``upgrade`` leaves an advisory TODO at each use site so the
human knows where to look, and lists them in the report. Each entry was read in the
releases' own code (``confirmed`` says where). An advisory applies to an upgrade
``X -> Y`` when ``X < release <= Y``.

A use site is any of: a reference to one of ``qualnames`` (through imports and
aliases); ``<receiver>.<method>`` for a pair in ``methods`` (``None``: any receiver);
a class deriving from ``base`` (on the target release, through the API index) or,
when ``base_methods`` is set, such a class when it overrides one of those methods
(one TODO on the class, naming them), or when ``requires`` is set, such a class
lacking one of those methods; with ``config_default``, an assignment to an
Inductor config option (where a backend sets its defaults, and where the new
option's value belongs) in a file that does not mention that option.
"""

from __future__ import annotations

from dataclasses import dataclass

from .releases import Release
from .releases import parse_release as _r

__all__ = ["Advisory", "ADVISORIES", "select_advisories"]

_I = "torch._inductor"
_D = "torch._dynamo"


@dataclass(frozen=True, kw_only=True)
class Advisory:
    """One behaviour change, keyed by the release that made it."""

    id: str
    release: Release
    note: str
    confirmed: str
    qualnames: tuple[str, ...] = ()
    methods: tuple[tuple[str | None, str], ...] = ()
    base: str | None = None
    base_methods: tuple[str, ...] = ()
    #: with ``base``: a subclass is a site only when its own body lacks one of these (a
    #: new abstract method of the base)
    requires: tuple[str, ...] = ()
    #: a config option whose new default changes behaviour: assignments to other
    #: ``torch._inductor.config`` options (where a backend sets its defaults) are sites
    #: too, in a file that does not mention this one
    config_default: str = ""
    #: "redesign" (see :mod:`spyre_codemods.redesigns`): ``registry`` names what was
    #: redesigned and ``action`` what to do about it
    kind: str = "advisory"
    registry: str = ""
    action: str = ""

    def applies(self, source: Release, target: Release) -> bool:
        return source < self.release <= target

    @property
    def words(self) -> frozenset[str]:
        """Identifiers a file must contain for the advisory to have a use site."""
        words = {q.rpartition(".")[2] for q in self.qualnames} | {m for _, m in self.methods}
        if self.base is not None:
            words |= set(self.base_methods) or {self.base.rpartition(".")[2]}
        return frozenset(words)

    @property
    def message(self) -> str:
        if self.kind == "redesign":
            return f"redesign {self.id} ({self.release}) of {self.registry}: {self.note}; to do: {self.action}"
        return f"advisory {self.id} ({self.release}): {self.note}"


ADVISORIES: tuple[Advisory, ...] = (
    Advisory(
        id="ops-handler-raises", release=_r("2.7"),
        base=f"{_I}.codegen.common.OpOverrides",
        note="OpOverrides now derives from OpsHandler, whose methods raise NotImplementedError: an op this "
             "class does not implement fails at codegen instead of falling through; implement it or let "
             "the op fall back before lowering",
        confirmed="2.6.0 torch/_inductor/codegen/common.py:608 class OpOverrides: (no base); 2.7.1 same file:768 "
                  "class OpOverrides(BasicMathOpsMixin, OpDecompositions, OpsHandler[Any]); "
                  "2.7.1 torch/_inductor/ops_handler.py:75 raise NotImplementedError",
    ),
    Advisory(
        id="graph-partition-default", release=_r("2.9"), config_default="graph_partition",
        qualnames=(f"{_I}.codegen.common.register_backend_for_device",),
        note="config.graph_partition is on by default: the wrapper codegen registered here receives "
             "partitioned graphs; check the wrapper handles partitions, or set graph_partition=False "
             "while compiling for this device",
        confirmed="2.8.0 torch/_inductor/config.py:425 graph_partition = False; "
                  "2.9.1 same file:463 graph_partition defaults to TORCHINDUCTOR_GRAPH_PARTITION or 1",
    ),
    Advisory(
        id="optimization-hint-fallback", release=_r("2.12"),
        # the spellings the split rewrites to are sites too: a re-run finds the same notes
        methods=tuple(("sizevars", m) for m in (
            "size_hint", "optimization_hint", "size_hint_or_throw", "guarding_hint_or_throw",
            "size_hints", "optimization_hints", "size_hints_or_throw", "guarding_hints_or_throw")),
        note="size hints were split by intent: guarding_hint_or_throw raises on unbacked symbols as "
             "size_hint without fallback did (such calls are rewritten to it), optimization_hint never "
             "raises and falls back on heuristics; a hint that only steers a heuristic (tiling, reuse, "
             "autotuning) can use optimization_hint, as Inductor's own code mostly does, while a guard "
             "or a value baked into generated code (a grid, a buffer size) must stay guarding",
        confirmed="2.11.0 torch/_inductor/sizevars.py:622 size_hint (int(out) raises on an unbacked "
                  "expression without fallback); 2.12.1 same file:723 guarding_hint_or_throw (\"safe to use "
                  "for guarding\"), :756 optimization_hint -> _optimization_hint_base(..., fallback) "
                  "(\"fallback will be used along with some heuristics\"); Inductor 2.11 -> 2.12: 57 "
                  "size_hint/size_hint_or_throw calls became 22 guarding_hint(s)_or_throw, +35 "
                  "optimization_hint(s), +14 guard_or_false",
    ),
    Advisory(
        id="decomposition-table-cache", release=_r("2.12"),
        qualnames=(f"{_I}.decomposition.decompositions", f"{_I}.decomposition.register_decomposition",
                   f"{_I}.decomposition.select_decomp_table"),
        note="the decomposition table is read through select_decomp_table when the graph is compiled, and "
             "a mutated global table is not part of the FX graph cache key: a cached graph silently "
             "bypasses your change; register decompositions before the first compile or disable "
             "fx_graph_cache for this device",
        confirmed="2.12.1 torch/_inductor/compile_fx.py:1267 get_decomp_fn = graph_kwargs.get('get_decomp_fn', "
                  "select_decomp_table) (2.11.0 has no get_decomp_fn); 2.12.1 torch/_inductor/decomposition.py:964",
    ),
    Advisory(
        id="loop-reindexing-fusion", release=_r("2.13"), config_default="loop_reindexing_after_fusion",
        base=f"{_I}.scheduler.BaseScheduling",
        base_methods=("codegen_node", "can_fuse_vertical", "can_fuse_horizontal", "fuse", "group_fn"),
        note="loop reordering/reindexing after fusion (config.loop_reindexing_after_fusion, on by default) "
             "changes the loop order and index expressions of fused nodes: re-check code that reads a "
             "node's ranges or _body, or set loop_reindexing_after_fusion=False for this device",
        confirmed="2.12.1 torch/_inductor/config.py:893 (no loop_reindexing_after_fusion); "
                  "2.13.0 same file:929 loop_reindexing_after_fusion defaults to 1",
    ),
    Advisory(
        id="gpu-types-snapshot", release=_r("2.15"),
        qualnames=(f"{_D}.device_interface.register_interface_for_device", f"{_I}.utils.is_gpu",
                   f"{_I}.utils.GPU_TYPES"),
        note="GPU_TYPES (is_gpu) is computed from the DeviceInterface registry when torch._inductor.utils "
             "is imported: register the device interface before anything imports Inductor, or the "
             "device is not treated as a GPU",
        confirmed="2.14.1 torch/_inductor/utils.py:107 GPU_TYPES = ['cuda', 'mps', 'xpu', 'mtia']; "
                  "2.15.0 same file:252 GPU_TYPES: list[str] = _gpu_types()",
    ),
)


def select_advisories(source: str | Release, target: str | Release) -> tuple[Advisory, ...]:
    """Advisories for an upgrade from ``source`` to ``target``, oldest first."""
    src, dst = _r(source), _r(target)
    return tuple(sorted((a for a in ADVISORIES if a.applies(src, dst)), key=lambda a: a.release))
