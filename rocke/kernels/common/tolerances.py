"""Every numeric tolerance the attention family is judged by, in one place.

Absolute max error of a kernel's output against the fp32 reference (``ref_paged_attn``). fp16
keeps 10 mantissa bits, bf16 7: the tolerances absorb the inputs' and P's rounding to the working
dtype and the MFMA accumulation order, and are tight enough to catch a layout or masking bug
(a wrong tile or mask moves outputs by O(0.1..1) on the harness's inputs, uniform in [-1, 1)).

fp8 KV cache (``kv_dtype="fp8_e4m3fnuz"``): the SAME tolerance as the 16-bit cache of the query's
dtype. Why this is sound and not loose (ALGORITHM.md §11.1): the reference reads the very same
fp8 codes (``ref_paged_attn`` decodes the cache to fp32 and applies the descales), so the fp8
quantization error is in both sides and cancels; the kernel's dequantization is exact (every
e4m3fnuz value — 4 significant bits, exponents 2^-10..2^7 — is an fp16 and a bf16 value) and the
descales are applied in fp32 (k's in the score scale, v's on the output), so the only roundings
left are the ones the 16-bit tolerance already absorbs (Q, P to the working dtype, MFMA order).
This holds for dequantized values of the 16-bit tests' magnitude (|K|, |V| <= ~2); the fp8 tests
keep to it. gfx950's OCP ``fp8_e4m3fn`` (exponents 2^-9..2^8) is exact in fp16 and bf16 too.
"""
from __future__ import annotations

ATTENTION_ATOL: dict[str, float] = {"f16": 2e-2, "bf16": 4e-2}
# kv_dtype -> extra absolute error over the query dtype's tolerance (0: see the module docstring)
FP8_KV_EXTRA_ATOL: dict[str, float] = {"fp8_e4m3fnuz": 0.0, "fp8_e4m3fn": 0.0}


def attention_atol(dtype: str, kv_dtype: str | None = None) -> float:
    """The absolute tolerance for an attention output of rocke dtype ``dtype`` whose KV cache is
    ``kv_dtype`` (None: the same dtype as q)."""
    if dtype not in ATTENTION_ATOL:
        raise ValueError(f"dtype: no attention tolerance for {dtype!r}; have {sorted(ATTENTION_ATOL)}")
    if kv_dtype is None:
        return ATTENTION_ATOL[dtype]
    if kv_dtype not in FP8_KV_EXTRA_ATOL:
        raise ValueError(f"kv_dtype: no attention tolerance for {kv_dtype!r}; have "
                         f"{sorted(FP8_KV_EXTRA_ATOL)}")
    return ATTENTION_ATOL[dtype] + FP8_KV_EXTRA_ATOL[kv_dtype]


# fp8 (e4m3fnuz) output (ALGORITHM.md §13.1): the kernel's value before the store is within
# attention_atol of the reference's, so after the division by output_scale within atol / scale;
# rounding to e4m3fnuz is monotone, so the two stored values differ by at most that plus one
# e4m3fnuz step at their magnitude (3 mantissa bits: 2^(e - 3); below the normal range the
# subnormal step 2^-10). gfx950's e4m3fn: the same 3 bits, normal from 2^-6 (subnormal step 2^-9).
FP8_E4M3FNUZ_MANTISSA_BITS = 3
FP8_E4M3FNUZ_MIN_EXPONENT = -7
FP8_OUT_MIN_EXPONENT = {"fp8_e4m3fnuz": FP8_E4M3FNUZ_MIN_EXPONENT, "fp8_e4m3fn": -6}


def fp8_output_bound(dtype: str, ref, output_scale: float, kv_dtype: str | None = None,
                     out_dtype: str = "fp8_e4m3fnuz"):
    """Per-element bound on |kernel fp8 output - reference| (both as fp32 values; ``ref`` as
    ``ref_paged_attn(..., output_scale=...)`` returns it), for q dtype ``dtype`` and fp8
    output ``out_dtype``."""
    import torch
    slack = attention_atol(dtype, kv_dtype) / float(output_scale)
    mag = ref.abs() + slack
    exponent = torch.floor(torch.log2(mag.clamp(min=2.0 ** FP8_OUT_MIN_EXPONENT[out_dtype])))
    return slack + torch.exp2(exponent - FP8_E4M3FNUZ_MANTISSA_BITS)
