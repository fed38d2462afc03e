"""vLLM-style inputs for run_unified_attention_torch: a varlen batch over a shuffled paged cache."""
from __future__ import annotations

import torch

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}


def make_inputs(seqs, *, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=0, extra_blocks=3,
                extra_cols=1, causal=True, q_view=False):
    """``seqs``: [(query_len, kv_len), ...]. Returns the 16 positional arguments of
    run_unified_attention_torch as a dict (vLLM's names). Pages are a random permutation of the
    cache, so block tables are non-contiguous and shuffled; ``extra_cols`` unused table columns
    hold 0. ``q_view``: q is a strided view of a wider qkv tensor, as vLLM passes it."""
    g = torch.Generator().manual_seed(seed)
    dt = TORCH[dtype]
    pages_per_seq = [-(-kv // bs) for _, kv in seqs]
    max_pages = max(pages_per_seq) + extra_cols
    num_blocks = sum(pages_per_seq) + extra_blocks
    perm = torch.randperm(num_blocks, generator=g).tolist()
    table = torch.zeros(len(seqs), max_pages, dtype=torch.int32)
    used = 0
    for s, n in enumerate(pages_per_seq):
        table[s, :n] = torch.tensor(perm[used:used + n], dtype=torch.int32)
        used += n
    cu = [0]
    for ql, _ in seqs:
        cu.append(cu[-1] + ql)
    total_q = cu[-1]
    if q_view:
        qkv = (torch.rand(total_q, hq + 2 * hk, d, generator=g) * 2 - 1).to(dt)
        q = qkv[:, :hq]
    else:
        q = (torch.rand(total_q, hq, d, generator=g) * 2 - 1).to(dt)
    k = (torch.rand(num_blocks, bs, hk, d, generator=g) * 2 - 1).to(dt)
    v = (torch.rand(num_blocks, bs, hk, d, generator=g) * 2 - 1).to(dt)
    one = torch.tensor(1.0)
    return dict(
        q=q, k=k, v=v, out=torch.full((total_q, hq, d), 7.0, dtype=dt),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        max_seqlen_q=max(ql for ql, _ in seqs),
        seqused_k=torch.tensor([kv for _, kv in seqs], dtype=torch.int32),
        max_seqlen_k=max(kv for _, kv in seqs),
        softmax_scale=d ** -0.5, causal=causal, window_size=(-1, -1), block_table=table,
        softcap=0.0, q_descale=None,
        k_descale=one.expand(len(seqs), hk), v_descale=one.expand(len(seqs), hk))


# the quantized KV caches quantize_caches builds: vLLM's kv_cache_dtype names -> its kv_quant_mode
KV_CACHES = {"fp8": "fp8_per_tensor", "int8_per_token_head": "int8_per_token_head",
             "fp8_per_token_head": "fp8_per_token_head"}


def quantize_caches(args, kv: str, seed: int = 0) -> dict:
    """``args`` (make_inputs') with a quantized KV cache ``kv`` (a KV_CACHES name) in place of its
    16-bit one, as vLLM passes it: "fp8" -- gfx942 fp8 (e4m3fnuz) codes of 4x the values with a
    per-tensor descale of 1/4 expanded to [num_seqs, num_kv_heads]; the per-token-head modes --
    int8 / fp8 codes with fp32 [num_blocks, block_size, num_kv_heads] scale caches whose products
    are ~U(-1, 1) (as tests/kernels/test_attention_quant.py builds them), ``kv_quant_mode`` set and
    no descales. Returns ``args``, updated."""
    mode = KV_CACHES[kv]
    num_seqs, hk = args["seqused_k"].shape[0], args["k"].shape[2]
    if mode == "fp8_per_tensor":
        for c in ("k", "v"):
            args[c] = (args[c].float() * 4).to(torch.float8_e4m3fnuz)
            args[f"{c}_descale"] = torch.tensor(0.25).expand(num_seqs, hk)
        return args
    g = torch.Generator().manual_seed(seed)
    nb, bs, hk, d = args["k"].shape
    top = 127 if mode == "int8_per_token_head" else 200
    for c in ("k", "v"):
        codes = torch.rand(nb, bs, hk, d, generator=g) * (2 * top) - top
        args[c] = (codes.round().to(torch.int8) if mode == "int8_per_token_head"
                   else codes.to(torch.float8_e4m3fnuz))
        args[f"{c}_scale_cache"] = (torch.rand(nb, bs, hk, generator=g) + 0.5) / top
        args[f"{c}_descale"] = None
    args["kv_quant_mode"] = mode
    return args


def compile_only_setting(monkeypatch, cache_dir):
    """A fresh compile cache in `cache_dir` that every kernel build goes to (no prebuilt
    bundle, no kernel kept in the process), and any attention launch an error: for tests of
    compile_only / --compile-only."""
    from rocke.kernels.common import attention_unified as au
    monkeypatch.setenv("ROCKE_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("ROCKE_PREBUILT", "off")
    au.compiled_cache_stats().clear()      # built by an earlier test: into another cache

    def no_launch(*args, **kwargs):
        raise AssertionError("compile_only launched")
    monkeypatch.setattr(au, "_pack", no_launch)      # every launch is packed first


def reference(args, **kw):
    """``ref_paged_attn`` of a batch ``make_inputs`` built (its q, caches, metadata and scale);
    ``kw``: the reference's keyword options (masks, features, descales)."""
    from rocke.kernels.common.attention_reference import ref_paged_attn
    return ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"],
                          args["seqused_k"], args["block_table"], args["softmax_scale"], **kw)
