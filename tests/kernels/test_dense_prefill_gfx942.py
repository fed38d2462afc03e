"""The gfx942 dense prefill family (rocke.kernels.gfx942.dense_prefill) in the emulator's gfx942
mode against torch SDPA (fp32), and what its two gfx942 levers change in the exact counters:
``vt_by_key`` (no bank conflicts on the V^T writes) and ``pair_causal`` (equal work per workgroup)."""

import numpy as np
import pytest
import torch

from rocke import emu
from rocke.kernels.gfx942 import dense_prefill as dp
from tests.kernels.test_dense_prefill_gfx950 import _compiled, run_case

SMALL = dict(block_m=64, block_n=32, num_warps=2, target="gfx942")
TUNED = dict(prefetch=True, vt_by_key=True, pin_prefetch=True, prefetch_distance=2)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("levers", [{}, TUNED], ids=["plain", "tuned"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_ragged_gqa_against_sdpa(dtype, levers, causal):
    # 10 query heads over 2 KV heads (group 5), lengths across the 64-query / 32-key tiles
    pair = dict(pair_causal=True) if causal and levers else {}
    spec = dp.DensePrefillSpec(dtype, 64, 100, 10, 2, causal, **SMALL, **levers, **pair)
    run_case(spec, [100, 37, 0, 65], seed=1)


@pytest.mark.parametrize("seq_len, lens", [(192, [192, 130]), (256, [256, 3])],
                         ids=["odd-blocks", "even-blocks"])
def test_paired_causal_blocks_cover_every_query(seq_len, lens):
    """3 query blocks: workgroups (0, 2) and (1 alone); 4: (0, 3) and (1, 2)."""
    spec = dp.DensePrefillSpec("bf16", 128, seq_len, 2, 1, True, pair_causal=True, **SMALL, **TUNED)
    grid, _ = dp.launch_geometry(spec, len(lens))
    assert grid == (-(-seq_len // 64 // 2) if seq_len % 128 else seq_len // 128, 2, len(lens))
    run_case(spec, lens, scale=0.3, seed=4)


def _profile(spec, S):
    B, H, HKV, D = 1, spec.num_heads, spec.num_kv_heads, spec.head_dim
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, S, H, D, generator=gen).bfloat16()
    k, v = (torch.randn(B, S, HKV, D, generator=gen).bfloat16() for _ in range(2))
    o = torch.zeros_like(q)
    grid, block = dp.launch_geometry(spec, B)
    ck = _compiled(spec)
    return emu.launch(ck.asm, ck.name, grid, block,
                      dp.kernel_args(spec, q, k, v, o, torch.tensor([S], dtype=torch.int32)),
                      target="gfx942", profile=True, check=False).profile


def test_vt_by_key_removes_the_v_transpose_bank_conflicts():
    """Rows first, a 32-lane phase of 2-byte V^T writes lands on few banks; down the keys it
    covers 16 consecutive dwords. The K writes and operand reads are the same in both."""
    spec = dict(block_m=64, block_n=64, num_warps=2, target="gfx942")
    rows = _profile(dp.DensePrefillSpec("bf16", 128, 128, 1, 1, False, **spec), 128)
    keys = _profile(dp.DensePrefillSpec("bf16", 128, 128, 1, 1, False, vt_by_key=True, **spec), 128)

    def write_b16_conflicts(p):
        return sum(line.lds_conflicts for line in p.lines if "ds_write_b16" in line.text)

    assert write_b16_conflicts(rows) > 0 and write_b16_conflicts(keys) == 0
    assert keys.lds_bank_conflicts < rows.lds_bank_conflicts
    assert keys.opcodes["ds_write_b16"] == rows.opcodes["ds_write_b16"]     # same writes


def test_pair_causal_gives_every_workgroup_the_same_mfma_work():
    base = dict(block_m=64, block_n=32, num_warps=2, target="gfx942")
    plain = _profile(dp.DensePrefillSpec("bf16", 64, 256, 1, 1, True, **base), 256)
    paired = _profile(dp.DensePrefillSpec("bf16", 64, 256, 1, 1, True, pair_causal=True, **base), 256)
    col = [i for i, b in enumerate(plain.buckets) if b.startswith("v_mfma")]
    per_wg = plain.wg_issues[:, col].sum(axis=1)
    assert len(set(per_wg.tolist())) == 4                   # blocks 0..3: 1..4 diagonal spans
    col = [i for i, b in enumerate(paired.buckets) if b.startswith("v_mfma")]
    per_wg_paired = paired.wg_issues[:, col].sum(axis=1)
    assert paired.workgroups == 2 and len(set(per_wg_paired.tolist())) == 1
    assert int(per_wg_paired.sum()) == int(per_wg.sum())     # the same work, redistributed


@pytest.mark.parametrize("kwargs, words", [
    (dict(causal=False, pair_causal=True), "pair_causal: pairs a causal launch"),
    (dict(pair_causal=True, persistent=True), "choose one of pair_causal and persistent"),
    (dict(atom="32x32x16"), "atom"),
    (dict(target="gfx90a"), "target"),
    (dict(vt_by_key=True, head_dim=64, block_n=32, num_warps=8, block_m=256),
     "vt_by_key stages whole"),
    (dict(pin_prefetch=True), "pin_prefetch: keeps the prefetched loads"),
    (dict(rounding="rna", dtype="f16"), "rounding: 'rna'"),
    (dict(rounding="rtne"), "rounding"),
    (dict(layout="thd", pair_causal=True), "it takes neither pair_causal nor persistent"),
])
def test_spec_rules_name_the_field(kwargs, words):
    base = dict(dtype="bf16", head_dim=128, seq_len=4096, num_heads=32, num_kv_heads=8, causal=True,
                target="gfx942")
    with pytest.raises(ValueError, match=words):
        dp.DensePrefillSpec(**{**base, **kwargs})


def test_shipped_variants_compile_without_vgpr_spills_for_gfx942():
    """No VGPR spills and no scratch (a few SGPRs of the causal pair loop go to VGPR lanes, moved
    outside the tile loops; benchmarks/dense_vs_aiter.py lists them against the goal of 0)."""
    for name in ("bf16_d128_h64kv8_s4096_causal", "bf16_d128_h32kv8_s4096_full"):
        spec = dp.VARIANTS[name]
        assert (spec.block_m, spec.num_warps, spec.prefetch, spec.vt_by_key) == (256, 8, True, True)
        assert spec.pair_causal == spec.causal
        ck = _compiled(spec)
        assert ck.info.vgpr_spills == 0 and ck.info.scratch_bytes == 0
        assert '.amdgcn_target "amdgcn-amd-amdhsa--gfx942' in ck.asm
        assert "v_mfma_f32_32x32x8_bf16" in ck.asm
        assert ck.info.vgprs + ck.info.agprs <= 256        # two waves a SIMD (8 waves on 4 SIMDs)


@pytest.mark.parametrize("rounding", ["rna", "rtz"])
def test_rounding_modes_stay_within_tolerance_and_change_the_conversion(rounding):
    """AITER's other bf16_cvt modes for P and O: still correct against SDPA, and the code's
    conversion differs from round-to-nearest-even's (no lsb term: no v_bfe_u32 extracting it)."""
    spec = dp.DensePrefillSpec("bf16", 64, 100, 4, 2, True, pair_causal=True, rounding=rounding,
                               **SMALL, **TUNED)
    assert f"_{rounding}_" in spec.kernel_name
    run_case(spec, [100, 61], seed=5)
    nearest_even = dp.DensePrefillSpec("bf16", 64, 100, 4, 2, True, pair_causal=True, **SMALL, **TUNED)
    assert "v_bfe_u32" in _compiled(nearest_even).asm and "v_bfe_u32" not in _compiled(spec).asm


@pytest.mark.parametrize("rounding", ["rne", "rna"])
def test_a_nan_in_one_query_element_gives_exactly_its_output_row_nan(rounding):
    """P is rounded without its NaN select (nan_check=False): a NaN in q (batch 0, token 40, head
    3) makes exactly that output row NaN -- through the row sum l -- and every other row stays
    within tolerance of SDPA on the same inputs."""
    import math
    from rocke.kernels.common.tolerances import attention_atol
    from tests.kernels.test_dense_prefill_gfx950 import reference
    spec = dp.DensePrefillSpec("bf16", 64, 100, 4, 2, True, pair_causal=True, rounding=rounding,
                               **SMALL, **TUNED)
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(1, 100, 4, 64, generator=gen).bfloat16()
    k, v = (torch.randn(1, 100, 2, 64, generator=gen).bfloat16() for _ in range(2))
    q[0, 40, 3, 5] = float("nan")
    o = torch.zeros_like(q)
    lens = torch.tensor([100], dtype=torch.int32)
    grid, block = dp.launch_geometry(spec, 1)
    ck = _compiled(spec)
    emu.launch(ck.asm, ck.name, grid, block, dp.kernel_args(spec, q, k, v, o, lens), target="gfx942")
    nan = torch.zeros(o.shape, dtype=torch.bool)
    nan[0, 40, 3] = True
    assert torch.equal(o.isnan(), nan)
    ref = reference(q, k, v, lens, True, 1 / math.sqrt(64))
    assert (o.float() - ref)[~nan].abs().max().item() <= attention_atol("bf16")


def test_two_tiles_ahead_pairs_tiles_without_copying_loads_in_flight():
    """prefetch_distance 2 runs two tiles an iteration from fixed register slots: the stores wait
    for their own slot's loads (a partial vmcnt), not for every load (vmcnt(0) before a copy)."""
    one = dp.DensePrefillSpec("bf16", 128, 4096, 32, 8, False, **{**SMALL, **TUNED, "prefetch_distance": 1})
    two = dp.DensePrefillSpec("bf16", 128, 4096, 32, 8, False, **{**SMALL, **TUNED})
    assert two.kernel_name.endswith("_ahead2") and not one.kernel_name.endswith("_ahead2")

    def loop_waits(asm):
        body = asm[asm.index(".LBB0_"):]
        return {w for w in ("vmcnt(0)", "vmcnt(1)", "vmcnt(2)", "vmcnt(3)") if w in body}

    assert {"vmcnt(1)", "vmcnt(3)"} <= loop_waits(_compiled(two).asm) or \
        {"vmcnt(2)"} <= loop_waits(_compiled(two).asm)
    with pytest.raises(ValueError, match="prefetch_distance: how far ahead"):
        dp.DensePrefillSpec("bf16", 128, 4096, 32, 8, False, prefetch_distance=2, target="gfx942")


def test_bhsd_layout_reads_and_writes_heads_as_contiguous_rows():
    """layout bhsd: the same problem in [B, H, S, D] gives the bshd run's output, transposed."""
    spec = dp.DensePrefillSpec("bf16", 64, 100, 4, 2, True, pair_causal=True, layout="bhsd",
                               **SMALL, **TUNED)
    assert spec.kernel_name.endswith("_bhsd")
    gen = torch.Generator().manual_seed(6)
    q = torch.randn(2, 100, 4, 64, generator=gen).bfloat16()
    k, v = (torch.randn(2, 100, 2, 64, generator=gen).bfloat16() for _ in range(2))
    lens = torch.tensor([100, 41], dtype=torch.int32)
    outs = []
    for s, tensors in ((spec, [t.transpose(1, 2).contiguous() for t in (q, k, v)]),
                       (dp.DensePrefillSpec("bf16", 64, 100, 4, 2, True, pair_causal=True,
                                            **SMALL, **TUNED), [q, k, v])):
        o = torch.zeros_like(tensors[0])
        grid, block = dp.launch_geometry(s, 2)
        ck = _compiled(s)
        emu.launch(ck.asm, ck.name, grid, block, dp.kernel_args(s, *tensors, o, lens),
                   target="gfx942")
        outs.append(o)
    bhsd, bshd = outs
    assert torch.equal(bhsd.transpose(1, 2)[0], bshd[0])
    assert torch.equal(bhsd.transpose(1, 2)[1, :41], bshd[1, :41])
    with pytest.raises(ValueError, match=r"not \[B, 4, 100, 64\] \(bhsd"):
        dp.kernel_args(spec, q, k, v, torch.zeros_like(q), lens)


@pytest.mark.parametrize("S, H, causal, B, plan", [
    (8192, 32, False, 1, (912, 2, 112)),     # 3 whole rounds, then 112 items in 2 pieces
    (10240, 32, True, 1, (608, 8, 32)),      # 640 block pairs: 32 behind 2 rounds, 8 pieces
    (1024, 32, False, 8, (912, 2, 112)),
    (4096, 8, False, 4, (512, 1, 0)),        # 512 = 304 + 208: 208 tail items cannot double
    (4096, 8, False, 1, (128, 1, 0)),        # no whole round before the tail: no split
    (2048, 32, True, 1, (128, 1, 0)),
])
def test_tail_split_plans_by_hand(S, H, causal, B, plan):
    spec = dp.tuned_spec("bf16", S, H, 8 if H % 8 == 0 else H, causal)
    got = dp.tail_split(spec, B)
    assert (got.full_items, got.chunks, got.tail_items) == plan
    assert got.full_items + got.tail_items == dp.work_items(spec, B)
    grid, _ = dp.launch_geometry(spec, B)
    assert grid == (got.workgroups, 1, 1)
    # a launch that does not split runs the kernel without split_tail, on its 3-D grid
    launched, plan = dp.launch_plan(spec, B)
    assert launched.split_tail == got.split and (plan == got if got.split else plan is None)
    if not got.split:
        assert launched.kernel_name == spec.kernel_name.removesuffix("_split")


def _split_launch(S, H, HKV, causal, lens, slots, rounding="rne", seed=0):
    """The split launch (whole items, then pieces whose last merges) on the emulator with
    ``slots`` resident workgroups; o starts NaN so a row left unwritten shows."""
    spec = dp.tuned_spec("bf16", S, H, HKV, causal, rounding=rounding)
    B = len(lens)
    plan = dp.tail_split(spec, B, slots, min_rounds=0)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, 128, generator=gen).bfloat16()
    k, v = (torch.randn(B, S, HKV, 128, generator=gen).bfloat16() for _ in range(2))
    o = torch.full_like(q, float("nan"))
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    partials = dp.split_workspace(spec, plan)
    ck = _compiled(spec)
    grid, block = dp.launch_geometry(spec, B, plan=plan)
    emu.launch(ck.asm, ck.name, grid, block,
               dp.kernel_args(spec, q, k, v, o, seq_lens, plan=plan, partials=partials),
               target="gfx942", check=False)
    return plan, q, k, v, o, partials


@pytest.mark.parametrize("S, H, HKV, causal, lens, slots, rounding, plan", [
    # 3 blocks -> pairs (0, 2) and (1); items 6, 7 (pair (0, 2) of batch 1, its block 2 all
    # padding, and the middle pair) in 3 pieces each
    (768, 2, 2, True, [700, 300], 6, "rne", (6, 3, 2)),
    # GQA (hkv_major): item 15 in 5 pieces; batch 1 is 40 rows long
    (1024, 2, 1, False, [1000, 40], 5, "rtz", (15, 5, 1)),
])
def test_split_launch_against_sdpa_leaves_padding_unwritten(S, H, HKV, causal, lens, slots,
                                                            rounding, plan):
    from tests.kernels.test_dense_attention_entry import _reference
    from rocke.kernels.common.tolerances import attention_atol
    got, q, k, v, o, partials = _split_launch(S, H, HKV, causal, lens, slots, rounding)
    assert (got.full_items, got.chunks, got.tail_items) == plan
    assert partials[3].tolist() == [0] * partials[3].numel()     # the tickets, reset
    ref = _reference(q, k, v, lens, causal, 1 / 128 ** 0.5)
    for b, n in enumerate(lens):
        assert float((o[b, :n].float() - ref[b, :n]).abs().max()) <= attention_atol("bf16")
        assert o[b, n:].isnan().all()


def test_split_blocks_list_the_tail_items_blocks_in_workspace_order():
    """Pairs (0, 2) and (1) of 3 blocks, items 2 and 3 (head 1): a pair's blocks in order, the
    middle pair's missing partner -1."""
    spec = dp.tuned_spec("bf16", 768, 2, 2, True)
    assert dp.split_blocks(spec, 1, dp.TailSplit(2, 3, 2)) == [(0, 1, 0), (0, 1, 2), (0, 1, 1),
                                                               (0, 1, -1)]


@pytest.mark.parametrize("change, words", [
    (dict(partials=None), "split_workspace"),
    (dict(partials="wrong shape"), "partial_o: must be a contiguous torch.float32"),
    (dict(plan=dp.TailSplit(5, 2, 1)), "at most the launch's 4 work items"),
])
def test_split_launch_refuses_a_bad_plan_or_workspace(change, words):
    spec = dp.tuned_spec("bf16", 512, 2, 1, False)
    q = torch.zeros(1, 512, 2, 128, dtype=torch.bfloat16)
    kv = torch.zeros(1, 512, 1, 128, dtype=torch.bfloat16)
    plan = dp.TailSplit(3, 3, 1)
    args = dict(plan=plan, partials=dp.split_workspace(spec, plan))
    args.update(change)
    if args["partials"] == "wrong shape":
        args["partials"] = dp.split_workspace(spec, dp.TailSplit(3, 2, 1))
    with pytest.raises(ValueError, match=words):
        dp.kernel_args(spec, q, kv, kv, q.clone(), torch.tensor([512], dtype=torch.int32), **args)
