"""rocke's unified attention, the dispatcher's choice against forced 2D / 3D and against vLLM
0.33's own Triton kernels: exact counters and modelled MI300X time per shape.

Every shape runs through the public entry point run_unified_attention_torch (backend "auto",
"2d", "3d") inside rocke.runtime.profiling(), so each launch (3D: the split-KV kernel and
reduce_segments) comes back with exact counters; rocke.perf.model_time turns each into a
modelled MI300X time (launches add up). Shapes are the emulated stand-ins of benchmarks/
attention.py (lengths scaled down so the CPU emulation finishes): the model answers for those
sizes, which put fewer workgroups on the 304 CUs than production batches would. `--grid
vllm033` runs instead the plain (16-bit, unquantised, causal) cases of vLLM 0.33's own
unified-attention test grid, scaled for the emulator (tests/kernels/vllm_033_grid.py), each at
its own dtype, head size and heads.

Every time printed here is "modelled MI300X time" -- a model, not a measurement.

The "peer" backend is vLLM 0.33's own Triton unified attention (benchmarks/vllm_peer.py):
`kernel_unified_attention` (2D, or 3D with `reduce_segments`) read at run time from a vLLM 0.33
wheel (`--vllm-wheel PATH`, ROCKE_VLLM_WHEEL, an installed vllm, or /tmp/vllm; vLLM's source is
never part of this repository), launched with vLLM 0.33's own host-side choices (grid, BLOCK_M /
BLOCK_Q / TILE_SIZE, the 2D-vs-3D rule, 16 segments), compiled by Triton for gfx942 and run in
the emulator. "peer-own" is the repository's earlier stand-in (benchmarks/triton_peer.py: our own
vLLM-style Triton kernels). Every row's output (rocke's and the peers') is checked against the
fp32 ref_paged_attn within rocke's attention tolerance (a row outside it fails the run), and a
closing table gives rocke's dispatcher choice against each peer run (goal: rocke's modelled
time <= 0.8x the peer's), also at memory round trips of 1000 / 2000 / 4000 cycles.

Run:  .venv/bin/python benchmarks/profile.py [--shapes ...] [--grid default|vllm033]
      [--dtypes f16 bf16] [--head-sizes 64 128 256] [--backends auto 2d 3d peer peer-own]
      [--vllm-wheel PATH] [--json FILE] [--plot FILE.png] [--jobs N | --ray [ADDRESS]]
(--plot: a roofline picture of every row against MI300X's limits, labelled "modelled MI300X")
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dataclasses import replace  # noqa: E402

from benchmarks.engine import add_engine_options, engine_of, run_ordered  # noqa: E402
from rocke.arch.costs import MI300X  # noqa: E402
from rocke.kernels.common import attention_unified as au  # noqa: E402
from rocke.kernels.common.tolerances import attention_atol  # noqa: E402
from rocke.perf import model_time  # noqa: E402
from rocke.perf.roofline import KernelPoint, mfma_flops, plot  # noqa: E402
from rocke.runtime import profiling  # noqa: E402

# the model's least certain constant (an assumption, rocke/arch/costs.py): each row also gives
# the modelled time at these vector-memory round trips, to show how much a ranking depends on it
LATENCIES = (1000, 2000, 4000)
SUMMED = ("valu", "mfma", "salu", "ds", "vmem", "smem", "lds_bytes", "lds_bank_conflicts",
          "global_read_bytes", "global_write_bytes", "unique_read_bytes", "unique_write_bytes")


@dataclass(frozen=True)
class Shape:
    name: str
    seqs: tuple                 # ((query_len, kv_len), ...), the emulated sizes
    hq: int = 32
    hk: int = 8
    block_size: int = 64
    extra: dict = field(default_factory=dict)   # window_size / softcap for the entry point
    dtype: str | None = None    # a grid case's own dtype / head size (None: --dtypes /
    head_size: int | None = None    # --head-sizes)


SHAPES = {
    "decode": Shape("decode", ((1, 2048),) * 2),
    "prefill_mix": Shape("small-batch prefill mix", ((96, 512), (32, 1024), (1, 700))),
    "decode_prefill_mix": Shape("decode rows + a short prefill", ((1, 1500), (1, 600), (48, 300))),
    "short_prefill": Shape("short prefill", ((128, 128),)),
    "long_prefill": Shape("long prefill", ((640, 640),)),
    "window": Shape("prefill, sliding window 128", ((512, 512),),
                    extra={"window_size": (127, 0)}),
    "softcap": Shape("prefill, softcap 30", ((256, 256),), extra={"softcap": 30.0}),
}


PEERS = {"peer": "vLLM 0.33's Triton unified attention (benchmarks/vllm_peer.py)",
         "peer-own": "the repository's own vLLM-style Triton kernels (benchmarks/triton_peer.py)"}
BACKENDS = ("auto", "2d", "3d", *PEERS)


def vllm033_shapes() -> dict:
    """The plain cases of vLLM 0.33's unified-attention test grid (tests/kernels/
    vllm_033_grid.py): 16-bit q and cache, no fp8 q / output, one causal flag for the batch --
    what both rocke's entry point on make_inputs and the vLLM peer run. Cases differing only in
    what the launch decides for itself (vLLM's test threshold, use_td, the cache's block count)
    are one shape; each keeps its own dtype, head size and heads."""
    from tests.kernels.vllm_033_grid import RUNNING
    shapes = {}
    for c in RUNNING:
        if c.kv != "same" or c.q_fp8 or c.out_fp8 or c.causal is not None:
            continue
        extra = {}
        name = "q" + "-".join(f"{q}x{k}" for q, k in c.seqs) + f" h{c.heads[0]}/{c.heads[1]}"
        if c.sliding_window:
            extra["window_size"] = (c.sliding_window - 1, 0)
            name += f" sw{c.sliding_window}"
        if c.softcap:
            extra["softcap"] = float(c.softcap)
            name += f" cap{c.softcap:g}"
        name = f"vllm033 {name} d{c.head_size}"
        shapes.setdefault(name, Shape(name, tuple(c.seqs), hq=c.heads[0], hk=c.heads[1],
                                      block_size=c.block_size, extra=extra, dtype=c.dtype,
                                      head_size=c.head_size))
    return shapes


def inputs(shape: Shape, dtype: str, d: int) -> dict:
    from tests.kernels.unified_inputs import make_inputs
    args = make_inputs(list(shape.seqs), hq=shape.hq, hk=shape.hk, d=d, bs=shape.block_size,
                       dtype=dtype, seed=0)
    args.update(shape.extra)
    return args


def _max_error(args: dict) -> float:
    """max |out - ref_paged_attn| of a row's output (every row is checked, rocke's and the peer's)."""
    from rocke.kernels.common.attention_reference import ref_paged_attn
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"],
                         args["seqused_k"], args["block_table"], args["softmax_scale"],
                         window_size=args["window_size"], softcap=args["softcap"])
    return float((args["out"].float() - ref).abs().max())


