"""Unified attention on gfx950 (rocke/kernels/gfx950/attention*.py): gfx942's kernels built for
gfx950 and gfx950's dispatcher facts (256 CUs, 160 KiB LDS), and a sparse version of the gfx942
entry-point grid run in ROCKE_DEVICE=emu:gfx950 against ref_paged_attn."""
import math

import pytest
import torch

from rocke import runtime
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.gfx942 import attention_dispatch as gfx942
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx950 import attention as g950
from rocke.kernels.gfx950 import attention_dispatch as dispatch
from tests.kernels.unified_inputs import make_inputs


def _problem(**kw):
    base = dict(dtype="f16", head_size=128, num_q_heads=32, num_kv_heads=8, block_size=64,
                num_seqs=1, total_q=1, max_seqlen_q=1, max_seqlen_k=32768, causal=True,
                num_blocks=4096, kv_cache_bytes=4096 * 64 * 8 * 128 * 2)
    base.update(kw)
    return au.UnifiedAttentionProblem(**base)


# ---- the dispatcher's gfx950 facts (nothing launched) ----

def test_the_entry_point_finds_the_gfx950_dispatcher():
    assert au.attention_target("gfx950") is dispatch
    assert dispatch.num_sms() == 256          # MI355X (rocke/arch), no device visible


def test_grid_rule_boundary_is_256_times_4():
    # MHA, 8 kv heads: (total_q // 16 + 1) * 8 >= 1024  <=>  total_q // 16 >= 127
    below = _problem(num_q_heads=8, total_q=126 * 16, max_seqlen_q=126 * 16)
    at = _problem(num_q_heads=8, total_q=127 * 16, max_seqlen_q=127 * 16)
    assert dispatch.select_path(below)[0] == "3d"
    assert dispatch.select_path(at)[0] == "2d"
    assert not gfx942.AITER_GRID_RULES[0][0](at, 304)  # at MI300X's CUs the row needs 1216


def test_3d_segments_fill_256_cus_resident_slots():
    # 8 decode tokens, kv 2048: 10 q blocks x 8 heads = 80 workgroups per segment; gfx950's rule
    # (attention_split, tests/kernels/test_attention_gfx950_split.py): 256 x 8 / 80 = 25.6 -> 32
    # (MI300X, gfx942's rule: 304 x 3 resident d128 slots / 80 = 11 segments fill them once)
    p = _problem(num_seqs=8, total_q=8, max_seqlen_k=2048)
    assert dispatch.plan(p, "3d", with_specs=False).geometry.num_segments == 32
    assert gfx942.geometry(p, "3d").num_segments == 11
    # gfx942's plan follows the model's table for this swept problem (ALGORITHM.md §10.0): 13,
    # modelled MI300X 40.8 us against 43.1 at the rule's 11 (2000 cycles)
    assert gfx942.plan(p, "3d", with_specs=False).geometry.num_segments == 13


def test_plans_hold_gfx950_specs():
    plan = dispatch.plan(_problem(num_seqs=8, total_q=8, max_seqlen_k=2048), "3d")
    spec3, spec_r = plan.specs
    assert type(spec3) is g950.UnifiedAttention3DSpec and type(spec_r) is g950.ReduceSegmentsSpec
    assert spec3.kernel_name.endswith("_gfx950") and spec_r.kernel_name.endswith("_gfx950")
    assert g950.build(spec3).target == "gfx950" and g950.build(spec_r).target == "gfx950"
    (spec2,) = dispatch.plan(_problem(max_seqlen_k=256), "2d").specs
    assert type(spec2) is g950.UnifiedAttention2DSpec


@pytest.mark.parametrize("flash_wide, name, tile", [(4, "wide4", 64), (2, "wide2", 64), (0, "L4", 32)])
def test_d128_flash_tile_follows_gfx950_lds(flash_wide, name, tile):
    from rocke.kernels.common.knobs import AttentionKnobs
    p = _problem(max_seqlen_k=256)
    knobs = AttentionKnobs(flash_wide=flash_wide)
    plan = dispatch.plan(p, "2d", knobs)
    (spec,) = plan.specs
    assert plan.geometry.name == f"{name}_32x32x16" and spec.tile_size == tile
    assert spec.x8t_atom == "32x32x16"
    assert spec.use_k_single_buffer == (spec.num_warps * 32 <= tile)
    # gfx942's LDS keeps T = 32 in its table (2 workgroups per CU); only a grid of one round on
    # MI300X grows it (gfx942 one_round_tile, ALGORITHM.md §10.2)
    assert gfx942.table_geometry(p, "2d", knobs).tile_size == 32
    # the LDS fact behind it: wide4 at T = 64 takes more than half of gfx942's 64 KiB
    wide4_t64 = a2.UnifiedAttention2DSpec(**{**a2.transposed_x8_geometry("wide4", 128), "tile_size": 64})
    assert 32 * 1024 < sum(a2.lds_model(wide4_t64).values()) <= 160 * 1024 // 2


