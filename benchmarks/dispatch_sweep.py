"""The attention dispatcher against the model: per problem of a grid (batch, query/KV lengths,
heads/GQA, dtype, head size), the 2D path and the 3D path at several segment counts, each as a
modelled MI300X time at three vector-memory round-trip assumptions, and the dispatcher's choice
beside the modelled-fastest option (ALGORITHM.md §10). `--target gfx950` sweeps gfx950's dispatcher
and kernels in the emulator as gfx950 (emu:gfx950), modelled as MI355X time (rocke/arch/costs.py).
"The dispatcher's choice" is the plan launched: on gfx942 the model's table where it holds the
problem (tools/dispatch_tables.py, ALGORITHM.md §10.0), else the rule tables.

Sampling (so each emulation stays small): a problem is a *pattern* of sequences repeated
`batch` times over `num_kv_heads` KV heads. Every KV head and every repeat of the pattern does
the same work, so the emulator runs the pattern once over ONE KV head (its q-blocks, its
segments, and all its query heads: a GQA group above 16 is split over `group_split` q-head
blocks, the sample's grid taken from the real launch's, attention_launch.launch_geometries) and
rocke.perf.model_time repeats those workgroups over the full grid (`grid=`, the
schedule's rounds and tail over the target's CUs: 304, or MI355X's 256) with the full DRAM footprint (`footprint=`: unique
bytes x batch x KV heads). The workgroup multiset is exact; the dispatch order within it is
the sample's repeated, not the hardware's x-fastest order. The dispatcher sees the full problem.

Every time printed is a "modelled MI300X time" ("modelled MI355X time" with --target gfx950) -- a
model, not a measurement, and not GPU time.

The KV cache is q's dtype unless `--kv-dtypes` names quantized ones (gfx942): "fp8" (e4m3fnuz
codes, a per-tensor descale as vLLM's FP8_PER_TENSOR passes it) and "int8_per_token_head" /
"fp8_per_token_head" (codes with fp32 per-(token, head) scale caches), built by
tests/kernels/unified_inputs.quantize_caches; `--block-sizes` the pages (16, 32, 64; vLLM's test
grid uses 16 and 32).

One task per problem through rocke.tasks: serially (the default), in `--jobs N` forked
processes, or on a Ray cluster (`--ray [ADDRESS]`); the rows are printed and written in the
problems' order whatever the engine, so the output is the serial run's byte for byte (progress
on stderr).

Run:  .venv/bin/python benchmarks/dispatch_sweep.py [--dtypes f16 bf16] [--head-sizes 128 64]
      [--heads 32/8 64/8] [--kv 1024 ...] [--kinds decode ...] [--batches 1 8 ...]
      [--kv-dtypes auto fp8 int8_per_token_head fp8_per_token_head] [--block-sizes 16 32 64]
      [--segments 8 16 32 64] [--target gfx942|gfx950] [--json FILE] [--jobs N | --ray [ADDRESS]]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.engine import add_engine_options, engine_of, run_ordered  # noqa: E402,F401
from rocke.arch.costs import costs_for  # noqa: E402
from rocke.kernels.common import attention_unified as au  # noqa: E402
from rocke.perf import model_time  # noqa: E402

LATENCIES = (1000, 2000, 4000)      # the model's least certain constant (rocke/arch/costs.py)
SEGMENT_COUNTS = (8, 16, 32, 64)
NAMES = ("q", "k", "v", "out", "cu_seqlens_q", "max_seqlen_q", "seqused_k", "max_seqlen_k",
         "softmax_scale", "causal", "window_size", "block_table", "softcap", "q_descale",
         "k_descale", "v_descale")


@dataclass(frozen=True)
class Case:
    kind: str
    pattern: tuple              # ((query_len, kv_len), ...), repeated `batch` times
    batch: int
    hq: int
    hk: int
    dtype: str
    d: int
    block_size: int = 64
    target: str = "gfx942"
    window: int = -1            # sliding window (vLLM's window_size[0]); -1: none
    softcap: float = 0.0        # logit softcap; 0: none
    kv: str = "auto"            # the KV cache (KV_DTYPES): "auto" -- q's dtype; else quantized

    @property
    def label(self) -> str:
        pat = "+".join(f"{q}x{k}" for q, k in self.pattern)
        extra = (f" window {self.window}" if self.window >= 0 else "") + \
            (f" softcap {self.softcap:g}" if self.softcap else "") + \
            (f" kv {self.kv}" if self.kv != "auto" else "") + \
            (f" bs{self.block_size}" if self.block_size != 64 else "")
        return (f"{self.kind} [{pat}]x{self.batch} h{self.hq}/{self.hk} {self.dtype} d{self.d}"
                + extra)

    @property
    def features(self) -> dict:
        """The score features' kernel arguments (attention_host.feature_args keywords)."""
        return {**({"window_left": self.window} if self.window >= 0 else {}),
                **({"softcap": self.softcap} if self.softcap else {})}


