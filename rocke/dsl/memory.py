"""Global memory, buffer resources and the LDS arena.

- ``GlobalPtr``: a typed ``ptr addrspace(1)``; ``load``/``store`` at an element index, optionally
  as a vector of ``width`` elements (default alignment = the access size, up to 16 bytes: pass
  ``align=`` when an access is less aligned than that).
- ``BufferResource``: a ``ptr addrspace(8)`` made by ``llvm.amdgcn.make.buffer.rsrc`` with a
  byte extent (``num_records``). Raw buffer loads past the extent return 0 and stores past it
  are dropped by the hardware, which is how ragged edges are handled without branches.
  ``load_to_lds`` is the asynchronous DMA ``buffer_load_dword ... lds``: each lane's dword lands
  at ``lds_base + 4 * lane`` (``lds_base`` must be wave-uniform) and the data is only there after
  ``k.wait_vmcnt(n)`` (plus ``k.barrier()`` for other waves) -- LLVM cannot infer that wait.
- ``LdsTensor``: a named region of the kernel's single LDS arena (``@rocke_lds``, addrspace 3),
  with a shape, an element type, optional row padding (elements appended to the last dimension)
  and an explicit or automatic byte offset; regions may alias only when asked to.

All three have atomics (``atomic(op, index, value)``, ``atomic_add`` ... ``atomic_exchange``,
``atomic_cas``), returning the old value; the types and what gfx942 does natively are in
``rocke.dsl.atomics``.
"""

from __future__ import annotations

import re

import llvmlite.ir as ir

from . import types as T
from .errors import dsl_type_error, dsl_value_error, user_location
from .atomics import atomic_cas, atomic_methods, atomic_rmw, buffer_atomic
from .values import Value, select

_I8 = ir.IntType(8)
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# gfx9 buffer descriptor word 3 for raw (untyped) access: DATA_FORMAT=32, NUM_FORMAT=float.
BUFFER_RSRC_FLAGS = 0x27000
# A byte offset past any extent rocke's buffers have (tensors < 2 GiB): a masked lane's access is
# sent there, so the hardware's range check drops the store / zeroes the load without a branch.
OUT_OF_RANGE_BYTE = 0x7FFFFFF0
_BUFFER_CARRIERS = {1: (_I8, "i8"), 2: (_I16, "i16"), 4: (_I32, "i32"),
                    8: (ir.VectorType(_I32, 2), "v2i32"), 12: (ir.VectorType(_I32, 3), "v3i32"),
                    16: (ir.VectorType(_I32, 4), "v4i32")}
BUFFER_ACCESS_BYTES = tuple(_BUFFER_CARRIERS)


def _natural_align(nbytes: int) -> int:
    return min(16, nbytes & -nbytes)


def _check_width(width) -> int:
    if not isinstance(width, int) or width < 1 or width > 64:
        raise dsl_value_error(f"width must be an int in [1, 64], got {width!r}")
    return width


def _index_value(k, index, what: str) -> Value:
    """An element index as an integer Value (Python ints become i32 constants)."""
    if isinstance(index, bool) or not isinstance(index, (int, Value)):
        raise dsl_type_error(f"{what} index must be an int or integer Value, got {type(index).__name__}")
    if isinstance(index, int):
        return k.const(index, T.i32 if -2**31 <= index < 2**31 else T.i64)
    v = k.coerce(index, T.i32, 1, what)
    if not v.dtype.is_int or v.lanes != 1:
        raise dsl_type_error(f"{what} index must be a scalar integer, got {v.type_name}")
    return v


def _stored_value(k, value, dtype: T.DType, what: str) -> Value:
    v = k.coerce(value, dtype, 1, what)
    if v.dtype != dtype:
        raise dsl_type_error(f"{what}: storing {v.type_name} into memory of {dtype.name}; convert with .to()")
    return v


