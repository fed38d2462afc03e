"""Every numeric tolerance the attention family is judged by, in one place.

Absolute max error of a kernel's output against the fp32 reference (``ref_paged_attn``). fp16
keeps 10 mantissa bits, bf16 7: the tolerances absorb the inputs' and P's rounding to the working
dtype and the MFMA accumulation order, and are tight enough to catch a layout or masking bug
(seeds/000 §10: a wrong tile or mask moves outputs by O(0.1..1) on the harness's inputs).
"""
from __future__ import annotations

ATTENTION_ATOL: dict[str, float] = {"f16": 2e-2, "bf16": 4e-2}


def attention_atol(dtype: str) -> float:
    """The absolute tolerance for an attention output of rocke dtype ``dtype``."""
    if dtype not in ATTENTION_ATOL:
        raise ValueError(f"dtype: no attention tolerance for {dtype!r}; have {sorted(ATTENTION_ATOL)}")
    return ATTENTION_ATOL[dtype]
