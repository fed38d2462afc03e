"""Register tiles with a thread-value layout, and the MFMA that consumes and produces them.

A ``Fragment`` is one wave's register tile: a per-lane vector ``Value`` plus the ``TVLayout``
saying which (row, col) of the tile each lane/value holds. Every lane-dependent address, mask
and reduction is derived from the layout, so kernels never write lane arithmetic by hand::

    mma = k.mfma("16x16x16", "f16")                          # an Mfma: layouts A, B, C
    acc = mma.zeros()                                        # C fragment, f32
    a = load_fragment(a_lds, mma.A, origin=(row0, k0))       # A from a row-major LDS tile
    b = load_fragment(bt_lds, mma.B, origin=(k0, col0), transposed=True)   # LDS holds B^T
    acc = mma(a, b, acc)
    row_max = acc.reduce(PER_ROW, "max")                     # one value per row
    p = (acc - row_max.broadcast_to(acc.layout)).exp2()      # an AxisVector also broadcasts itself
    store_fragment_global(c_buf, p.to("f16"), origin=(m0, n0), ld=ldc, bounds=(M, N))

Per-row / per-column vectors (``AxisVector``: a reduction's result, a bias, a running max) go
to and from memory with ``store_axis`` / ``load_axis``. A per-column bias of a C tile is::

    bias = load_axis(bias_buf, mma.C, PER_COL, origin=n0)  # one entry per column, from global
    out = acc + bias                                         # broadcast over the rows

(the older idiom ``load_fragment_global(bias_buf, mma.C, (0, n0), 0)`` -- a row stride of 0, so
every row reads the same values -- also works, but loads the whole tile's worth of registers).

Gathers and atomic tiles (a fused-MoE expert): ``gather_rows_to_lds`` copies the rows an index
array names into an LDS tile (rows past a valid count as zeros), and ``atomic_add_fragment`` /
``atomic_store_fragment`` combine a fragment into a global matrix atomically (f16/bf16 as packed
pairs of neighbouring columns)::

    gather_rows_to_lds(x_buf, a_tile, token_ids, k0, ld_x, thread_index=tid, threads=256,
                       valid_rows=tokens_here)
    atomic_add_fragment(out_ptr, acc.to("bf16"), (m0, n0), ld_out, bounds=(M, N))

Storage conventions: LDS tiles and global matrices are row-major; ``transposed=True`` means the
storage holds the transpose of the fragment's logical tile (``storage[c, r] = tile[r, c]``).
``origin`` is always in the fragment's logical (row, col) coordinates.

Every atom of the catalog (``rocke.arch.mfma``) works as fragments: f16, bf16, fp8/bf8 (i8-carrier
fragments), i8 (i32 accumulators), f32, xf32 (f32 fragments), f64, and gfx950's wide-K and
block-scaled f8f6f4 atoms; a multi-block atom's operands are 2-D tiles with the block folded into
the rows of A and C and the columns of B (see ``Mfma``). Fragments travel
through ``for_range`` / ``if_`` / ``if_else`` as carried values and come back as fragments.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from . import types as T
from .errors import dsl_type_error, dsl_value_error
from .lanes import butterfly, shuffle_xor
from .math import exp2, maximum, minimum
from .atomics import OPS as ATOMIC_OPS
from .memory import BUFFER_ACCESS_BYTES, BufferResource, GlobalPtr, LdsTensor
from .tree import CarryLayout
from .tv_layout import COL, PER_COL, PER_ROW, ROW, WAVE, LaneAffine, TVLayout
from .values import Value, concat, select, shuffle, splat
from ..arch.mfma import MFMA_CATALOG, MfmaAtom, atom_for, get_atom, takes_dtype

__all__ = ["Fragment", "AxisVector", "Mfma", "load_fragment", "store_fragment",
           "load_fragment_global", "store_fragment_global", "copy_tile_to_lds", "gather_rows_to_lds",
           "atomic_store_fragment", "atomic_add_fragment", "ROW", "COL",
           "PER_ROW", "PER_COL",
           "store_axis", "load_axis", "merge_across_waves"]


def lane_affine_value(k, affine) -> Value:
    """Emit a LaneAffine (bit-field terms of the lane id) as shifts/ands/multiplies."""
    lane = k.lane_id()
    out = None
    for shift, mask, scale in affine.terms:
        term = lane >> shift if shift else lane
        if mask != 63 >> shift:
            term = term & mask
        if scale != 1:
            term = term * scale if scale & (scale - 1) else term << (scale.bit_length() - 1)
        out = term if out is None else out + term
    if out is None:
        return k.const(affine.const, T.i32)
    return out + affine.const if affine.const else out


def _index(x) -> Value | int:
    if isinstance(x, bool) or not isinstance(x, (int, Value)):
        raise dsl_type_error(f"tile origin/bound must be an int or integer Value, got {type(x).__name__}")
    return x


class Fragment:
    """A wave's register tile: ``value`` (one vector per lane, ``layout.values_per_lane`` wide)
    laid out by ``layout``."""

    __slots__ = ("value", "layout")

    def __init__(self, value: Value, layout: TVLayout):
        if not isinstance(value, Value):
            raise dsl_type_error(f"a fragment holds a runtime Value, got {type(value).__name__}")
        if not isinstance(layout, TVLayout):
            raise dsl_type_error(f"a fragment's layout must be a TVLayout, got {type(layout).__name__}")
        if value.lanes != layout.values_per_lane:
            raise dsl_value_error(f"layout {layout.name} holds {layout.values_per_lane} values per lane, "
                                  f"the value is {value.type_name}")
        self.value = value
        self.layout = layout

    def __repr__(self):
        return f"Fragment({self.layout.name}, {self.value.type_name})"

    @property
    def kernel(self):
        return self.value.kernel

    @property
    def dtype(self) -> T.DType:
        return self.value.dtype

    @staticmethod
    def full(kernel, layout: TVLayout, dtype, fill) -> "Fragment":
        """A fragment with every element ``fill``."""
        return Fragment(kernel.const(fill, T.dtype(dtype), layout.values_per_lane), layout)

    def with_value(self, value: Value) -> "Fragment":
        """The same layout holding ``value`` (e.g. a loop-carried value)."""
        return Fragment(value, self.layout)

    def carry_flatten(self):
        """The carry protocol (``rocke.dsl.tree``): one register vector, rebuilt with this layout."""
        return (self.value,), _FragmentCarry(self.layout)

    # -- element-wise ---------------------------------------------------------------------
    def map(self, fn) -> "Fragment":
        """``fn(value) -> value`` applied to the whole register vector (an element-wise op)."""
        out = fn(self.value)
        if not isinstance(out, Value) or out.lanes != self.value.lanes:
            raise dsl_type_error(f"Fragment.map: fn must return a {self.value.lanes}-wide Value")
        return Fragment(out, self.layout)

    def _other(self, other, symbol: str):
        if isinstance(other, Fragment):
            if not self.layout.same_as(other.layout):
                raise dsl_value_error(f"'{symbol}' between fragments of different layouts "
                                      f"{self.layout.name} {self.layout.shape} and "
                                      f"{other.layout.name} {other.layout.shape}")
            return other.value
        if isinstance(other, AxisVector):
            return other.broadcast_to(self.layout).value
        if isinstance(other, Value) and other.lanes not in (1, self.value.lanes):
            raise dsl_type_error(f"'{symbol}' between a fragment ({self.value.type_name}) and "
                                 f"{other.type_name}; use a scalar, a fragment or an AxisVector")
        return other

    def __add__(self, o): return Fragment(self.value + self._other(o, "+"), self.layout)
    def __radd__(self, o): return Fragment(self._other(o, "+") + self.value, self.layout)
    def __sub__(self, o): return Fragment(self.value - self._other(o, "-"), self.layout)
    def __rsub__(self, o): return Fragment(self._other(o, "-") - self.value, self.layout)
    def __mul__(self, o): return Fragment(self.value * self._other(o, "*"), self.layout)
    def __rmul__(self, o): return Fragment(self._other(o, "*") * self.value, self.layout)
    def __truediv__(self, o): return Fragment(self.value / self._other(o, "/"), self.layout)
    def __neg__(self): return Fragment(-self.value, self.layout)

    def maximum(self, other) -> "Fragment":
        return Fragment(maximum(self.value, self._other(other, "maximum")), self.layout)

    def minimum(self, other) -> "Fragment":
        return Fragment(minimum(self.value, self._other(other, "minimum")), self.layout)

    def exp2(self, *, fast: bool = True) -> "Fragment":
        return Fragment(exp2(self.value, fast=fast), self.layout)

    def where(self, cond: Value, other) -> "Fragment":
        """``cond ? self : other`` per element (``cond`` an i1 vector from ``coords()``)."""
        return Fragment(select(cond, self.value, self._other(other, "where")), self.layout)

    def to(self, dtype, *, rounding: str = "rne", quiet_nans: bool = False,
           nan_check: bool = True) -> "Fragment":
        return Fragment(self.value.to(dtype, rounding=rounding, quiet_nans=quiet_nans,
                                      nan_check=nan_check), self.layout)

    # -- coordinates ----------------------------------------------------------------------
    def coords(self, origin=(0, 0)) -> tuple[Value, Value]:
        """(rows, cols): i32 vectors with each value's tile coordinate plus ``origin``, for
        causal / ragged masks with ``select`` / ``where``."""
        k = self.kernel
        out = []
        for axis in (ROW, COL):
            base = lane_affine_value(k, self.layout.lane_part(axis))
            o = _index(origin[axis])
            if not (isinstance(o, int) and o == 0):
                base = base + o
            offsets = self.layout.value_offsets(axis)
            if self.layout.values_per_lane == 1:
                out.append(base + offsets[0] if offsets[0] else base)
            elif not any(offsets):
                out.append(splat(base, len(offsets)))
            else:
                out.append(splat(base, len(offsets)) + k.const_vector(offsets, T.i32))
        return out[0], out[1]

    # -- reductions -----------------------------------------------------------------------
    def reduce(self, axis: int, op: str = "sum", *, via: str = "swizzle") -> "AxisVector":
        """Reduce to one value per row (``PER_ROW``) or per column (``PER_COL``); ``axis`` is
        the axis reduced away (``PER_ROW`` is ``COL``, ``PER_COL`` is ``ROW``). In-lane first,
        then xor butterflies (``via``: lanes.butterfly's); every lane ends up holding the
        result for each of its rows (or cols)."""
        if op not in ("sum", "max", "min"):
            raise dsl_value_error(f"reduce op must be 'sum', 'max' or 'min', got {op!r}")
        if axis not in (ROW, COL):
            raise dsl_value_error(f"reduce axis must be PER_ROW (one value per row; = COL, 1) or "
                                  f"PER_COL (one per column; = ROW, 0), got {axis!r}")
        plan = self.layout.reduce_plan(axis)
        vals = list(self.value) if self.value.lanes > 1 else [self.value]
        partials = []
        for group in plan.in_lane:
            acc = vals[group[0]]
            for v in group[1:]:
                acc = _combine(op, acc, vals[v])
            partials.append(acc)
        acc = concat(*partials) if len(partials) > 1 else partials[0]
        if via == "swizzle":
            for mask in plan.xor_masks:
                acc = _combine(op, acc, shuffle_xor(acc, mask))
        else:
            acc = butterfly(op, acc, plan.xor_masks, via=via)
        return AxisVector(acc, self.layout, axis)

    # -- operand reuse --------------------------------------------------------------------
    def as_operand(self, layout: TVLayout, offset=(0, 0)) -> "Fragment":
        """The sub-tile at ``offset`` as a fragment of ``layout`` using the registers this lane
        already holds (``TVLayout.values_matching``): e.g. an S^T accumulator as the B operand
        of the next MFMA. Raises if the layouts would need a cross-lane shuffle."""
        picks = self.layout.values_matching(layout, tuple(offset))
        if picks is None:
            raise dsl_value_error(f"fragment {self.layout.name} does not hold {layout.name} at "
                                  f"offset {tuple(offset)} in place; a cross-lane shuffle would be needed")
        if list(picks) == list(range(self.value.lanes)):
            return Fragment(self.value, layout)
        return Fragment(shuffle(self.value, picks), layout)


class _FragmentCarry(CarryLayout):
    def __init__(self, layout: TVLayout):
        self.layout = layout

    def rebuild(self, values):
        return Fragment(values[0], self.layout)

    def same_as(self, other) -> bool:
        return isinstance(other, _FragmentCarry) and self.layout.same_as(other.layout)

    def describe(self) -> str:
        return f"Fragment of {self.layout.name}"


class _AxisCarry(CarryLayout):
    def __init__(self, source: TVLayout, axis: int):
        self.source, self.axis = source, axis

    def rebuild(self, values):
        return AxisVector(values[0], self.source, self.axis)

    def same_as(self, other) -> bool:
        return (isinstance(other, _AxisCarry) and other.axis == self.axis
                and self.source.same_as(other.source))

    def describe(self) -> str:
        return f"AxisVector of {self.source.name} (axis {self.axis})"


def _combine(op: str, a: Value, b: Value) -> Value:
    if op == "sum":
        return a + b
    return maximum(a, b) if op == "max" else minimum(a, b)


class AxisVector:
    """A fragment reduced along one axis: per lane, one value per distinct kept coordinate
    (``layout.reduced_coords(axis)``) -- one value per row (``axis=PER_ROW``, i.e. COL reduced
    away) or per column (``axis=PER_COL``)."""

    __slots__ = ("value", "source", "axis")

    def __init__(self, value: Value, source: TVLayout, axis: int):
        groups = len(source.reduce_plan(axis).in_lane)
        if not isinstance(value, Value) or value.lanes != groups:
            raise dsl_value_error(f"an axis vector of {source.name} holds {groups} values per lane")
        self.value = value
        self.source = source
        self.axis = axis

    def __repr__(self):
        holds = "PER_ROW" if self.axis == PER_ROW else "PER_COL"
        return f"AxisVector({self.source.name}, {holds}, {self.value.type_name})"

    @property
    def kernel(self):
        return self.value.kernel

    @staticmethod
    def full(kernel, source: TVLayout, axis: int, dtype, fill) -> "AxisVector":
        """A reduction of ``source`` along ``axis`` with every entry ``fill`` (e.g. a running
        max starting at -inf)."""
        groups = len(source.reduce_plan(axis).in_lane)
        return AxisVector(kernel.const(fill, T.dtype(dtype), groups), source, axis)

    def with_value(self, value: Value) -> "AxisVector":
        return AxisVector(value, self.source, self.axis)

    def carry_flatten(self):
        """The carry protocol (``rocke.dsl.tree``)."""
        return (self.value,), _AxisCarry(self.source, self.axis)

    def _other(self, other, symbol: str):
        if isinstance(other, AxisVector):
            mine, theirs = self.source.reduced_coords(self.axis), other.source.reduced_coords(other.axis)
            if mine.shape != theirs.shape or not (mine == theirs).all():
                raise dsl_value_error(f"'{symbol}' between axis vectors over different coordinates "
                                      f"({self.source.name} and {other.source.name})")
            return other.value
        return other

    def map(self, fn) -> "AxisVector":
        return AxisVector(fn(self.value), self.source, self.axis)

    def __add__(self, o): return self.with_value(self.value + self._other(o, "+"))
    def __radd__(self, o): return self.with_value(self._other(o, "+") + self.value)
    def __sub__(self, o): return self.with_value(self.value - self._other(o, "-"))
    def __rsub__(self, o): return self.with_value(self._other(o, "-") - self.value)
    def __mul__(self, o): return self.with_value(self.value * self._other(o, "*"))
    def __rmul__(self, o): return self.with_value(self._other(o, "*") * self.value)

    def maximum(self, other) -> "AxisVector":
        return self.with_value(maximum(self.value, self._other(other, "maximum")))

    def broadcast_to(self, layout: TVLayout) -> Fragment:
        """Spread over a tile of ``layout``: each value gets the result for its own row (or col).
        ``layout`` may differ from the source (e.g. an O^T accumulator sharing S^T's columns)
        as long as every lane holds the needed results."""
        keep = 1 - self.axis
        have = self.source.reduced_coords(self.axis)                # [64, groups]
        picks = []
        for v in range(layout.values_per_lane):
            want = layout.coords[:, v, keep]
            hit = have == want[:, None]
            idx = hit.argmax(axis=1)
            if not hit.any(axis=1).all() or not (idx == idx[0]).all():
                raise dsl_value_error(f"cannot broadcast a reduction of {self.source.name} over "
                                      f"{layout.name}: lanes do not hold the needed results")
            picks.append(int(idx[0]))
        n = layout.values_per_lane
        if self.value.lanes == 1:
            return Fragment(splat(self.value, n) if n > 1 else self.value, layout)
        return Fragment(shuffle(self.value, picks), layout)


# ---- MFMA ---------------------------------------------------------------------------------------

class Mfma:
    """One MFMA atom with its operand layouts ``A``, ``B`` and accumulator ``C``.

    ``atom``: a shape ("32x32x8", "4x4x4_16b") or a catalog key ("16x16x32_fp8_bf8");
    ``dtype``: the A element type, ``b_dtype`` the B one when it differs (fp8 x bf8 atoms).
    Operand fragments hold the element dtype the atom multiplies: f16, bf16, fp8/bf8 (i8
    carriers, ``fp8_e4m3fnuz`` / ``fp8_e5m2fnuz`` on gfx942, ``fp8_e4m3fn`` / ``fp8_e5m2`` on
    gfx950), i8, f32 (the f32 atoms, and gfx942's xf32 shapes 16x16x8 / 32x32x4) or f64; the
    accumulator ``C`` is ``acc_dtype``: f32, i32 for i8 atoms, f64 for f64 atoms.

    A multi-block atom (``blocks`` > 1) is a batch of independent products folded into 2-D
    tiles (see ``TVLayout.mfma_a``): A is (blocks*M) x K, B is K x (blocks*N), C is
    (blocks*M) x N, and C[b*M + m, n] = sum_k A[b*M + m, k] * B[k, b*N + n].

    gfx950's f8f6f4 atoms (16x16x128, 32x32x64) also take block scales: ``A_scale`` is an
    M x K/32 layout and ``B_scale`` a K/32 x N one, one E8M0 byte (a ``u8`` fragment) a lane;
    ``mma(a, b, c, a_scale=..., b_scale=...)`` multiplies each 32-K block of a row of A
    (column of B) by 2^(byte - 127)."""

    def __init__(self, kernel, atom, dtype, *, b_dtype=None):
        a_dt = T.dtype(dtype)
        b_dt = a_dt if b_dtype is None else T.dtype(b_dtype)
        if isinstance(atom, MfmaAtom):
            self.atom = atom
        elif isinstance(atom, str):
            self.atom = (get_atom(atom, kernel.target) if atom in MFMA_CATALOG
                         else atom_for(atom, a_dt.name, b_dt.name, target=kernel.target))
        else:
            raise dsl_type_error(f"Mfma atom must be a shape string or MfmaAtom, got {type(atom).__name__}")
        expected = (self.atom.a_type, self.atom.b_type)
        if not (takes_dtype(expected[0], a_dt.name) and takes_dtype(expected[1], b_dt.name)):
            takes = expected[0] if expected[0] == expected[1] else " x ".join(expected)
            given = a_dt.name if a_dt == b_dt else f"{a_dt.name} x {b_dt.name}"
            raise dsl_value_error(f"MFMA {self.atom.key} takes {takes} operands, not {given}")
        self.kernel = kernel
        self.dtype = a_dt
        self.b_dtype = b_dt
        self.acc_dtype = T.dtype(self.atom.acc_type)
        self.A = TVLayout.mfma_a(self.atom)
        self.B = TVLayout.mfma_b(self.atom)
        self.C = TVLayout.mfma_c(self.atom)
        if self.atom.scaled:
            self.A_scale = TVLayout.mfma_scale(self.atom, "A")
            self.B_scale = TVLayout.mfma_scale(self.atom, "B")

    def __repr__(self):
        return f"Mfma({self.atom.key})"

    def zeros(self) -> Fragment:
        """A zero accumulator (C) fragment."""
        return Fragment.full(self.kernel, self.C, self.acc_dtype, 0.0 if self.acc_dtype.is_float else 0)

    def _check(self, frag, layout: TVLayout, dtype: T.DType, role: str):
        if not isinstance(frag, Fragment):
            raise dsl_type_error(f"MFMA {self.atom.key} operand {role} must be a Fragment, "
                                 f"got {type(frag).__name__}")
        if not frag.layout.same_as(layout):
            raise dsl_value_error(f"MFMA {self.atom.key} operand {role} needs layout {layout.name} "
                                  f"{layout.shape}, got a fragment of {frag.layout.name} {frag.layout.shape}")
        if frag.dtype != dtype:
            raise dsl_type_error(f"MFMA {self.atom.key} operand {role} must be {dtype.name}, "
                                 f"got {frag.value.type_name}")

    def _operand(self, frag: Fragment):
        """The intrinsic's operand (IR): the fragment's vector, its bytes packed into i32 / i64 /
        <4 x i32> / <8 x i32> for 8-bit operands, or its carriers as ``bfloat`` for gfx950's
        wide-K bf16 atoms."""
        ir_type = self.atom.ir_operand_type
        if frag.dtype.bits == 8:
            words = frag.value.lanes // 4
            packed = frag.value.bitcast(T.i64) if ir_type == "i64" else frag.value.bitcast(T.i32, words)
            return self.kernel.ir_of(packed)
        if "bfloat" in ir_type:
            return _as_bfloat_vector(self.kernel, frag.value)
        return self.kernel.ir_of(frag.value)

    def __call__(self, a: Fragment, b: Fragment, c: Fragment, *, a_scale: Fragment | None = None,
                 b_scale: Fragment | None = None) -> Fragment:
        """D = A @ B + C (accumulated in ``acc_dtype``), cbsz = abid = blgp = 0. ``a_scale`` /
        ``b_scale``: the E8M0 block scales of an f8f6f4 atom (``u8`` fragments of ``A_scale`` /
        ``B_scale``); either left out is 1."""
        self._check(a, self.A, self.dtype, "A")
        self._check(b, self.B, self.b_dtype, "B")
        self._check(c, self.C, self.acc_dtype, "C")
        k = self.kernel
        i32 = ir.IntType(32)
        zero = ir.Constant(i32, 0)
        acc_ir = self.acc_dtype.vector_ir_type(self.atom.acc_regs)
        operands = [self._operand(a), self._operand(b), k.ir_of(c.value)]
        if not self.atom.scaled:
            if a_scale is not None or b_scale is not None:
                raise dsl_value_error(f"MFMA {self.atom.key} takes no block scales; gfx950's "
                                      f"f8f6f4 atoms (16x16x128, 32x32x64) do")
            d = k.call(self.atom.intrinsic, acc_ir, operands + [zero, zero, zero])
            return Fragment(k.wrap(d, self.acc_dtype, self.atom.acc_regs), self.C)
        # f8f6f4: A / B formats (0 E4M3, 1 E5M2) in cbsz / blgp, then opsel and scale of A and B
        formats = [ir.Constant(i32, 0 if t.startswith("fp8") else 1)
                   for t in (self.atom.a_type, self.atom.b_type)]
        # no scales at all: zeros, which LLVM selects as the unscaled v_mfma_f32_*_f8f6f4; one
        # left out next to a given one: the E8M0 code of 1 (127)
        unit = zero if a_scale is None and b_scale is None else ir.Constant(i32, 127)
        scales = []
        for frag, layout, role in ((a_scale, self.A_scale, "a_scale"), (b_scale, self.B_scale, "b_scale")):
            if frag is None:
                scales += [zero, unit]
                continue
            self._check(frag, layout, T.u8, role)
            scales += [zero, k.ir_of(frag.value.to(T.u32).bitcast(T.i32))]
        name = f"{self.atom.intrinsic}.v8i32.v8i32"
        d = k.call(name, acc_ir, operands + formats + scales)
        return Fragment(k.wrap(d, T.f32, self.atom.acc_regs), self.C)


def _as_bfloat_vector(kernel, value: Value):
    """An intrinsic operand: the bf16 carrier vector ``<N x i16>`` bitcast to ``<N x bfloat>``."""
    x = kernel.ir_of(value)
    return kernel.builder.bitcast(x, T.bfloat_vector_ir_type(value.lanes))


# ---- memory -------------------------------------------------------------------------------------

def _storage_layout(layout: TVLayout, transposed: bool) -> TVLayout:
    return layout.transpose() if transposed else layout


def _storage_origin(origin, transposed: bool):
    if len(origin) != 2:
        raise dsl_value_error(f"origin must be (row, col), got {origin!r}")
    return (origin[1], origin[0]) if transposed else (origin[0], origin[1])


def _run_addresses(k, storage: TVLayout, origin):
    """For each run of values contiguous along storage columns: (first value, length, row, col)
    with row/col as i32 Values (lane part + value offset + origin)."""
    lane_row = lane_affine_value(k, storage.lane_part(ROW))
    lane_col = lane_affine_value(k, storage.lane_part(COL))
    off_r, off_c = storage.value_offsets(ROW), storage.value_offsets(COL)
    r0, c0 = (_index(o) for o in origin)
    out = []
    for v0, n in storage.value_runs(COL):
        row = lane_row + (r0 + off_r[v0] if isinstance(r0, int) else r0 + off_r[v0])
        col = lane_col + (c0 + off_c[v0] if isinstance(c0, int) else c0 + off_c[v0])
        out.append((v0, n, row, col))
    return out


def _buffer_sized(runs, elem_bytes: int):
    """Split runs whose byte size no single buffer access moves (e.g. 6 fp8 values) into
    power-of-two pieces, largest first."""
    out = []
    for v0, n, row, col in runs:
        if n * elem_bytes in BUFFER_ACCESS_BYTES:
            out.append((v0, n, row, col))
            continue
        done = 0
        while done < n:
            piece = 1 << ((n - done).bit_length() - 1)
            while piece * elem_bytes not in BUFFER_ACCESS_BYTES:
                piece //= 2
            out.append((v0 + done, piece, row, col + done if done else col))
            done += piece
    return out


def _gather(parts, count):
    if not parts:
        raise dsl_value_error("empty fragment")
    value = concat(*parts) if len(parts) > 1 else parts[0]
    if value.lanes != count:
        raise dsl_value_error(f"internal: gathered {value.lanes} values, expected {count}")
    return value


def _split_runs(value: Value, runs):
    for v0, n, row, col in runs:
        part = value if (n == value.lanes) else (value[v0] if n == 1 else value[v0:v0 + n])
        yield part, n, row, col


def _check_lds_fit(lds, storage: TVLayout, origin, what: str):
    if not isinstance(lds, LdsTensor) or len(lds.shape) != 2:
        raise dsl_type_error(f"{what} needs a 2-D LdsTensor (or a 2-D view of one), got {lds!r}")
    lds.check_fits(f"{what} of a {storage.name} fragment", origin, storage.shape)


def load_fragment(lds: LdsTensor, layout: TVLayout, origin=(0, 0), *, transposed: bool = False) -> Fragment:
    """Read a fragment of ``layout`` from a row-major 2-D LDS tile (or view), its logical tile
    at ``origin``; one vector access per run of values contiguous in LDS. A fragment that does
    not fit the tile is a build-time error."""
    storage = _storage_layout(layout, transposed)
    at = _storage_origin(origin, transposed)
    _check_lds_fit(lds, storage, at, "load_fragment")
    k = lds.kernel
    parts = [lds.load((row, col), width=n) for _, n, row, col in _run_addresses(k, storage, at)]
    return Fragment(_gather(parts, layout.values_per_lane), layout)


def store_fragment(lds: LdsTensor, frag: Fragment, origin=(0, 0), *, transposed: bool = False, bounds=None):
    """Write ``frag`` into a row-major 2-D LDS tile or view (its logical tile at ``origin``).
    ``bounds`` = (rows, cols) in the fragment's logical coordinates (None: no check along that
    axis): elements at or past a bound are not written (an exec-masked store)."""
    if not isinstance(frag, Fragment):
        raise dsl_type_error(f"store_fragment stores a Fragment, got {type(frag).__name__}")
    storage = _storage_layout(frag.layout, transposed)
    at = _storage_origin(origin, transposed)
    _check_lds_fit(lds, storage, at, "store_fragment")
    if frag.dtype != lds.dtype:
        raise dsl_type_error(f"storing a {frag.dtype.name} fragment into LDS tile {lds.name!r} of "
                             f"{lds.dtype.name}; convert with .to()")
    k = lds.kernel
    runs = _run_addresses(k, storage, at)
    if bounds is None and lds.valid is None:
        for part, _, row, col in _split_runs(frag.value, runs):
            lds.store((row, col), part)
        return
    row_bound, col_bound = _storage_origin(tuple(bounds), transposed) if bounds is not None else (None, None)
    if lds.valid is not None:          # a view's runtime extents are storage bounds too
        row_bound, col_bound = (_tighter(b, v) for b, v in zip((row_bound, col_bound), lds.valid))
    for part, n, row, col in _split_runs(frag.value, runs):
        pieces = list(part) if (col_bound is not None and n > 1) else [part]
        for j, piece in enumerate(pieces):
            c = col + j if len(pieces) > 1 and j else col
            ok = _in_bounds(row, c, row_bound, col_bound)
            if ok is None:
                lds.store((row, c), piece)
            else:
                with k.if_(ok):
                    lds.store((row, c), piece)


def _tighter(bound, valid):
    if bound is None or valid is None:
        return valid if bound is None else bound
    return minimum(bound, valid) if isinstance(bound, Value) or isinstance(valid, Value) else min(bound, valid)


def _in_bounds(row, col, row_bound, col_bound):
    ok = None
    if row_bound is not None:
        ok = row < row_bound
    if col_bound is not None:
        col_ok = col < col_bound
        ok = col_ok if ok is None else ok & col_ok
    return ok


def load_fragment_global(buf: BufferResource, layout: TVLayout, origin, ld, *,
                         transposed: bool = False) -> Fragment:
    """Read a fragment from a row-major global matrix (row stride ``ld`` elements) through a
    buffer resource; elements past the buffer's extent read 0 (that is how ragged rows at the
    end of a matrix are handled)."""
    if not isinstance(buf, BufferResource):
        raise dsl_type_error(f"load_fragment_global reads a BufferResource, got {type(buf).__name__}")
    k = buf.kernel
    storage = _storage_layout(layout, transposed)
    runs = _buffer_sized(_run_addresses(k, storage, _storage_origin(origin, transposed)), buf.dtype.nbytes)
    parts = [buf.load(row * ld + col, width=n) for _, n, row, col in runs]
    return Fragment(_gather(parts, layout.values_per_lane), layout)


def store_fragment_global(buf: BufferResource, frag: Fragment, origin, ld, *, bounds=None,
                          transposed: bool = False):
    """Write ``frag`` to a row-major global matrix through a buffer resource. ``bounds`` =
    (rows, cols) in the fragment's logical coordinates (None entries: no check along that axis);
    masked elements are sent past the buffer's extent, where the hardware drops them. Runs of
    values along an axis with a bound are stored element by element, others as vectors."""
    if not isinstance(buf, BufferResource):
        raise dsl_type_error(f"store_fragment_global writes a BufferResource, got {type(buf).__name__}")
    if not isinstance(frag, Fragment):
        raise dsl_type_error(f"store_fragment_global stores a Fragment, got {type(frag).__name__}")
    if frag.dtype != buf.dtype:
        raise dsl_type_error(f"storing a {frag.dtype.name} fragment into buffer {buf.name!r} of "
                             f"{buf.dtype.name}; convert with .to()")
    k = buf.kernel
    bounds = (None, None) if bounds is None else tuple(bounds)
    row_bound, col_bound = _storage_origin(bounds, transposed)
    storage = _storage_layout(frag.layout, transposed)
    runs = _buffer_sized(_run_addresses(k, storage, _storage_origin(origin, transposed)), buf.dtype.nbytes)
    for part, n, row, col in _split_runs(frag.value, runs):
        if col_bound is not None and n > 1:
            elems = list(part)
            for j, e in enumerate(elems):
                _masked_store(k, buf, row, col + j, ld, e, row_bound, col_bound)
        else:
            _masked_store(k, buf, row, col, ld, part, row_bound, col_bound)


def _masked_store(k, buf, row, col, ld, value, row_bound, col_bound):
    buf.store(row * ld + col, value, mask=_in_bounds(row, col, row_bound, col_bound))


def copy_tile_to_lds(src: BufferResource, lds: LdsTensor, origin, ld, *, thread_index: Value,
                     threads: int, vector: int = 8, cols_limit=None, transpose: bool = False):
    """Cooperative copy of a row-major global tile at ``origin`` (row, col; row stride ``ld``)
    into ``lds`` by ``threads`` threads (``thread_index`` in [0, threads)). The tile is
    ``lds.shape`` or, with ``transpose`` (``lds[c, r] = src[r, c]``), its transpose. Each thread
    moves ``vector`` consecutive elements of a row per access. Rows past the buffer's extent
    read 0; columns >= ``cols_limit`` (when given) are written as 0, and so is everything past
    a view's runtime extents (``LdsTensor.view(..., valid=...)``)."""
    if not isinstance(lds, LdsTensor) or len(lds.shape) != 2:
        raise dsl_type_error("copy_tile_to_lds needs a 2-D LdsTensor destination")
    if src.dtype != lds.dtype:
        raise dsl_type_error(f"copy_tile_to_lds: source {src.dtype.name} and LDS {lds.dtype.name} differ")
    k = src.kernel
    rows, cols = (lds.shape[1], lds.shape[0]) if transpose else lds.shape
    if cols % vector or vector & (vector - 1):
        raise dsl_value_error(f"copy_tile_to_lds: vector {vector} must be a power of two dividing "
                              f"the tile's {cols} columns")
    per_row = cols // vector
    total = rows * per_row
    r0, c0 = origin
    for first in range(0, total, threads):
        def copy_one():
            i = thread_index + first if first else thread_index
            r = i >> int(math.log2(per_row)) if per_row & (per_row - 1) == 0 else i // per_row
            c = (i & (per_row - 1) if per_row & (per_row - 1) == 0 else i % per_row) * vector
            index = (r0 + r) * ld + (c0 + c)
            if cols_limit is None:
                loaded = src.load(index, width=vector)
            else:
                loaded = _load_row_segment(k, src, index, c0 + c, cols_limit, vector)
            if lds.valid is not None:
                loaded = _zero_past_valid(k, lds.valid, r, c, loaded, vector, transpose)
            if transpose:
                for j, e in enumerate(list(loaded) if vector > 1 else [loaded]):
                    lds.store((c + j, r), e)
            else:
                lds.store((r, c), loaded)
        if first + threads <= total:
            copy_one()
        else:
            with k.if_(thread_index < total - first):
                copy_one()


def gather_rows_to_lds(src: BufferResource, lds: LdsTensor, rows, col0, ld, *, thread_index: Value,
                       threads: int, valid_rows=None, vector: int = 8, cols_limit=None):
    """Cooperative row gather into ``lds`` (Triton's ``tl.load(src + idx[:, None] * ld + cols)``;
    the token rows of a fused-MoE expert): tile row ``r`` is source row ``rows.load(r)`` --
    ``rows`` a ``BufferResource`` (or an offset ``GlobalPtr``) of integer row indices -- from
    column ``col0``, row stride ``ld`` elements; ``lds.shape`` is (tile rows, tile columns).
    Tile rows ``r >= valid_rows`` (when given) are written as 0 without reading their index,
    so every element of the tile is written: a tail or padding row is never left unfilled. A
    source row past ``src``'s extent reads 0 too, and so do columns >= ``cols_limit`` and
    everything past a view's runtime extents, as in ``copy_tile_to_lds``. Each thread moves
    ``vector`` consecutive elements of a row per access."""
    if not isinstance(lds, LdsTensor) or len(lds.shape) != 2:
        raise dsl_type_error("gather_rows_to_lds needs a 2-D LdsTensor destination")
    if not isinstance(src, BufferResource):
        raise dsl_type_error(f"gather_rows_to_lds reads a BufferResource, got {type(src).__name__}")
    if not isinstance(rows, (BufferResource, GlobalPtr)) or not rows.dtype.is_int or rows.dtype.bits != 32:
        raise dsl_type_error("gather_rows_to_lds: rows must be a BufferResource or GlobalPtr of i32/u32 "
                             f"row indices, got {rows!r}")
    if src.dtype != lds.dtype:
        raise dsl_type_error(f"gather_rows_to_lds: source {src.dtype.name} and LDS {lds.dtype.name} differ")
    k = src.kernel
    tile_rows, cols = lds.shape
    if cols % vector or vector & (vector - 1):
        raise dsl_value_error(f"gather_rows_to_lds: vector {vector} must be a power of two dividing "
                              f"the tile's {cols} columns")
    per_row = cols // vector
    total = tile_rows * per_row
    zero = _zero_of(k, src.dtype)
    for first in range(0, total, threads):
        def copy_one():
            i = thread_index + first if first else thread_index
            r, c = (i // per_row, (i % per_row) * vector) if per_row > 1 else (i, 0)
            valid = None if valid_rows is None else r < valid_rows
            if valid is None:
                row = rows.load(r)
            else:       # an invalid row's index is never read (it may lie past the index array)
                pick = k.if_else(valid)
                with pick.then_():
                    pick.yield_(rows.load(r))
                with pick.else_():
                    pick.yield_(k.const(0, rows.dtype))
                row = pick.results[0]
            index = row * ld + (col0 + c)
            if cols_limit is None:
                loaded = src.load(index, width=vector)
            else:
                loaded = _load_row_segment(k, src, index, col0 + c, cols_limit, vector)
            if valid is not None:
                loaded = select(valid, loaded, splat(zero, vector) if vector > 1 else zero)
            if lds.valid is not None:
                loaded = _zero_past_valid(k, lds.valid, r, c, loaded, vector, False)
            lds.store((r, c), loaded)
        if first + threads <= total:
            copy_one()
        else:
            with k.if_(thread_index < total - first):
                copy_one()


def atomic_add_fragment(dst, frag: Fragment, origin, ld, *, bounds=None, transposed: bool = False,
                        rows=None):
    """``atomic_store_fragment(..., op="add")``: add a tile into a global matrix atomically
    (Triton's ``tl.atomic_add`` of a block; a split-K or fused-MoE epilogue)."""
    atomic_store_fragment(dst, frag, origin, ld, op="add", bounds=bounds, transposed=transposed,
                          rows=rows)


def atomic_store_fragment(dst, frag: Fragment, origin, ld, *, op: str = "add", bounds=None,
                          transposed: bool = False, rows=None):
    """Combine ``frag`` into a row-major global matrix (``dst``: a ``GlobalPtr`` or
    ``BufferResource``, row stride ``ld``; origin, bounds and ``transposed`` as for
    ``store_fragment_global``) with the device-wide atomic ``op`` (add, max, min, exchange, ...;
    ``rocke.dsl.atomics``), so that fragments of many waves or workgroups may target the same
    elements. 32/64-bit elements go one atomic each. f16 / bf16 tiles (``op="add"`` only: the
    hardware has no 16-bit atomics) go as packed pairs of neighbouring columns
    (``global_atomic_pk_add_f16/bf16``), taken from one lane's registers where a lane holds
    both, else from lane pairs that hold neighbouring columns (an accumulator's layout: one
    swizzle hands each lane its partner's half); ``ld`` and the origin's column must then be
    even (checked when they are ints), and bf16 needs a ``GlobalPtr``. A pair straddling the
    column bound adds -0.0, the identity of IEEE addition, past it. Lanes past a bound add
    nothing; the old values are not returned.

    ``rows`` scatters the tile's rows (Triton's ``out + idx[:, None] * ld + cols``; a fused-MoE
    epilogue adding each routed token's row back to its token): a ``BufferResource`` or
    ``GlobalPtr`` of i32 row indices, memory row ``r`` (origin included, in storage
    coordinates) going to row ``rows[r]``. An index is read only for rows inside the bounds."""
    if not isinstance(frag, Fragment):
        raise dsl_type_error(f"atomic_store_fragment stores a Fragment, got {type(frag).__name__}")
    if rows is not None and (not isinstance(rows, (BufferResource, GlobalPtr)) or not rows.dtype.is_int
                             or rows.dtype.bits != 32):
        raise dsl_type_error("atomic_store_fragment: rows must be a BufferResource or GlobalPtr of "
                             f"i32/u32 row indices, got {rows!r}")
    if not isinstance(dst, (GlobalPtr, BufferResource)):
        raise dsl_type_error(f"atomic_store_fragment writes a GlobalPtr or BufferResource, got {type(dst).__name__}")
    if op not in ATOMIC_OPS:
        raise dsl_value_error(f"atomic op must be one of {', '.join(ATOMIC_OPS)}, got {op!r}")
    if frag.dtype != dst.dtype:
        raise dsl_type_error(f"atomically storing a {frag.dtype.name} fragment into {dst.dtype.name} "
                             f"memory {dst.name!r}; convert with .to()")
    k = frag.kernel
    bounds = (None, None) if bounds is None else tuple(bounds)
    row_bound, col_bound = _storage_origin(bounds, transposed)
    storage = _storage_layout(frag.layout, transposed)
    at = _storage_origin(origin, transposed)
    if frag.dtype.bits == 16:
        if op != "add":
            raise dsl_type_error(f"atomic {op!r} on a {frag.dtype.name} fragment: 16-bit atomics are "
                                 "packed adds only (global_atomic_pk_add_f16/bf16)")
        for what, x in (("ld", ld), ("the origin's column", at[1])):
            if isinstance(x, int) and x % 2:
                raise dsl_value_error(f"atomic add of a {frag.dtype.name} fragment: {what} ({x}) must be "
                                      "even, so that neighbouring-column pairs are aligned 32-bit words")
        pairs = _column_pairs(k, storage, frag.value, at)
    else:
        pairs = []
        for v0, n, row, col in _run_addresses(k, storage, at):
            for j in range(n):
                element = frag.value[v0 + j] if frag.value.lanes > 1 else frag.value
                pairs.append((element, row, col + j if j else col))
    for value, row, col in pairs:
        ok = _in_bounds(row, col, row_bound, col_bound)
        if value.lanes == 2 and col_bound is not None:      # the pair's upper half past the bound
            upper = select(col + 1 < col_bound, value[1], _negative_zero(k, value.dtype))
            value = concat(value[0], upper)
        if rows is not None:        # the index is read under the bounds: it may end there
            if ok is None:
                dst.atomic(op, rows.load(row) * ld + col, value)
            else:
                with k.if_(ok):
                    dst.atomic(op, rows.load(row) * ld + col, value)
            continue
        index = row * ld + col
        if isinstance(dst, BufferResource):
            dst.atomic(op, index, value, mask=ok)
        elif ok is None:
            dst.atomic(op, index, value)
        else:
            with k.if_(ok):
                dst.atomic(op, index, value)


def _nonzero(x) -> bool:
    return not (isinstance(x, int) and x == 0)


def _negative_zero(k, dtype: T.DType) -> Value:
    return k.const(0x8000, T.u16).bitcast(dtype)


def _column_pairs(k, storage: TVLayout, value: Value, origin):
    """(2-wide value, row, col) for each pair of neighbouring columns (col even relative to the
    origin) a lane adds: from its own registers when every run along the columns is even and
    starts at an even column, else from lane pairs ``l``, ``l ^ m`` holding neighbouring columns
    of the same rows (the even-column lane adds the first half of the values, its partner the
    second)."""
    coords = storage.coords
    runs = storage.value_runs(COL)
    if all(n % 2 == 0 for _, n in runs) and (coords[:, [v0 for v0, _ in runs], COL] % 2 == 0).all():
        out = []
        for v0, n, row, col in _run_addresses(k, storage, origin):
            for j in range(0, n, 2):
                out.append((value[v0 + j:v0 + j + 2], row, col + j if j else col))
        return out
    n = storage.values_per_lane
    lanes = np.arange(WAVE)
    mask = next((m for m in (1, 2, 4, 8, 16, 32)
                 if n % 2 == 0 and ((coords[:, 0, COL] % 2 == 0) == ((lanes & m) == 0)).all()
                 and (coords[lanes ^ m] == coords + np.where((lanes & m) == 0, 1, -1)[:, None, None]
                      * np.array([0, 1])).all()), None)
    if mask is None:
        raise dsl_value_error(f"atomic add of a 16-bit {storage.name} fragment: neither a lane nor a pair "
                              "of lanes holds neighbouring columns; store it transposed or through LDS")
    half = n // 2
    even = (k.lane_id() & mask) == 0
    low, high = (value[:half], value[half:]) if half > 1 else (value[0], value[1])
    given = shuffle_xor(select(even, high, low), mask)
    lane_row = lane_affine_value(k, storage.lane_part(ROW))
    lane_col = lane_affine_value(k, storage.lane_part(COL))
    lane_col = select(even, lane_col, lane_col - 1)
    off_r, off_c = storage.value_offsets(ROW), storage.value_offsets(COL)
    r0, c0 = (_index(o) for o in origin)
    out = []
    for i in range(half):
        mine_lo = low[i] if half > 1 else low
        mine_hi = high[i] if half > 1 else high
        got = given[i] if half > 1 else given
        pair = select(even, concat(mine_lo, got), concat(got, mine_hi))
        dr = select(even, k.const(off_r[i], T.i32), k.const(off_r[half + i], T.i32)) \
            if off_r[i] != off_r[half + i] else off_r[i]
        dc = select(even, k.const(off_c[i], T.i32), k.const(off_c[half + i], T.i32)) \
            if off_c[i] != off_c[half + i] else off_c[i]
        row, col = lane_row + dr, lane_col + dc
        out.append((pair, row + r0 if _nonzero(r0) else row, col + c0 if _nonzero(c0) else col))
    return out


def _zero_past_valid(k, valid, r, c, loaded, vector: int, transpose: bool) -> Value:
    """``loaded`` (a source row segment at tile row ``r``, columns ``c``..) with the elements
    outside the destination view's runtime extents replaced by 0."""
    row_valid, col_valid = (valid[1], valid[0]) if transpose else valid
    zero = _zero_of(k, loaded.dtype)
    if col_valid is not None:
        elems = list(loaded) if vector > 1 else [loaded]
        elems = [select(c + j < col_valid, e, zero) for j, e in enumerate(elems)]
        loaded = concat(*elems) if vector > 1 else elems[0]
    if row_valid is not None:
        loaded = select(r < row_valid, loaded, zero)
    return loaded


def _zero_of(k, dtype: T.DType) -> Value:
    """The fill 0 of a tile's element type: 0 for integers, +0.0 for floats and bf16, the
    all-zero byte (+0.0) for fp8, whose constants the DSL builds from their integer carrier."""
    if dtype.kind == "fp8":
        return k.const(0, T.u8).bitcast(dtype)
    return k.const(0, dtype)


def _load_row_segment(k, src: BufferResource, index, col, cols_limit, width: int) -> Value:
    """``width`` elements of a row from ``index`` (at column ``col``); columns >= ``cols_limit``
    read 0. A segment crossing the limit is read element by element: the buffer range check
    works on whole dwords (or whole accesses), so in-range elements of a vector straddling the
    extent can read 0."""
    zero = _zero_of(k, src.dtype)
    if width == 1:
        return select(col < cols_limit, src.load(index), zero)
    whole = k.if_else(col + width <= cols_limit)
    with whole.then_():
        whole.yield_(src.load(index, width=width))
    with whole.else_():
        whole.yield_(concat(*[select(col + j < cols_limit, src.load(index + j), zero) for j in range(width)]))
    return whole.results[0]


# ---- axis vectors through memory ----------------------------------------------------------------

def _axis_runs(source: TVLayout, axis: int):
    """(first group, length, lane part, offset) for each run of a reduction's groups that are
    consecutive along the kept axis; the coordinate of group g is lane_part(lane) + offsets[g]."""
    coords = source.reduced_coords(axis)                    # [64, groups]
    offsets = coords[0] - coords[0, 0]
    lane_part = LaneAffine.fit(coords[:, 0])
    if lane_part is None or not (coords - coords[:, :1] == offsets).all():
        raise dsl_value_error(f"the reduction of {source.name} along axis {axis} is not lane-affine; "
                              "it cannot be addressed in memory")
    runs, g = [], 0
    while g < len(offsets):
        start = g
        while g + 1 < len(offsets) and offsets[g + 1] == offsets[g] + 1:
            g += 1
        runs.append((start, g - start + 1, int(offsets[start])))
        g += 1
    return lane_part, runs


def _axis_pieces(runs, elem_bytes: int):
    """Runs split into accesses of at most 16 bytes that a buffer access can move."""
    out = []
    for g0, n, off in runs:
        done = 0
        while done < n:
            piece = 1 << ((n - done).bit_length() - 1)
            while piece * elem_bytes > 16 or piece * elem_bytes not in BUFFER_ACCESS_BYTES:
                piece //= 2
            out.append((g0 + done, piece, off + done))
            done += piece
    return out


def _writer_lane(k, source: TVLayout, axis: int):
    """i1: whether this lane is the first of the lanes holding the same reduced values (so each
    entry is written once), or None when every lane holds distinct entries."""
    masks = source.reduce_plan(axis).xor_masks
    if not masks:
        return None
    lane = k.lane_id()
    if all(m & (m - 1) == 0 for m in masks):
        bits = 0
        for m in masks:
            bits |= m
        return (lane & bits) == 0
    span = {0}
    for m in masks:
        span |= {x ^ m for x in span}
    first = sum(1 << l for l in range(WAVE) if all(l <= (l ^ m) for m in span))
    return ((k.const(first, T.u64) >> lane.to(T.u64)) & 1) != 0


def _axis_memory(mem, what: str):
    if isinstance(mem, LdsTensor):
        if len(mem.shape) != 1:
            raise dsl_type_error(f"{what} needs a 1-D LdsTensor or view (e.g. t[row]), got {mem!r}")
        return "lds"
    if isinstance(mem, BufferResource):
        return "global"
    raise dsl_type_error(f"{what} takes a 1-D LdsTensor or a BufferResource, got {type(mem).__name__}")


def store_axis(mem, vec: "AxisVector", origin=0, *, bound=None):
    """Store a per-row / per-column vector (an ``AxisVector``): entry for kept coordinate ``c``
    goes to element ``origin + c`` of ``mem`` (a 1-D LDS tensor/view or a buffer). Each entry is
    written by one lane. ``bound``: entries with ``c + origin >= bound`` are not written."""
    if not isinstance(vec, AxisVector):
        raise dsl_type_error(f"store_axis stores an AxisVector, got {type(vec).__name__}")
    kind = _axis_memory(mem, "store_axis")
    if vec.value.dtype != mem.dtype:
        raise dsl_type_error(f"storing a {vec.value.dtype.name} axis vector into {mem.dtype.name} "
                             f"memory; convert with .map(lambda v: v.to(...))")
    k = vec.kernel
    lane_part, runs = _axis_runs(vec.source, vec.axis)
    runs = _axis_pieces(runs, mem.dtype.nbytes)
    extent = vec.source.shape[1 - vec.axis]
    if kind == "lds" and isinstance(origin, int):
        mem.check_fits_1d("store_axis", origin, extent)
    base = lane_affine_value(k, lane_part) + origin if not (isinstance(origin, int) and origin == 0) \
        else lane_affine_value(k, lane_part)
    writer = _writer_lane(k, vec.source, vec.axis)
    for g0, n, off in runs:
        part = vec.value if n == vec.value.lanes else (vec.value[g0] if n == 1 else vec.value[g0:g0 + n])
        index = base + off if off else base
        pieces = list(part) if (bound is not None and n > 1) else [part]
        for j, piece in enumerate(pieces):
            at = index + j if j else index
            ok = writer
            if bound is not None:
                ok = (at < bound) if ok is None else ok & (at < bound)
            if kind == "global":
                mem.store(at, piece, mask=ok)
            elif ok is None:
                mem.store(at, piece, align=mem.dtype.nbytes)
            else:
                with k.if_(ok):
                    mem.store(at, piece, align=mem.dtype.nbytes)


def load_axis(mem, source: TVLayout, axis: int, origin=0) -> "AxisVector":
    """Load an ``AxisVector`` (the reduction of ``source`` along ``axis``: ``PER_ROW`` for one
    entry per row, ``PER_COL`` per column) written by ``store_axis``: every lane reads the
    entries it holds."""
    kind = _axis_memory(mem, "load_axis")
    k = mem.kernel
    lane_part, runs = _axis_runs(source, axis)
    runs = _axis_pieces(runs, mem.dtype.nbytes)
    if kind == "lds" and isinstance(origin, int):
        mem.check_fits_1d("load_axis", origin, source.shape[1 - axis])
    base = lane_affine_value(k, lane_part)
    if not (isinstance(origin, int) and origin == 0):
        base = base + origin
    extra = {"align": mem.dtype.nbytes} if kind == "lds" else {}
    parts = [mem.load(base + off if off else base, width=n, **extra) for _, n, off in runs]
    return AxisVector(_gather(parts, sum(n for _, n, _ in runs)), source, axis)


def merge_across_waves(k, m: "AxisVector", l: "AxisVector", o, *, base2: bool = True,
                       name: str = "merge", at: int | None = None):
    """Merge per-wave partial softmax results over disjoint key segments (ALGORITHM.md §5):
    ``m = max_w m_w``, ``l = sum_w e^(m_w - m) l_w``, ``o = sum_w e^(m_w - m) o_w``, with ``e``
    = 2 when ``base2`` (scores in the log2 domain) else e. ``m``/``l`` are AxisVectors (one
    entry per query), ``o`` a Fragment or a list of them (unnormalized outputs whose queries are
    ``m``'s kept axis). Every wave gets the merged (m, l, o).

    LDS footprint: 2 x waves x queries f32 for (m, l) plus ONE f32 copy of ``o``, accumulated
    wave by wave (waves + 1 barriers) rather than one copy per wave. ``at``: a byte offset in the
    LDS arena to place them at, aliasing regions that are dead by now (e.g. a main loop's K/V
    tiles after its closing barrier), so the merge costs no extra LDS."""
    from .math import exp
    frags = [o] if isinstance(o, Fragment) else list(o)
    if not isinstance(m, AxisVector) or not isinstance(l, AxisVector):
        raise dsl_type_error("merge_across_waves: m and l must be AxisVectors")
    waves = k.num_waves
    if waves == 1:
        return m, l, o
    power = (lambda x: exp2(x, fast=True)) if base2 else exp
    queries = m.source.shape[1 - m.axis]
    place = {} if at is None else {"offset": at, "alias": True}
    ml = k.lds(f"{name}_ml", (2, waves, queries), T.f32, **place)
    rows, cols = frags[0].layout.shape
    if at is not None:
        place["offset"] = at + ml.size_bytes
    acc = k.lds(f"{name}_o", (len(frags), rows, cols), T.f32, **place)
    wave = k.wave_id()
    store_axis(ml[0, wave], m)
    store_axis(ml[1, wave], l)
    k.barrier()
    ms = [load_axis(ml[0, w], m.source, m.axis) for w in range(waves)]
    ls = [load_axis(ml[1, w], l.source, l.axis) for w in range(waves)]
    m_all = ms[0]
    for mw in ms[1:]:
        m_all = m_all.maximum(mw)
    base = m_all.map(lambda v: select(v == -math.inf, 0.0, v))
    l_all = None
    for mw, lw in zip(ms, ls):
        term = lw * (mw - base).map(power)
        l_all = term if l_all is None else l_all + term
    mine = (m - base).map(power)
    scaled = [f * mine for f in frags]
    for w in range(waves):
        with k.if_(wave == w):
            for i, f in enumerate(scaled):
                if w:
                    f = f + load_fragment(acc[i], f.layout)
                store_fragment(acc[i], f)
        k.barrier()
    merged = [load_fragment(acc[i], f.layout) for i, f in enumerate(frags)]
    return m_all, l_all, (merged[0] if isinstance(o, Fragment) else merged)