def dispatcher(target: str):
    """The target's attention dispatcher module (rocke/kernels/<target>/attention_dispatch.py)."""
    from rocke.kernels.common import attention_unified
    return attention_unified.attention_target(target)


@contextmanager
def emulating_as(target: str):
    """The emulator device runs as `target` (ROCKE_DEVICE=emu:<target>) inside the block."""
    old = os.environ.get("ROCKE_DEVICE")
    os.environ["ROCKE_DEVICE"] = "emu" if target == "gfx942" else f"emu:{target}"
    try:
        yield
    finally:
        if old is None:
            del os.environ["ROCKE_DEVICE"]
        else:
            os.environ["ROCKE_DEVICE"] = old


def full_problem(case: Case, sampled: au.UnifiedAttentionProblem) -> au.UnifiedAttentionProblem:
    seqs = case.pattern * case.batch
    return replace(sampled, num_q_heads=case.hq, num_kv_heads=case.hk, num_seqs=len(seqs),
                   total_q=sum(q for q, _ in seqs),
                   num_blocks=sampled.num_blocks * case.batch * case.hk)


_INPUTS: dict = {}
_PROFILES: dict = {}
# the KV caches swept: vLLM's kv_cache_dtype names; "auto" a cache in q's dtype, "fp8" gfx942's
# fp8 (e4m3fnuz) with a per-tensor descale, the per-token-head int8 / fp8 caches with their
# fp32 scale caches (tests/kernels/unified_inputs.quantize_caches builds them)
KV_DTYPES = ("auto", "fp8", "int8_per_token_head", "fp8_per_token_head")
BLOCK_SIZES = (16, 32, 64)      # gfx942's page sizes (attention_tiled_2d.BLOCK_SIZES)
QUANT_NAMES = ("kv_quant_mode", "k_scale_cache", "v_scale_cache")


def sampled_inputs(case: Case):
    key = (case.pattern, case.hq // case.hk, case.dtype, case.d, case.block_size, case.target,
           case.window, case.softcap, case.kv)
    if key not in _INPUTS:
        from tests.kernels.unified_inputs import make_inputs, quantize_caches
        if case.kv != "auto" and case.target != "gfx942":
            raise ValueError(f"kv {case.kv}: the sweep's quantized caches are gfx942's "
                             f"(fp8 e4m3fnuz), not {case.target}'s")
        args = make_inputs(list(case.pattern), hq=case.hq // case.hk, hk=1, d=case.d,
                           bs=case.block_size, dtype=case.dtype, seed=0)
        if case.window >= 0:
            args["window_size"] = (case.window, 0)
        if case.softcap:
            args["softcap"] = case.softcap
        if case.kv != "auto":
            quantize_caches(args, case.kv, seed=0)
        quant = {n: args[n] for n in QUANT_NAMES if n in args}
        _INPUTS[key] = (args, au.describe_problem(*(args[n] for n in NAMES), **quant))
    return _INPUTS[key]


def cache_kwargs(args: dict, sp) -> dict:
    """The kernels' cache keywords of a sampled problem: the per-token-head scale caches, the
    fp8 cache's per-tensor descales, or none (a cache in q's dtype)."""
    if sp.kv_token_scales:
        return {"k_scale_cache": args["k_scale_cache"], "v_scale_cache": args["v_scale_cache"]}
    if sp.kv_dtype is not None:
        return {"k_descale": args["k_descale"], "v_descale": args["v_descale"]}
    return {}


