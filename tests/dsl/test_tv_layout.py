import numpy as np
import pytest

from rocke.arch import MFMA_CATALOG, get_atom
from rocke.dsl.tv_layout import COL, ROW, LaneAffine, TVLayout

SINGLE = sorted(k for k, a in MFMA_CATALOG.items() if a.blocks == 1)


@pytest.mark.parametrize("key", SINGLE)
def test_lane_parts_reconstruct_coordinates(key):
    atom = get_atom(key)
    for lay in (TVLayout.mfma_a(atom), TVLayout.mfma_b(atom), TVLayout.mfma_c(atom)):
        lanes = np.arange(64)
        for axis in (ROW, COL):
            got = lay.lane_part(axis)(lanes)[:, None] + np.array(lay.value_offsets(axis))[None, :]
            np.testing.assert_array_equal(got, lay.coords[:, :, axis])


@pytest.mark.parametrize("key", SINGLE)
def test_row_reduction_plan_reduces_exactly_each_row(key):
    """Simulate the plan on a random tile in numpy: every lane must end with the true row max."""
    lay = TVLayout.mfma_c(get_atom(key))
    rng = np.random.default_rng(0)
    tile = rng.standard_normal(lay.shape)
    vals = tile[lay.coords[..., 0], lay.coords[..., 1]]           # [64, values]
    plan = lay.reduce_plan(COL)
    red = np.stack([vals[:, list(g)].max(axis=1) for g in plan.in_lane], axis=1)
    for m in plan.xor_masks:
        red = np.maximum(red, red[np.arange(64) ^ m])
    rows = lay.reduced_coords(COL)
    np.testing.assert_array_equal(red, tile.max(axis=1)[rows])


def test_accumulator_is_next_operand_in_place():
    a = get_atom("32x32x8_f16")
    c, b = TVLayout.mfma_c(a), TVLayout.mfma_b(a)
    assert [c.values_matching(b, (8 * j, 0)) for j in range(4)] == [
        (0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert c.values_matching(TVLayout.mfma_a(a)) is None       # A needs a shuffle


def test_lane_affine_fit_and_reject():
    f = LaneAffine.fit(np.arange(64) % 32 + 4 * (np.arange(64) // 32))
    assert f.terms == ((0, 31, 1), (5, 1, 4))
    assert LaneAffine.fit(np.arange(64) ** 2) is None


def test_bad_layouts_rejected():
    coords = np.zeros((64, 1, 2), dtype=int)
    with pytest.raises(ValueError, match="exactly once"):
        TVLayout("dup", (8, 8), coords)
    with pytest.raises(ValueError, match="single-block"):
        TVLayout.mfma_c(get_atom("4x4x4_16b_f16"))
