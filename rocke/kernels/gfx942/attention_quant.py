"""gfx942 unified attention: fp8 output, per-token-head KV scales and square-root ALiBi
(ALGORITHM.md §13), as vLLM's ``unified_attention`` applies them. Each is a spec field whose
default emits exactly the kernel without it: these helpers add arguments after every other one
and code only when their field is set.

- ``out_dtype="fp8_e4m3fnuz"`` (2D and ``reduce_segments``): the normalised output times
  ``1 / output_scale`` (a one-element fp32 tensor, divided once per workgroup), clamped to the
  format's finite range (saturating) and rounded to e4m3fnuz.
- ``kv_token_scales`` with ``kv_dtype`` int8 or fp8: each cache row (token, KV head) has its
  own fp32 scale in ``k_scale_cache`` / ``v_scale_cache`` ``[num_blocks, block_size,
  num_kv_heads]``, applied to the row in the paged tile copy (``rocke.dsl.paged``).
- ``alibi_sqrt``: the ALiBi term is ``slope * -sqrt(query_pos - key_pos)`` for keys at or before
  the query, 0 after it, instead of ``slope * (key_pos - context_len)``.
- ``q_fp8`` (with an fp8 cache and its per-tensor descales, vLLM's FP8_PER_TENSOR): the query
  is stored in the cache's fp8 encoding with a one-element fp32 ``q_descale``; each element is
  decoded exactly to ``dtype`` on load (every fp8 value is an f16 and a bf16 value) and
  ``q_descale`` joins the score scale, as k_descale does (S = (Q K^T) q_descale k_descale
  softmax_scale; ALGORITHM.md §11.1).
"""
from __future__ import annotations

from rocke import dsl
from rocke.dsl.paged import PagedView
from rocke.dsl.types import FINITE_MAX, FP8_FORMATS
from rocke.kernels.common.attention_problem import INT4_KV

OUT_DTYPES = ("fp8_e4m3fnuz",)                   # gfx942's fp8
# caches read with per-token-head scales; "int4": two 4-bit codes a byte, each row's zero point in
# its scale's low mantissa bits (vLLM's INT4_PER_TOKEN_HEAD, rocke.dsl.paged's packed_int4)
TOKEN_SCALE_KV_DTYPES = ("i8", "fp8_e4m3fnuz", "int4")
PACKED_INT4 = INT4_KV
FP8_KV_DTYPES = ("fp8_e4m3fnuz",)                # the fp8 caches an fp8 query (q_fp8) goes with


def on_target(dtypes: tuple[str, ...], target: str) -> tuple[str, ...]:
    """``dtypes`` (gfx942's names) with gfx942's fp8 replaced by ``target``'s: the kernels
    are the same, the conversion opcodes read the target's format (OCP e4m3fn on gfx950)."""
    fp8 = dict(zip(FP8_FORMATS["gfx942"], FP8_FORMATS[target]))
    return tuple(fp8.get(d, d) for d in dtypes)


def quant_problems(spec) -> list[str]:
    """The rules of the three fields (``spec_problems`` appends them), each naming its field."""
    out = []
    if not isinstance(spec.alibi_sqrt, bool):
        out.append(f"alibi_sqrt: must be a bool, got {spec.alibi_sqrt!r}")
    elif spec.alibi_sqrt and spec.alibi is not True:
        out.append("alibi_sqrt: square-root ALiBi shapes the ALiBi term; it needs alibi=True")
    out_dtypes = on_target(OUT_DTYPES, spec.target)
    token_scale_kv_dtypes = on_target(TOKEN_SCALE_KV_DTYPES, spec.target)
    if spec.out_dtype is not None and spec.out_dtype not in out_dtypes:
        out.append(f"out_dtype: must be None (q's dtype) or one of {out_dtypes}, got "
                   f"{spec.out_dtype!r}")
    q_fp8 = getattr(spec, "q_fp8", False)
    if not isinstance(q_fp8, bool):
        out.append(f"q_fp8: must be a bool, got {q_fp8!r}")
    elif q_fp8 and (spec.kv_dtype not in on_target(FP8_KV_DTYPES, spec.target)
                    or spec.kv_token_scales is not False):
        out.append(f"q_fp8: an fp8 query is read with an fp8 cache and its per-tensor descales "
                   f"(vLLM's FP8_PER_TENSOR): kv_dtype must be one of "
                   f"{on_target(FP8_KV_DTYPES, spec.target)} without kv_token_scales, got "
                   f"kv_dtype={spec.kv_dtype!r}, kv_token_scales={spec.kv_token_scales!r}")
    if not isinstance(spec.kv_token_scales, bool):
        out.append(f"kv_token_scales: must be a bool, got {spec.kv_token_scales!r}")
    elif spec.kv_token_scales:
        if spec.kv_dtype not in token_scale_kv_dtypes:
            out.append(f"kv_token_scales: per-token-head scales read an int8, fp8 or int4 cache; "
                       f"kv_dtype must be one of {token_scale_kv_dtypes}, got {spec.kv_dtype!r}")
    return out


