"""fp8 KV caches and the tiled d256 path, through ``run_unified_attention_torch`` in the emulator
(memcheck + racecheck on: runtime.launch's default), against the fp32 ``ref_paged_attn``
(ALGORITHM.md §11)."""
from dataclasses import replace

import pytest
import torch

from rocke.emu import numerics
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx942 import attention_tiled_3d as a3
from tests.kernels.unified_inputs import make_inputs

FP8 = torch.float8_e4m3fnuz
# (query_len, kv_len): decode and prefill rows in one batch, KV lengths off the page size
MIXED = [(1, 37), (5, 21), (3, 3)]
LONG_DECODE = [(1, 530)]           # > 512 keys, one workgroup's worth of q blocks: auto -> 3D


def _fp8_inputs(seqs, *, hq, hk, d, bs, dtype, seed, descale):
    """make_inputs with fp8 caches: values quantized to e4m3fnuz with a spread of magnitudes and
    descales chosen so the dequantized K/V stay in the 16-bit tests' range (|x| <= ~2)."""
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    num_seqs = len(seqs)
    scales = {
        "per_tensor": lambda: torch.tensor([0.05]),
        "scalar_expanded": lambda: torch.tensor(0.04).expand(num_seqs, hk),    # vLLM's form
        "per_head": lambda: torch.linspace(0.02, 0.06, hk),
        "per_seq_head": lambda: (torch.rand(num_seqs, hk, generator=g) * 0.04 + 0.02),
    }
    for name in ("k", "v"):
        raw = (torch.rand(args[name].shape, generator=g) * 2 - 1) * 30      # fp8 codes up to 30
        args[name] = raw.to(FP8)
        args[f"{name}_descale"] = scales[descale]()
    return args


def _reference(args):
    """fp32 reference; per-(sequence, head) descales are applied one sequence at a time (the
    reference takes one row of scales), so the kernel's per-sequence indexing is checked."""
    kd, vd = args["k_descale"], args["v_descale"]
    ref_args = (args["q"], args["k"], args["v"])
    if kd.dim() == 2 and kd.stride(0) != 0:
        cu = args["cu_seqlens_q"]
        outs = []
        for s in range(len(args["seqused_k"])):
            q = args["q"][int(cu[s]):int(cu[s + 1])]
            outs.append(ref_paged_attn(q, args["k"], args["v"], torch.tensor([0, q.shape[0]], dtype=torch.int32),
                                       args["seqused_k"][s:s + 1], args["block_table"][s:s + 1],
                                       args["softmax_scale"], k_descale=kd[s], v_descale=vd[s]))
        return torch.cat(outs)
    return ref_paged_attn(*ref_args, args["cu_seqlens_q"], args["seqused_k"], args["block_table"],
                          args["softmax_scale"], k_descale=kd, v_descale=vd)


def _check(args, record, dtype, kv_dtype=None):
    ref = _reference(args) if kv_dtype else ref_paged_attn(
        args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
        args["block_table"], args["softmax_scale"])
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype, kv_dtype), f"max |out - ref| {err} ({record.plan.specs})"
    return err


# ---- fp8 KV cache ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend, seqs, dtype, d, bs, hq, hk, descale, want_path, regime", [
    ("2d", MIXED, "f16", 64, 16, 8, 2, "per_tensor", "2d", "transposed_x8"),        # GQA 4:1
    ("2d", MIXED, "bf16", 128, 64, 10, 2, "per_head", "2d", "narrow"),      # GQA 5:1, block 64
    ("3d", MIXED, "f16", 128, 16, 10, 2, "per_seq_head", "3d", "narrow"),   # 5:1, narrow 3D
    ("3d", MIXED, "bf16", 64, 64, 8, 2, "scalar_expanded", "3d", "narrow"), # 4:1
    ("auto", MIXED, "f16", 128, 16, 8, 2, "scalar_expanded", "2d", "transposed_x8"),
    ("auto", LONG_DECODE, "bf16", 64, 16, 4, 1, "per_head", "3d", "narrow"),
], ids=["2d_f16_g4", "2d_bf16_g5_b64", "3d_f16_g5_perseq", "3d_bf16_g4_b64", "auto_2d_f16",
        "auto_3d_bf16"])
def test_fp8_kv_cache_matches_reference(backend, seqs, dtype, d, bs, hq, hk, descale, want_path,
                                        regime):
    args = _fp8_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=d + bs + hq, descale=descale)
    record = au.run_unified_attention_torch(**args, backend=backend)
    assert record.plan.path == want_path and record.plan.geometry.regime == regime
    assert record.plan.specs[0].kv_dtype == "fp8_e4m3fnuz"
    assert not record.plan.graph_replay          # fp8 is feature-flagged (no graph replay)
    _check(args, record, dtype, "fp8_e4m3fnuz")