def test_the_lds_budget_is_the_targets():
    big = dict(dtype="f16", head_size=128, block_size=64, num_warps=4, block_m_per_warp=32, tile_size=64)
    with pytest.raises(ValueError, match="needs 71680 bytes of LDS.*gfx942 has 65536"):
        a2.UnifiedAttention2DSpec(**big)
    assert g950.UnifiedAttention2DSpec(**big).tile_size == 64


def test_the_narrow_atom_rules():
    wide = g950.UnifiedAttention2DSpec(dtype="bf16", head_size=128, block_size=32, num_warps=2,
                                       narrow_atom="16x16x32")
    assert wide.kernel_name.endswith("_16x16x32_gfx950")
    assert g950.build(wide).target == "gfx950"
    with pytest.raises(ValueError, match="narrow_atom: must be one of"):
        g950.UnifiedAttention2DSpec(narrow_atom="32x32x16")
    with pytest.raises(ValueError, match="tile_size 16 is not a multiple of 32"):
        g950.UnifiedAttention2DSpec(dtype="bf16", head_size=64, block_size=16, narrow_atom="16x16x32")
    with pytest.raises(ValueError, match="transposed-x8 regime takes x8t_atom"):
        g950.UnifiedAttention2DSpec(dtype="f16", head_size=64, block_size=64, num_warps=4,
                                    block_m_per_warp=32, regime="transposed_x8", narrow_atom="16x16x32")
    assert not hasattr(a2.UnifiedAttention2DSpec(), "narrow_atom")    # gfx942's spec is untouched


@pytest.mark.parametrize("block_size, atom", [(16, "16x16x16"), (32, "16x16x32"), (64, "16x16x32")])
def test_the_narrow_2d_geometry_takes_the_wide_k_atom_on_whole_32_key_tiles(block_size, atom):
    # QQ-bias keeps the narrow regime (bf16 without it takes the transposed-x8 one on gfx950)
    p = _problem(dtype="bf16", max_seqlen_k=256, block_size=block_size, qq_bias=True)
    plan = dispatch.plan(p, "2d")
    (spec,) = plan.specs
    assert spec.regime == "narrow" and spec.narrow_atom == atom
    assert ("16x16x32" in plan.geometry.reason) == (atom == "16x16x32")
    assert dispatch.plan(p, "3d").specs[0].kernel_name.endswith("_k1_qqb_gfx950")    # 3D: 16x16x16


def test_gfx950_fp8_is_ocp_e4m3fn_and_fnuz_is_refused():
    """gfx950's fp8 caches / output are OCP e4m3fn; gfx942's e4m3fnuz is refused there (and
    e4m3fn on gfx942): the same conversion opcodes read the target's format."""
    for cls in (g950.UnifiedAttention2DSpec, g950.UnifiedAttention3DSpec):
        assert cls(kv_dtype="fp8_e4m3fn").fp8_kv
        with pytest.raises(ValueError, match="kv_dtype: must be one of fp8_e4m3fn, got 'fp8_e4m3fnuz'"):
            cls(kv_dtype="fp8_e4m3fnuz")
    assert g950.UnifiedAttention2DSpec(out_dtype="fp8_e4m3fn").out_dtype == "fp8_e4m3fn"
    assert g950.ReduceSegmentsSpec(out_dtype="fp8_e4m3fn").kernel_name.endswith("_ofp8_gfx950")
    with pytest.raises(ValueError, match="out_dtype"):
        g950.ReduceSegmentsSpec(out_dtype="fp8_e4m3fnuz")
    with pytest.raises(ValueError, match="kv_dtype"):
        a2.UnifiedAttention2DSpec(kv_dtype="fp8_e4m3fn")
    with pytest.raises(ValueError, match="kv_dtype: must be None"):
        dispatch.plan(_problem(kv_dtype="fp8_e4m3fnuz"))
    spec = dispatch.plan(_problem(kv_dtype="fp8_e4m3fn", max_seqlen_k=256), "2d").specs[0]
    assert spec.kv_dtype == "fp8_e4m3fn" and "_kvfp8" in spec.kernel_name


# ---- the entry point in ROCKE_DEVICE=emu:gfx950 against ref_paged_attn ----

MIXED = [(1, 37), (5, 21), (1, 1), (3, 50)]
LONG_DECODE = [(1, 600), (1, 530)]


@pytest.fixture
def emu_gfx950(monkeypatch):
    monkeypatch.setenv("ROCKE_DEVICE", "emu:gfx950")
    runtime.reset_devices()
    yield
    runtime.reset_devices()


def _check(args, record, dtype):
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"])
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err} ({record.plan.specs})"


