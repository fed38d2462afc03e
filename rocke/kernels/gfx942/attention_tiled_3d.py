"""gfx942 unified paged attention, 3D split-KV (decode / long context): the 2D kernel's tile loop
(``attention_kernel.build_tiled``) restricted to one segment of the KV tiles, writing fp32
partials ``(m, l, o)`` that ``reduce_segments`` merges (ALGORITHM.md §5).

Grid ``(total_num_q_blocks, num_kv_heads, num_segments)``; ``num_segments`` is a runtime
argument. Segment ``s`` of a sequence covers KV tiles ``[s * tps, (s + 1) * tps)`` with
``tps = cdiv(cdiv(kv_len, T), num_segments)``, clipped by the causal limit of the query block.
Every (token, query head, segment) entry of the rows a workgroup owns is written; a segment that
sees no key writes ``m = -inf, l = 0, o = 0``. Workspace (fp32, contiguous):
``segm_output [total_q, Hq, S, D]``, ``segm_max`` / ``segm_expsum [total_q, Hq, S]``, ``m`` in
the log2 domain (scores times ``softmax_scale * log2(e)``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields as dataclass_fields

from rocke import dsl
from rocke.kernels.common.checks import (check_extent, check_grid_extent, check_index_extent,
                                         check_tensor)
from rocke.kernels.gfx942 import attention_quant as quant
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx942.attention_host import (ARGS_FP8, cache_args, check_common_args,
                                                 descale_args, feature_args, search_steps_for)
from rocke.kernels.gfx942.attention_kernel import build_tiled
from rocke.kernels.gfx942.attention_policy import NARROW_3D
# lds_model and total_num_q_blocks are this module's too (the 3D kernel has the 2D footprint)
from rocke.kernels.gfx942.attention_tiled_2d import (UnifiedAttention2DSpec, lds_model,  # noqa: F401
                                                     total_num_q_blocks)


@dataclass(frozen=True)
class UnifiedAttention3DSpec(UnifiedAttention2DSpec):
    """The 2D spec's fields (same rules); ``q_major_grid`` has no meaning here and must stay off."""

    def __post_init__(self):
        if self.q_major_grid is not False:
            raise ValueError("q_major_grid: the 3D grid is (q blocks, kv heads, segments); it has no "
                             "query-major variant")
        if self.out_dtype is not None:
            raise ValueError(OUT_DTYPE_3D)
        super().__post_init__()

    @property
    def family(self) -> str:
        return "attention_3d"


def supports_tiled_3d(spec=None, **fields) -> bool:
    """True iff ``UnifiedAttention3DSpec(**fields)`` is accepted."""
    merged = dict(fields)
    if spec is not None:
        merged = {**{f: getattr(spec, f) for f in _FIELDS}, **fields}
    if merged.get("q_major_grid", False) is not False or merged.get("out_dtype") is not None:
        return False
    return a2.supports_tiled_2d(**merged)


_FIELDS = tuple(f.name for f in dataclass_fields(UnifiedAttention2DSpec))
OUT_DTYPE_3D = ("out_dtype: the 3D kernel writes fp32 partials; reduce_segments quantizes the "
                "output (ReduceSegmentsSpec.out_dtype)")


def build(spec: UnifiedAttention3DSpec) -> dsl.Kernel:
    if not isinstance(spec, UnifiedAttention3DSpec):
        raise TypeError(f"attention_tiled_3d.build needs a UnifiedAttention3DSpec, got {type(spec).__name__}")
    return build_tiled(spec, split=True)


def launch_geometry(spec, num_seqs: int, total_q: int, num_kv_heads: int, num_segments: int):
    """(grid, block): (total_num_q_blocks, num_kv_heads, num_segments), 64 * num_warps threads."""
    for name, v in (("num_seqs", num_seqs), ("total_q", total_q), ("num_kv_heads", num_kv_heads),
                    ("num_segments", num_segments)):
        check_extent(name, v)
    blocks = total_num_q_blocks(spec, num_seqs, total_q)
    check_grid_extent("total_num_q_blocks", blocks, axis="x")
    return (blocks, num_kv_heads, num_segments), (spec.workgroup_size, 1, 1)


