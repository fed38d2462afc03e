"""gfx942 dense f16 / bf16 / fp8 MFMA instructions.

Operand layouts follow AMD's CDNA3 ISA guide and the AMD Matrix Instruction Calculator
(CDNA3). For an op computing D[b] = A[b] (M x K) * B[b] (K x N) + C[b] for blocks b:

* A: lane ``l`` holds row ``i = l % M`` of lane group ``g = l // M``. Its register ``r``,
  element ``e`` (16-bit halves low first, or bytes low first for fp8) is position
  ``p = r * per_reg + e``. Multi-block ops give each lane group its own block
  (``b = g, k = p``). Single-block ops split K over the lane groups
  (``k = g * K_per_lane + p``).
* B: the same with column ``j = l % N`` in place of the row.
* C/D (f32, one value per register per lane): for N >= 16, with ``G = 64 // N``
  lane groups and ``q = r % (M // G)``, ``b = r // (M // G)``,
  ``i = 4 * G * (q // 4) + 4 * (l // N) + q % 4``, ``j = l % N``. For the 4x4x4 16-block
  ops, ``b = l // 4``, ``i = r``, ``j = l % 4``.

Multi-block ops also take CBSZ/ABID (A-block broadcast: block b reads A block
``(b >> cbsz << cbsz) + abid``) and BLGP (B lane swizzle). Single-block ops accept
only zeros there.

Numerics: every input is decoded exactly, and every f16/bf16/fp8 product is exact. The
K-sum of products is formed in float64 (exact for realistic ranges), C is added, and
the result is rounded once to float32. Hardware rounds its accumulation once per
instruction, but its internal accumulator width is not documented, so results can differ
from silicon in the last fp32 bit when cancellation is extreme.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from . import numerics
from .access import scratch

_FORMAT_BITS = {"f16": 16, "bf16": 16, "e4m3fnuz": 8, "e5m2fnuz": 8,
                "e4m3fn": 8, "e5m2": 8,   # gfx950's OCP fp8 (rocke.emu.gfx950)
                "e2m1": 4,                # gfx950's OCP fp4, two per byte, low nibble first
                "e2m3": 6, "e3m2": 6,     # gfx950's OCP fp6, 32 a lane packed in 6 registers
                "e2m3_b": 8, "e3m2_b": 8}  # the same codes spread one a byte (execute's twin)
# 6-bit formats -> their one-code-a-byte twins, and the value of each code
_SIX_BIT = {"e2m3": "e2m3_b", "e3m2": "e3m2_b"}
_SIX_BIT_VALUES = {"e2m3_b": numerics.E2M3_VALUES, "e3m2_b": numerics.E3M2_VALUES}


def _k_run(fmt: str):
    """How a lane's stored elements run along K: 4- and 6-bit f8f6f4 operands densely (one
    32-K run a lane group), 8-bit ones in two 16-K runs (see MfmaOp._hardware_k)."""
    return "dense" if _FORMAT_BITS[fmt] == 4 or fmt in _SIX_BIT_VALUES else _FORMAT_BITS[fmt]


def _six_bit_bytes(words: np.ndarray) -> np.ndarray:
    """uint32[n, 6, 64] of 6-bit codes (item i at bits 6i+5:6i of the six registers, CDNA4
    guide §7.1.4) -> uint32[n, 8, 64] with item i in byte i % 4 of register i // 4."""
    wide = words.astype(np.uint64)
    out = np.zeros((words.shape[0], 8, 64), np.uint32)
    for i in range(32):
        word, offset = divmod(6 * i, 32)
        code = wide[:, word] >> np.uint64(offset)
        if offset > 26:
            code |= wide[:, word + 1] << np.uint64(32 - offset)
        out[:, i // 4] |= ((code & np.uint64(0x3F)).astype(np.uint32) << np.uint32(8 * (i % 4)))
    return out


def _decode_into(words: np.ndarray, fmt: str, out: np.ndarray) -> np.ndarray:
    """uint32[..., w] -> float64[..., w * per_reg] into `out`: the elements of each word, low
    half / low byte first (little-endian views). `words` needs a contiguous last axis."""
    if fmt == "f16":
        np.copyto(out, words.view(np.float16))
    elif fmt == "bf16":   # bf16 bits are the high half of the float32 with the same value
        np.copyto(out, np.left_shift(words.view(np.uint16), 16, dtype=np.uint32).view(np.float32))
    elif fmt == "e2m1":
        np.take(numerics.E2M1_VALUES, _nibbles(words), out=out)
    else:
        np.take(_fp8_table(fmt), words.view(np.uint8), out=out)
    return out


def _nibbles(words: np.ndarray) -> np.ndarray:
    """uint32[..., w] -> uint8[..., w * 8]: each word's 4-bit codes, low nibble first."""
    octets = words.view(np.uint8)
    return np.stack((octets & 0xF, octets >> 4), axis=-1).reshape(*octets.shape[:-1], -1)


def _lane_rows(words: np.ndarray) -> np.ndarray:
    """[n, regs, 64] register words as [n, regs * 64] (a view when each wave's registers are
    evenly spaced, as in a register file slice)."""
    return words.reshape(words.shape[0], -1)


@functools.lru_cache(maxsize=None)
def _fp8_table(fmt: str) -> np.ndarray:
    """float64 value of each of the 256 codes of an fp8 format."""
    if fmt in numerics.OCP_FP8_FORMATS:
        return numerics.ocp_fp8_bits_to_f32(np.arange(256), fmt).astype(np.float64)
    if fmt in _SIX_BIT_VALUES:   # bytes above 63 never occur (_six_bit_bytes)
        return np.resize(_SIX_BIT_VALUES[fmt], 256)
    return numerics.fp8_bits_to_f32(np.arange(256), fmt).astype(np.float64)


def _blgp_source_lane(blgp: int) -> np.ndarray:
    """Lane whose B value each lane uses under BLGP (CDNA3 ISA, B-matrix lane group pattern)."""
    lane = np.arange(64)
    if blgp == 0:
        return lane
    if blgp == 1:  # lanes 0-31 broadcast to 32-63
        return lane % 32
    if blgp == 2:  # lanes 32-63 broadcast to 0-31
        return lane % 32 + 32
    if blgp == 3:  # rotate down by 16 lanes
        return (lane + 16) % 64
    return 16 * (blgp - 4) + lane % 16  # 4..7: broadcast one 16-lane group to all


@dataclass(frozen=True)
class MfmaOp:
    """One dense MFMA: D[b] (M x N) = A[b] (M x K) * B[b] (K x N) + C[b] for each block b.

    ``a_regs``/``b_regs``/``c_regs`` are 32-bit registers per lane of each operand.
    """

    name: str
    m: int
    n: int
    k: int
    blocks: int
    a_format: str
    b_format: str
    a_regs: int = field(init=False)
    b_regs: int = field(init=False)
    c_regs: int = field(init=False)

    def __post_init__(self):
        for fmt in (self.a_format, self.b_format):
            if fmt not in _FORMAT_BITS:
                raise ValueError(f"{self.name}: unknown operand format {fmt!r}")
        k_per_lane = self.blocks * self.m * self.k // 64
        object.__setattr__(self, "a_regs", k_per_lane * _FORMAT_BITS[self.a_format] // 32)
        object.__setattr__(self, "b_regs", k_per_lane * _FORMAT_BITS[self.b_format] // 32)
        object.__setattr__(self, "c_regs", self.blocks * self.m * self.n // 64)

    # -- layouts: each is a reshape + transpose of the register file -----------------------

    def _a_matrix(self, a: np.ndarray, workspace) -> np.ndarray:
        """uint32[n, regs, 64] of A -> float64[n, blocks, M, K], rows in `_row_split` order. The
        32-bit words are put in order first (fewer bytes than moving decoded values), by one
        gather with a fixed index (`_a_word_order`: far faster than a 6-axis transposed copy),
        then decoded in place."""
        n, regs = a.shape[0], a.shape[1]
        words = scratch(workspace, "a", (n, regs * 64), np.uint32)
        np.take(_lane_rows(a), self._a_word_order(), axis=1, out=words, mode="clip")
        matrix = scratch(workspace, "A", (n, self.blocks, self.m, self.k), np.float64)
        _decode_into(words, self.a_format, matrix.reshape(n, -1))
        return matrix

    @functools.lru_cache(maxsize=None)
    def _a_word_order(self) -> np.ndarray:
        """For each word of A in matrix order, its index in the wave's (register, lane) words."""
        regs, row_split = self.a_regs, self._row_split()
        # lane = group * M + row, row split as (quad, group of C, r4) (or kept whole)
        split = np.arange(regs * 64).reshape((regs, 64 // self.m) + row_split)
        rows = tuple(range(2, 2 + len(row_split)))
        if len(row_split) == 3:   # rows in C/D register order: (quad, r4, group of C)
            rows = (rows[0], rows[2], rows[1])
        # blocks > 1: block = group, k = (register, element); one block: k = (group, register,
        # element)
        order = (1,) + rows + (0,) if self.blocks > 1 else rows + (1, 0)
        return np.ascontiguousarray(split.transpose(order)).reshape(-1)

    def _row_split(self) -> tuple:
        """How A's rows (and so D's) are split so that, reordered, they follow the C/D
        registers: for N >= 16 row = 4 * groups * quad + 4 * group + r4 is split as
        (quad, group, r4) and stored as (quad, r4, group), which makes a [blocks, M, N] product
        the C-order walk of the C/D registers [c_regs, 64] (register = block * M/G + 4 * quad
        + r4, lane = group * N + column); 4x4 ops keep the row whole."""
        if self.n == 4:
            return (self.m,)
        groups = 64 // self.n
        return (self.m // groups // 4, groups, 4)

    def _b_matrix(self, b: np.ndarray, blgp: int, workspace) -> np.ndarray:
        """uint32[n, regs, 64] of B -> float64[n, blocks, K, N]. As for A, the 8/16-bit
        elements are put in order first (a quarter of the bytes of moving decoded float64
        values), by one gather with a fixed index (`_b_element_order`, BLGP's lane pattern
        included), then decoded in place."""
        n = b.shape[0]
        per_reg = 32 // _FORMAT_BITS[self.b_format]
        if b.strides[-1] != b.itemsize:
            b = np.ascontiguousarray(b)
        if per_reg == 8:   # 4-bit codes: one byte each, then gathered and looked up
            codes = _nibbles(_lane_rows(b))
            ordered = np.take(codes, self._b_element_order(blgp), axis=1)
            matrix = scratch(workspace, "B", (n, self.blocks, self.k, self.n), np.float64)
            np.take(numerics.E2M1_VALUES, ordered, out=matrix.reshape(n, -1))
            return matrix
        elements = _lane_rows(b).view(np.uint16 if per_reg == 2 else np.uint8)
        ordered = scratch(workspace, "b", (n, self.b_regs * 64 * per_reg), elements.dtype)
        np.take(elements, self._b_element_order(blgp), axis=1, out=ordered, mode="clip")
        matrix = scratch(workspace, "B", (n, self.blocks, self.k, self.n), np.float64)
        _decode_into(ordered.view(np.uint32), self.b_format, matrix.reshape(n, -1))
        return matrix

    @functools.lru_cache(maxsize=None)
    def _b_element_order(self, blgp: int) -> np.ndarray:
        """For each 8/16-bit element of B in matrix order, its index in the wave's (register,
        lane, element) elements."""
        per_reg = 32 // _FORMAT_BITS[self.b_format]
        source = np.arange(self.b_regs * 64 * per_reg).reshape(self.b_regs, 64, per_reg)
        if blgp:
            source = source[:, _blgp_source_lane(blgp)]
        groups = 64 // self.n
        # lane = group * N + column; blocks > 1: block = group, k = (register, element); one
        # block: k = (group, register, element). Both are the order (group, register,
        # element, column).
        split = source.reshape(self.b_regs, groups, self.n, per_reg)
        return np.ascontiguousarray(split.transpose(1, 0, 3, 2)).reshape(-1)

    def _register_order(self, matrix: np.ndarray, n: int) -> tuple[np.ndarray, tuple]:
        """A view of [n, blocks, M, N] `matrix` (rows in `_row_split` order) whose C-order walk
        is the C/D registers [n, c_regs, 64], and the shape that splits those registers the
        same way."""
        if self.n == 4:   # register = row, lane = block * 4 + column
            return matrix.transpose(0, 2, 1, 3), (n, self.m, self.blocks, self.n)
        return matrix.reshape(n, self.c_regs, 64), (n, self.c_regs, 64)

    def layout_maps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gather maps of this op's layouts for array backends that do not reuse the numpy
        code above (rocke/emu/torch_exec.py), found by running that code on registers whose
        16-bit elements hold their own index (register, lane, half order): A (blocks, M, K)
        and B (blocks, K, N) element indices, and for each C/D (register, lane) its index into
        the flattened [blocks, M, N] product."""
        if _FORMAT_BITS[self.a_format] != 16 or _FORMAT_BITS[self.b_format] != 16:
            raise ValueError(f"{self.name}: layout maps cover 16-bit operand formats only")

        def probe(regs, fmt):
            count = regs * 64 * 2
            if count > 256:   # bf16 holds the integers up to 256 exactly
                raise ValueError(f"{self.name}: operand too wide for an exact index probe")
            encode = numerics.f32_to_f16_bits if fmt == "f16" else numerics.f32_to_bf16_bits
            elements = encode(np.arange(count, dtype=np.float32)).astype(np.uint32)
            return (elements[0::2] | (elements[1::2] << 16)).reshape(1, regs, 64)

        a_map = self._a_matrix(probe(self.a_regs, self.a_format), None)[0].astype(np.int64)
        b_map = self._b_matrix(probe(self.b_regs, self.b_format), 0, None)[0].astype(np.int64)
        products = np.arange(self.blocks * self.m * self.n, dtype=np.float64)
        ordered, _ = self._register_order(products.reshape(1, self.blocks, self.m, self.n), 1)
        return a_map, b_map, np.ascontiguousarray(ordered).reshape(-1).astype(np.int64)

    # -- execution -------------------------------------------------------------------------

    def _check(self, a, b, c, cbsz, abid, blgp):
        for label, array, regs, dtype in (("a", a, self.a_regs, np.uint32), ("b", b, self.b_regs, np.uint32),
                                           ("c", c, self.c_regs, np.float32)):
            if not isinstance(array, np.ndarray) or array.dtype != dtype:
                raise TypeError(f"{self.name}: operand {label} must be a numpy {np.dtype(dtype)} array")
            if array.ndim != 3 or array.shape[1:] != (regs, 64):
                raise ValueError(f"{self.name}: operand {label} must have shape (n, {regs}, 64), "
                                 f"got {array.shape}")
        if not (a.shape[0] == b.shape[0] == c.shape[0]):
            raise ValueError(f"{self.name}: operands disagree on the batch size: "
                             f"{a.shape[0]}, {b.shape[0]}, {c.shape[0]}")
        if self.blocks == 1:
            if cbsz or abid or blgp:
                raise NotImplementedError(f"{self.name}: cbsz/abid/blgp must be 0 for a single-block MFMA "
                                          f"(got cbsz={cbsz}, abid={abid}, blgp={blgp})")
            return
        max_cbsz = min(4, self.blocks.bit_length() - 1)
        if not 0 <= cbsz <= max_cbsz:
            raise NotImplementedError(f"{self.name}: cbsz={cbsz} outside 0..{max_cbsz}")
        if not 0 <= abid < (1 << cbsz):
            raise NotImplementedError(f"{self.name}: abid={abid} outside 0..{(1 << cbsz) - 1} for cbsz={cbsz}")
        if not 0 <= blgp <= 7:
            raise NotImplementedError(f"{self.name}: blgp={blgp} outside 0..7")

    def execute(self, a, b, c, cbsz: int = 0, abid: int = 0, blgp: int = 0, out=None,
                workspace: dict | None = None, a_block_scale=None,
                b_block_scale=None) -> np.ndarray:
        """D = A * B + C per block, over a batch of waves; returns float32[n, c_regs, 64].

        `a`, `b`, `c` may be strided views (e.g. slices of a register file) as long as their
        lane axis is contiguous. `out` (float32[n, c_regs, 64], may be `c` itself) receives D;
        `workspace`, a dict the caller keeps, lets repeated calls reuse their scratch memory.
        `a_block_scale` (float64[n, M, K/32]) / `b_block_scale` (float64[n, N, K/32]): each
        run of 32 K values of a row of A / column of B is multiplied by its factor (gfx950's
        block-scaled MFMAs; 8- and 4-bit single-block operands only).
        """
        if self.a_format in _SIX_BIT or self.b_format in _SIX_BIT:
            twin = _byte_twin(self)
            if self.a_format in _SIX_BIT:
                a = _six_bit_bytes(a)
            if self.b_format in _SIX_BIT:
                b = _six_bit_bytes(b)
            return twin.execute(a, b, c, cbsz, abid, blgp, out, workspace, a_block_scale,
                                b_block_scale)
        self._check(a, b, c, cbsz, abid, blgp)
        n = a.shape[0]
        b_matrix = self._b_matrix(b, blgp, workspace)
        # contiguous operands: numpy's matmul then sums in one fixed order (NaN payloads too)
        a_matrix = self._a_matrix(a, workspace)
        if _k_run(self.a_format) != _k_run(self.b_format):
            # the operands' lane layouts place K differently: both to the hardware's K order
            a_matrix = np.take(a_matrix, self._hardware_k_order(self.a_format), axis=3)
            b_matrix = np.take(b_matrix, self._hardware_k_order(self.b_format), axis=2)
        if a_block_scale is not None or b_block_scale is not None:
            a_matrix, b_matrix = self._block_scaled(a_matrix, b_matrix, a_block_scale,
                                                    b_block_scale)
        if cbsz:
            source_block = (np.arange(self.blocks) >> cbsz << cbsz) + abid
            a_matrix = np.ascontiguousarray(a_matrix[:, source_block])
        products = scratch(workspace, "P", (n, self.blocks, self.m, self.n), np.float64)
        d = np.empty((n, self.c_regs, 64), np.float32) if out is None else out
        with np.errstate(all="ignore"):
            np.matmul(a_matrix, b_matrix, out=products)
            ordered, split = self._register_order(products, n)
            # the sum is formed in float64 and rounded once into the float32 output (C widened
            # first: unbuffered passes beat one mixed-type add)
            wide_c = scratch(workspace, "C", c.shape, np.float64)
            np.copyto(wide_c, c)
            np.add(ordered, wide_c.reshape(split), out=ordered)
            np.copyto(d.reshape(split), ordered, casting="same_kind")
        return d


    def _hardware_k(self, fmt: str) -> np.ndarray:
        """The hardware's K of each stored K position of an f8f6f4 operand. Stored, a lane's
        elements are K = (group, register, element) in order. The CDNA4 guide (§7.1.5.1)
        places 8-bit elements at K = 16 * G * (register // 4) + 16 * group + 4 * (register
        % 4) + element (G = 64 / M groups of lanes: each lane holds two 16-byte runs of K).
        4-bit elements (16 bytes a lane, one run) are taken at K = 32 * group + 8 * register +
        element, the stored order: not read from the guide but pinned by Triton's gfx950
        dot_scaled fixtures (per-block scales, and fp8 x fp4 products, fail under the fp8-like
        split). Unscaled with both operands alike, the order is immaterial (A and B share it);
        block scales and mixed widths need the hardware's."""
        k = np.arange(self.k)
        if self.blocks != 1 or _FORMAT_BITS[fmt] not in (4, 8) or self.m * self.k // 64 != 32:
            raise NotImplementedError(f"{self.name}: the hardware K order is modelled for the "
                                      "single-block f8f6f4 operands only")
        if _k_run(fmt) == "dense":   # fp6: the guide's FP6 tables give this order (§7.1.5.1)
            return k
        groups = 64 // self.m
        group, register, element = k // 32, (k % 32) // 4, k % 4
        return 16 * groups * (register // 4) + 16 * group + 4 * (register % 4) + element

    def _hardware_k_order(self, fmt: str) -> np.ndarray:
        """For each hardware K, its stored position (the inverse of `_hardware_k`)."""
        return np.argsort(self._hardware_k(fmt))

    def _block_scaled(self, a_matrix, b_matrix, a_scale, b_scale):
        """A and B with each 32-K block of a row (column) times its factor; the blocks count
        in the hardware's K order (`_hardware_k`), which mixed-width operands are already in."""
        if _k_run(self.a_format) != _k_run(self.b_format):
            a_block = b_block = np.arange(self.k) // 32
        else:
            a_block = self._hardware_k(self.a_format) // 32
            b_block = self._hardware_k(self.b_format) // 32
        split = self._row_split()
        rows = np.arange(self.m).reshape(split)
        if len(split) == 3:
            rows = rows.transpose(0, 2, 1)
        rows = rows.reshape(-1)                       # the logical row of each stored row
        if a_scale is not None:
            a_matrix = a_matrix * a_scale[:, rows[:, None], a_block[None, :]][:, None]
        if b_scale is not None:
            b_matrix = b_matrix * b_scale[:, np.arange(self.n)[None, :], b_block[:, None]][:, None]
        return a_matrix, b_matrix


@functools.lru_cache(maxsize=None)
def _byte_twin(op: MfmaOp) -> MfmaOp:
    """`op` with its 6-bit operands read one code a byte (8 registers a lane)."""
    return MfmaOp(op.name, op.m, op.n, op.k, op.blocks, _SIX_BIT.get(op.a_format, op.a_format),
                  _SIX_BIT.get(op.b_format, op.b_format))


def _catalog() -> dict[str, MfmaOp]:
    ops = []
    for in_type, fmt in (("f16", "f16"), ("bf16", "bf16")):
        ops += [
            MfmaOp(f"v_mfma_f32_32x32x8_{in_type}", 32, 32, 8, 1, fmt, fmt),
            MfmaOp(f"v_mfma_f32_16x16x16_{in_type}", 16, 16, 16, 1, fmt, fmt),
            MfmaOp(f"v_mfma_f32_32x32x4_2b_{in_type}", 32, 32, 4, 2, fmt, fmt),
            MfmaOp(f"v_mfma_f32_16x16x4_4b_{in_type}", 16, 16, 4, 4, fmt, fmt),
            MfmaOp(f"v_mfma_f32_4x4x4_16b_{in_type}", 4, 4, 4, 16, fmt, fmt),
        ]
    fp8_formats = {"fp8": "e4m3fnuz", "bf8": "e5m2fnuz"}
    for a_name, a_fmt in fp8_formats.items():
        for b_name, b_fmt in fp8_formats.items():
            ops += [
                MfmaOp(f"v_mfma_f32_16x16x32_{a_name}_{b_name}", 16, 16, 32, 1, a_fmt, b_fmt),
                MfmaOp(f"v_mfma_f32_32x32x16_{a_name}_{b_name}", 32, 32, 16, 1, a_fmt, b_fmt),
            ]
    return {op.name: op for op in ops}


MFMA_OPS: dict[str, MfmaOp] = _catalog()


# ---------------------------------------------------------------------------------------
# f32, i8 and f64 families: explicit element maps (CDNA3 ISA operand layouts)
# ---------------------------------------------------------------------------------------

_ELEMENT_BITS = {"f32": 32, "xf32": 32, "i8": 8, "f64": 64}
# xf32 keeps f32's sign and exponent and the top 10 of its 23 mantissa bits
_XF32_DROPPED_BITS = np.uint32((1 << 13) - 1)


@dataclass(frozen=True)
class IndexedMfmaOp:
    """D[b] = A[b] (M x K) * B[b] (K x N) + C[b] for an op whose operand registers are located by
    explicit (register, lane, element) maps built from the ISA's layout rules.

    * A/B (f32, i8): as for the f16 family: lane l holds row/column l % M of lane group
      g = l // M; position p = register * per_reg + element; multi-block ops take b = g, k = p,
      single-block ops k = g * K_per_lane + p.
    * f64 A/B (one double per lane in a register pair): lane = 16 k + M b + row (A) or
      16 k + N b + column (B).
    * C/D f32/i32: the f32 MFMA layout (see the module docstring). C/D f64: 16x16 - pair i // 4,
      lane 16 (i % 4) + j; 4x4 4-block - lane 16 i + 4 b + j.

    `execute` works on raw register words: a, b uint32[n, regs, 64], c uint32[n, c_regs, 64]
    (or a float constant), and returns uint32[n, c_regs, 64].
    Numerics: i8 sums are exact and wrap to int32; f32 products are exact in float64 and the
    K-sum plus C is rounded once; f64 results are A.B + C rounded once (error-free products
    summed by math.fsum), which is at least as accurate as the hardware's fused chain.
    xf32 (gfx942's v_mfma_f32_{16x16x8,32x32x4}_xf32, f32 registers read as xf32: 1 sign, 8
    exponent, 10 mantissa bits) runs as f32 on inputs xf32 holds exactly; how the hardware
    narrows an f32 with more mantissa bits is not pinned down here, so such an input stops the
    run naming it rather than guessing.
    """

    name: str
    m: int
    n: int
    k: int
    blocks: int
    in_format: str     # f32 | xf32 | i8 | f64
    out_format: str    # f32 | i32 | f64

    @property
    def a_regs(self) -> int:
        return self.blocks * self.m * self.k // 64 * _ELEMENT_BITS[self.in_format] // 32

    @property
    def b_regs(self) -> int:
        return self.blocks * self.n * self.k // 64 * _ELEMENT_BITS[self.in_format] // 32

    @property
    def c_regs(self) -> int:
        return self.blocks * self.m * self.n // 64 * (2 if self.out_format == "f64" else 1)

    raw_registers = True

    @functools.cached_property
    def _maps(self):
        """(a_map [blocks, M, K], b_map [blocks, K, N], d_map [blocks, M, N]) of flat indices into
        the element view of the operand: element index = (register * 64 + lane) * per_reg + e
        for 32-bit-or-narrower formats, pair * 64 + lane for f64."""
        B, M, N, K = self.blocks, self.m, self.n, self.k
        a_map = np.zeros((B, M, K), np.int64)
        b_map = np.zeros((B, K, N), np.int64)
        d_map = np.zeros((B, M, N), np.int64)
        if self.in_format == "f64":
            for b in range(B):
                for k in range(K):
                    for i in range(M):
                        a_map[b, i, k] = 16 * k + M * b + i
                    for j in range(N):
                        b_map[b, k, j] = 16 * k + N * b + j
        else:
            per_reg = 32 // _ELEMENT_BITS[self.in_format]
            k_per_lane = B * M * K // 64
            for operand, size, target in ((0, M, a_map), (1, N, b_map)):
                for lane in range(64):
                    group, row = lane // size, lane % size
                    for p in range(k_per_lane):
                        b, k = (group, p) if B > 1 else (0, group * k_per_lane + p)
                        reg, e = p // per_reg, p % per_reg
                        flat = (reg * 64 + lane) * per_reg + e
                        if operand == 0:
                            target[b, row, k] = flat
                        else:
                            target[b, k, row] = flat
        if self.out_format == "f64":
            for b in range(B):
                for i in range(M):
                    for j in range(N):
                        d_map[b, i, j] = ((i // 4) * 64 + 16 * (i % 4) + j if B == 1
                                          else 16 * i + 4 * b + j)
        elif N == 4:
            for lane in range(64):
                for r in range(M):
                    d_map[lane // 4, r, lane % 4] = r * 64 + lane
        else:
            groups = 64 // N
            per_block = M // groups
            for r in range(self.c_regs):
                for lane in range(64):
                    q, b = r % per_block, r // per_block
                    i = 4 * groups * (q // 4) + 4 * (lane // N) + q % 4
                    d_map[b, i, lane % N] = r * 64 + lane
        return a_map, b_map, d_map

    def _elements(self, words: np.ndarray) -> np.ndarray:
        """uint32[n, regs, 64] -> elements [n, count] in map order, as float64 / int64."""
        n = words.shape[0]
        words = np.ascontiguousarray(words, np.uint32)
        if self.in_format == "f64":
            return _pairs_to_f64(words).reshape(n, -1)
        if self.in_format == "i8":
            return words.view(np.int8).reshape(n, -1).astype(np.int64)
        if self.in_format == "xf32":
            finite = (words & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
            inexact = finite & ((words & _XF32_DROPPED_BITS) != 0)
            if inexact.any():
                raise NotImplementedError(
                    f"{self.name}: an f32 operand with more than xf32's 10 mantissa bits "
                    f"(0x{int(words[inexact][0]):08x}); its narrowing to xf32 is not modelled")
        return words.view(np.float32).reshape(n, -1).astype(np.float64)

    def execute(self, a, b, c, cbsz: int = 0, abid: int = 0, blgp: int = 0, out=None,
                workspace=None) -> np.ndarray:
        if cbsz or abid or blgp:
            raise NotImplementedError(f"{self.name}: cbsz/abid/blgp are not emulated for this "
                                      f"family (got cbsz={cbsz}, abid={abid}, blgp={blgp})")
        n = a.shape[0]
        a_map, b_map, d_map = self._maps
        a_mat = self._elements(a)[:, a_map]          # [n, B, M, K]
        b_mat = self._elements(b)[:, b_map]          # [n, B, K, N]
        if self.out_format == "f64":
            c_vals = (np.full((n, self.c_regs // 2 * 64), float(c), np.float64) if np.isscalar(c)
                      else _pairs_to_f64(np.ascontiguousarray(c, np.uint32)).reshape(n, -1))
            d_vals = _fsum_matmul(a_mat, b_mat, c_vals[:, d_map])
            flat = np.empty((n, self.c_regs // 2 * 64), np.float64)
            flat[:, d_map] = d_vals
            return _f64_to_pairs(flat.reshape(n, self.c_regs // 2, 64))
        if self.out_format == "i32":
            c_vals = (np.full((n, self.c_regs * 64), int(c), np.int64) if np.isscalar(c)
                      else np.ascontiguousarray(c, np.uint32).view(np.int32).reshape(n, -1).astype(np.int64))
            d_vals = np.matmul(a_mat, b_mat) + c_vals[:, d_map]
            flat = np.empty((n, self.c_regs * 64), np.int64)
            flat[:, d_map] = d_vals
            return flat.astype(np.uint64).astype(np.uint32).reshape(n, self.c_regs, 64)
        c_vals = (np.full((n, self.c_regs * 64), float(c), np.float64) if np.isscalar(c)
                  else np.ascontiguousarray(c, np.uint32).view(np.float32).reshape(n, -1).astype(np.float64))
        with np.errstate(all="ignore"):
            d_vals = np.matmul(a_mat, b_mat) + c_vals[:, d_map]
        flat = np.empty((n, self.c_regs * 64), np.float32)
        with np.errstate(all="ignore"):
            flat[:, d_map] = d_vals
        return flat.view(np.uint32).reshape(n, self.c_regs, 64)


def _pairs_to_f64(words: np.ndarray) -> np.ndarray:
    """uint32[n, 2 * pairs, 64] (low register first) -> float64[n, pairs, 64]."""
    low = words[:, 0::2].astype(np.uint64)
    high = words[:, 1::2].astype(np.uint64)
    return (low | (high << np.uint64(32))).view(np.float64)


def _f64_to_pairs(values: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(values, np.float64).view(np.uint64)
    n, pairs, lanes = bits.shape
    out = np.empty((n, 2 * pairs, lanes), np.uint32)
    out[:, 0::2] = (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    out[:, 1::2] = (bits >> np.uint64(32)).astype(np.uint32)
    return out


def _fsum_matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A.B + C per element, rounded once: every product split exactly (Veltkamp/Dekker) and the
    terms summed by math.fsum. Non-finite inputs fall back to the plain float64 expression."""
    import math
    with np.errstate(all="ignore"):
        products = a[..., :, :, None] * b[..., None, :, :]      # [n, B, M, K, N]
        split = 134217729.0
        def halves(x):
            t = split * x
            high = t - (t - x)
            return high, x - high
        ah, al = halves(a[..., :, :, None])
        bh, bl = halves(b[..., None, :, :])
        errors = ((ah * bh - products) + ah * bl + al * bh) + al * bl
        plain = products.sum(axis=-2) + c
    terms = np.concatenate([products, errors], axis=-2)          # [n, B, M, 2K, N]
    terms = np.moveaxis(terms, -2, -1)                           # [n, B, M, N, 2K]
    result = plain.copy()
    finite = np.isfinite(plain) & np.isfinite(terms).all(axis=-1)
    idx = np.nonzero(finite)
    for position in zip(*idx):
        result[position] = math.fsum(list(terms[position]) + [c[position]])
    return result


def _indexed_catalog() -> dict[str, IndexedMfmaOp]:
    ops = [
        IndexedMfmaOp("v_mfma_f32_32x32x1_2b_f32", 32, 32, 1, 2, "f32", "f32"),
        IndexedMfmaOp("v_mfma_f32_16x16x1_4b_f32", 16, 16, 1, 4, "f32", "f32"),
        IndexedMfmaOp("v_mfma_f32_4x4x1_16b_f32", 4, 4, 1, 16, "f32", "f32"),
        IndexedMfmaOp("v_mfma_f32_32x32x2_f32", 32, 32, 2, 1, "f32", "f32"),
        IndexedMfmaOp("v_mfma_f32_16x16x4_f32", 16, 16, 4, 1, "f32", "f32"),
        IndexedMfmaOp("v_mfma_f32_16x16x8_xf32", 16, 16, 8, 1, "xf32", "f32"),
        IndexedMfmaOp("v_mfma_f32_32x32x4_xf32", 32, 32, 4, 1, "xf32", "f32"),
        IndexedMfmaOp("v_mfma_i32_32x32x4_2b_i8", 32, 32, 4, 2, "i8", "i32"),
        IndexedMfmaOp("v_mfma_i32_16x16x4_4b_i8", 16, 16, 4, 4, "i8", "i32"),
        IndexedMfmaOp("v_mfma_i32_4x4x4_16b_i8", 4, 4, 4, 16, "i8", "i32"),
        IndexedMfmaOp("v_mfma_i32_32x32x16_i8", 32, 32, 16, 1, "i8", "i32"),
        IndexedMfmaOp("v_mfma_i32_16x16x32_i8", 16, 16, 32, 1, "i8", "i32"),
        IndexedMfmaOp("v_mfma_f64_16x16x4_f64", 16, 16, 4, 1, "f64", "f64"),
        IndexedMfmaOp("v_mfma_f64_4x4x4_4b_f64", 4, 4, 4, 4, "f64", "f64"),
    ]
    return {op.name: op for op in ops}


MFMA_OPS.update(_indexed_catalog())