class GlobalPtr:
    """A global-memory pointer argument (or an offset of one) to elements of ``dtype``."""

    def __init__(self, value: Value, dtype: T.DType, *, name: str, readonly: bool):
        if dtype.kind in ("bool", "ptr"):
            raise dsl_type_error(f"global pointer {name!r} cannot point to {dtype.name}")
        self.value = value
        self.dtype = dtype
        self.name = name
        self.readonly = readonly
        self.kernel = value.kernel

    def _element_address(self, index):
        k = self.kernel
        idx = _index_value(k, index, f"{self.name}")
        if idx.dtype.kind == "uint":  # GEP indices are signed: widen unsigned ones explicitly
            idx = idx.to(T.u64).bitcast(T.i64)
        return k.builder.gep(k.ir_of(self.value), [k.ir_of(idx)], inbounds=True, source_etype=self.dtype.ir_type)

    def offset(self, index) -> "GlobalPtr":
        """The pointer ``index`` elements further on."""
        k = self.kernel
        address = self._element_address(index)
        return GlobalPtr(k.wrap(address, T.ptr_global, 1), self.dtype, name=self.name, readonly=self.readonly)

    def load(self, index, *, width: int = 1, align: int | None = None) -> Value:
        """Load ``width`` consecutive elements starting at element ``index``."""
        k = self.kernel
        width = _check_width(width)
        address = self._element_address(index)
        ty = self.dtype.vector_ir_type(width)
        loaded = k.builder.load(address, typ=ty, align=align or _natural_align(self.dtype.nbytes * width))
        return k.wrap(loaded, self.dtype, width)

    def store(self, index, value, *, align: int | None = None):
        """Store a scalar or vector of ``dtype`` starting at element ``index``."""
        k = self.kernel
        if self.readonly:
            raise dsl_value_error(f"pointer {self.name!r} was declared readonly")
        v = _stored_value(k, value, self.dtype, f"store to {self.name}")
        address = self._element_address(index)
        k.builder.store(k.ir_of(v), address, align=align or _natural_align(self.dtype.nbytes * v.lanes))

    def atomic(self, op: str, index, value) -> Value:
        """Atomic ``op`` (add, sub, max, min, and, or, xor, exchange) of ``value`` into element
        ``index``, device-wide; returns the old value. Also as ``atomic_add(index, value)`` etc.
        Types and what gfx942 does natively: ``rocke.dsl.atomics``."""
        k = self.kernel
        if self.readonly:
            raise dsl_value_error(f"pointer {self.name!r} was declared readonly")
        return atomic_rmw(k, self._element_address(index), op, value, self.dtype, "agent",
                          f"atomic {op} on {self.name}", coarse_grained=True)

    def atomic_cas(self, index, compare, value) -> Value:
        """Compare-and-swap: where element ``index`` equals ``compare`` (bitwise) store ``value``;
        returns the old value (the swap happened where it equals ``compare``)."""
        if self.readonly:
            raise dsl_value_error(f"pointer {self.name!r} was declared readonly")
        return atomic_cas(self.kernel, self._element_address(index), compare, value, self.dtype,
                          "agent", f"atomic cas on {self.name}")

    def buffer(self, num_elements) -> "BufferResource":
        """A buffer resource over this pointer covering ``num_elements`` elements."""
        k = self.kernel
        if isinstance(num_elements, int):
            num_records = num_elements * self.dtype.nbytes
        else:
            n = _index_value(k, num_elements, "buffer num_elements")
            n64 = n.to(T.i64) if n.dtype.is_signed else n.to(T.u64).bitcast(T.i64)
            num_records = n64 * self.dtype.nbytes
        return buffer_resource(self, num_records)


