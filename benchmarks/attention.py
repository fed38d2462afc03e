"""Unified paged attention: what the dispatcher picks and what the chosen kernels cost.

For each representative shape (decode long-KV, short prefill, long prefill) x fp16/bf16 x d64/d128
it prints (never asserts):
- the dispatcher's choice at the PRODUCTION size (path, geometry, segments, graph replay, reason);
- the same choice at the SCALED size that is actually emulated here (the emulator runs a CPU
  simulation of every lane, so the KV/query lengths are scaled down; the scaled shape is printed);
- per kernel of the chosen path: VGPR / AGPR / SGPR / LDS / spills / occupancy from the code object;
- the emulator's dynamic instruction mix per output token (wave-level issues per class / total_q);
- the emulator wall time, and the max error against ref_paged_attn.

Emulator wall time is CPU time of rocke's emulator on this machine: it says nothing about how
fast the kernels run on an MI300X.

Run:  .venv/bin/python benchmarks/attention.py [--shapes decode short_prefill long_prefill]
                                               [--dtypes f16 bf16] [--head-sizes 64 128] [--no-run]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from compile import cpu_name  # noqa: E402  (sibling benchmark: one reading of the CPU name)

from rocke.kernels.common import attention_unified as au  # noqa: E402
from rocke.kernels.common import knobs as kn  # noqa: E402
from rocke.kernels.common.attention_reference import ref_paged_attn  # noqa: E402
from rocke.kernels.common.tolerances import attention_atol  # noqa: E402


@dataclass(frozen=True)
class Shape:
    name: str
    seqs: tuple            # ((query_len, kv_len), ...) at production size
    scaled: tuple          # the emulated stand-in
    hq: int = 32
    hk: int = 8
    block_size: int = 64


SHAPES = {
    "decode": Shape("decode long-KV", ((1, 32768),) * 4, ((1, 2048),) * 2),
    "short_prefill": Shape("short prefill", ((512, 512),) * 2, ((128, 128),)),
    "long_prefill": Shape("long prefill", ((4096, 4096),), ((640, 640),)),
}


def machine() -> str:
    return (f"{platform.node()}: {cpu_name()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"torch {torch.__version__}; device: rocke gfx942 emulator (no GPU)")


def problem_of(shape: Shape, seqs, dtype: str, d: int) -> au.UnifiedAttentionProblem:
    total_q = sum(q for q, _ in seqs)
    pages = sum(-(-k // shape.block_size) for _, k in seqs)
    return au.UnifiedAttentionProblem(
        dtype=dtype, head_size=d, num_q_heads=shape.hq, num_kv_heads=shape.hk,
        block_size=shape.block_size, num_seqs=len(seqs), total_q=total_q,
        max_seqlen_q=max(q for q, _ in seqs), max_seqlen_k=max(k for _, k in seqs),
        num_blocks=pages, kv_cache_bytes=pages * shape.block_size * shape.hk * d * 2)


def choice(problem, knobs) -> str:
    plan = au.plan(problem, "auto", knobs, with_specs=False)
    g = plan.geometry
    seg = f", {g.num_segments} segments" if plan.path == "3d" else ""
    return (f"{plan.path.upper()} {g.regime}/{g.name} w{g.num_warps}x{g.block_m_per_warp} T{g.tile_size} "
            f"K{'1' if g.k_single_buffer else '2'}{seg}; graph replay "
            f"{'yes' if plan.graph_replay else 'no'} -- {plan.reason}")


def inputs(shape: Shape, seqs, dtype: str, d: int, seed: int = 0) -> dict:
    from tests.kernels.unified_inputs import make_inputs
    return make_inputs(list(seqs), hq=shape.hq, hk=shape.hk, d=d, bs=shape.block_size,
                       dtype=dtype, seed=seed)


def run_one(shape: Shape, dtype: str, d: int, knobs, do_run: bool) -> None:
    full = problem_of(shape, shape.seqs, dtype, d)
    small = problem_of(shape, shape.scaled, dtype, d)
    print(f"\n== {shape.name} | {dtype} d{d} | Hq {shape.hq} Hk {shape.hk} block {shape.block_size}")
    print(f"  production {list(shape.seqs)[:1]} x{len(shape.seqs)}: {choice(full, knobs)}")
    print(f"  emulated   {list(shape.scaled)[:1]} x{len(shape.scaled)}: {choice(small, knobs)}")
    try:
        plan = au.plan(small, "auto", knobs)
        kernels = [au.compiled(spec) for spec in plan.specs]
    except NotImplementedError as e:
        print(f"  kernels: not available ({e})")
        return
    for spec, ck in zip(plan.specs, kernels):
        i = ck.info
        print(f"  {ck.name}: VGPR {i.vgprs} AGPR {i.agprs} SGPR {i.sgprs} LDS {i.lds_bytes} B "
              f"spills {i.spills} occupancy {i.occupancy}")
    if not do_run:
        return
    args = inputs(shape, shape.scaled, dtype, d)
    start = time.perf_counter()
    record = au.run_unified_attention_torch(**args)
    wall = time.perf_counter() - start
    total_q = small.total_q
    for report in record.reports:
        mix = ", ".join(f"{k} {v / total_q:.0f}" for k, v in report.instructions.items() if v)
        print(f"  {report.kernel}: {report.waves} waves; per output token (all "
              f"{small.num_q_heads} query heads; wave issues): {mix}; "
              f"emulator wall time {report.emulator_wall_time_s:.2f} s")
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"])
    err = (args["out"].float() - ref).abs().max().item()
    print(f"  max |out - ref| {err:.2e} (atol {attention_atol(dtype)}); "
          f"emulator wall time of the call {wall:.2f} s")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--dtypes", nargs="+", default=["f16", "bf16"], choices=["f16", "bf16"])
    ap.add_argument("--head-sizes", nargs="+", type=int, default=[64, 128], choices=[64, 128])
    ap.add_argument("--no-run", action="store_true", help="dispatcher choice and resources only")
    a = ap.parse_args(argv)
    knobs = kn.read_knobs()
    print(f"machine: {machine()}")
    print(f"num_sms used by the dispatcher: {au.num_sms()}")
    print(kn.describe(knobs))
    print("EMULATOR wall times below are CPU time of rocke's emulator, not GPU time.")
    for s in a.shapes:
        for dt in a.dtypes:
            for d in a.head_sizes:
                run_one(SHAPES[s], dt, d, knobs, not a.no_run)


if __name__ == "__main__":
    main()
