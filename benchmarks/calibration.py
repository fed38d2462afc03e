"""Calibration of rocke's modelled MI300X time against published MI300X figures.

Each anchor runs a kernel in rocke's emulator with exact counters (on a sample of the grid;
the model repeats the sampled workgroups over the full grid, see rocke.perf.model), models its
MI300X time, and compares it with a published MI300X measurement:

    published figure | its source | kernel run here | modelled figure | error

How each anchor matches the measurement (MATCHES): "same binary" (AMD AITER's public gfx942
code object, the very kernel the figure times, run here with our own kernarg packing), "same
kind" (a kernel of the same kind on the same problem), both counted; "different kernel" (same
problem, another kernel: printed, not counted, because its error is the kernels' difference
more than the model's) and "rejected" (the figure does not time this problem's kernel).

Fitting: no model constant is fitted to any anchor (rocke/arch/costs.py gives each constant's
source); every counted anchor is held out, and the held-out line says so. Each row also gives
its error at 1000 and 4000-cycle memory round trips, the model's least certain constant.

AITER anchors need a local checkout of github.com/ROCm/aiter (only its hsa/gfx942/fmha_v3_fwd
code objects are read; nothing of it is copied into this repository): `--aiter-dir PATH`.
Without it those anchors are listed as "not run" and not counted. Each emulates one workgroup
(all workgroups of these launches do the same work: non-causal, or causal with AITER's
head+tail tile pairing) and checks its output rows against torch's SDPA before modelling.

`--target gfx950` calibrates the MI355X record (rocke/arch/costs.py) on published MI355X / MI350X
figures instead (ANCHORS_GFX950): AITER's own MI355X column of the same README table (its
hsa/gfx950/fmha_v3_fwd code objects, emulated as gfx950 with the LDS race checker on; a race it
finds is printed and the row modelled from a run with the checker off) and an
MI350X HBM copy. A gfx950 code object is disassembled by an llvm-objdump of LLVM 20 or newer, or
else by a shared LLVM library of LLVM 20 or newer whose listing is verified byte for byte by
re-assembly (rocke/llvm_disasm.py; Debian's libllvm22 or rustc's libLLVM serve); without
either the AITER gfx950 anchors are listed as "not run" with that reason.

Calibration and test (issue 41): AITER's README table has 94 MI300X rows; the nine of AITER_ROWS
*calibrate* (the model's form was chosen while looking at them), the other 85 only *test* (never
used to choose or fit anything; `aiter_test_rows`). On gfx950 the row MI355X's loaded clock is
fitted to calibrates too (84 test). Each anchor carries its `role`; the two sets print separate
summary lines, and no test row enters the calibration line.

Usage: python benchmarks/calibration.py [--target gfx942|gfx950] [--aiter-dir PATH] [--only NAME]
[--set calibration|test|all] [--test-rows N] (minutes, one core; the test rows' emulations are
the long part: `--test-rows N` runs N of them evenly spaced). Prints one row per anchor, then
the counted and held-out anchors' worst errors, and ends with two lines:
`calibration: N anchors, max |error| X %, mean |error| .., signed mean .., K of N too fast`
over the counted calibration anchors, and `test: ...` over the test rows (with whether the
goal, max |error| <= 15 % and signed mean within +-5 %, is met).
All times are "modelled MI300X time" ("modelled MI355X time" with --target gfx950) unless they
are the published ones.
"""
from __future__ import annotations

import argparse
import json
import math
import struct
import sys
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocke import emu  # noqa: E402
from rocke.arch.costs import costs_for  # noqa: E402
from rocke.perf import model_time  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "triton"
LATENCIES = (1000, 4000)     # cycles, around the assumed 2000 (rocke/arch/costs.py)


BINARY, SAME, DIFFERENT, REJECTED = "same binary", "same kind", "different kernel", "rejected"
MATCHES = {
    BINARY: "the published figure times this very code object, run here: the error is the "
            "model's; counted",
    SAME: "the stand-in is the same kind of kernel on the same problem: the error is the "
          "model's; counted",
    DIFFERENT: "same problem (shape, dtype) but a different kernel: the error mixes the model's "
               "error with the kernels' difference; printed, not counted",
    REJECTED: "the published figure does not measure this problem's kernel: printed, not counted",
}
COUNTED = (BINARY, SAME)


@dataclass
class Anchor:
    name: str
    published: str          # the published figure, as published
    source: str
    stand_in: str
    unit: str               # "TB/s" or "TFLOPS": how the figure compares
    value: float            # the published figure in `unit`
    note: str               # why the stand-in may differ from the measured kernel
    match: str = SAME       # BINARY | SAME | DIFFERENT | REJECTED (see MATCHES)
    fitted: tuple = field(default_factory=tuple)   # model constants fitted to this anchor
    origin: str = ""        # who measured it (anchors of one origin are not independent)
    role: str = "calibration"   # CALIBRATION | TEST (ROLES): whether it shaped the model


