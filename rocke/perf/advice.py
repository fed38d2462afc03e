"""Advice from a profile: the model's binding resource and the exact counters turned into a
change to make, naming the builder line (``file:line``) it concerns.

The listing knows each instruction's builder line when the kernel was compiled from its
``rocke.dsl.Kernel`` (``compile_ir(kernel)``: the assembly's ``.loc`` lines); without them the
advice names the assembly line. Five findings, each with its own trigger (all modelled, as the
time is):

- exposed memory latency: the serial path is bound by latency and the vector loads' uncovered
  round trips (``LineCount.vm_stall``: what each wave waited at a ``s_waitcnt vmcnt`` for the
  youngest load it needed) are a large part of it. Names the load, the wait, the cycles left
  uncovered per issue and the prefetch distance (iterations ahead) that would cover them: the
  uncovered cycles over the wave's work per iteration (its serial cycles between two issues of
  that load), rounded up.
- too few waves for the grid: the launch has fewer waves than the GPU has SIMDs, so the
  latency of one wave is not hidden by others. Names the kernel's ``Kernel(...)`` line.
- LDS bank conflicts: conflict cycles are a large part of the LDS cycles (or LDS binds). Names
  the access with the most conflict cycles and the row padding that spreads it over the banks.
- VALU-bound: the VALU binds. Names the builder line with the most VALU cycles, its costliest
  instructions, and what reduces them (transcendentals: exp2 with the scale folded, fewer
  elements; otherwise packed math or per-row work on an ``AxisVector``).
- MFMA chains too short: the matrix pipes are mostly idle while the MFMAs issue in short runs
  between waits (``s_waitcnt`` / ``s_nop`` / barriers): each waits on its own operands or a
  hazard. Names the MFMA line and asks for independent MFMAs back to back (operands of a whole
  K step loaded first, more accumulator tiles per wave).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from rocke.arch.costs import MI300X, Costs

# thresholds: a finding is reported when its share of what it competes with reaches these
LATENCY_SHARE = 0.25        # exposed vector-memory stall / the serial path
CONFLICT_SHARE = 0.25       # bank-conflict cycles / LDS cycles
MFMA_BUSY = 0.5             # matrix pipes busier than this: chains are long enough
SHORT_CHAIN = 4.0           # MFMAs issued back to back, on average, below which chains are short
_TRANSCENDENTAL = re.compile(r"v_(exp|log|rcp|rsq|sqrt|sin|cos)_")
_STALL_POINTS = ("s_waitcnt", "s_nop", "s_barrier", "branch")


@dataclass
class Advice:
    kind: str           # latency | waves | lds_conflicts | valu | mfma_chains
    where: str          # the builder's file:line, else "asm line N"
    message: str        # what binds, by how much, and the change to make
    cycles: float = 0.0  # modelled cycles (summed over the launch's waves) the finding costs

    def as_dict(self) -> dict:
        return {"kind": self.kind, "where": self.where, "message": self.message,
                "cycles": round(self.cycles, 1)}

    def __str__(self):
        return f"{self.where}: {self.message}"


def _where(line) -> str:
    return line.source or f"asm line {line.line_no}"


def _mnemonic(line) -> str:
    return line.text.split()[0] if line.text else ""


@dataclass
class _Group:
    """The instructions of one builder line, summed (one DSL call may emit several)."""
    where: str
    mnemonic: str
    executions: int
    vm_stall: float
    count: int


def _by_source(lines) -> list[_Group]:
    groups: dict[str, _Group] = {}
    for l in lines:
        g = groups.setdefault(_where(l), _Group(_where(l), _mnemonic(l), 0, 0.0, 0))
        g.executions += l.executions
        g.vm_stall += l.vm_stall
        g.count += 1
    return sorted(groups.values(), key=lambda g: -g.vm_stall)


def _serial(line, costs: Costs) -> float:
    return line.executions * costs.serial_cycles(_mnemonic(line), line.cls)


def advise(profile, model, *, grid=None, costs: Costs = MI300X) -> list[Advice]:
    """Findings for one launch's `profile` (rocke.emu.profile.LaunchProfile) and its `model`
    (rocke.perf.model.Modelled, of the full `grid` when the profile is a sample), costliest
    first."""
    lines = [l for l in profile.lines if l.executions]
    serial = sum(_serial(l, costs) for l in lines)
    stalled = sum(l.vm_stall for l in lines if l.cls == "s_waitcnt")
    found: list[Advice] = []
    part = model.binding
    total_wgs = math.prod(grid) if grid is not None else profile.workgroups
    scale = total_wgs / max(1, profile.workgroups)

    # exposed memory latency
    path = serial + stalled
    if part in ("compute (latency)", "dram") and path and stalled >= LATENCY_SHARE * path:
        loads = _by_source(l for l in lines if l.cls == "vmem" and l.vm_stall > 0)
        waits = _by_source(l for l in lines if l.cls == "s_waitcnt" and l.vm_stall > 0)
        for load in loads[:2]:
            uncovered = load.vm_stall / load.executions
            per_issue = serial * load.count / load.executions   # the wave's work between two issues
            wait = waits[0] if waits else None
            if load.executions > profile.workgroups * profile.waves_per_workgroup * load.count:   # a loop
                distance = max(1, math.ceil(uncovered / per_issue))
                change = (f"issue it {distance} iteration{'s' * (distance > 1)} ahead (prefetch distance "
                          f"{distance}: load the next tile into registers before the current one is "
                          "used, carry it through the loop), so the work of the iterations between "
                          f"covers the round trip ({per_issue:.0f} cycles of work per iteration)")
            else:
                change = ("issue it earlier, before work that does not need it, or run more waves per "
                          "SIMD so another wave's work covers it")
            found.append(Advice(
                "latency", load.where,
                f"exposed memory latency: this load ({load.mnemonic}) leaves {uncovered:.0f} cycles "
                f"of its round trip uncovered per issue ({load.vm_stall / path:.0%} of the serial path)"
                + (f", waited for at {wait.where} (s_waitcnt vmcnt)" if wait else "")
                + f"; {change}", load.vm_stall * scale))

    # too few waves for the grid
    waves = total_wgs * profile.waves_per_workgroup
    simds = costs.target.cu_count * costs.target.simds_per_cu
    if part.startswith("compute") and waves < simds:
        end = next((l for l in reversed(profile.lines) if l.text.startswith("s_endpgm")), None)
        per_simd = model.occupancy.get("waves_per_simd", 0)
        found.append(Advice(
            "waves", _where(end) if end is not None else "the launch",
            f"too few waves for the GPU: {total_wgs} workgroup{'s' * (total_wgs != 1)} x "
            f"{profile.waves_per_workgroup} waves = {waves} waves for {simds} SIMDs ({waves / simds:.2f} "
            f"a SIMD, {per_simd} fit): nothing hides one wave's latency; give the grid at least "
            f"{-(-simds // profile.waves_per_workgroup)} workgroups (smaller tiles per workgroup, or "
            "split the reduction across workgroups, e.g. split-K / split-KV)",
            path * (1 - waves / simds) * scale))

    # LDS bank conflicts
    lds_cycles = sum(l.lds_cycles for l in lines)
    conflicts = sum(l.lds_conflicts for l in lines)
    if lds_cycles and (conflicts >= CONFLICT_SHARE * lds_cycles or (part == "compute (lds)" and conflicts)):
        worst = max((l for l in lines if l.cls == "ds"), key=lambda l: l.lds_conflicts)
        width = re.search(r"_b(\d+)$", _mnemonic(worst))
        nbytes = int(width.group(1)) // 8 if width else 4
        if nbytes >= 4:
            change = (f"pad the tile's rows by the access width, {nbytes} bytes (k.lds(..., pad="
                      f"{nbytes} // element bytes): pad={nbytes // 4} for f32, pad={nbytes // 2} for "
                      "f16), so each row starts in another bank, or access it along its rows")
        else:       # sub-dword elements written one by one (a transposed staging copy)
            change = (f"its {nbytes}-byte elements go one per lane down a column, so a phase's lanes "
                      "write the same banks whatever the padding: stage the tile untransposed and "
                      "read the operand transposed (load_fragment(..., transposed=True)), or gather "
                      "a dword (two 16-bit elements) per lane before writing")
        found.append(Advice(
            "lds_conflicts", _where(worst),
            f"LDS bank conflicts: this access ({_mnemonic(worst)}) costs {worst.lds_conflicts} conflict "
            f"cycles ({worst.lds_conflicts / worst.executions:.0f} an issue; {conflicts / lds_cycles:.0%} "
            f"of all LDS cycles): the lanes of one phase hit the same banks; {change}",
            conflicts * scale))

    # VALU-bound
    if part == "compute (valu)":
        by_line: dict[str, list] = {}
        for l in lines:
            if l.cls == "valu":
                by_line.setdefault(_where(l), []).append(l)
        where, group = max(by_line.items(), key=lambda kv: sum(_serial(l, costs) for l in kv[1]))
        cycles = sum(_serial(l, costs) for l in group)
        valu_total = sum(_serial(l, costs) for l in lines if l.cls == "valu")
        top = sorted(group, key=lambda l: -_serial(l, costs))[:3]
        names = ", ".join(f"{_mnemonic(l)} x{l.executions}" for l in top)
        if any(_TRANSCENDENTAL.match(_mnemonic(l)) for l in top):
            change = ("its transcendentals run at quarter rate: use exp2 with the scale and log2(e) "
                      "folded into one multiply (rocke.dsl.softmax does), compute them once per "
                      "element (not again for the sum), and skip masked elements before them")
        else:
            change = ("use packed math on pairs (v_pk_*), fold constants into one multiply, and do "
                      "per-row work once per row on an AxisVector instead of per element")
        found.append(Advice(
            "valu", where,
            f"VALU-bound: this line issues {cycles / valu_total:.0%} of the VALU cycles ({names}); "
            + change, cycles * scale))

    # MFMA chains too short
    mfma_issues = sum(l.executions for l in lines if l.cls == "mfma")
    busy = model.occupancy.get("matrix_busy", 0.0)
    if mfma_issues and part.startswith("compute") and part != "compute (mfma)" and busy < MFMA_BUSY:
        runs, run, first = [], 0, None
        for l in profile.lines:
            if l.cls == "mfma":
                run, first = run + 1, first or l
            elif l.cls in _STALL_POINTS and run:
                runs.append((run, l, first))
                run, first = 0, None
        weight = sum(stop.executions for _, stop, _ in runs)
        chain = sum(n * stop.executions for n, stop, _ in runs) / weight if weight else float("inf")
        if chain < SHORT_CHAIN:
            n, stop, mfma = min(runs, key=lambda r: (r[0], -r[1].executions))
            found.append(Advice(
                "mfma_chains", _where(mfma),
                f"MFMA chains too short: the MFMAs issue {chain:.1f} at a time on average before a "
                f"wait (this one: {n}, then {_mnemonic(stop)} at {_where(stop)}), so the matrix pipes "
                f"are busy {busy:.0%} of the time; issue independent MFMAs back to back -- load the "
                "operands of a whole K step first, give each wave more accumulator tiles (a larger "
                "tile per warp), and read an accumulator only after the chain",
                sum(_serial(l, costs) for l in lines if l.cls in ("s_nop", "s_waitcnt")) * scale))
    return sorted(found, key=lambda a: -a.cycles)
