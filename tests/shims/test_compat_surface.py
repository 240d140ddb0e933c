"""Tier 2 of the stable API (``spyre_shims.compat.*``), name by name.

Static part (no torch needed for the facts): the declaration, the generated
per-release table and each module's ``__all__`` agree, and every stable name
resolves on every release of the window according to the API index built from
the release wheels. Runtime part (runs in every compat cell, so on every release
of the matrix): each name resolves on the installed torch and is exercised for
its kind: classes are subclassed (and ``isinstance`` checked against the real
class), functions are called where a call needs no graph being lowered, values
are read.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

from spyre_codemods.api_index import load_index
from spyre_codemods.compat_rule import compatible
from spyre_codemods.compat_table import build_table, dumps
from spyre_surface.compat_api import load_compat_api, load_compat_table

API = load_compat_api()
TABLE = load_compat_table()
NAMES = [(m.name, n) for m in API.modules.values() for n in m.names]
FUNCTIONS = [(m.name, f) for m in API.modules.values() for f in m.functions]


def test_table_is_generated_from_the_declaration_and_the_index() -> None:
    from spyre_surface.compat_api import TABLE_PATH

    assert TABLE_PATH.read_text(encoding="utf-8") == dumps(build_table()), \
        "run python -m spyre_codemods.compat_table --write"


def test_rule_names_are_generated_from_the_index() -> None:
    """compat_rule.toml is what the rule gives on the committed index: every public
    class and function of the extension-point modules, stable or explained."""
    from spyre_codemods.compat_rule import apply_rule, render
    from spyre_surface.compat_api import RULE_PATH

    names, excluded = apply_rule()
    assert RULE_PATH.read_text(encoding="utf-8") == render(names, excluded), \
        "run python -m spyre_codemods.compat_rule --write"
    assert sum(map(len, names.values())) > 400 and len(excluded) > 100
    assert all(API.no_equivalent[q].reason == r for q, r in excluded.items())
    assert "torch._inductor.lowering.register_pointwise" not in excluded  # hand-declared reasons win


def test_every_stable_name_resolves_on_every_release_of_the_window() -> None:
    releases = [".".join(r.split(".")[:2]) for r in load_index().release_names]
    assert releases == TABLE["releases"] and len(releases) == 10
    missing = {f"{m}.{n}": e["missing"] for m, ns in TABLE["modules"].items() for n, e in ns.items()
               if e.get("missing")}
    assert missing == {}
    for module, names in TABLE["modules"].items():
        for name, entry in names.items():
            covered = sorted(r for rs in entry["where"].values() for r in rs)
            assert covered == sorted(releases), f"{module}.{name}"


def test_reexported_functions_keep_their_signature_across_the_window() -> None:
    """A plain re-export is only stable when no release breaks a caller written for
    an older one: where one did, the module defines a stable function instead."""
    broken = []
    for module, names in TABLE["modules"].items():
        for name, entry in names.items():
            sigs = sorted(entry.get("signatures", {}).items(), key=lambda kv: min(
                tuple(int(x) for x in r.split(".")) for r in kv[1]))
            for (old, _), (new, releases) in zip(sigs, sigs[1:]):
                if not compatible(old, new):
                    broken.append(f"{module}.{name} ({releases[0]}): ({old}) -> ({new})")
    assert broken == []


@pytest.mark.parametrize("module", sorted(API.modules))
def test_module_all_matches_the_declaration(module: str) -> None:
    mod = importlib.import_module(f"spyre_shims.compat.{module}")
    assert list(mod.__all__) == API.modules[module].exported
    for name in API.modules[module].functions:
        assert inspect.isfunction(getattr(mod, name)) and getattr(mod, name).__doc__
    with pytest.raises(AttributeError):
        getattr(mod, "compile_fx_not_a_stable_name")


def _exercise(obj: Any, kind: str, name: str) -> None:
    if kind == "class":
        assert isinstance(obj, type), name
        if issubclass(obj, __import__("enum").Enum):  # enums with members cannot be subclassed
            assert list(obj), name
            return
        try:
            sub = type(f"Vendor{name}", (obj,), {"__module__": __name__})
        except TypeError as exc:  # final classes / enums cannot be subclassed: check the instance protocol
            assert "final" in str(exc) or issubclass(obj, __import__("enum").Enum), (name, exc)
        else:
            assert obj in sub.__mro__
            if not getattr(obj, "_is_protocol", False):  # protocols answer issubclass only when runtime-checkable
                assert issubclass(sub, obj)
    elif kind == "function":
        assert callable(obj), name
        inspect.signature(obj)  # introspectable: vendors wrap these
    elif kind == "module":
        assert inspect.ismodule(obj), name
    else:
        assert obj is not None or name in ("V",), name


@pytest.mark.parametrize(("module", "name"), NAMES, ids=[f"{m}.{n}" for m, n in NAMES])
def test_stable_name_resolves_and_is_exercised(module: str, name: str) -> None:
    mod = importlib.import_module(f"spyre_shims.compat.{module}")
    obj = getattr(mod, name)
    kinds = TABLE["modules"][module][name]["kind"]
    kind = next(iter(kinds))
    if kind == "unindexed":
        kind = "class" if isinstance(obj, type) else "function" if callable(obj) else "value"
    _exercise(obj, kind, name)
    # the same object Inductor uses on this release, wherever it keeps it
    from spyre_shims._torch.compat_api import candidates

    owners = []
    for loc in candidates(module, name):
        mod_name, _, attr = loc.partition(":")
        try:
            target = importlib.import_module(mod_name)
            owners.append(getattr(target, attr) if attr else target)
        except (ImportError, AttributeError):
            continue
    assert any(o is obj for o in owners) or module == "ops_handlers" and name == "DefaultHandler"


# ---------------------------------------------------------------- calls and constructions


def test_ir_layouts_and_deps_construct() -> None:
    import torch

    from spyre_shims.compat import deps, ir, sizevars

    layout = ir.FixedLayout(torch.device("cpu"), torch.float32, [4, 8], [8, 1])
    assert isinstance(layout, ir.Layout) and list(layout.size) == [4, 8]
    flexible = ir.FlexibleLayout(torch.device("cpu"), torch.float32, [4, 8])
    assert list(flexible.stride) == [8, 1]
    assert ir.FlexibleLayout.contiguous_strides([2, 3, 4]) == [12, 4, 1]
    x = sizevars.sympy_index_symbol("x0")
    dep = deps.MemoryDep("buf0", x, (x,), (sizevars.sympy_product([4, 8]),))
    assert isinstance(dep, deps.Dep) and dep.name == "buf0"
    assert sizevars.sympy_product([2, 3]) == 6 and sizevars.ceildiv(7, 2) == 4
    assert sizevars.FloorDiv(x, 2).func is sizevars.FloorDiv


def test_ops_handlers_subclass_and_dispatch() -> None:
    from spyre_shims.compat import graph, ops_handlers

    class Recorder(ops_handlers.DefaultHandler):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self.seen: list[str] = []

        def _default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            self.seen.append(name)
            return f"{name}{args}"

    handler = Recorder()
    with graph.V.set_ops_handler(handler):
        assert graph.ops.add("a", "b") == "add('a', 'b')"
    assert handler.seen[0] == "add"


def test_codegen_pieces_construct() -> None:
    from spyre_shims.compat import codegen

    buf = codegen.IndentedBuffer()
    buf.writeline("def f():")
    with buf.indent():
        buf.writeline("return 1")
    assert buf.getvalue() == "def f():\n    return 1\n"
    assert codegen.BackendFeature.REDUCE_TO_SINGLE_ELEMENT is not None
    assert codegen.pexpr(codegen.PythonPrinter().doprint(2)) == "2" or codegen.pexpr(2) == "2"


def test_lowering_tables_and_config() -> None:
    import torch

    from spyre_shims.compat import config, lowering, passes

    assert torch.ops.aten.add.Tensor in lowering.lowerings
    assert isinstance(lowering.select_decomp_table(), dict)
    assert all(isinstance(p, passes.PatternMatcherPass) for p in passes.post_grad_patterns)  # one per pass round
    with config.inductor_config(debug=True):
        assert config.inductor.debug is True
    with config.dynamo_config(cache_size_limit=5):
        limit = getattr(config.dynamo, "recompile_limit", None) or config.dynamo.cache_size_limit
        assert limit == 5
    with pytest.raises(ValueError, match="recompile_limt"):
        config.dynamo_config(recompile_limt=1)


def test_caches_and_dynamo_calls() -> None:
    import torch

    from spyre_shims.compat import caches, dynamo

    assert caches.code_hash("x") == caches.code_hash("x") != caches.code_hash("y")
    with caches.fresh_cache():
        assert isinstance(caches.cache_dir(), str)

    def f(x: Any) -> Any:
        return x + 1

    assert dynamo.allow_in_graph(f) is f
    dynamo.reset()
    assert dynamo.counters is not None
    compiled = torch.compile(f, backend="eager")
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 2.0))


# ---------------------------------------------------------------- Dynamo backends: AOTAutograd, registry, guards


def _mlp() -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def test_aot_module_simplified_compiles_forward_and_backward() -> None:
    """The stable function with the partitioners and boxed compilers of ``compat.aot``:
    a Dynamo backend built the way out-of-tree ones are, forward and backward graphs
    compiled, gradients equal to eager."""
    import torch

    from spyre_shims.compat import aot, dynamo

    seen: list[str] = []

    def compiler(gm: Any, example_inputs: Any) -> Any:
        seen.append("graph")
        assert isinstance(gm, torch.fx.GraphModule) and isinstance(aot.get_aot_graph_name(), str)
        return aot.make_boxed_func(gm.forward)

    def backend(gm: Any, example_inputs: Any) -> Any:
        return aot.aot_module_simplified(gm, example_inputs, fw_compiler=compiler,
                                         partition_fn=aot.min_cut_rematerialization_partition)

    torch.manual_seed(0)
    model, x = _mlp(), torch.randn(3, 4)
    dynamo.reset()
    out = torch.compile(model, backend=backend)(x)
    out.sum().backward()
    compiled_grad = model[0].weight.grad.clone()
    model.zero_grad()
    model(x).sum().backward()
    assert seen == ["graph", "graph"]  # forward, then backward
    assert torch.allclose(compiled_grad, model[0].weight.grad)
    with pytest.raises(TypeError):  # not a keyword of any release
        aot.aot_module_simplified(torch.fx.symbolic_trace(model), [x], compiler, not_an_option=1)


def test_dynamo_backend_registration_and_helpers() -> None:
    """Register a backend by name, look it up, wrap it with ``aot_autograd`` and a boxed
    compiler; the helpers Dynamo's own backends share."""
    import torch

    from spyre_shims.compat import aot, dynamo

    calls: list[int] = []

    def fw(gm: Any, example_inputs: Any) -> Any:
        calls.append(len(example_inputs))
        assert dynamo.device_from_inputs(example_inputs) == torch.device("cpu")
        return gm.forward

    name = "spyre_compat_test_backend"
    if name not in dynamo.list_backends(exclude_tags=()):
        dynamo.register_backend(name=name)(dynamo.aot_autograd(fw_compiler=aot.make_boxed_compiler(fw)))
    assert isinstance(dynamo.lookup_backend(name), dynamo.AotAutograd)
    dynamo.reset()
    x = torch.randn(5)
    assert torch.allclose(torch.compile(lambda t: t.sin() + 1, backend=name)(x), x.sin() + 1)
    assert calls and all(n >= 1 for n in calls)
    assert dynamo.dtype_from_inputs([x]) == torch.float32
    reason = dynamo.GraphCompileReason("split", [], False)
    assert reason.reason == "split"
    assert callable(dynamo.boxed_nop) and issubclass(dynamo.BackendCompilerFailed, dynamo.TorchDynamoException)