def name_suffix(spec) -> str:
    """The kernel-name tags of the fields that are set ('' for none: names unchanged)."""
    tags = ""
    if spec.alibi_sqrt:
        tags += "_asqrt"
    if spec.kv_token_scales:
        tags += f"_kv{ {'i8': 'i8', PACKED_INT4: 'i4'}.get(spec.kv_dtype, 'fp8')}tok"
    if spec.out_dtype is not None:
        tags += "_ofp8"
    if getattr(spec, "q_fp8", False):
        tags += "_qfp8"
    return tags


def arg_names(spec, split: bool) -> tuple[str, ...]:
    """The runtime arguments these fields append (after the score features')."""
    names = ()
    if spec.kv_token_scales:
        names += ("k_scale_cache", "v_scale_cache", "scale_stride_block", "scale_stride_token",
                  "scale_stride_head")
    if spec.out_dtype is not None and not split:
        names += ("output_scale",)
    if getattr(spec, "q_fp8", False):
        names += ("q_descale",)
    return names


def declare_args(k, spec, a, split: bool) -> None:
    if spec.kv_token_scales:
        # one set of strides for both scale caches (checked equal on the host): 3 fewer SGPRs
        for which in ("k", "v"):
            setattr(a, f"{which}_scale_cache", k.arg_ptr(f"{which}_scale_cache", "f32", readonly=True,
                                                         strided=True))
        for part in ("block", "token", "head"):
            name = f"scale_stride_{part}"
            setattr(a, name, k.arg_i32(name))
    if spec.out_dtype is not None and not split:
        a.output_scale = k.arg_ptr("output_scale", "f32", readonly=True)
    if getattr(spec, "q_fp8", False):
        a.q_descale = k.arg_ptr("q_descale", "f32", readonly=True)


def cache_storage_dtype(kv_dtype: str | None, dtype: str) -> str:
    """The element type of k_cache / v_cache in memory: bytes of two codes for int4."""
    return "u8" if kv_dtype == PACKED_INT4 else kv_dtype or dtype


def packed_int4(spec) -> bool:
    """Whether the caches hold packed 4-bit codes (kv_dtype "int4")."""
    return spec.kv_dtype == PACKED_INT4


def q_storage_dtype(spec) -> str:
    """The element type of ``q`` in memory: the cache's fp8 for ``q_fp8``, else ``dtype``."""
    return spec.kv_dtype if getattr(spec, "q_fp8", False) else spec.dtype


def q_decoded(spec, values):
    """Loaded q elements in ``dtype``: an fp8 query's codes decoded exactly (through f32, the
    hardware conversion; fp8 NaN stays NaN), a 16-bit query's as loaded."""
    if not getattr(spec, "q_fp8", False):
        return values
    return values.to(dsl.f32).to(spec.dtype)


def q_descale(c):
    """An fp8 query's descale (one f32, read once per workgroup), or None."""
    return c.a.q_descale.load(0) if getattr(c.spec, "q_fp8", False) else None


def scale_view(c, which: str) -> PagedView | None:
    """The paged view of this KV head's k or v scale cache, or None without per-token scales."""
    s, a = c.spec, c.a
    if not s.kv_token_scales:
        return None
    ptr = getattr(a, f"{which}_scale_cache")
    stride = {p: getattr(a, f"scale_stride_{p}") for p in ("block", "token", "head")}
    return PagedView(ptr, s.block_size, stride["block"], stride["token"],
                     c.kv_head * stride["head"], a.num_blocks, s.kv_addr_64)


def alibi_sqrt_offset(tok, ctx, keys):
    """``-sqrt(query_pos - key)`` for keys at or before the query's position, else 0 (f32)."""
    # sqrt(max(query - key, 0)) is 0 for keys after the query: no per-value compare (each would
    # hold an SGPR pair); v_sqrt (~1 ulp) of an exact integer, not the correctly rounded
    # expansion, whose range checks cost the same (spills on transposed-x8's 16 values a lane)
    behind = dsl.maximum(tok + ctx - keys, 0)
    return -dsl.sqrt(behind.to(dsl.f32), fast=True)


