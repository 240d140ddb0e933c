"""Static view of a torch source tree: find modules, parse them with ``ast``, resolve symbols.

Never imports torch: the tree may be any release (an extracted wheel under
``<torch-src>/<version>``, see :mod:`spyre_matrix.paths`, or the installed package's directory).
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

# Torch modules that turn themselves into a config object at import
# (``install_config_module(sys.modules[__name__])``) gain that class's members.
CONFIG_MODULE = ("torch.utils._config_module", "ConfigModule")
_MAX_DEPTH = 25  # import/alias/base-class chains are short; this only stops cycles


@dataclass(frozen=True)
class Definition:
    """Where a symbol is defined and what it looks like."""

    module: str
    qualname: str  # "" for a module itself
    kind: str  # function | method | property | class | attribute | module
    signature: tuple[str, ...] | None  # rendered parameters for callables

    @property
    def key(self) -> str:
        return f"{self.module}:{self.qualname}"


def render_signature(args: ast.arguments, default: Callable[[ast.expr], str] | None = None) -> tuple[str, ...]:
    """Parameters as written: ``name=`` has a default (``name=<default(expr)>`` when
    ``default`` renders it), ``/`` and ``*`` mark kinds."""
    out: list[str] = []
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)

    def value(expr: ast.expr) -> str:
        return "=" + (default(expr) if default is not None else "")

    for i, arg in enumerate(positional):
        out.append(arg.arg + (value(args.defaults[i - first_default]) if i >= first_default else ""))
        if args.posonlyargs and i == len(args.posonlyargs) - 1:
            out.append("/")
    if args.vararg:
        out.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        out.append("*")
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults):
        out.append(arg.arg + (value(kw_default) if kw_default is not None else ""))
    if args.kwarg:
        out.append("**" + args.kwarg.arg)
    return tuple(out)


def parameter_names(signature: tuple[str, ...]) -> tuple[str, ...]:
    """Plain parameter names in order (markers and default flags dropped; ``*args`` kept starred)."""
    return tuple(p.rstrip("=") for p in signature if p not in ("/", "*"))


@dataclass(frozen=True)
class _FromImport:
    module: str
    name: str


@dataclass(frozen=True)
class _ModuleRef:
    module: str


_Binding = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.expr | _FromImport | _ModuleRef | None


def _is_overload(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    # typing.overload stubs are not the runtime binding.
    for deco in node.decorator_list:
        if isinstance(deco, ast.Name) and deco.id == "overload":
            return True
        if isinstance(deco, ast.Attribute) and deco.attr == "overload":
            return True
    return False


def _is_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for deco in node.decorator_list:
        name = deco.id if isinstance(deco, ast.Name) else getattr(deco, "attr", "")
        if name in ("property", "cached_property"):
            return True
    return False


def _flat_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements that bind names at this level, looking through if/try/with blocks."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            out += _flat_statements(stmt.body) + _flat_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            handlers = [s for h in stmt.handlers for s in h.body]
            out += _flat_statements(stmt.body + handlers + stmt.orelse + stmt.finalbody)
        elif isinstance(stmt, ast.With):
            out += _flat_statements(stmt.body)
        else:
            out.append(stmt)
    return out


def _assigned_names(stmt: ast.stmt) -> list[tuple[str, ast.expr | None]]:
    if isinstance(stmt, ast.Assign):
        return [(t.id, stmt.value) for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [(stmt.target.id, stmt.value)]
    return []


def _scope_bindings(body: list[ast.stmt], package: str) -> dict[str, _Binding]:
    """Name -> what binds it in a module or class body; the last binding wins, as at runtime."""
    bindings: dict[str, _Binding] = {}
    for stmt in _flat_statements(body):
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            if not _is_overload(stmt):
                bindings[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            bindings[stmt.name] = stmt
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(stmt, package)
            for alias in stmt.names:
                if alias.name != "*":
                    bindings[alias.asname or alias.name] = _FromImport(source, alias.name)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    bindings[alias.asname] = _ModuleRef(alias.name)
                else:  # `import a.b.c` binds `a`
                    top = alias.name.split(".")[0]
                    bindings[top] = _ModuleRef(top)
        else:
            for name, value in _assigned_names(stmt):
                bindings[name] = value
    return bindings


def _absolute(stmt: ast.ImportFrom, package: str) -> str:
    if not stmt.level:
        return stmt.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (stmt.level - 1)]
    return ".".join(base + ([stmt.module] if stmt.module else []))


def _dotted(expr: ast.expr) -> list[str] | None:
    """``a.b.C`` -> ["a", "b", "C"]; ``Generic[T]`` -> its value; anything else None."""
    if isinstance(expr, ast.Subscript):
        return _dotted(expr.value)
    if isinstance(expr, ast.Name):
        return [expr.id]
    if isinstance(expr, ast.Attribute):
        head = _dotted(expr.value)
        return head + [expr.attr] if head else None
    return None


@dataclass
class ModuleIndex:
    name: str
    tree: ast.Module
    is_package: bool
    bindings: dict[str, _Binding] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    config_module: bool = False

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]

    @classmethod
    def build(cls, name: str, source: str, is_package: bool) -> ModuleIndex:
        index = cls(name, ast.parse(source), is_package)
        index.bindings = _scope_bindings(index.tree.body, index.package)
        for stmt in _flat_statements(index.tree.body):
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                index.star_imports.append(_absolute(stmt, index.package))
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                func = _dotted(stmt.value.func)
                index.config_module |= bool(func) and func[-1] == "install_config_module"
        return index


@dataclass(frozen=True)
class _Hit:
    module: str
    qualname: str
    node: _Binding  # ClassDef/FunctionDef/expr; None for a module


class SourceTree:
    """A directory holding a ``torch/`` package (extracted wheel or installed torch)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        if not (self.root / "torch").is_dir():
            raise FileNotFoundError(f"{self.root} has no torch/ package")
        self._indexes: dict[str, ModuleIndex | None] = {}

    @classmethod
    def installed(cls) -> SourceTree:
        """The torch installed in this interpreter, located without importing it."""
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("torch is not installed")
        return cls(Path(next(iter(spec.submodule_search_locations))).parent)

    @cached_property
    def version(self) -> str | None:
        """``torch.version.__version__`` read from the file, local label included."""
        index = self.index("torch.version")
        value = index.bindings.get("__version__") if index else None
        return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None

    def module_file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def has_module(self, module: str) -> bool:
        # Namespace-style directories (no __init__.py) still import in torch.
        return self.module_file(module) is not None or self.root.joinpath(*module.split(".")).is_dir()

    def index(self, module: str) -> ModuleIndex | None:
        if module not in self._indexes:
            path = self.module_file(module)
            try:
                self._indexes[module] = (
                    ModuleIndex.build(module, path.read_text(encoding="utf-8"), path.name == "__init__.py")
                    if path
                    else None
                )
            except SyntaxError:
                self._indexes[module] = None
        return self._indexes[module]

    # -- resolution -----------------------------------------------------------------

    def resolve(self, module: str, qualname: str) -> Definition | None:
        """Where ``module.qualname`` would be found at runtime, or None if it would not."""
        hit = self._lookup(module, qualname.split(".") if qualname else [], 0)
        return _definition(hit) if hit else None

    def _lookup(self, module: str, parts: list[str], depth: int) -> _Hit | None:
        if depth > _MAX_DEPTH:
            return None
        if not parts:
            return _Hit(module, "", None) if self.has_module(module) else None
        index = self.index(module)
        head, rest = parts[0], parts[1:]
        binding = index.bindings.get(head, None) if index else None
        if index is None or head not in index.bindings:
            return self._lookup_unbound(module, index, parts, depth)
        if isinstance(binding, _FromImport):
            # `from A import B`: attribute B of A, else submodule A.B (always the
            # submodule when a package imports its own child).
            submodule = f"{binding.module}.{binding.name}"
            if binding.module == module and self.has_module(submodule):
                return self._lookup(submodule, rest, depth + 1)
            hit = self._lookup(binding.module, [binding.name, *rest], depth + 1)
            return hit or self._lookup(submodule, rest, depth + 1)
        if isinstance(binding, _ModuleRef):
            return self._lookup(binding.module, rest, depth + 1)
        if not rest:
            return _Hit(module, head, binding)
        if isinstance(binding, ast.ClassDef):
            return self._member(module, head, binding, rest, depth + 1)
        target = _dotted(binding) if isinstance(binding, ast.expr) else None
        # `Old = New` keeps old attribute access working: follow it.
        return self._lookup(module, target + rest, depth + 1) if target else None

    def _lookup_unbound(
        self, module: str, index: ModuleIndex | None, parts: list[str], depth: int
    ) -> _Hit | None:
        submodule = f"{module}.{parts[0]}"
        if self.has_module(submodule):
            return self._lookup(submodule, parts[1:], depth + 1)
        if index is None:
            return None
        for star in index.star_imports:
            hit = self._lookup(star, parts, depth + 1)
            if hit:
                return hit
        if index.config_module:
            return self._lookup(CONFIG_MODULE[0], [CONFIG_MODULE[1], *parts], depth + 1)
        return None

    def _member(
        self, module: str, class_qual: str, node: ast.ClassDef, rest: list[str], depth: int
    ) -> _Hit | None:
        members = _scope_bindings(node.body, "")
        name, more = rest[0], rest[1:]
        if name in members and not isinstance(members[name], _FromImport | _ModuleRef):
            member = members[name]
            if not more:
                return _Hit(module, f"{class_qual}.{name}", member)
            if isinstance(member, ast.ClassDef):
                return self._member(module, f"{class_qual}.{name}", member, more, depth + 1)
            return None
        # Inherited: look the member up on each base class, in MRO-ish order.
        for base in node.bases:
            dotted = _dotted(base)
            base_hit = self._lookup(module, dotted, depth + 1) if dotted else None
            if base_hit and isinstance(base_hit.node, ast.ClassDef):
                hit = self._member(base_hit.module, base_hit.qualname, base_hit.node, rest, depth + 1)
                if hit:
                    return hit
        return None

    # -- module API -----------------------------------------------------------------

    def api(self, module: str) -> dict[str, str]:
        """Public names defined in ``module`` (classes with their members) -> descriptor.

        Descriptor: "class", "attr", "property" or "def(<signature>)". Imports are not
        part of a module's own API (they are counted where they are defined).
        """
        index = self.index(module)
        out: dict[str, str] = {}
        if index is not None:
            _collect_api(out, "", index.bindings)
        return dict(sorted(out.items()))

    def members(self, module: str, qualname: str) -> dict[str, str]:
        """Public members of the class reachable as ``module.qualname`` ("Class.member" -> descriptor).

        Only members the class body defines itself: what a vendor subclass overrides or calls.
        """
        hit = self._lookup(module, qualname.split("."), 0)
        out: dict[str, str] = {}
        if hit and isinstance(hit.node, ast.ClassDef):
            _collect_api(out, qualname + ".", _scope_bindings(hit.node.body, ""))
        return dict(sorted(out.items()))

    def describe(self, module: str, qualname: str) -> str | None:
        """The API descriptor of ``module.qualname`` (see :meth:`api`), None if unresolved."""
        hit = self._lookup(module, qualname.split("."), 0)
        if hit is None:
            return None
        if hit.node is None and not hit.qualname:
            return "module"
        return _describe(hit.node) or "attr"

    def modules_under(self, package: str) -> list[str]:
        """Every module in a package directory (sorted), e.g. all of ``torch._inductor``."""
        base = self.root.joinpath(*package.split("."))
        names = []
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(self.root).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        return names


