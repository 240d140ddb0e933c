"""Expert-routing near-ties in a mixture-of-experts reference run.

A router picks each token's top-k experts from logits computed in the model's
dtype. Where the k-th and (k+1)-th logits are a few units in the last place
apart, any other summation order (the device's tiled matmul, a fused
reduction) may pick the other expert, and the two runs' logits then differ by
far more than rounding, with neither run wrong. The result check must not call
that a failure, nor excuse a real error as one: it re-runs the CPU reference
with the tie resolved the other way and requires the device's logits to match
*that* run within the usual tolerance (:func:`resolve_ties`).

Routers are found by shape, not by architecture: a module whose class name
contains "Router" with integer ``top_k`` and ``num_experts``; its forward
returns the router logits first. Only routers returning ``(logits, scores,
indices)`` (transformers' ``*TopKRouter``) can be re-run flipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["Tie", "TieRecorder", "routers", "recording_ties", "resolve_ties", "NEAR_TIE_ULPS", "MAX_FLIPS"]

#: A top-k margin this many units in the last place (of the router logits'
#: dtype, at the k-th logit's magnitude) or fewer is a near-tie. Only a
#: candidate: a flip is kept only when the flipped reference matches.
NEAR_TIE_ULPS = 32.0
#: Flips tried in turn (the first failing step's ties, nearest first) and kept.
MAX_FLIPS = 4
_CANDIDATES_PER_STEP = 6


@dataclasses.dataclass(frozen=True)
class Tie:
    """One token's top-k choice in one router at one forward step whose last
    chosen expert (``chosen``) beat the next one (``runner_up``) by ``ulps``."""

    step: int
    router: str
    token: int
    chosen: int
    runner_up: int
    margin: float
    ulps: float

    @property
    def key(self) -> tuple[int, str, int]:
        return self.step, self.router, self.token

    def describe(self) -> str:
        return (f"step {self.step}, {self.router}, token {self.token}: expert {self.runner_up} instead of "
                f"{self.chosen} (margin {self.margin:.1e}, {self.ulps:.1f} ulp)")


def routers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The model's expert routers by module name."""
    return {name: m for name, m in model.named_modules()
            if "router" in type(m).__name__.lower() and isinstance(getattr(m, "top_k", None), int)
            and isinstance(getattr(m, "num_experts", None), int)}


def _ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    tiny = torch.finfo(dtype).tiny
    return torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(tiny))))


def _flippable(out: Any) -> bool:
    return (isinstance(out, tuple) and len(out) == 3 and all(isinstance(t, torch.Tensor) for t in out)
            and not out[2].is_floating_point() and out[1].shape == out[2].shape)