@pytest.mark.parametrize("backend, seqs, dtype, d, bs, hq, hk, want", [
    ("2d", MIXED, "f16", 64, 16, 8, 2, "x8t_w4m32_t64"),          # GQA 4:1, flash wide4
    ("auto", MIXED, "bf16", 128, 32, 10, 2, "x8t_w4m32_t64_k2_32x32x16"),  # GQA 5:1, bf16 combo
    ("auto", MIXED, "bf16", 64, 16, 4, 4, "x8t_w4m32_t64_k2_32x32x16"),   # MHA, bf16 combo
    ("auto", MIXED, "f16", 128, 64, 8, 1, "x8t_w4m32_t64"),       # GQA 8:1, wide4 at gfx950's T = 64
    ("3d", MIXED, "f16", 64, 32, 2, 2, "narrow_w1m16"),           # MHA, prefill rows through 3D
    ("auto", LONG_DECODE, "bf16", 128, 16, 8, 2, "narrow_w1m16"),  # long decode -> 3D + reduce
])
def test_entry_point_matches_reference_on_gfx950(emu_gfx950, backend, seqs, dtype, d, bs, hq, hk, want):
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=d + bs + hq)
    record = au.run_unified_attention_torch(**args, backend=backend)
    name = record.plan.specs[0].kernel_name
    assert want in name and name.endswith("_gfx950"), name
    assert all(au.compiled(s).target.startswith("gfx950") for s in record.plan.specs)
    _check(args, record, dtype)


def test_a_gfx950_only_geometry_matches_reference(emu_gfx950):
    """71680 bytes of LDS: past gfx942's 64 KiB, inside gfx950's 160 KiB."""
    from tests.kernels.test_attention_2d import make_problem
    spec = g950.UnifiedAttention2DSpec(dtype="f16", head_size=128, block_size=64, num_queries_per_kv=4,
                                       num_warps=4, block_m_per_warp=32, tile_size=64)
    q_lens, kv_lens = [1, 33, 2], [70, 33, 129]
    q, kc, vc, table, cu, used = make_problem("f16", 128, 64, 4, q_lens, kv_lens, num_kv_heads=1)
    out = torch.full_like(q, 7.0)
    scale = 1 / math.sqrt(128)
    grid, block = a2.launch_geometry(spec, len(q_lens), q.shape[0], 1)
    ck = au.compiled(spec)
    assert ck.info.lds_bytes == 71680
    runtime.launch(ck, grid, block, a2.kernel_args(spec, q, kc, vc, out, table, cu, used, scale))
    err = (out.float() - ref_paged_attn(q, kc, vc, cu, used, table, scale)).abs().max().item()
    assert err <= attention_atol("f16"), err


def test_fnuz_fp8_is_refused_before_launch_on_gfx950(emu_gfx950):
    args = make_inputs(MIXED, hq=4, hk=2, d=64, bs=16, dtype="f16")
    args["k"] = args["k"].to(torch.float8_e4m3fnuz)
    args["v"] = args["v"].to(torch.float8_e4m3fnuz)
    before = args["out"].clone()
    with pytest.raises(ValueError, match=r"^k: fp8 cache dtype torch.float8_e4m3fnuz is not read "
                                         r"by this target's kernels, whose fp8 is OCP e4m3fn"):
        au.run_unified_attention_torch(**args)
    scales = torch.ones(args["k"].shape[:3])
    with pytest.raises(ValueError, match=r"^k: kv_quant_mode fp8_per_token_head needs "
                                         r"torch.float8_e4m3fn caches, got torch.float8_e4m3fnuz"):
        au.run_unified_attention_torch(**{**args, "k_descale": None, "v_descale": None},
                                       kv_quant_mode="fp8_per_token_head",
                                       k_scale_cache=scales, v_scale_cache=scales)
    out8 = torch.zeros(args["out"].shape, dtype=torch.float8_e4m3fnuz)
    with pytest.raises(ValueError, match=r"^out: with output_scale the output is fp8: out must be "
                                         r"torch.float8_e4m3fn \(the target's fp8\)"):
        au.run_unified_attention_torch(**{**args, "k": args["q"].new_zeros(args["k"].shape),
                                          "v": args["q"].new_zeros(args["v"].shape), "out": out8},
                                       output_scale=torch.tensor([1.0]))
    assert torch.equal(args["out"], before)


# fp8 KV whose codes span e4m3fn's range: |dequantized| <= ~1, codes up to 435 (past fnuz's 240)
FP8_SCALE = 435.0


def _fp8_caches(args):
    for name in ("k", "v"):
        args[name] = (args[name].float() * FP8_SCALE).to(torch.float8_e4m3fn)
    args["k_descale"] = torch.tensor([1 / FP8_SCALE])
    args["v_descale"] = torch.tensor([1 / FP8_SCALE])
    return args


