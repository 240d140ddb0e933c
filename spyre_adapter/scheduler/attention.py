"""The hand-written attention kernel's program: flash-style, tiled through LX.

The generic path for ``scaled_dot_product_attention`` writes the full score
matrix (batch x heads x queries x keys) to DRAM between its matmul, softmax and
second matmul. This program keeps a block of queries resident in a core's LX,
streams key/value blocks past it, and keeps a running (online) softmax, so
scores never leave the core: DRAM sees Q, K, V once per query block and O once.

It is an ordinary Spyre program: PE steps for ``S = Q K^T`` and ``O += P V``,
and vector steps whose bodies are small Kernel IR loop kernels (block max,
probabilities, row sums, running sum, rescale, finish). The device side (the
call's registration and its launch on the card) is
:mod:`spyre_adapter.backend.attention`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import sympy

from spyre_shims import index as sidx
from spyre_shims import kernel_ir as kir
from spyre_shims.errors import UnsupportedKernelError

from spyre_adapter.model.buffer_specs import contiguous_buffer
from spyre_adapter.model.errors import DoesNotFit
from spyre_adapter.model.isa import with_buffers
from spyre_adapter.model.machine import Machine
from spyre_adapter.model.program import (AttentionPlan, CoreProgram, DmaLoad, DmaStore, Operand, Pe, Program, Region,
                                         Vec, itemsize)
from spyre_adapter.scheduler.lx_alloc import LxFull, Slot, SlotView, allocate

__all__ = ["Shape", "bodies", "kernel_ir", "name_of", "plan", "shape_of", "program_for"]


# ------------------------------------------------------------------ the vector steps' bodies

I0, I1, R0 = sidx.index_symbol("i0"), sidx.index_symbol("i1"), sidx.index_symbol("r0")
Q0, K0 = sidx.index_symbol("q0"), sidx.index_symbol("k0")
_NEG_INF = float("-inf")


def _lk(name: str, ranges: tuple[int, ...], red: tuple[int, ...], body: list[kir.Instr]) -> kir.LoopKernel:
    return kir.LoopKernel(name, tuple(sympy.Integer(r) for r in ranges), tuple(sympy.Integer(r) for r in red),
                          tuple(body))


def _scores(body: list[kir.Instr], index: sympy.Expr, col: sympy.Expr, scale: float, causal: bool) -> kir.Ref:
    """Append ``S * scale`` (masked to -inf above the diagonal); returns its ref."""
    body.append(kir.Instr("load", ("S", index), "float32"))
    body.append(kir.Instr("constant", (float(scale), "float32"), "float32"))
    body.append(kir.Instr("mul", (kir.Ref(len(body) - 2), kir.Ref(len(body) - 1)), "float32"))
    v = kir.Ref(len(body) - 1)
    if causal:
        body.append(kir.Instr("index_expr", (Q0 + I0, "int64"), "int64"))
        body.append(kir.Instr("index_expr", (K0 + col, "int64"), "int64"))
        body.append(kir.Instr("gt", (kir.Ref(len(body) - 1), kir.Ref(len(body) - 2)), "bool"))
        body.append(kir.Instr("constant", (_NEG_INF, "float32"), "float32"))
        body.append(kir.Instr("where", (kir.Ref(len(body) - 2), kir.Ref(len(body) - 1), v), "float32"))
        v = kir.Ref(len(body) - 1)
    return v


@functools.lru_cache(maxsize=64)
def bodies(qr: int, kr: int, dv: int, dtype: str, scale: float, causal: bool) -> dict[str, kir.LoopKernel]:
    """The vector steps of one (query block, key block) step, by role."""
    out: dict[str, kir.LoopKernel] = {}
    b: list[kir.Instr] = [kir.Instr("constant", (_NEG_INF, "float32"), "float32"),
                          kir.Instr("store", ("m", I0, kir.Ref(0), None)),
                          kir.Instr("constant", (0.0, "float32"), "float32"),
                          kir.Instr("store", ("l", I0, kir.Ref(2), None))]
    out["init"] = _lk(f"attn_init_{qr}", (qr,), (), b)
    b = []
    v = _scores(b, I0 * kr + R0, R0, scale, causal)
    b.append(kir.Instr("load", ("m", I0), "float32"))
    b.append(kir.Instr("maximum", (v, kir.Ref(len(b) - 1)), "float32"))
    b.append(kir.Instr("reduction", ("float32", "float32", "max", kir.Ref(len(b) - 1)), "float32"))
    b.append(kir.Instr("store_reduction", ("mn", I0, kir.Ref(len(b) - 1))))
    out["max"] = _lk(f"attn_max_{qr}x{kr}", (qr,), (kr,), b)
    b = []
    v = _scores(b, I0 * kr + I1, I1, scale, causal)
    b.append(kir.Instr("load", ("mn", I0), "float32"))
    b.append(kir.Instr("sub", (v, kir.Ref(len(b) - 1)), "float32"))
    b.append(kir.Instr("exp", (kir.Ref(len(b) - 1),), "float32"))
    b.append(kir.Instr("to_dtype", (kir.Ref(len(b) - 1), dtype), dtype))
    b.append(kir.Instr("store", ("P", I0 * kr + I1, kir.Ref(len(b) - 1), None)))
    out["prob"] = _lk(f"attn_prob_{qr}x{kr}", (qr, kr), (), b)
    b = [kir.Instr("load", ("P", I0 * kr + R0), dtype),
         kir.Instr("reduction", ("float32", "float32", "sum", kir.Ref(0)), "float32"),
         kir.Instr("store_reduction", ("rs", I0, kir.Ref(1)))]
    out["rowsum"] = _lk(f"attn_rowsum_{qr}x{kr}", (qr,), (kr,), b)
    b = [kir.Instr("load", ("m", I0), "float32"), kir.Instr("load", ("mn", I0), "float32"),
         kir.Instr("sub", (kir.Ref(0), kir.Ref(1)), "float32"), kir.Instr("exp", (kir.Ref(2),), "float32"),
         kir.Instr("load", ("l", I0), "float32"), kir.Instr("mul", (kir.Ref(4), kir.Ref(3)), "float32"),
         kir.Instr("load", ("rs", I0), "float32"), kir.Instr("add", (kir.Ref(5), kir.Ref(6)), "float32"),
         kir.Instr("store", ("l", I0, kir.Ref(7), None)), kir.Instr("store", ("corr", I0, kir.Ref(3), None)),
         kir.Instr("store", ("m", I0, kir.Ref(1), None))]
    out["running"] = _lk(f"attn_running_{qr}", (qr,), (), b)
    b = [kir.Instr("load", ("acc", I0 * dv + I1), "float32"), kir.Instr("load", ("corr", I0), "float32"),
         kir.Instr("mul", (kir.Ref(0), kir.Ref(1)), "float32"), kir.Instr("store", ("acc", I0 * dv + I1, kir.Ref(2), None))]
    out["rescale"] = _lk(f"attn_rescale_{qr}x{dv}", (qr, dv), (), b)
    b = [kir.Instr("load", ("acc", I0 * dv + I1), "float32"), kir.Instr("load", ("l", I0), "float32"),
         kir.Instr("truediv", (kir.Ref(0), kir.Ref(1)), "float32"),
         kir.Instr("to_dtype", (kir.Ref(2), dtype), dtype), kir.Instr("store", ("out", I0 * dv + I1, kir.Ref(3), None))]
    out["finish"] = _lk(f"attn_finish_{qr}x{dv}", (qr, dv), (), b)
    return out


# ------------------------------------------------------------------ program

@dataclasses.dataclass(frozen=True)
class Shape:
    """One attention call: (batch, heads, queries, keys, head dim), element size, masking."""

    batch: int
    heads: int
    lq: int
    lk: int
    d: int
    isz: int
    causal: bool
    dtype: str = "float16"
    dv: int = 0

    @property
    def vdim(self) -> int:
        return self.dv or self.d


def kernel_ir(s: Shape, name: str) -> kir.ExternKernel:
    """The call as Kernel IR (q, k, v in, out out; contiguous)."""
    q = contiguous_buffer("q", (s.batch, s.heads, s.lq, s.d), s.dtype, "input")
    k = contiguous_buffer("k", (s.batch, s.heads, s.lk, s.d), s.dtype, "input")
    v = contiguous_buffer("v", (s.batch, s.heads, s.lk, s.vdim), s.dtype, "input")
    o = contiguous_buffer("out", (s.batch, s.heads, s.lq, s.vdim), s.dtype, "output")
    return kir.ExternKernel(name, "attention", (q, k, v), o, ("q", "k", "v", "out"), (("causal", s.causal),))


def name_of(s: Shape) -> str:
    """The kernel's name for a call of this shape."""
    return f"attention[{s.batch}x{s.heads}x{s.lq}x{s.lk}x{s.d}{' causal' if s.causal else ''}]"


