"""Fused MoE expert GEMM sample: every token's output is the router-weighted sum of its top-k
experts' products, ``out[t] = sum_j weight[t, j] * (x[t] @ W[expert[t, j]])``; bf16 (or f16) in
and out, f32 accumulation, the experts' contributions combined with atomic adds.

The host sorts the (token, slot) routes by expert (``sort_routes``): ``route_rows`` holds the
token of each route, ``route_weights`` its router weight, ``expert_offsets[e]:expert_offsets[e+1]``
the routes of expert ``e``. Workgroup ``(n block, m block, expert)`` takes ``block_m`` routes of
its expert: it gathers their token rows of ``x`` into LDS (``gather_rows_to_lds``, rows past the
expert's count as zeros), multiplies them with the expert's ``W[e]`` tile by tile (B staged
transposed, as in the ``gemm`` sample), scales each row by its router weight (``load_axis``
``PER_ROW``) and adds the rows back to their tokens (``atomic_add_fragment(..., rows=)``: packed
bf16 pairs). A workgroup past its expert's routes does nothing. ``out`` must be zeroed first;
with top-2 the two adds into a zeroed element commute, so the result does not depend on their
order. Written with public DSL calls only.

Address width (``check_problem``): ``x`` indices ``token * K + col`` and the expert's start
``e * K * N`` are i32 (``T * K``, ``E * K * N`` <= 2**31 - 1); the staging of ``W[e]^T`` reads
rows up to K rounded up to block_k past the expert's extent (reading 0), so
``(K rounded up) * N`` must stay <= 2**31 - 1 as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocke import dsl
from rocke.arch.mfma import atom_for
from rocke.dsl.fragment import (PER_ROW, atomic_add_fragment, copy_tile_to_lds, gather_rows_to_lds,
                                load_axis, load_fragment)
from rocke.kernels.common.checks import (check_choice, check_device, check_extent, check_i32_value,
                                         check_lds_budget, check_multiple, check_positive_int,
                                         check_register_budget, check_tensor, round_up)

DTYPES = ("bf16", "f16")
ATOMS = ("16x16x16", "32x32x8")
STAGING_VECTOR = 8
ARGS = ("x", "w", "route_rows", "route_weights", "expert_offsets", "out", "T", "N", "K")


@dataclass(frozen=True)
class MoeGemmSpec:
    dtype: str = "bf16"
    atom: str = "16x16x16"
    block_m: int = 32          # routes per workgroup
    block_n: int = 64
    block_k: int = 32
    num_warps: int = 4
    lds_pad: int = 8

    def __post_init__(self):
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("atom", self.atom, ATOMS)
        for name in ("block_m", "block_n", "block_k"):
            check_positive_int(name, getattr(self, name))
        check_choice("num_warps", self.num_warps, (1, 2, 4, 8))
        check_positive_int("lds_pad", self.lds_pad, allow_zero=True)
        a = atom_for(self.atom, self.dtype)
        check_multiple("block_m", self.block_m, self.warps_m * a.m,
                       of=f"warps_m ({self.warps_m}) x the atom's M ({a.m})")
        check_multiple("block_n", self.block_n, self.warps_n * a.n,
                       of=f"warps_n ({self.warps_n}) x the atom's N ({a.n})")
        check_multiple("block_k", self.block_k, math.lcm(a.k, STAGING_VECTOR),
                       of=f"the atom's K ({a.k}) and of the staging vector ({STAGING_VECTOR})")
        check_multiple("block_n", self.block_n, STAGING_VECTOR, of=f"the staging vector ({STAGING_VECTOR})")
        check_multiple("lds_pad", self.lds_pad, 4, because="operands are read from LDS 8 bytes at a time")
        lds = 2 * (self.block_m + self.block_n) * (self.block_k + self.lds_pad)
        check_lds_budget("block_m/block_n/block_k", lds, "the gathered rows and the W^T tile")
        accumulators = (self.block_m // self.warps_m) * (self.block_n // self.warps_n) // 64
        check_register_budget("block_m/block_n", accumulators, "each warp's fp32 accumulators")

    @property
    def warps_n(self) -> int:
        return 1 if self.num_warps == 1 else 2

    @property
    def warps_m(self) -> int:
        return self.num_warps // self.warps_n

    @property
    def workgroup_size(self) -> int:
        return dsl.WAVE_SIZE * self.num_warps

    @property
    def kernel_name(self) -> str:
        return (f"moe_gemm_{self.dtype}_{self.atom.replace('x', '_')}_m{self.block_m}n{self.block_n}"
                f"k{self.block_k}_w{self.num_warps}")


VARIANTS: dict[str, MoeGemmSpec] = {
    "bf16_16x16x16": MoeGemmSpec("bf16", "16x16x16"),
    "bf16_32x32x8": MoeGemmSpec("bf16", "32x32x8", block_m=64),
}
GOLDEN_PERTURBATION = ("block_k", {32: 64, 64: 32})     # see rocke.kernels.registry


def sort_routes(expert_ids, weights, num_experts: int):
    """Host routing tables from ``expert_ids`` / ``weights`` [T, top_k] (int, float): the routes
    sorted by expert as (route_rows i32 [T * top_k], route_weights f32, expert_offsets i32
    [num_experts + 1])."""
    import torch
    if expert_ids.shape != weights.shape or expert_ids.dim() != 2:
        raise ValueError(f"expert_ids {tuple(expert_ids.shape)} and weights {tuple(weights.shape)} "
                         "must both be [tokens, top_k]")
    if expert_ids.numel() and (int(expert_ids.min()) < 0 or int(expert_ids.max()) >= num_experts):
        raise ValueError(f"expert_ids must lie in [0, {num_experts}), got "
                         f"[{int(expert_ids.min())}, {int(expert_ids.max())}]")
    flat = expert_ids.reshape(-1).long()
    order = torch.sort(flat, stable=True).indices
    rows = (order // expert_ids.shape[1]).to(torch.int32)
    counts = torch.bincount(flat, minlength=num_experts)
    offsets = torch.zeros(num_experts + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(counts, 0).to(torch.int32)
    return rows, weights.reshape(-1)[order].float().contiguous(), offsets


def check_problem(spec: MoeGemmSpec, *, T: int, N: int, K: int, E: int) -> None:
    """Sizes fit the kernel's i32 address arithmetic (module docstring)."""
    for name, v in (("T", T), ("N", N), ("K", K), ("E", E)):
        check_extent(name, v)
    check_i32_value("x", T * K, "its extent T * K")
    check_i32_value("w", E * K * N, "its extent E * K * N")
    check_i32_value("w", round_up(K, spec.block_k) * N, f"an expert's staged rows (K rounded up to "
                    f"{spec.block_k}) * N")


