"""Vectorized register-file accessors used by decoded instruction closures.

All take a pool `P`, a batch selector `sel` (slice or index array over the pool's waves) and the
batch size `n`. Vector values are (n, 64) arrays, scalar values (n,) arrays.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from .operands import Operand, constant_bits, TYPE_BITS

U32, U64 = np.uint32, np.uint64
LANES = np.arange(64)


def vgpr_pair(P, sel, row: int, n: int) -> np.ndarray:
    """uint64 (n, 64) of the VGPR pair row, row + 1: the two words interleaved in place of
    widening, shifting and or-ing them (little-endian: low word first)."""
    if sys.byteorder != "little":
        return P.vgpr[sel, row].astype(U64) | (P.vgpr[sel, row + 1].astype(U64) << U64(32))
    words = np.empty((n, 64, 2), U32)
    words[:, :, 0] = P.vgpr[sel, row]
    words[:, :, 1] = P.vgpr[sel, row + 1]
    return words.view(U64)[:, :, 0]


# The scalar register file is pair-major: uint32 (64 pairs, waves, 2 words). SGPR i of every
# wave is the 1-D view `sgpr_column(sgpr, i)` (8-byte stride) and an even pair's 64-bit value the
# contiguous 1-D view `sgpr64[i >> 1]` (little-endian: low word first). A batch reads or writes
# one register or pair through that view; in a (waves, registers) file the same access touched
# a cache line per wave (at 65,536 waves: a pair in 12 us against 190 us).
SGPR_PAIRS = 64   # 128 SGPRs: s0..s105, VCC at 106, M0 at 124, EXEC at 126 (operands.py)


def sgpr_file_shape(waves: int) -> tuple:
    return (SGPR_PAIRS, waves, 2)


def pair_view(sgpr: np.ndarray):
    """uint64 (64, waves) view of the even-aligned pairs of register file `sgpr` (None where
    the byte order does not put the low word first)."""
    return sgpr.view(U64)[:, :, 0] if sys.byteorder == "little" else None


def sgpr_column(sgpr: np.ndarray, index: int) -> np.ndarray:
    """uint32 (waves,) view of SGPR `index` of every wave."""
    return sgpr[index >> 1, :, index & 1]


def pair_value(sgpr, sgpr64, sel, index: int) -> np.ndarray:
    """uint64 (n,) of the SGPR pair at `index` of register file `sgpr` (`sgpr64`: its pair view
    or None): a view of the file for an even pair (SGPR pairs are even-aligned)."""
    if index % 2 == 0 and sgpr64 is not None:
        return sgpr64[index >> 1][sel]
    return (sgpr_column(sgpr, index)[sel].astype(U64)
            | (sgpr_column(sgpr, index + 1)[sel].astype(U64) << U64(32)))


def put_pair_value(sgpr, sgpr64, sel, index: int, value: np.ndarray):
    """The SGPR pair at `index` of the batch := uint64 (n,) `value`."""
    if index % 2 == 0 and sgpr64 is not None:
        sgpr64[index >> 1][sel] = value
        return
    sgpr_column(sgpr, index)[sel] = (value & U64(0xFFFFFFFF)).astype(U32)
    sgpr_column(sgpr, index + 1)[sel] = (value >> U64(32)).astype(U32)


def sgpr_pair(P, sel, index: int) -> np.ndarray:
    """uint64 (n,) of the SGPR pair at `index` of pool `P`'s batch (see pair_value)."""
    return pair_value(P.sgpr, P.sgpr64, sel, index)


def set_sgpr_pair(P, sel, index: int, value: np.ndarray):
    """Write uint64 (n,) `value` to the SGPR pair at `index`."""
    put_pair_value(P.sgpr, P.sgpr64, sel, index, value)


def pair_words(sgpr, sgpr64, sel, index: int) -> np.ndarray:
    """uint32 (n, 2) (low, high word) of the SGPR pair at `index` of register file `sgpr`
    (`sgpr64`: its pair view or None): a view for a slice batch of an even pair, else a copy."""
    if index % 2 == 0 and sgpr64 is not None:
        pair = sgpr64[index >> 1][sel]
        return np.ascontiguousarray(pair).view(U32).reshape(-1, 2)
    return np.stack((sgpr_column(sgpr, index)[sel], sgpr_column(sgpr, index + 1)[sel]), axis=1)


def put_pair_words(sgpr, sgpr64, sel, index: int, words: np.ndarray):
    """The SGPR pair at `index` of the batch := uint32 (n, 2) (low, high) `words`."""
    if index % 2 == 0 and sgpr64 is not None:
        put_pair_value(sgpr, sgpr64, sel, index, np.ascontiguousarray(words, U32).view(U64)[:, 0])
        return
    sgpr_column(sgpr, index)[sel] = words[:, 0]
    sgpr_column(sgpr, index + 1)[sel] = words[:, 1]


