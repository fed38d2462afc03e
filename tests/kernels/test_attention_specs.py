"""Specs of the gfx942 attention kernels: rules, gates, kernel names, the LDS model against the
compiled kernel, launch-argument checks."""

import dataclasses
import itertools

import pytest
import torch

from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx942 import attention_tiled_3d as a3
from rocke.kernels.gfx942 import attention_policy as policy
from tests.kernels.test_attention_2d import FLASH, compiled, make_problem

S2 = a2.UnifiedAttention2DSpec


GRID = {
    "dtype": ["f16", "bf16", "f32"],
    "head_size": [64, 128, 96],
    "block_size": [16, 64, 8],
    "num_queries_per_kv": [1, 5, 17],
    "num_warps": [1, 4, 8, 3],
    "block_m_per_warp": [16, 32],
    "tile_size": [0, 16, 64, 48],
    "regime": ["narrow", "transposed_x8", "x8"],
    "global_load_lds_k": [False, True],
    "cfv_store": [False, True],
}


def _constructs(cls, fields) -> bool:
    try:
        cls(**fields)
        return True
    except ValueError:
        return False


LDS_BYTES = 64 * 1024           # gfx942's LDS per workgroup (CDNA3 ISA guide)


def _rules_allow(f) -> bool:
    """The spec's rules restated from ALGORITHM.md §8-9 and the spec's docstrings, independently
    of ``spec_problems``: the oracle both the constructor and the gate are held to."""
    dtype, D, bs, g = f["dtype"], f["head_size"], f["block_size"], f["num_queries_per_kv"]
    warps, rows, tile = f["num_warps"], f["block_m_per_warp"], f["tile_size"]
    regime, dma, cfv = f["regime"], f["global_load_lds_k"], f["cfv_store"]
    flash = regime == "transposed_x8"
    if dtype not in ("f16", "bf16") or D not in (64, 128, 256) or bs not in (16, 32, 64) \
            or not 1 <= g <= 16 or warps not in (1, 2, 4, 8) or tile not in (0, 16, 32, 64):
        return False
    if regime not in ("narrow", "transposed_x8") \
            or (flash and D not in (64, 128)):
        return False
    tile = tile or (64 if flash else min(bs, 32 if D <= 128 else 16))
    block_m = warps * rows
    if flash and (rows != 32 or tile % 32):
        return False
    if g > block_m or (tile % bs and bs % tile):
        return False
    rows_per_copy = 256 // (2 * D) if dma else 512 // D       # 64 lanes x 8 halves (or one dword)
    if bs % max(1, rows_per_copy):
        return False
    single = (warps * 32 if flash else block_m) <= tile
    k = (1 if single else 2) * tile * (D + (0 if dma and 2 * D < 256 else 8)) * 2
    v = tile * (D + (8 if flash else 4)) * 2 if cfv else D * (tile + 8) * 2
    p = 0 if flash else block_m * (tile + 8) * 2
    staged = max(block_m * (D + (0 if flash else 8)) * 2, block_m * D * 2 if flash else 0)
    return max(k + v + p, staged) <= LDS_BYTES


@pytest.mark.parametrize("cls, gate", [(a2.UnifiedAttention2DSpec, a2.supports_tiled_2d),
                                       (a3.UnifiedAttention3DSpec, a3.supports_tiled_3d)])
def test_gate_accepts_exactly_what_the_constructor_accepts(cls, gate):
    names = list(GRID)
    accepted = rejected = 0
    for values in itertools.product(*GRID.values()):
        fields = dict(zip(names, values))
        ok = _constructs(cls, fields)
        assert ok == _rules_allow(fields), fields
        assert gate(**fields) == ok, fields
        accepted += ok
        rejected += not ok
    assert accepted > 100 and rejected > 100      # the grid exercises both sides
    # a constructed spec passed back to the gate is accepted
    assert gate(cls(**FLASH, num_warps=4))


