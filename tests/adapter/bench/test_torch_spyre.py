"""The comparison with torch-spyre's cost model: the rank statistic, the skip
when the reference folder is absent, and a small real comparison (the folder
beside the checkout; skipped when it is not there)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from spyre_adapter.bench import torch_spyre as rm

HAVE_REFERENCE = rm.skip_reason() is None


def test_spearman_of_identical_and_reversed_rankings() -> None:
    a = [3.0, 1.0, 7.0, 5.0, 2.0]
    assert rm.spearman(a, a) == pytest.approx(1.0)
    assert rm.spearman(a, [-x for x in a]) == pytest.approx(-1.0)
    # monotone transforms keep the ranking
    assert rm.spearman(a, [math.exp(x) for x in a]) == pytest.approx(1.0)
    # ties take their average rank: a textbook case, rho = 1 - 6 * sum(d^2) / (n (n^2 - 1))
    x, y = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 5.0]
    assert rm.spearman(x, y) == pytest.approx(1 - 6 * 4 / (5 * 24))
    assert rm.spearman([1.0, 2.0, 2.0, 3.0], [1.0, 2.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert math.isnan(rm.spearman([1.0], [2.0]))


def test_absent_folder_is_a_clean_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(rm.ReferenceUnavailable, match="SPYRE_REFERENCE_DIR"):
        rm.reference_dir(tmp_path)
    monkeypatch.delenv("SPYRE_REFERENCE_DIR", raising=False)
    with pytest.raises(rm.ReferenceUnavailable, match="not named: pass --reference DIR"):
        rm.reference_dir()  # nothing is searched for
    monkeypatch.setenv("SPYRE_REFERENCE_DIR", str(tmp_path / "nowhere"))
    reason = rm.skip_reason()
    assert reason is not None and reason.startswith("comparison with torch-spyre's cost model skipped")
    from spyre_adapter.bench import suite as bench
    section = bench.reference_section(quick=True)
    assert section == {"skipped": reason}


@pytest.mark.skipif(not HAVE_REFERENCE, reason="shared/reference/torch-spyre-cost-model not beside the checkout")
def test_env_variable_names_the_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = rm.reference_dir()
    monkeypatch.setenv("SPYRE_REFERENCE_DIR", str(folder))
    assert rm.reference_dir() == folder and rm.skip_reason() is None


@pytest.mark.skipif(not HAVE_REFERENCE, reason="shared/reference/torch-spyre-cost-model not beside the checkout")
def test_scope_of_the_sweep() -> None:
    plan = rm.load_sweep()
    assert len(plan) == 1632
    ops = {c.op for c in plan}
    assert "flash_attn" in ops and all(rm.expressible(c) for c in plan if c.op == "flash_attn")
    assert sum(rm.expressible(c) is None for c in plan) > 1000


@pytest.mark.skipif(not HAVE_REFERENCE, reason="shared/reference/torch-spyre-cost-model not beside the checkout")
def test_small_comparison() -> None:
    doc = rm.compare(per_category=2, limit_bytes=4 * 2**20, ops=("neg", "add", "sumrow", "bcast", "cat0"))
    assert doc["compared"] >= 6
    for r in doc["rows"]:
        assert r["ours_ns"] > 0 and r["theirs_ns"] > 0
    for cat, st in doc["per_category"].items():
        assert cat in ("pointwise", "reduction", "broadcast", "transport")
        assert st["n"] >= 1 and 0 <= st["mape"] < 10
    # a memory-bound kernel at full bus: both models charge DRAM bytes over ~100-150 GB/s
    neg = [r for r in doc["rows"] if r["op"] == "neg" and r["cores"] == 32]
    assert all(0.5 < r["ratio"] < 2 for r in neg)


def test_a_rank_correlation_needs_eight_points_and_agreement_says_what_it_rests_on() -> None:
    """Two points always rank alike (or opposite): no correlation is reported
    below eight. Memory-bound categories share our DRAM constants with the
    reference, so their agreement is labelled as such; matmul's is independent."""
    pairs = [(float(k), float(k) * 1.1) for k in range(1, 8)]
    assert rm._stats(pairs[:2])["spearman"] is None and rm._stats(pairs)["spearman"] is None
    assert rm._stats(pairs + [(9.0, 9.5)])["spearman"] == pytest.approx(1.0)
    assert {rm.basis(c) for c in ("pointwise", "reduction", "transport", "broadcast")} == {"shared constants"}
    assert rm.basis("matmul") == rm.basis("bmm_3d2d") == "independent"


@pytest.mark.skipif(not HAVE_REFERENCE, reason="shared/reference/torch-spyre-cost-model not beside the checkout")
def test_matmul_models_on_identical_splits() -> None:
    """Both models on the same program: with operand blocks shared, ours reads each
    block once (the compulsory bytes, what the reference charges) and never beats
    the compute floor; without sharing the same split reads more and runs slower.
    The reference's prediction does not depend on the split (the docs say so)."""
    size = 512
    rows = rm.matmul_on_identical_splits(size=size, splits=((1, 4, 8, 1), (1, 32, 1, 1)))
    compulsory = 3 * size * size * 2 / 2**20
    for r in rows:
        assert r["ours_shared_dram_mib"] == pytest.approx(compulsory)
        assert r["ours_unshared_dram_mib"] > r["ours_shared_dram_mib"]
        assert r["ours_unshared_us"] > r["ours_shared_us"] >= r["compute_floor_us"]
        assert r["ours_shared_over_theirs"] == pytest.approx(r["ours_shared_us"] / r["theirs_us"])
    assert rows[0]["theirs_us"] == pytest.approx(rows[1]["theirs_us"])
