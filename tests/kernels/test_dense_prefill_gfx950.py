"""The gfx950 dense prefill family in the emulator's gfx950 mode (rocke.emu.launch(..., target="gfx950"))
against torch SDPA (fp32)."""

import math

import pytest
import torch
import torch.nn.functional as F

from rocke.compiler import compile_ir
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.gfx950 import dense_prefill as dp
from rocke import emu

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
SENTINEL = 7.0          # output rows past a sequence's length must keep it
_COMPILED = {}


def _compiled(spec):
    if spec not in _COMPILED:
        _COMPILED[spec] = compile_ir(dp.build(spec), target=spec.target)
    return _COMPILED[spec]


def reference(q, k, v, lens, causal: bool, scale: float):
    """torch SDPA in fp32 per sequence, on its first L_b rows ([B, S, H, D] in and out)."""
    out = torch.zeros(q.shape, dtype=torch.float32)
    group = q.shape[2] // k.shape[2]
    for b, n in enumerate(lens.tolist()):
        if n == 0:
            continue
        qb, kb, vb = (t[b, :n].float().transpose(0, 1) for t in (q, k, v))     # [H, n, D]
        kb, vb = kb.repeat_interleave(group, 0), vb.repeat_interleave(group, 0)
        out[b, :n] = F.scaled_dot_product_attention(qb, kb, vb, is_causal=causal, scale=scale).transpose(0, 1)
    return out


def run_case(spec, lens, scale=None, seed=0, shape_inputs=None, workgroups=None):
    S, H, HKV, D = spec.seq_len, spec.num_heads, spec.num_kv_heads, spec.head_dim
    B = len(lens)
    dt = TORCH[spec.dtype]
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, D, generator=gen).to(dt)
    k, v = (torch.randn(B, S, HKV, D, generator=gen).to(dt) for _ in range(2))
    if shape_inputs is not None:
        shape_inputs(q, k, v)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    for b, n in enumerate(lens):       # the padding holds NaN: the kernel must never read it into a result
        k[b, n:], v[b, n:], q[b, n:] = float("nan"), float("nan"), float("nan")
    o = torch.full((B, S, H, D), SENTINEL, dtype=dt)
    grid, block = dp.launch_geometry(spec, B, workgroups)
    ck = _compiled(spec)
    # the emulator's mode for the spec's target (gfx950 or gfx942) on the compiled listing
    emu.launch(ck.asm, ck.name, grid, block, dp.kernel_args(spec, q, k, v, o, lens_t, scale, workgroups),
               target=spec.target)
    ref = reference(q, k, v, lens_t, spec.causal, scale if scale is not None else 1 / math.sqrt(D))
    for b, n in enumerate(lens):
        err = (o[b, :n].float() - ref[b, :n]).abs().max().item() if n else 0.0
        assert err <= attention_atol(spec.dtype), f"batch {b} (L={n}): max abs error {err}"
        assert bool((o[b, n:] == SENTINEL).all()), f"batch {b}: rows past L={n} were written"


SMALL = dict(block_m=64, block_n=32, num_warps=2)       # tiny geometry: the emulator runs it in seconds


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_ragged_gqa_non_power_of_two_group(dtype, causal):
    # 10 query heads over 2 KV heads (group 5), lengths across the 64-query / 32-key tiles
    spec = dp.DensePrefillSpec(dtype, 64, 100, 10, 2, causal, **SMALL)
    run_case(spec, [100, 37, 0, 65], seed=1)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_d128_mha(causal):
    spec = dp.DensePrefillSpec("bf16", 128, 70, 2, 2, causal, **SMALL)
    run_case(spec, [70, 33], scale=0.2, seed=2)


def test_shipped_geometry_256_rows():
    # the variants' geometry (256 queries x 8 warps, 64-key tiles), 7 / 1 GQA, two query blocks
    spec = dp.DensePrefillSpec("f16", 64, 300, 7, 1, True)
    assert (spec.block_m, spec.num_warps, spec.block_n) == (256, 8, 64)
    run_case(spec, [300, 257], seed=3)


def test_variants_compile_spill_free_for_gfx950():
    spec = dp.VARIANTS["bf16_d128_h40kv8_causal"]
    ck = _compiled(spec)
    assert ck.info.vgpr_spills == 0 and ck.info.sgpr_spills == 0 and ck.info.scratch_bytes == 0
    assert ".amdgcn_target \"amdgcn-amd-amdhsa--gfx950" in ck.asm
    assert "v_mfma_f32_32x32x16_bf16" in ck.asm


