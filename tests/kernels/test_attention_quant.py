"""fp8 output (output_scale), per-token-head KV scales (int8 / fp8 caches with k/v scale caches)
and square-root ALiBi (ALGORITHM.md §13) through run_unified_attention_torch and rocke.vllm in
the emulator, against ``ref_paged_attn``: each alone and with the existing features, on both
paths, fp16/bf16, block 16/64, GQA 1/4/5/8; bad inputs refused before launch."""
import math

import pytest
import torch

from rocke import runtime
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol, fp8_output_bound
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx942 import attention_tiled_3d as a3
from rocke.kernels.gfx942.reduce_segments import ReduceSegmentsSpec
from rocke.vllm import KVQuantMode, unified_attention
from tests.kernels.unified_inputs import make_inputs

MIXED = [(1, 37), (4, 21), (2, 30)]          # decode and prefill rows, KV off the page size
OUT_SCALE = 0.02                             # outputs up to ~1 -> fp8 values up to ~50


def _quant_caches(args, kind, seed):
    """int8 / fp8 codes and per-(token, head) fp32 scales whose products are ~U(-1, 1)."""
    g = torch.Generator().manual_seed(seed)
    nb, bs, hk, d = args["k"].shape
    top = 127 if kind == "i8tok" else 200
    caches, scales = [], []
    for _ in range(2):
        codes = torch.rand(nb, bs, hk, d, generator=g) * (2 * top) - top
        caches.append(codes.round().to(torch.int8) if kind == "i8tok"
                      else codes.to(torch.float8_e4m3fnuz))
        scales.append((torch.rand(nb, bs, hk, generator=g) + 0.5) / top)
    return caches, scales


def _setup(names, seqs, dtype, d, bs, hq, hk, seed):
    """(entry-point kwargs, reference kwargs, reference kwargs without the new features)."""
    g = torch.Generator().manual_seed(seed + 100)
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=seed)
    ref, plain = {}, {}
    if "softcap" in names:
        args["softcap"] = ref["softcap"] = plain["softcap"] = 0.15
    if "window" in names:
        args["window_size"] = ref["window_size"] = plain["window_size"] = (5, 0)
    if "sinks" in names:
        args["sinks"] = ref["sinks"] = plain["sinks"] = torch.randn(hq, generator=g) + 3.0
    if "alibi" in names or "sqrt" in names:
        slopes = torch.rand(hq, generator=g) * 0.5 + 0.3
        args["alibi_slopes"] = ref["alibi_slopes"] = plain["alibi_slopes"] = slopes
    if "sqrt" in names:
        args["use_alibi_sqrt"] = ref["alibi_sqrt"] = True
    if "qqb" in names:
        max_q = args["max_seqlen_q"]
        args["qq_bias"] = ref["qq_bias"] = plain["qq_bias"] = \
            torch.randn(max_q + 1, max_q + 1, generator=g) * 2
    if "kvfp8" in names:            # per-tensor fp8 cache with per-head descales
        for c in ("k", "v"):
            args[c] = (args[c].float() * 4).to(torch.float8_e4m3fnuz)
            args[f"{c}_descale"] = ref[f"{c}_descale"] = plain[f"{c}_descale"] = \
                torch.full((hk,), 0.25)
    for kind, mode in (("i8tok", "int8_per_token_head"), ("fp8tok", "fp8_per_token_head")):
        if kind in names:
            (args["k"], args["v"]), (ks, vs) = _quant_caches(args, kind, seed)
            args.update(kv_quant_mode=mode, k_scale_cache=ks, v_scale_cache=vs,
                        k_descale=None, v_descale=None)
            ref.update(k_scale_cache=ks, v_scale_cache=vs)
            # without the scales: one scale for every row (the mean), a visibly different answer
            plain.update(k_descale=torch.tensor(float(ks.mean())), v_descale=torch.tensor(float(vs.mean())))
    if "out" in names:
        args["output_scale"] = torch.tensor([OUT_SCALE])
        args["out"] = torch.full(args["q"].shape, 7.0).to(torch.float8_e4m3fnuz)
        ref["output_scale"] = args["output_scale"]
    return args, ref, plain


def _reference(args, **kw):
    return ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                          args["block_table"], args["softmax_scale"], **kw)