def narrow_3d_specs(p):
    """The 3D specs with the narrow 1-warp x 16-row geometry whatever the dtype (the dispatcher's
    fp16 d128 3D geometry is transposed-x8 L4): the alternative the sweep weighs it against."""
    from rocke.kernels.common.knobs import AttentionKnobs
    from rocke.kernels.gfx942 import attention_dispatch as ad
    from rocke.kernels.gfx942 import attention_policy as policy
    row = policy.NARROW_3D
    tile = policy.default_tile(False, p.block_size, p.head_size)
    geo = ad.Geometry("3d", policy.NARROW, row.name, row.num_warps, row.block_m_per_warp, tile,
                      k_single_buffer=policy.default_k_single_buffer(
                          False, row.num_warps, row.block_m_per_warp, tile))
    return ad.make_specs(p, geo, AttentionKnobs())


# the 2D options in each of the two generic regimes (attention_dispatch.regime_geometry):
# "2d" is the rules' regime, these name one regime whatever the rules or the table say
REGIME_OPTIONS = {"2d:x8t": "transposed_x8", "2d:narrow": "narrow"}


def is_2d(path: str) -> bool:
    return path == "2d" or path in REGIME_OPTIONS


def full_problem_specs(case: Case, sp, path: str):
    """The specs of the geometry the dispatcher picks for the FULL problem (its grid decides,
    e.g. the one-round KV tile of ALGORITHM.md §10.2), built for the sampled one; on gfx950 the
    target dispatcher's own specs (its geometry and atom rules) of the full problem, whose spec
    fields are the sampled one's (only the batch and the heads differ)."""
    from rocke.kernels.common.knobs import AttentionKnobs
    from rocke.kernels.gfx942 import attention_dispatch as ad
    if case.target != "gfx942":
        return dispatcher(case.target).plan(full_problem(case, sp), path, AttentionKnobs()).specs
    full = full_problem(case, sp)
    regime = REGIME_OPTIONS.get(path)
    if path == "2d":    # the rules' regime, not the one the committed table may name
        rules = ad.geometry(full, "2d").regime
        regime = rules if ad.regime_geometry(full, rules) is not None else None
    geo = ad.plan(full, "2d" if is_2d(path) else path, AttentionKnobs(), with_specs=False,
                  regime=regime).geometry
    return ad.make_specs(sp, geo, AttentionKnobs())


def profiles(case: Case, path: str, ns: int = 1):
    """[(LaunchProfile, sampled grid, scale of the grid's repeated axis)] of one option, cached
    per sampled problem (the profile does not depend on batch or KV heads)."""
    import torch
    from rocke.kernels.gfx942 import attention_launch as al
    from rocke.kernels.gfx942 import attention_tiled_2d as k2
    from rocke.kernels.gfx942 import attention_tiled_3d as k3
    from rocke.kernels.gfx942 import reduce_segments as kr
    from rocke.runtime import launch
    args, sp = sampled_inputs(case)
    specs = option_specs(case, path)
    # the grids of the real launch (attention_launch.launch_geometries) over the sampled problem:
    # its one KV head's q-head blocks, all group_split of them for a GQA group above 16
    geometries = al.launch_geometries(sp, specs, None if is_2d(path) else ns)
    key = (case.pattern, sp.num_queries_per_kv, case.dtype, case.d, case.block_size, path, ns,
           tuple(s.kernel_name for s in specs), case.target, case.window, case.softcap, case.kv)
    if key in _PROFILES:
        return _PROFILES[key]
    q, k, v, out = args["q"], args["k"], args["v"], args["out"]
    common = (args["block_table"], args["cu_seqlens_q"], args["seqused_k"],
              float(args["softmax_scale"]))
    cache = cache_kwargs(args, sp)
    if is_2d(path):
        (spec,) = specs
        a = k2.kernel_args(spec, q, k, v, out, *common, **cache, **case.features)
        ((g, b),) = geometries
        runs = [(au.compiled(spec), g, b, a)]
    else:
        spec3, spec_r = specs
        hq = sp.num_q_heads
        so = torch.empty(sp.total_q, hq, ns, case.d, dtype=torch.float32)
        sm = torch.empty(sp.total_q, hq, ns, dtype=torch.float32)
        se = torch.empty(sp.total_q, hq, ns, dtype=torch.float32)
        a3 = k3.kernel_args(spec3, q, k, v, so, sm, se, args["block_table"],
                            args["cu_seqlens_q"], args["seqused_k"],
                            float(args["softmax_scale"]), ns, **cache, **case.features)
        ar = kr.kernel_args(spec_r, so, sm, se, out, ns)
        (g3, b3), (gr, br) = geometries
        runs = [(au.compiled(spec3), g3, b3, a3), (au.compiled(spec_r), gr, br, ar)]
    with emulating_as(case.target):
        _PROFILES[key] = [launch(c, g, b, a, device="emu", profile=True).profile
                          for c, g, b, a in runs]
    return _PROFILES[key]