def put_sgpr_words(sgpr, sel, first: int, words: np.ndarray):
    """SGPRs first .. first + k - 1 of the batch := uint32 (n, k) `words` (a k-dword load)."""
    for k in range(words.shape[1]):
        sgpr_column(sgpr, first + k)[sel] = words[:, k]


def sgpr_pair_to_mask(P, sel, index: int) -> np.ndarray:
    """Bool (n, 64) from the 64-bit SGPR pair at `index` (lane i = bit i)."""
    pair = np.ascontiguousarray(pair_words(P.sgpr, P.sgpr64, sel, index))
    return np.unpackbits(pair.view(np.uint8), axis=1, bitorder="little").view(bool)


def mask_to_words(mask: np.ndarray) -> np.ndarray:
    """(n, 64) bool -> (n, 2) uint32 (lo, hi)."""
    return np.packbits(mask, axis=1, bitorder="little").view(U32)


def write_mask(P, sel, index: int, mask: np.ndarray):
    put_pair_words(P.sgpr, P.sgpr64, sel, index, mask_to_words(mask))


def scalar_raw_reader(op: Operand, typ: str):
    """Reader of a SALU/SMEM source: uint32 (n,) or uint64 (n,) for 64-bit types."""
    wide = TYPE_BITS.get(typ, 32) == 64
    if op.kind == "s":
        i = op.index
        if wide:
            if op.count < 2:
                raise ValueError(f"operand {op.text!r} must be a 64-bit register pair")
            return lambda P, sel, n: sgpr_pair(P, sel, i)
        return lambda P, sel, n: sgpr_column(P.sgpr, i)[sel]
    if op.kind in ("const", "float"):
        c = constant_bits(op, typ)
        dtype = U64 if wide else U32
        return lambda P, sel, n: np.full(n, c, dtype)
    if op.kind == "scc":
        return lambda P, sel, n: P.scc[sel].astype(U64 if wide else U32)
    raise ValueError(f"operand {op.text!r} cannot be a scalar source")


def scalar_writer(op: Operand, typ: str):
    if op.kind != "s":
        raise ValueError(f"operand {op.text!r} cannot be a scalar destination")
    i = op.index
    if TYPE_BITS.get(typ, 32) == 64:
        if op.count < 2:
            raise ValueError(f"operand {op.text!r} must be a 64-bit register pair")

        def write64(P, sel, value):
            set_sgpr_pair(P, sel, i, value.astype(U64, copy=False))
        return write64

    def write32(P, sel, value):
        sgpr_column(P.sgpr, i)[sel] = value.astype(U32, copy=False)
    return write32


def vector_raw_reader(op: Operand, typ: str):
    """Reader of a VALU source: uint32 (n, 64) or uint64 (n, 64) for 64-bit types."""
    wide = TYPE_BITS.get(typ, 32) == 64
    if op.kind == "v":
        r = op.index
        if wide:
            if op.count < 2:
                raise ValueError(f"operand {op.text!r} must be a 64-bit register pair")
            return lambda P, sel, n: vgpr_pair(P, sel, r, n)
        return lambda P, sel, n: P.vgpr[sel, r]
    if op.kind == "s":
        i = op.index
        if wide:
            if op.count < 2:
                raise ValueError(f"operand {op.text!r} must be a 64-bit register pair")
            return lambda P, sel, n: np.broadcast_to(sgpr_pair(P, sel, i)[:, None], (n, 64))
        return lambda P, sel, n: np.broadcast_to(sgpr_column(P.sgpr, i)[sel][:, None], (n, 64))
    if op.kind in ("const", "float"):
        c = constant_bits(op, typ)
        dtype = U64 if wide else U32
        return lambda P, sel, n: np.full((n, 64), c, dtype)
    raise ValueError(f"operand {op.text!r} cannot be a vector source")


def scratch(workspace: dict | None, key: str, shape: tuple, dtype) -> np.ndarray:
    """An uninitialized array; from `workspace` (grown as needed) when given. Reusing memory
    across calls avoids faulting in fresh pages for every large temporary."""
    size = math.prod(shape)   # np.prod of a short tuple costs microseconds per call
    if workspace is None:
        return np.empty(shape, dtype)
    buffer = workspace.get(key)
    if buffer is None or buffer.size < size or buffer.dtype != dtype:
        buffer = workspace[key] = np.empty(size, dtype)
    return buffer[:size].reshape(shape)
