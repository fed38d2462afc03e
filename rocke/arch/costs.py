"""Timing facts of MI300X (gfx942) and MI355X (gfx950) for rocke's time model (rocke.perf):
clock, issue costs, matrix-pipe passes, LDS and memory rates. Every number names its source; the
ones that are readings or assumptions say so. Nothing here is measured by rocke (there is no
MI300X or MI355X here). The MI355X record's own sources follow the MI300X ones (`MI355X` below).

Sources:
- [DS]   AMD Instinct MI300X data sheet: peak engine clock 2100 MHz, 5.3 TB/s HBM3, 304 CUs.
- [ISA]  AMD CDNA3 ISA reference guide: wave64 on 16-lane SIMDs, MFMA passes.
- [LLVM] LLVM AMDGPU scheduling model, SISchedule.td, SchedModel SIDPGFX942FullSpeedModel:
         VALU latencies in units of one 4-cycle pass (Write32Bit 1, WriteTrans32 /
         WriteQuarterRate32 / WriteFloatCvt 4, WriteDouble 1 on gfx942), MFMA passes by shape
         (4x4 2; 16x16x16/x32/x8xf32 4; other 16x16 8; 32x32x8/x16/x4xf32 8; other 32x32 16;
         f64 4x4 4, 16x16 8). A pass is 4 cycles.
- [IREE] IREE/nod-ai "AMDGPU Kernel Optimization Guide" (amd-shark-ai docs): an add on a
         wave64 executes in 4 cycles on a 16-lane SIMD; LDS 32 banks of 4 bytes.
- [LDS]  nod-ai empirical LDS study on MI300X (amd-shark-ai docs/empirical-lds/cdna3info.md):
         32 banks; b32/b64/b128 served in 2/4/8 phases (so 128 bytes a clock per CU).
- [GCN]  AMD "Graphics Cores Next architecture" white paper (CDNA keeps its CU): each SIMD gets
         an issue slot every 4 cycles and may issue one instruction per wave per slot, up to one
         each of VALU, SALU/SMEM, VMEM, LDS, branch from different waves.
- [BW]   achievable HBM read bandwidth of gfx942's HBM3: 4073 GB/s from rocprofiler-compute's
         roofline kernel, 4027 GB/s from TransferBench, on an MI308XHF (gfx942, same 8-stack
         HBM3 as MI300X, fewer CUs) -- ROCm/rocm-systems PR #8480 ("improve HBM roofline
         benchmark accuracy"); ROCm staff: the 5.3 TB/s data-sheet figure is a theoretical peak
         real tests do not reach (ROCm/rocm_bandwidth_test#121).
- [CDNA3] AMD CDNA3 white paper: L2 4 MB per XCD, 16 channels of 128 B/clk each (2 KB/clk per
         XCD); Infinity Cache 256 MB at 17.2 TB/s peak.
- [MAF]  AMD's max-achievable FLOPs of MI300X: BF16 matrix 708 TFLOPS (hipBLASLt GEMM at the
         best size, AMD's controlled measurement) against the 1307.4 TFLOPS peak, i.e. 54 % --
         AMD ROCm blog "Understanding Peak, Max-Achievable & Delivered FLOPs" (Part 1) and
         "Measuring Max-Achievable FLOPs - Part 2" (the gap is mostly the engine clock a
         matrix-saturated MI300X sustains under its power limit, below the 2100 MHz boost); the
         708 figure as AMD records it in AMD-AGI/TraceLens Agent/Analysis/utils/arch/MI300X.json.
Assumptions (no public figure found; flagged wherever used): vector memory latency, launch
overhead, the per-CU texture-address rate of one 64-byte segment a clock, and the clock's
linear shape between the boost clock and [MAF]'s (`effective_clock_hz`). No constant here is
fitted to a calibration anchor (benchmarks/calibration.py). For the latency,
published MI300X pointer-chasing studies exist (Chips and Cheese, "Testing AMD's Giant MI300X",
2024; Tee, Curtis, Wolfe, Wong, "The MALL is Open: Exploring Shared Caches and Latency in AMD
CDNA 3 GPUs", SC'25 workshops) but their figures could not be read here, so the constant stays
an assumption and benchmarks/calibration.py and benchmarks/profile.py print results at half
and double it. [MT4G] mt4g's MI300X sample (caps-tum/mt4g, sample_results/"AMD Instinct MI300X
VF"/README.md, one pointer-chasing thread, an idle GPU) measured 288 cycles to L2 and 900
(p95 1115) to HBM, and 15.4 TB/s L2 / 3.96 TB/s HBM read bandwidth: the unloaded round trip is
below the assumed 2000, which stands for a loaded one. Queueing beyond it when many workgroups
wait on DRAM at once is modelled separately (rocke.perf.model: the DRAM queue, Little's law
on [BW]).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .targets import GFX942, GFX950, Target


@dataclass(frozen=True)
class Costs:
    target: Target
    gpu: str                        # the product the times are of ("modelled <gpu> time")
    clock_hz: float                 # [DS] peak engine clock
    loaded_clock_hz: float          # [MAF] the clock a matrix-saturated kernel sustains: the boost
                                    # clock x MAF / peak (BF16), all of the gap read as clock
    pass_cycles: int                # [LLVM]/[IREE] one wave64 pass over a 16-lane SIMD
    issue_cycles: int               # [GCN] a wave issues at most one instruction per 4 cycles
    lds_bytes_per_clock_cu: int     # [LDS] 32 banks x 4 B (LDS reads)
    segment_bytes: int              # coalescing granule of the address unit (64 B lines)
    segments_per_clock_cu: float    # ASSUMPTION: one 64-byte segment per clock per CU
    hbm_peak_bytes_s: float         # [DS]
    hbm_achievable_bytes_s: float   # [BW]
    l2_bytes_per_clock_xcd: int     # [CDNA3] 16 channels x 128 B
    xcds: int                       # [CDNA3]
    memory_latency_cycles: int      # ASSUMPTION: a vector load round trip to HBM (~1 us loaded
                                    # latency is typical of HBM GPUs; ~2000 cycles at 2.1 GHz)
    launch_overhead_s: float        # ASSUMPTION: dispatch + first-wave start + drain of a kernel
                                    # in a back-to-back stream (a few microseconds on HIP)
    l2_bytes_per_xcd: int = 4 << 20         # [CDNA3] context only: the model has no cache-hit
    infinity_cache_bytes: int = 256 << 20   # term (DRAM time is the unique footprint)

    @property
    def label(self) -> str:
        return f"modelled {self.gpu} time"

    @property
    def peak_dense_f16_flops(self) -> float:
        """Peak dense f16 matrix FLOP/s from the pass table: the widest f16 atom (K = 16 on
        gfx942, 32 on gfx950) over its matrix-pipe cycles, on every SIMD at the boost clock --
        the vendor figure (`Target.peak_dense_f16_tflops`) is a check of these constants."""
        from .mfma import MFMA_CATALOG
        widest = max((a for a in MFMA_CATALOG.values() if a.a_type == "f16" and a.m == a.n == 16
                      and a.blocks == 1 and self.target.name in a.targets), key=lambda a: a.k)
        return 2 * 16 * 16 * widest.k / self.mfma_cycles(widest.mnemonic) * self.simds * self.clock_hz

    # ------------------------------------------------------------------ VALU
    def valu_passes(self, mnemonic: str) -> int:
        """4-cycle passes of one wave64 VALU instruction ([LLVM] gfx942 model)."""
        base = mnemonic.split("_e32")[0].split("_e64")[0].split("_sdwa")[0].split("_dpp")[0]
        return 4 if any(base.startswith(p) for p in _TRANSCENDENTAL) else 1

    # ------------------------------------------------------------------ MFMA
    def mfma_passes(self, mnemonic: str) -> int:
        """Matrix-pipe passes of one MFMA ([LLVM] SIDPGFX942FullSpeedModel)."""
        m = _MFMA.match(mnemonic)
        if m is None:
            raise ValueError(f"not an MFMA mnemonic rocke's cost table knows: {mnemonic!r}")
        out, dim, k, xf32 = m.group("out"), int(m.group("m")), int(m.group("k")), bool(m.group("xf32"))
        if out == "f64":
            return 4 if dim == 4 else 8
        if dim == 4:
            return 2
        if dim == 16:
            return 4 if (k >= 16 or xf32) else 8
        if dim == 32:
            return 8 if (k >= 8 or xf32) else 16
        raise ValueError(f"unknown MFMA shape in {mnemonic!r}")

    def mfma_cycles(self, mnemonic: str) -> int:
        return self.pass_cycles * self.mfma_passes(mnemonic)

    def serial_cycles(self, mnemonic: str, report_class: str) -> int:
        """Cycles one instruction holds its own wave: at least one issue slot ([GCN]); a VALU
        its passes, an MFMA its matrix-pipe time (a wave's next instruction waits for them)."""
        if report_class == "valu":
            return max(self.issue_cycles, self.pass_cycles * self.valu_passes(mnemonic))
        if report_class == "mfma":
            return max(self.issue_cycles, self.mfma_cycles(mnemonic))
        return self.issue_cycles

    # ------------------------------------------------------------------ derived peaks
    def effective_clock_hz(self, matrix_busy: float) -> float:
        """The engine clock of a kernel whose matrix pipes are busy `matrix_busy` (0..1) of its
        cycles. ASSUMPTION: linear between the boost clock (no matrix work: AMD's blog, boost
        clock in lightly loaded phases) and `loaded_clock_hz` (saturated, [MAF])."""
        busy = min(1.0, max(0.0, matrix_busy))
        return self.clock_hz - busy * (self.clock_hz - self.loaded_clock_hz)

    @property
    def max_matrix_flops(self) -> float:
        """The most dense f16/bf16 matrix FLOP/s the clock rule allows: the pipes' rate at
        `effective_clock_hz(busy)` is `busy x clock(busy)` times the peak per cycle, which is
        largest at busy = clock_hz / (2 (clock_hz - loaded_clock_hz)), capped at 1 (saturated
        pipes on both targets: MI300X gives AMD's 708 TFLOPS MAF itself)."""
        best = min(1.0, self.clock_hz / (2 * (self.clock_hz - self.loaded_clock_hz)))
        return self.peak_dense_f16_flops * best * self.effective_clock_hz(best) / self.clock_hz

    @property
    def simds(self) -> int:
        return self.target.cu_count * self.target.simds_per_cu

    @property
    def l2_bytes_s(self) -> float:
        return self.l2_bytes_per_clock_xcd * self.xcds * self.clock_hz


# vector-memory round trips (cycles) at which the profiler replays each wave's timeline
# (rocke.emu.profile, `wg_vm_stall`): the model's assumed latency and half / double it
PROFILED_LATENCIES = (1000, 2000, 4000)

# WriteTrans32 / WriteTrans64: quarter rate ([LLVM]); other VALU ops are taken at full rate
# (conversions included: WriteFloatCvt is not mapped per opcode here)
_TRANSCENDENTAL = ("v_exp_", "v_log_", "v_rcp_", "v_rsq_", "v_sqrt_", "v_sin_", "v_cos_")
_MFMA = re.compile(r"^v_mfma_(?P<out>f32|i32|f64)_(?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)"
                   r"(?P<xf32>_?xf32)?")

MI300X = Costs(
    target=GFX942,
    gpu="MI300X",
    clock_hz=2.1e9,
    loaded_clock_hz=2.1e9 * 708.0 / 1307.4,
    pass_cycles=4,
    issue_cycles=4,
    lds_bytes_per_clock_cu=128,
    segment_bytes=64,
    segments_per_clock_cu=1.0,
    hbm_peak_bytes_s=GFX942.hbm_tbytes_per_s * 1e12,
    hbm_achievable_bytes_s=4.073e12,
    l2_bytes_per_clock_xcd=2048,
    xcds=8,
    memory_latency_cycles=2000,
    launch_overhead_s=4e-6,
)

# ---------------------------------------------------------------------------------- MI355X
# Sources (gfx950, CDNA4). [DS355] AMD Instinct MI355X data sheet: 2.5 PFLOPS dense FP16/BF16
# matrix, 8 TB/s HBM3E, 256 CUs; its peak engine clock is 2400 MHz (AMD's Hot Chips 2025 MI350
# talk: "peak frequency 2.4 GHz"; the data-sheet peak checks it: 256 CUs x 4 SIMDs x 1024
# FLOP/clk (16x16x32 f16: 16384 FLOP in 4 passes) x 2.4 GHz = 2516.6 TFLOPS, `peak_dense_f16_flops`).
# [SPEC] ROCm docs, "AMD GPU specifications" (reference/gpu-specs): MI355X 256 CUs (32 per XCD,
# 8 XCDs), LDS 160 KiB, L2 32 MiB (4 per XCD), L3 (Infinity Cache) 256 MiB.
# [MCA950] LLVM's gfx950 scheduling model as llvm-mca prints it (llvm/test/tools/llvm-mca/AMDGPU/
# gfx950.s): v_mfma_f32_16x16x32_{f16,bf16} hold the matrix pipe 4 passes, 32x32x16 8 passes --
# gfx942's counts for 16x16x16 / 32x32x8, so the wide-K atoms do twice the work per pass (the
# table `Costs.mfma_passes` already gives these; f64 MFMAs differ on gfx950, unused by rocke).
# ASSUMPTION: the f8f6f4 atoms (16x16x128 / 32x32x64) are charged LLVM's 4 / 8 passes, the fp4
# rate (LLVM's test marks it FIXME for fp8 operands); with fp8 operands the data sheet's 5 PFLOPS
# fp8 implies twice that, and the profile's buckets (by mnemonic) cannot tell the operand types.
# rocke's attention does not issue them.
# [BW355] achievable HBM3E read bandwidth of gfx950: 6914 GB/s from rocprofiler-compute's
# roofline kernel, 7200 GB/s from TransferBench, on an MI350X (gfx950, 256 CUs, the MI355X's 8 TB/s
# HBM3E) -- ROCm/rocm-systems PR #8480, the same table [BW] reads for gfx942.
# [LDS355] AMD CDNA 4 white paper: LDS grown to 160 KB with its read bandwidth doubled over CDNA 3
# (as reported in Chips and Cheese, "AMD's CDNA 4 Architecture Announcement", 2025): 256 B a clock
# a CU. ASSUMPTION: rocke's profiler counts LDS phases by gfx942's 32-bank rules (rocke.emu.profile);
# the model serves them at this rate (`lds_bytes_per_clock_cu`), writes included (the profile does
# not split a workgroup's read and write cycles).
# [AITER355] ROCm/aiter op_tests/cpp/mha/README.md, MI355X FWD TFLOPS column: the best, 1421.77
# TFLOPS (bf16 d128, b1 h32/8 s10240), is 56.5 % of the 2516.6 peak.
# Unknown for MI355X, each an ASSUMPTION:
# - the clock a matrix-saturated kernel sustains: AMD's max-achievable-FLOPs figures cover MI300X /
#   MI325X only; taken as the fraction of peak [AITER355]'s best published kernel reaches (56.5 %,
#   a lower bound of MI355X's MAF; MI300X's MAF is 54.2 % of its peak);
# - the L2 bandwidth: CDNA3's 2 KB a clock per XCD (16 channels x 128 B) kept; no CDNA4 figure
#   could be read here;
# - VALU and transcendental rates, issue slots, the address unit and the 64-byte segment: gfx942's
#   (CDNA4 keeps CDNA3's 16-lane SIMDs and wave64);
# - vector-memory round trip 2000 cycles (0.83 us at 2.4 GHz) and launch overhead 4 us: MI300X's
#   assumptions, unchanged (the sweeps print half and double the round trip).
MI355X = Costs(
    target=GFX950,
    gpu="MI355X",
    clock_hz=2.4e9,
    loaded_clock_hz=2.4e9 * 1421.77 / 2516.6,
    pass_cycles=4,
    issue_cycles=4,
    lds_bytes_per_clock_cu=256,
    segment_bytes=64,
    segments_per_clock_cu=1.0,
    hbm_peak_bytes_s=GFX950.hbm_tbytes_per_s * 1e12,
    hbm_achievable_bytes_s=6.914e12,
    l2_bytes_per_clock_xcd=2048,
    xcds=8,
    memory_latency_cycles=2000,
    launch_overhead_s=4e-6,
    l2_bytes_per_xcd=4 << 20,
    infinity_cache_bytes=256 << 20,
)

COSTS: dict[str, Costs] = {c.target.name: c for c in (MI300X, MI355X)}


def costs_for(target: str) -> Costs:
    """The timing facts of a target by processor name ('gfx942' -> MI300X, 'gfx950' -> MI355X)."""
    base = target.split(":", 1)[0]
    try:
        return COSTS[base]
    except KeyError:
        raise ValueError(f"no time model for target {target!r}; rocke models {sorted(COSTS)}") \
            from None