@pytest.mark.parametrize("backend, dtype, d, bs, want", [
    ("2d", "f16", 64, 16, "_x8t_"), ("3d", "bf16", 64, 16, "_narrow_"),
    ("2d", "bf16", 128, 64, "_32x32x16"),        # the bf16 combo reads the dequantized tile
])
def test_fp8_kv_cache_matches_reference_on_gfx950(emu_gfx950, backend, dtype, d, bs, want):
    """An OCP e4m3fn cache decoded by gfx950's v_cvt_f32_fp8, against the reference reading the
    same codes; the codes read as gfx942's e4m3fnuz would be half the value (checked to miss)."""
    args = _fp8_caches(make_inputs([(1, 37), (3, 21)], hq=4, hk=2, d=d, bs=bs, dtype=dtype, seed=3))
    assert args["k"].float().abs().max() > 240        # codes only e4m3fn has
    record = au.run_unified_attention_torch(**args, backend=backend)
    spec = record.plan.specs[0]
    assert spec.kv_dtype == "fp8_e4m3fn" and want in spec.kernel_name, spec.kernel_name
    ref_of = lambda k, v: ref_paged_attn(args["q"], k, v, args["cu_seqlens_q"], args["seqused_k"],
                                         args["block_table"], args["softmax_scale"],
                                         k_descale=args["k_descale"], v_descale=args["v_descale"])
    err = (args["out"].float() - ref_of(args["k"], args["v"])).abs().max().item()
    assert err <= attention_atol(dtype, "fp8_e4m3fn"), err
    as_fnuz = ref_of(args["k"].view(torch.uint8).view(torch.float8_e4m3fnuz),
                     args["v"].view(torch.uint8).view(torch.float8_e4m3fnuz))
    miss = (args["out"].float() - as_fnuz).abs().max().item()
    assert miss > 2 * attention_atol(dtype), miss


@pytest.mark.parametrize("backend", ["2d", "3d"])
def test_fp8_output_matches_reference_on_gfx950(emu_gfx950, backend):
    """out torch.float8_e4m3fn with output_scale: clamped to +-448 and rounded to OCP e4m3fn
    (the 2D epilogue, or reduce_segments after 3D), past gfx942's 240."""
    from rocke.kernels.common.tolerances import fp8_output_bound
    args = make_inputs([(1, 37), (3, 21)], hq=4, hk=2, d=64, bs=16, dtype="bf16", seed=3)
    args["out"] = torch.zeros(args["out"].shape, dtype=torch.float8_e4m3fn)
    scale = torch.tensor([1 / 600.0])
    record = au.run_unified_attention_torch(**args, backend=backend, output_scale=scale)
    assert record.plan.specs[-1].out_dtype == "fp8_e4m3fn"
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"], output_scale=scale,
                         out_dtype=torch.float8_e4m3fn)
    got = args["out"].float()
    assert got.abs().max() > 240 and ref.abs().max() <= 448
    bound = fp8_output_bound("bf16", ref, float(scale), out_dtype="fp8_e4m3fn")
    assert ((got - ref).abs() <= bound).all(), (got - ref).abs().max()


@pytest.mark.parametrize("dtype, d, bs, backend", [("f16", 64, 16, "2d"), ("bf16", 64, 32, "3d")])
def test_score_features_on_gfx950(emu_gfx950, dtype, d, bs, backend):
    """softcap + ALiBi + sinks through the entry point (2D flash, 3D narrow) against the reference."""
    args = make_inputs(MIXED, hq=4, hk=2, d=d, bs=bs, dtype=dtype, seed=5)
    gen = torch.Generator().manual_seed(6)
    args["softcap"] = 5.0
    alibi = torch.tensor([2.0 ** (-8 * (h + 1) / 4) for h in range(4)])
    sinks = torch.randn(4, generator=gen)
    record = au.run_unified_attention_torch(**args, alibi_slopes=alibi, sinks=sinks, backend=backend)
    (spec, *_) = record.plan.specs
    assert spec.softcap and spec.alibi and spec.sinks and spec.kernel_name.endswith("_gfx950")
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"], softcap=5.0,
                         alibi_slopes=alibi, sinks=sinks)
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype), err


# ---- the feature family and the MQA group split on gfx950 (a representative subset) ----

PREFILL = [(9, 20), (6, 6), (1, 30)]
MM = [[[12, 16], [0, 0]], [[1, 4], [5, 3]], [[2, 29], [-1, -1]]]   # inclusive; start >= end unused


