"""Loading never runs code: every reader of the stable API's interchange formats
(Kernel IR, index expressions, kernel envelopes) meets hostile input - code,
huge numbers, deep nesting - with one clear error and no side effect. The Spyre
side's readers (programs, payloads) are in tests/adapter/model/test_program.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spyre_shims import index as sidx
from spyre_shims import kernel_ir as kir
from spyre_shims.jsonform import FormatError
from spyre_shims.runtime import load_kernel
from tests.support import kernels as K

#: Each payload would create this file if anything evaluated it.
MARK = "pwned-by-payload"


def code(folder: Path) -> str:
    return f"__import__('os').system('touch {folder / MARK}') or Integer(0)"


def _kernel_json_with(index_leaf: object) -> str:
    """A real Kernel IR document whose first index expression is replaced."""
    doc = json.loads(kir.to_json(K.add(4, 64)))
    doc["kernels"][0]["body"][0]["args"][1] = index_leaf
    return json.dumps(doc)


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _hostile(folder: Path) -> dict[str, object]:
    """Index-expression leaves: version-2 trees and version-1 text."""
    return {
        "v1 code": {"$e": code(folder)},
        "v1 lambda": {"$e": "(lambda: __import__('os'))()"},
        "v1 attribute": {"$e": "Integer(1).__class__"},
        "v2 unknown op": {"$x": ["__import__", "os"]},
        "v2 symbol with code": {"$x": code(folder)},
        "v2 huge exponent": {"$x": ["**", 10, 10**9]},
        "v2 power tower": {"$x": ["**", ["**", 2, 64], 64]},
        "v2 huge integer": {"$x": 10**400},
        "v1 huge exponent": {"$e": "Pow(Integer(10), Integer(1000000000))"},
        "v2 deep nesting": {"$x": json.loads(_nest(300))},
        "v1 deep nesting": {"$e": "Add(" * 5000 + "Integer(1)" + ")" * 5000},
    }


def _nest(depth: int) -> str:
    return '["+", ' * depth + "1" + "]" * depth


@pytest.mark.parametrize("name", list(_hostile(Path("/x"))))
def test_kernel_ir_reader_refuses_hostile_index_expressions(tmp_path: Path, name: str) -> None:
    text = _kernel_json_with(_hostile(tmp_path)[name])
    with pytest.raises(FormatError) as info:
        kir.from_json(text)
    assert str(info.value).startswith("Kernel IR") and "\n" not in str(info.value)
    assert not (tmp_path / MARK).exists()


@pytest.mark.parametrize("text", [
    pytest.param(_deep_json(100_000), id="deep JSON"),
    pytest.param('{"$t": "KernelGroup", "name": ' + "9" * 100_000 + "}", id="100000-digit number"),
    pytest.param('{"$t": "os.system", "command": "true"}', id="unknown type"),
    pytest.param('{"$t": "KernelGroup", "__class__": 1}', id="unknown field"),
    pytest.param("1e999999", id="infinite float"),
])
def test_kernel_ir_reader_refuses_hostile_documents(text: str) -> None:
    with pytest.raises(FormatError, match="^Kernel IR"):
        kir.from_json(text)


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')",
    '["**", 2, 1000000]',
    _nest(5000),
    "9" * 100_000,
    "Symbol('x', evaluate=__import__('os'))",
])
def test_index_parse_refuses_with_a_value_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ValueError):
        sidx.parse(text)


def test_index_parse_refuses_code_without_running_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        sidx.parse(code(tmp_path))
    assert not (tmp_path / MARK).exists()


def _envelope(**changes: object) -> str:
    env = {"name": "k", "kind": "reference", "backend": "spyre_adapter.backend.spyre:SpyreBackend", "args": ["a"],
           "symbols": [], "payload": kir.to_json(K.add(4, 64))}
    env.update(changes)
    return json.dumps(env)


@pytest.mark.parametrize("envelope", [
    pytest.param(_deep_json(100_000), id="deep JSON"),
    pytest.param(_envelope(kind="exec"), id="unknown kind"),
    pytest.param(_envelope(args="a"), id="args not a list"),
    pytest.param(_envelope(payload=_kernel_json_with({"$e": "__import__('os')"})), id="code in the payload"),
])
def test_kernel_envelopes_are_checked(envelope: str) -> None:
    with pytest.raises(FormatError, match="^(kernel envelope|Kernel IR)"):
        load_kernel("spyre", envelope)


@pytest.mark.parametrize("ref", ["os:system", "builtins:eval", "no_such_module_x:Backend", ":", "spyre_shims:API_LEVEL"])
def test_an_envelope_cannot_name_something_else_as_its_backend(ref: str) -> None:
    """Without a registered backend the envelope's class is imported - only a
    Backend for the device is accepted, nothing else is called."""
    with pytest.raises(FormatError, match="kernel envelope: backend"):
        load_kernel("not-registered-device", _envelope(kind="device", backend=ref))



def test_decode_refuses_classes_that_are_not_dataclasses() -> None:
    """A ``$t`` may only name a dataclass: passing another class is the caller's
    mistake, reported before any data is read (not a FormatError about the data)."""
    from spyre_shims.jsonform import decode, encode

    class NotData:
        pass

    ref = kir.Ref(3)
    data = encode(ref)
    with pytest.raises(TypeError, match="classes must be dataclasses, not NotData"):
        decode(data, kir.Ref, [kir.Ref, NotData])
    assert decode(data, kir.Ref, [kir.Ref]) == ref