@pytest.mark.parametrize("fields, message", [
    (dict(dtype="bf16", regime="transposed_x8", block_m_per_warp=32), None),  # 32x32x8 has bf16
    (dict(regime="flash"), "^regime: "),
    (dict(FLASH, block_m_per_warp=16), "block_m_per_warp: the transposed-x8 path gives each warp 32"),
    (dict(FLASH, tile_size=16), "tile_size: 16 must be a multiple of the 32x32x8 atom's M"),
    (dict(head_size=96), "head_size: must be one of 64, 128"),
    (dict(block_size=8), "block_size: must be one of 16, 32, 64"),
    (dict(num_queries_per_kv=0), "num_queries_per_kv: must be an int in \\[1, 16\\]"),
    (dict(num_queries_per_kv=17), "num_queries_per_kv: must be an int"),
    (dict(num_warps=1, num_queries_per_kv=16, block_m_per_warp=16, tile_size=16), None),
    (dict(num_warps=3), "num_warps: must be one of 1, 2, 4, 8"),
    (dict(tile_size=48), "tile_size: must be one of 0, 16, 32, 64"),
    (dict(block_size=64, tile_size=16, head_size=64, global_load_lds_k=False), None),
    (dict(kv_cache_policy="bypass"), "kv_cache_policy: must be one of normal, stream"),
    (dict(waves_per_eu=9), "waves_per_eu: must be an int in \\[0, 8\\]"),
    (dict(iglp=1), "iglp: must be a bool"),
    (dict(use_k_single_buffer="yes"), "use_k_single_buffer: must be a bool"),
    (dict(num_warps=8, block_m_per_warp=32, tile_size=64), "tile_size: the narrow path needs .* bytes of LDS"),
])
def test_spec_rules_name_the_field(fields, message):
    if message is None:
        S2(**fields)
        return
    with pytest.raises(ValueError, match=message):
        S2(**fields)


def test_narrow_lds_gate_would_reject_what_the_flash_model_accepts():
    """The narrow footprint (P in LDS) over-counts the transposed path, which keeps P in registers."""
    flash = S2(**FLASH, num_warps=8, tile_size=64, head_size=128)
    assert a2.supports_tiled_2d(flash)
    narrow_fields = {f.name: getattr(flash, f.name) for f in dataclasses.fields(flash)}
    narrow_fields.update(regime="narrow")
    assert not a2.supports_tiled_2d(**narrow_fields)
    with pytest.raises(ValueError, match="the narrow path needs 90112 bytes of LDS"):
        S2(**narrow_fields)


LEVER_VALUES = {"waves_per_eu": 2, "iglp": True, "kv_cache_policy": "stream", "q_direct": True,
                "global_load_lds_k": True, "q_major_grid": True, "cfv_store": True, "kv_addr_64": True,
                "use_k_single_buffer": True, "num_queries_per_kv": 5, "tile_size": 32,
                "block_m_per_warp": 32, "num_warps": 2, "block_size": 32, "dtype": "bf16", "head_size": 64}


@pytest.mark.parametrize("field", sorted(LEVER_VALUES))
def test_every_field_changes_the_name_and_the_code(field):
    base = S2(dtype="f16", head_size=128, block_size=16, num_warps=4, tile_size=16)
    changed = dataclasses.replace(base, **{field: LEVER_VALUES[field]})
    assert changed.kernel_name != base.kernel_name
    assert a2.build(changed).ir() != a2.build(base).ir()


def test_flash_geometry_names_are_distinct():
    names = {S2(**a2.transposed_x8_geometry(g, 128)).kernel_name for g in a2.TRANSPOSED_X8_GEOMETRIES}
    assert len(names) == 3


LDS_CASES = {
    "wide4_d128": a2.VARIANTS["wide4_f16_d128_b64_g8"],
    "wide2_d128": a2.VARIANTS["wide2_f16_d128_b16_g5"],
    "L4_d128": a2.VARIANTS["L4_f16_d128_b32_g1"],
    "wide4_d64": a2.VARIANTS["wide4_f16_d64_b16_g1"],
    "narrow_d64": a2.VARIANTS["narrow_f16_d64_b32_g4"],
    "narrow_d128_qdirect_cfv": S2(dtype="bf16", head_size=128, block_size=32, num_warps=2, q_direct=True,
                                  cfv_store=True),
    "wide2_d64_kdma": S2(**FLASH, num_warps=2, head_size=64, global_load_lds_k=True),
    "3d_L4": a3.VARIANTS["L4_f16_d128_b16_g8"],
}


@pytest.mark.parametrize("name", sorted(LDS_CASES))
def test_lds_model_matches_the_compiled_kernel(name):
    spec = LDS_CASES[name]
    build = a3.build if isinstance(spec, a3.UnifiedAttention3DSpec) else a2.build
    assert sum(a2.lds_model(spec).values()) == compiled(spec, build).info.lds_bytes


def test_wide4_d128_fits_two_workgroups_per_cu():
    """The d128 f16 wide4 flash geometry at >= 2 workgroups per CU."""
    for name, spec in a2.VARIANTS.items():
        if name.startswith("wide4_f16_d128"):
            info = compiled(spec).info
            assert info.occupancy.workgroups_per_cu >= 2, (name, info)
            assert info.vgpr_spills == 0 and info.sgpr_spills == 0


