"""Kernel metadata from LLVM's assembly: the `.amdgpu_metadata` YAML and `.amdhsa_*` directives."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from ..arch import Occupancy, get_target, occupancy
from ..arch.abi import KernArg, parse_kernel_args


@dataclass(frozen=True)
class KernelInfo:
    name: str
    target: str
    args: tuple[KernArg, ...]
    kernarg_size: int
    vgprs: int
    agprs: int
    sgprs: int
    accum_offset: int
    lds_bytes: int
    scratch_bytes: int
    vgpr_spills: int
    sgpr_spills: int
    wave_size: int
    max_workgroup_size: int
    occupancy: Occupancy = field(compare=False)
    # the exact (x, y, z) block the kernel was built for (`.reqd_workgroup_size`), when it has one
    reqd_workgroup_size: tuple[int, int, int] | None = None
    # the occupancy the IR asked for (`"amdgpu-waves-per-eu"`, minimum waves per SIMD), if any
    requested_waves_per_eu: int | None = None

    # SGPRs the kernel's code names (s0..s(n-1), `.set NAME.numbered_sgpr`), when known; `sgprs`
    # (`.sgpr_count`) adds what the target reserves past them (VCC, FLAT_SCRATCH, XNACK_MASK)
    numbered_sgprs: int | None = None

    def sgpr_budget_text(self) -> str:
        """The SGPR count in the budget's terms: numbered SGPRs against the addressable ones,
        the reserved ones that `.sgpr_count` adds named apart (so 106 beside 102 is explained)."""
        t = get_target(self.target)
        if self.numbered_sgprs is None:
            return (f"SGPR {self.sgprs} counts the reserved VCC/FLAT_SCRATCH/XNACK_MASK too; "
                    f"{t.max_sgprs_per_wave} are addressable (s0-s{t.max_sgprs_per_wave - 1})")
        reserved = self.sgprs - self.numbered_sgprs
        return (f"the kernel uses {self.numbered_sgprs} of the {t.max_sgprs_per_wave} addressable "
                f"SGPRs (s0-s{t.max_sgprs_per_wave - 1}); the SGPR {self.sgprs} reported adds the "
                f"{reserved} the target reserves past them (VCC, FLAT_SCRATCH, XNACK_MASK)")

    @property
    def occupancy_missed(self) -> bool:
        """The kernel asked for more waves per SIMD (waves_per_eu) than its resources allow."""
        return (self.requested_waves_per_eu is not None
                and self.occupancy.waves_per_simd < self.requested_waves_per_eu)

    def occupancy_text(self) -> str:
        """Achieved occupancy, and the requested one beside it (flagged when missed)."""
        text = str(self.occupancy)
        if self.requested_waves_per_eu is not None:
            verdict = "MISSED" if self.occupancy_missed else "met"
            text += f", requested waves_per_eu={self.requested_waves_per_eu}: {verdict}"
        return text

    def occupancy_advice(self) -> str:
        """Why a requested occupancy was missed and what to try ('' when met or not asked)."""
        if not self.occupancy_missed:
            return ""
        t = get_target(self.target)
        o = self.occupancy
        want = self.requested_waves_per_eu
        head = (f"  {self.name} asked for waves_per_eu={want} but gets {o.waves_per_simd} "
                f"wave(s) per SIMD, limited by {o.limiter}:")
        if o.limiter == "vgpr":
            budget = t.vgprs_per_simd_lane // want
            why = (f"  - {o.unified_vgprs} registers per lane allow {t.vgprs_per_simd_lane // o.unified_vgprs} "
                   f"waves; {want} waves need <= {budget}: a smaller tile or fewer live values "
                   f"(LLVM could not get there without changing the code), or ask for fewer waves")
        elif o.limiter == "sgpr":
            why = (f"  - {self.sgprs} SGPRs per wave: fewer uniform values live at once, or ask "
                   "for fewer waves")
        elif o.limiter == "lds":
            fits = t.lds_bytes_per_cu // max(want * t.simds_per_cu // o.waves_per_workgroup, 1)
            why = (f"  - {self.lds_bytes} B of LDS per workgroup allows {o.workgroups_per_cu} "
                   f"workgroup(s) per CU ({t.lds_bytes_per_cu} B); {want} waves per SIMD need "
                   f"about <= {fits} B per workgroup: smaller LDS tiles, or ask for fewer waves")
        else:
            why = (f"  - a workgroup of {o.waves_per_workgroup} waves and the CU's limit of "
                   f"{t.max_workgroups_per_cu} workgroups cap it: larger workgroups, or ask for fewer waves")
        return f"{head}\n{why}"

    @property
    def explicit_args(self) -> tuple[KernArg, ...]:
        return tuple(a for a in self.args if not a.hidden)

    @property
    def spills(self) -> int:
        return self.vgpr_spills + self.sgpr_spills

    def report(self) -> str:
        """One line of resources; a spilling kernel gets what to try on the lines after it."""
        sgprs = f"{self.sgprs}" if self.numbered_sgprs is None else \
            f"{self.sgprs} ({self.numbered_sgprs} + {self.sgprs - self.numbered_sgprs} reserved)"
        line = (f"{self.name}: VGPR {self.vgprs}  AGPR {self.agprs}  SGPR {sgprs}  "
                f"LDS {self.lds_bytes} B  scratch {self.scratch_bytes} B  "
                f"spills {self.vgpr_spills}v/{self.sgpr_spills}s  WG<= {self.max_workgroup_size}  "
                f"occupancy {self.occupancy_text()}")
        advice = "\n".join(a for a in (self.occupancy_advice(), self.spill_advice()) if a)
        return f"{line}\n{advice}" if advice else line

    def spill_advice(self) -> str:
        """What to try when the kernel spills ('' when it does not), with this kernel's numbers:
        the register budget a wave got and the levers that raise it or lower the demand."""
        if not self.spills:
            return ""
        t = get_target(self.target)
        lanes = ("v_writelane_b32 parks each in a lane of a VGPR, v_readlane_b32 brings it back: "
                 "one VALU instruction each way")
        if self.vgpr_spills:
            head = (f"  {self.name} spills {self.vgpr_spills} VGPR values to {self.scratch_bytes} B of "
                    "scratch per work-item: each is a scratch store and a load in the kernel")
            if self.sgpr_spills:
                head += f"; its {self.sgpr_spills} SGPR spills go to VGPR lanes ({lanes})"
        else:
            head = (f"  {self.name} spills {self.sgpr_spills} SGPR values to VGPR lanes, not to memory "
                    f"({lanes})")
            if self.scratch_bytes:
                head += (f"; the kernel also has {self.scratch_bytes} B of scratch per work-item, so "
                         "some may go on to memory when no VGPR lane is free")
        lines = [head + " (the emulator runs it; shipped kernels must not spill). To remove the "
                 "spills, try:"]
        if self.vgpr_spills:
            regs = self.occupancy.unified_vgprs
            waves = t.vgprs_per_simd_lane // max(regs, 1)
            fewer = max(1, waves // 2)
            lines.append(
                f"  - a smaller tile (fewer values live per work-item: accumulators, prefetched "
                f"loads, unrolled iterations): the wave was held to {regs} registers per lane")
            wg_waves = -(-self.max_workgroup_size // t.wave_size)
            forced = -(-wg_waves // t.simds_per_cu)
            if forced > 1:
                lines.append(
                    f"  - fewer warps: a workgroup of up to {self.max_workgroup_size} work-items "
                    f"({wg_waves} waves) puts {forced} waves on each of a CU's "
                    f"{t.simds_per_cu} SIMDs, so a wave gets at most "
                    f"{t.vgprs_per_simd_lane // forced} of the {t.vgprs_per_simd_lane} registers")
            if waves > 1:
                lines.append(
                    f"  - a lower `waves_per_eu` (or none): {regs} registers means {waves} waves "
                    f"per SIMD; waves_per_eu={fewer} allows "
                    f"{min(t.vgprs_per_simd_lane // fewer, t.max_arch_vgprs + t.max_agprs)} "
                    "registers per wave")
        if self.sgpr_spills:
            lines.append(f"  - fewer uniform values live at once: {self.sgpr_budget_text()}; kernel "
                         "arguments, pointers, sizes and loop bounds kept across a loop each hold "
                         "SGPRs: recompute or reload them inside the loop, or derive several from one")
            want = self.requested_waves_per_eu
            if want:
                lines.append(f"  - a lower `waves_per_eu`: {want} waves per SIMD share its "
                             f"{t.sgprs_per_simd} SGPRs ({t.sgprs_per_simd // want} per wave, "
                             f"{t.max_sgprs_per_wave} addressable at most)")
        return "\n".join(lines)


# libyaml's loader when present: metadata parsing dominates a warm cache hit otherwise
_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_META_RE = re.compile(r"\.amdgpu_metadata\s*\n(.*?)\n\s*\.end_amdgpu_metadata", re.S)
_DIRECTIVE_RE = re.compile(r"^\s*\.amdhsa_(\w+)\s+(-?\w+)", re.M)


def parse_metadata(asm: str) -> dict:
    m = _META_RE.search(asm)
    if not m:
        raise ValueError("assembly has no .amdgpu_metadata block")
    return yaml.load(m.group(1), Loader=_YamlLoader)


def _kernel_descriptor(asm: str, name: str) -> dict[str, int]:
    m = re.search(rf"\.amdhsa_kernel\s+{re.escape(name)}\s*\n(.*?)\.end_amdhsa_kernel", asm, re.S)
    if not m:
        return {}
    return {k: int(v, 0) for k, v in _DIRECTIVE_RE.findall(m.group(1))}


_FUNCTION_ATTRS = r'"amdgpu-waves-per-eu"\s*=\s*"(\d+)'


def requested_waves_per_eu(ir: str, name: str) -> int | None:
    """The minimum waves per EU (SIMD) kernel ``name``'s IR asks for with the function
    attribute ``"amdgpu-waves-per-eu"="min[,max]"`` (on its define line or in the attribute
    group it names), or None."""
    define = re.search(rf'^define\b[^\n]*@"?{re.escape(name)}"?\s*\([^\n]*$', ir, re.M)
    if not define:
        return None
    line = define.group(0)
    found = re.search(_FUNCTION_ATTRS, line)
    if found is None:
        for group in re.findall(r"#(\d+)", line.split(")", 1)[-1] if ")" in line else line):
            body = re.search(rf"^attributes #{group} = \{{([^\n]*)\}}", ir, re.M)
            found = re.search(_FUNCTION_ATTRS, body.group(1)) if body else None
            if found:
                break
    return int(found.group(1)) if found else None


def kernel_info(asm: str, name: str, target: str, workgroup_size: int | None = None, *,
                requested_waves_per_eu: int | None = None) -> KernelInfo:
    meta = parse_metadata(asm)
    kernels = {k[".name"]: k for k in meta.get("amdhsa.kernels", [])}
    if name not in kernels:
        raise ValueError(f"kernel {name!r} not in metadata; have {sorted(kernels)}")
    k = kernels[name]
    desc = _kernel_descriptor(asm, name)
    args = tuple(parse_kernel_args(k))
    vgprs, agprs = k[".vgpr_count"], k.get(".agpr_count", 0)
    # .vgpr_count is the unified total on gfx90a+; the arch VGPR part is accum_offset when AGPRs exist
    arch_vgprs = desc.get("accum_offset", vgprs) if agprs else vgprs
    lds = k.get(".group_segment_fixed_size", 0)
    wg = workgroup_size or k.get(".max_flat_workgroup_size", 1024)
    occ = occupancy(vgprs=min(arch_vgprs, 256), agprs=agprs, sgprs=k.get(".sgpr_count", 0),
                    lds_bytes=lds, workgroup_size=wg, target=target)
    return KernelInfo(
        name=name, target=target, args=args, kernarg_size=k.get(".kernarg_segment_size", 0),
        vgprs=arch_vgprs, agprs=agprs, sgprs=k.get(".sgpr_count", 0),
        accum_offset=desc.get("accum_offset", 0), lds_bytes=lds,
        scratch_bytes=k.get(".private_segment_fixed_size", 0),
        vgpr_spills=k.get(".vgpr_spill_count", 0), sgpr_spills=k.get(".sgpr_spill_count", 0),
        wave_size=k.get(".wavefront_size", 64), max_workgroup_size=k.get(".max_flat_workgroup_size", 0),
        occupancy=occ, reqd_workgroup_size=_reqd_workgroup_size(k),
        numbered_sgprs=_numbered_sgprs(asm, name),
        requested_waves_per_eu=requested_waves_per_eu)


def _numbered_sgprs(asm: str, name: str) -> int | None:
    """`.set NAME.numbered_sgpr, N` (LLVM's resource symbol), when it is a plain number."""
    m = re.search(rf"^\s*\.set\s+{re.escape(name)}\.numbered_sgpr,\s*(\d+)\s*$", asm, re.M)
    return int(m.group(1)) if m else None


def _reqd_workgroup_size(k: dict) -> tuple[int, int, int] | None:
    shape = k.get(".reqd_workgroup_size")
    if not isinstance(shape, list) or len(shape) != 3 or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)