def _features(names, args, hq, seed):
    """(entry-point kwargs, reference kwargs) with values that move the output past the tolerance."""
    g = torch.Generator().manual_seed(seed)
    run, ref = {}, {}
    if "softcap" in names:
        run["softcap"] = ref["softcap"] = 0.15
    if "window" in names:
        run["window_size"] = ref["window_size"] = (5, 0)
    if "qq_bias" in names:
        run["qq_bias"] = ref["qq_bias"] = torch.randn(args["max_seqlen_q"] + 1, args["max_seqlen_q"] + 1,
                                                      generator=g)
    if "alibi" in names or "alibi_sqrt" in names:
        run["alibi_slopes"] = ref["alibi_slopes"] = torch.rand(hq, generator=g) * 0.5 + 0.3
    if "alibi_sqrt" in names:
        run["use_alibi_sqrt"] = ref["alibi_sqrt"] = True
    if "sinks" in names:
        run["sinks"] = ref["sinks"] = torch.randn(hq, generator=g) + 3.0
        args["v"] = (args["v"].float() + 1.0).to(args["v"].dtype)
    if "mm_prefix" in names:
        run["mm_prefix_range"] = ref["mm_prefix_range"] = torch.tensor(MM, dtype=torch.int32)
    for kind, mode, torch_dtype, top in (("i8tok", "int8_per_token_head", torch.int8, 127),
                                         ("fp8tok", "fp8_per_token_head", torch.float8_e4m3fn, 400)):
        if kind in names:          # codes and per-(token, head) scales whose products are ~U(-1, 1)
            nb, bs, hk, d = args["k"].shape
            caches, scales = [], []
            for _ in range(2):
                codes = torch.rand(nb, bs, hk, d, generator=g) * (2 * top) - top
                caches.append(codes.round().to(torch_dtype) if kind == "i8tok" else codes.to(torch_dtype))
                scales.append((torch.rand(nb, bs, hk, generator=g) + 0.5) / top)
            args["k"], args["v"] = caches
            run.update(kv_quant_mode=mode, k_scale_cache=scales[0], v_scale_cache=scales[1])
            args["k_descale"] = args["v_descale"] = None
            ref.update(k_scale_cache=scales[0], v_scale_cache=scales[1])
    return run, ref


@pytest.mark.parametrize("names, seqs, backend, dtype, d, bs, hq, hk, split", [
    ((), MIXED, "2d", "f16", 64, 16, 32, 1, 2),                                 # MQA 32:1
    (("alibi", "sinks"), MIXED, "3d", "bf16", 64, 64, 64, 1, 4),                # MQA 64:1, per-head
    (("softcap", "qq_bias", "window"), MIXED, "auto", "bf16", 128, 32, 4, 1, 1),  # narrow wide-K
    (("mm_prefix", "window"), PREFILL, "2d", "f16", 64, 16, 4, 2, 1),
    (("mm_prefix", "softcap", "sinks"), PREFILL, "3d", "bf16", 64, 64, 8, 1, 1),
    (("alibi_sqrt", "fp8tok"), MIXED, "3d", "f16", 64, 16, 4, 2, 1),            # OCP e4m3fn rows
    (("i8tok", "window"), MIXED, "2d", "bf16", 64, 16, 8, 2, 1),
])
def test_features_and_group_split_on_gfx950(emu_gfx950, names, seqs, backend, dtype, d, bs, hq, hk, split):
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=hq + bs + d)
    run, ref_kw = _features(names, args, hq, seed=len(names) + bs)
    record = au.run_unified_attention_torch(**{**args, **run}, backend=backend)
    spec = record.plan.specs[0]
    assert spec.kernel_name.endswith("_gfx950") and spec.group_split == split, spec.kernel_name
    if backend != "auto":
        assert record.plan.path == backend
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"], **ref_kw)
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype), f"{spec.kernel_name}: {err}"
    if names:    # the features matter on these inputs: ignoring them would fail the tolerance
        plain = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                               args["block_table"], args["softmax_scale"],
                               **{k: v for k, v in ref_kw.items() if k in ("k_scale_cache", "v_scale_cache")})
        assert (plain - ref).abs().max().item() > 3 * attention_atol(dtype), "features have no effect"


def test_shipped_gfx950_variants_are_what_the_dispatcher_plans():
    """The gfx950 attention families ship the dispatcher's specs (so `rocke list --target gfx950`
    and the golden table pin what the entry point launches): 2D flash and narrow (wide-K at
    block 64), 3D, reduce, fp8 KV (OCP) and an fp8 output."""
    from rocke.kernels.gfx950 import attention_shipped
    from rocke.kernels.registry import family_variants
    two = family_variants("attention_2d_gfx950")
    three = family_variants("attention_3d_gfx950")
    red = family_variants("reduce_segments_gfx950")
    assert all(type(v.spec) is g950.UnifiedAttention2DSpec for v in two.values())
    assert all(type(v.spec) is g950.UnifiedAttention3DSpec for v in three.values())
    assert all(type(v.spec) is g950.ReduceSegmentsSpec for v in red.values())
    names = " ".join(two) + " ".join(three) + " ".join(red)
    for tag in ("_x8t_", "_narrow_", "_16x16x32", "_32x32x16", "_kvfp8", "_ofp8", "_d64_", "_d128_",
                "/f16_", "/bf16_"):
        assert tag in names, tag
    assert all(v.spec.kv_dtype in (None, "fp8_e4m3fn") for v in {**two, **three}.values())
    problem = attention_shipped.problem_of("bf16", 64, 64, decode=False)
    planned = dispatch.plan(problem, "2d").specs[0]
    assert planned in [v.spec for v in two.values()] and planned.x8t_atom == "32x32x16"
    problem = attention_shipped.problem_of("bf16", 128, 64, decode=False, qq_bias=True)
    planned = dispatch.plan(problem, "2d").specs[0]
    assert planned in [v.spec for v in two.values()] and planned.narrow_atom == "16x16x32"