def inverse_output_scale(output_scale_ptr):
    """``1 / output_scale`` (IEEE division, as vLLM's host computes it in fp32)."""
    return 1.0 / output_scale_ptr.load(0)


def quantised(values, inv_scale, out_dtype: str):
    """f32 ``values`` (a Value or Fragment) times ``inv_scale``, clamped to ``out_dtype``'s
    finite range (saturating, as vLLM clamps before its store) and rounded to it; a NaN stays
    NaN (the format's NaN code), where maxnum/minnum alone would saturate it (ALGORITHM.md §2.2)."""
    top = FINITE_MAX[out_dtype]
    scaled = values * inv_scale

    def clamp(v):
        return dsl.select(v != v, v, dsl.minimum(dsl.maximum(v, -top), top))
    if hasattr(scaled, "layout"):
        return scaled.map(clamp).to(out_dtype)
    return clamp(scaled).to(out_dtype)


# ---- host side ---------------------------------------------------------------------------------

def check_scale_cache(name: str, t, num_blocks: int, block_size: int, num_kv_heads: int):
    """A per-token-head scale cache: fp32 ``[num_blocks, block_size, num_kv_heads]``, strides
    within the kernel's 32-bit arguments."""
    import torch
    from rocke.kernels.common.checks import I32_LIMIT, check_buffer_bytes
    want = (num_blocks, block_size, num_kv_heads)
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or tuple(t.shape) != want:
        got = (f"{t.dtype} {list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__)
        raise ValueError(f"{name}: must be a float32 tensor [num_blocks, block_size, num_kv_heads] "
                         f"= {list(want)}, got {got}")
    if any(st < 0 or st >= I32_LIMIT for st in t.stride()):
        raise ValueError(f"{name}: strides {t.stride()} outside the kernel's 32-bit range")
    check_buffer_bytes(name, t.stride(0) * num_blocks * 4, "the scale cache")
    return [t, *t.stride()]


def quant_args(spec, *, split: bool, k_cache=None, output_scale=None, k_scale_cache=None,
               v_scale_cache=None, q_descale=None) -> list:
    """The arguments ``arg_names`` lists, checked against the spec: a field the spec sets needs
    its tensor, a tensor the spec would ignore is refused."""
    import torch
    given = {"kv_token_scales": k_scale_cache is not None or v_scale_cache is not None,
             "out_dtype": output_scale is not None and not split,
             "q_fp8": q_descale is not None}
    want = {"kv_token_scales": getattr(spec, "kv_token_scales", False),
            "out_dtype": spec.out_dtype is not None and not split,
            "q_fp8": getattr(spec, "q_fp8", False)}
    for field, on in want.items():
        if given[field] != on:
            what = {"kv_token_scales": "k_scale_cache/v_scale_cache", "out_dtype": "output_scale",
                    "q_fp8": "q_descale"}[field]
            raise ValueError(f"{what}: the kernel {spec.kernel_name} "
                             f"{'needs' if on else 'takes no'} it, but the call "
                             f"{'passes' if given[field] else 'omits'} it")
    out = []
    if want["kv_token_scales"]:
        nb, bs, hk = k_cache.shape[:3]
        k_part = check_scale_cache("k_scale_cache", k_scale_cache, nb, bs, hk)
        v_part = check_scale_cache("v_scale_cache", v_scale_cache, nb, bs, hk)
        if k_part[1:] != v_part[1:]:
            raise ValueError(f"v_scale_cache: strides {tuple(v_part[1:])} differ from "
                             f"k_scale_cache's {tuple(k_part[1:])}; the kernel reads both with "
                             "one set of strides")
        out += [k_part[0], v_part[0], *k_part[1:]]
    if want["out_dtype"]:
        if not isinstance(output_scale, torch.Tensor) or output_scale.dtype != torch.float32 or \
                output_scale.numel() != 1:
            raise ValueError("output_scale: must be a one-element float32 tensor")
        out.append(output_scale)
    if want["q_fp8"]:
        if not isinstance(q_descale, torch.Tensor) or q_descale.dtype != torch.float32 or \
                q_descale.numel() != 1:
            raise ValueError("q_descale: an fp8 query's descale must be a one-element float32 "
                             "tensor")
        out.append(q_descale)
    return out