def test_pv_setprio_changes_code_and_stays_correct():
    base = dp.DensePrefillSpec("f16", 64, 90, 4, 2, True, **SMALL)
    prio = dp.DensePrefillSpec("f16", 64, 90, 4, 2, True, pv_setprio=True, **SMALL)
    assert "s_setprio" not in _compiled(base).asm
    assert "s_setprio 1" in _compiled(prio).asm and "s_setprio 0" in _compiled(prio).asm
    assert base.kernel_name != prio.kernel_name
    run_case(prio, [90, 41], seed=4)


@pytest.mark.parametrize("field, value, words", [
    ("num_kv_heads", 3, "num_heads"),
    ("block_m", 96, "block_m"),
    ("block_n", 48, "block_n"),
    ("atom", "32x32x8", "atom"),
    ("head_dim", 96, "head_dim"),
    ("lds_pad", 6, "lds_pad"),
    ("pv_setprio", 1, "pv_setprio"),
    ("lazy_rescale", "yes", "lazy_rescale"),
    ("grid_order", "kv_major", "grid_order"),
    ("prefetch", None, "prefetch"),
])
def test_spec_rules_name_the_field(field, value, words):
    kw = dict(dtype="f16", head_dim=64, seq_len=128, num_heads=8, num_kv_heads=2)
    kw[field] = value
    with pytest.raises(ValueError, match=words):
        dp.DensePrefillSpec(**kw)


def test_bad_input_is_refused_before_launch():
    spec = dp.DensePrefillSpec("f16", 64, 64, 4, 2, True, **SMALL)
    q = torch.zeros(1, 64, 4, 64, dtype=torch.float16)
    kv = torch.zeros(1, 64, 2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="seq_lens"):
        dp.kernel_args(spec, q, kv, kv, q.clone(), torch.tensor([65], dtype=torch.int32))
    with pytest.raises(ValueError, match="k: shape"):
        dp.kernel_args(spec, q, q, kv, q.clone(), torch.tensor([64], dtype=torch.int32))


def test_lazy_rescale_changes_code_and_stays_correct():
    base = dp.DensePrefillSpec("bf16", 64, 90, 4, 2, False, **SMALL)
    lazy = dp.DensePrefillSpec("bf16", 64, 90, 4, 2, False, lazy_rescale=True, **SMALL)
    assert "llvm.amdgcn.ballot" not in dp.build(base).ir()
    assert "llvm.amdgcn.ballot" in dp.build(lazy).ir()
    assert base.kernel_name != lazy.kernel_name
    def first_tile_dominates(q, k, v):
        # q >= 0 and the first 32 keys large and positive: later tiles never move a running max,
        # so their rescale is skipped -- the skip path runs and must stay exact
        q.abs_()
        k[:, :32] = k[:, :32].abs() * 2 + 1
    run_case(lazy, [90, 50], seed=5, shape_inputs=first_tile_dominates)
    run_case(lazy, [90, 50], seed=7)


def test_hkv_major_grid_order_changes_code_and_stays_correct():
    base = dp.DensePrefillSpec("f16", 64, 70, 6, 2, True, **SMALL)
    hkv = dp.DensePrefillSpec("f16", 64, 70, 6, 2, True, grid_order="hkv_major", **SMALL)
    assert dp.launch_geometry(hkv, 2)[0] == (6, 2, 2) and dp.launch_geometry(base, 2)[0] == (2, 6, 2)
    assert dp.build(base).ir().replace(base.kernel_name, "k") != dp.build(hkv).ir().replace(hkv.kernel_name, "k")
    run_case(hkv, [70, 20], seed=6)


def _loads_between_barrier_and_mfma(asm: str) -> bool:
    after_barrier = False
    for line in asm.splitlines():
        op = line.strip().split(" ")[0]
        if op == "s_barrier":
            after_barrier = True
        elif op.startswith("v_mfma"):
            after_barrier = False
        elif op.startswith("buffer_load") and after_barrier:
            return True
    return False


def test_prefetch_changes_code_and_stays_correct():
    kw = dict(dtype="bf16", head_dim=64, seq_len=100, num_heads=10, num_kv_heads=2, **SMALL)
    for causal in (True, False):
        base = dp.DensePrefillSpec(causal=causal, **kw)
        pf = dp.DensePrefillSpec(causal=causal, prefetch=True, **kw)
        assert pf.kernel_name != base.kernel_name
        assert dp.build(base).ir().replace(base.kernel_name, "k") != dp.build(pf).ir().replace(pf.kernel_name, "k")
        # the next tile's global loads are issued between a tile's barrier and its MFMAs
        assert _loads_between_barrier_and_mfma(_compiled(pf).asm)
        assert not _loads_between_barrier_and_mfma(_compiled(base).asm)
        run_case(pf, [100, 37, 0, 65], seed=8)


