import itertools

import pytest

from rocke.arch import GFX942, MFMA_CATALOG, atom_for, get_atom, get_target, occupancy


@pytest.mark.parametrize("key", sorted(MFMA_CATALOG))
def test_mfma_layouts_are_bijections(key):
    a = MFMA_CATALOG[key]
    assert a.k_per_lane * 64 == a.m * a.k * a.blocks
    assert a.acc_regs * 64 == a.m * a.n * a.blocks
    want_a = set(itertools.product(range(a.blocks), range(a.m), range(a.k)))
    want_b = set(itertools.product(range(a.blocks), range(a.k), range(a.n)))
    want_c = set(itertools.product(range(a.blocks), range(a.m), range(a.n)))
    got_a = [tuple(x) for x in a.a_table.reshape(-1, 3)]
    got_b = [tuple(x) for x in a.b_table.reshape(-1, 3)]
    got_c = [tuple(x) for x in a.c_table.reshape(-1, 3)]
    assert len(got_a) == len(set(got_a)) and set(got_a) == want_a
    assert len(got_b) == len(set(got_b)) and set(got_b) == want_b
    assert len(got_c) == len(set(got_c)) and set(got_c) == want_c


def test_known_layout_points():
    # Facts read off AMD's matrix instruction calculator for gfx942.
    a = get_atom("32x32x8_f16")
    assert a.a_coord(32, 0) == (0, 0, 4)        # lane 32 holds A[0][4..7]
    assert a.b_coord(33, 3) == (0, 7, 1)        # lane 33 holds B[4..7][1]
    assert a.c_coord(0, 4) == (0, 8, 0)         # reg 4 of lane 0 is D[8][0]
    assert a.c_coord(32, 0) == (0, 4, 0)
    b = get_atom("16x16x16_bf16")
    assert b.c_coord(17, 2) == (0, 6, 1)
    assert b.a_coord(48, 1) == (0, 0, 13)
    c = get_atom("4x4x4_16b_f16")
    assert c.c_coord(7, 1) == (1, 1, 3)
    f = get_atom("16x16x32_fp8_bf8")
    assert f.k_per_lane == 8 and f.ir_operand_type == "i64" and f.intrinsic.endswith("fp8.bf8")


def test_catalog_lookup_errors():
    with pytest.raises(ValueError, match="valid atoms"):
        get_atom("32x32x16_f16")
    with pytest.raises(ValueError, match="no MFMA atom"):
        get_atom("16x16x32_fp8_fp8", target="gfx950")
    assert atom_for("16x16x16", "bf16").mnemonic == "v_mfma_f32_16x16x16_bf16"
    assert atom_for("32x32x16", "fp8_e4m3fnuz", "fp8_e5m2fnuz").key == "32x32x16_fp8_bf8"
    with pytest.raises(ValueError, match="f32"):
        atom_for("16x16x16", "f32")


def test_targets():
    assert get_target("gfx942:sramecc+:xnack-") is GFX942
    assert GFX942.cu_count == 304 and GFX942.waves_per_cu == 32
    with pytest.raises(ValueError, match="gfx1100"):
        get_target("gfx1100")


def test_occupancy_limits():
    # 128 VGPRs -> 512/128 = 4 waves/SIMD; 32 KiB LDS -> 2 workgroups of 4 waves per CU.
    o = occupancy(vgprs=128, sgprs=40, lds_bytes=32 * 1024, workgroup_size=256)
    assert (o.workgroups_per_cu, o.waves_per_simd, o.limiter) == (2, 2, "lds")
    # AGPRs: accum_offset = round4(90) = 92, +100 AGPRs = 192 -> 2 waves/SIMD
    o = occupancy(vgprs=90, agprs=100, workgroup_size=64)
    assert o.unified_vgprs == 192 and o.waves_per_simd == 2 and o.limiter == "vgpr"
    o = occupancy(vgprs=24, workgroup_size=1024)   # 16 waves/WG -> 2 WG/CU by wave slots
    assert o.workgroups_per_cu == 2 and o.waves_per_simd == 8
    with pytest.raises(ValueError, match="workgroup_size"):
        occupancy(vgprs=8, workgroup_size=0)
    with pytest.raises(ValueError, match="lds_bytes"):
        occupancy(vgprs=8, lds_bytes=70000)