def _public(name: str, member: bool) -> bool:
    if member and name in ("__init__", "__call__"):
        return True
    return not name.startswith("_")


def _describe(node: _Binding) -> str | None:
    if isinstance(node, ast.ClassDef):
        return "class"
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return "property" if _is_property(node) else f"def({', '.join(render_signature(node.args))})"
    if isinstance(node, _FromImport | _ModuleRef):
        return None
    return "attr"


def _collect_api(out: dict[str, str], prefix: str, bindings: dict[str, _Binding]) -> None:
    for name, node in bindings.items():
        descriptor = _describe(node)
        if descriptor is None or not _public(name, member=bool(prefix)):
            continue
        qualname = prefix + name
        out[qualname] = descriptor
        if isinstance(node, ast.ClassDef):
            _collect_api(out, qualname + ".", _scope_bindings(node.body, ""))


def _definition(hit: _Hit) -> Definition:
    node = hit.node
    if node is None and not hit.qualname:
        return Definition(hit.module, "", "module", None)
    if isinstance(node, ast.ClassDef):
        return Definition(hit.module, hit.qualname, "class", None)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        if _is_property(node):
            return Definition(hit.module, hit.qualname, "property", None)
        kind = "method" if "." in hit.qualname else "function"
        return Definition(hit.module, hit.qualname, kind, render_signature(node.args))
    return Definition(hit.module, hit.qualname, "attribute", None)