def option_specs(case: Case, path: str) -> tuple:
    """The specs one option launches for ``case`` (what ``profiles`` emulates)."""
    _, sp = sampled_inputs(case)
    return tuple(narrow_3d_specs(sp) if path == "3d-narrow" else full_problem_specs(case, sp, path))


# what a modelled time depends on besides the launched kernels' IR (and their families' host
# side): the emulator that counted, the model and its constants, the runtime that launched,
# the shared attention host code (arguments, launch grids), this harness and its inputs
MODELLED_SOURCES = ("rocke/emu", "rocke/perf", "rocke/arch", "rocke/runtime",
                    "rocke/kernels/common", "rocke/kernels/gfx942/attention_host.py",
                    "rocke/kernels/gfx942/attention_launch.py", "benchmarks/dispatch_sweep.py",
                    "tests/kernels/unified_inputs.py")


@functools.lru_cache(maxsize=1)
def _modelled_sources() -> str:
    from rocke.compiler.results import sources_digest
    return sources_digest(*(ROOT / p for p in MODELLED_SOURCES))


def modelled_key(case: Case, path: str, ns: int) -> str:
    """The result store's key of one option's modelled times: the launched kernels' IR (and
    their families' modules), the case, the option, and MODELLED_SOURCES' digest -- an edit of
    one kernel family moves only the keys of the options that launch it."""
    import dataclasses
    import importlib
    from rocke.arch import get_target
    from rocke.compiler.results import result_key, sources_digest
    specs = option_specs(case, path)
    kernels = [importlib.import_module(type(s).__module__).build(s) for s in specs]
    ir = "\n".join(k.ir() for k in kernels)
    families = sources_digest(*{importlib.import_module(type(s).__module__).__file__
                                for s in specs})
    return result_key("dispatch_sweep.modelled", ir, get_target(case.target).target_id,
                      {"case": dataclasses.asdict(case), "path": path, "ns": ns,
                       "latencies": list(LATENCIES), "families": families,
                       "sources": _modelled_sources()})


def modelled(case: Case, path: str, ns: int = 1) -> dict[int, float]:
    """{latency cycles: modelled us on the target's GPU} of one option on the full problem
    (launches add); kept in the result store (ROCKE_RESULTS_DIR) under ``modelled_key``, so a
    re-run models only the options whose kernels (or the emulator, model or inputs) moved."""
    from rocke.compiler.results import default_store
    store = default_store()
    key = modelled_key(case, path, ns) if store is not None else None
    found = store.get(key) if store is not None else None
    if isinstance(found, dict) and sorted(found) == sorted(str(c) for c in LATENCIES) \
            and all(isinstance(v, float) for v in found.values()):
        return {c: found[str(c)] for c in LATENCIES}
    out = model_option(case, path, ns)
    if store is not None:
        store.put(key, {str(c): float(v) for c, v in out.items()})
    return out