def test_launch_geometry():
    spec = S2(dtype="f16", head_size=64, block_size=16, num_warps=2, num_queries_per_kv=5)
    assert spec.block_q == 6                             # 32 rows // 5
    grid, block = a2.launch_geometry(spec, 3, 40, 4)
    assert grid == (4, 40 // 6 + 3, 1) and block == (128, 1, 1)
    qm = dataclasses.replace(spec, q_major_grid=True)
    assert a2.launch_geometry(qm, 3, 40, 4)[0] == (40 // 6 + 3, 4, 1)
    s3 = a3.UnifiedAttention3DSpec(dtype="f16", head_size=64, block_size=16, num_warps=1)
    assert a3.launch_geometry(s3, 2, 2, 8, 5) == ((2 // 16 + 2, 8, 5), (64, 1, 1))
    with pytest.raises(ValueError, match="num_kv_heads: must be an int"):
        a2.launch_geometry(spec, 3, 40, 0)


def test_kernel_args_checks():
    spec = S2(dtype="f16", head_size=64, block_size=16, num_warps=1, num_queries_per_kv=2)
    q, kc, vc, table, cu, seqused = make_problem("f16", 64, 16, 2, [2, 3], [5, 9], num_kv_heads=2)
    out = torch.zeros_like(q)
    args = a2.kernel_args(spec, q, kc, vc, out, table, cu, seqused, 0.1)
    assert len(args) == len(a2.ARGS)
    with pytest.raises(ValueError, match="k_cache: dtype must be"):
        a2.kernel_args(spec, q, kc.bfloat16(), vc, out, table, cu, seqused, 0.1)
    with pytest.raises(ValueError, match="num_queries_per_kv 2"):
        a2.kernel_args(spec, q[:, :3], kc, vc, out[:, :3], table, cu, seqused, 0.1)
    with pytest.raises(ValueError, match="block_size 16"):
        big = torch.zeros(4, 32, 2, 64, dtype=torch.float16)
        a2.kernel_args(spec, q, big, big, out, table, cu, seqused, 0.1)
    with pytest.raises(ValueError, match="seqused_k: must be a 1-D int32"):
        a2.kernel_args(spec, q, kc, vc, out, table, cu, seqused.long(), 0.1)
    with pytest.raises(ValueError, match="2 table rows for 3 sequences"):
        a2.kernel_args(spec, q, kc, vc, out, table, torch.tensor([0, 1, 2, 5], dtype=torch.int32),
                       torch.tensor([5, 9, 9], dtype=torch.int32), 0.1)
    with pytest.raises(ValueError, match="out: shape"):
        a2.kernel_args(spec, q, kc, vc, out[:1], table, cu, seqused, 0.1)


def _worst_bank_conflict(dword_addresses):
    """Most distinct dwords one LDS bank serves in one access, per half wave (32 banks x 4 B)."""
    import numpy as np
    worst = 0
    for half in (slice(0, 32), slice(32, 64)):
        distinct = np.unique(dword_addresses[half])
        worst = max(worst, int(np.bincount(distinct % 32).max()))
    return worst


@pytest.mark.parametrize("head_size", [64, 128])
@pytest.mark.parametrize("flash", [False, True])
def test_cfv_store_layout_is_bank_conflict_free(head_size, flash):
    """ALGORITHM.md §9: with cfv_store the V tile is row-major with a pitch of 2 (narrow) / 4
    (flash) dwords mod 8: the PV operand reads and the row stores hit distinct banks, where the
    default V^T tile's column stores pile onto one bank."""
    import numpy as np
    from rocke.arch.mfma import atom_for
    from rocke.dsl.tv_layout import TVLayout
    pitch = head_size + policy.v_tile_pad(flash)
    atom = atom_for("32x32x8" if flash else "16x16x16", "f16")
    layout = TVLayout.mfma_a(atom) if flash else TVLayout.mfma_b(atom)
    for v in range(layout.values_per_lane):      # the PV operand reads, one per register
        rc = layout.coords[:, v]
        key, d = (rc[:, 1], rc[:, 0]) if flash else (rc[:, 0], rc[:, 1])
        assert _worst_bank_conflict((key * pitch + d) // 2) == 1
    lanes = np.arange(64)
    per_row = head_size // a2.STAGING_VECTOR     # the copy's 16-byte row stores
    row, col = lanes // per_row, (lanes % per_row) * a2.STAGING_VECTOR
    first = (row * pitch + col) // 2
    for group in range(0, 64, 8):                 # a ds_write_b128 serves 8 lanes x 4 dwords per pass
        dwords = (first[group:group + 8, None] + np.arange(4)).ravel()
        assert len(set(dwords % 32)) == 32
    tile = 32                                     # default V^T: each element its own column store
    vt_pitch = tile + policy.LDS_PAD
    assert _worst_bank_conflict(((col + 0) * vt_pitch + row) // 2) >= 8
