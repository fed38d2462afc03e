"""Block-sparse attention forward sample: O = softmax(Q K^T * scale, over the kept key blocks) V,
with a ``[q_blocks, k_blocks]`` block mask read at run time.

Q, K, V, O are contiguous ``[B, H, S, D]`` (f16 or bf16, D = 64); ``block_mask`` is an int32
``[ceil(S / block_m), ceil(S / block_n)]`` tensor shared by every batch and head: query block
``qb`` attends to key block ``kb`` where ``block_mask[qb, kb] != 0``. One workgroup takes
``block_m`` queries of one (batch, head) and walks the key blocks; a masked block is skipped
whole (``k.if_(keep, carry=...)``: no loads, no MFMA, the running softmax state passes through).
Inside a kept block, keys past S are masked to -inf. A query row whose blocks are all masked
has no keys: its output is 0.

The kept blocks run the flash-attention sample's body (the transposed orientation, ALGORITHM.md
§8: ``S^T = K Q^T`` with ``Q^T`` resident as B operands, ``P^T`` fed straight to ``O^T = V^T
P^T``; online softmax in the log2 domain). Address limits as in ``flash_attention``. Written
with public DSL calls only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocke import dsl
from rocke.arch.mfma import atom_for
from rocke.dsl import rcp, select
from rocke.dsl.fragment import AxisVector, PER_COL, copy_tile_to_lds, load_fragment, load_fragment_global, \
    store_fragment_global
from rocke.dsl.softmax import LOG2E, online_softmax_update, transposed_scores
from rocke.kernels.common.checks import (check_choice, check_device, check_lds_budget, check_multiple,
                                         check_positive_int, check_tensor)
from rocke.kernels.samples.flash_attention import check_problem as _check_dense_problem

DTYPES = ("f16", "bf16")
ATOMS = ("16x16x16", "32x32x8")
STAGING_VECTOR = 8
HEAD_DIM = 64
ARGS = ("q", "k", "v", "o", "block_mask", "seq_len", "sm_scale")


@dataclass(frozen=True)
class BlockSparseAttentionSpec:
    dtype: str = "f16"
    block_m: int = 64          # queries per workgroup = rows of a mask block
    block_n: int = 64          # keys per KV tile = columns of a mask block
    num_warps: int = 4
    atom: str = "16x16x16"
    lds_pad: int = 8

    head_dim = HEAD_DIM        # for flash_attention.check_problem

    def __post_init__(self):
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("atom", self.atom, ATOMS)
        for name in ("block_m", "block_n"):
            check_positive_int(name, getattr(self, name))
        check_choice("num_warps", self.num_warps, (1, 2, 4, 8))
        check_positive_int("lds_pad", self.lds_pad, allow_zero=True)
        a = atom_for(self.atom, self.dtype)
        check_multiple("block_m", self.block_m, self.num_warps * a.n,
                       of=f"num_warps ({self.num_warps}) x the atom's N ({a.n})",
                       because="each warp owns whole query columns of S^T")
        check_multiple("block_n", self.block_n, a.m, of=f"the atom's M ({a.m})")
        check_multiple("lds_pad", self.lds_pad, 4, because="operands are read from LDS 8 bytes at a time")
        D = HEAD_DIM
        check_lds_budget("block_n", 2 * (self.block_n * (D + self.lds_pad) + D * (self.block_n + self.lds_pad)),
                         "the K and V^T tiles")

    @property
    def workgroup_size(self) -> int:
        return dsl.WAVE_SIZE * self.num_warps

    @property
    def kernel_name(self) -> str:
        return (f"block_sparse_attention_{self.dtype}_d{HEAD_DIM}_{self.atom.replace('x', '_')}"
                f"_m{self.block_m}n{self.block_n}_w{self.num_warps}")


VARIANTS: dict[str, BlockSparseAttentionSpec] = {
    "f16_d64": BlockSparseAttentionSpec("f16"),
    "bf16_d64": BlockSparseAttentionSpec("bf16"),
}
GOLDEN_PERTURBATION = ("block_n", {64: 32, 32: 64})     # see rocke.kernels.registry


def mask_shape(spec: BlockSparseAttentionSpec, S: int) -> tuple[int, int]:
    """The block mask's [q_blocks, k_blocks] for sequence length S."""
    return -(-S // spec.block_m), -(-S // spec.block_n)


def launch_geometry(spec: BlockSparseAttentionSpec, B: int, H: int, S: int):
    """(grid in workgroups, block in threads): (query blocks, B * H) workgroups."""
    _check_dense_problem(spec, B=B, H=H, S=S)
    return (mask_shape(spec, S)[0], B * H, 1), (spec.workgroup_size, 1, 1)


def kernel_args(spec: BlockSparseAttentionSpec, q, k, v, o, block_mask, sm_scale: float | None = None) -> list:
    """Ordered arguments for contiguous [B, H, S, 64] q, k, v, o and an int32 block mask
    [ceil(S / block_m), ceil(S / block_n)]; ``sm_scale`` defaults to 1/sqrt(64)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        check_tensor(name, t, dtype=spec.dtype, dims=("B", "H", "S", "D"), one_buffer=False)
        if t.shape != q.shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} differs from q's {tuple(q.shape)}")
    if q.shape[3] != HEAD_DIM:
        raise ValueError(f"q: head dim {q.shape[3]}, this kernel takes {HEAD_DIM}")
    B, H, S, _ = q.shape
    _check_dense_problem(spec, B=B, H=H, S=S)
    check_tensor("block_mask", block_mask, dtype="i32", dims=("q_blocks", "k_blocks"))
    if tuple(block_mask.shape) != mask_shape(spec, S):
        raise ValueError(f"block_mask: shape {tuple(block_mask.shape)}, expected {mask_shape(spec, S)} "
                         f"(S={S} in blocks of {spec.block_m} queries x {spec.block_n} keys)")
    check_device({"q": q, "k": k, "v": v, "o": o, "block_mask": block_mask})
    if sm_scale is not None and (isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float))
                                 or not math.isfinite(sm_scale)):
        raise ValueError(f"sm_scale: must be a finite number or None, got {sm_scale!r}")
    scale = 1.0 / math.sqrt(HEAD_DIM) if sm_scale is None else float(sm_scale)
    return [q, k, v, o, block_mask, S, scale]


def build(spec: BlockSparseAttentionSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size)
    q_ptr = k.arg_ptr("q", spec.dtype, readonly=True)
    k_ptr = k.arg_ptr("k", spec.dtype, readonly=True)
    v_ptr = k.arg_ptr("v", spec.dtype, readonly=True)
    o_ptr = k.arg_ptr("o", spec.dtype)
    mask_ptr = k.arg_ptr("block_mask", "i32", readonly=True)
    seq_len = k.arg_i32("seq_len")
    sm_scale = k.arg_f32("sm_scale")

    D = HEAD_DIM
    mma = k.mfma(spec.atom, spec.dtype)
    am, an, ak = mma.atom.m, mma.atom.n, mma.atom.k
    warp_q = spec.block_m // spec.num_warps
    q_frags, kv_frags, d_frags = warp_q // an, spec.block_n // am, D // am
    threads = spec.workgroup_size

    k_tile = k.lds("k_tile", (spec.block_n, D), spec.dtype, pad=spec.lds_pad)
    vt_tile = k.lds("vt_tile", (D, spec.block_n), spec.dtype, pad=spec.lds_pad)

    head_elems = seq_len * D
    head_start = k.block_id(1) * head_elems
    q_buf, k_buf, v_buf, o_buf = (p.offset(head_start).buffer(head_elems) for p in (q_ptr, k_ptr, v_ptr, o_ptr))
    k_blocks = (seq_len + (spec.block_n - 1)) // spec.block_n
    mask_row = mask_ptr.offset(k.block_id(0) * k_blocks)      # this query block's row of the mask
    block_q0 = k.block_id(0) * spec.block_m
    warp_q0 = block_q0 + k.wave_id() * warp_q
    q_cols = [warp_q0 + t * an for t in range(q_frags)]
    qk_scale = sm_scale * LOG2E
    tid = k.thread_id(0)

    q_ops = [[load_fragment_global(q_buf, mma.B, (d0, q_cols[t]), D, transposed=True)
              for t in range(q_frags)] for d0 in range(0, D, ak)]
    m_init = AxisVector.full(k, mma.C, PER_COL, dsl.f32, -math.inf)
    l_init = AxisVector.full(k, mma.C, PER_COL, dsl.f32, 0.0)
    carry = [m_init] * q_frags + [l_init] * q_frags + [mma.zeros()] * (q_frags * d_frags)

    with k.for_range(0, k_blocks, 1, carry=carry) as loop:
        kb = loop.index
        kv0 = kb * spec.block_n
        keep = mask_row.load(kb) != 0            # uniform: the whole workgroup skips or runs
        with k.if_(keep, carry=list(loop.carry)) as kept:
            m = list(loop.carry[:q_frags])
            l = list(loop.carry[q_frags:2 * q_frags])
            o = list(loop.carry[2 * q_frags:])      # [t * d_frags + j]
            copy_tile_to_lds(k_buf, k_tile, (kv0, 0), D, thread_index=tid, threads=threads,
                             vector=STAGING_VECTOR)
            copy_tile_to_lds(v_buf, vt_tile, (kv0, 0), D, thread_index=tid, threads=threads,
                             vector=STAGING_VECTOR, transpose=True)
            k.barrier()
            scores = transposed_scores(mma, k_tile, q_ops, kv_frags)
            probs = [[None] * q_frags for _ in range(kv_frags)]
            for t in range(q_frags):
                masked = []
                for i in range(kv_frags):
                    keys, _ = scores[i][t].coords(origin=(kv0 + i * am, q_cols[t]))
                    masked.append((scores[i][t] * qk_scale).where(keys < seq_len, -math.inf))
                m[t], l[t], p_t, alpha = online_softmax_update(m[t], l[t], masked)
                for i in range(kv_frags):
                    probs[i][t] = p_t[i].to(spec.dtype)
                alpha_o = alpha.broadcast_to(mma.C)
                for j in range(d_frags):
                    o[t * d_frags + j] = o[t * d_frags + j] * alpha_o
            for i in range(kv_frags):
                for sub in range(0, am, ak):
                    p_ops = [probs[i][t].as_operand(mma.B, (sub, 0)) for t in range(q_frags)]
                    for j in range(d_frags):
                        v_op = load_fragment(vt_tile, mma.A, (j * am, i * am + sub))
                        for t in range(q_frags):
                            o[t * d_frags + j] = mma(v_op, p_ops[t], o[t * d_frags + j])
            k.barrier()     # the next kept block overwrites K and V^T
            kept.yield_(*m, *l, *o)
        loop.yield_(*kept.results)

    l_final = loop.results[q_frags:2 * q_frags]
    o_final = loop.results[2 * q_frags:]
    for t in range(q_frags):
        # a row with no kept block has l = 0: its output is 0, not 0 * inf
        inv_l = l_final[t].map(lambda x: select(x > 0.0, rcp(x), 0.0)).broadcast_to(mma.C)
        for j in range(d_frags):
            out = (o_final[t * d_frags + j] * inv_l).to(spec.dtype)
            store_fragment_global(o_buf, out, (j * am, q_cols[t]), D, bounds=(None, seq_len), transposed=True)
    return k


# `rocke profile block_sparse_attention/... --shape B=..,H=..,S=..`: the problem this family
# declares (half the key blocks kept, drawn once from a seeded generator, plus the diagonal)
def profile_tensors(spec: BlockSparseAttentionSpec, B: int = 1, H: int = 2, S: int = 512):
    """What profile_problem allocates: (dtype, {tensor: elements or (elements, dtype)})."""
    each = B * H * S * HEAD_DIM
    qb, kb = mask_shape(spec, S)
    return spec.dtype, {"q": each, "k": each, "v": each, "o": each, "block_mask": (qb * kb, "i32")}


def profile_problem(spec: BlockSparseAttentionSpec, B: int = 1, H: int = 2, S: int = 512):
    import torch
    from rocke.perf.problems import TORCH_DTYPES, Problem
    dt = TORCH_DTYPES[spec.dtype]
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, S, HEAD_DIM, generator=gen).to(dt) for _ in range(3))
    o = torch.zeros_like(q)
    qb, kb = mask_shape(spec, S)
    block_mask = (torch.rand(qb, kb, generator=gen) < 0.5).to(torch.int32)
    block_mask.diagonal().fill_(1)
    grid, block = launch_geometry(spec, B, H, S)
    rows = torch.tensor([min(spec.block_m, S - i * spec.block_m) for i in range(qb)], dtype=torch.int64)
    cols = torch.tensor([min(spec.block_n, S - j * spec.block_n) for j in range(kb)], dtype=torch.int64)
    kept_pairs = int((block_mask.long() * rows[:, None] * cols[None, :]).sum())
    size = q.element_size()
    return Problem(grid, block, kernel_args(spec, q, k, v, o, block_mask),
                   read_bytes=3 * q.numel() * size + 4 * qb * kb, write_bytes=o.numel() * size,
                   flops=4 * B * H * kept_pairs * HEAD_DIM)