# ---- the transposed-32x32 combo on the wide-K 32x32x16 (gfx950's transposed-x8 policy) ----

def _x8t(**kw):
    base = dict(dtype="f16", head_size=64, block_size=16, num_queries_per_kv=4, num_warps=4,
                block_m_per_warp=32, regime="transposed_x8")
    return g950.UnifiedAttention2DSpec(**{**base, **kw})


def test_the_x8t_atom_policy_rules():
    assert _x8t().x8t_atom == "32x32x16" and _x8t(dtype="bf16").x8t_atom == "32x32x16"
    assert _x8t().kernel_name.endswith("_x8t_w4m32_t64_k2_32x32x16_gfx950")
    old = _x8t(x8t_atom="32x32x8")          # gfx942's atom, named as before
    assert old.kernel_name == "attention_2d_f16_d64_b16_g4_x8t_w4m32_t64_k2_gfx950"
    assert g950.UnifiedAttention2DSpec().x8t_atom is None          # narrow: no transposed atom
    with pytest.raises(ValueError, match="x8t_atom: must be one of None, 32x32x8, 32x32x16, got '16x16x32'"):
        _x8t(x8t_atom="16x16x32")
    with pytest.raises(ValueError, match="x8t_atom: 32x32x16 is the transposed-x8 regime's; regime 'narrow'"):
        g950.UnifiedAttention2DSpec(x8t_atom="32x32x16")
    # 32x32x8 has bf16 on both targets (v_mfma_f32_32x32x8_bf16)
    assert _x8t(dtype="bf16", x8t_atom="32x32x8").kernel_name.startswith("attention_2d_bf16_d64")
    with pytest.raises(ValueError, match="head_size: 256 has only the narrow path"):
        _x8t(head_size=256)
    assert a2.UnifiedAttention2DSpec(dtype="bf16", regime="transposed_x8", block_m_per_warp=32)  # gfx942
    assert not hasattr(a2.UnifiedAttention2DSpec(), "x8t_atom")
    # the gate accepts exactly what the constructor accepts
    assert g950.supports_tiled_2d(_x8t(dtype="bf16")) and g950.supports_tiled_2d(_x8t(), x8t_atom="32x32x8")
    assert g950.supports_tiled_2d(_x8t(), dtype="bf16", x8t_atom="32x32x8")
    assert not g950.supports_tiled_2d(x8t_atom="32x32x16")
    assert not g950.supports_tiled_2d(_x8t(), tile_size=16)


def _mfmas(spec) -> dict:
    import collections
    ops = collections.Counter(line.split()[0] for line in au.compiled(spec).asm.splitlines()
                              if "v_mfma" in line and not line.lstrip().startswith((";", ".")))
    return dict(ops)


def test_the_combo_halves_the_transposed_regimes_mfmas():
    """32x32x16 reduces 16 elements per MFMA, 32x32x8 8: the same kernel issues half as many
    (f16 d64 wide4, T = 64: QK 2 key blocks x 4 head-dim steps, PV 2 x 4 key steps x 2 head-dim
    blocks = 32 MFMAs a tile step per unrolled copy), in one of each loop phase."""
    wide, narrow = _mfmas(_x8t()), _mfmas(_x8t(x8t_atom="32x32x8"))
    assert set(wide) == {"v_mfma_f32_32x32x16_f16"} and set(narrow) == {"v_mfma_f32_32x32x8_f16"}
    assert 2 * wide["v_mfma_f32_32x32x16_f16"] == narrow["v_mfma_f32_32x32x8_f16"]
    assert set(_mfmas(_x8t(dtype="bf16"))) == {"v_mfma_f32_32x32x16_bf16"}


def test_the_dispatcher_plans_the_combo_for_both_dtypes():
    for dtype in ("f16", "bf16"):
        for d in (64, 128):
            plan = dispatch.plan(_problem(dtype=dtype, head_size=d, max_seqlen_k=256), "2d")
            (spec,) = plan.specs
            assert spec.transposed_x8 and spec.x8t_atom == "32x32x16", spec.kernel_name
            assert "32x32x16" in plan.geometry.reason
            assert ("bf16 takes fp16's transposed-x8 row" in plan.geometry.reason) == (dtype == "bf16")
    # a window alone masks by interval on the combo (the plain mask spilled on gfx950)
    (spec,) = dispatch.plan(_problem(max_seqlen_k=256, window_left=8), "2d").specs
    assert spec.transposed_x8 and spec.sliding_window and spec.interval_mask
    assert gfx942.plan(_problem(max_seqlen_k=256, window_left=8), "2d").specs[0].interval_mask
    # refused: d256 and QQ-bias stay narrow, 3D keeps its narrow 16x16x16
    for kw in (dict(head_size=256), dict(qq_bias=True)):
        (spec,) = dispatch.plan(_problem(dtype="bf16", max_seqlen_k=256, **kw), "2d").specs
        assert spec.regime == "narrow" and spec.x8t_atom is None
    spec3 = dispatch.plan(_problem(dtype="bf16", num_seqs=8, total_q=8, max_seqlen_k=2048), "3d").specs[0]
    assert spec3.regime == "narrow" and not hasattr(spec3, "x8t_atom")