class TieRecorder:
    """Hooks on a CPU model's routers: records near-ties per forward step and
    resolves the ties in ``flips`` the other way."""

    def __init__(self, model: torch.nn.Module, flips: frozenset[tuple[int, str, int]] = frozenset(),
                 dtype: torch.dtype | None = None) -> None:
        self.model = model
        self.flips = flips
        #: the dtype whose rounding decides a near-tie (the device's compute
        #: dtype under autocast); None: the router logits' own
        self.dtype = dtype
        self.ties: list[Tie] = []
        self.flippable = True
        self.found = routers(model)
        self._step = -1

    def _on_step(self, *_: Any) -> None:
        self._step += 1

    def _on_router(self, name: str, module: torch.nn.Module, out: Any) -> Any:
        logits = out[0] if isinstance(out, tuple) else out
        logits = logits.detach().reshape(-1, logits.shape[-1])
        k = int(module.top_k)
        if logits.shape[-1] <= k:
            return None
        flippable = _flippable(out)
        self.flippable &= flippable
        lf = logits.float()
        # the reference's own choice where the router returns it (an exact tie in
        # the dtype is broken by the reference's top-k, not by index order)
        chosen = out[2].reshape(-1, k) if flippable else lf.topk(k, dim=-1).indices
        mask = torch.zeros_like(lf, dtype=torch.bool).scatter_(-1, chosen, True)
        last = lf.masked_fill(~mask, float("inf")).min(dim=-1)
        runner = lf.masked_fill(mask, float("-inf")).max(dim=-1)
        margin = last.values - runner.values
        ulps = margin / _ulp(last.values, self.dtype or logits.dtype)
        for t in torch.nonzero(ulps <= NEAR_TIE_ULPS).flatten().tolist():
            self.ties.append(Tie(self._step, name, t, int(last.indices[t]), int(runner.indices[t]),
                                 float(margin[t]), float(ulps[t])))
        wanted = [t for t in range(lf.shape[0]) if (self._step, name, t) in self.flips]
        if not wanted or not flippable:
            return None
        # the reference's decision with each wanted token's last choice swapped
        # for the runner-up; its weights renormalised as the router does
        indices = chosen.clone()
        for t in wanted:
            indices[t][indices[t] == last.indices[t]] = runner.indices[t]
        probs = torch.softmax(lf, dim=-1)
        scores = probs.gather(-1, indices)
        scores = (scores / scores.sum(dim=-1, keepdim=True)).to(out[1].dtype)
        return out[0], scores.reshape(out[1].shape), indices.reshape(out[2].shape).to(out[2].dtype)

    @contextmanager
    def hooked(self) -> Iterator[TieRecorder]:
        handles = [self.model.register_forward_pre_hook(self._on_step)]
        for name, m in self.found.items():
            handles.append(m.register_forward_hook(lambda mod, _i, o, name=name: self._on_router(name, mod, o)))
        try:
            yield self
        finally:
            for h in handles:
                h.remove()


@contextmanager
def recording_ties(model: torch.nn.Module, dtype: torch.dtype | None = None) -> Iterator[TieRecorder]:
    """Record the near-ties of the runs inside (steps counted from 0)."""
    with TieRecorder(model, dtype=dtype).hooked() as rec:
        yield rec


def resolve_ties(model: torch.nn.Module, ties: list[Tie], errors: list[float], atol: float,
                 rerun: Callable[[], Any], errors_of: Callable[[Any], list[float]],
                 dtype: torch.dtype | None = None) -> tuple[Any, list[Tie]] | None:
    """A reference run with some near-ties resolved the other way whose logits
    the device's match at every step, and those ties; None if there is none.

    ``ties`` and ``errors`` (the device's logit error per compared step) are
    the original reference run's. ``rerun()`` runs the CPU reference again
    (under hooks flipping the chosen ties) and returns its result,
    ``errors_of(result)`` the device's errors against it. Up to
    :data:`MAX_FLIPS` ties are flipped one at a time: the candidates are the
    near-ties at or before the first failing step (latest step first, then
    nearest), and a flip is kept only if the first failing step moves later."""
    flips: list[Tie] = []
    result: Any = None
    for _ in range(MAX_FLIPS + 1):
        bad = _first_bad(errors, atol)
        if bad is None:
            return (result, flips) if flips else None
        if len(flips) == MAX_FLIPS:
            return None
        best: tuple[float, Tie, TieRecorder, Any, list[float]] | None = None
        for tie in _candidates(ties, bad, {f.key for f in flips}):
            rec = TieRecorder(model, frozenset(f.key for f in (*flips, tie)), dtype)
            with rec.hooked():
                res = rerun()
            errs = errors_of(res)
            moved = _first_bad(errs, atol)
            score = float("inf") if moved is None else float(moved)
            if score > bad and (best is None or score > best[0]):
                best = (score, tie, rec, res, errs)
        if best is None:
            return None
        _, tie, rec, result, errors = best
        flips.append(tie)
        ties = rec.ties
    return None


def _first_bad(errors: list[float], atol: float) -> int | None:
    return next((k for k, e in enumerate(errors) if not e <= atol), None)


def _candidates(ties: list[Tie], bad: int, taken: set[tuple[int, str, int]]) -> list[Tie]:
    near = [t for t in ties if t.step <= bad and t.key not in taken]
    return sorted(near, key=lambda t: (-t.step, t.ulps))[:_CANDIDATES_PER_STEP]