def test_fp8_descale_really_scales_the_output():
    """The control: the same codes with v_descale doubled give twice the output (and a kernel
    that ignored the descales would fail the reference check above)."""
    args = _fp8_inputs(MIXED, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=21, descale="per_tensor")
    au.run_unified_attention_torch(**args, backend="2d")
    first = args["out"].float().clone()
    args["v_descale"] = args["v_descale"] * 2
    au.run_unified_attention_torch(**args, backend="2d")
    assert torch.allclose(args["out"].float(), 2 * first, atol=2e-2, rtol=1e-2)
    assert first.abs().max() > 0.1


def test_emulator_decodes_fp8_as_e4m3fnuz():
    """gfx942's v_cvt_f32_fp8 is the fnuz encoding (bias 8, 0x80 = NaN, no -0, max 240): the
    emulator's decode agrees with torch's float8_e4m3fnuz on all 256 codes and differs from
    e4m3fn (which would give twice the value)."""
    codes = torch.arange(256, dtype=torch.uint8)
    fnuz = codes.view(FP8).float()
    emu = torch.from_numpy(numerics.fp8_bits_to_f32(codes.numpy(), "e4m3fnuz"))
    assert torch.isnan(emu[0x80]) and torch.isnan(fnuz[0x80])
    finite = torch.ones(256, dtype=torch.bool)
    finite[0x80] = False
    assert torch.equal(emu[finite], fnuz[finite])
    assert emu.nan_to_num().abs().max() == 240
    fn = codes.view(torch.float8_e4m3fn).float()
    assert fn[0x38] == 1.0 and emu[0x38] == 0.5        # the same bits, half the value


def test_fp8_spec_rules():
    spec = a2.UnifiedAttention2DSpec(dtype="bf16", head_size=64, kv_dtype="fp8_e4m3fnuz",
                                     num_warps=4, block_m_per_warp=32)
    assert spec.kernel_name.endswith("_kvfp8") and spec.cache_dtype == "fp8_e4m3fnuz"
    # the LDS holds the dequantized Q-dtype tiles: the footprint is the 16-bit one
    plain = a2.UnifiedAttention2DSpec(dtype="bf16", head_size=64, num_warps=4, block_m_per_warp=32)
    assert a2.lds_model(spec) == a2.lds_model(plain)
    with pytest.raises(ValueError, match=r"kv_dtype: .*fp8_e4m3fnuz"):
        a2.UnifiedAttention2DSpec(kv_dtype="fp8_e4m3fn")
    with pytest.raises(ValueError, match=r"global_load_lds_k: .*dequantized"):
        a2.UnifiedAttention2DSpec(kv_dtype="fp8_e4m3fnuz", global_load_lds_k=True)
    assert not a2.supports_tiled_2d(kv_dtype="fp8_e4m3fnuz", global_load_lds_k=True)


def test_fp8_and_16_bit_kernels_take_exactly_their_arguments():
    args = _fp8_inputs(MIXED, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=3, descale="per_head")
    spec = a2.UnifiedAttention2DSpec(dtype="f16", head_size=64, num_queries_per_kv=2,
                                     kv_dtype="fp8_e4m3fnuz")
    common = (args["q"], args["k"], args["v"], args["out"], args["block_table"],
              args["cu_seqlens_q"], args["seqused_k"], 0.1)
    full = a2.kernel_args(spec, *common, args["k_descale"], args["v_descale"])
    assert len(full) == len(a2.ARGS) + len(a2.ARGS_FP8)
    assert full[len(a2.ARGS) + 1:len(a2.ARGS) + 3] == [0, 1]      # per head: stride 1 over heads
    with pytest.raises(ValueError, match=r"k_descale: an fp8 cache needs an fp32 descale"):
        a2.kernel_args(spec, *common)
    plain = a2.UnifiedAttention2DSpec(dtype="f16", head_size=64, num_queries_per_kv=2)
    with pytest.raises(ValueError, match=r"k_cache: dtype must be torch.float16"):
        a2.kernel_args(plain, *common)


# ---- d256 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend, dtype, bs, hq, hk", [
    ("2d", "f16", 16, 8, 2),       # GQA 4:1
    ("2d", "bf16", 32, 10, 2),     # GQA 5:1
    ("3d", "f16", 64, 10, 2),
    ("3d", "bf16", 16, 8, 2),
])
def test_d256_matches_reference(backend, dtype, bs, hq, hk):
    args = make_inputs(MIXED, hq=hq, hk=hk, d=256, bs=bs, dtype=dtype, seed=bs + hq)
    record = au.run_unified_attention_torch(**args, backend=backend)
    spec = record.plan.specs[0]
    assert record.plan.path == backend and spec.head_size == 256
    # d256 walks 16-key tiles; a 2D grid of one round (this one) grows them to 32 (the largest
    # that fits the LDS, ALGORITHM.md §10.2), which this checks against the reference too
    assert not spec.transposed_x8 and spec.tile_size == (32 if backend == "2d" else 16)
    _check(args, record, dtype)


