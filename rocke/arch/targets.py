"""Target facts as data: one frozen record per CDNA generation rocke knows.

Sources: AMD's CDNA3 / CDNA4 ISA references (register files, LDS, waves per SIMD) and LLVM's
AMDGPUUsage (target ids, accum_offset rules, allocation granules); the gfx950 record cites its own.
Nothing else in rocke restates these.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Target:
    name: str                      # LLVM processor name
    target_id: str                 # default target id (features appended)
    product: str
    cu_count: int
    simds_per_cu: int
    wave_size: int
    max_waves_per_simd: int        # hardware wave slots per SIMD ("EU")
    max_workgroups_per_cu: int
    max_workgroup_size: int
    vgprs_per_simd_lane: int       # unified VGPR+AGPR file, 32-bit registers per lane per SIMD
    max_arch_vgprs: int            # v0..v255 addressable per wave
    max_agprs: int                 # a0..a255 addressable per wave
    vgpr_alloc_granule: int        # unified-file allocation granule (registers)
    accum_offset_granule: int      # AGPRs start at a multiple of this (accum_offset)
    sgprs_per_simd: int
    max_sgprs_per_wave: int        # addressable s0..s(n-1) for the kernel, excluding VCC
    sgpr_alloc_granule: int
    lds_bytes_per_cu: int
    max_lds_per_workgroup: int
    lds_alloc_granule: int         # bytes
    lds_banks: int
    peak_dense_f16_tflops: float   # vendor peak, for roofline context only
    hbm_tbytes_per_s: float
    min_llvm_major: int            # first LLVM release whose AMDGPU backend knows the processor
    # a hardware f32 -> bf16 conversion (round to nearest even, NaN quieted): CDNA4's
    # v_cvt_pk_bf16_f32 (AMD CDNA4 ISA guide, VOP3 opcode 616); CDNA3 has none
    native_bf16_conversion: bool = False

    @property
    def waves_per_cu(self) -> int:
        return self.simds_per_cu * self.max_waves_per_simd


GFX942 = Target(
    name="gfx942",
    target_id="gfx942:sramecc+:xnack-",
    product="MI300X (CDNA3)",
    cu_count=304,
    simds_per_cu=4,
    wave_size=64,
    max_waves_per_simd=8,
    max_workgroups_per_cu=16,
    max_workgroup_size=1024,
    vgprs_per_simd_lane=512,
    max_arch_vgprs=256,
    max_agprs=256,
    vgpr_alloc_granule=8,
    accum_offset_granule=4,
    sgprs_per_simd=800,
    max_sgprs_per_wave=102,
    sgpr_alloc_granule=16,
    lds_bytes_per_cu=64 * 1024,
    max_lds_per_workgroup=64 * 1024,
    lds_alloc_granule=512,
    lds_banks=32,
    peak_dense_f16_tflops=1307.4,
    hbm_tbytes_per_s=5.3,
    # gfx941/gfx942 entered LLVM between the 16 and 17 branches: LLVM 17 is the first release
    # whose AMDGPUUsage processor table lists gfx942 (LLVM 16 stops at gfx940)
    min_llvm_major=17,
)

# CDNA4 (gfx950) keeps CDNA3's wave and register model: wave64, 8 wave slots per SIMD, the unified
# 512-entry VGPR+AGPR file with v0..v255 / a0..a255 per wave and accum_offset in 4s, 800 SGPRs per
# SIMD and 102 per wave (LLVM AMDGPUUsage's "Processors" table lists gfx950 in the GFX9 family with
# gfx942's register rules; its "VGPR/SGPR allocation granule" notes are shared by gfx90a/gfx942/
# gfx950). What differs:
# - LDS: 160 KiB per CU and per workgroup (LLVM's FeatureAddressableLocalMemorySize163840 on
#   gfx950), allocated in 320-dword = 1280-byte blocks (AMDGPUUsage, COMPUTE_PGM_RSRC2.LDS_SIZE:
#   "GFX950 roundup(lds-size / (320 * 4))").
# - CUs: 256 on MI355X / MI350X = 8 XCDs x 32 active CUs (AMD's CDNA4 white paper; ISSCC 2026).
# - peak rates: MI355X 2.5 PFLOPS dense FP16/BF16 and 8 TB/s HBM3E (AMD's MI355X data sheet).
# - target id: gfx950 supports sramecc and xnack target features like gfx942 (AMDGPUUsage
#   "AMDGPU Processors" table), so the default is gfx950:sramecc+:xnack-.
# lds_banks = 64 is NOT confirmed from a primary source here (the white paper reports doubled LDS
# read bandwidth); nothing in rocke reads it for gfx950 yet.
GFX950 = replace(
    GFX942,
    name="gfx950",
    target_id="gfx950:sramecc+:xnack-",
    product="MI355X (CDNA4)",
    cu_count=256,
    lds_bytes_per_cu=160 * 1024,
    max_lds_per_workgroup=160 * 1024,
    lds_alloc_granule=320 * 4,
    lds_banks=64,
    peak_dense_f16_tflops=2516.6,
    hbm_tbytes_per_s=8.0,
    min_llvm_major=20,             # gfx950 is first listed in LLVM 20's AMDGPUUsage
    native_bf16_conversion=True,
)

TARGETS: dict[str, Target] = {t.name: t for t in (GFX942, GFX950)}

# The target rocke builds for unless told otherwise (the DSL, the compiler and the emulator).
DEFAULT_TARGET = GFX942


def get_target(name: str) -> Target:
    """Look a target up by processor name (a full target id such as 'gfx942:sramecc+' works too)."""
    base = name.split(":", 1)[0]
    try:
        return TARGETS[base]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; rocke knows {sorted(TARGETS)}") from None
