"""Dense flash-attention forward sample: O = softmax(Q K^T * scale [+ causal mask]) V.

Q, K, V, O are contiguous ``[B, H, S, D]`` (f16 or bf16, D in {64, 128}, any S); one workgroup
handles ``block_m`` queries of one (batch, head) and streams the keys in tiles of ``block_n``.

Mapping (the transposed orientation, ALGORITHM.md §8): each warp computes the score tile
transposed, ``S^T = K Q^T`` -- K from LDS as the A operand, its queries' ``Q^T`` held in registers
as B operands for the whole loop -- so the probabilities ``P^T`` come out in exactly the registers
the ``O^T = V^T P^T`` MFMA takes as its B operand (``Fragment.as_operand``): no LDS round trip for
P. V is staged transposed (``V^T``) so each lane's A operand is contiguous in LDS.

Online softmax (ALGORITHM.md §2) in the log2 domain: ``sm_scale * log2(e)`` is folded once,
every exponential is one ``exp2``; the running max ``m``, sum ``l`` (one value per query column)
and the ``O^T`` accumulators are carried through the runtime KV loop; the end divides by ``l``.
Causal masking is bottom-right aligned, which for S_q == S_k is key <= query; KV tiles wholly in
the future of the workgroup's queries are never visited. Keys past S read as 0 (the per-head
buffer's extent) and are masked to -inf; query rows past S are computed but never stored.

Address width (``check_problem``): a head's start ``block_id.y * (S * D)`` is an i32 multiply
(``s_mul_i32``), widened to 64 bits only in the pointer offset, so the last head's start
``(B * H - 1) * S * D`` must stay <= 2**31 - 1 -- beyond it later heads read and write at
wrapped addresses. Within a head the staged K/V rows run to S rounded up to block_n as i32
element indices ``row * D + d``; those must stay <= 2**31 - 1 so V rows past S land past the
head's extent (reading 0: their probabilities are 0, but 0 x a wrapped-in inf would be NaN)
instead of wrapping. The head's extent ``S * D * 2`` bytes then fits the 32-bit num_records.
(Q columns past S only feed outputs that are never stored.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocke import dsl
from rocke.arch.mfma import atom_for
from rocke.dsl import minimum, rcp
from rocke.dsl.fragment import (AxisVector, PER_COL, copy_tile_to_lds, load_fragment,
                                load_fragment_global, store_fragment_global)
from rocke.kernels.common.checks import (check_bool, check_choice, check_device, check_extent,
                                         check_grid_extent, check_i32_value, check_lds_budget, check_multiple,
                                         check_num_records, check_positive_int, check_register_budget,
                                         check_tensor, round_up)
from rocke.dsl.softmax import LOG2E, online_softmax_update, transposed_scores

DTYPES = ("f16", "bf16")
HEAD_DIMS = (64, 128)
ATOMS = ("16x16x16", "32x32x8")
STAGING_VECTOR = 8


@dataclass(frozen=True)
class FlashAttentionSpec:
    dtype: str = "f16"
    head_dim: int = 128
    causal: bool = True
    block_m: int = 64          # queries per workgroup (num_warps slabs of block_m / num_warps)
    block_n: int = 64          # keys per KV tile
    num_warps: int = 4
    atom: str = "16x16x16"
    lds_pad: int = 8           # elements appended to each LDS row

    def __post_init__(self):
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("head_dim", self.head_dim, HEAD_DIMS)
        check_bool("causal", self.causal)
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
        lds = 2 * (self.block_n * (self.head_dim + self.lds_pad) + self.head_dim * (self.block_n + self.lds_pad))
        check_lds_budget("block_n", lds, "the K and V^T tiles")
        warp_q = self.block_m // self.num_warps
        check_register_budget("block_m/block_n", warp_q * (self.head_dim + self.block_n) // 64,
                              "each warp's fp32 O^T and S^T accumulators")

    @property
    def workgroup_size(self) -> int:
        return dsl.WAVE_SIZE * self.num_warps

    @property
    def kernel_name(self) -> str:
        return (f"flash_attention_{self.dtype}_d{self.head_dim}_{'causal' if self.causal else 'full'}"
                f"_{self.atom.replace('x', '_')}_m{self.block_m}n{self.block_n}_w{self.num_warps}")


def _variants() -> dict[str, FlashAttentionSpec]:
    out = {}
    for dtype in DTYPES:
        for d in HEAD_DIMS:
            for causal in (True, False):
                # D128 f16 takes the 32x32x8 "transposed-x8" regime (ALGORITHM.md §8), the rest 16x16x16
                # (D128 streams 32-key tiles: K + V^T then fit 3 workgroups' LDS per CU)
                wide = dtype == "f16" and d == 128
                spec = FlashAttentionSpec(dtype, d, causal, block_m=128 if wide else 64,
                                          block_n=32 if d == 128 else 64,
                                          num_warps=4, atom="32x32x8" if wide else "16x16x16")
                out[f"{dtype}_d{d}_{'causal' if causal else 'full'}"] = spec
    return out


VARIANTS: dict[str, FlashAttentionSpec] = _variants()
GOLDEN_PERTURBATION = ("causal", {True: False, False: True})     # see rocke.kernels.registry

ARGS = ("q", "k", "v", "o", "seq_len", "sm_scale")


def check_problem(spec: FlashAttentionSpec, *, B: int, H: int, S: int) -> None:
    """A [B, H, S, D] problem fits the kernel's address arithmetic (see the module docstring)."""
    for name, v in (("B", B), ("H", H), ("S", S)):
        check_extent(name, v)
    check_grid_extent("B * H", B * H, axis="y")
    D = spec.head_dim
    check_i32_value("S", round_up(S, spec.block_n) * D - 1,
                    f"the largest staged K/V index (S rounded up to {spec.block_n}) * D - 1")
    check_num_records("S", S * D * 2, "one head's S x D slice")
    check_i32_value("B * H", (B * H - 1) * S * D, "the last head's start (B * H - 1) * S * D")


