"""Thread-value layouts: which (row, col) of a wave-level register tile each lane and value holds.

A fragment (a register tile) carries a `TVLayout`. Everything lane-dependent that a kernel needs —
the butterfly masks of a reduction along a tile axis, where each value of a lane lives in a
row-major LDS tile, whether two fragments can be combined element-wise, how to turn an MFMA
accumulator into the next MFMA's operand — is derived here from the table of coordinates, so no
builder writes lane arithmetic by hand. Pure Python + numpy; the DSL turns the results into IR.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..arch.mfma import WAVE, MfmaAtom

_LANE_BITS = WAVE.bit_length() - 1
ROW, COL = 0, 1          # a tile's coordinate axes: 0 indexes rows, 1 columns
# What a reduction along an axis holds: ``frag.reduce(PER_ROW)`` reduces the columns away and
# gives one value per row; ``PER_COL`` one per column (``load_axis(bias, layout, PER_COL)``: a
# per-column bias). Read as the axis argument of reduce / AxisVector / load_axis, ROW and COL
# name the axis reduced away, which reads backwards; these names say what the vector holds.
PER_ROW, PER_COL = COL, ROW


@dataclass(frozen=True)
class LaneAffine:
    """An integer function of the lane id written as a sum of bit-field terms:
    f(lane) = const + sum(((lane >> shift) & mask) * scale for shift, mask, scale in terms)."""
    terms: tuple[tuple[int, int, int], ...]
    const: int = 0

    def __call__(self, lane):
        lane = np.asarray(lane)
        out = np.full(lane.shape, self.const, dtype=np.int64)
        for shift, mask, scale in self.terms:
            out = out + ((lane >> shift) & mask) * scale
        return out

    @staticmethod
    def fit(values: np.ndarray) -> "LaneAffine | None":
        """Express a length-64 integer table as bit-field terms, or None if it is not of that form."""
        values = np.asarray(values, dtype=np.int64)
        base = int(values[0])
        weights = [int(values[1 << b]) - base for b in range(_LANE_BITS)]
        lanes = np.arange(WAVE)
        recon = base + sum(((lanes >> b) & 1) * w for b, w in enumerate(weights))
        if not np.array_equal(recon, values):
            return None
        terms, b = [], 0
        while b < _LANE_BITS:   # merge runs of bits whose weights double, e.g. lane & 31 instead of 5 terms
            if weights[b] == 0:
                b += 1
                continue
            start, scale = b, weights[b]
            while b + 1 < _LANE_BITS and weights[b + 1] == 2 * weights[b]:
                b += 1
            terms.append((start, (1 << (b - start + 1)) - 1, scale))
            b += 1
        return LaneAffine(tuple(terms), base)


@dataclass(frozen=True)
class ReducePlan:
    """How to reduce a fragment along one tile axis.
    `in_lane`: groups of value indices (same lane) that hold the same output coordinate — combine
    them in registers first; `xor_masks`: then butterfly across lanes with these lane-id xor masks.
    After it, every lane holds the reduction for each of its groups (`group_of_value[v]`)."""
    in_lane: tuple[tuple[int, ...], ...]
    xor_masks: tuple[int, ...]
    group_of_value: tuple[int, ...]


@dataclass(frozen=True)
class TVLayout:
    """coords[lane, value] = (row, col) inside a tile of `shape`; every element held exactly once."""
    name: str
    shape: tuple[int, int]
    coords: np.ndarray = field(repr=False, compare=False)

    def __post_init__(self):
        c = np.asarray(self.coords)
        if c.ndim != 3 or c.shape[0] != WAVE or c.shape[2] != 2:
            raise ValueError(f"layout {self.name}: coords must be [64, values, 2], got {c.shape}")
        flat = c[..., 0] * self.shape[1] + c[..., 1]
        if (c < 0).any() or (c[..., 0] >= self.shape[0]).any() or (c[..., 1] >= self.shape[1]).any():
            raise ValueError(f"layout {self.name}: coordinate outside tile {self.shape}")
        if len(np.unique(flat)) != flat.size or flat.size != self.shape[0] * self.shape[1]:
            raise ValueError(f"layout {self.name}: must hold each element of {self.shape} exactly once")
        c = c.astype(np.int64)
        c.setflags(write=False)         # the queries below are memoised on it
        object.__setattr__(self, "coords", c)
        object.__setattr__(self, "_memo", {})

    def _memoised(self, query: str, axis: int, compute):
        """A query's answer, computed once per layout (builders ask the same ones many times)."""
        key = (query, axis)
        if key not in self._memo:
            self._memo[key] = compute(axis)
        return self._memo[key]

    # -- construction ---------------------------------------------------------------------
    # A multi-block atom (e.g. 4x4x4_16b) computes `blocks` independent products at once. Its
    # fragments are ordinary 2-D tiles with the block index folded in: A is (blocks*M) x K and
    # C is (blocks*M) x N (block b owns rows b*M ..), B is K x (blocks*N) (block b owns columns
    # b*N ..), so that C[b*M + m, n] = sum_k A[b*M + m, k] * B[k, b*N + n]. Single-block atoms
    # are the case blocks = 1.
    @staticmethod
    def mfma_a(atom: MfmaAtom) -> "TVLayout":
        """A operand: a (blocks*M) x K tile."""
        block, row, k = np.moveaxis(atom.a_table, -1, 0)
        return TVLayout(f"{atom.key}.A", (atom.blocks * atom.m, atom.k),
                        np.stack([block * atom.m + row, k], axis=-1))

    @staticmethod
    def mfma_b(atom: MfmaAtom) -> "TVLayout":
        """B operand: a K x (blocks*N) tile."""
        block, k, col = np.moveaxis(atom.b_table, -1, 0)
        return TVLayout(f"{atom.key}.B", (atom.k, atom.blocks * atom.n),
                        np.stack([k, block * atom.n + col], axis=-1))

    @staticmethod
    def mfma_c(atom: MfmaAtom) -> "TVLayout":
        """Accumulator: a (blocks*M) x N tile."""
        block, row, col = np.moveaxis(atom.c_table, -1, 0)
        return TVLayout(f"{atom.key}.C", (atom.blocks * atom.m, atom.n),
                        np.stack([block * atom.m + row, col], axis=-1))

    @staticmethod
    def mfma_scale(atom: MfmaAtom, operand: str) -> "TVLayout":
        """A block-scaled atom's scales, one a lane: lane l holds the scale of row (A) or column
        (B) l % M and K block l // M -- an M x K/32 tile for A, K/32 x N for B."""
        lanes = np.arange(WAVE)
        extent = atom.m if operand == "A" else atom.n
        kept, block = lanes % extent, lanes // extent
        if operand == "A":
            return TVLayout(f"{atom.key}.A_scale", (atom.m, atom.k // 32), np.stack([kept, block], -1)[:, None])
        return TVLayout(f"{atom.key}.B_scale", (atom.k // 32, atom.n), np.stack([block, kept], -1)[:, None])

    def transpose(self) -> "TVLayout":
        return self._memoised("transpose", 0, lambda _: TVLayout(
            f"{self.name}^T", (self.shape[1], self.shape[0]), self.coords[..., ::-1]))

    # -- queries ---------------------------------------------------------------------------
    @property
    def values_per_lane(self) -> int:
        return self.coords.shape[1]

    def same_as(self, other: "TVLayout") -> bool:
        return self.shape == other.shape and np.array_equal(self.coords, other.coords)

    def value_runs(self, axis: int = COL) -> tuple[tuple[int, int], ...]:
        """Maximal runs (first value, length) of values that every lane holds at consecutive
        positions along `axis` (COL: along a row) — the vector width of a memory copy of the
        fragment to/from a tile that is contiguous along that axis."""
        return self._memoised("value_runs", axis, self._value_runs)

    def _value_runs(self, axis: int) -> tuple[tuple[int, int], ...]:
        other = 1 - axis
        runs, v, n = [], 0, self.values_per_lane
        while v < n:
            start = v
            while (v + 1 < n and np.all(self.coords[:, v + 1, other] == self.coords[:, v, other])
                   and np.all(self.coords[:, v + 1, axis] == self.coords[:, v, axis] + 1)):
                v += 1
            runs.append((start, v - start + 1))
            v += 1
        return tuple(runs)

    def values_matching(self, sub: "TVLayout", offset: tuple[int, int] = (0, 0)) -> tuple[int, ...] | None:
        """If every lane already holds `sub`'s elements (placed at `offset` in this tile) at the same
        value indices for all lanes, return those indices (one per value of `sub`); else None.
        This is how an accumulator is reused in place as the next MFMA's operand (e.g. P^T kept in
        registers as the PV B operand) without a shuffle."""
        want = sub.coords + np.asarray(offset)
        picks = []
        for v in range(sub.values_per_lane):
            hit = np.all(self.coords == want[:, v][:, None, :], axis=2)     # [64, values]
            if not hit.any(axis=1).all():
                return None
            idx = hit.argmax(axis=1)
            if not np.all(idx == idx[0]):
                return None
            picks.append(int(idx[0]))
        return tuple(picks)

    def lane_part(self, axis: int) -> LaneAffine:
        """The lane-dependent part of the coordinate along `axis` (value 0's coordinate)."""
        return self._memoised("lane_part", axis, self._lane_part)

    def _lane_part(self, axis: int) -> LaneAffine:
        f = LaneAffine.fit(self.coords[:, 0, axis])
        if f is None or not self._separable(axis):
            raise ValueError(f"layout {self.name}: axis {axis} is not lane-affine + value offset")
        return f

    def value_offsets(self, axis: int) -> tuple[int, ...]:
        """Per-value offset along `axis` relative to value 0 (same for every lane)."""
        return self._memoised("value_offsets", axis, self._value_offsets)

    def _value_offsets(self, axis: int) -> tuple[int, ...]:
        if not self._separable(axis):
            raise ValueError(f"layout {self.name}: axis {axis} value offsets depend on the lane")
        return tuple(int(x) for x in self.coords[0, :, axis] - self.coords[0, 0, axis])

    def _separable(self, axis: int) -> bool:
        d = self.coords[:, :, axis] - self.coords[:, :1, axis]
        return bool(np.all(d == d[:1]))

    def reduce_plan(self, axis: int) -> ReducePlan:
        """Plan a reduction that removes `axis` (axis=COL: one result per row, e.g. a row max)."""
        return self._memoised("reduce_plan", axis, self._reduce_plan)

    def _reduce_plan(self, axis: int) -> ReducePlan:
        keep = 1 - axis
        kept = self.coords[:, :, keep]
        groups: list[tuple[int, ...]] = []
        group_of_value = [0] * self.values_per_lane
        for v in range(self.values_per_lane):
            for gi, g in enumerate(groups):
                if np.array_equal(kept[:, g[0]], kept[:, v]):
                    groups[gi] = g + (v,)
                    group_of_value[v] = gi
                    break
            else:
                group_of_value[v] = len(groups)
                groups.append((v,))
        # lanes holding the same kept coordinates must be combined; they must form an xor subspace
        keys = [tuple(kept[l, [g[0] for g in groups]]) for l in range(WAVE)]
        partners = [l for l in range(1, WAVE) if keys[l] == keys[0]]
        span = {0}
        masks = []
        for p in partners:
            if p not in span:
                masks.append(p)
                span |= {s ^ p for s in span}
        for l in range(WAVE):
            if {m for m in range(WAVE) if keys[l ^ m] == keys[l]} != span:
                raise ValueError(f"layout {self.name}: lanes sharing axis {keep} coordinates are not "
                                 "an xor subspace; a butterfly reduction does not apply")
        return ReducePlan(tuple(groups), tuple(sorted(masks)), tuple(group_of_value))

    def reduced_coords(self, axis: int) -> np.ndarray:
        """[64, groups]: the kept coordinate each lane's reduced value refers to."""
        plan = self.reduce_plan(axis)
        return self.coords[:, [g[0] for g in plan.in_lane], 1 - axis]

