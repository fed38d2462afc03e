"""gfx942 attention policy: the geometry registry and the LDS plan (ALGORITHM.md §8-9).

``GEOMETRIES`` is the one table of the shipped kernel geometries: a name, the matmul regime, the
warps and query rows per warp, and the KV tile per head size. The variant tables, the dispatcher
and the levers all look geometries up here, so adding one is one row.

``lds_plan(spec)`` lists the named LDS regions a kernel allocates (shape, row padding, and whether
it aliases the K/V tiles at offset 0); the footprint the spec is checked against
(``lds_footprint``) and the builder's allocations (``LdsPlan.allocate``) both come from it.
"""
from __future__ import annotations

from dataclasses import dataclass

# the head sizes of the shipped (golden) variants; d512 and padded heads are built on demand
SHIPPED_HEAD_SIZES = (64, 128, 256)

NARROW = "narrow"                 # 16x16x16, S = Q K^T, P staged through LDS
TRANSPOSED_X8 = "transposed_x8"   # 32x32x8 (fp16 only), S^T = K Q^T, P^T stays in registers
REGIMES = (NARROW, TRANSPOSED_X8)

# spec field -> kernel-name tag of each score feature, in the order they apply (ALGORITHM.md §12)
FEATURES = {"softcap": "softcap", "alibi": "alibi", "qq_bias": "qqb", "sliding_window": "swa",
            "sinks": "sinks"}
STAGING_VECTOR = 8          # elements per lane per global access of the cooperative copies
LDS_PAD = 8                 # elements appended to each LDS row (bank spread; 16-byte aligned rows)
ELEMENT_BYTES = 2           # the LDS tiles hold the query dtype (f16/bf16; fp8 caches dequantized)


@dataclass(frozen=True)
class GeometryRow:
    """One shipped geometry. ``tiles``: (head size, KV tile) pairs; empty = the regime's default
    tile (``default_tile``)."""
    name: str
    regime: str
    num_warps: int
    block_m_per_warp: int
    tiles: tuple[tuple[int, int], ...] = ()
    why: str = ""

    def spec_fields(self, head_size: int) -> dict:
        """The kernel spec fields of this geometry at ``head_size``."""
        fields = dict(num_warps=self.num_warps, block_m_per_warp=self.block_m_per_warp)
        if self.regime == TRANSPOSED_X8:
            fields.update(regime=TRANSPOSED_X8)
        tile = dict(self.tiles).get(head_size)
        if tile:
            fields["tile_size"] = tile
        return fields


# d128 transposed-x8 streams 32-key tiles so K + V^T and the aliased Q/output stages fit 32 KiB
# (2 workgroups per CU); d64 keeps 64-key tiles at the same budget.
_X8_TILES = ((64, 64), (128, 32))

GEOMETRIES: dict[str, GeometryRow] = {row.name: row for row in (
    GeometryRow("narrow_w4m32", NARROW, 4, 32, why="2D d64: 4 warps x 32 rows"),
    GeometryRow("narrow_w2m16", NARROW, 2, 16, why="2D d128 and d256: 2 warps x 16 rows (d256: 16 "
                                                   "output fragments per warp, ALGORITHM.md §11.2)"),
    GeometryRow("narrow_w1m16", NARROW, 1, 16, why="3D: one warp of 16 rows holds a decode token's "
                                                   "GQA group"),
    GeometryRow("wide4", TRANSPOSED_X8, 4, 32, _X8_TILES, why="4 warps of 32 query columns"),
    GeometryRow("wide2", TRANSPOSED_X8, 2, 32, _X8_TILES, why="2 warps of 32 query columns"),
    GeometryRow("L4", TRANSPOSED_X8, 1, 32, _X8_TILES, why="1 warp of 32 query columns"),
)}


def geometry(name: str) -> GeometryRow:
    if name not in GEOMETRIES:
        raise ValueError(f"geometry: must be one of {', '.join(GEOMETRIES)}, got {name!r}")
    return GEOMETRIES[name]


def geometries_of(regime: str) -> tuple[str, ...]:
    """Names of the registry's geometries of ``regime``, in table order."""
    return tuple(name for name, row in GEOMETRIES.items() if row.regime == regime)


def geometry_with_warps(regime: str, num_warps: int) -> GeometryRow | None:
    return next((row for row in GEOMETRIES.values()
                 if row.regime == regime and row.num_warps == num_warps), None)


def narrow_2d_geometry(head_size: int) -> GeometryRow:
    """The 2D narrow geometry of a head size."""
    return GEOMETRIES["narrow_w4m32" if head_size == 64 else "narrow_w2m16"]


NARROW_3D = GEOMETRIES["narrow_w1m16"]


def default_tile(transposed_x8: bool, block_size: int, head_size: int) -> int:
    """The KV tile when the spec leaves it 0: 64 (transposed-x8), min(block_size, 32) (narrow),
    16 (narrow d256: K double buffer + V^T + P in 30 KiB, 2 workgroups per CU and no SGPR spills,
    ALGORITHM.md §11.2)."""
    if transposed_x8:
        return 64
    return min(block_size, 32 if head_size <= 128 else 16)


def default_k_single_buffer(transposed_x8: bool, num_warps: int, block_m_per_warp: int,
                            tile: int) -> bool:
    """One K buffer when a tile's keys cover every row a step computes (num_warps x 32 query
    columns, transposed-x8; BLOCK_M rows, narrow): the next K load then has nothing to hide."""
    rows = num_warps * 32 if transposed_x8 else num_warps * block_m_per_warp
    return rows <= tile


