"""Random ops on the device: a counter-based generator (spyre_shims.ops). Values
differ from CPU's generator by design, so distributions are checked instead,
and reproducibility under torch.manual_seed."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _run(fn, *args):
    return torch.compile(lambda *a: fn(*a), dynamic=False)(*[a.to("spyre") for a in args]).cpu()


def test_uniform_and_normal_moments() -> None:
    x = torch.zeros(400, 500)
    u = _run(lambda a: torch.rand_like(a), x)
    n = _run(lambda a: torch.randn_like(a), x)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.var()) - 1 / 12) < 0.002
    assert abs(float(n.mean())) < 0.01 and abs(float(n.std()) - 1.0) < 0.01
    # every decile holds a tenth of the uniform draws
    counts = torch.histc(u, bins=10, min=0.0, max=1.0)
    assert float((counts / u.numel() - 0.1).abs().max()) < 0.005


def test_bernoulli_and_dropout() -> None:
    p = torch.full((300, 300), 0.3)
    b = _run(torch.bernoulli, p)
    assert set(b.unique().tolist()) == {0.0, 1.0} and abs(float(b.mean()) - 0.3) < 0.01
    d = _run(lambda a: F.dropout(a, 0.25, training=True), torch.ones(300, 300))
    kept = d != 0
    assert abs(float(kept.float().mean()) - 0.75) < 0.01
    assert torch.allclose(d[kept], torch.full_like(d[kept], 1 / 0.75))


def test_randint_range() -> None:
    r = _run(lambda a: torch.randint_like(a, 3, 11), torch.zeros(200, 200))
    assert int(r.min()) == 3 and int(r.max()) == 10
    counts = torch.bincount(r.long().flatten())[3:]
    assert float((counts / r.numel() - 1 / 8).abs().max()) < 0.01


def test_same_seed_same_stream_different_seed_different_stream() -> None:
    x = torch.zeros(64, 64)
    torch.manual_seed(7)
    a = _run(lambda t: torch.randn_like(t), x)
    torch.manual_seed(7)
    b = _run(lambda t: torch.randn_like(t), x)
    torch.manual_seed(8)
    c = _run(lambda t: torch.randn_like(t), x)
    assert torch.equal(a, b) and not torch.equal(a, c)
    # neighbouring offsets are not correlated
    flat = a.flatten()
    corr = float(torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1])
    assert abs(corr) < 3 / math.sqrt(flat.numel())
