"""GQA paged-KV decode attention with MFMA: one query token per sequence, K/V in a paged cache.

Shapes: q / out ``[num_seqs, num_kv_heads * gqa_group, D]``; k / v caches ``[num_blocks,
page_size, num_kv_heads, D]``; ``block_tables [num_seqs, max_blocks]`` and ``seq_lens
[num_seqs]`` int32 (every length >= 1). One workgroup per (KV head, sequence) serves the
``gqa_group`` query heads sharing that KV head: they are the columns of an ``S^T = K Q^T`` tile
(16x16x16 MFMA, query heads padded to 16; the padding reads 0 and is never stored).

Each step the workgroup stages ``num_warps * keys_per_wave`` tokens of K and V^T from their
pages into LDS (``copy_paged_tile``), and wave ``w`` works on its own slice through an LDS view
-- split-KV inside the workgroup. Each wave keeps a running (max, sum, O^T) in the log2 domain
(ALGORITHM.md §2) as a structured loop carry; at the end the waves' partials are merged in LDS
(``merge_across_waves``, ALGORITHM.md §5) in space the K/V tiles no longer need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocke import dsl
from rocke.dsl import rcp
from rocke.dsl.fragment import AxisVector, PER_COL, load_fragment, load_fragment_global, merge_across_waves, \
    store_fragment_global
from rocke.dsl.paged import BlockTableRow, PagedView, copy_paged_tile, rows_per_wave
from rocke.kernels.common.checks import (check_choice, check_extent, check_grid_extent, check_int_range,
                                         check_lds_budget, check_multiple, check_tensor)
from rocke.dsl.softmax import LOG2E, online_softmax_update

DTYPES = ("f16", "bf16")
ATOM = "16x16x16"
STAGING_VECTOR = 8


@dataclass(frozen=True)
class PagedDecodeSpec:
    dtype: str = "f16"
    head_dim: int = 128
    gqa_group: int = 8          # query heads per KV head (<= the atom's 16 columns)
    page_size: int = 16         # tokens per cache block
    num_warps: int = 4          # waves, each on its own slice of every staged tile
    keys_per_wave: int = 16
    lds_pad: int = 0            # elements appended to each LDS row (0: two workgroups fit a CU's LDS)

    def __post_init__(self):
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("head_dim", self.head_dim, (64, 128))
        check_int_range("gqa_group", self.gqa_group, 1, 16)
        check_choice("page_size", self.page_size, (16, 32))
        check_choice("num_warps", self.num_warps, (1, 2, 4, 8))
        check_choice("keys_per_wave", self.keys_per_wave, (16, 32))
        check_choice("lds_pad", self.lds_pad, (0, 4, 8))
        check_multiple("page_size", self.page_size, rows_per_wave(self.head_dim, STAGING_VECTOR),
                       because="each wave's run of staged rows must lie in one page")
        lds = 2 * (self.tile_tokens * (self.head_dim + self.lds_pad) + self.head_dim * (self.tile_tokens + self.lds_pad))
        check_lds_budget("keys_per_wave", lds, "the K and V^T tiles")

    @property
    def tile_tokens(self) -> int:
        return self.num_warps * self.keys_per_wave

    @property
    def workgroup_size(self) -> int:
        return dsl.WAVE_SIZE * self.num_warps

    @property
    def kernel_name(self) -> str:
        return (f"paged_decode_{self.dtype}_d{self.head_dim}_g{self.gqa_group}_p{self.page_size}"
                f"_w{self.num_warps}k{self.keys_per_wave}")


VARIANTS = {
    "f16_d128_g8": PagedDecodeSpec("f16", 128, 8),
    "bf16_d64_g4": PagedDecodeSpec("bf16", 64, 4, keys_per_wave=32),
}
GOLDEN_PERTURBATION = ("gqa_group", {8: 4, 4: 8})     # see rocke.kernels.registry

ARGS = ("q", "k_cache", "v_cache", "out", "block_tables", "seq_lens", "num_kv_heads", "num_blocks",
        "max_blocks", "sm_scale")


def launch_geometry(spec: PagedDecodeSpec, *, num_seqs: int, num_kv_heads: int):
    check_extent("num_seqs", num_seqs)
    check_extent("num_kv_heads", num_kv_heads)
    check_grid_extent("num_seqs", num_seqs, axis="y")
    return (num_kv_heads, num_seqs, 1), (spec.workgroup_size, 1, 1)


def kernel_args(spec: PagedDecodeSpec, q, k_cache, v_cache, out, block_tables, seq_lens,
                sm_scale: float | None = None) -> list:
    """Ordered kernel arguments (see the module docstring for shapes); ``sm_scale`` defaults to
    1/sqrt(D)."""
    import torch
    check_tensor("q", q, dtype=spec.dtype, dims=("num_seqs", "num_heads", "D"))
    check_tensor("out", out, dtype=spec.dtype, dims=("num_seqs", "num_heads", "D"))
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, t, dtype=spec.dtype, dims=("num_blocks", "page_size", "num_kv_heads", "D"))
        if t.shape != k_cache.shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} differs from k_cache's {tuple(k_cache.shape)}")
    num_seqs, num_heads, d = q.shape
    num_blocks, page_size, kv_heads, _ = k_cache.shape
    if out.shape != q.shape or d != spec.head_dim or k_cache.shape[3] != d:
        raise ValueError(f"q/out/caches: head dims must all be the spec's {spec.head_dim}")
    if page_size != spec.page_size:
        raise ValueError(f"k_cache: page size {page_size} differs from the spec's {spec.page_size}")
    if num_heads != kv_heads * spec.gqa_group:
        raise ValueError(f"q: {num_heads} heads is not num_kv_heads ({kv_heads}) x gqa_group ({spec.gqa_group})")
    for name, t, dims in (("block_tables", block_tables, 2), ("seq_lens", seq_lens, 1)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != dims or not t.is_contiguous():
            raise ValueError(f"{name}: must be a contiguous {dims}-D torch.int32 tensor")
    if block_tables.shape[0] != num_seqs or seq_lens.shape[0] != num_seqs:
        raise ValueError(f"block_tables/seq_lens: need {num_seqs} rows (one per sequence)")
    lens = seq_lens.tolist()
    if min(lens) < 1 or max(lens) > block_tables.shape[1] * page_size:
        raise ValueError(f"seq_lens: must be in [1, max_blocks * page_size = "
                         f"{block_tables.shape[1] * page_size}], got {min(lens)}..{max(lens)}")
    used = [block_tables[s, :-(-n // page_size)] for s, n in enumerate(lens)]
    if any(int(t.min()) < 0 or int(t.max()) >= num_blocks for t in used):
        raise ValueError(f"block_tables: entries a sequence uses must be in [0, {num_blocks})")
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    return [q, k_cache, v_cache, out, block_tables, seq_lens, kv_heads, num_blocks,
            block_tables.stride(0), scale]


def build(spec: PagedDecodeSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size)
    q_ptr, k_ptr, v_ptr = (k.arg_ptr(n, spec.dtype, readonly=True) for n in ARGS[:3])
    o_ptr = k.arg_ptr("out", spec.dtype)
    table_ptr, lens_ptr = (k.arg_ptr(n, dsl.i32, readonly=True) for n in ARGS[4:6])
    kv_heads, num_blocks, table_stride = (k.arg_i32(n) for n in ARGS[6:9])
    sm_scale = k.arg_f32("sm_scale")
    D, bn, group = spec.head_dim, spec.keys_per_wave, spec.gqa_group
    mma = k.mfma(ATOM, spec.dtype)
    am, ak = mma.atom.m, mma.atom.k

    k_tile = k.lds("k_tile", (spec.tile_tokens, D), spec.dtype, pad=spec.lds_pad)
    vt_tile = k.lds("vt_tile", (D, spec.tile_tokens), spec.dtype, pad=spec.lds_pad)
    head, seq, wave = k.block_id(0), k.block_id(1), k.wave_id()
    k_mine = k_tile.view((wave * bn, 0), (bn, D))              # this wave's keys
    vt_mine = vt_tile.view((0, wave * bn), (D, bn))
    seq_len = lens_ptr.load(seq)
    q_start = (seq * kv_heads + head) * (group * D)           # the group's query heads
    q_buf, o_buf = q_ptr.offset(q_start).buffer(group * D), o_ptr.offset(q_start).buffer(group * D)
    q_ops = [load_fragment_global(q_buf, mma.B, (d0, 0), D, transposed=True) for d0 in range(0, D, ak)]
    token_stride = kv_heads * D
    pages = [PagedView(p, spec.page_size, token_stride * spec.page_size, token_stride, head * D, num_blocks)
             for p in (k_ptr, v_ptr)]
    table = BlockTableRow(table_ptr, seq * table_stride)
    qk_scale = sm_scale * LOG2E
    copy = dict(table=table, valid_tokens=seq_len, thread_index=k.thread_id(0), threads=spec.workgroup_size,
                vector=STAGING_VECTOR)

    start = {"m": AxisVector.full(k, mma.C, PER_COL, dsl.f32, -math.inf),
             "l": AxisVector.full(k, mma.C, PER_COL, dsl.f32, 0.0),
             "o": [mma.zeros() for _ in range(D // am)]}          # O^T: head dim x queries
    with k.for_range(0, seq_len, spec.tile_tokens, carry=start) as loop:
        copy_paged_tile(pages[0], lds=k_tile, first_token=loop.index, **copy)
        copy_paged_tile(pages[1], lds=vt_tile, first_token=loop.index, transpose=True, **copy)
        k.barrier()
        scores = []
        for i in range(bn // am):                              # S^T = K Q^T, keys on rows
            s = mma.zeros()
            for step, d0 in enumerate(range(0, D, ak)):
                s = mma(load_fragment(k_mine, mma.A, (i * am, d0)), q_ops[step], s)
            keys, _ = s.coords(origin=(loop.index + wave * bn + i * am, 0))
            scores.append((s * qk_scale).where(keys < seq_len, -math.inf))
        m, l, probs, alpha = online_softmax_update(loop.carry["m"], loop.carry["l"], scores)
        o = [acc * alpha.broadcast_to(mma.C) for acc in loop.carry["o"]]
        for i, p in enumerate(probs):                          # O^T += V^T P^T, P^T in place
            p_op = p.to(spec.dtype).as_operand(mma.B)
            o = [mma(load_fragment(vt_mine, mma.A, (j * am, i * am)), p_op, acc) for j, acc in enumerate(o)]
        k.barrier()                                            # the next step overwrites the tiles
        loop.yield_({"m": m, "l": l, "o": o})

    end = loop.results
    _, l, o = merge_across_waves(k, end["m"], end["l"], end["o"], at=k_tile.byte_offset)
    inv_l = l.map(rcp).broadcast_to(mma.C)
    with k.if_(wave == 0):
        for j, acc in enumerate(o):
            store_fragment_global(o_buf, (acc * inv_l).to(spec.dtype), (j * am, 0), D,
                                  bounds=(None, group), transposed=True)
    return k