def run(shape: Shape, dtype: str, d: int, backend: str, vllm_wheel=None) -> dict:
    args = inputs(shape, dtype, d)
    if backend == "peer":
        return run_vllm_peer_row(shape, dtype, d, args, vllm_wheel)
    if backend == "peer-own":
        return run_peer_row(shape, dtype, d, args)
    start = time.perf_counter()
    with profiling():
        record = au.run_unified_attention_torch(**args, backend=backend)
    wall = time.perf_counter() - start
    g = record.plan.geometry
    return _row(shape, dtype, d, backend, record.plan.path,
                g.num_segments if record.plan.path == "3d" else None,
                [(rep.kernel, rep.profile) for rep in record.reports], args, wall)


def row_task(item) -> dict:
    """One row's task (rocke.tasks: serial, --jobs, --ray): ``run`` of (shape, dtype, head size,
    backend, vLLM wheel), or ``{"not_run": reason}`` for a combination the backend refuses."""
    shape, dtype, d, backend, vllm_wheel = item
    try:
        return run(shape, dtype, d, backend, vllm_wheel)
    except (NotImplementedError, ValueError) as e:
        return {"not_run": str(e)}


def _row(shape, dtype, d, backend, path, segments, kernels_profiles, args, wall) -> dict:
    """A row from (kernel name, LaunchProfile) pairs: summed counters, modelled MI300X time."""
    counters = dict.fromkeys(SUMMED, 0)
    launches, total_us, flops = [], 0.0, 0
    at_latency = dict.fromkeys(LATENCIES, 0.0)
    for kernel, p in kernels_profiles:
        c = p.counters()
        for k in SUMMED:
            counters[k] += c[k]
        flops += mfma_flops(c["mfma_by_atom"])
        m = model_time(p)
        total_us += m.us
        for cycles in LATENCIES:
            at_latency[cycles] += model_time(p, costs=replace(MI300X, memory_latency_cycles=cycles)).us
        launches.append({"kernel": kernel, "grid": list(p.grid), "vgprs": p.resources["vgprs"],
                         "occupancy": m.occupancy, "modelled_us": round(m.us, 2),
                         "binding": m.binding})
    return {"shape": shape.name, "dtype": dtype, "head_size": d, "backend": backend,
            "path": path, "segments": segments, "counters": counters, "launches": launches,
            "modelled_us": round(float(total_us), 2), "mfma_flops": int(flops),
            "modelled_us_at_latency": {c: round(float(t), 1) for c, t in at_latency.items()},
            "max_abs_error": _max_error(args), "atol": attention_atol(dtype),
            "emulator_wall_s": round(wall, 1)}


