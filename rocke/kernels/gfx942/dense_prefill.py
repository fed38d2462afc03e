"""The gfx942 (MI300X) dense prefill family: bf16/f16 ``[B, S, H, 128]`` forward attention, the
kernel of rocke.kernels.common.dense_prefill built for gfx942 (32x32x8 atom), with the levers the
modelled MI300X time chose (ALGORITHM.md §15): 256 queries over 8 waves (two a SIMD), 32-key
tiles prefetched into registers two tiles ahead (two fixed slots, the loads pinned first), V^T
staged with a wave's lanes down the keys (no LDS bank conflicts on its writes) and, causal,
AITER's head/tail pairing of query blocks (equal work per workgroup) and, for bshd / bhsd, the
split of the grid's last, fractional round: its work items run as pieces over their keys, the
last piece of each merging them. The public entry point is rocke.dense_attention.
``benchmarks/dense_vs_aiter.py`` compares it with AMD AITER's fmha_v3_fwd code objects."""

from __future__ import annotations

from dataclasses import replace

from rocke.kernels.common.dense_prefill import (ARGS, PARTIALS, DensePrefillSpec,  # noqa: F401
                                                TailSplit, build, check_problem, kernel_args,
                                                launch_geometry, persistent_workgroups,
                                                split_blocks, split_rows, split_workspace,
                                                tail_split, work_items)

TARGET = "gfx942"
BLOCK_M = 256       # queries a workgroup in the tuned geometry (a packed launch's grid unit)


def tuned_spec(dtype: str, seq_len: int, num_heads: int, num_kv_heads: int, causal: bool,
               head_dim: int = 128, rounding: str = "rne", layout: str = "bshd") -> DensePrefillSpec:
    """The shipped geometry and levers for one problem's compile-time sizes (layout thd: packed
    varlen, no pairing; seq_len the longest query count the grid covers)."""
    return DensePrefillSpec(dtype, head_dim, seq_len, num_heads, num_kv_heads, causal,
                            block_m=BLOCK_M, block_n=32, num_warps=8, prefetch=True, vt_by_key=True,
                            pin_prefetch=True, prefetch_distance=2,
                            pair_causal=causal and layout != "thd",
                            split_tail=layout != "thd",
                            rounding=rounding, layout=layout, target=TARGET)


def launch_plan(spec: DensePrefillSpec, B: int) -> tuple[DensePrefillSpec, TailSplit | None]:
    """What a launch of ``spec`` (a split_tail spec, tuned_spec's for bshd / bhsd) for B
    sequences runs: the split kernel and its plan when the plan splits, else the same spec
    without split_tail (its 3-D grid, no pieces' state in its registers) and None."""
    if not spec.split_tail:
        return spec, None
    plan = tail_split(spec, B)
    return (spec, plan) if plan.split else (replace(spec, split_tail=False), None)


def _variants() -> dict[str, DensePrefillSpec]:
    out = {}
    # (heads, kv heads): AITER's published MI300X table's three head layouts (and Llama-3-70B's
    # 64/8), at 4096 tokens
    for dtype in ("bf16", "f16"):
        for h, hkv in ((32, 8), (64, 8), (64, 4)):
            if dtype == "f16" and (h, hkv) != (32, 8):
                continue
            for causal in (True, False):
                out[f"{dtype}_d128_h{h}kv{hkv}_s4096_{'causal' if causal else 'full'}"] = \
                    tuned_spec(dtype, 4096, h, hkv, causal)
    return out


VARIANTS: dict[str, DensePrefillSpec] = _variants()
GOLDEN_PERTURBATION = ("vt_by_key", {True: False, False: True})     # see rocke.kernels.registry