def v_tile_pad(transposed_x8: bool) -> int:
    """Row pad (elements) of the row-major V tile (``cfv_store``, ALGORITHM.md §9): a row pitch of
    2 (narrow) / 4 (transposed-x8) dwords mod 8 puts the rows one PV read touches on distinct
    banks."""
    return 8 if transposed_x8 else 4


def vt_tile_pad(head_size: int, target: str, early_v: bool = False) -> int:
    """Row pad (elements) of the V^T tile ``[D, T]``. A d256 copy step moves 2 tokens a wave, so
    every lane's paired store (``copy_paged_tile``'s 32-bit column pairs) hits one dword column
    of V^T rows 4 apart: gfx942's 32 banks see the rows' pitch x 4 dwords mod 32. The default
    pad (8) makes the pitch T/2 + 4 dwords (20 at T = 32: 2 banks, 16-way conflicts, 64 cycles
    a ``ds_write2_b32``); pad 4 makes it T/2 + 2 (18 / 10 at T = 32 / 16: 4 banks, 8-way),
    keeps rows 8-byte aligned for the ``ds_read2_b64`` operand reads, and makes those reads (16
    consecutive V^T rows) conflict-free. An odd pitch would spread the stores further but
    misalign the reads. Taken with ``early_v`` only (ALGORITHM.md §10.2: elsewhere it moved the
    modelled time by at most 0.03 us); gfx950 (64 banks, a wider B read) keeps the default."""
    return 4 if early_v and head_size == 256 and target == "gfx942" else LDS_PAD


# ---- the LDS plan --------------------------------------------------------------------------

@dataclass(frozen=True)
class LdsRegion:
    name: str
    shape: tuple[int, int]
    pad: int = 0
    aliased: bool = False       # at offset 0 over the K/V tiles: live only outside the tile loop

    @property
    def nbytes(self) -> int:
        return self.shape[0] * (self.shape[1] + self.pad) * ELEMENT_BYTES


@dataclass(frozen=True)
class LdsPlan:
    regions: tuple[LdsRegion, ...]

    def region(self, name: str) -> LdsRegion:
        return next(r for r in self.regions if r.name == name)

    def has(self, name: str) -> bool:
        return any(r.name == name for r in self.regions)

    def allocate(self, k, name: str, dtype):
        """The builder's allocation of region ``name`` (``k.lds``)."""
        r = self.region(name)
        if r.aliased:
            return k.lds(r.name, r.shape, dtype, pad=r.pad, offset=0, alias=True)
        return k.lds(r.name, r.shape, dtype, pad=r.pad)

    def footprint(self) -> dict[str, int]:
        """Bytes per region of the tile loop, plus ``aliased_excess``: the part of the largest
        aliased region beyond them. ``sum(values)`` is the workgroup's LDS."""
        loop = {r.name: r.nbytes for r in self.regions if not r.aliased}
        aliased = max((r.nbytes for r in self.regions if r.aliased), default=0)
        loop["aliased_excess"] = max(0, aliased - sum(loop.values()))
        return loop


def lds_plan(spec, *, tile: int | None = None) -> LdsPlan:
    """The regions a 2D (``stores_output``) or 3D attention kernel of ``spec`` allocates, in
    allocation order: K (one or two buffers), V (row-major with ``cfv_store``, else V^T), P
    (narrow), and, aliased onto them, the Q stage (unless ``q_direct``) and the transposed-x8
    output stage (2D only)."""
    tile = tile or spec.tile_size
    D = spec.head_size
    x8 = spec.transposed_x8
    block_m = spec.num_warps * spec.block_m_per_warp
    single = spec.use_k_single_buffer
    if single is None:
        single = default_k_single_buffer(x8, spec.num_warps, spec.block_m_per_warp, tile)
    # the LDS DMA writes rows unpadded when one instruction carries more than one row
    k_pad = 0 if spec.global_load_lds_k and D * ELEMENT_BYTES < 256 else LDS_PAD
    regions = [LdsRegion("k_tile", ((1 if single else 2) * tile, D), k_pad)]
    if spec.cfv_store:
        regions.append(LdsRegion("v_tile", (tile, D), v_tile_pad(x8)))
    else:
        regions.append(LdsRegion("vt_tile", (D, tile), vt_tile_pad(D, spec.target,
                                                                getattr(spec, "early_v", False))))
    if getattr(spec, "mm_prefix_ranges", 0):   # [start, end] i32 pairs (4 x 16-bit units)
        regions.append(LdsRegion("mm_ranges", (spec.mm_prefix_ranges, 4)))
    if not x8:
        regions.append(LdsRegion("p_tile", (block_m, tile), LDS_PAD))
    if not spec.q_direct:
        regions.append(LdsRegion("q_stage", (block_m, D), 0 if x8 else LDS_PAD, aliased=True))
    if x8 and stores_output(spec):
        regions.append(LdsRegion("acc_stage", (block_m, D), 0, aliased=True))
    return LdsPlan(tuple(regions))


def stores_output(spec) -> bool:
    """Whether the kernel of ``spec`` stores the normalised output (2D) rather than partials (3D)."""
    return getattr(spec, "family", "attention_2d") != "attention_3d"
