"""gfx950's unified-attention dispatcher (found by name by ``attention_unified.attention_target``).

First step: gfx942's rules and geometries (rocke/kernels/gfx942/attention_dispatch.py, ALGORITHM.md
§10) evaluated with gfx950's facts, on the gfx950 builds of gfx942's kernels
(``rocke.kernels.gfx950.attention``):
- the device's compute units: 256 on MI355X (rocke/arch), so the 2D-fills-the-device rule and 3D's
  whole rounds count num_sms * 4 = 1024 workgroups;
- the LDS budget: 160 KiB per workgroup, checked by the specs (gfx942's 64 KiB rule, per target),
  and ``TILE_RULES``: the fp16 d128 transposed-x8 wide geometries walk T = 64, which gfx942's
  LDS holds only at half the workgroups;
- fp8 (KV caches, per-token-head caches, the output): gfx942's encodings with its e4m3fnuz
  replaced by gfx950's OCP e4m3fn (``attention_quant.on_target``).
- the atom: the 2D narrow path takes the wide-K 16x16x32 (``ATOM_RULES``) and the 2D
  transposed-x8 regime the wide-K 32x32x16 (``X8T_ATOM_RULES``, the transposed-32x32 "combo"),
  which has bf16 as well as fp16: so bf16 takes fp16's geometry rows (``REGIME_RULES``), d64 and
  d128 (d256 and QQ-bias stay narrow, as for fp16). 3D keeps gfx942's narrow 16x16x16.
- levers of the combo: ``WINDOW_RULES`` (a bf16 sliding window runs wide2 at T = 2 * block_size,
  the prelude-light geometry) and ``WAVES_RULES`` (waves_per_eu=3 on the d64 block-32 GQA-8
  multi-sequence combo). Not taken: the d128 single-batch K-single-buffer lever -- on gfx950's
  160 KiB the K double buffer's LDS (52 KiB) admits 3 workgroups per CU, the 256 VGPRs 2, so one
  K buffer buys no occupancy (ALGORITHM.md, gfx950).
- the 3D split rule is gfx950's own (``attention_split``: decode splits whatever the 2D grid, the
  segment count fills the CUs' resident slots once), from the model of MI355X time.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from rocke.kernels.common.attention_problem import AttentionCapabilities, UnifiedAttentionProblem
from rocke.kernels.common.knobs import AttentionKnobs
from rocke.kernels.gfx942 import attention_dispatch as gfx942
from rocke.kernels.gfx942 import attention_policy as policy
from rocke.kernels.gfx942 import attention_quant as quant
from rocke.kernels.gfx942 import attention_spill
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx950 import attention_split as split
from rocke.kernels.gfx950.attention import (NARROW_ATOMS, SPEC_CLASSES, TARGET, X8T_ATOMS,
                                           UnifiedAttention2DSpec)

CAPABILITIES = AttentionCapabilities(head_sizes=a2.HEAD_SIZES, block_sizes=a2.BLOCK_SIZES,
                                     max_group=a2.MAX_GROUP_SPLIT,   # groups above 16: split_group
                                     kv_dtypes=quant.on_target(a2.KV_DTYPES, TARGET),
                                     token_scale_kv_dtypes=quant.on_target(
                                         quant.TOKEN_SCALE_KV_DTYPES, TARGET),
                                     out_dtypes=quant.on_target(quant.OUT_DTYPES, TARGET))

# the plan and its launches are gfx942's, over gfx950's kernels
Plan = gfx942.Plan
Geometry = gfx942.Geometry
launches = gfx942.launches
recommend_graph_replay = gfx942.recommend_graph_replay


def num_sms() -> int:
    """Compute units of the device (gfx942's rule with gfx950's count: 256 for MI355X)."""
    return gfx942.num_sms(TARGET)


def select_path(p: UnifiedAttentionProblem, sms: int | None = None) -> tuple[str, str]:
    """(path, reason): gfx950's PATH_RULES (``attention_split``) with gfx950's compute units."""
    return split.select_path(p, num_sms() if sms is None else sms)


# gfx950's tile rules over gfx942's geometry, first match wins: (applies(problem, geometry),
# tile, reason). Figures: `rocke report`-style resources of the gfx950 builds (LLVM 22), and
# ``lds_model``; the speed-up of fewer, longer tile steps is modelled, not measured (no MI355X).
TILE_RULES: tuple[tuple[Callable, int, str], ...] = (
    (lambda p, g: (g.path == "2d" and g.regime == policy.TRANSPOSED_X8 and p.head_size == 128
                   and g.name in ("wide4", "wide2") and g.tile_size < 64), 64,
     "gfx950 LDS (160 KiB): fp16 d128 wide4/wide2 walk T = 64 -- K + V^T + the aliased stages "
     "take 52 / 35 KiB, so the VGPR-bound 2 waves per SIMD (238 / 252 VGPRs, no spills) still "
     "fit, with half the tile steps and barriers of T = 32; gfx942's 64 KiB would hold one wide4 "
     "workgroup per CU at T = 64, hence its T = 32. L4 keeps T = 32: at T = 64 its four "
     "workgroups fill the LDS and it drops to 1 wave per SIMD"),
)


# (applies(problem, gfx942's geometry), reason), first match wins: the problem takes the geometry
# row fp16 would take, when that row is transposed-x8
REGIME_RULES: tuple[tuple[Callable, str], ...] = (
    (lambda p, g: g.path == "2d" and p.dtype == "bf16" and g.regime == policy.NARROW,
     "gfx950: bf16 takes fp16's transposed-x8 row -- the wide-K 32x32x16 atom has bf16 (CDNA4; "
     "gfx942's rules run bf16 narrow), so P^T stays in registers instead of a round trip "
     "through LDS, and the native v_cvt_pk_bf16_f32 rounds it (no compare per value: the "
     "integer rounding's lane masks spilled SGPRs); modelled, not measured (no MI355X)"),
)


def geometry(p: UnifiedAttentionProblem, path: str, knobs: AttentionKnobs | None = None,
             sms: int | None = None) -> Geometry:
    """gfx942's GEOMETRY_RULES row for ``path`` (3D's segment count by gfx950's rule,
    ``attention_split.num_segments``; not gfx942's one-round tile, whose LDS check and model are
    MI300X's), fp16's transposed-x8 row instead where ``REGIME_RULES`` say so, then the first of
    ``TILE_RULES`` that applies."""
    sms = num_sms() if sms is None else sms
    geo = gfx942.table_geometry(p, path, knobs, sms)
    for applies, reason in REGIME_RULES:
        if applies(p, geo):
            as_fp16 = gfx942.table_geometry(replace(p, dtype="f16"), path, knobs, sms)
            if as_fp16.regime == policy.TRANSPOSED_X8:
                geo = replace(as_fp16, reason=f"{as_fp16.reason}; {reason}")
            break
    if path == "3d":
        geo = replace(geo, num_segments=split.num_segments(p, geo, sms))
    for applies, tile, reason in TILE_RULES:
        if applies(p, geo):
            single = policy.default_k_single_buffer(True, geo.num_warps, geo.block_m_per_warp, tile)
            geo = replace(geo, tile_size=tile, k_single_buffer=single, reason=f"{geo.reason}; {reason}")
            break
    return window_geometry(p, geo) if knobs is None or knobs.num_warps is None else geo


def _window_only(p: UnifiedAttentionProblem) -> bool:
    """A sliding window and no other score feature (the geometries WINDOW_RULES were compiled for)."""
    return (p.window_left >= 0 and not (p.softcap > 0 or p.alibi or p.qq_bias or p.sinks
                                         or p.mm_ranges) and not p.quant_spec_fields())


# (applies(problem, geometry), geometry row, reason), first match wins: a sliding-window
# problem's transposed-x8 geometry becomes the row's, at T = 2 * block_size
WINDOW_RULES: tuple[tuple[Callable, str, str], ...] = (
    (lambda p, g: (g.path == "2d" and g.regime == policy.TRANSPOSED_X8 and g.num_warps == 4
                   and _window_only(p) and p.dtype == "bf16" and p.kv_dtype is None
                   and p.block_size in (16, 32)), "wide2",
     "gfx950 sliding window, bf16 (prelude-light): the K walk is a handful of tiles, so the "
     "per-workgroup prelude (Q stage, interval mask, first loads) dominates; 2 warps halve it and "
     "double the workgroups, T = 2 * block_size. d128 block 32: wide4 holds 1 workgroup per CU "
     "(256 VGPRs, 1 wave per SIMD), wide2 2 (k1, 35 KiB LDS); d128 / d64 block 16 and d64 block "
     "32: wide2 at 2 waves per SIMD, 4 workgroups per CU; all spill-free (LLVM 22). fp8 KV keeps "
     "4 warps; block 64 keeps wide4 (T = 128 is no tile of the spec). Not measured (no MI355X), "
     "and rocke's MI355X model does not show the gain: d128 block 32, window 128, 2 x (256 "
     "queries, 1024 keys) x 64, wide4 86.5 / 96.6 / 116.8 us -> wide2 95.0 / 105.1 / 125.3 us "
     "modelled at 1000 / 2000 / 4000 cycles (twice the K/V tile loads); to be measured"),
)


def window_geometry(p: UnifiedAttentionProblem, geo: Geometry) -> Geometry:
    """``geo``, or the first ``WINDOW_RULES`` row's geometry at T = 2 * block_size."""
    for applies, name, reason in WINDOW_RULES:
        if applies(p, geo):
            row = policy.geometry(name)
            tile = 2 * p.block_size
            return replace(geo, name=row.name, num_warps=row.num_warps,
                           block_m_per_warp=row.block_m_per_warp, tile_size=tile,
                           k_single_buffer=policy.default_k_single_buffer(
                               True, row.num_warps, row.block_m_per_warp, tile),
                           reason=f"{geo.reason}; {reason}")
    return geo