def _check(names, args, ref_kw, plain_kw, dtype):
    ref = _reference(args, **ref_kw)
    out = args["out"].float()
    kv = "fp8_e4m3fnuz" if "kvfp8" in names else None
    if "out" in names:
        bound = fp8_output_bound(dtype, ref, OUT_SCALE, kv)
        assert ref.abs().max() > 10, "outputs too small to exercise the fp8 range"
        assert bool(((out - ref).abs() <= bound).all()), \
            f"fp8 out off by {((out - ref).abs() / bound).max().item():.2f} bounds"
        ref = ref * OUT_SCALE          # the effect checks below in the output's own units
        out = out * OUT_SCALE
    else:
        err = (out - ref).abs().max().item()
        assert err <= attention_atol(dtype, kv), f"max |out - ref| {err}"
    if "qqb" in names:      # the bias matters on these inputs too
        no_bias = _reference(args, **{k: v for k, v in ref_kw.items() if k != "qq_bias"})
        scale = OUT_SCALE if "out" in names else 1.0
        assert (no_bias * scale - ref).abs().max().item() > 3 * attention_atol(dtype), "qq_bias has no effect"
    if names & {"sqrt", "i8tok", "fp8tok"}:
        # the new feature matters on these inputs: ignoring it would fail the tolerance
        plain = _reference(args, **plain_kw)
        assert (plain - ref).abs().max().item() > 3 * attention_atol(dtype), "feature has no effect"


@pytest.mark.parametrize("names, backend, dtype, d, bs, hq, hk", [
    # each alone: both paths, both dtypes, block 16/64, GQA 1/4/5/8
    ({"sqrt"}, "2d", "f16", 64, 16, 8, 2),            # transposed-x8, G4
    ({"sqrt"}, "3d", "bf16", 64, 64, 5, 1),           # G5
    ({"out"}, "2d", "bf16", 64, 16, 8, 1),            # narrow, G8
    ({"out"}, "2d", "f16", 64, 64, 2, 2),             # transposed-x8 (fp8 LDS stage), G1
    ({"out"}, "3d", "f16", 64, 64, 4, 1),             # reduce_segments quantizes, G4
    ({"i8tok"}, "2d", "f16", 64, 64, 10, 2),          # G5
    ({"i8tok"}, "3d", "bf16", 64, 16, 2, 2),          # G1
    ({"fp8tok"}, "2d", "bf16", 64, 16, 8, 2),         # G4
    ({"fp8tok"}, "3d", "f16", 128, 64, 8, 1),         # d128, G8
    # with the existing features
    ({"sqrt", "softcap", "window", "sinks"}, "2d", "bf16", 64, 16, 8, 2),
    ({"sqrt", "softcap", "sinks"}, "3d", "f16", 64, 16, 10, 2),
    ({"out", "kvfp8", "alibi"}, "2d", "f16", 64, 64, 8, 1),
    ({"out", "i8tok", "sqrt", "window"}, "2d", "bf16", 64, 16, 2, 2),
    ({"out", "fp8tok", "sinks", "window"}, "3d", "bf16", 64, 64, 8, 2),
    # QQ-bias with the per-token-head scales (the dispatcher runs QQ-bias narrow)
    ({"qqb", "i8tok"}, "2d", "f16", 64, 16, 8, 2),
    ({"qqb", "fp8tok"}, "3d", "bf16", 64, 64, 4, 1),
    ({"qqb", "fp8tok", "softcap", "window"}, "2d", "bf16", 128, 16, 5, 1),
    ({"qqb", "i8tok", "out", "sinks"}, "3d", "f16", 64, 16, 2, 2),
])
def test_matches_reference(names, backend, dtype, d, bs, hq, hk):
    args, ref_kw, plain_kw = _setup(names, MIXED, dtype, d, bs, hq, hk, seed=d + bs + hq)
    record = au.run_unified_attention_torch(**args, backend=backend)
    spec = record.plan.specs[0]
    assert spec.alibi_sqrt == ("sqrt" in names)
    assert spec.qq_bias == ("qqb" in names)
    assert spec.kv_token_scales == bool(names & {"i8tok", "fp8tok"})
    out_spec = record.plan.specs[-1]      # 2D: the kernel; 3D: reduce_segments
    assert out_spec.out_dtype == ("fp8_e4m3fnuz" if "out" in names else None)
    _check(names, args, ref_kw, plain_kw, dtype)


