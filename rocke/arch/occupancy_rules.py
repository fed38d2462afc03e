"""Occupancy: how many waves per SIMD and workgroups per CU a kernel's resources allow.

Rules (AMDGPUUsage / CDNA3 ISA): on gfx90a+ the VGPR and AGPR files are one unified file; AGPRs
start at accum_offset (VGPR count rounded up to 4) and the wave allocates the total rounded up to
the 8-register granule. SGPRs and LDS are allocated in granules too. The limiter named in the result
is the resource that binds first.
"""
from __future__ import annotations

from dataclasses import dataclass

from .targets import Target, get_target


def _round_up(x: int, g: int) -> int:
    return -(-x // g) * g


@dataclass(frozen=True)
class Occupancy:
    waves_per_simd: int
    workgroups_per_cu: int
    waves_per_workgroup: int
    limiter: str                  # vgpr | sgpr | lds | waves | workgroups
    unified_vgprs: int            # allocated registers per lane (VGPR + AGPR, granule-rounded)
    lds_alloc_bytes: int

    def __str__(self) -> str:
        return (f"{self.waves_per_simd} waves/SIMD, {self.workgroups_per_cu} WG/CU "
                f"(limited by {self.limiter})")


def unified_vgpr_count(vgprs: int, agprs: int, target: Target) -> int:
    if agprs == 0:
        return _round_up(max(vgprs, 1), target.vgpr_alloc_granule)
    accum_offset = _round_up(max(vgprs, 1), target.accum_offset_granule)
    return _round_up(accum_offset + agprs, target.vgpr_alloc_granule)


def occupancy(*, vgprs: int, agprs: int = 0, sgprs: int = 0, lds_bytes: int = 0,
              workgroup_size: int = 64, target: str | Target = "gfx942") -> Occupancy:
    t = get_target(target) if isinstance(target, str) else target
    for name, v in (("vgprs", vgprs), ("agprs", agprs), ("sgprs", sgprs), ("lds_bytes", lds_bytes)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    if not 1 <= workgroup_size <= t.max_workgroup_size:
        raise ValueError(f"workgroup_size must be in [1, {t.max_workgroup_size}], got {workgroup_size}")
    if vgprs > t.max_arch_vgprs or agprs > t.max_agprs:
        raise ValueError(f"{vgprs} VGPRs / {agprs} AGPRs exceed {t.name}'s "
                         f"{t.max_arch_vgprs}/{t.max_agprs} per wave")
    if lds_bytes > t.max_lds_per_workgroup:
        raise ValueError(f"lds_bytes {lds_bytes} exceeds {t.name}'s {t.max_lds_per_workgroup} per workgroup")

    waves_per_wg = -(-workgroup_size // t.wave_size)
    regs = unified_vgpr_count(vgprs, agprs, t)
    limits = {
        "waves": t.max_waves_per_simd,
        "vgpr": t.vgprs_per_simd_lane // regs,
        "sgpr": t.sgprs_per_simd // _round_up(max(sgprs, 1), t.sgpr_alloc_granule),
    }
    waves_per_simd = min(limits.values())
    limiter = min(limits, key=lambda k: (limits[k], k != "waves"))
    # workgroups per CU: the wave slots of all SIMDs, LDS, and the hardware workgroup cap
    wg_limits = {limiter: (waves_per_simd * t.simds_per_cu) // waves_per_wg}
    if waves_per_wg > 1:  # the per-CU workgroup cap counts barrier-holding (multi-wave) workgroups
        wg_limits["workgroups"] = t.max_workgroups_per_cu
    lds_alloc = _round_up(lds_bytes, t.lds_alloc_granule) if lds_bytes else 0
    if lds_alloc:
        wg_limits["lds"] = t.lds_bytes_per_cu // lds_alloc
    wg_limiter = min(wg_limits, key=lambda k: wg_limits[k])
    wgs = wg_limits[wg_limiter]
    effective_waves = min(waves_per_simd, -(-wgs * waves_per_wg // t.simds_per_cu))
    return Occupancy(waves_per_simd=effective_waves, workgroups_per_cu=wgs,
                     waves_per_workgroup=waves_per_wg, limiter=wg_limiter,
                     unified_vgprs=regs, lds_alloc_bytes=lds_alloc)
