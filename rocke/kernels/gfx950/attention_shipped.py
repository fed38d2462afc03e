"""gfx950's shipped attention variants: the specs gfx950's dispatcher plans (default knobs) for a
small grid of problems, so ``rocke list / report --target gfx950`` and the golden table pin
what the entry point launches. The families (``rocke.kernels.registry``) are the three modules
``attention_2d_family``, ``attention_3d_family`` and ``reduce_segments_family`` here.

The grid: fp16 / bf16 x d64 / d128 x block 16 / 64 at GQA 4:1 (32 query heads, 8 KV heads) --
a prefill batch (the 2D path: transposed-x8 wide4 on the wide-K 32x32x16, both dtypes) and a
decode batch (3D split-KV and its reduce_segments); plus an OCP fp8 KV cache (fp8_e4m3fn) on 2D
and 3D and an fp8 output (reduce_segments) at block 16, d128, and a bf16 d128 block-64 prefill
with QQ-bias (the narrow regime on the wide-K 16x16x32). Other shapes are the same code with
other constants, built on demand.
"""
from __future__ import annotations

from functools import cache

from rocke.kernels.common.attention_problem import UnifiedAttentionProblem
from rocke.kernels.common.knobs import AttentionKnobs
from rocke.kernels.gfx950 import attention as g950
from rocke.kernels.gfx950 import attention_dispatch as dispatch

DTYPES = ("f16", "bf16")
HEAD_SIZES = (64, 128)
BLOCK_SIZES = (16, 64)
HQ, HK = 32, 8


def problem_of(dtype, d, bs, *, decode: bool, **kw) -> UnifiedAttentionProblem:
    seqs, q_len, kv = (8, 1, 4096) if decode else (2, 512, 512)
    blocks = seqs * (-(-kv // bs)) + 1
    return UnifiedAttentionProblem(
        dtype=dtype, head_size=d, num_q_heads=HQ, num_kv_heads=HK, block_size=bs, num_seqs=seqs,
        total_q=seqs * q_len, max_seqlen_q=q_len, max_seqlen_k=kv, causal=True, num_blocks=blocks,
        kv_cache_bytes=blocks * bs * HK * d * (1 if kw.get("kv_dtype") else 2), **kw)


def _tag(spec) -> str:
    return spec.kernel_name.removesuffix(f"_{g950.TARGET}")


@cache
def shipped() -> dict[str, dict]:
    """{"2d" | "3d" | "reduce": {variant name: spec}}, in a fixed order."""
    out: dict[str, dict] = {"2d": {}, "3d": {}, "reduce": {}}
    knobs = AttentionKnobs()          # the defaults, not the environment's levers

    def add(problem, path):
        for spec in dispatch.plan(problem, path, knobs).specs:
            kind = ("reduce" if isinstance(spec, g950.ReduceSegmentsSpec)
                    else "3d" if isinstance(spec, g950.UnifiedAttention3DSpec) else "2d")
            name = _tag(spec).removeprefix("attention_2d_").removeprefix("attention_3d_")
            out[kind].setdefault(name.removeprefix("reduce_segments_"), spec)

    for dtype in DTYPES:
        for d in HEAD_SIZES:
            for bs in BLOCK_SIZES:
                add(problem_of(dtype, d, bs, decode=False), "2d")
                add(problem_of(dtype, d, bs, decode=True), "3d")
    for dtype in DTYPES:
        add(problem_of(dtype, 128, 16, decode=False, kv_dtype="fp8_e4m3fn"), "2d")
        add(problem_of(dtype, 128, 16, decode=True, kv_dtype="fp8_e4m3fn"), "3d")
    add(problem_of("bf16", 128, 16, decode=True, out_dtype="fp8_e4m3fn"), "3d")
    add(problem_of("bf16", 128, 64, decode=False, qq_bias=True), "2d")     # narrow on 16x16x32
    return out
