"""Bounded memory: the emulator evaluates large kernels in chunks, the workload
runner compares large results in chunks, aliases device inputs instead of
copying them, skips (and says so) a case that cannot fit, and measures each
file's peak RSS."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from spyre_shims import reference
from spyre_shims.device import host_view

from spyre_adapter.workloads import builders
from spyre_adapter.workloads import differential as diff
from spyre_adapter.workloads import spec
from spyre_adapter.workloads.runner import run_files


def test_chunks_cover_the_box_exactly_and_respect_the_limit() -> None:
    box = ((0, 5), (2, 9), (0, 3))
    for limit, red in ((4, 1), (7, 2), (1, 1), (10_000, 1), (2, 5)):
        pieces = reference._chunk_boxes(box, red, limit)
        points = [(a, b, c) for p in pieces for a in range(*p[0]) for b in range(*p[1]) for c in range(*p[2])]
        assert sorted(points) == [(a, b, c) for a in range(5) for b in range(2, 9) for c in range(3)]
        if red <= limit:
            assert all((p[0][1] - p[0][0]) * (p[1][1] - p[1][0]) * (p[2][1] - p[2][0]) * red <= limit
                       for p in pieces)


def test_chunked_evaluation_matches_eager(monkeypatch: pytest.MonkeyPatch, report) -> None:
    """The same compiled kernels, evaluated 7 points at a time, give eager's result."""
    monkeypatch.setattr(reference, "_CHUNK_POINTS", 7)
    x = torch.randn(9, 33)
    f = torch.compile(lambda a: torch.softmax(a, -1) * 2 + a.sum(0) + a[:, :1].cos(), dynamic=False)
    torch.testing.assert_close(f(x.to("spyre")).cpu(), torch.softmax(x, -1) * 2 + x.sum(0) + x[:, :1].cos(),
                               atol=1e-5, rtol=1e-5)
    assert report.launch_count > 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int32])
def test_chunked_compare_agrees_with_assert_close(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    e = (torch.randn(1000, generator=g) * 50).to(dtype)
    if dtype.is_floating_point:
        e[10], e[11] = float("nan"), float("inf")
    close = e.clone()
    off = e.clone()
    off[[3, 500, 999]] += 7
    assert diff._compare_chunked(e, close, 1e-3, 1e-3, chunk=64)[0] is None
    msg, err = diff._compare_chunked(e, off, 1e-3, 1e-3, chunk=64)
    assert msg is not None and msg.startswith("3 of 1000") and "flat index 3" in msg
    if dtype.is_floating_point:
        assert err == pytest.approx(float((off.float() - e.float()).abs()[torch.isfinite(off.float())].max()))


def test_device_inputs_alias_the_host_tensors_they_are_made_from() -> None:
    t = {"tensor": {"shape": [64, 32], "dtype": "torch.bfloat16", "init": "rand"}}
    built = builders.build(spec.CaseSpec("c", "torch.neg", (t,), {}, 0), spec.Defaults())
    (a,), _ = built.make_args("spyre")
    assert a.device.type == "spyre" and built.input_bytes == 64 * 32 * 2
    (c,), _ = built.make_args("cpu")
    assert torch.equal(host_view(a), c)  # same values, made once: no second host copy behind the device tensor


def test_a_case_that_cannot_fit_is_reported_and_the_run_continues(tmp_path: Path) -> None:
    f = tmp_path / "huge.yaml"
    f.write_text(textwrap.dedent("""
        model: huge
        defaults: {dtype: bf16}
        cases:
          - name: too_big
            op: torch.neg
            inputs:
              - tensor: {shape: [1099511627776], init: rand}
          - name: small
            op: torch.neg
            inputs:
              - tensor: {shape: [8, 64], init: rand}
    """))
    peaks: dict[str, int] = {}
    records = run_files([f], progress=False, peak_rss=peaks)
    assert [r["status"] for r in records] == [diff.SKIPPED, diff.PASS]
    assert "does not fit" in records[0]["detail"] and "GiB available" in records[0]["detail"]
    assert peaks["huge.yaml"] > 0