def model_option(case: Case, path: str, ns: int = 1) -> dict[int, float]:
    """``modelled`` computed: the option's launches emulated (``profiles``) and modelled."""
    reps = case.batch * case.hk
    out = dict.fromkeys(LATENCIES, 0.0)
    for prof in profiles(case, path, ns):
        gx, gy, gz = prof.grid
        full = (gx * gy * gz * reps, 1, 1)      # the sample's workgroups, repeated
        foot = (prof.unique_read_bytes + prof.unique_write_bytes) * reps
        for cycles in LATENCIES:
            m = model_time(prof, costs=replace(costs_for(case.target), memory_latency_cycles=cycles),
                           grid=full, footprint=foot)
            out[cycles] += m.us
    return out


def sweep_case(case: Case, counts=SEGMENT_COUNTS) -> dict:
    ad = dispatcher(case.target)
    _, sp = sampled_inputs(case)
    p = full_problem(case, sp)
    from rocke.kernels.common.knobs import AttentionKnobs
    # the plan the dispatcher launches (on gfx942 it follows the model's table where the class
    # is tabulated, tools/dispatch_tables.py; else the rule tables)
    auto = ad.plan(p, "auto", AttentionKnobs(), with_specs=False)
    path, reason = auto.path, auto.reason
    chosen_ns = ad.plan(p, "3d", AttentionKnobs(), with_specs=False).geometry.num_segments
    options = {"2d": modelled(case, "2d")}
    for ns in sorted(set(counts) | {chosen_ns}):
        options[f"3d/{ns}"] = modelled(case, "3d", ns)
    geo3 = ad.geometry(p, "3d")
    if geo3.regime != "narrow" and case.target == "gfx942":         # weigh the dispatcher's 3D geometry against narrow
        for ns in sorted(set(counts) | {chosen_ns}):
            options[f"3dn/{ns}"] = modelled(case, "3d-narrow", ns)
    choice = "2d" if path == "2d" else f"3d/{auto.geometry.num_segments}"
    if case.target == "gfx942" and path == "2d" and auto.geometry.regime != ad.geometry(p, "2d").regime:
        # the table's regime: the 2D option in it
        choice = next(o for o, r in REGIME_OPTIONS.items() if r == auto.geometry.regime)
        options[choice] = modelled(case, choice)
    best = {c: min(options, key=lambda o: options[o][c]) for c in LATENCIES}
    return {"case": case.label, "kind": case.kind, "choice": choice, "reason": reason,
            "rule_segments": chosen_ns, "options": options, "best": best,
            "choice_over_best": {c: options[choice][c] / options[best[c]][c] for c in LATENCIES}}


DECODE_KV = (1024, 2048, 4096, 8192)
DECODE_BATCH = (1, 2, 4, 8, 16, 32, 128)
PREFILL = (("prefill-mix", ((96, 512), (32, 1024), (1, 700)), (1, 2, 4)),
           ("chunked-prefill", ((128, 2048),), (1, 2)),
           ("long-prefill", ((640, 640),), (1, 2)),
           ("decode-heavy-mix", ((1, 4096),) * 12 + ((64, 1024),), (1, 2)))


def cases(configs, kvs=DECODE_KV, kinds=None, target="gfx942", batches=None,
          kv_dtypes=("auto",), block_sizes=(64,)) -> list[Case]:
    """configs: (dtype, head size, hq, hk) tuples; `batches`: the decode batch sizes (instead of
    DECODE_BATCH), and only these of the prefill patterns' repeats; `kv_dtypes` (KV_DTYPES) and
    `block_sizes`: the caches, each config swept with each."""
    out = []
    for dt, d, hq, hk in configs:
        for cache in kv_dtypes:
            for bs in block_sizes:
                more = dict(target=target, kv=cache, block_size=bs)
                for kv in kvs:
                    out += [Case("decode", ((1, kv),), b, hq, hk, dt, d, **more)
                            for b in (DECODE_BATCH if batches is None else batches)]
                for kind, pattern, prefill_batches in PREFILL:
                    out += [Case(kind, pattern, b, hq, hk, dt, d, **more)
                            for b in prefill_batches]
    return [c for c in out if (kinds is None or c.kind in kinds)
            and (batches is None or c.batch in batches)]


# ---- the engine (rocke.tasks): one task per problem, serially, in processes or on Ray ----

def sweep_task(item) -> dict:
    """One problem's task: sweep_case of (case, segment counts)."""
    case, counts = item
    return sweep_case(case, counts)


