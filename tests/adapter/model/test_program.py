"""Loading never runs code, on the Spyre side: a program document and the
payload the backend embeds in generated code meet hostile input (code, huge
numbers, deep nesting, unknown fields) with one clear error each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spyre_shims import kernel_ir as kir
from spyre_shims.jsonform import FormatError
from tests.support import kernels as K

from spyre_adapter.backend.spyre import PayloadError, SpyreBackend, plan, read_payload
from spyre_adapter.model.machine import DEFAULT
from spyre_adapter.model.program import ProgramFormatError, from_json, to_json

CODE = "__import__('os').system('touch {mark}') or Integer(0)"


def _program_doc() -> dict:
    return json.loads(to_json(plan(K.add(8, 64), DEFAULT, {})))


def _payload(**changes: object) -> str:
    doc = {"ir": kir.to_json(K.add(8, 64)), "machine": DEFAULT.to_dict()}
    doc.update(changes)
    return json.dumps(doc)


def test_the_payload_of_a_compiled_kernel_reads_back() -> None:
    kernel, machine = read_payload(SpyreBackend().compile(K.add(8, 64)))
    assert kernel == K.add(8, 64) and machine == DEFAULT


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda d, mark: d["kernel"]["kernels"][0]["body"][0]["args"].__setitem__(1, {"$e": CODE.format(mark=mark)}),
                 id="code in an index expression"),
    pytest.param(lambda d, mark: d["kernel"]["kernels"][0]["body"][0]["args"].__setitem__(1, {"$x": ["**", 7, 10**9]}),
                 id="huge exponent"),
    pytest.param(lambda d, mark: d.__setitem__("cores", [[[[]]]] * 3), id="wrong type"),
    pytest.param(lambda d, mark: d.__setitem__("__reduce__", "os.system"), id="unknown field"),
])
def test_program_reader_refuses_hostile_documents(tmp_path: Path, mutate) -> None:
    doc = _program_doc()
    mutate(doc, tmp_path / "mark")
    with pytest.raises(FormatError) as info:
        from_json(json.dumps(doc))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "mark").exists()


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "9" * 100_000, "1e999999", '{"version": "2"}'])
def test_program_reader_refuses_unreadable_json(text: str) -> None:
    with pytest.raises(ProgramFormatError):
        from_json(text)


@pytest.mark.parametrize("payload", [
    pytest.param("[" * 100_000 + "]" * 100_000, id="deep JSON"),
    pytest.param("9" * 100_000, id="100000-digit number"),
    pytest.param(json.dumps({"ir": "x"}), id="missing machine"),
    pytest.param(_payload(extra=1), id="unknown field"),
    pytest.param(_payload(machine={"cores": "__import__('os')"}), id="code as a machine value"),
    pytest.param(_payload(machine={"__class__": 1}), id="unknown machine parameter"),
    pytest.param(_payload(machine={"cores": 1e999}), id="infinite machine value"),
    pytest.param(_payload(ir=json.dumps(json.loads(kir.to_json(K.add(8, 64))) | {"$t": "Instr"})), id="ir not a kernel"),
])
def test_backend_payload_reader_refuses_hostile_payloads(payload: str) -> None:
    with pytest.raises(FormatError) as info:
        SpyreBackend().load(payload)
    assert isinstance(info.value, (PayloadError, FormatError)) and "\n" not in str(info.value)
