"""An fp8 query (vLLM quantises q to the fp8 cache's encoding on gfx942 and passes q_descale, out
staying fp16/bf16): through ``run_unified_attention_torch`` and ``rocke.vllm`` in the emulator,
2D and 3D, against the fp32 reference of the dequantized values (ALGORITHM.md §11.1)."""
from __future__ import annotations

import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.unified_inputs import make_inputs

FP8 = torch.float8_e4m3fnuz
MIXED = [(1, 37), (5, 21), (3, 3)]
DECODE = [(1, 530), (1, 77)]


def _fp8_query_inputs(seqs, *, hq, hk, d, bs, dtype, seed=0):
    """fp8 q, k and v (codes up to +-30) with per-tensor descales keeping the dequantized values
    in the 16-bit tests' range; out in ``dtype``."""
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=seed)
    g = torch.Generator().manual_seed(seed + 7)
    for name in ("q", "k", "v"):
        raw = (torch.rand(args[name].shape, generator=g) * 2 - 1) * 30
        args[name] = raw.to(FP8)
    args["q_descale"] = torch.tensor([0.05])
    args["k_descale"] = torch.tensor(0.04)
    args["v_descale"] = torch.tensor([0.06])
    return args


def _check(args, dtype):
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"], q_descale=args["q_descale"],
                         k_descale=args["k_descale"], v_descale=args["v_descale"])
    assert args["out"].dtype == {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype, "fp8_e4m3fnuz"), f"max |out - ref| {err}"


@pytest.mark.parametrize("backend, seqs, dtype, d, hq, hk, q_direct, path", [
    ("2d", MIXED, "f16", 64, 8, 2, "0", "2d"),
    ("2d", MIXED, "bf16", 128, 10, 2, "1", "2d"),          # Q operands straight from global
    ("3d", MIXED, "bf16", 64, 8, 2, "0", "3d"),
    ("auto", DECODE, "f16", 128, 4, 1, "0", "3d"),
], ids=["2d_f16_d64", "2d_bf16_d128_qdirect", "3d_bf16_d64", "auto_decode_f16"])
def test_an_fp8_query_matches_the_reference(monkeypatch, backend, seqs, dtype, d, hq, hk,
                                            q_direct, path):
    monkeypatch.setenv("HIPDNN_GFX942_Q_DIRECT", q_direct)
    args = _fp8_query_inputs(seqs, hq=hq, hk=hk, d=d, bs=16, dtype=dtype)
    record = au.run_unified_attention_torch(**args, backend=backend)
    assert record.plan.path == path
    assert all(getattr(s, "q_fp8", True) for s in record.plan.specs[:1])
    assert "_qfp8" in record.plan.specs[0].kernel_name
    assert record.plan.specs[0].q_direct == (q_direct == "1")
    _check(args, dtype)


def test_fp8_nan_in_the_query_gives_a_nan_row(monkeypatch):
    """NaN in, NaN out (ALGORITHM.md §2.2): fp8's NaN code (0x80) in one query row."""
    args = _fp8_query_inputs(MIXED, hq=4, hk=2, d=64, bs=16, dtype="f16")
    args["q"].view(torch.uint8)[0, 0, 0] = 0x80
    au.run_unified_attention_torch(**args, backend="2d")
    assert torch.isnan(args["out"][0, 0]).all() and not torch.isnan(args["out"][1:]).any()


def test_vllm_passes_an_fp8_query_through_its_contract():
    """rocke.vllm.unified_attention with vLLM's fp8 arguments: q and the caches fp8, q_descale
    per tensor, k/v descales expanded per sequence, out bf16."""
    from rocke.vllm import KVQuantMode, unified_attention
    args = _fp8_query_inputs(MIXED, hq=8, hk=2, d=64, bs=16, dtype="bf16")
    n = len(MIXED)
    args["k_descale"] = args["k_descale"].expand(n, 2)
    args["v_descale"] = torch.tensor(0.06).expand(n, 2)
    unified_attention(**args, kv_quant_mode=KVQuantMode.FP8_PER_TENSOR)
    _check(args, "bf16")


@pytest.mark.parametrize("change, error, match", [
    (dict(q_descale=None), ValueError, "q_descale: the fp8 query needs its dequantization scale"),
    (dict(q_descale=torch.tensor([0.05, 0.05])), NotImplementedError,
     "q_descale: a per-head query scale"),
    (dict(q_descale=torch.tensor([-1.0])), ValueError, "q_descale: fp8 dequantization scales"),
    ("16-bit cache", ValueError, "q: an fp8 query"),
    ("fp8 out", ValueError, "out: an .*float8_e4m3fnuz output needs output_scale"),
], ids=["no_descale", "per_head", "negative", "16bit_cache", "fp8_out_unscaled"])
def test_what_an_fp8_query_needs_is_named_before_launch(change, error, match):
    args = _fp8_query_inputs(MIXED, hq=4, hk=2, d=64, bs=16, dtype="f16")
    if change == "16-bit cache":
        args.update(k=args["k"].to(torch.float16), v=args["v"].to(torch.float16), k_descale=None,
                    v_descale=None)
    elif change == "fp8 out":
        args.update(out=torch.zeros_like(args["q"]))
    else:
        args.update(change)
    before = args["out"].clone()
    with pytest.raises(error, match=match):
        au.run_unified_attention_torch(**args)
    assert torch.equal(args["out"].view(torch.uint8), before.view(torch.uint8))


@pytest.mark.parametrize("backend", ["2d", "3d"])
def test_an_fp8_query_with_an_fp8_output_matches_the_reference(backend):
    """vLLM's fp8 query with its fused output quantization (``output_scale``): computed in f16
    (ALGORITHM.md §11.1), the output quantized by the 2D kernel or the 3D reduction."""
    from rocke.kernels.common.tolerances import fp8_output_bound
    args = _fp8_query_inputs(MIXED, hq=8, hk=2, d=64, bs=16, dtype="f16", seed=4)
    for name in ("q", "v"):          # outputs up to ~100: fp8's range, past its subnormals
        args[name] = (args[name].float() * 4).to(FP8)
    scale = torch.tensor([0.25])
    args.update(out=torch.zeros_like(args["q"]), output_scale=scale)
    record = au.run_unified_attention_torch(**args, backend=backend)
    spec = record.plan.specs[0]
    assert spec.q_fp8 and spec.dtype == "f16" and record.plan.path == backend
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"], q_descale=args["q_descale"],
                         k_descale=args["k_descale"], v_descale=args["v_descale"],
                         output_scale=scale)
    assert ref.abs().max() > 10, "outputs too small to exercise the fp8 range"
    bound = fp8_output_bound("f16", ref, 0.25, "fp8_e4m3fnuz")
    out = args["out"].float()
    assert bool(((out - ref).abs() <= bound).all()), \
        f"fp8 out off by {((out - ref).abs() / bound).max().item():.2f} bounds"


@pytest.mark.parametrize("backend", ["2d", "3d"])
def test_an_ocp_fp8_query_on_gfx950_matches_the_reference(monkeypatch, backend):
    """gfx950 reads OCP e4m3fn: the query in the cache's encoding there too."""
    monkeypatch.setenv("ROCKE_DEVICE", "emu:gfx950")
    args = _fp8_query_inputs(MIXED, hq=8, hk=2, d=64, bs=16, dtype="bf16")
    for name in ("q", "k", "v"):
        args[name] = args[name].float().to(torch.float8_e4m3fn)
    record = au.run_unified_attention_torch(**args, backend=backend)
    assert record.plan.specs[0].target == "gfx950" and record.plan.specs[0].q_fp8
    _check(args, "bf16")