def test_d256_fp8_cache_3d():
    args = _fp8_inputs(MIXED, hq=4, hk=1, d=256, bs=16, dtype="bf16", seed=8, descale="per_tensor")
    record = au.run_unified_attention_torch(**args, backend="3d")
    _check(args, record, "bf16", "fp8_e4m3fnuz")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_dispatcher_routes_d256_to_the_narrow_path(dtype):
    # 1024 KV heads: a 2D grid of more than one round, so the table's geometry (ALGORITHM.md §10.2)
    p = au.UnifiedAttentionProblem(dtype=dtype, head_size=256, num_q_heads=4 * 1024,
                                   num_kv_heads=1024, block_size=16, num_seqs=2, total_q=6,
                                   max_seqlen_q=5, max_seqlen_k=40)
    the_plan = au.plan(p, "auto", au.AttentionKnobs())
    (spec,) = the_plan.specs
    assert the_plan.geometry.regime == "narrow" and "d256" in the_plan.geometry.reason
    assert sum(a2.lds_model(spec).values()) <= 32 * 1024       # 2 workgroups per CU
    (shipped,) = [v for n, v in a2.VARIANTS.items() if n.startswith(f"narrow_{dtype}_d256_b16_")]
    assert spec == replace(shipped, num_queries_per_kv=4)       # the shipped kernel, up to G
    assert any(v.head_size == 256 for v in a3.VARIANTS.values())
    # 2 KV heads: one round, one workgroup per CU: the 32-key tile (64 does not fit the LDS),
    # two K buffers for a plain prefill (attention_dispatch.one_round_k_buffers) and 4 warps x
    # 16 rows (one_round_body; a 32-key tile spans two 16-token pages: no one-page lookup),
    # V loaded a step ahead (early_v_body)
    small = replace(p, num_q_heads=8, num_kv_heads=2)
    (one_round,) = au.plan(small, "auto", au.AttentionKnobs()).specs
    assert one_round == replace(spec, tile_size=32, use_k_single_buffer=False, num_warps=4,
                                early_v=True)
    assert 32 * 1024 < sum(a2.lds_model(one_round).values()) <= 64 * 1024


def test_d256_geometry_that_cannot_fit_says_why():
    with pytest.raises(ValueError, match=r"tile_size: the narrow path needs \d+ bytes of LDS at "
                                         r"head_size 256.*gfx942 has 65536"):
        a2.UnifiedAttention2DSpec(head_size=256, block_size=64, tile_size=64, num_warps=4,
                                  block_m_per_warp=32)
    with pytest.raises(ValueError, match=r"head_size: 256 has only the narrow path"):
        a2.UnifiedAttention2DSpec(head_size=256, **a2.transposed_x8_geometry("wide4", 128))


@pytest.mark.parametrize("levers", [
    dict(dtype="f16", kv_addr_64=True, cfv_store=True, q_direct=True, **a2.transposed_x8_geometry("wide2", 64)),
    dict(dtype="bf16", kv_cache_policy="stream", use_k_single_buffer=False, num_warps=1),
], ids=["flash_a64_cfv_qdirect", "narrow_stream_k2"])
def test_fp8_with_the_copy_levers(levers):
    """The dequantizing copy under the levers that change the copy (64-bit page base, row-major V,
    streaming loads, K double buffer), launched directly."""
    from rocke.runtime import launch
    dtype = levers["dtype"]
    spec = a2.UnifiedAttention2DSpec(head_size=64, block_size=16, num_queries_per_kv=4,
                                     kv_dtype="fp8_e4m3fnuz", **levers)
    args = _fp8_inputs(MIXED, hq=8, hk=2, d=64, bs=16, dtype=dtype, seed=13, descale="per_head")
    out = args["out"]
    grid, block = a2.launch_geometry(spec, len(MIXED), out.shape[0], 2)
    launch(au.compiled(spec), grid, block,
           a2.kernel_args(spec, args["q"], args["k"], args["v"], out, args["block_table"],
                          args["cu_seqlens_q"], args["seqused_k"], args["softmax_scale"],
                          args["k_descale"], args["v_descale"]))
    err = (out.float() - _reference(args)).abs().max().item()
    assert err <= attention_atol(dtype, "fp8_e4m3fnuz"), err
