"""The spill-aware last step of gfx942's attention plan (ALGORITHM.md §10.5): when the planned
attention kernel's compiled code spills registers (the ``.sgpr_spill_count`` /
``.vgpr_spill_count`` LLVM writes into the code object's metadata), the same problem runs on the
first geometry of a short fixed chain (``candidates``) whose code does not spill.

The chain is a pure function of the planned spec, and compilation is deterministic, so the
choice is a pure function of spec and target: a spec that does not spill (every shipped variant)
is launched as planned and its IR is unchanged. In order, from the least to the most change:

1. the planned spec;
2. the same geometry with the other K buffering (one K buffer <-> two);
3. each smaller KV tile of the same geometry (the one-round rule's grown tile falls back to the
   table's), its default K buffering, then the other;
4. each narrower geometry of the same path (transposed-x8 wide4 -> wide2 -> L4 -> the path's
   narrow geometry; narrow: fewer rows), at its default tile and K buffering.

Every candidate computes the same function (the geometry changes how the work is mapped, not the
result); a candidate its spec refuses (LDS, tile/atom shape, group rows) is skipped, and at most
``MAX_CANDIDATES`` are compiled. If every one spills, the least-spilling is launched (the first of
equals) and a warning says so once per planned kernel: a correct kernel is never refused.

The chain is the same on every target whose dispatcher maps gfx942's geometry rows (gfx950); what
a target adds is how a candidate geometry becomes its spec (``chain_for``): the dispatcher's
``spill_candidate(spec, **fields)`` when it has one (gfx950's re-derives its MFMA atoms for a
changed geometry), else ``dataclasses.replace``. A candidate is a spec the target's class
accepts, so the chain proposes only what the target's gate (``supports_*``) accepts.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Callable

from rocke.compiler import CompileError
from rocke.kernels.gfx942 import attention_policy as policy

MAX_CANDIDATES = 10         # compiles at most per spilling spec (the planned one included)

# the attention specs the chain applies to (2D/3D tiled; reduce_segments has no geometry)
_GEOMETRY_FIELDS = ("regime", "num_warps", "block_m_per_warp", "tile_size", "use_k_single_buffer")


@dataclass(frozen=True)
class SpillFallback:
    """What replaced a spilling planned kernel (``Plan.spill_fallback``)."""
    planned: str                        # the planned kernel's name
    planned_spills: tuple[int, int]     # its (VGPR, SGPR) spills
    chosen: str                         # the launched kernel's name
    chosen_spills: tuple[int, int]
    tried: int                          # candidates compiled, the planned one included

    @property
    def spill_free(self) -> bool:
        return self.chosen_spills == (0, 0)

    def outcome(self) -> str:
        """What was launched instead, for a line that already names the planned kernel."""
        cv, cs = self.chosen_spills
        if self.chosen == self.planned:
            return f" -> no candidate spills less ({self.tried} tried): launched as planned"
        return (f" -> {self.chosen} v/s {cv}/{cs} "
                f"({'spill-free' if self.spill_free else 'the least-spilling, still spills'}, "
                f"{self.tried} tried)")

    def describe(self) -> str:
        v, s = self.planned_spills
        return f"{self.planned} spills v/s {v}/{s}{self.outcome()}"


def applies(spec) -> bool:
    """Whether ``spec`` is a tiled attention spec (the chain changes its geometry fields)."""
    return all(hasattr(spec, f) for f in _GEOMETRY_FIELDS)


def chain_for(spec) -> Callable:
    """``make(spec, **fields)`` -> the candidate spec of ``spec``'s target (module docstring);
    ValueError when its class refuses the fields."""
    target = getattr(spec, "target", "gfx942")
    if target == "gfx942":
        return replace
    from rocke.kernels.common.attention_problem import attention_target
    return getattr(attention_target(target), "spill_candidate", replace)


def _is_2d(spec) -> bool:
    return policy.stores_output(spec)


def _narrower_geometries(spec) -> list[tuple[str, int, int]]:
    """(regime, warps, rows per warp) of the path's geometries after the spec's own, narrowest
    last: transposed-x8 rows with fewer warps, then the path's narrow row; narrow rows with
    fewer BLOCK_M rows."""
    block_m = spec.num_warps * spec.block_m_per_warp
    if spec.transposed_x8:
        x8 = sorted((r for r in policy.GEOMETRIES.values()
                     if r.regime == policy.TRANSPOSED_X8 and r.num_warps < spec.num_warps),
                    key=lambda r: -r.num_warps)
        narrow = (policy.narrow_2d_geometry(spec.head_size) if _is_2d(spec) else policy.NARROW_3D)
        rows = x8 + [narrow]
    else:
        rows = sorted((r for r in policy.GEOMETRIES.values()
                       if r.regime == policy.NARROW and r.num_warps * r.block_m_per_warp < block_m),
                      key=lambda r: -r.num_warps * r.block_m_per_warp)
    return [(r.regime, r.num_warps, r.block_m_per_warp) for r in rows]


def _table_tile(regime: str, warps: int, rows: int, spec) -> int:
    """A registry geometry's KV tile at the spec's head size (0: the regime's default)."""
    for row in policy.GEOMETRIES.values():
        if (row.regime, row.num_warps, row.block_m_per_warp) == (regime, warps, rows):
            return row.spec_fields(spec.head_size).get("tile_size", 0)
    return 0


def candidates(spec) -> list:
    """The fallback chain of ``spec`` (module docstring), the spec first, each candidate a valid
    spec of the same class, duplicates and refused ones left out, at most MAX_CANDIDATES."""
    out, seen, make = [], set(), chain_for(spec)

    def add(**fields):
        try:
            cand = make(spec, **fields)
        except ValueError:           # the spec refuses this geometry (LDS, shapes)
            return
        if cand.kernel_name not in seen:
            seen.add(cand.kernel_name)
            out.append(cand)

    add()
    add(use_k_single_buffer=not spec.use_k_single_buffer)
    for tile in sorted((t for t in (16, 32, 64) if t < spec.tile_size), reverse=True):
        single = policy.default_k_single_buffer(spec.transposed_x8, spec.num_warps,
                                                spec.block_m_per_warp, tile)
        add(tile_size=tile, use_k_single_buffer=single)
        add(tile_size=tile, use_k_single_buffer=not single)
    for regime, warps, rows in _narrower_geometries(spec):
        add(regime=regime, num_warps=warps, block_m_per_warp=rows,
            tile_size=_table_tile(regime, warps, rows, spec), use_k_single_buffer=None)
    return out[:MAX_CANDIDATES]


_WARNED: set = set()        # planned kernels whose launch was warned about (once each)


def choose(spec, spills_of: Callable, *, planned_spills: tuple[int, int] | None = None) -> tuple:
    """(spec to launch, SpillFallback or None when the planned spec does not spill).
    ``spills_of(spec) -> (VGPR spills, SGPR spills)`` of its compiled code (the callers' are
    cached: the entry point's compiled kernels, the report's on-disk assembly);
    ``planned_spills``: the planned spec's, when already known. A candidate LLVM rejects is
    skipped; the planned spec's own error propagates."""
    planned = tuple(spills_of(spec) if planned_spills is None else planned_spills)
    if planned == (0, 0):
        return spec, None
    best, best_spills, tried = spec, planned, 1
    for cand in (candidates(spec)[1:] if applies(spec) else ()):
        try:
            got = tuple(spills_of(cand))
        except CompileError:
            continue
        tried += 1
        if sum(got) < sum(best_spills):
            best, best_spills = cand, got
        if got == (0, 0):
            break
    record = SpillFallback(spec.kernel_name, planned, best.kernel_name, best_spills, tried)
    if not record.spill_free and spec.kernel_name not in _WARNED:
        _WARNED.add(spec.kernel_name)
        warnings.warn(f"rocke: {record.describe()}", RuntimeWarning, stacklevel=3)
    return best, record


def geometry_of_spec(geo, spec):
    """``geo`` (a dispatcher Geometry) describing ``spec``'s geometry (path and segments kept)."""
    if (spec.regime, spec.num_warps, spec.block_m_per_warp) == (geo.regime, geo.num_warps,
                                                               geo.block_m_per_warp):
        name = geo.name
    else:
        name = next((n for n, r in policy.GEOMETRIES.items()
                     if (r.regime, r.num_warps, r.block_m_per_warp) ==
                     (spec.regime, spec.num_warps, spec.block_m_per_warp)), f"w{spec.num_warps}")
    return replace(geo, regime=spec.regime, name=name, num_warps=spec.num_warps,
                   block_m_per_warp=spec.block_m_per_warp, tile_size=spec.tile_size,
                   k_single_buffer=spec.use_k_single_buffer)


def spill_free_plan(the_plan, spills_of: Callable):
    """``the_plan`` with its attention kernel replaced by the chain's first spill-free one when
    the planned one spills (``Plan.spill_fallback`` records it; the geometry's reason says so),
    else ``the_plan`` itself. Other kernels of the plan (reduce_segments) have no geometry to
    change: one that spills is launched with a warning."""
    if not the_plan.specs:
        return the_plan
    main, *rest = the_plan.specs
    chosen, record = choose(main, spills_of)
    for other in rest:
        choose(other, spills_of)          # warns if it spills
    if record is None or chosen == main:
        return the_plan if record is None else replace(the_plan, spill_fallback=record)
    geo = geometry_of_spec(the_plan.geometry, chosen)
    geo = replace(geo, reason=f"{the_plan.geometry.reason}; spill fallback: {record.describe()}")
    return replace(the_plan, geometry=geo, specs=(chosen, *rest), spill_fallback=record)