def buffer_resource(pointer: GlobalPtr, num_records, *, stride: int = 0,
                    flags: int = BUFFER_RSRC_FLAGS) -> "BufferResource":
    """``llvm.amdgcn.make.buffer.rsrc`` over ``pointer`` with an extent of ``num_records`` bytes."""
    k = pointer.kernel
    if isinstance(num_records, int):
        if not 0 <= num_records < 2 ** 32:
            raise dsl_value_error(f"num_records must be in [0, 2**32), got {num_records}")
        records = k.const(num_records, T.i64)
    else:
        records = _index_value(k, num_records, "num_records")
        if records.dtype != T.i64:
            records = records.to(T.i64) if records.dtype.is_signed else records.to(T.u64).bitcast(T.i64)
    ptr = k.ir_of(pointer.value)
    rsrc = k.call("llvm.amdgcn.make.buffer.rsrc.p8.p1", T.buffer_rsrc.ir_type,
                   [ptr, ir.Constant(_I16, stride), k.ir_of(records), ir.Constant(_I32, flags)])
    return BufferResource(k.wrap(rsrc, T.buffer_rsrc, 1), pointer.dtype, name=pointer.name)


class BufferResource:
    """Raw buffer access (out-of-range loads read 0, out-of-range stores are dropped)."""

    def __init__(self, value: Value, dtype: T.DType, *, name: str):
        self.value = value
        self.dtype = dtype
        self.name = name
        self.kernel = value.kernel

    def _voffset(self, index):
        k = self.kernel
        idx = _index_value(k, index, f"buffer {self.name}")
        if idx.dtype.bits != 32:
            raise dsl_type_error(f"buffer offsets are 32-bit; index is {idx.type_name}")
        return k.ir_of(idx * self.dtype.nbytes)

    def _carrier(self, width: int):
        nbytes = self.dtype.nbytes * width
        if nbytes not in _BUFFER_CARRIERS:
            raise dsl_value_error(f"a buffer access moves 1, 2, 4, 8, 12 or 16 bytes; "
                                  f"{width} x {self.dtype.name} is {nbytes}")
        return _BUFFER_CARRIERS[nbytes]

    def _masked(self, index, mask):
        """``index``, or for lanes where ``mask`` is false an element index past the extent."""
        if mask is None:
            return index
        k = self.kernel
        if not isinstance(mask, Value) or mask.dtype != T.i1 or mask.lanes != 1:
            got = mask.type_name if isinstance(mask, Value) else type(mask).__name__
            raise dsl_type_error(f"buffer {self.name} mask must be a scalar i1 value, got {got}")
        idx = _index_value(k, index, f"buffer {self.name}")
        return select(mask, idx, OUT_OF_RANGE_BYTE // self.dtype.nbytes)

    def load(self, index, *, width: int = 1, mask: Value | None = None, soffset: int = 0,
             aux: int = 0) -> Value:
        """Load ``width`` elements at element ``index``; lanes past the extent, or where ``mask``
        (an i1) is false, read 0."""
        k = self.kernel
        carrier, suffix = self._carrier(_check_width(width))
        index = self._masked(index, mask)
        raw = k.call(f"llvm.amdgcn.raw.ptr.buffer.load.{suffix}", carrier,
                      [k.ir_of(self.value), self._voffset(index), ir.Constant(_I32, soffset), ir.Constant(_I32, aux)])
        ty = self.dtype.vector_ir_type(width)
        return k.wrap(raw if raw.type == ty else k.builder.bitcast(raw, ty), self.dtype, width)

    def store(self, index, value, *, mask: Value | None = None, soffset: int = 0, aux: int = 0):
        """Store a scalar/vector of ``dtype`` at element ``index``; bytes past the extent, and
        lanes where ``mask`` (an i1) is false, are dropped."""
        k = self.kernel
        v = _stored_value(k, value, self.dtype, f"buffer store to {self.name}")
        carrier, suffix = self._carrier(v.lanes)
        index = self._masked(index, mask)
        data = k.ir_of(v)
        if data.type != carrier:
            data = k.builder.bitcast(data, carrier)
        k.call(f"llvm.amdgcn.raw.ptr.buffer.store.{suffix}", ir.VoidType(),
                [data, k.ir_of(self.value), self._voffset(index), ir.Constant(_I32, soffset), ir.Constant(_I32, aux)])

    def voffset_ir(self, index):
        """The IR byte offset (i32) of element ``index`` (for intrinsics built on this buffer)."""
        return self._voffset(index)

    def masked(self, index, mask):
        """``index``, or an index past the extent for lanes where ``mask`` (an i1) is false."""
        return self._masked(index, mask)

    def atomic(self, op: str, index, value, *, mask: Value | None = None) -> Value:
        """Atomic ``op`` (add, sub, max, min, and, or, xor, exchange) of ``value`` into element
        ``index``, device-wide; returns the old value. Lanes past the extent, or where ``mask``
        is false, change nothing and return 0. Also as ``atomic_add(index, value)`` etc."""
        return buffer_atomic(self, op, index, value, mask=mask, where=f"buffer atomic {op} on {self.name}")

    def atomic_cas(self, index, compare, value, *, mask: Value | None = None) -> Value:
        """Compare-and-swap at element ``index`` (see ``GlobalPtr.atomic_cas``), range-checked."""
        return buffer_atomic(self, "cas", index, value, mask=mask, compare=compare,
                             where=f"buffer atomic cas on {self.name}")

    def load_to_lds(self, lds_base: Value, index, *, soffset: int = 0, aux: int = 0):
        """Async DMA: each lane copies the dword at element ``index`` to ``lds_base + 4 * lane``."""
        k = self.kernel
        if not isinstance(lds_base, Value) or lds_base.dtype != T.ptr_lds:
            raise dsl_type_error("load_to_lds destination must be an LDS address (LdsTensor.address())")
        k.call("llvm.amdgcn.raw.ptr.buffer.load.lds", ir.VoidType(),
                [k.ir_of(self.value), k.ir_of(lds_base), ir.Constant(_I32, 4), self._voffset(index),
                 ir.Constant(_I32, soffset), ir.Constant(_I32, 0), ir.Constant(_I32, aux)])


class LdsTensor:
    """A region of the LDS arena viewed as a row-major array (row padding in elements), or a
    view of part of one (``view`` / indexing), at a static or runtime offset.

    A view keeps its parent's strides (so row padding is preserved) and has static extents:
    every fragment load/store and tile copy checks at build time that it fits the view."""

    def __init__(self, kernel, name, shape, dtype, pad, byte_offset, *, strides=None,
                 dynamic_offset: Value | None = None, parent: "LdsTensor | None" = None):
        self.kernel = kernel
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.pad = pad
        if strides is None:
            strides = [1]
            for d in range(len(shape) - 1, 0, -1):
                inner = shape[d] + (pad if d == len(shape) - 1 else 0)
                strides.insert(0, strides[0] * inner)
        self.strides = tuple(strides)  # in elements
        self.byte_offset = byte_offset
        self.dynamic_offset = dynamic_offset  # i32 byte offset added at run time (views only)
        self.parent = parent
        self.allocated_at = parent.allocated_at if parent is not None else None  # set by allocate_lds
        self.valid = None   # runtime extents of a view (see view())
        self.size_bytes = shape[0] * self.strides[0] * dtype.nbytes if len(shape) > 1 else \
            (shape[0] + pad) * dtype.nbytes

    def __repr__(self):
        kind = "view of " + self.root.name if self.parent is not None else self.name
        return f"LdsTensor({kind}, shape={self.shape}, {self.dtype.name})"

    @property
    def root(self) -> "LdsTensor":
        """The allocated region this tensor (or view) lies in."""
        return self if self.parent is None else self.parent.root

    @property
    def is_view(self) -> bool:
        return self.parent is not None

    # -- views ----------------------------------------------------------------------------
    def view(self, origin, shape=None, *, valid=None) -> "LdsTensor":
        """The sub-tensor starting at ``origin`` (one int or integer Value per dimension) with
        extents ``shape`` (static ints; default: the rest of each dimension, which needs a
        static origin there). Runtime origins are allowed (e.g. a per-wave slab); the extents
        are checked against this tensor's at build time.

        ``valid``: runtime extents (one int, integer Value or None per dimension, each at most
        the static extent), e.g. the tokens of a ragged last tile. ``copy_tile_to_lds`` writes
        zeros past them and ``store_fragment`` does not write there; loads are unaffected."""
        origin = origin if isinstance(origin, tuple) else (origin,)
        if len(origin) != len(self.shape):
            raise dsl_value_error(f"LDS tensor {self.name!r} has {len(self.shape)} dims, "
                                  f"view origin has {len(origin)}")
        if shape is None:
            shape = tuple(None for _ in self.shape)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if len(shape) != len(self.shape):
            raise dsl_value_error(f"LDS tensor {self.name!r} has {len(self.shape)} dims, "
                                  f"view shape has {len(shape)}")
        extents = []
        for d, (o, n, full) in enumerate(zip(origin, shape, self.shape)):
            if isinstance(o, bool) or not isinstance(o, (int, Value)):
                raise dsl_type_error(f"view origin must be ints or integer Values, got {type(o).__name__}")
            if n is None:
                if not isinstance(o, int):
                    raise dsl_value_error(f"view of {self.name!r}: dim {d} has a runtime origin; "
                                          "give its extent in shape=")
                n = full - o
            if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
                raise dsl_value_error(f"view of {self.name!r}: extents must be positive ints, got {shape!r}")
            low = o if isinstance(o, int) else 0
            if low < 0 or low + n > full:
                raise dsl_value_error(
                    f"view of {self.name!r}: dim {d} [{low}, {low + n}) does not fit its extent {full}")
            extents.append(n)
        view = self._subview(origin, tuple(extents), keep=range(len(self.shape)))
        if valid is not None:
            valid = valid if isinstance(valid, tuple) else (valid,)
            if len(valid) != len(self.shape):
                raise dsl_value_error(f"view of {self.name!r}: valid needs one entry per dim, got {valid!r}")
            for d, (v, n) in enumerate(zip(valid, extents)):
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, Value))
                                      or (isinstance(v, int) and not 0 <= v <= n)):
                    raise dsl_value_error(f"view of {self.name!r}: valid[{d}] must be None, an int in "
                                          f"[0, {n}] or an integer Value, got {v!r}")
            view.valid = tuple(valid)
        return view

    def __getitem__(self, index) -> "LdsTensor":
        """Indexing makes views: ``t[w]`` drops the first dimension (``w`` an int or runtime
        Value), ``t[a:b]`` / ``t[:, c:d]`` take static ranges."""
        index = index if isinstance(index, tuple) else (index,)
        if len(index) > len(self.shape):
            raise dsl_value_error(f"LDS tensor {self.name!r} has {len(self.shape)} dims, got {len(index)} indices")
        index = index + (slice(None),) * (len(self.shape) - len(index))
        origin, extents, keep = [], [], []
        for d, (ix, full) in enumerate(zip(index, self.shape)):
            if isinstance(ix, slice):
                start, stop, step = ix.indices(full) if all(
                    isinstance(x, (int, type(None))) for x in (ix.start, ix.stop, ix.step)) else (None,) * 3
                if start is None or step != 1 or stop <= start:
                    raise dsl_value_error(f"LDS slices take static ints with step 1 and a non-empty "
                                          f"range; got {ix!r} (use .view(origin, shape) for runtime offsets)")
                origin.append(start)
                extents.append(stop - start)
                keep.append(d)
            else:
                if isinstance(ix, int) and not isinstance(ix, bool):
                    if not 0 <= ix < full:
                        raise dsl_value_error(f"index {ix} out of range for dim {d} of {self.name!r} ({full})")
                elif not isinstance(ix, Value):
                    raise dsl_type_error(f"LDS index must be an int, integer Value or slice, "
                                         f"got {type(ix).__name__}")
                origin.append(ix)
                extents.append(1)
        if not keep:
            raise dsl_value_error(f"indexing every dimension of {self.name!r} names one element; "
                                  "use load/store for that")
        return self._subview(tuple(origin), tuple(extents), keep=keep)

    def _subview(self, origin, extents, keep) -> "LdsTensor":
        static, dynamic = self._offsets(origin)
        view = LdsTensor(self.kernel, self.name, tuple(extents[d] for d in keep), self.dtype, 0, static,
                         strides=tuple(self.strides[d] for d in keep), dynamic_offset=dynamic, parent=self)
        if self.valid is not None:       # the parent's runtime extents, relative to the new origin
            view.valid = tuple(None if self.valid[d] is None else
                               (self.valid[d] - origin[d] if not (isinstance(origin[d], int) and origin[d] == 0)
                                else self.valid[d]) for d in keep)
            if all(v is None for v in view.valid):
                view.valid = None
        return view

    def check_fits(self, what: str, origin, extent):
        """Build-time check that a 2-D box of ``extent`` (rows, cols) at ``origin`` lies inside
        this tensor: static origins are checked exactly, runtime ones only by extent."""
        for d, (o, n, full) in enumerate(zip(origin, extent, self.shape)):
            low = o if isinstance(o, int) and not isinstance(o, bool) else 0
            if low < 0 or low + n > full:
                at = f"at {o}" if isinstance(o, int) else "at a runtime offset"
                raise dsl_value_error(
                    f"{what}: {extent[0]} x {extent[1]} does not fit LDS tile {self!r} along dim {d} "
                    f"({n} {at} > extent {full}); it would alias neighbouring LDS")

    def check_fits_1d(self, what: str, origin: int, extent: int):
        if origin < 0 or origin + extent > self.shape[0]:
            raise dsl_value_error(f"{what}: {extent} entries at {origin} do not fit LDS {self!r} "
                                  f"(extent {self.shape[0]}); it would alias neighbouring LDS")

    # -- addressing -----------------------------------------------------------------------
    def _offsets(self, index):
        """(static bytes, dynamic i32 bytes or None) of ``index`` (ints / Values per dim)."""
        k = self.kernel
        static = self.byte_offset
        dynamic = self.dynamic_offset
        for idx, stride in zip(index, self.strides):
            step = stride * self.dtype.nbytes
            if isinstance(idx, int) and not isinstance(idx, bool):
                static += idx * step
                continue
            v = _index_value(k, idx, f"LDS {self.name}")
            if v.dtype.bits != 32:
                v = v.to(T.i32)
            term = v * step if step != 1 else v
            dynamic = term if dynamic is None else dynamic + term
        return static, dynamic

    def _byte_offset(self, index) -> Value:
        k = self.kernel
        index = index if isinstance(index, tuple) else (index,)
        if len(index) != len(self.shape):
            raise dsl_value_error(f"LDS tensor {self.name!r} has {len(self.shape)} dims, got {len(index)} indices")
        static, dynamic = self._offsets(index)
        if dynamic is None:
            return k.const(static, T.i32)
        return dynamic + static if static else dynamic

    def address(self, *index) -> Value:
        """Address (``ptr addrspace(3)``) of the element at ``index``."""
        k = self.kernel
        offset = self._byte_offset(tuple(index))
        ptr = k.builder.gep(k.lds_arena(), [k.ir_of(offset)], inbounds=True, source_etype=_I8)
        return k.wrap(ptr, T.ptr_lds, 1)

    def load(self, index, *, width: int = 1, align: int | None = None) -> Value:
        """Load ``width`` consecutive elements at ``index`` (an int/Value or tuple of them)."""
        k = self.kernel
        width = _check_width(width)
        address = self.address(*(index if isinstance(index, tuple) else (index,)))
        loaded = k.builder.load(k.ir_of(address), typ=self.dtype.vector_ir_type(width),
                           align=align or _natural_align(self.dtype.nbytes * width))
        return k.wrap(loaded, self.dtype, width)

    def store(self, index, value, *, align: int | None = None):
        """Store a scalar/vector of ``dtype`` at ``index``."""
        k = self.kernel
        v = _stored_value(k, value, self.dtype, f"store to LDS {self.name}")
        address = self.address(*(index if isinstance(index, tuple) else (index,)))
        k.builder.store(k.ir_of(v), k.ir_of(address), align=align or _natural_align(self.dtype.nbytes * v.lanes))

    def atomic(self, op: str, index, value) -> Value:
        """Atomic ``op`` (add, sub, max, min, and, or, xor, exchange) of ``value`` into the
        element at ``index``, workgroup-wide (``ds_*`` atomics); returns the old value. Atomics
        of different waves do not race each other (the emulator's race checker knows)."""
        k = self.kernel
        address = self.address(*(index if isinstance(index, tuple) else (index,)))
        return atomic_rmw(k, k.ir_of(address), op, value, self.dtype, "workgroup",
                          f"atomic {op} on LDS {self.name}", coarse_grained=False)

    def atomic_cas(self, index, compare, value) -> Value:
        """Compare-and-swap on the element at ``index`` (``ds_cmpst``); returns the old value."""
        k = self.kernel
        address = self.address(*(index if isinstance(index, tuple) else (index,)))
        return atomic_cas(k, k.ir_of(address), compare, value, self.dtype, "workgroup",
                          f"atomic cas on LDS {self.name}")