def launch_geometry(spec: FlashAttentionSpec, B: int, H: int, S: int):
    """(grid in workgroups, block in threads): (query blocks, B * H) workgroups."""
    check_problem(spec, B=B, H=H, S=S)
    return (-(-S // spec.block_m), B * H, 1), (spec.workgroup_size, 1, 1)


def kernel_args(spec: FlashAttentionSpec, q, k, v, o, sm_scale: float | None = None) -> list:
    """Ordered kernel arguments for contiguous [B, H, S, D] torch tensors; ``sm_scale`` defaults
    to 1/sqrt(D)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        # each head is its own buffer resource (checked below), the whole tensor may exceed 2 GiB
        check_tensor(name, t, dtype=spec.dtype, dims=("B", "H", "S", "D"), one_buffer=False)
        if t.shape != q.shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} differs from q's {tuple(q.shape)}")
    if q.shape[3] != spec.head_dim:
        raise ValueError(f"q: head dim {q.shape[3]} differs from the spec's {spec.head_dim}")
    B, H, S, _ = q.shape
    check_problem(spec, B=B, H=H, S=S)
    check_device({"q": q, "k": k, "v": v, "o": o})
    if sm_scale is not None and (isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float))
                                 or not math.isfinite(sm_scale)):
        raise ValueError(f"sm_scale: must be a finite number or None, got {sm_scale!r}")
    scale = 1.0 / math.sqrt(spec.head_dim) if sm_scale is None else float(sm_scale)
    return [q, k, v, o, int(q.shape[2]), scale]


def build(spec: FlashAttentionSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size)
    q_ptr = k.arg_ptr("q", spec.dtype, readonly=True)
    k_ptr = k.arg_ptr("k", spec.dtype, readonly=True)
    v_ptr = k.arg_ptr("v", spec.dtype, readonly=True)
    o_ptr = k.arg_ptr("o", spec.dtype)
    seq_len = k.arg_i32("seq_len")
    sm_scale = k.arg_f32("sm_scale")

    D = spec.head_dim
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
    block_q0 = k.block_id(0) * spec.block_m
    warp_q0 = block_q0 + k.wave_id() * warp_q
    q_cols = [warp_q0 + t * an for t in range(q_frags)]
    qk_scale = sm_scale * LOG2E
    tid = k.thread_id(0)

    # Q^T as B operands, one per (head-dim step, query fragment), resident for the whole loop
    q_ops = [[load_fragment_global(q_buf, mma.B, (d0, q_cols[t]), D, transposed=True)
              for t in range(q_frags)] for d0 in range(0, D, ak)]

    m_init = AxisVector.full(k, mma.C, PER_COL, dsl.f32, -math.inf)     # one entry per query column
    l_init = AxisVector.full(k, mma.C, PER_COL, dsl.f32, 0.0)
    carry = [m_init] * q_frags + [l_init] * q_frags + [mma.zeros()] * (q_frags * d_frags)

    kv_end = minimum(seq_len, block_q0 + spec.block_m) if spec.causal else seq_len
    with k.for_range(0, kv_end, spec.block_n, carry=carry) as loop:
        kv0 = loop.index
        m = list(loop.carry[:q_frags])
        l = list(loop.carry[q_frags:2 * q_frags])
        o = list(loop.carry[2 * q_frags:])      # [t * d_frags + j]

        copy_tile_to_lds(k_buf, k_tile, (kv0, 0), D, thread_index=tid, threads=threads, vector=STAGING_VECTOR)
        copy_tile_to_lds(v_buf, vt_tile, (kv0, 0), D, thread_index=tid, threads=threads,
                         vector=STAGING_VECTOR, transpose=True)
        k.barrier()

        # S^T = K Q^T, one [am keys x an queries] fragment per (kv fragment i, query fragment t)
        scores = transposed_scores(mma, k_tile, q_ops, kv_frags)

        probs = [[None] * q_frags for _ in range(kv_frags)]
        for t in range(q_frags):
            masked = []
            for i in range(kv_frags):
                keys, queries = scores[i][t].coords(origin=(kv0 + i * am, q_cols[t]))
                valid = keys < seq_len
                if spec.causal:
                    valid = valid & (keys <= queries)
                masked.append((scores[i][t] * qk_scale).where(valid, -math.inf))
            m[t], l[t], p_t, alpha = online_softmax_update(m[t], l[t], masked)
            for i in range(kv_frags):
                probs[i][t] = p_t[i].to(spec.dtype)
            alpha_o = alpha.broadcast_to(mma.C)
            for j in range(d_frags):
                o[t * d_frags + j] = o[t * d_frags + j] * alpha_o

        # O^T += V^T P^T, P^T straight from the score registers
        for i in range(kv_frags):
            for sub in range(0, am, ak):
                p_ops = [probs[i][t].as_operand(mma.B, (sub, 0)) for t in range(q_frags)]
                for j in range(d_frags):
                    v_op = load_fragment(vt_tile, mma.A, (j * am, i * am + sub))
                    for t in range(q_frags):
                        o[t * d_frags + j] = mma(v_op, p_ops[t], o[t * d_frags + j])
        k.barrier()     # the next tile overwrites K and V^T
        loop.yield_(*m, *l, *o)

    l_final = loop.results[q_frags:2 * q_frags]
    o_final = loop.results[2 * q_frags:]
    for t in range(q_frags):
        inv_l = l_final[t].map(rcp).broadcast_to(mma.C)
        for j in range(d_frags):
            out = (o_final[t * d_frags + j] * inv_l).to(spec.dtype)
            store_fragment_global(o_buf, out, (j * am, q_cols[t]), D, bounds=(None, seq_len), transposed=True)
    return k