# (applies(geometry), narrow_atom, reason), first match wins; the 2D narrow spec takes the atom
ATOM_RULES: tuple[tuple[Callable, str, str], ...] = (
    (lambda g: g.path == "2d" and g.regime == policy.NARROW and g.tile_size % 32 == 0, "16x16x32",
     "gfx950 wide-K: the narrow path's QK^T and PV reduce 32 elements per MFMA (16x16x32, "
     "CDNA4), half the MFMA issues of 16x16x16 for the same 16x16 accumulators (modelled, not "
     "measured); a 16-key tile (block size 16) keeps 16x16x16"),
)


# (applies(geometry), x8t_atom, reason), first match wins; the 2D transposed-x8 spec takes the atom
X8T_ATOM_RULES: tuple[tuple[Callable, str, str], ...] = (
    (lambda g: g.path == "2d" and g.regime == policy.TRANSPOSED_X8, "32x32x16",
     "gfx950 wide-K: the transposed-x8 regime's S^T = K Q^T and O^T = V^T P^T reduce 16 elements "
     "per MFMA (32x32x16, CDNA4), half the MFMA issues of 32x32x8 for the same 32x32 "
     "accumulators; P^T feeds PV in the accumulator's key order, V^T gathered to match "
     "(rocke.dsl.softmax.transposed_pv_operand; modelled, not measured)"),
)