def test_fp8_output_saturates_like_vllm():
    """Outputs beyond e4m3fnuz's range after / output_scale store +-240, not NaN."""
    args, ref_kw, _ = _setup({"out"}, [(1, 20), (2, 9)], "f16", 64, 16, 4, 2, seed=3)
    args["output_scale"] = ref_kw["output_scale"] = torch.tensor([1e-3])   # |o| ~0.5 -> ~500
    au.run_unified_attention_torch(**args, backend="2d")
    ref = _reference(args, **ref_kw)
    assert (ref.abs() == 240).float().mean() > 0.1
    assert torch.equal(args["out"].float().abs() == 240, ref.abs() == 240)
    assert not args["out"].float().isnan().any()


def test_vllm_entry_runs_the_new_arguments_on_both_paths():
    """rocke.vllm.unified_attention: output_scale, use_alibi_sqrt and INT8_PER_TOKEN_HEAD with
    its scale caches (k/v_descale not read, as in vLLM's kernel), decode on 3D with the caller's
    workspaces, then on 2D."""
    names = {"out", "sqrt", "i8tok"}
    args, ref_kw, plain_kw = _setup(names, [(1, 40), (1, 23)], "f16", 64, 16, 4, 1, seed=5)
    kw = dict(args)
    kw.pop("kv_quant_mode")
    kw.update(kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD,
              k_descale=torch.tensor(3.0), v_descale=torch.tensor(5.0))    # ignored
    hq = args["q"].shape[1]
    ws = dict(softmax_segm_output=torch.zeros(2, hq, 3, 64), softmax_segm_max=torch.zeros(2, hq, 3),
              softmax_segm_expsum=torch.zeros(2, hq, 3))
    unified_attention(**kw, seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    assert ws["softmax_segm_expsum"].abs().sum() > 0          # the 3D path ran
    _check(names, args, ref_kw, plain_kw, "f16")
    args["out"].fill_(0)
    unified_attention(**kw)                                    # 2D (no 3D arguments)
    _check(names, args, ref_kw, plain_kw, "f16")


def _bad(mutate):
    args, _, _ = _setup({"out", "i8tok", "sqrt"}, [(1, 20), (2, 9)], "f16", 64, 16, 4, 2, seed=1)
    mutate(args)
    return args


@pytest.mark.parametrize("mutate, match", [
    (lambda a: a.update(output_scale=0.5), r"^output_scale: must be a one-element torch.float32"),
    (lambda a: a.update(output_scale=torch.tensor([0.5, 1.0])), r"^output_scale: must be a one-element"),
    (lambda a: a.update(output_scale=torch.tensor([0.5], dtype=torch.float64)), r"^output_scale: must be"),
    (lambda a: a.update(output_scale=torch.tensor([0.0])), r"^output_scale: must be finite and > 0"),
    (lambda a: a.update(output_scale=torch.tensor([math.nan])), r"^output_scale: must be finite"),
    (lambda a: a.update(output_scale=None), r"^out: an torch.float8_e4m3fnuz output needs output_scale"),
    (lambda a: a.update(out=a["out"].to(torch.float8_e4m3fn)), r"^out: with output_scale the output is fp8"),
    (lambda a: a.update(use_alibi_sqrt=1), r"^use_alibi_sqrt: must be a bool"),
    (lambda a: a.update(alibi_slopes=None), r"^use_alibi_sqrt: square-root ALiBi scales alibi_slopes"),
    (lambda a: a.update(kv_quant_mode="int2_per_token_head"), r"^kv_quant_mode: must be None or one of"),
    (lambda a: a.update(k_scale_cache=None), r"^k_scale_cache: kv_quant_mode int8_per_token_head needs"),
    (lambda a: a.update(v_scale_cache=a["v_scale_cache"][:, :, :1]), r"^v_scale_cache: shape must be"),
    (lambda a: a.update(k_scale_cache=a["k_scale_cache"].half()), r"^k_scale_cache: dtype must be torch.float32"),
    (lambda a: a["k_scale_cache"].__setitem__((int(a["block_table"][1, 0]), 3, 1), math.inf),
     r"^k_scale_cache: entries a call reads must be finite; sequence 1 token 3 .* holds inf"),
    (lambda a: a.update(k=a["k"].view(torch.uint8)), r"^k: kv_quant_mode int8_per_token_head needs torch.int8"),
    (lambda a: a.update(kv_quant_mode="none"), r"^k_scale_cache: scale caches are read only by"),
    (lambda a: a.update(k_descale=torch.tensor(2.0)), r"^k_descale: a non-fp8 KV cache"),
])
def test_bad_inputs_are_refused_before_launch(monkeypatch, mutate, match):
    args = _bad(mutate)
    before = args["out"].clone()
    launched = []
    monkeypatch.setattr(runtime, "launch", lambda *x, **y: launched.append(x))
    with pytest.raises(ValueError, match=match):
        au.run_unified_attention_torch(**args, backend="2d")
    assert not launched
    assert torch.equal(args["out"].view(torch.uint8), before.view(torch.uint8))


def test_vllm_entry_refuses_scale_caches_outside_their_modes(monkeypatch):
    args = _bad(lambda a: None)
    for key in ("kv_quant_mode",):
        args.pop(key)
    launched = []
    monkeypatch.setattr(runtime, "launch", lambda *x, **y: launched.append(x))
    with pytest.raises(ValueError, match=r"^k_scale_cache: scale caches belong to the per-token-head"):
        unified_attention(**args, kv_quant_mode=KVQuantMode.FP8_PER_TENSOR)
    with pytest.raises(ValueError, match=r"^k: kv_quant_mode fp8_per_token_head needs torch.float8"):
        unified_attention(**args, kv_quant_mode=KVQuantMode.FP8_PER_TOKEN_HEAD)
    assert not launched


def test_spec_rules_and_names():
    base = dict(dtype="f16", head_size=64, block_size=16, **a2.narrow_geometry("f16", 64))
    with pytest.raises(ValueError, match="^alibi_sqrt: .* needs alibi=True"):
        a2.UnifiedAttention2DSpec(**base, alibi_sqrt=True)
    with pytest.raises(ValueError, match="^kv_dtype: must be one of fp8_e4m3fnuz, got 'i8'"):
        a2.UnifiedAttention2DSpec(**base, kv_dtype="i8")
    with pytest.raises(ValueError, match="^kv_token_scales: .* kv_dtype must be one of"):
        a2.UnifiedAttention2DSpec(**base, kv_token_scales=True)
    with pytest.raises(ValueError, match="^out_dtype: must be None"):
        a2.UnifiedAttention2DSpec(**base, out_dtype="f16")
    with pytest.raises(ValueError, match="^out_dtype: the 3D kernel writes fp32 partials"):
        a3.UnifiedAttention3DSpec(**base, out_dtype="fp8_e4m3fnuz")
    with pytest.raises(ValueError, match="out_dtype"):
        ReduceSegmentsSpec("f16", 64, out_dtype="f16")
    plain = a2.UnifiedAttention2DSpec(**base, alibi=True)
    spec = a2.UnifiedAttention2DSpec(**base, alibi=True, alibi_sqrt=True, out_dtype="fp8_e4m3fnuz",
                                     kv_dtype="i8", kv_token_scales=True)
    assert spec.kernel_name == plain.kernel_name + "_asqrt_kvi8tok_ofp8"
    assert not spec.fp8_kv          # per-token-head scales take no per-tensor descale arguments


@pytest.mark.parametrize("backend", ["2d", "3d"])
def test_garbage_in_unread_scale_slots_is_accepted_and_never_reaches_the_math(backend):
    """vLLM's scale caches hold garbage past each sequence (and in pages no sequence uses): only
    the slots a call reads are checked, and NaN in the others changes nothing."""
    args, ref_kw, plain_kw = _setup({"i8tok"}, MIXED, "f16", 64, 16, 4, 2, seed=7)
    bs = args["k"].shape[1]
    used = torch.zeros(args["k"].shape[:2], dtype=torch.bool)
    for s, kv in enumerate(args["seqused_k"].tolist()):
        for t in range(kv):
            used[int(args["block_table"][s, t // bs]), t % bs] = True
    assert (~used).sum() > bs, "the case needs unread slots in used and unused pages"
    for name in ("k_scale_cache", "v_scale_cache"):
        args[name][~used] = math.nan
    au.run_unified_attention_torch(**args, backend=backend)
    _check({"i8tok"}, args, ref_kw, plain_kw, "f16")
