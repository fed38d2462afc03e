"""vLLM 0.33's own unified-attention test grid (tests/kernels/vllm_033_grid.py) through
rocke.vllm.unified_attention on the emulator, with the keyword set vLLM's tests pass, against the
fp32 reference: every case of the grid runs."""
from __future__ import annotations

import pytest
import torch

from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol, fp8_output_bound
from rocke.vllm import KVQuantMode, unified_attention
from tests.kernels.test_attention_inline_scales import inline_caches
from tests.kernels.test_attention_int4 import decode_int4, quantize_int4, sylvester, vllm_signs
from tests.kernels.vllm_033_grid import RUNNING, Case

FP8 = torch.float8_e4m3fnuz         # gfx942's fp8 (vLLM's current_platform.fp8_dtype() on ROCm)
TORCH = {"bf16": torch.bfloat16, "f16": torch.float16}
MODES = {"same": KVQuantMode.NONE, "fp8": KVQuantMode.FP8_PER_TENSOR,
         "int8_pth": KVQuantMode.INT8_PER_TOKEN_HEAD, "fp8_pth": KVQuantMode.FP8_PER_TOKEN_HEAD,
         "int4_pth": KVQuantMode.INT4_PER_TOKEN_HEAD}


def _uniform(shape, g):
    return torch.rand(shape, generator=g) * 2 - 1


def _per_token_head(x, kind, g):
    """(codes, per-(block, slot, head) fp32 scales, the rows the reference reads or None) of a
    [blocks, bs, hk, d] cache whose dequantized values are ``x``'s magnitude. INT4 is vLLM's
    write: rows rotated, asymmetric codes two a byte, the zero point in the scale's low bits
    (test_attention_int4's quantizer); the reference reads its decoded rows rotated back."""
    if kind == "int4_pth":
        d = x.shape[-1]
        h, signs = sylvester(d), vllm_signs(d)
        packed, words = quantize_int4((x * signs) @ h)
        return packed, words, (decode_int4(packed, words) @ h) * signs / d
    top = {"int8_pth": 127.0, "fp8_pth": 224.0}[kind]
    scale = (x.abs().amax(-1) / top).clamp(min=1e-6)
    codes = (x / scale[..., None]).clamp(-top, top)
    return (codes.round().to(torch.int8) if kind == "int8_pth" else codes.to(FP8)), scale, None


