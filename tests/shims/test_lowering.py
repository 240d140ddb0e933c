"""spyre_shims.lowering: a vendor's device-scoped fallbacks and decompositions,
on a real compile for the spyre device."""

from __future__ import annotations

import subprocess
import sys

import torch

from spyre_shims.lowering import register_fallback, registered_decompositions
from spyre_shims.runtime import reset_compiled
from tests.support.compare import assert_matches_eager


def test_a_vendor_can_keep_an_op_on_the_host_for_its_device(report) -> None:
    """spyre_shims.lowering.register_fallback: tanh stops being lowered on spyre
    (visible fallback, correct numbers) and is lowered again once removed."""
    x = torch.randn(33, 65)
    remove = register_fallback(torch.ops.aten.tanh.default, "spyre")
    try:
        fallbacks = assert_matches_eager(lambda a: torch.tanh(a) * 2, [x], atol=1e-6, rtol=1e-6, allow_fallback=True)
        assert any("fallback" in f and "tanh" in f for f in fallbacks), fallbacks
        cpu = torch.compile(lambda a: torch.tanh(a) * 3)(x)  # other devices are unaffected
        torch.testing.assert_close(cpu, torch.tanh(x) * 3)
    finally:
        remove()
        reset_compiled()
    assert not assert_matches_eager(lambda a: torch.tanh(a) * 2, [x], atol=1e-6, rtol=1e-6)


def test_registered_decompositions_are_named_by_device_and_op() -> None:
    """The Spyre backend's own decompositions (registered when Inductor first
    loads for the device) are listed as ``decomposition:<device>:<op>``, each op
    a real aten overload, topk among them; and the list handed out is a copy."""
    torch.compile(lambda a: a * 2)(torch.ones(4, device="spyre"))
    names = registered_decompositions()
    assert "decomposition:spyre:aten.topk.default" in names
    assert names, "the spyre backend registers decompositions"
    for name in names:
        kind, device, op = name.split(":", 2)
        assert kind == "decomposition" and device == "spyre"
        packet, _, overload = op.removeprefix("aten.").rpartition(".")
        assert hasattr(getattr(torch.ops.aten, packet), overload), name
    names.append("changed")
    assert "changed" not in registered_decompositions()  # a copy


def test_a_decomposition_is_added_after_inductor_made_its_fallbacks() -> None:
    """Up to torch 2.11, importing Inductor's lowerings makes fallbacks of sort
    and topk and asserts they have no decomposition: registering ours first
    broke every later compile in a fresh process (the CLI). The lowerings are
    loaded before a decomposition goes in."""
    code = ("import sys, torch\n"
            "from spyre_shims.lowering import register_decomposition\n"
            "assert 'torch._inductor.lowering' not in sys.modules\n"
            "register_decomposition(torch.ops.aten.sort.stable, 'spyre', lambda default, *a, **k: default(*a, **k))\n"
            "print('torch._inductor.lowering' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "True", res.stderr[-2000:]