PREFILL_MIX = [(7, 7), (1, 40), (19, 19), (3, 66)]      # causal prefill, decode row, chunked prefill


@pytest.mark.parametrize("dtype, d, bs, hq, hk, names", [
    ("f16", 64, 16, 4, 4, ()),                          # MHA
    ("bf16", 64, 64, 8, 2, ()),                         # GQA 4:1
    ("bf16", 128, 16, 10, 2, ("softcap", "alibi")),     # GQA 5:1, d128 at T = 64
    ("f16", 128, 64, 8, 1, ("window",)),                # GQA 8:1, a window alone
    ("bf16", 64, 16, 8, 1, ("window", "alibi", "sinks")),   # GQA 8:1, interval mask
])
def test_the_combo_matches_reference_on_gfx950(emu_gfx950, dtype, d, bs, hq, hk, names):
    args = make_inputs(PREFILL_MIX, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=hq * d + bs)
    run, ref_kw = _features(names, args, hq, seed=bs + d)
    if "softcap" in names:
        run["softcap"] = ref_kw["softcap"] = 4.0
    record = au.run_unified_attention_torch(**{**args, **run}, backend="2d")
    (spec,) = record.plan.specs
    assert spec.x8t_atom == "32x32x16" and spec.dtype == dtype, spec.kernel_name
    assert _mfmas(spec) and set(_mfmas(spec)) == {f"v_mfma_f32_32x32x16_{dtype}"}
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"], **ref_kw)
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype), f"{spec.kernel_name}: {err}"
    if names:
        plain = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                               args["block_table"], args["softmax_scale"])
        assert (plain - ref).abs().max().item() > 3 * attention_atol(dtype), "features have no effect"


@pytest.mark.parametrize("lever", ["cfv_store", "q_direct"])
def test_the_combo_levers_match_reference_on_gfx950(emu_gfx950, lever):
    """The row-major V tile (its transposed half-K reads) and Q read straight from global (its
    8-element B runs), bf16 d64 wide2."""
    from tests.kernels.test_attention_2d import make_problem
    spec = _x8t(dtype="bf16", num_warps=2, num_queries_per_kv=5, **{lever: True})
    q_lens, kv_lens = [1, 33, 2], [70, 33, 129]
    q, kc, vc, table, cu, used = make_problem("bf16", 64, 16, 5, q_lens, kv_lens, num_kv_heads=1)
    out = torch.full_like(q, 7.0)
    grid, block = a2.launch_geometry(spec, len(q_lens), q.shape[0], 1)
    runtime.launch(au.compiled(spec), grid, block,
                   a2.kernel_args(spec, q, kc, vc, out, table, cu, used, 0.125))
    err = (out.float() - ref_paged_attn(q, kc, vc, cu, used, table, 0.125)).abs().max().item()
    assert err <= attention_atol("bf16"), err


# ---- gfx950 geometry levers (ALGORITHM.md §14): the sliding-window prelude-light geometry ----

@pytest.mark.parametrize("kw, warps, tile", [
    (dict(dtype="bf16", block_size=32), 2, 64),                  # wide2, T = 2 * block_size, k1
    (dict(dtype="bf16", block_size=16), 2, 32),
    (dict(dtype="bf16", block_size=16, head_size=64), 2, 32),
    (dict(dtype="bf16", block_size=64), 4, 64),                  # T = 128 is no tile: wide4
    (dict(dtype="f16", block_size=32), 4, 64),                   # bf16 only
    (dict(dtype="bf16", block_size=32, kv_dtype="fp8_e4m3fn"), 4, 64),   # fp8 KV keeps 4 warps
    (dict(dtype="bf16", block_size=32, alibi=True), 4, 64),      # compiled for a window alone
])
def test_a_bf16_window_takes_the_prelude_light_geometry(kw, warps, tile):
    p = _problem(num_seqs=4, total_q=4096, max_seqlen_q=1024, max_seqlen_k=1024, window_left=128, **kw)
    plan = dispatch.plan(p, "2d")
    (spec,) = plan.specs
    assert (spec.num_warps, spec.tile_size, spec.x8t_atom) == (warps, tile, "32x32x16"), spec.kernel_name
    assert spec.use_k_single_buffer == (warps * 32 <= tile)
    assert ("prelude-light" in plan.geometry.reason) == (warps == 2)
    no_window = dispatch.plan(_problem(num_seqs=4, total_q=4096, max_seqlen_q=1024,
                                       max_seqlen_k=1024, **kw), "2d").specs[0]
    assert no_window.num_warps == 4