atomic_methods(GlobalPtr, "this global array")
atomic_methods(BufferResource, "this buffer")
atomic_methods(LdsTensor, "this LDS tensor")


def allocate_lds(k, name, shape, dtype, *, pad, offset, align, alias) -> LdsTensor:
    if not isinstance(name, str) or not _IDENT.match(name):
        raise dsl_value_error(f"LDS region name must be an identifier, got {name!r}")
    if name in k.lds_regions:
        raise dsl_value_error(f"LDS region {name!r} is already allocated")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not shape or any(not isinstance(s, int) or isinstance(s, bool) or s <= 0 for s in shape):
        raise dsl_value_error(f"LDS region {name!r}: shape must be positive ints, got {shape!r}")
    if not isinstance(pad, int) or pad < 0:
        raise dsl_value_error(f"LDS region {name!r}: pad must be a non-negative int, got {pad!r}")
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise dsl_value_error(f"LDS region {name!r}: align must be a power of two, got {align!r}")
    dt = T.dtype(dtype)
    if dt.kind in ("bool", "ptr"):
        raise dsl_type_error(f"LDS region {name!r} cannot hold {dt.name}")
    if offset is None:
        offset = -(-k.lds_bytes // align) * align
    elif not isinstance(offset, int) or offset < 0 or offset % dt.nbytes:
        raise dsl_value_error(f"LDS region {name!r}: offset must be a non-negative multiple of "
                              f"{dt.nbytes}, got {offset!r}")
    region = LdsTensor(k, name, shape, dt, pad, offset)
    region.allocated_at = user_location()
    if not alias:
        for other in k.lds_regions.values():
            if offset < other.byte_offset + other.size_bytes and other.byte_offset < offset + region.size_bytes:
                raise dsl_value_error(
                    f"LDS region {name!r} [{offset}, {offset + region.size_bytes}) overlaps {other.name!r} "
                    f"[{other.byte_offset}, {other.byte_offset + other.size_bytes}); pass alias=True if intended")
    budget = k.lds_limit
    end = max(k.lds_bytes, offset + region.size_bytes)
    if end > budget:
        regions = list(k.lds_regions.values()) + [region]
        raise dsl_value_error(f"LDS region {name!r} takes the kernel {k.name!r} to {end} bytes of LDS; "
                              f"{k.target} has {budget} per workgroup. Regions:\n" + lds_breakdown(regions))
    k.lds_arena()
    k.add_lds_region(region)
    return region


def lds_breakdown(regions) -> str:
    """One line per LDS region: name, byte range, size, shape and where it was allocated."""
    lines = []
    for r in sorted(regions, key=lambda r: r.byte_offset):
        shape = "x".join(str(d) for d in r.shape) + (f" (+{r.pad} pad)" if r.pad else "")
        lines.append(f"  {r.name:16s} [{r.byte_offset:6d}, {r.byte_offset + r.size_bytes:6d}) "
                     f"{r.size_bytes:6d} B  {shape} {r.dtype.name}  at {r.allocated_at}")
    return "\n".join(lines)