def test_functorch_config_and_guard_sources() -> None:
    from spyre_shims.compat import config, guards

    with config.functorch_config(debug_assert=True):
        assert config.functorch.debug_assert is True
    with pytest.raises(ValueError, match="debug_asert"):
        config.functorch_config(debug_asert=True)
    local = guards.LocalSource("x")
    attr = guards.AttrSource(local, "weight")
    # (``name`` / ``guard_source`` are methods on older releases, properties on newer: Dynamo's members)
    assert isinstance(attr, guards.Source) and attr.base is local
    assert guards.is_from_local_source(attr)
    assert guards.GuardSource.LOCAL in list(guards.GuardSource)


def test_cudagraphs_checks_run_without_a_gpu() -> None:
    """What Dynamo's cudagraphs backend asks before recording, on a CPU graph."""
    import torch

    from spyre_shims.compat import cudagraphs, utils

    gm = torch.fx.symbolic_trace(lambda x, y: x * y + 1)
    infos = cudagraphs.get_placeholder_info(gm.graph)
    assert [type(i) for i in infos] == [cudagraphs.PlaceholderInfo] * 2
    index = cudagraphs.BoxedDeviceIndex(None)
    index.set(0)
    assert index.value == 0
    cudagraphs.reset_cudagraph_trees()  # no tree recorded: nothing to free
    with utils.enable_aot_logging():
        assert torch.equal(gm(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))