def kernel_args(spec, q, k_cache, v_cache, segm_output, segm_max, segm_expsum, block_table,
                cu_seqlens_q, seqused_k, softmax_scale: float, num_segments: int,
                k_descale=None, v_descale=None, k_scale_cache=None, v_scale_cache=None,
                q_descale=None, **features) -> list:
    """Ordered kernel arguments (ARGS, then ARGS_FP8 for an fp8 cache, then the 2D kernel's
    ``feature_arg_names``); cheap per-tensor checks. ``features``:
    ``attention_tiled_2d.feature_args``'s keywords."""
    check_common_args(spec, q, k_cache, v_cache, block_table, cu_seqlens_q, seqused_k)
    check_extent("num_segments", num_segments)
    total_q, hq = q.shape[:2]
    d = spec.head_size          # a padded head's partials are padded (vLLM sizes them so too)
    check_tensor("segm_output", segm_output, dtype="f32",
                 dims=("total_q", "num_q_heads", "num_segments", "head_size"))
    for name, t in (("segm_max", segm_max), ("segm_expsum", segm_expsum)):
        check_tensor(name, t, dtype="f32", dims=("total_q", "num_q_heads", "num_segments"))
        if tuple(t.shape) != (total_q, hq, num_segments):
            raise ValueError(f"{name}: shape {tuple(t.shape)} != (total_q, num_q_heads, num_segments) "
                             f"= {(total_q, hq, num_segments)}")
    if tuple(segm_output.shape) != (total_q, hq, num_segments, d):
        raise ValueError(f"segm_output: shape {tuple(segm_output.shape)} != (total_q, num_q_heads, "
                         f"num_segments, head_size) = {(total_q, hq, num_segments, d)}")
    check_index_extent("segm_output", total_q * hq * num_segments * d)
    num_seqs = seqused_k.shape[0]
    scales = descale_args(spec, k_descale, v_descale, num_seqs, k_cache.shape[2])
    return [q, k_cache, v_cache, segm_output, segm_max, segm_expsum, block_table, cu_seqlens_q,
            seqused_k, float(softmax_scale), num_seqs, search_steps_for(num_seqs), q.stride(0),
            q.stride(1), int(num_segments), hq, *cache_args(k_cache), *cache_args(v_cache)[:3],
            block_table.stride(0), *scales, *feature_args(spec, hq, **features),
            *quant.quant_args(spec, split=True, k_cache=k_cache, k_scale_cache=k_scale_cache,
                              v_scale_cache=v_scale_cache, q_descale=q_descale)]


ARGS = ("q", "k_cache", "v_cache", "segm_output", "segm_max", "segm_expsum", "block_table",
        "cu_seqlens_q", "seqused_k", "softmax_scale", "num_seqs", "search_steps", "q_stride_token",
        "q_stride_head", "num_segments", "num_q_heads", "k_stride_block", "k_stride_token",
        "k_stride_head", "num_blocks", "v_stride_block", "v_stride_token", "v_stride_head",
        "block_table_stride")


def _variants() -> dict[str, UnifiedAttention3DSpec]:
    """Decode-shaped: one warp of 16 rows holds a decode token's whole GQA group (narrow, every
    dtype x head size x block size) and the L4 transposed-x8 geometry for D128 f16; groups rotate as in
    the 2D table."""
    out = {}
    for di, dtype in enumerate(a2.DTYPES):
        for hi, d in enumerate(a2.SHIPPED_HEAD_SIZES):
            for bi, bs in enumerate(a2.BLOCK_SIZES):
                g = a2.rotated_group(di, hi, bi)
                out[f"narrow_{dtype}_d{d}_b{bs}_g{g}"] = UnifiedAttention3DSpec(
                    dtype=dtype, head_size=d, block_size=bs, num_queries_per_kv=g,
                    **NARROW_3D.spec_fields(d))
    for bi, bs in enumerate(a2.BLOCK_SIZES):
        g = a2.rotated_group(1, bi, 2)
        out[f"L4_f16_d128_b{bs}_g{g}"] = UnifiedAttention3DSpec(
            dtype="f16", head_size=128, block_size=bs, num_queries_per_kv=g, **a2.transposed_x8_geometry("L4", 128))
    out.update(a2.fp8_variants(UnifiedAttention3DSpec, transposed_x8_geometries=("L4",), transposed_x8_head_sizes=(128,),
                               narrow_geometry_of=lambda dtype, d: NARROW_3D.spec_fields(d)))
    # the features the dispatcher can send to 3D (a sliding window always goes 2D, ALGORITHM.md §10.1)
    out.update(a2.feature_variants(
        UnifiedAttention3DSpec, lambda dtype, d: NARROW_3D.spec_fields(d), transposed_x8="L4",
        features=tuple(f for f in a2.FEATURES if f != "sliding_window")))
    return out


VARIANTS: dict[str, UnifiedAttention3DSpec] = _variants()
GOLDEN_PERTURBATION = ("kv_cache_policy", {"normal": "stream", "stream": "normal"})     # see rocke.kernels.registry