def run_vllm_peer_row(shape: Shape, dtype: str, d: int, args: dict, vllm_wheel=None) -> dict:
    """vLLM 0.33's own Triton kernels (benchmarks/vllm_peer.py) on the same inputs, launched as
    vLLM 0.33 launches them, profiled the same way."""
    from benchmarks.vllm_peer import run_vllm_peer
    start = time.perf_counter()
    peer = run_vllm_peer(**args, source=vllm_wheel)
    wall = time.perf_counter() - start
    return _row(shape, dtype, d, "peer", peer.path,
                peer.plan.num_segments if peer.path == "3d" else None,
                [(n, r.profile) for n, r in zip(peer.names, peer.reports)], args, wall)


def run_peer_row(shape: Shape, dtype: str, d: int, args: dict) -> dict:
    """The repository's own Triton stand-in (benchmarks/triton_peer.py, vLLM-style kernels of
    our own; backend "peer-own") on the same inputs, profiled the same way."""
    from benchmarks.triton_peer import NUM_SEGMENTS, run_peer
    start = time.perf_counter()
    peer = run_peer(**args)
    wall = time.perf_counter() - start
    names = ("peer_attention_" + peer.path, "peer_reduce")
    return _row(shape, dtype, d, "peer-own", peer.path,
                NUM_SEGMENTS if peer.path == "3d" else None,
                [(n, r.profile) for n, r in zip(names, peer.reports)], args, wall)


def summary(rows: list[dict], peer_backend: str = "peer") -> list[dict]:
    """Per shape/dtype/head size: rocke's dispatcher choice against `peer_backend`'s ("peer":
    vLLM 0.33's kernels; "peer-own": the repository's stand-in), the ratio of modelled MI300X
    times and whether the goal (ratio <= 0.8) is met."""
    out = []
    keyed = {(r["shape"], r["dtype"], r["head_size"], r["backend"]): r
             for r in rows if "counters" in r}
    for (name, dt, d, backend), r in keyed.items():
        peer = keyed.get((name, dt, d, peer_backend))
        if backend != "auto" or peer is None:
            continue
        ratio = float(r["modelled_us"] / peer["modelled_us"])
        out.append({"shape": name, "dtype": dt, "head_size": d, "rocke_path": r["path"],
                    "rocke_us": r["modelled_us"], "rocke_binding": r["launches"][0]["binding"],
                    "peer_path": peer["path"], "peer_us": peer["modelled_us"],
                    "peer_binding": peer["launches"][0]["binding"], "ratio": round(ratio, 3),
                    "ratio_at_latency": {c: round(r["modelled_us_at_latency"][c]
                                                  / peer["modelled_us_at_latency"][c], 3)
                                         for c in LATENCIES},
                    "goal_met": bool(ratio <= 0.8)})
    return out