def narrow_atom(geo: Geometry) -> tuple[str, str] | None:
    """(atom, reason) of the first ``ATOM_RULES`` row that applies, else None (16x16x16)."""
    for applies, atom, reason in ATOM_RULES:
        if applies(geo):
            return atom, reason
    return None


def x8t_atom(geo: Geometry) -> tuple[str, str] | None:
    """(atom, reason) of the first ``X8T_ATOM_RULES`` row that applies, else None (32x32x8)."""
    for applies, atom, reason in X8T_ATOM_RULES:
        if applies(geo):
            return atom, reason
    return None


def plan(problem: UnifiedAttentionProblem, backend: str = "auto",
         knobs: AttentionKnobs | None = None, *, with_specs: bool = True,
         num_segments: int | None = None, sms: int | None = None) -> Plan:
    """Path, geometry and gfx950 kernel specs of ``problem`` (refused if gfx950 has no kernel
    for it); arguments as gfx942's ``plan``."""
    sms = num_sms() if sms is None else sms
    path, reason = backend, None
    if backend == "auto" and not problem.batch_invariant:    # (batch invariance: gfx942's 2D)
        CAPABILITIES.check(problem)
        path, reason = select_path(problem, sms)
    the_plan = gfx942.plan(problem, path, knobs, with_specs=with_specs,
                           num_segments=num_segments, sms=sms, capabilities=CAPABILITIES,
                           spec_classes=SPEC_CLASSES, geometry_of=geometry)
    if reason is not None:
        the_plan = replace(the_plan, reason=reason)
    the_plan = _window_interval_mask(the_plan)
    for field, rule in (("narrow_atom", narrow_atom), ("x8t_atom", x8t_atom)):
        wide = rule(the_plan.geometry)
        if wide is None:
            continue
        atom, reason = wide
        geo = replace(the_plan.geometry, name=f"{the_plan.geometry.name}_{atom}",
                      reason=f"{the_plan.geometry.reason}; {reason}")
        specs = tuple(replace(s, **{field: atom}) if isinstance(s, UnifiedAttention2DSpec) else s
                      for s in the_plan.specs)
        the_plan = replace(the_plan, geometry=geo, specs=specs)
        break
    return _waves_per_eu(the_plan)