ANCHORS = [
    Anchor("hbm_copy", "4.2 TB/s", "ROCm issue legacy-rocm-build#5070 (MI300X, /opt/rocm/bin/"
           "roofline HBM copy, user report)", "rocke vector_add/f32_v4, n = 2^25 (3 x 128 MiB)",
           "TB/s", 4.2, "roofline's copy is dst[i] = src[i] in f64; the stand-in adds two arrays",
           origin="a ROCm user's report (ROCm/legacy-rocm-build#5070)"),
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


# AITER's published MI300X FMHA forward figures: ROCm/aiter op_tests/cpp/mha/README.md, section
# "the asm kernel performance of the attention forwards and attention backwards" (added by
# ROCm/aiter PR #1270 "add the asm kernel performance of fwd and bwd", 2025-10-31; read at
# aiter commit e4048607a535): bf16, BSHD, batch mode, d128, FWD TFLOPS, MI300X column, measured
# with op_tests/cpp/mha/benchmark_mha_fwd (-fwd_v3=1; its default v3_bf16_cvt=1 is RTNA, so
# the fwd_hd128_bf16[_causal]_rtna code objects). Its TFLOPS are 4 B H Sq Sk D / time, halved
# for a causal mask (benchmark_mha_fwd.cpp).
AITER_SOURCE = ("ROCm/aiter op_tests/cpp/mha/README.md, asm kernel performance table (PR #1270), "
                "FWD TFLOPS MI300X, bf16 BSHD batch d128")
AITER_ROWS = [   # batch, q heads, kv heads, seqlen (q = kv), causal, MI300X FWD TFLOPS
    (1, 32, 8, 1024, False, 338.07), (8, 64, 8, 1024, False, 466.21),
    (4, 32, 8, 4096, False, 577.16), (8, 64, 8, 4096, False, 578.99),
    (1, 64, 8, 8192, False, 591.37),
    (1, 32, 8, 1024, True, 130.62), (8, 64, 8, 1024, True, 321.865),
    (4, 32, 8, 4096, True, 486.73), (8, 64, 8, 4096, True, 509.255),
]


def _aiter_name(b, h, hk, s, causal, target="gfx942"):
    gpu = "" if target == "gfx942" else "_mi355x"
    return f"aiter_fwd_b{b}h{h}kv{hk}s{s}{'_causal' if causal else ''}{gpu}"


# The same README table's MI355X column (same rows; bf16 BSHD batch d128 FWD TFLOPS), measured
# with AITER's gfx950 code objects: hsa/gfx950/fmha_v3_fwd/fwd_hd128_bf16[_causal].co (gfx950's
# fmha_fwd.csv lists only bf16_cvt 0 for them, so no _rtna variant)
AITER_SOURCE_MI355X = AITER_SOURCE.replace("FWD TFLOPS MI300X", "FWD TFLOPS MI355X")
AITER_ROWS_MI355X = [   # batch, q heads, kv heads, seqlen (q = kv), causal, MI355X FWD TFLOPS
    (1, 32, 8, 1024, False, 613.48), (8, 64, 8, 1024, False, 979.93),
    (4, 32, 8, 4096, False, 1343.02), (8, 64, 8, 4096, False, 1361.66),
    (1, 64, 8, 8192, False, 1412.91),
    (1, 32, 8, 1024, True, 233.12), (8, 64, 8, 1024, True, 626.57),
    (4, 32, 8, 4096, True, 1130.115), (8, 64, 8, 4096, True, 1190.295),
]


# The whole table the rows above come from (all 94 rows of the README's asm-kernel table, bf16
# BSHD batch d128, seqlen_q = seqlen_kv; FWD TFLOPS, MI300X and MI355X columns), transcribed
# from the README at aiter commit e4048607a535. Rows of AITER_ROWS / AITER_ROWS_MI355X (and
# the MI355X row its loaded clock is fitted to, TEST_EXCLUDED_GFX950) calibrate; every other
# row only tests (ROLES below).
AITER_TABLE = [   # batch, q heads, kv heads, seqlen, causal, MI300X FWD TFLOPS, MI355X FWD TFLOPS
    (1, 32, 8, 1024, False, 338.07, 613.48), (1, 32, 8, 2048, False, 513.45, 1194.46),
    (1, 32, 8, 4096, False, 527.73, 1177.11), (1, 32, 8, 8192, False, 558.17, 1396),
    (1, 32, 8, 10240, False, 549.73, 1421.77), (4, 32, 8, 1024, False, 458.41, 956.51),
    (4, 32, 8, 2048, False, 504.8, 1092.82), (4, 32, 8, 4096, False, 577.16, 1343.02),
    (4, 32, 8, 8192, False, 574.62, 1407.46), (4, 32, 8, 10240, False, 584.66, 1414.26),
    (8, 32, 8, 1024, False, 459.43, 891.28), (8, 32, 8, 2048, False, 543.77, 1175.5),
    (8, 32, 8, 4096, False, 567.82, 1351.12), (8, 32, 8, 8192, False, 585.29, 1406.47),
    (8, 32, 8, 10240, False, 577.5, 1366.47), (1, 64, 8, 1024, False, 418.36, 1003.73),
    (1, 64, 8, 2048, False, 485.45, 1018.07), (1, 64, 8, 4096, False, 546.34, 1305.83),
    (1, 64, 8, 8192, False, 591.37, 1412.91), (1, 64, 8, 10240, False, 572.09, 1417.43),
    (4, 64, 8, 1024, False, 440.07, 914.7), (4, 64, 8, 2048, False, 554.8, 1201.6),
    (4, 64, 8, 4096, False, 573.6, 1360.79), (4, 64, 8, 8192, False, 592.16, 1407.58),
    (4, 64, 8, 10240, False, 578.93, 1358.41), (8, 64, 8, 1024, False, 466.21, 979.93),
    (8, 64, 8, 2048, False, 556.35, 1250.96), (8, 64, 8, 4096, False, 578.99, 1361.66),
    (8, 64, 8, 8192, False, 577.45, 1322.77), (8, 64, 8, 10240, False, 571.39, 1326.91),
    (1, 64, 4, 1024, False, 383.85, 1017.04), (1, 64, 4, 2048, False, 506.89, 1077.21),
    (1, 64, 4, 4096, False, 549.2, 1299.05), (1, 64, 4, 8192, False, 591.77, 1406.35),
    (1, 64, 4, 10240, False, 571.59, 1429.39), (4, 64, 4, 1024, False, 460.34, 923.01),
    (4, 64, 4, 2048, False, 556.35, 1224.58), (4, 64, 4, 4096, False, 575.69, 1360.36),
    (4, 64, 4, 8192, False, 590.93, 1411.19), (4, 64, 4, 10240, False, 582.64, 1356.52),
    (8, 64, 4, 1024, False, 497.15, 1016.32), (8, 64, 4, 2048, False, 556.22, 1262.85),
    (8, 64, 4, 4096, False, 581.34, 1362.68), (8, 64, 4, 8192, False, 583.23, 1324),
    (8, 64, 4, 10240, False, 566.17, 1325.23), (1, 64, 8, 16384, False, 547.78, 1437.62),
    (1, 64, 4, 16384, False, 549.09, 1432.94), (1, 32, 8, 1024, True, 130.62, 233.12),
    (1, 32, 8, 2048, True, 255.105, 577.28), (1, 32, 8, 4096, True, 467.805, 949.325),
    (1, 32, 8, 8192, True, 522.68, 1247.73), (1, 32, 8, 10240, True, 440.12, 1200.645),
    (4, 32, 8, 1024, True, 334.005, 720.995), (4, 32, 8, 2048, True, 419.435, 809.835),
    (4, 32, 8, 4096, True, 486.73, 1130.115), (4, 32, 8, 8192, True, 547.09, 1318.92),
    (4, 32, 8, 10240, True, 527.705, 1342.995), (8, 32, 8, 1024, True, 311.385, 623.93),
    (8, 32, 8, 2048, True, 412.99, 894.45), (8, 32, 8, 4096, True, 513.1, 1166.875),
    (8, 32, 8, 8192, True, 537.36, 1316.805), (8, 32, 8, 10240, True, 556.045, 1334.865),
    (1, 64, 8, 1024, True, 228.54, 432.565), (1, 64, 8, 2048, True, 392.425, 936.435),
    (1, 64, 8, 4096, True, 474.385, 1046.085), (1, 64, 8, 8192, True, 518.29, 1300.105),
    (1, 64, 8, 10240, True, 510.895, 1338.005), (4, 64, 8, 1024, True, 326.51, 638.705),
    (4, 64, 8, 2048, True, 425.735, 899.845), (4, 64, 8, 4096, True, 513.79, 1174.92),
    (4, 64, 8, 8192, True, 540.515, 1319.225), (4, 64, 8, 10240, True, 557.475, 1337.965),
    (8, 64, 8, 1024, True, 321.865, 626.57), (8, 64, 8, 2048, True, 452.03, 963.165),
    (8, 64, 8, 4096, True, 509.255, 1190.295), (8, 64, 8, 8192, True, 550.67, 1311.955),
    (8, 64, 8, 10240, True, 547.05, 1313.695), (1, 64, 4, 1024, True, 229.09, 421.615),
    (1, 64, 4, 2048, True, 407.525, 949.635), (1, 64, 4, 4096, True, 476.26, 1058.9),
    (1, 64, 4, 8192, True, 519.32, 1318.15), (1, 64, 4, 10240, True, 515.275, 1348.155),
    (4, 64, 4, 1024, True, 314.82, 661.045), (4, 64, 4, 2048, True, 426.77, 896.095),
    (4, 64, 4, 4096, True, 524.585, 1182.87), (4, 64, 4, 8192, True, 540.935, 1324.275),
    (4, 64, 4, 10240, True, 560.63, 1346.46), (8, 64, 4, 1024, True, 348.76, 663.48),
    (8, 64, 4, 2048, True, 461.89, 983.355), (8, 64, 4, 4096, True, 513.795, 1196.675),
    (8, 64, 4, 8192, True, 552.78, 1318.92), (8, 64, 4, 10240, True, 548.65, 1313.945),
    (1, 64, 8, 16384, True, 541.55, 1392.485), (1, 64, 4, 16384, True, 544.1, 1398.14),
]

# The calibration / test split (issue 41). A *calibration* figure was seen while the model's
# form was chosen, or has a constant fitted to it: its error says how well the model fits what
# shaped it. A *test* figure was never used to choose or fit anything: its error says how well
# the model predicts. No test row may feed calibration (tests/perf/test_calibration.py).
CALIBRATION, TEST = "calibration", "test"
ROLES = {
    CALIBRATION: "seen when the model's form was chosen (the per-wave timeline, the loaded "
                 "clock, the DRAM queue were each motivated by these rows) or fitted to: its "
                 "error measures the fit",
    TEST: "never used to choose or fit anything in the model: its error measures prediction",
}
# goal on the test set (issue 41): max |error| <= 15 %, signed mean within +-5 %
TEST_GOAL_MAX, TEST_GOAL_MEAN = 0.15, 0.05
# MI355X's loaded clock is fitted to this row of the MI355X column (rocke/arch/costs.py
# [AITER355]: the best figure, b1 h32/8 s10240 non-causal), so it calibrates on gfx950
GFX950_FITTED_ROW = (1, 32, 8, 10240, False)


def aiter_test_rows(target: str = "gfx942") -> list:
    """The table's rows that only test on `target`'s column: every row not in its calibration
    rows (nor, on gfx950, the row its loaded clock is fitted to)."""
    column = 5 if target == "gfx942" else 6
    calibrating = {r[:5] for r in (AITER_ROWS if target == "gfx942" else AITER_ROWS_MI355X)}
    if target != "gfx942":
        calibrating.add(GFX950_FITTED_ROW)
    return [r[:5] + (r[column],) for r in AITER_TABLE if r[:5] not in calibrating]


def aiter_calibration_rows(target: str = "gfx942") -> list:
    """The table's rows that calibrate on `target`'s column (as ANCHORS lists them)."""
    rows = list(AITER_ROWS if target == "gfx942" else AITER_ROWS_MI355X)
    if target != "gfx942":
        rows += [r[:5] + (r[6],) for r in AITER_TABLE if r[:5] == GFX950_FITTED_ROW]
    return rows


# the output rounding modes of AITER's gfx942 bf16 fwd v3 code objects (fmha_fwd.csv's bf16_cvt:
# round to nearest even, to nearest with ties away from zero, toward zero); the README's MI300X
# column times rtna (AITER_ROUNDING)
AITER_ROUNDINGS = ("rtne", "rtna", "rtz")
AITER_ROUNDING = "rtna"


def aiter_code_object(target: str, causal: bool, rounding: str = AITER_ROUNDING) -> str:
    """The AITER fwd v3 code object a row of `target`'s column times (gfx942: in output rounding
    mode ``rounding``), relative to the checkout."""
    mask = "_causal" if causal else ""
    if target == "gfx942":
        if rounding not in AITER_ROUNDINGS:
            raise ValueError(f"rounding: one of {', '.join(AITER_ROUNDINGS)}, got {rounding!r}")
        return f"{AITER_FWD_DIR}/fwd_hd128_bf16{mask}_{rounding}.co"
    return f"hsa/{target}/fmha_v3_fwd/fwd_hd128_bf16{mask}.co"


def _aiter_anchor(b, h, hk, s, causal, tflops, target="gfx942", role="calibration", fitted=()):
    co = aiter_code_object(target, causal)
    source = AITER_SOURCE if target == "gfx942" else AITER_SOURCE_MI355X
    return Anchor(_aiter_name(b, h, hk, s, causal, target), f"{tflops} TFLOPS",
                  f"{source}, B={b} H={h} H_KV={hk} S={s} {'causal' if causal else 'non-causal'}",
                  f"AITER {co}, one workgroup emulated of "
                  f"{aiter_grid(b, h, s, causal)}", "TFLOPS", tflops,
                  "the measured binary itself; our kernarg packing (AITER's fmha_fwd_v3_args "
                  "layout) and LSE off", BINARY, origin="AMD's AITER team (ROCm/aiter README)",
                  role=role, fitted=tuple(fitted))


def aiter_grid(b, h, s, causal):
    """AITER's launch grid for the fwd v3 kernel (csrc/cpp_itfs/mha_fwd.cu get_grid_dim): 256
    query rows a workgroup; a causal launch pairs the head and tail tiles in one workgroup."""
    tiles = -(-s // 256)
    return (-(-tiles // 2) if causal else tiles, h, b)


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


def run_hbm_copy(target="gfx942"):
    from rocke.arch import get_target
    from rocke.kernels.registry import get_variant
    from rocke.kernels.samples import vector_add
    from rocke.runtime import launch

    from benchmarks.dispatch_sweep import emulating_as
    v = get_variant("vector_add/f32_v4")
    n = 1 << 25
    a, b, c = torch.ones(n), torch.ones(n), torch.zeros(n)
    grid, block = vector_add.launch_geometry(v.spec, n=n)
    sample = (2 * get_target(target).cu_count, 1, 1)   # two workgroups per CU; the model repeats them
    if target == "gfx942":
        compiled = v.compile()
    else:       # the same kernel built for the target
        from rocke.compiler import compile_ir
        k = vector_add.build(v.spec, target=target)
        compiled = compile_ir(k.ir(), name=k.name, target=get_target(target).target_id)
    with emulating_as(target):
        report = launch(compiled, sample, block, vector_add.kernel_args(v.spec, a, b, c),
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


# ------------------------------------------------------------------------ AITER's FMHA fwd v3
AITER_FWD_DIR = Path("hsa/gfx942/fmha_v3_fwd/MI300")
AITER_FWD_OPT = 5       # mha_fwd.cu init_fmha_fwd_v3_args: tune_opt 5 (heads a multiple of 8,
                        # seqlen <= 16K, hd128)


class NotRun(Exception):
    """An anchor that cannot run here (its inputs are missing): listed, not counted."""


def aiter_fwd_values(q, k, v, o, lse, scale: float) -> dict:
    """The fwd v3 kernel's argument values by the names its code object's metadata gives them
    (AITER's fmha_fwd_v3_args, csrc/include/mha_fwd.h; values as mha_fwd.cu's
    init_fmha_fwd_v3_args sets them for bf16 BSHD batch mode): strides in bytes, `Ts` the
    stride of one 256-row query tile, pointers as addresses, `scalar` as float bits."""
    b, s, h, d = q.shape
    hk = k.shape[2]
    e = q.element_size()
    return {"R": o.data_ptr(), "Q": q.data_ptr(), "K": k.data_ptr(), "V": v.data_ptr(),
            "LSE": lse.data_ptr(), "scalar": struct.unpack("<I", struct.pack("<f", scale))[0],
            "seq_len": s, "Seqs": h * d * e, "Ts": 256 * h * d * e, "Hs": d * e,
            "Bs": s * h * d * e, "gqa": h // hk, "k_Seqs": hk * d * e, "k_Hs": d * e,
            "k_Bs": s * hk * d * e, "msk_opt": AITER_FWD_OPT, "lse": 0, "kv_seq_len": s,
            "qk_head_dim": d, "v_head_dim": d, "q_head_num": h, "v_Seqs": hk * d * e,
            "v_Hs": d * e, "v_Bs": s * hk * d * e, "r_Seqs": h * d * e, "r_Hs": d * e,
            "r_Bs": s * h * d * e, "ptr_qseq": 0, "ptr_kseq": 0, "lse_Hs": s * 4,
            "ptr_qseq_padding": 0, "ptr_kseq_padding": 0}


def pack_kernarg(metadata_args: list, size: int, values: dict) -> bytes:
    """The kernarg segment: each named argument of the metadata at its offset (8-byte pointers,
    4-byte scalars), the `pad` fields zero. An argument the values do not name, or a value
    the metadata has no argument for, is an error: a changed ABI must not run silently."""
    named = {a[".name"]: a for a in metadata_args if a.get(".name") != "pad"}
    if set(named) != set(values):
        raise ValueError(f"kernel arguments and values differ: metadata only "
                         f"{sorted(set(named) - set(values))}, values only "
                         f"{sorted(set(values) - set(named))}")
    buf = bytearray(size)
    for name, a in named.items():
        fmt = {8: "<Q", 4: "<I"}.get(a[".size"])
        if fmt is None or a[".offset"] + a[".size"] > size:
            raise ValueError(f"kernel argument {name!r}: size {a['.size']} at offset "
                             f"{a['.offset']} does not fit a {size}-byte segment of 4/8-byte fields")
        struct.pack_into(fmt, buf, a[".offset"], values[name])
    return bytes(buf)


_AITER_PROFILES: dict = {}


def aiter_inputs(s, h, h_kv, d=128):
    """The batch-1 bf16 [1, S, H, D] q and [1, S, H_kv, D] k, v every AITER row runs on (seed 0)."""
    torch.manual_seed(0)
    q = torch.randn(1, s, h, d).to(torch.bfloat16)
    k, v = (torch.randn(1, s, h_kv, d).to(torch.bfloat16) for _ in range(2))
    return q, k, v


def aiter_tiles(s, causal) -> list:
    """The 256-row query tiles workgroup (0, 0, 0) computes: tile 0 and, causal, the last."""
    return [0, s // 256 - 1] if causal else [0]


def launch_aiter_fwd(aiter_dir, q, k, v, causal, target="gfx942", rounding=AITER_ROUNDING,
                     profile=True):
    """Workgroup (0, 0, 0) of AITER's fwd v3 code object on [1, S, H, D] inputs, with our
    kernarg packing (LSE off): (output, the emulator's report). NotRun when the checkout, the
    code object or a disassembler for it is missing."""
    if aiter_dir is None:
        raise NotRun("not run: pass --aiter-dir PATH (a checkout of github.com/ROCm/aiter)")
    co = Path(aiter_dir) / aiter_code_object(target, causal, rounding)
    if not co.is_file():
        raise NotRun(f"not run: {co} is missing (is --aiter-dir an AITER checkout?)")
    from rocke.emu.codeobject import cannot_disassemble, code_object_metadata, disassembler
    if disassembler(target) is None:
        raise NotRun(f"not run: {cannot_disassemble(target)}")
    meta = code_object_metadata(str(co))["amdhsa.kernels"][0]
    h, s, d = q.shape[2], q.shape[1], q.shape[3]
    o, lse = torch.zeros_like(q), torch.zeros(1, h, s)
    kernarg = pack_kernarg(meta[".args"], meta[".kernarg_segment_size"],
                           aiter_fwd_values(q, k, v, o, lse, d ** -0.5))
    tensors = {"R": o, "Q": q, "K": k, "V": v, "LSE": lse}
    args = [tensors.get(a[".name"]) if a[".value_kind"] == "global_buffer" else 0
            for a in meta[".args"]]
    launch = partial(emu.launch, str(co), meta[".name"], (1, 1, 1),
                     tuple(meta[".reqd_workgroup_size"]), args, kernarg=kernarg, profile=profile,
                     target=target)
    if target == "gfx942":
        return o, launch(check=False)
    return o, checked_launch(launch, o, f"AITER {co.stem} at seqlen {s}")


def _aiter_profile(aiter_dir, s, causal, h, h_kv, target="gfx942"):
    """Emulate workgroup (0, 0, 0) of the fwd v3 kernel on a batch-1 problem of the row's heads
    and seqlen (the row's strides; every workgroup of the row does the same work, so the batch
    only repeats it); check its output rows against SDPA."""
    key = (s, causal, h, h_kv, target)
    if key in _AITER_PROFILES:
        return _AITER_PROFILES[key]
    q, k, v = aiter_inputs(s, h, h_kv)
    o, report = launch_aiter_fwd(aiter_dir, q, k, v, causal, target)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q[:, :, :1].transpose(1, 2).float(), k[:, :, :1].transpose(1, 2).float(),
        v[:, :, :1].transpose(1, 2).float(), is_causal=causal).transpose(1, 2)
    err = max(float((o[:, t * 256:(t + 1) * 256, :1].float()
                     - ref[:, t * 256:(t + 1) * 256]).abs().max()) for t in aiter_tiles(s, causal))
    if not err < 0.02:
        raise RuntimeError(f"AITER {aiter_code_object(target, causal)} at seqlen {s}: output "
                           f"differs from torch SDPA by {err} (kernarg packing wrong?)")
    _AITER_PROFILES[key] = report.profile
    return report.profile


def checked_launch(launch, output, what):
    """The launch with the LDS race checker on. A race it finds is printed (it is a finding
    about the binary, not a failure to run it) and the launch repeated with the checker off on
    a cleared output, so the row is still modelled; the printed line says so."""
    from rocke.emu.errors import LdsRace
    try:
        return launch(check=True)
    except LdsRace as race:
        print(f"{what}: the LDS race checker stops it: {race}; modelled from a run with the "
              f"checker off")
        output.zero_()
        return launch(check=False)


def run_aiter_fwd(aiter_dir, b, h, hk, s, causal, target="gfx942"):
    profile = _aiter_profile(aiter_dir, s, causal, h, hk, target)
    d = 128
    footprint = 2 * b * s * h * d * 2 + 2 * b * s * hk * d * 2      # Q, O; K, V (bf16)
    flops = 4 * b * h * s * s * d // (2 if causal else 1)
    return profile, {"grid": aiter_grid(b, h, s, causal), "footprint": footprint}, \
        lambda us: flops / (us * 1e-6) / 1e12


RUNNERS = {"gemm_decode_fp8": run_gemm_decode, "hbm_copy": run_hbm_copy, "fa_d128_sdpa": lambda: run_triton_fa(128),
           "fa_d64_sdpa": lambda: run_triton_fa(64), "fa_d128_hk": run_rocke_fa}
ANCHORS += [_aiter_anchor(*row) for row in AITER_ROWS]
ANCHORS += [_aiter_anchor(*row, role=TEST) for row in aiter_test_rows("gfx942")]
AITER_RUNNERS = {_aiter_name(*row[:5]): partial(run_aiter_fwd, None, *row[:5])
                 for row in AITER_TABLE}

# ---- gfx950 (MI355X): --target gfx950 ----
ANCHORS_GFX950 = [
    Anchor("hbm_copy_mi350x", "~5600 GB/s", "ROCm/rocm-systems PR #8480 results table (MI350X, "
           "gfx950, 256 CUs: rocprofiler-compute's previous HBM roofline kernel, a copy "
           "dst[gid] = src[gid] of doubles, 'Old kernel ~5600 GB/s'; AMD staff)",
           "rocke vector_add/f32_v4 built for gfx950, n = 2^25 (3 x 128 MiB)", "TB/s", 5.6,
           "measured on an MI350X, not an MI355X: the same 8 TB/s HBM3E and 256 CUs, a lower "
           "peak clock (a copy is bound by the HBM); the achievable-bandwidth constant "
           "(6914 GB/s) is the same PR's read-only kernel, not this copy; the published figure "
           "is approximate ('~'); the stand-in adds two arrays", SAME,
           origin="AMD's rocprofiler-compute team (ROCm/rocm-systems PR #8480), MI350X"),
] + [_aiter_anchor(*row, target="gfx950",
                   fitted=("loaded_clock_hz",) if row[:5] == GFX950_FITTED_ROW else ())
       for row in aiter_calibration_rows("gfx950")] \
  + [_aiter_anchor(*row, target="gfx950", role=TEST) for row in aiter_test_rows("gfx950")]
RUNNERS_GFX950 = {"hbm_copy_mi350x": partial(run_hbm_copy, "gfx950")}
ANCHORS_BY_TARGET = {"gfx942": (ANCHORS, RUNNERS, [r[:5] for r in AITER_TABLE]),
                     "gfx950": (ANCHORS_GFX950, RUNNERS_GFX950, [r[:5] for r in AITER_TABLE])}


def test_sample(rows: list, n: int | None) -> list:
    """`n` of the test rows, evenly spaced over the table's order (deterministic), for a
    quicker run; all of them when n is None or at least their number."""
    if n is None or n >= len(rows):
        return list(rows)
    return [rows[(i * len(rows)) // n] for i in range(n)]


def split_summary(role: str, errors: list) -> str:
    """One line over a role's counted errors (modelled time / published time - 1): the count,
    max |error|, mean |error|, signed mean and how many are too fast (negative); the test line
    also says whether issue 41's goal (TEST_GOAL_MAX, TEST_GOAL_MEAN) is met."""
    if not errors:
        return f"{role}: 0 anchors, max |error| nan %"
    mx = max(abs(e) for e in errors)
    mean_abs = sum(abs(e) for e in errors) / len(errors)
    signed = sum(errors) / len(errors)
    line = (f"{role}: {len(errors)} anchors, max |error| {mx * 100:.1f} %, mean |error| "
            f"{mean_abs * 100:.1f} %, signed mean {signed * 100:+.1f} %, "
            f"{sum(e < 0 for e in errors)} of {len(errors)} too fast")
    if role == TEST:
        met = mx <= TEST_GOAL_MAX and abs(signed) <= TEST_GOAL_MEAN
        line += (f" (goal max |error| <= {TEST_GOAL_MAX * 100:.0f} %, signed mean within "
                 f"+-{TEST_GOAL_MEAN * 100:.0f} %: {'met' if met else 'not met'})")
    return line


def _error(anchor: Anchor, figure: float) -> float:
    """The error in time: the modelled time against the time the published figure implies."""
    return figure / anchor.value - 1.0 if anchor.unit == "us" else anchor.value / figure - 1.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=sorted(RUNNERS) + sorted(AITER_RUNNERS)
                        + sorted(a.name for a in ANCHORS_GFX950), action="append")
    parser.add_argument("--set", dest="role", choices=(CALIBRATION, TEST, "all"), default="all",
                        help="which anchors run: the calibration ones, the test ones (never used "
                             "to shape the model) or both (default)")
    parser.add_argument("--test-rows", type=int, default=None, metavar="N",
                        help="run N of the test rows, evenly spaced (default: all of them)")
    parser.add_argument("--target", default="gfx942", choices=sorted(ANCHORS_BY_TARGET),
                        help="the GPU calibrated: gfx942 (MI300X) or gfx950 (MI355X)")
    parser.add_argument("--aiter-dir", type=Path, default=None,
                        help="a checkout of github.com/ROCm/aiter (its hsa/<target>/fmha_v3_fwd "
                             "code objects are run); without it the AITER anchors are not run")
    args = parser.parse_args(argv)
    fwd_dir = Path(aiter_code_object(args.target, False)).parent
    if args.aiter_dir is not None and not (args.aiter_dir / fwd_dir).is_dir():
        parser.error(f"--aiter-dir {args.aiter_dir}: no {fwd_dir} there (expected a "
                     f"checkout of github.com/ROCm/aiter)")
    anchors, fixed_runners, aiter_rows = ANCHORS_BY_TARGET[args.target]
    names = [a.name for a in anchors]
    for only in args.only or ():       # an anchor of the other target would run nothing
        if only not in names:
            parser.error(f"--only {only}: not an anchor of --target {args.target}; its "
                         f"anchors are {', '.join(names)}")
    costs = costs_for(args.target)
    runners = {**fixed_runners,
               **{_aiter_name(*r[:5], args.target): partial(run_aiter_fwd, args.aiter_dir, *r[:5],
                                                            args.target) for r in aiter_rows}}
    if args.test_rows is not None and args.test_rows < 1:
        parser.error(f"--test-rows: at least 1, got {args.test_rows}")
    tests = [a for a in anchors if a.role == TEST]
    sampled_tests = {a.name for a in test_sample(tests, args.test_rows)}
    rows, not_run = [], []
    for anchor in anchors:
        if args.only and anchor.name not in args.only:
            continue
        if args.role != "all" and anchor.role != args.role:
            continue
        if anchor.role == TEST and anchor.name not in sampled_tests and not args.only:
            continue
        start = time.perf_counter()
        try:
            profile, kwargs, to_figure = runners[anchor.name]()
        except NotRun as why:
            not_run.append((anchor, str(why)))
            continue
        modelled = model_time(profile, costs=costs, **kwargs)
        figure = to_figure(modelled.us)
        # the least certain constant (an assumption, rocke/arch/costs.py): the error at other
        # vector-memory round trips shows how much an anchor depends on it
        at_latency = {c: _error(anchor, to_figure(model_time(
            profile, costs=replace(costs, memory_latency_cycles=c), **kwargs).us))
            for c in LATENCIES}
        # the clock rule (rocke/arch/costs.py effective_clock_hz) against its two ends: the
        # boost clock throughout, and AMD's max-achievable-FLOPs clock throughout
        at_latency.update({label: _error(anchor, to_figure(model_time(
            profile, costs=clock_costs, **kwargs).us)) for label, clock_costs in (
                ("boost clock throughout", replace(costs, loaded_clock_hz=costs.clock_hz)),
                ("MAF clock throughout", replace(costs, clock_hz=costs.loaded_clock_hz)))})
        rows.append((anchor, modelled, figure, _error(anchor, figure), at_latency,
                     time.perf_counter() - start))
    for anchor, modelled, figure, error, at_latency, wall in rows:
        print(f"{anchor.name} [{anchor.match}, {anchor.role}]: published {anchor.published} "
              f"[{anchor.source}] | run here: {anchor.stand_in} | modelled {costs.gpu} {figure:.2f} {anchor.unit} "
              f"({modelled.label} {modelled.us:.1f} us, bound by {modelled.binding}, clock "
              f"{modelled.occupancy['clock_ghz']:.2f} GHz) | error "
              f"{error * 100:+.1f} % (sensitivity: "
              + ", ".join(f"{f'round trip {c} cycles' if isinstance(c, int) else c}: "
                          f"{e * 100:+.1f} %" for c, e in at_latency.items())
              + f") | note: {anchor.note} (emulated in {wall:.0f} s)")
    for anchor, why in not_run:
        if anchor.role == TEST:
            continue
        print(f"{anchor.name} [{anchor.match}, {anchor.role}]: published {anchor.published} "
              f"[{anchor.source}] | {why}")
    test_not_run = {}
    for anchor, why in not_run:
        if anchor.role == TEST:
            test_not_run.setdefault(why, []).append(anchor.name)
    for why, names_ in test_not_run.items():
        print(f"{len(names_)} test rows ({names_[0]} ... {names_[-1]}) | {why}")
    for role, meaning in ROLES.items():
        print(f"[{role}]: {meaning}")
    for match, meaning in MATCHES.items():
        print(f"[{match}]: {meaning}")
    for match in (DIFFERENT, REJECTED):
        aside = [r for r in rows if r[0].match == match]
        if aside:
            print(f"not counted ({match}): " + ", ".join(
                f"{a.name} {e * 100:+.1f} %" for a, _, _, e, _, _ in aside))
    if not_run:
        print(f"not run (not counted): {len(not_run)} anchors")
    counted = [r for r in rows if r[0].match in COUNTED and r[0].role == CALIBRATION]
    tested = [r for r in rows if r[0].match in COUNTED and r[0].role == TEST]
    fitted = [(a.name, a.fitted) for a, *_ in counted if a.fitted]
    held_out = [abs(e) for a, _, _, e, _, _ in counted if not a.fitted]
    print("constants fitted to anchors: " + (", ".join(f"{', '.join(f)} to {n}"
                                                      for n, f in fitted) or "none"))
    print(f"held-out anchors (no constant fitted to them): {len(held_out)}, max |error| "
          f"{max(held_out, default=math.nan) * 100:.1f} %")
    origins = sorted({a.origin or a.source for a, *_ in counted})
    print(f"counted anchors come from {len(origins)} independent sources: {'; '.join(origins)}")
    if args.role != CALIBRATION:
        skipped = len(tests) - len(sampled_tests)
        print(f"test rows run: {len(tested)} of {len(tests)}"
              + (f" (--test-rows {args.test_rows}: {skipped} not run)" if skipped else "")
              + (f", {sum(map(len, test_not_run.values()))} not run (no code objects)"
                 if test_not_run else ""))
    print(split_summary(CALIBRATION, [e for _, _, _, e, _, _ in counted]))
    if args.role != CALIBRATION:
        print(split_summary(TEST, [e for _, _, _, e, _, _ in tested]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