def kernel_points(rows: list[dict]) -> list[KernelPoint]:
    """The roofline's points: one per shape/dtype/head size/backend row of `run`."""
    return [KernelPoint(f"{r['shape']} {r['dtype']} d{r['head_size']} {r['backend']}"
                        f"->{r['path']}", r["mfma_flops"],
                        r["counters"]["unique_read_bytes"] + r["counters"]["unique_write_bytes"],
                        r["counters"]["lds_bytes"], r["modelled_us"])
            for r in rows if "counters" in r]


def segments_sweep(shape: Shape, dtype: str, d: int, counts) -> list[dict]:
    """The 3D path at other segment counts (the dispatcher's geometry otherwise): an experiment
    for the "16 vs 64 segments" question. The segment count is a launch argument, not a spec
    field, so this launches the 3D kernel and reduce_segments the way the entry point does."""
    import torch
    from rocke.kernels.gfx942 import attention_launch
    from rocke.kernels.gfx942 import attention_tiled_3d as k3, reduce_segments as kr
    from rocke.runtime import launch
    args = inputs(shape, dtype, d)
    names = ("q", "k", "v", "out", "cu_seqlens_q", "max_seqlen_q", "seqused_k", "max_seqlen_k",
             "softmax_scale", "causal", "window_size", "block_table", "softcap", "q_descale",
             "k_descale", "v_descale")
    problem = au.describe_problem(*(args[n] for n in names))
    spec3, spec_r = au.plan(problem, "3d").specs
    c3, cr = au.compiled(spec3), au.compiled(spec_r)
    rows = []
    for ns in counts:
        hq = problem.num_q_heads
        so = torch.empty(problem.total_q, hq, ns, d, dtype=torch.float32)
        sm = torch.empty(problem.total_q, hq, ns, dtype=torch.float32)
        se = torch.empty(problem.total_q, hq, ns, dtype=torch.float32)
        a3 = k3.kernel_args(spec3, args["q"], args["k"], args["v"], so, sm, se,
                            args["block_table"], args["cu_seqlens_q"], args["seqused_k"],
                            float(args["softmax_scale"]), ns)
        ar = kr.kernel_args(spec_r, so, sm, se, args["out"], ns)
        # the launch's own grids: a GQA group above 16 runs its group_split q-head blocks
        (g3, b3), (gr, br) = attention_launch.launch_geometries(problem, (spec3, spec_r), ns)
        models = [model_time(launch(c, g, b, a, device="emu", profile=True).profile)
                  for c, g, b, a in ((c3, g3, b3, a3), (cr, gr, br, ar))]
        from rocke.kernels.common.attention_reference import ref_paged_attn
        ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"],
                             args["seqused_k"], args["block_table"], args["softmax_scale"])
        rows.append({"segments": ns, "modelled_us": round(sum(m.us for m in models), 2),
                     "attention_3d_us": round(models[0].us, 2),
                     "reduce_us": round(models[1].us, 2),
                     "max_abs_error": float((args["out"].float() - ref).abs().max())})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", choices=list(SHAPES),
                    help="shapes of the default set (default: all of them)")
    ap.add_argument("--grid", choices=["default", "vllm033"], default="default",
                    help="vllm033: the plain cases of vLLM 0.33's unified-attention test grid "
                         "(tests/kernels/vllm_033_grid.py), each at its own dtype and head size "
                         "(--shapes, --dtypes, --head-sizes do not apply)")
    ap.add_argument("--dtypes", nargs="+", default=["f16"], choices=["f16", "bf16"])
    ap.add_argument("--head-sizes", nargs="+", type=int, default=[128], choices=[64, 128, 256])
    ap.add_argument("--backends", nargs="+", choices=list(BACKENDS),
                    help="default: auto 2d 3d, and peer where Triton and a vLLM 0.33 wheel are "
                         "found (a note says why not otherwise); "
                         "rocke's dispatcher (auto), forced 2d / 3d, " + "; ".join(
                        f"{k}: {v}" for k, v in PEERS.items()))
    ap.add_argument("--vllm-wheel", metavar="PATH",
                    help="the vLLM 0.33 wheel (.whl), unpacked wheel or vllm package directory "
                         "the peer's kernels are read from (default: ROCKE_VLLM_WHEEL, an "
                         "installed vllm, /tmp/vllm)")
    ap.add_argument("--json", help="also write every row to this file")
    ap.add_argument("--plot", help="write a roofline picture (PNG) of every row to this file")
    ap.add_argument("--segments", nargs="+", type=int,
                    help="also run the 3D path at these segment counts (decode shape)")
    add_engine_options(ap, "row (shape, dtype, head size, backend)")
    a = ap.parse_args(argv)
    # every flag is checked before any emulation runs
    if a.grid == "vllm033" and a.shapes:
        ap.error("--shapes names shapes of the default set; --grid vllm033 runs its own")
    named_backends = a.backends is not None
    if not named_backends:
        a.backends = ["auto", "2d", "3d", "peer"]
    if "peer" in a.backends:
        from benchmarks.vllm_peer import VllmNotFound, find_vllm
        why_not = None
        try:
            import triton  # noqa: F401
            found = find_vllm(a.vllm_wheel)
        except ImportError as e:
            why_not = (f"Triton is not importable ({e}); install it "
                       "(pip install 'triton>=3.2', the triton extra)")
        except (VllmNotFound, ValueError, OSError) as e:
            why_not = str(e)
        if why_not and named_backends:
            ap.error(f"--backends peer: {why_not}")
        if why_not:     # the default set: run rocke's rows, say why the peer's are missing
            a.backends.remove("peer")
            print(f"note: the peer (vLLM 0.33's kernels) is not run: {why_not}", file=sys.stderr)
    decode = SHAPES["decode"]
    per_segment = sum(q for q, _ in decode.seqs) * decode.hq * max(a.head_sizes)
    for count in a.segments or ():
        if count < 1:
            ap.error(f"--segments: a segment count must be >= 1, got {count}")
        if count * per_segment >= 2 ** 31:     # the 3D kernel's partials, 32-bit indexed
            ap.error(f"--segments: {count} segments of the decode shape's partials "
                     f"({count * per_segment} elements) exceed the kernels' 32-bit indexing; "
                     f"at most {(2 ** 31 - 1) // per_segment}")
    if a.json:
        from rocke.fileio import check_writable
        try:
            check_writable(a.json)
        except OSError as e:
            ap.error(f"--json {a.json}: cannot write it: {e.strerror or e}")
    if a.plot:
        if not a.plot.lower().endswith(".png"):
            ap.error(f"--plot writes a PNG; name the file *.png, not {a.plot!r}")
        if not Path(a.plot).resolve().parent.is_dir():
            ap.error(f"--plot: directory of {a.plot!r} does not exist")
        import matplotlib  # noqa: F401  (optional dependency: fail now, not after the runs)
    engine = engine_of(ap, a)
    print("times are modelled MI300X time (rocke.perf), from exact emulator counters; "
          "emulator wall time is CPU time, not GPU time")
    if "peer" in a.backends:
        print(f"peer: vLLM {found.version}'s Triton unified attention, read from {found.origin} "
              "(compiled for gfx942 by Triton, run in the emulator)")
    rows, bad = [], []
    if a.grid == "vllm033":
        runs = [(shape, shape.dtype, shape.head_size) for shape in vllm033_shapes().values()]
    else:
        runs = [(SHAPES[name], dt, d) for name in (a.shapes or list(SHAPES))
                for dt in a.dtypes for d in a.head_sizes]
    items = [(shape, dt, d, backend, a.vllm_wheel) for shape, dt, d in runs
             for backend in a.backends]
    for (shape, dt, d, backend, _), row in zip(items, run_ordered(row_task, items, engine,
                                                                   "profile")):
        if "not_run" in row:
            print(f"{shape.name} {dt} d{d} {backend}: not run ({row['not_run']})")
            continue
        rows.append(row)
        if not row["max_abs_error"] <= row["atol"]:
            bad.append(f"{shape.name} {dt} d{d} {backend}")
        c = row["counters"]
        seg = f" {row['segments']} segments" if row["segments"] else ""
        per = "; ".join(f"{l['kernel']} {l['modelled_us']} us ({l['binding']}, "
                        f"{l['occupancy']['waves_per_simd']} waves/SIMD)"
                        for l in row["launches"])
        print(f"{shape.name} {dt} d{d} {backend:4s} -> {row['path']}{seg}: modelled "
              f"MI300X {row['modelled_us']} us [{per}] (at a memory round trip of "
              + ", ".join(f"{k} cycles: {v} us" for k, v in
                          row["modelled_us_at_latency"].items())
              + f") | valu {c['valu']} mfma "
              f"{c['mfma']} ds {c['ds']} vmem {c['vmem']} | read "
              f"{c['global_read_bytes']} B write {c['global_write_bytes']} B unique "
              f"{c['unique_read_bytes']}/{c['unique_write_bytes']} B | LDS conflicts "
              f"{c['lds_bank_conflicts']} | max |out - ref| "
              f"{row['max_abs_error']:.1e}"
              + ("" if row["max_abs_error"] <= row["atol"] else
                 f" OUTSIDE the tolerance {row['atol']}")
              + f" (emulated in {row['emulator_wall_s']} s)")
    if a.segments:
        for dt in a.dtypes:
            for d in a.head_sizes:
                for row in segments_sweep(SHAPES["decode"], dt, d, a.segments):
                    rows.append({"shape": "decode", "dtype": dt, "head_size": d, **row})
                    print(f"decode {dt} d{d} 3d {row['segments']} segments: modelled MI300X "
                          f"{row['modelled_us']} us (attention_3d {row['attention_3d_us']} us + "
                          f"reduce_segments {row['reduce_us']} us); max |out - ref| "
                          f"{row['max_abs_error']:.1e}")
    goals = {}
    for peer_backend, what in PEERS.items():
        goal = goals[peer_backend] = summary(rows, peer_backend)
        if not goal:
            continue
        print(f"\nrocke (dispatcher) vs {peer_backend} ({what}), modelled MI300X time (goal: "
              "ratio <= 0.8)")
        print("| shape | dtype | d | rocke path | rocke us | binding | peer path | peer us | "
              "binding | ratio | at 1000/2000/4000 cycles | goal |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for g in goal:
            lat = "/".join(str(v) for v in g["ratio_at_latency"].values())
            print(f"| {g['shape']} | {g['dtype']} | {g['head_size']} | {g['rocke_path']} | "
                  f"{g['rocke_us']} | {g['rocke_binding']} | {g['peer_path']} | {g['peer_us']} | "
                  f"{g['peer_binding']} | {g['ratio']} | {lat} | "
                  f"{'met' if g['goal_met'] else 'MISSED'} |")
        print(f"goal met on {sum(g['goal_met'] for g in goal)} of {len(goal)} shapes")
    if a.json:
        from rocke.fileio import write_output
        write_output(a.json, json.dumps(rows + [{"summary": goals["peer"],
                                                 "summary_peer_own": goals["peer-own"]}],
                                        indent=1).encode())
    if a.plot:
        data = plot(kernel_points(rows), a.plot)
        print(f"roofline ({data['title']}): {len(data['points'])} kernel rows -> {a.plot}"
              + (f"; no MFMA work, not drawn: {', '.join(data['skipped'])}"
                 if data["skipped"] else ""))
    if bad:
        print(f"\n{len(bad)} row(s) outside the attention tolerance of the fp32 reference: "
              + "; ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    # run as the importable module (benchmarks.profile, not __main__), so that row_task and the
    # shapes reach forked processes and Ray workers by reference
    from benchmarks import profile
    raise SystemExit(profile.main())
