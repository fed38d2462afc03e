"""Block reductions, argmax/argmin (lowest index on ties, NaN wins) and top-k from
rocke.dsl.reduce, run in the emulator and compared with torch."""
import pytest
import torch

from rocke import dsl
from rocke.dsl import Kernel
from rocke.dsl.reduce import (block_argmax, block_argmin, block_max, block_min, block_reduce, block_sum,
                              block_topk, wave_argmax, wave_topk)

from .emu_helper import run




@pytest.mark.parametrize("block", [64, 256])
@pytest.mark.parametrize("dt", ["f32", "i32"])
def test_block_sum_max_min_match_torch(block, dt):
    rows = 3
    k = Kernel(f"block_reduce_{dt}_{block}", workgroup_size=block)
    x = k.arg_ptr("x", dt, readonly=True)
    out = k.arg_ptr("out", dt)
    t, row = k.thread_id(0), k.block_id(0)
    v = x.load(row * block + t)
    s, hi, lo = block_sum(k, v), block_max(k, v), block_min(k, v)
    again = block_reduce(k, v * 2, "sum")          # a second call reuses the scratch slots
    with k.if_(t == 0):
        for j, r in enumerate((s, hi, lo, again)):
            out.store(row * 4 + j, r)
    if dt == "f32":
        src = (torch.randint(-50, 50, (rows, block)) / 4.0).float()   # exact sums in any order
    else:
        src = torch.randint(-2**20, 2**20, (rows, block), dtype=torch.int32)
    got = torch.zeros(rows * 4, dtype=src.dtype)
    run(k, (rows, 1, 1), [src.reshape(-1), got])
    want = torch.stack([src.sum(1).to(src.dtype), src.amax(1), src.amin(1), (src * 2).sum(1).to(src.dtype)], 1)
    assert torch.equal(got.view(rows, 4), want)


def _argmax_kernel(block, largest, dt="f32"):
    k = Kernel(f"argmax_{block}_{int(largest)}", workgroup_size=block)
    x = k.arg_ptr("x", dt, readonly=True)
    vals = k.arg_ptr("vals", dt)
    idxs = k.arg_ptr("idxs", dsl.i32)
    t, row = k.thread_id(0), k.block_id(0)
    v = x.load(row * block + t)
    fn = block_argmax if largest else block_argmin
    best, at = fn(k, v, t)
    wbest, wat = wave_argmax(v, t, largest=largest)          # each wave's own answer
    with k.if_(t == 0):
        vals.store(row, best)
        idxs.store(row, at)
    with k.if_((t % 64) == 0):
        idxs.store(1000 + row * (block // 64) + t // 64, wat)
    return k


@pytest.mark.parametrize("largest", [True, False])
def test_block_argmax_picks_the_lowest_index_on_ties_like_torch(largest):
    block, rows = 256, 4
    g = torch.Generator().manual_seed(7)
    src = torch.randint(-3, 4, (rows, block), generator=g).float()   # many ties
    src[1] = 2.0                                    # all equal: index 0
    src[2, 200] = src[2, 17] = src[2, 130] = (9.0 if largest else -9.0)   # ties across waves
    src[3, 70] = float("nan")                      # a NaN wins, like torch
    vals, idxs = torch.zeros(rows), torch.zeros(2000, dtype=torch.int32)
    run(_argmax_kernel(block, largest), (rows, 1, 1), [src.reshape(-1), vals, idxs])
    ref = src.argmax(1) if largest else src.argmin(1)
    # torch.argmax's tie rule is documented only for the first occurrence on CPU: check by hand
    for r in range(rows):
        row = src[r]
        if row.isnan().any():
            want = int(row.isnan().nonzero()[0])
        else:
            best = row.max() if largest else row.min()
            want = int((row == best).nonzero()[0])
        assert int(ref[r]) == want
        assert int(idxs[r]) == want, r
        assert (vals[r].isnan() and row[want].isnan()) or vals[r] == row[want]
        for w in range(block // 64):
            part = row[w * 64:(w + 1) * 64]
            pw = int(part.isnan().nonzero()[0]) if part.isnan().any() else \
                int((part == (part.max() if largest else part.min())).nonzero()[0])
            assert int(idxs[1000 + r * (block // 64) + w]) == w * 64 + pw


@pytest.mark.parametrize("block", [64, 128])
def test_topk_matches_a_stable_torch_sort_with_ties_and_a_ragged_row(block):
    rows, count = 3, 5
    k = Kernel(f"topk_{block}", workgroup_size=block)
    x = k.arg_ptr("x", dsl.f32, readonly=True)
    lens = k.arg_ptr("lens", dsl.i32, readonly=True)
    vals = k.arg_ptr("vals", dsl.f32)
    idxs = k.arg_ptr("idxs", dsl.i32)
    t, row = k.thread_id(0), k.block_id(0)
    ok = t < lens.load(row)
    v = x.load(row * block + t)
    top = block_topk(k, v, t, count, valid=ok) if block > 64 else wave_topk(v, t, count, valid=ok)
    low = wave_topk(v, t, 2, valid=ok, largest=False) if block == 64 else []
    with k.if_(t == 0):
        for j, (tv, ti) in enumerate(top + low):
            vals.store(row * 8 + j, tv)
            idxs.store(row * 8 + j, ti)
    g = torch.Generator().manual_seed(3)
    src = torch.randint(-4, 5, (rows, block), generator=g).float()
    length = torch.tensor([block, block - 9, 3], dtype=torch.int32)   # row 2 has fewer than k
    src[0, 5] = src[0, 40] = src[0, block - 1] = 50.0                  # a three-way tie on top
    got_v, got_i = torch.zeros(rows * 8), torch.full((rows * 8,), -7, dtype=torch.int32)
    run(k, (rows, 1, 1), [src.reshape(-1), length, got_v, got_i])
    for r in range(rows):
        n = int(length[r])
        order = sorted(range(n), key=lambda i: (-float(src[r, i]), i))   # ties: lowest index first
        want_i = order[:count] + [-1] * (count - min(count, n))
        want_v = [float(src[r, i]) for i in order[:count]] + [float("-inf")] * (count - min(count, n))
        assert got_i[r * 8:r * 8 + count].tolist() == want_i, r
        assert got_v[r * 8:r * 8 + count].tolist() == want_v, r
        if block == 64:
            lo = sorted(range(n), key=lambda i: (float(src[r, i]), i))[:2]
            assert got_i[r * 8 + count:r * 8 + count + 2].tolist() == lo, r
        # torch agrees on the values
        tv = torch.topk(src[r, :n], min(count, n)).values
        assert torch.equal(got_v[r * 8:r * 8 + min(count, n)], tv)


def test_block_functions_refuse_partial_waves_and_bad_k():
    k = Kernel("bad_block", workgroup_size=96)
    v = k.thread_id(0)
    with pytest.raises(ValueError, match="whole waves"):
        block_sum(k, v)
    k = Kernel("bad_topk", workgroup_size=64)
    v = k.thread_id(0)
    with pytest.raises(ValueError, match="k=65 exceeds"):
        wave_topk(v, v, 65)
    with pytest.raises(ValueError, match="op must be"):
        block_reduce(k, v, "prod")