def fmt(t: dict[int, float]) -> str:
    return "/".join(f"{t[c]:.1f}" for c in LATENCIES)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", nargs="+", default=["f16", "bf16"], choices=["f16", "bf16"])
    ap.add_argument("--head-sizes", nargs="+", type=int, default=[128, 64], choices=[64, 128])
    ap.add_argument("--heads", nargs="+", default=["32/8", "64/8"],
                    help="query/KV heads, e.g. 32/8 (GQA 4)")
    ap.add_argument("--kv", nargs="+", type=int, default=list(DECODE_KV),
                    help="decode KV lengths")
    ap.add_argument("--kinds", nargs="+", help="only these problem kinds "
                    "(decode, prefill-mix, chunked-prefill, long-prefill, decode-heavy-mix)")
    ap.add_argument("--batches", nargs="+", type=int,
                    help="decode batch sizes (and only these prefill repeats)")
    ap.add_argument("--segments", nargs="+", type=int, default=list(SEGMENT_COUNTS),
                    help="the 3D segment counts weighed (besides the dispatcher's)")
    ap.add_argument("--kv-dtypes", nargs="+", default=["auto"], choices=list(KV_DTYPES),
                    help="the KV caches swept (gfx942): auto (q's dtype), fp8 (per-tensor "
                         "descale), int8_per_token_head, fp8_per_token_head")
    ap.add_argument("--block-sizes", nargs="+", type=int, default=[64], choices=list(BLOCK_SIZES),
                    help="the caches' page sizes swept")
    ap.add_argument("--target", default="gfx942", choices=["gfx942", "gfx950"],
                    help="the dispatcher and kernels swept, and the GPU modelled (MI300X / MI355X)")
    ap.add_argument("--json", help="also write every row to this file")
    add_engine_options(ap)
    a = ap.parse_args(argv)
    if a.target != "gfx942" and a.kv_dtypes != ["auto"]:
        ap.error("--kv-dtypes: the quantized caches are swept on gfx942 only")
    engine = engine_of(ap, a)
    print(f"times: {costs_for(a.target).label} in us at a vector-memory round trip of "
          f"{'/'.join(map(str, LATENCIES))} cycles (a model, not GPU time)")
    configs = []
    for h in a.heads:
        hq, sep, hk = h.partition("/")
        if not (sep and hq.isdigit() and hk.isdigit() and int(hk) and int(hq) % int(hk) == 0):
            ap.error(f"--heads: expected QUERY/KV with KV dividing QUERY, got {h!r}")
        configs += [(dt, d, int(hq), int(hk)) for dt in a.dtypes for d in a.head_sizes]
    rows = []
    todo = cases(configs, a.kv, a.kinds, a.target, a.batches, a.kv_dtypes, a.block_sizes)
    for r in run_ordered(sweep_task, [(c, tuple(a.segments)) for c in todo], engine,
                         "dispatch_sweep"):
        rows.append(r)
        opts = "  ".join(f"{o} {fmt(t)}" for o, t in r["options"].items())
        best = "/".join(r["best"][c] for c in LATENCIES)
        ratio = "/".join(f"{r['choice_over_best'][c]:.2f}" for c in LATENCIES)
        print(f"{r['case']}: dispatcher {r['choice']} | modelled-fastest {best} | "
              f"dispatcher/fastest {ratio} | {opts}", flush=True)
    worst = {c: max((r["choice_over_best"][c], r["case"]) for r in rows) for c in LATENCIES}
    for c in LATENCIES:
        print(f"at {c} cycles: dispatcher within {100 * (worst[c][0] - 1):.1f} % of the "
              f"modelled-fastest option everywhere (worst: {worst[c][1]})")
    if a.json:
        from rocke.fileio import write_output
        write_output(a.json, json.dumps(rows, indent=1).encode())
    return 0


if __name__ == "__main__":
    # run as the importable module (benchmarks.dispatch_sweep, not __main__), so that a task's
    # function and cases reach forked processes and Ray workers by reference
    from benchmarks import dispatch_sweep
    raise SystemExit(dispatch_sweep.main())