def test_the_prelude_light_geometry_matches_reference_on_gfx950(emu_gfx950):
    args = make_inputs(PREFILL_MIX, hq=8, hk=1, d=64, bs=16, dtype="bf16", seed=71)
    run, ref_kw = _features(("window",), args, 8, seed=71)
    record = au.run_unified_attention_torch(**{**args, **run}, backend="2d")
    (spec,) = record.plan.specs
    assert (spec.num_warps, spec.tile_size, spec.x8t_atom) == (2, 32, "32x32x16"), spec.kernel_name
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"], **ref_kw)
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol("bf16"), f"{spec.kernel_name}: {err}"


# ---- waves_per_eu on the d64 block-32 GQA-8 serving combo ----

@pytest.mark.parametrize("kw, waves", [
    (dict(dtype="bf16"), 3),
    (dict(dtype="f16"), 3),
    (dict(dtype="bf16", num_seqs=1, total_q=1024, max_seqlen_q=1024), 0),   # multi-sequence only
    (dict(dtype="bf16", block_size=16), 0),                       # compiled for block 32
    (dict(dtype="bf16", num_q_heads=32), 0),                      # GQA 4:1
    (dict(dtype="bf16", alibi=True), 0),                          # no feature compiled
])
def test_the_d64_gqa8_serving_combo_asks_for_3_waves_per_eu(kw, waves):
    base = dict(head_size=64, num_q_heads=64, num_kv_heads=8, block_size=32, num_seqs=16,
                total_q=16 * 256, max_seqlen_q=256, max_seqlen_k=4096)
    plan = dispatch.plan(_problem(**{**base, **kw}), "2d")
    (spec,) = plan.specs
    assert spec.x8t_atom == "32x32x16" and spec.num_warps == 4, spec.kernel_name
    assert spec.waves_per_eu == waves, spec.kernel_name
    assert ("waves_per_eu=3" in plan.geometry.reason) == (waves == 3)


def test_a_waves_per_eu_knob_wins_on_gfx950():
    from rocke.kernels.common.knobs import AttentionKnobs
    p = _problem(dtype="bf16", head_size=64, num_q_heads=64, num_kv_heads=8, block_size=32,
                 num_seqs=16, total_q=16 * 256, max_seqlen_q=256, max_seqlen_k=4096)
    assert dispatch.plan(p, "2d", AttentionKnobs(waves_per_eu=2)).specs[0].waves_per_eu == 2


def test_the_3_waves_combo_is_spill_free_and_matches_reference_on_gfx950(emu_gfx950):
    args = make_inputs(PREFILL_MIX, hq=8, hk=1, d=64, bs=32, dtype="bf16", seed=83)
    record = au.run_unified_attention_torch(**args, backend="2d")
    (spec,) = record.plan.specs
    assert (spec.waves_per_eu, spec.num_warps, spec.tile_size) == (3, 4, 64), spec.kernel_name
    info = au.compiled(spec).info
    assert (info.vgpr_spills, info.sgpr_spills) == (0, 0)
    assert info.occupancy.waves_per_simd == 3 and not info.occupancy_missed
    _check(args, record, "bf16")


# ---- the d128 single-batch K-single-buffer lever: not taken on gfx950 (LDS does not bind) ----

def test_gfx950_lds_does_not_bind_the_d128_combo_so_k_stays_double_buffered():
    """With the K double buffer the d128 combo's LDS (53248 B at T = 64) admits 3 workgroups per
    CU on gfx950's 160 KiB, where its 256 VGPRs admit 2: a single K buffer (35840 B) changes
    nothing there; on gfx942's 64 KiB the same LDS would admit 1 (where the lever comes from)."""
    from rocke.arch import get_target
    from rocke.arch.occupancy_rules import occupancy
    k2 = g950.UnifiedAttention2DSpec(dtype="bf16", head_size=128, block_size=32, num_queries_per_kv=8,
                                     num_warps=4, block_m_per_warp=32, tile_size=64,
                                     regime="transposed_x8", use_k_single_buffer=False)
    k1 = g950.UnifiedAttention2DSpec(**{**{f: getattr(k2, f) for f in ("dtype", "head_size", "block_size",
                                        "num_queries_per_kv", "num_warps", "block_m_per_warp",
                                        "tile_size", "regime")}, "use_k_single_buffer": True})
    lds2, lds1 = (sum(a2.lds_model(s).values()) for s in (k2, k1))
    assert (lds2, lds1) == (53248, 35840)
    t = get_target("gfx950")
    assert t.lds_bytes_per_cu // lds2 == 3
    for lds in (lds2, lds1):
        occ = occupancy(vgprs=256, lds_bytes=lds, workgroup_size=256, target="gfx950")
        assert (occ.workgroups_per_cu, occ.limiter) == (2, "vgpr")
    assert get_target("gfx942").lds_bytes_per_cu // lds2 == 1
    single_batch = _problem(dtype="bf16", num_q_heads=32, num_kv_heads=4, block_size=32, num_seqs=1,
                            total_q=4096, max_seqlen_q=4096, max_seqlen_k=4096)
    (spec,) = dispatch.plan(single_batch).specs
    assert (spec.num_warps, spec.tile_size, spec.use_k_single_buffer) == (4, 64, False), spec.kernel_name