def test_rule_follows_reexports_instead_of_excluding_them() -> None:
    """A public name a Dynamo module defines that the stable module already serves under
    the same name (re-exported by ``torch._dynamo``) is the same object, not a clash:
    no no-equivalent entry for it, and ``migrate`` finds the stable name from either spelling."""
    from spyre_codemods.stable_names import StableNames

    for qualname in ("torch._dynamo.decorators.disable", "torch._dynamo.backends.registry.list_backends",
                     "torch._dynamo.eval_frame.OptimizedModule"):
        assert qualname not in API.no_equivalent, qualname
    names = StableNames("2.10", None)
    assert names.target("torch._dynamo.decorators.disable") == names.target("torch._dynamo.disable")
    assert names.target("torch._dynamo.decorators.disable") is not None


def test_every_name_dynamos_backends_use_has_a_decision() -> None:
    """The Dynamo-backend corpus of the installed wheel (``tools/mine_backend_surface.py
    --corpus dynamo``): every name Dynamo's own compiler backends use is served by a stable
    name (or is an option of a served config module), or is a documented no-equivalent with
    its reason. Mined on 2.13, the release the tier was designed from."""
    import importlib.metadata
    import importlib.util
    import sys
    from pathlib import Path

    from spyre_codemods.stable_names import StableNames

    release = importlib.metadata.version("torch").split("+")[0]
    if not release.startswith("2.13."):
        pytest.skip(f"the Dynamo corpus was mined on 2.13; this is {release}")
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tools"))
    try:
        from mine_backend_surface import mine
    finally:
        sys.path.remove(str(root / "tools"))
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    table = mine(Path(spec.origin).parent / "_inductor", release, "dynamo")
    assert "torch._functorch.partitioners.min_cut_rematerialization_partition" in table  # via functorch.compile
    names = StableNames(release, None)
    undecided = []
    for qualname in sorted(table):
        owner = qualname.rpartition(".")[0]
        if names.target(qualname) is not None or (names.is_module(owner) and names.target(owner) is not None):
            continue
        if qualname in API.no_equivalent or names.canonical(qualname) in API.no_equivalent:
            continue
        undecided.append(qualname)
    assert undecided == []
