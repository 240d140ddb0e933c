"""Lazy registration: ``import torch`` registers the "spyre" device and nothing
heavy; Dynamo, Inductor, sympy and the Spyre compiler load on first use, and the
device still works with nothing but ``import torch``. (How long it takes is a
benchmark, benchmarks/bench_startup.py, not a test.)"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from spyre_shims._torch import lazy

HEAVY = ("torch._dynamo", "torch._inductor", "sympy", "spyre_shims.backend", "spyre_adapter.backend.compiler",
         "spyre_adapter.backend.spyre")


def _fresh(script: str, tmp_path: Path, autoload: bool = True) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if autoload else "0"}
    env.pop("PYTEST_XDIST_WORKER", None)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return json.loads(res.stdout.splitlines()[-1])


def test_import_torch_registers_the_device_and_nothing_heavy(tmp_path: Path) -> None:
    out = _fresh(f"""
        import json, sys
        import torch
        # Before torch 2.10 the device needs a C++ extension, built with torch.utils.cpp_extension
        # (which imports setuptools); from 2.10 (torch._C._acc) nothing of the kind is needed.
        heavy = {HEAVY!r} + (("setuptools",) if hasattr(torch._C, "_acc") else ())
        loaded = lambda: sorted(m for m in heavy if m in sys.modules)
        after_import = loaded()
        x = torch.randn(3, device="spyre")
        y = (x + 1).cpu()
        after_eager = loaded()
        f = torch.compile(lambda a: torch.softmax(a, -1) * 2)
        z = f(torch.randn(8, 33).to("spyre")).cpu()
        import spyre_adapter.backend.compiler
        print(json.dumps({{"after_import": after_import, "after_eager": after_eager, "device": str(x.device),
                          "eager_ops": torch.spyre.report().to_dict()["eager_ops"],
                          "launches": torch.spyre.report().to_dict()["launches"],
                          "installed": spyre_adapter.backend.compiler.is_installed(), "rows": z.shape[0]}}))
    """, tmp_path)
    assert out["after_import"] == [] and out["after_eager"] == []
    assert out["device"] == "spyre:0" and out["eager_ops"] >= 2
    assert out["installed"] and out["launches"] > 0 and out["rows"] == 8


def test_eager_kernels_are_registered_again_for_dynamo_even_from_inside_a_kernel(tmp_path: Path) -> None:
    """Importing Dynamo while an eager kernel runs (here: from an eager-op listener)
    defers the re-registration until no kernel runs; the device keeps working."""
    out = _fresh("""
        import json
        import torch
        from spyre_shims import device as dev
        from spyre_shims.device import add_eager_listener
        state = {}
        def listener(op):
            if "torch._dynamo" not in state:
                import torch._dynamo
                state["torch._dynamo"] = dev._DEVICE._swap_pending  # deferred: a kernel is running
        add_eager_listener(listener)
        x = torch.ones(4, device="spyre") * 3
        swapped = dev._DEVICE._traced_safe
        y = (x + 1).cpu()
        print(json.dumps({"deferred": state["torch._dynamo"], "swapped": swapped, "sum": y.sum().item()}))
    """, tmp_path)
    assert out == {"deferred": True, "swapped": True, "sum": 16.0}


def test_autoload_off_then_register(tmp_path: Path) -> None:
    out = _fresh("""
        import json, sys
        import torch
        before = hasattr(torch, "spyre")
        import spyre_adapter
        spyre_adapter.register()
        x = torch.arange(4.0).to("spyre")
        print(json.dumps({"before": before, "after": hasattr(torch, "spyre"), "sum": (x * 2).cpu().sum().item(),
                          "sympy": "sympy" in sys.modules}))
    """, tmp_path, autoload=False)
    assert out == {"before": False, "after": True, "sum": 12.0, "sympy": False}


def test_the_package_root_and_the_cli_do_not_import_torch(tmp_path: Path) -> None:
    out = _fresh("""
        import json, sys
        import spyre_adapter, spyre_adapter.cli.main, spyre_adapter.cli.run, spyre_adapter.cli.bench
        import spyre_adapter.cli.workloads, spyre_adapter.cli.opinfo
        print(json.dumps(sorted(m for m in ("torch", "sympy", "rich") if m in sys.modules)))
    """, tmp_path)
    assert out == []


# ------------------------------------------------------------------ the post-import hook itself

@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_after_import_runs_after_the_module_body_once(module_dir: Path) -> None:
    (module_dir / "lazy_probe_a.py").write_text("VALUE = 41\n")
    seen: list[int] = []
    lazy.after_import("lazy_probe_a", lambda: seen.append(sys.modules["lazy_probe_a"].VALUE + 1))
    assert seen == [] and lazy.pending().get("lazy_probe_a") == 1
    mod = importlib.import_module("lazy_probe_a")
    assert seen == [42] and "lazy_probe_a" not in lazy.pending()
    assert "exec_module" not in vars(mod.__loader__)  # the loader is put back
    lazy.after_import("lazy_probe_a", lambda: seen.append(0))  # already imported: runs now
    assert seen == [42, 0]


def test_a_failing_callback_warns_and_the_import_still_succeeds(module_dir: Path) -> None:
    (module_dir / "lazy_probe_b.py").write_text("VALUE = 1\n")

    def broken() -> None:
        raise KeyError("no such thing")

    lazy.after_import("lazy_probe_b", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module("lazy_probe_b")
    assert mod.VALUE == 1 and sys.modules["lazy_probe_b"] is mod
    assert any("lazy_probe_b" in str(w.message) and "no such thing" in str(w.message) for w in caught)


def test_a_module_that_fails_to_import_keeps_its_callback(module_dir: Path) -> None:
    (module_dir / "lazy_probe_c.py").write_text("raise ImportError('not yet')\n")
    seen: list[str] = []
    lazy.after_import("lazy_probe_c", lambda: seen.append("ran"))
    with pytest.raises(ImportError):
        importlib.import_module("lazy_probe_c")
    assert seen == [] and lazy.pending().get("lazy_probe_c") == 1
    (module_dir / "lazy_probe_c.py").write_text("VALUE = 2\n")
    importlib.invalidate_caches()
    importlib.import_module("lazy_probe_c")
    assert seen == ["ran"]