WINDOW_INTERVAL_REASON = (
    "gfx950: a sliding window on the 2D transposed-x8 regime masks by one interval per query row "
    "(spec interval_mask), also alone: the plain mask's two window compares and per-score token "
    "division spilled 9-10 SGPRs on fp16 d128 wide4 (T = 32 and 64, both atoms) and 17 on L4 "
    "with LLVM 22's gfx950 schedule; the interval mask none (gfx942 takes it too: "
    "attention_dispatch.x8_window_interval)")


def _window_interval_mask(the_plan: Plan) -> Plan:
    """The plan with ``interval_mask`` on its 2D transposed-x8 spec when the problem has a
    sliding window (mm ranges already mask by interval): ``WINDOW_INTERVAL_REASON``."""
    p, geo = the_plan.problem, the_plan.geometry
    if not (geo.path == "2d" and geo.regime == policy.TRANSPOSED_X8 and p.window_left >= 0
            and not p.mm_ranges) or not the_plan.specs or the_plan.specs[0].interval_mask:
        return the_plan
    return replace(the_plan, geometry=replace(geo, reason=f"{geo.reason}; {WINDOW_INTERVAL_REASON}"),
                   specs=tuple(replace(s, interval_mask=True) for s in the_plan.specs))


# the one kernel WAVES_RULES were compiled for, at fp16 / bf16 (its other fields the defaults)
_D64_B32_G8_WIDE4 = UnifiedAttention2DSpec(dtype="bf16", head_size=64, block_size=32,
                                           num_queries_per_kv=8, num_warps=4, block_m_per_warp=32,
                                           tile_size=64, regime=policy.TRANSPOSED_X8)