def launch_geometry(spec: MoeGemmSpec, N: int, expert_offsets):
    """(grid, block): (N blocks, route blocks of the busiest expert, experts)."""
    counts = expert_offsets[1:] - expert_offsets[:-1]
    busiest = max(int(counts.max()), 1) if counts.numel() else 1
    return (-(-N // spec.block_n), -(-busiest // spec.block_m), counts.numel()), (spec.workgroup_size, 1, 1)


def kernel_args(spec: MoeGemmSpec, x, w, route_rows, route_weights, expert_offsets, out) -> list:
    """Ordered arguments for x [T, K], w [E, K, N], out [T, N] (the spec's dtype, contiguous; out
    zeroed) and the tables of ``sort_routes``."""
    check_tensor("x", x, dtype=spec.dtype, dims=("T", "K"))
    check_tensor("w", w, dtype=spec.dtype, dims=("E", "K", "N"))
    check_tensor("out", out, dtype=spec.dtype, dims=("T", "N"))
    check_tensor("route_rows", route_rows, dtype="i32", dims=("R",))
    check_tensor("route_weights", route_weights, dtype="f32", dims=("R",))
    check_tensor("expert_offsets", expert_offsets, dtype="i32", dims=("E + 1",))
    T, K = x.shape
    E, _, N = w.shape
    if w.shape[1] != K or out.shape != (T, N):
        raise ValueError(f"shapes: x {tuple(x.shape)} @ w {tuple(w.shape)} -> out {tuple(out.shape)} "
                         "do not match")
    if expert_offsets.shape != (E + 1,):
        raise ValueError(f"expert_offsets: {tuple(expert_offsets.shape)}, expected ({E + 1},) for {E} experts")
    R = route_rows.shape[0]
    if route_weights.shape != (R,) or int(expert_offsets[0]) != 0 or int(expert_offsets[-1]) != R \
            or bool((expert_offsets[1:] < expert_offsets[:-1]).any()):
        raise ValueError(f"expert_offsets must rise from 0 to the {R} routes of route_rows / "
                         f"route_weights ({tuple(route_weights.shape)}); build them with sort_routes")
    if R and (int(route_rows.min()) < 0 or int(route_rows.max()) >= T):
        raise ValueError(f"route_rows must name tokens in [0, {T})")
    check_problem(spec, T=T, N=N, K=K, E=E)
    check_device({"x": x, "w": w, "route_rows": route_rows, "route_weights": route_weights,
                  "expert_offsets": expert_offsets, "out": out})
    return [x, w, route_rows, route_weights, expert_offsets, out, T, N, K]


def build(spec: MoeGemmSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size)
    x = k.arg_ptr("x", spec.dtype, readonly=True)
    w = k.arg_ptr("w", spec.dtype, readonly=True)
    route_rows = k.arg_ptr("route_rows", "i32", readonly=True)
    route_weights = k.arg_ptr("route_weights", "f32", readonly=True)
    expert_offsets = k.arg_ptr("expert_offsets", "i32", readonly=True)
    out = k.arg_ptr("out", spec.dtype)
    T, N, K = (k.arg_i32(n) for n in ARGS[6:])

    mma = k.mfma(spec.atom, spec.dtype)
    am, an, ak = mma.atom.m, mma.atom.n, mma.atom.k
    warp_m, warp_n = spec.block_m // spec.warps_m, spec.block_n // spec.warps_n
    frags_m, frags_n = warp_m // am, warp_n // an
    threads = spec.workgroup_size
    a_tile = k.lds("a_tile", (spec.block_m, spec.block_k), spec.dtype, pad=spec.lds_pad)
    bt_tile = k.lds("bt_tile", (spec.block_n, spec.block_k), spec.dtype, pad=spec.lds_pad)

    expert = k.block_id(2)
    first, end = expert_offsets.load(expert), expert_offsets.load(expert + 1)
    m0 = first + k.block_id(1) * spec.block_m       # this workgroup's first route
    n0 = k.block_id(0) * spec.block_n
    wave = k.wave_id()
    warp_row = (wave // spec.warps_n) * warp_m
    warp_col = (wave % spec.warps_n) * warp_n
    tid = k.thread_id(0)

    with k.if_(m0 < end):       # the busiest expert sets the grid; the others stop early
        routes_here = end - m0
        x_buf = x.buffer(T * K)
        w_buf = w.offset(expert * (K * N)).buffer(K * N)    # W[e], [K, N]
        rows_here = route_rows.offset(m0)
        with k.for_range(0, K, spec.block_k, carry=[mma.zeros() for _ in range(frags_m * frags_n)]) as loop:
            k0 = loop.index
            acc = list(loop.carry)
            gather_rows_to_lds(x_buf, a_tile, rows_here, k0, K, thread_index=tid, threads=threads,
                               valid_rows=routes_here, vector=STAGING_VECTOR, cols_limit=K)
            copy_tile_to_lds(w_buf, bt_tile, (k0, n0), N, thread_index=tid, threads=threads,
                             vector=STAGING_VECTOR, cols_limit=N, transpose=True)
            k.barrier()
            for ks in range(0, spec.block_k, ak):
                a_ops = [load_fragment(a_tile, mma.A, (warp_row + i * am, ks)) for i in range(frags_m)]
                b_ops = [load_fragment(bt_tile, mma.B, (ks, warp_col + j * an), transposed=True)
                         for j in range(frags_n)]
                acc = [mma(a_ops[i], b_ops[j], acc[i * frags_n + j])
                       for i in range(frags_m) for j in range(frags_n)]
            k.barrier()     # the next step overwrites the tiles
            loop.yield_(*acc)

        weights_buf = route_weights.buffer(end)
        rows_buf = route_rows.buffer(end)
        for i in range(frags_m):
            r0 = m0 + warp_row + i * am             # the fragment's first route
            weight = load_axis(weights_buf, mma.C, PER_ROW, origin=r0)
            for j in range(frags_n):
                scaled = (loop.results[i * frags_n + j] * weight).to(spec.dtype)
                atomic_add_fragment(out, scaled, (r0, n0 + warp_col + j * an), N, bounds=(end, N),
                                    rows=rows_buf)
    return k


# `rocke profile moe_gemm/... --shape T=..,N=..,K=..`: the problem this family declares (routes
# drawn once from a seeded generator: top-2 of 8 experts)
PROFILE_EXPERTS, PROFILE_TOP_K = 8, 2


def profile_tensors(spec: MoeGemmSpec, T: int = 64, N: int = 256, K: int = 256):
    """What profile_problem allocates: (dtype, {tensor: elements or (elements, dtype)})."""
    routes, E = T * PROFILE_TOP_K, PROFILE_EXPERTS
    return spec.dtype, {"x": T * K, "w": E * K * N, "out": T * N, "route_rows": (routes, "i32"),
                        "route_weights": (routes, "f32"), "expert_offsets": (E + 1, "i32")}


def profile_problem(spec: MoeGemmSpec, T: int = 64, N: int = 256, K: int = 256):
    import torch
    from rocke.perf.problems import TORCH_DTYPES, Problem
    dt = TORCH_DTYPES[spec.dtype]
    E = PROFILE_EXPERTS
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(T, K, generator=gen).to(dt), torch.randn(E, K, N, generator=gen).to(dt)
    weights, experts = torch.softmax(torch.randn(T, E, generator=gen), -1).topk(PROFILE_TOP_K, dim=-1)
    rows, route_w, offsets = sort_routes(experts, weights, E)
    out = torch.zeros(T, N, dtype=dt)
    grid, block = launch_geometry(spec, N, offsets)
    used = int((offsets[1:] > offsets[:-1]).sum())        # experts whose weights are read
    size = x.element_size()
    return Problem(grid, block, kernel_args(spec, x, w, rows, route_w, offsets, out),
                   read_bytes=size * (T * K + used * K * N) + 8 * rows.numel() + 4 * (E + 1),
                   write_bytes=size * T * N, flops=2 * rows.numel() * N * K)