def test_prefetch_needs_whole_vectors_per_thread():
    with pytest.raises(ValueError, match="block_n"):
        dp.DensePrefillSpec("f16", 64, 128, 4, 4, block_m=256, block_n=32, num_warps=8, prefetch=True)


@pytest.mark.parametrize("order", ["qb_major", "hkv_major"])
def test_persistent_grid_walks_every_work_item(order):
    # 4 sequences x 2 query blocks x 10 heads = 80 work items over 7 workgroups (not a divisor):
    # each walks 11-12 items, decoded in the grid order; ragged lengths, an empty sequence, GQA 5
    spec = dp.DensePrefillSpec("f16", 64, 100, 10, 2, True, grid_order=order, persistent=True, **SMALL)
    assert dp.launch_geometry(spec, 4, 7)[0] == (7, 1, 1)
    assert dp.launch_geometry(spec, 4)[0] == (80, 1, 1)        # at most the work items (<= 256 CUs)
    assert spec.kernel_name.endswith("_persist")
    run_case(spec, [100, 37, 0, 65], seed=9, workgroups=7)


def test_persistent_grid_full_attention_bf16():
    spec = dp.DensePrefillSpec("bf16", 64, 70, 4, 4, False, persistent=True, **SMALL)
    run_case(spec, [70, 33], seed=10, workgroups=3)


def test_auto_grid_order_is_hkv_major_for_gqa_and_qb_major_for_mha():
    kw = dict(dtype="f16", head_dim=64, seq_len=128, **SMALL)
    assert dp.DensePrefillSpec(num_heads=10, num_kv_heads=2, grid_order="auto", **kw).grid_order == "hkv_major"
    assert dp.DensePrefillSpec(num_heads=4, num_kv_heads=4, grid_order="auto", **kw).grid_order == "qb_major"
    assert dp.DensePrefillSpec(num_heads=10, num_kv_heads=2, grid_order="auto", **kw) == \
        dp.DensePrefillSpec(num_heads=10, num_kv_heads=2, grid_order="hkv_major", **kw)


def test_a_grid_size_is_refused_for_the_default_grid():
    spec = dp.DensePrefillSpec("f16", 64, 64, 4, 2, True, **SMALL)
    q = torch.zeros(1, 64, 4, 64, dtype=torch.float16)
    kv = torch.zeros(1, 64, 2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="workgroups: only a persistent spec"):
        dp.launch_geometry(spec, 1, 8)
    with pytest.raises(ValueError, match="workgroups: only a persistent spec"):
        dp.kernel_args(spec, q, kv, kv, q.clone(), torch.tensor([64], dtype=torch.int32), None, 8)
    persistent = dp.DensePrefillSpec("f16", 64, 64, 4, 2, True, persistent=True, **SMALL)
    with pytest.raises(ValueError, match="workgroups"):
        dp.launch_geometry(persistent, 1, 0)


def test_partial_vmcnt_writes_the_prefetched_tile_in_load_order():
    """Each thread prefetches 2 K and 2 V vectors (4 loads, issued K first). Written in load order,
    each LDS write waits only for its own load: vmcnt 3, 2, 1, 0 in both tile loops; the
    interleaved K/V writes wait 3, 1, 0 (the first V write also waits for the second K load)."""
    import re
    kw = dict(dtype="bf16", head_dim=64, seq_len=100, num_heads=10, num_kv_heads=2, prefetch=True, **SMALL)
    with pytest.raises(ValueError, match="partial_vmcnt: .* needs prefetch=True"):
        dp.DensePrefillSpec(**{**kw, "prefetch": False}, partial_vmcnt=True)
    base = dp.DensePrefillSpec(causal=True, **kw)
    assert re.findall(r"vmcnt\((\d+)\)", _compiled(base).asm) == ["3", "1", "0"] * 2
    for causal in (True, False):
        spec = dp.DensePrefillSpec(causal=causal, partial_vmcnt=True, **kw)
        assert spec.kernel_name.endswith("_pf_vmcnt")
        assert re.findall(r"vmcnt\((\d+)\)", _compiled(spec).asm) == ["3", "2", "1", "0"] * 2
        run_case(spec, [100, 37, 0, 65], seed=11)