# (applies(problem, 2D spec), waves_per_eu, reason), first match wins; only a spec without a
# waves_per_eu of its own (the knob's) takes it
WAVES_RULES: tuple[tuple[Callable, int, str], ...] = (
    (lambda p, s: p.num_seqs > 1 and replace(s, dtype="bf16") == _D64_B32_G8_WIDE4, 3,
     "gfx950 waves_per_eu=3: the d64 block-32 GQA-8 multi-sequence (chunked prefill) combo is "
     "VGPR-bound at 172 VGPRs, 2 waves per SIMD (2 workgroups per CU); asking for 3 compiles it "
     "to 168, 3 waves per SIMD (3 workgroups per CU), no spills (fp16 and bf16, LLVM 22); 4 "
     "would need 128 VGPRs and spills 346. Not measured (no MI355X); modelled MI355X time, bf16, "
     "2 x (256 queries, 1024 keys) x 64: 101.7 / 108.8 / 162.1 us -> 109.6 / 108.2 / 124.9 us at "
     "1000 / 2000 / 4000 cycles of memory latency (the extra waves pay only where latency is long)"),
)


def _waves_per_eu(the_plan: Plan) -> Plan:
    """The plan with the first ``WAVES_RULES`` row's waves_per_eu on its 2D spec."""
    specs = the_plan.specs
    if len(specs) != 1 or not isinstance(specs[0], UnifiedAttention2DSpec) or specs[0].waves_per_eu:
        return the_plan
    for applies, waves, reason in WAVES_RULES:
        if applies(the_plan.problem, specs[0]):
            geo = the_plan.geometry
            return replace(the_plan, geometry=replace(geo, reason=f"{geo.reason}; {reason}"),
                           specs=(replace(specs[0], waves_per_eu=waves),))
    return the_plan


def spill_candidate(spec, **fields):
    """A spill-fallback candidate of ``spec`` (attention_spill.chain_for, ALGORITHM.md §10.5):
    ``spec`` with ``fields``; a 2D spec whose geometry changes beyond its K buffering takes the
    atoms gfx950's rules give the new geometry (``X8T_ATOM_RULES``: 32x32x16 on transposed-x8;
    ``ATOM_RULES``: 16x16x32 on a narrow tile of whole 32-key steps, else 16x16x16), as
    ``plan`` would. ValueError when the spec refuses them (the gate, ``supports_tiled_2d``)."""
    if not isinstance(spec, UnifiedAttention2DSpec) or all(
            k == "use_k_single_buffer" or getattr(spec, k) == v for k, v in fields.items()):
        return replace(spec, **fields)
    cand = replace(spec, **fields, narrow_atom="16x16x16", x8t_atom=None)
    geo = Geometry(path="2d", regime=cand.regime, name="", num_warps=cand.num_warps,
                   block_m_per_warp=cand.block_m_per_warp, tile_size=cand.tile_size,
                   k_single_buffer=cand.use_k_single_buffer)
    atoms = {field: rule(geo)[0] for field, rule in (("narrow_atom", narrow_atom),
                                                     ("x8t_atom", x8t_atom)) if rule(geo)}
    return replace(cand, **atoms) if atoms else cand


def spill_free_plan(the_plan: Plan, spills_of: Callable) -> Plan:
    """The plan to launch: ``the_plan``, its attention kernel replaced by the first spill-free
    candidate of gfx942's chain with gfx950's atoms (``spill_candidate``) when the planned
    kernel's code spills (attention_spill, ALGORITHM.md §10.5); spill-free plans as planned."""
    chosen = attention_spill.spill_free_plan(the_plan, spills_of)
    if chosen.specs[:1] == the_plan.specs[:1]:
        return chosen
    spec, geo = chosen.specs[0], chosen.geometry
    if not isinstance(spec, UnifiedAttention2DSpec):
        return chosen
    atom = spec.x8t_atom if spec.transposed_x8 else spec.narrow_atom
    name = geo.name
    for old in NARROW_ATOMS + X8T_ATOMS:          # the planned geometry's atom, as plan names it
        name = name.removesuffix(f"_{old}")
    name += "" if atom in (NARROW_ATOMS[0], X8T_ATOMS[0]) else f"_{atom}"
    return replace(chosen, geometry=replace(geo, name=name))
