import numpy as np
import pytest

from rocke.arch import MFMA_CATALOG, get_atom
from rocke.dsl.tv_layout import COL, ROW, LaneAffine, TVLayout

ALL = sorted(MFMA_CATALOG)


@pytest.mark.parametrize("key", ALL)
def test_lane_parts_reconstruct_coordinates(key):
    atom = get_atom(key, MFMA_CATALOG[key].targets[0])   # every target's atoms
    for lay in (TVLayout.mfma_a(atom), TVLayout.mfma_b(atom), TVLayout.mfma_c(atom)):
        lanes = np.arange(64)
        for axis in (ROW, COL):
            got = lay.lane_part(axis)(lanes)[:, None] + np.array(lay.value_offsets(axis))[None, :]
            np.testing.assert_array_equal(got, lay.coords[:, :, axis])


@pytest.mark.parametrize("key", ALL)
def test_row_reduction_plan_reduces_exactly_each_row(key):
    """Simulate the plan on a random tile in numpy: every lane must end with the true row max."""
    lay = TVLayout.mfma_c(get_atom(key, MFMA_CATALOG[key].targets[0]))
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


def test_multi_block_atoms_fold_the_block_into_rows_of_a_c_and_columns_of_b():
    """4x4x4_16b, per AMD's matrix instruction calculator: lane l holds A row l%4 of block l//4
    (k = 0..3), B column l%4 of block l//4, and C rows 0..3 (one per register) of column l%4 of
    block l//4. Folded: A row = C row = 4*block + row, B column = 4*block + col."""
    atom = get_atom("4x4x4_16b_f16")
    a, b, c = TVLayout.mfma_a(atom), TVLayout.mfma_b(atom), TVLayout.mfma_c(atom)
    assert (a.shape, b.shape, c.shape) == ((64, 4), (4, 64), (64, 4))
    lane = np.arange(64)[:, None]
    item = np.arange(4)[None, :]
    np.testing.assert_array_equal(a.coords[..., 0], np.broadcast_to(lane, (64, 4)))
    np.testing.assert_array_equal(a.coords[..., 1], np.broadcast_to(item, (64, 4)))
    np.testing.assert_array_equal(b.coords[..., 1], np.broadcast_to(lane, (64, 4)))
    np.testing.assert_array_equal(c.coords[..., 0], 4 * (lane // 4) + item)
    np.testing.assert_array_equal(c.coords[..., 1], np.broadcast_to(lane % 4, (64, 4)))
    # per-row sums combine the 4 lanes of a block; per-column sums of the folded tile span blocks
    assert c.reduce_plan(ROW).xor_masks == (4, 8, 16, 32) and c.reduce_plan(COL).xor_masks == (1, 2)


def test_fp8_atoms_hold_eight_consecutive_k_per_lane():
    a = TVLayout.mfma_a(get_atom("16x16x32_fp8_bf8"))
    assert a.shape == (16, 32) and a.value_runs() == ((0, 8),)
    assert a.lane_part(1)(np.arange(64)).tolist() == [8 * (l // 16) for l in range(64)]


def test_a_layouts_coordinates_cannot_change_under_its_memoised_queries():
    """A layout answers each query once (builders ask the same reduce plan, runs and lane parts
    thousands of times); its coordinates are read-only so no answer can go stale, and the
    answers are those of a fresh layout of the same table."""
    atom = MFMA_CATALOG["32x32x8_f16"]
    c = TVLayout.mfma_c(atom)
    first = c.reduce_plan(COL)
    assert c.reduce_plan(COL) is first and c.transpose() is c.transpose()
    with pytest.raises(ValueError):
        c.coords[0, 0, 0] = 1
    fresh = TVLayout("copy", c.shape, np.array(c.coords))
    assert fresh.reduce_plan(COL) == first and fresh.value_runs(ROW) == c.value_runs(ROW)
    assert c.transpose().same_as(fresh.transpose())