def plan(s: Shape, m: Machine, scale: float | None = None, resident: bool = True) -> Program:
    """The program: units of (batch x head, query block) spread evenly over the
    cores; each streams the key/value blocks it needs (a causal block above the
    diagonal is skipped) and keeps K and V in LX when the next unit on the core
    is of the same head and they fit."""
    scale = scale if scale is not None else 1.0 / math.sqrt(s.d)
    bq, bk = min(128, s.lq), min(128, s.lk)
    nq = -(-s.lq // bq)
    units = [(bh, i) for bh in range(s.batch * s.heads) for i in range(nq)]
    cores = min(m.cores, len(units))
    name = name_of(s)
    for keep_kv in ((True, False) if resident else (False,)):
        try:
            streams, body_list = _emit(s, m, scale, bq, bk, units, cores, keep_kv)
        except LxFull:
            continue
        plan_ = AttentionPlan(bq, bk, keep_kv, len(units))
        return Program(name, "attention", kernel_ir(s, name), tuple(body_list), tuple(streams), plan_)
    raise DoesNotFit("one query block and one key block do not fit in one core's LX",
                     f"lx_usable_bytes={m.lx_usable_bytes} per core", name)


def _emit(s: Shape, m: Machine, scale: float, bq: int, bk: int, units: list[tuple[int, int]], cores: int,
          keep_kv: bool) -> tuple[list[CoreProgram], list[kir.LoopKernel]]:
    body_ids: dict[kir.LoopKernel, int] = {}
    body_list: list[kir.LoopKernel] = []

    def bid(lk: kir.LoopKernel) -> int:
        if lk not in body_ids:
            body_ids[lk] = len(body_list)
            body_list.append(lk)
        return body_ids[lk]

    dt, isz, dv = s.dtype, s.isz, s.vdim
    hs = s.lq * s.d  # elements per (batch, head) of q / out
    ks = s.lk * s.d
    vs = s.lk * dv
    os_ = s.lq * dv
    streams = []
    cuts = _stick_cuts(units, cores, s, bq, m.stick_bytes)
    for c in range(m.cores):
        mine = units[cuts[c]:cuts[c + 1]] if c < cores else []
        ins: list[Any] = []
        kv: dict[tuple[int, int], tuple[SlotView, SlotView]] = {}
        for bh, i in mine:
            q0 = i * bq
            qr = min(bq, s.lq - q0)
            last = -(-min(s.lk, q0 + qr) // bk) if s.causal else -(-s.lk // bk)
            if not keep_kv or any(h != bh for h, _ in kv):
                kv = {}
            fp = 4
            qv = Slot("Q", qr * s.d * isz).view(dt, (qr, s.d))
            ins.append(DmaLoad(Region("q", bh * hs + q0 * s.d, (qr * s.d,), (1,)), qv.sub(0, (qr * s.d,), (1,), isz)))
            mv = Slot("m", qr * fp).view("float32", (qr,))
            lv = Slot("l", qr * fp).view("float32", (qr,))
            acc = Slot("acc", qr * dv * fp).view("float32", (qr, dv))
            acc_flat = SlotView(acc.slot, 0, "float32", (qr * dv,), (1,))
            bd = bodies(qr, bk, dv, dt, scale, s.causal)
            init = bd["init"]
            ins.append(Vec(bid(init), ((0, qr),), None, (Operand(1, "window", mv), Operand(3, "window", lv))))
            for j in range(last):
                k0 = j * bk
                kr = min(bk, s.lk - k0)
                if (bh, j) not in kv:
                    kt = Slot(f"K block {j}", kr * s.d * isz).view(dt, (kr, s.d))
                    vt = Slot(f"V block {j}", kr * dv * isz).view(dt, (kr, dv))
                    ins.append(DmaLoad(Region("k", bh * ks + k0 * s.d, (kr * s.d,), (1,)),
                                       kt.sub(0, (kr * s.d,), (1,), isz)))
                    ins.append(DmaLoad(Region("v", bh * vs + k0 * dv, (kr * dv,), (1,)),
                                       vt.sub(0, (kr * dv,), (1,), isz)))
                    if keep_kv:
                        kv[(bh, j)] = (kt, vt)
                else:
                    kt, vt = kv[(bh, j)]
                bd = bodies(qr, kr, dv, dt, scale, s.causal)
                sv = Slot("S", qr * kr * fp).view("float32", (qr, kr))
                s_flat = SlotView(sv.slot, 0, "float32", (qr * kr,), (1,))
                ins.append(Pe(qv, SlotView(kt.slot, kt.offset, dt, (s.d, kr), (1, s.d)), sv, False))
                mn = Slot("m new", qr * fp).view("float32", (qr,))
                pv = Slot("P", qr * kr * isz).view(dt, (qr * kr,))
                rs = Slot("row sums", qr * fp).view("float32", (qr,))
                corr = Slot("correction", qr * fp).view("float32", (qr,))
                bind_ = (("q0", q0), ("k0", k0)) if s.causal else ()
                ins.append(Vec(bid(bd["max"]), ((0, qr),), None,
                               _ops(bd["max"], {"S": s_flat, "m": mv, "mn": mn}), bind=bind_))
                ins.append(Vec(bid(bd["prob"]), ((0, qr), (0, kr)), None,
                               _ops(bd["prob"], {"S": s_flat, "mn": mn, "P": pv}), bind=bind_))
                ins.append(Vec(bid(bd["rowsum"]), ((0, qr),), None, _ops(bd["rowsum"], {"P": pv, "rs": rs})))
                ins.append(Vec(bid(bd["running"]), ((0, qr),), None,
                               _ops(bd["running"], {"m": mv, "mn": mn, "l": lv, "rs": rs, "corr": corr})))
                if j:
                    ins.append(Vec(bid(bd["rescale"]), ((0, qr), (0, dv)), None,
                                   _ops(bd["rescale"], {"acc": acc_flat, "corr": corr})))
                ins.append(Pe(SlotView(pv.slot, 0, dt, (qr, kr), (kr, 1)), vt, acc, j > 0))
            ov = Slot("O", qr * dv * isz).view(dt, (qr * dv,))
            fin = bodies(qr, bk, dv, dt, scale, s.causal)["finish"]
            ins.append(Vec(bid(fin), ((0, qr), (0, dv)), None, _ops(fin, {"acc": acc_flat, "l": lv, "out": ov})))
            ins.append(DmaStore(ov, Region("out", bh * os_ + q0 * dv, (qr * dv,), (1,))))
        if ins:
            out, table, _ = allocate(ins, m.lx_usable_bytes, m.stick_bytes)
            streams.append(CoreProgram(c, out, table))
        else:
            streams.append(CoreProgram(c, ()))
    return streams, body_list


def _stick_cuts(units: list[tuple[int, int]], cores: int, s: Shape, bq: int, stick: int) -> list[int]:
    """Where each core's run of units starts (``cores + 1`` positions, even
    shares): a core's output must be whole sticks (no two cores write parts of
    one), so a run may only end after a unit whose output ends on a stick
    boundary. A head dim of a few elements makes several units share a stick."""
    isz = s.isz
    aligned = [k + 1 for k, (bh, i) in enumerate(units)
               if k == len(units) - 1 or ((bh * s.lq + min(s.lq, (i + 1) * bq)) * s.vdim * isz) % stick == 0]
    cuts = [0]
    for c in range(1, cores):
        target = c * len(units) // cores
        cuts.append(max(cuts[-1], next(a for a in aligned if a >= target)))
    return cuts + [len(units)]


def _ops(lk: kir.LoopKernel, views: dict[str, SlotView]) -> tuple[Operand, ...]:
    """Every load/store of ``lk`` bound to the LX window of its label."""
    return tuple(Operand(p, "window", views[ins.args[0]])  # type: ignore[arg-type]
                 for p, ins in enumerate(lk.body) if ins.op in ("load", "store", "store_reduction"))


def shape_of(q: Any, k: Any, v: Any, causal: bool, dtype: str,
             sizes: Mapping[sympy.Symbol, int] | None = None) -> Shape:
    """The Shape of a call from its q, k, v sizes (Kernel IR sizes: their
    symbols bound by ``sizes``)."""
    q, k, v = (tuple(_concrete_size(x, sizes) for x in t) for t in (q, k, v))
    return Shape(q[0], q[1], q[2], k[2], q[3], itemsize(dtype), bool(causal), dtype, v[3])


def _concrete_size(x: Any, sizes: Mapping[sympy.Symbol, int] | None) -> int:
    e = sympy.sympify(x).subs(sizes) if sizes and isinstance(x, sympy.Basic) else x
    if isinstance(e, sympy.Basic) and e.free_symbols:
        raise UnsupportedKernelError("symbolic size", "attention",
                                     f"size {e} has no value: a call is planned at launch, with its sizes")
    return int(e)


def program_for(kernel: Any, m: Machine, sizes: Mapping[sympy.Symbol, int] | None = None) -> Program:
    """The program of a recorded call of this kernel (Kernel IR ``attention`` op:
    inputs q, k, v; attributes ``causal`` and ``scale``), as the device runs it,
    its size symbols bound by ``sizes``."""
    q, k, v = kernel.inputs[0], kernel.inputs[1], kernel.inputs[2]
    s = shape_of(q.size, k.size, v.size, bool(kernel.attr("causal", False)), q.dtype, sizes)
    p = plan(s, m, kernel.attr("scale"))
    # The plan names its DRAM buffers q, k, v, out (as the device call passes
    # them); the graph's kernel has its own names.
    names = {"q": q.name, "k": k.name, "v": v.name, "out": kernel.output.name}
    out = kernel.output
    if not out.size:  # a captured fallback call's output carries no layout: the call's own (contiguous)
        spec = kernel_ir(s, kernel.name).output
        kernel = dataclasses.replace(kernel, output=dataclasses.replace(spec, name=out.name))
    return dataclasses.replace(with_buffers(p, names, kernel, p.bodies), name=kernel.name)