def build(case: Case, seed: int = 0):
    """(vLLM's keyword arguments for ``case``, the reference's keyword options)."""
    g = torch.Generator().manual_seed(seed)
    hq, hk = case.heads
    d, bs = case.head_size, case.block_size
    dt = TORCH[case.dtype]
    q_lens = [q for q, _ in case.seqs]
    kv_lens = [k for _, k in case.seqs]
    num_seqs = len(case.seqs)
    q = _uniform((sum(q_lens), hq, d), g)
    k = _uniform((case.num_blocks, bs, hk, d), g)
    v = _uniform((case.num_blocks, bs, hk, d), g)
    pages = -(-max(kv_lens) // bs)
    # vLLM's tests draw every table entry at random (pages may repeat across sequences)
    table = torch.randint(0, case.num_blocks, (num_seqs, pages), generator=g, dtype=torch.int32)
    window = (case.sliding_window - 1, 0) if case.sliding_window else (-1, -1)
    args = dict(q=q.to(dt), k=k.to(dt), v=v.to(dt), out=torch.full((sum(q_lens), hq, d), 7.0,
                                                                     dtype=dt),
                cu_seqlens_q=torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(
                    0, dtype=torch.int32),
                seqused_k=torch.tensor(kv_lens, dtype=torch.int32), max_seqlen_q=max(q_lens),
                max_seqlen_k=max(kv_lens), softmax_scale=d ** -0.5, causal=True,
                window_size=window, block_table=table,
                softcap=case.softcap if case.softcap is not None else 0,
                q_descale=None, k_descale=None, v_descale=None)
    ref = dict(window_size=window, softcap=case.softcap or 0.0)
    if case.q_fp8 or case.kv == "fp8":
        descales = dict(k_descale=torch.full((num_seqs, hk), 0.5),
                        v_descale=torch.full((num_seqs, hk), 0.25))
        args.update(k=(k / 0.5).to(FP8), v=(v / 0.25).to(FP8), **descales)
        ref.update(descales)
        if case.q_fp8:
            args.update(q=(q / 0.75).to(FP8), q_descale=torch.tensor(0.75))
            ref.update(q_descale=args["q_descale"])
        args["kv_quant_mode"] = KVQuantMode.FP8_PER_TENSOR
    elif case.kv.endswith("_pth"):
        (kc, ks, k_rows), (vc, vs, v_rows) = (_per_token_head(k, case.kv, g),
                                              _per_token_head(v, case.kv, g))
        if k_rows is None:                      # int8 / fp8: codes times their scales
            ref.update(k=kc, v=vc, k_scale_cache=ks, v_scale_cache=vs)
        else:                                   # int4: the decoded rows, rotated back
            ref.update(k=k_rows, v=v_rows)
        if case.scale_layout == "inline":       # 0.33's cache: scales inline after each row
            kc, vc, ks, vs = inline_caches((kc, vc), (ks, vs), "HND")
        args.update(k=kc, v=vc, kv_quant_mode=MODES[case.kv], k_scale_cache=ks,
                    v_scale_cache=vs)
    elif case.kv == "same" and "kv_quant_mode" not in case.extra and case.source.startswith(
            "T:unified"):
        args["kv_quant_mode"] = KVQuantMode.NONE    # vLLM's main test always passes it
    if case.out_fp8:
        args.update(out=torch.zeros((sum(q_lens), hq, d), dtype=FP8),
                    output_scale=torch.tensor(0.5))
        ref.update(output_scale=args["output_scale"])
    if case.causal is not None:
        args["causal"] = torch.tensor(case.causal, dtype=torch.bool)
    if case.descales_as_floats:
        args.update(k_descale=1.0, v_descale=1.0)
    if not case.extra.get("no_workspaces") and case.seq_threshold_3D is not None:
        rows = case.seq_threshold_3D if case.workspace_rows is None else case.workspace_rows
        width = 1 << (d - 1).bit_length()           # vLLM sizes them by the padded head
        args.update(seq_threshold_3D=case.seq_threshold_3D,
                    num_par_softmax_segments=case.segments,
                    softmax_segm_output=torch.empty(rows, hq, case.segments, width),
                    softmax_segm_max=torch.empty(rows, hq, case.segments),
                    softmax_segm_expsum=torch.empty(rows, hq, case.segments))
    elif case.extra.get("no_workspaces"):
        args["seq_threshold_3D"] = case.seq_threshold_3D
    if case.use_td:
        args["use_td"] = True
    return args, ref


def reference(case: Case, args, ref_kw):
    """``ref_kw``'s k / v (the plain rows of a quantized cache) stand in for the call's."""
    kw = dict(ref_kw)
    k, v = kw.pop("k", args["k"]), kw.pop("v", args["v"])
    if case.causal is not None:
        kw["causal"] = list(case.causal)
    return ref_paged_attn(args["q"], k, v, args["cu_seqlens_q"], args["seqused_k"],
                          args["block_table"], args["softmax_scale"], **kw)


def check(case: Case, args, ref_kw):
    want = reference(case, args, ref_kw)
    got = args["out"].float()
    quantised = case.q_fp8 or case.kv in ("fp8", "fp8_pth")
    if case.out_fp8:
        bound = fp8_output_bound(case.dtype, want, 0.5)
        over = ((got - want).abs() - bound).max().item()
        assert over <= 0, f"fp8 output beyond its bound by {over}"
        return
    err = (got - want).abs().max().item()
    atol = attention_atol(case.dtype, "fp8_e4m3fnuz" if quantised else None)
    assert err <= atol, f"max |out - ref| {err} > {atol}"


@pytest.mark.parametrize("case", RUNNING, ids=[c.id for c in RUNNING])
def test_vllm_033_case_matches_the_reference(case):
    args, ref_kw = build(case)
    unified_attention(**args)
    check(case, args, ref_kw)
    if case.repeat:         # vLLM's CUDA-graph test: the same call again (rocke's remembered call)
        first = args["out"].clone()
        args["out"].fill_(7.0)
        unified_attention(**args)
        assert torch.equal(args["out"], first)


def test_the_grid_keeps_every_kind():
    """Every vLLM test the grid reads has cases, the unusual head sizes and INT4 among them."""
    sources = {c.source for c in RUNNING}
    assert {"T:unified_attn", "T:bf16_query_fp8_kv", "T:swa_single_block", "T:small_m_3d",
            "T:small_m_2d_above_threshold", "T:small_m_3d_mixed_rows", "T:small_m_3d_cuda_graph",
            "T:fp16_input_fp8_output", "T:use_td", "T:use_td_tile_clamp",
            "P:per_token_head_scale", "M:triton_mixed_causal"} <= sources
    assert {c.head_size for c in RUNNING} >= {96, 512} and any(c.kv == "int4_pth" for c in RUNNING)
