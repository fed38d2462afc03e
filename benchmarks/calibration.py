"""Calibration of rocke's modelled MI300X time against published MI300X figures.

Each anchor runs a stand-in kernel in rocke's emulator with exact counters (on the first rows
of the grid; the model repeats them over the full grid, see rocke.perf.model), models its
MI300X time, and compares it with a published MI300X measurement of the same problem:

    published figure | its source | stand-in kernel | modelled figure | error

The stand-in is never the measured binary (no MI300X here, and most published kernels are not
rocke's). Each anchor says how it matches (MATCHES): "same kind" (the error is the model's),
"different kernel" (same problem, another kernel: counted, flagged) or "rejected" (the
published figure does not time this problem's kernel: printed, not counted). No model constant
was tuned to any anchor: rocke/arch/costs.py says where each constant comes from (the HBM rate
from ROCm's rocprofiler-compute/TransferBench reading on gfx942 MI308XHF, not from anchor 1's
report). Each row also gives its error at 1000 and 4000-cycle memory round trips, the model's
least certain constant.

Usage: python benchmarks/calibration.py [--only NAME]   (about a minute and a half, one core)
Prints one row per anchor, then the same-kind anchors' worst error, and ends with
`calibration: N anchors, max |error| X %` over the counted (not rejected) anchors.
All times are "modelled MI300X time" unless they are the published ones.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocke import emu  # noqa: E402
from rocke.arch.costs import MI300X  # noqa: E402
from rocke.perf import model_time  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "triton"
LATENCIES = (1000, 4000)     # cycles, around the assumed 2000 (rocke/arch/costs.py)


SAME, DIFFERENT, REJECTED = "same kind", "different kernel", "rejected"
MATCHES = {
    SAME: "the stand-in is the same kind of kernel on the same problem: the error is the model's",
    DIFFERENT: "same problem (shape, dtype) but a different kernel: the error mixes the model's "
               "error with the kernels' difference; counted, flagged",
    REJECTED: "the published figure does not measure this problem's kernel: printed, not counted",
}


@dataclass
class Anchor:
    name: str
    published: str          # the published figure, as published
    source: str
    stand_in: str
    unit: str               # "TB/s" or "TFLOPS": how the figure compares
    value: float            # the published figure in `unit`
    note: str               # why the stand-in may differ from the measured kernel
    match: str = SAME       # SAME | DIFFERENT | REJECTED (see MATCHES)


ANCHORS = [
    Anchor("hbm_copy", "4.2 TB/s", "ROCm issue legacy-rocm-build#5070 (MI300X, /opt/rocm/bin/"
           "roofline HBM copy, user report)", "rocke vector_add/f32_v4, n = 2^25 (3 x 128 MiB)",
           "TB/s", 4.2, "roofline's copy is dst[i] = src[i] in f64; the stand-in adds two arrays"),
    Anchor("fa_d128_sdpa", "55.4 TFLOPS", "HazyResearch/HipKittens kernels/attn/gqa/README.md "
           "(MI300X, PyTorch SDPA, B=4 H=32 H_KV=8 N=1024 D=128, bf16, non-causal)",
           "Triton flash_attn_fwd_d128 (f16, BLOCK_M 64, BLOCK_N 32), MHA, same B/H/N/D",
           "TFLOPS", 55.4, "the README's 'PyTorch SDPA' column times test_python.py's "
           "reference_attention: K/V repeat_interleave, Q/K/V cast to fp32, fp32 SDPA, cast back "
           "to bf16 -- several kernels in fp32, not a bf16 flash-attention kernel", REJECTED),
    Anchor("fa_d64_sdpa", "53.0 TFLOPS", "HazyResearch/HipKittens kernels/attn/gqa/README.md "
           "(MI300X, PyTorch SDPA, B=4 H=32 H_KV=8 N=1024 D=64)",
           "Triton flash_attn_fwd_d64 (f16, BLOCK_M 64, BLOCK_N 64), MHA, same B/H/N/D",
           "TFLOPS", 53.0, "as above: an fp32 reference path, not a flash-attention kernel",
           REJECTED),
    Anchor("fa_d128_hk", "69.0 TFLOPS", "HazyResearch/HipKittens kernels/attn/gqa/README.md "
           "(MI300X, HipKittens kernel, B=4 H=32 H_KV=8 N=1024 D=128)",
           "rocke flash_attention/bf16_d128_full (16x16x16 MFMA, 64x32 tiles), same B/H/N/D",
           "TFLOPS", 69.0, "measured kernel: the README's gqa kernel.cpp (16 Q rows a wave, 4 "
           "waves, 64-row KV blocks, 1 wave/SIMD, 256 VGPR + 236 AGPR, register-buffer prefetch, "
           "GQA K/V); the stand-in is rocke's DSL sample with MHA K/V, not that binary", DIFFERENT),
    Anchor("gemm_decode_fp8", "18.08 us", "ROCm/aiter PR #1092 '[MI300X] tune Gemm performance "
           "for llama 70b/405b' (MI300, fp8 e4m3fnuz A/B, bf16 out, m=32 n=1280 k=8192, CK "
           "kernel)", "Triton matmul_fp8e4b8_mfma16 (64x64x64 tiles, 2 stages, f32 out), same "
           "m/n/k", "us", 18.08, "CK's decode GEMM is tuned for small m (split-K style tiles); "
           "the stand-in has 20 workgroups of 64x64 tiles walking all of K, waiting vmcnt(0) "
           "every K step: the modelled time is the stand-in's latency chain, not CK's", DIFFERENT),
]


# ------------------------------------------------------------------------ stand-in launches
def _fixture(name):
    info = json.loads((FIXTURES / f"{name}.json").read_text())
    return info, (FIXTURES / f"{name}.s").read_text()


def _launch_fixture(name, grid, **named):
    info, asm = _fixture(name)
    ordered = [named[a["name"]] for a in info["runtime_args"]]
    ordered += [None] * info["extra_trailing_pointer_args"]
    return emu.launch(asm, info["kernel_symbol"], grid, tuple(info["block"]), ordered,
                      shared_mem=info["shared_mem_bytes"], check=False, profile=True)


def run_hbm_copy():
    from rocke.kernels.registry import get_variant
    from rocke.kernels.samples import vector_add
    from rocke.runtime import launch
    v = get_variant("vector_add/f32_v4")
    n = 1 << 25
    a, b, c = torch.ones(n), torch.ones(n), torch.zeros(n)
    grid, block = vector_add.launch_geometry(v.spec, n=n)
    sample = (2 * 304, 1, 1)          # two workgroups per CU; the model repeats them
    report = launch(v.compile(), sample, block, vector_add.kernel_args(v.spec, a, b, c),
                    device="emu", check=False, profile=True)
    footprint = 3 * n * 4
    return report.profile, {"grid": grid, "footprint": footprint}, \
        lambda us: footprint / (us * 1e-6) / 1e12


def _attention_flops(bh, n, d):
    return 4 * bh * n * n * d


def run_triton_fa(head_dim):
    B, H, N = 4, 32, 1024
    bh = B * H
    q, k, v = (torch.randn(bh, N, head_dim).half() for _ in range(3))
    o = torch.zeros_like(q)
    full = (N // 64, bh, 1)
    report = _launch_fixture(f"flash_attn_fwd_d{head_dim}", (N // 64, 1, 1), q_ptr=q, k_ptr=k,
                             v_ptr=v, out_ptr=o, stride_bh=N * head_dim, stride_seq=head_dim,
                             seq_len=N, sm_scale=head_dim ** -0.5)
    return report.profile, {"grid": full, "footprint": 4 * bh * N * head_dim * 2}, \
        lambda us: _attention_flops(bh, N, head_dim) / (us * 1e-6) / 1e12


def run_rocke_fa():
    from rocke.kernels.registry import get_variant
    from rocke.kernels.samples import flash_attention
    from rocke.runtime import launch
    v = get_variant("flash_attention/bf16_d128_full")
    B, H, N, D = 4, 32, 1024, 128
    q, k, vv = (torch.randn(B, H, N, D).to(torch.bfloat16) for _ in range(3))
    o = torch.zeros_like(q)
    grid, block = flash_attention.launch_geometry(v.spec, B, H, N)
    report = launch(v.compile(), (grid[0], 1, 1), block,
                    flash_attention.kernel_args(v.spec, q, k, vv, o), device="emu", check=False,
                    profile=True)
    return report.profile, {"grid": grid, "footprint": 4 * B * H * N * D * 2}, \
        lambda us: _attention_flops(B * H, N, D) / (us * 1e-6) / 1e12


def run_gemm_decode():
    M, N, K = 32, 1280, 8192
    a = torch.randn(M, K).to(torch.float8_e4m3fnuz)
    b = torch.randn(K, N).to(torch.float8_e4m3fnuz)
    c = torch.zeros(M, N)
    grid = (1, N // 64, 1)
    report = _launch_fixture("matmul_fp8e4b8_mfma16", grid, a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N,
                             K=K, stride_am=K, stride_bk=N, stride_cm=N)
    return report.profile, {}, lambda us: us


RUNNERS = {"gemm_decode_fp8": run_gemm_decode, "hbm_copy": run_hbm_copy, "fa_d128_sdpa": lambda: run_triton_fa(128),
           "fa_d64_sdpa": lambda: run_triton_fa(64), "fa_d128_hk": run_rocke_fa}


def _error(anchor: Anchor, figure: float) -> float:
    """The error in time: the modelled time against the time the published figure implies."""
    return figure / anchor.value - 1.0 if anchor.unit == "us" else anchor.value / figure - 1.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=sorted(RUNNERS), action="append")
    args = parser.parse_args(argv)
    rows = []
    for anchor in ANCHORS:
        if args.only and anchor.name not in args.only:
            continue
        start = time.perf_counter()
        profile, kwargs, to_figure = RUNNERS[anchor.name]()
        modelled = model_time(profile, **kwargs)
        figure = to_figure(modelled.us)
        # the least certain constant (an assumption, rocke/arch/costs.py): the error at other
        # vector-memory round trips shows how much an anchor depends on it
        at_latency = {c: _error(anchor, to_figure(model_time(
            profile, costs=replace(MI300X, memory_latency_cycles=c), **kwargs).us))
            for c in LATENCIES}
        rows.append((anchor, modelled, figure, _error(anchor, figure), at_latency,
                     time.perf_counter() - start))
    for anchor, modelled, figure, error, at_latency, wall in rows:
        print(f"{anchor.name} [{anchor.match}]: published {anchor.published} [{anchor.source}] | "
              f"stand-in {anchor.stand_in} | modelled MI300X {figure:.2f} {anchor.unit} "
              f"(modelled MI300X time {modelled.us:.1f} us, bound by {modelled.binding}) | error "
              f"{error * 100:+.1f} % (at a memory round trip of "
              + ", ".join(f"{c} cycles: {e * 100:+.1f} %" for c, e in at_latency.items())
              + f") | note: {anchor.note} (emulated in {wall:.0f} s)")
    for match, meaning in MATCHES.items():
        print(f"[{match}]: {meaning}")
    rejected = [r for r in rows if r[0].match == REJECTED]
    if rejected:
        print("not counted (rejected): " + ", ".join(
            f"{a.name} {e * 100:+.1f} %" for a, _, _, e, _, _ in rejected))
    same = [abs(e) for a, _, _, e, _, _ in rows if a.match == SAME]
    print(f"same-kind anchors only: {len(same)}, max |error| "
          f"{max(same, default=math.nan) * 100:.1f} %")
    counted = [abs(e) for a, _, _, e, _, _ in rows if a.match != REJECTED]
    print(f"calibration: {len(counted)} anchors, max |error| "
          f"{max(counted, default=math.nan) * 100:.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
