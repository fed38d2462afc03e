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

_FORMAT_BITS = {"f16": 16, "bf16": 16, "e4m3fnuz": 8, "e5m2fnuz": 8}


def _decode(words: np.ndarray, fmt: str) -> np.ndarray:
    """uint32[n, regs, 64] -> float64[n, 64, regs * per_reg] (element p = r * per_reg + e)."""
    per_reg = 32 // _FORMAT_BITS[fmt]
    n, regs = words.shape[0], words.shape[1]
    # Little-endian views put the low half / low byte of each register first.
    lanes_first = np.ascontiguousarray(words.transpose(0, 2, 1))  # [n, 64, regs]
    if fmt == "f16":
        values = lanes_first.view(np.float16)
    elif fmt == "bf16":
        values = numerics.bf16_bits_to_f32(lanes_first.view(np.uint16))
    else:
        values = numerics.fp8_bits_to_f32(lanes_first.view(np.uint8), fmt)
    return values.astype(np.float64).reshape(n, 64, regs * per_reg)


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

    # -- layouts ---------------------------------------------------------------------------

    def _operand_coords(self, rows: int, k_per_lane: int):
        """(block, row-or-col, k) of each (lane, position) of an A or B operand."""
        lane = np.arange(64)[:, None]
        position = np.arange(k_per_lane)[None, :]
        shape = (64, k_per_lane)
        index = np.broadcast_to(lane % rows, shape)
        if self.blocks > 1:
            return np.broadcast_to(lane // rows, shape), index, np.broadcast_to(position, shape)
        return np.zeros(shape, dtype=int), index, (lane // rows) * k_per_lane + position

    def _acc_coords(self):
        """(block, i, j) of each (register, lane) of C/D."""
        reg = np.arange(self.c_regs)[:, None]
        lane = np.arange(64)[None, :]
        shape = (self.c_regs, 64)
        if self.n == 4:
            return np.broadcast_to(lane // 4, shape), np.broadcast_to(reg, shape), np.broadcast_to(lane % 4, shape)
        groups = 64 // self.n
        regs_per_block = self.m // groups
        q = reg % regs_per_block
        block = np.broadcast_to(reg // regs_per_block, shape)
        row = 4 * groups * (q // 4) + 4 * (lane // self.n) + q % 4
        return block, row, np.broadcast_to(lane % self.n, shape)

    @functools.cached_property
    def _gathers(self):
        """Flat gather indices: A[b,i,k] and B[b,k,j] from (lane, position); C[b,i,j] from
        (register, lane); D (register, lane) from [b,i,j]."""
        k_per_lane = self.blocks * self.m * self.k // 64
        lane_position = np.arange(64 * k_per_lane).reshape(64, k_per_lane)
        a_gather = np.empty((self.blocks, self.m, self.k), dtype=np.intp)
        block, row, kk = self._operand_coords(self.m, k_per_lane)
        a_gather[block, row, kk] = lane_position
        b_gather = np.empty((self.blocks, self.k, self.n), dtype=np.intp)
        block, col, kk = self._operand_coords(self.n, k_per_lane)
        b_gather[block, kk, col] = lane_position
        block, row, col = self._acc_coords()
        c_gather = np.empty((self.blocks, self.m, self.n), dtype=np.intp)
        c_gather[block, row, col] = np.arange(self.c_regs * 64).reshape(self.c_regs, 64)
        d_gather = np.ravel_multi_index((block, row, col), (self.blocks, self.m, self.n))
        return a_gather, b_gather, c_gather, d_gather

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

    def execute(self, a, b, c, cbsz: int = 0, abid: int = 0, blgp: int = 0) -> np.ndarray:
        """D = A * B + C per block, over a batch of waves; returns float32[n, c_regs, 64]."""
        self._check(a, b, c, cbsz, abid, blgp)
        n = a.shape[0]
        a_gather, b_gather, c_gather, d_gather = self._gathers
        a_values = _decode(a, self.a_format).reshape(n, -1)
        b_values = _decode(b, self.b_format)[:, _blgp_source_lane(blgp)].reshape(n, -1)
        a_matrix = a_values[:, a_gather]
        if cbsz:
            source_block = (np.arange(self.blocks) >> cbsz << cbsz) + abid
            a_matrix = a_matrix[:, source_block]
        c_matrix = c.reshape(n, -1)[:, c_gather].astype(np.float64)
        with np.errstate(all="ignore"):
            d_matrix = np.matmul(a_matrix, b_values[:, b_gather]) + c_matrix
            return d_matrix.reshape(n, -1)[:, d_gather].astype(np.float32)


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
