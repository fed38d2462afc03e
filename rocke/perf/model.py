"""A model of MI300X (or MI355X) time from exact emulator counters: "modelled MI300X time"
("modelled MI355X time" with `costs=rocke.arch.costs.MI355X`), never GPU time. Every constant is
the `Costs` record's (rocke/arch/costs.py): the target's CUs, occupancy, clocks, rates.

Inputs: a launch's counters (rocke.emu.profile.LaunchProfile, per workgroup per mnemonic) and
the timing facts of rocke.arch.costs (each with its source there). The model:

1. occupancy from the code object (rocke.arch.occupancy_rules): workgroups per CU, `slots`;
2. per workgroup, in cycles:
   - its CU demand: the most loaded of the CU's shared resources when its waves spread over
     the 4 SIMDs -- VALU passes (transcendentals 4 passes), MFMA pipe cycles (passes x 4), the
     scalar unit (one SALU/SMEM/branch/wait issue a clock per CU), LDS (its phases incl.
     bank-conflict cycles, 128 B a clock), the address unit (64-byte segments, one a clock);
   - its serial path: one wave's instruction stream, each instruction at least one 4-cycle issue
     slot (VALU/MFMA their pipe time), plus the vector-memory latency the wave's own work did
     not cover (the profiler replays each wave's timeline: a `s_waitcnt vmcnt(N)` stalls for
     what is left of the awaited load's round trip; profiles without that replay take one
     round trip per counted round trip, or per `s_waitcnt vmcnt`);
   - its duration when `c` workgroups share the CU (c = min(slots, ceil(workgroups / CUs))):
     max(serial path, c x CU demand);
   - its DRAM queue: the workgroups resident at once (`resident` = min(workgroups, CUs x
     slots)) each move their share of the footprint (in proportion to the global bytes each
     requests) through the one HBM, so by Little's law a round trip that waits on those bytes
     lasts at least resident x share / achievable bandwidth, not the unloaded round trip
     (unequal shares: fair sharing, a workgroup's last byte after sum_j min(share_j, its share);
     a workgroup that loads nothing waits on nothing; with `order=`, each sample weighs in the
     resident set as its dispatched share of the launch, not as one sample of several). The
     path already holds one round trip of that wait (its exposed latency, at most one round
     trip); the rest is added. ASSUMPTION: a workgroup's unique bytes move in one exposed phase
     (as a tile kernel's Q load and output store do; workgroups of equal work start together
     and stay in step). It is zero whenever the resident workgroups' bytes fit the
     bandwidth-delay product (small launches), and it is what makes a large launch of short
     workgroups slower per FLOP than one of long workgroups (benchmarks/calibration.py);
3. the schedule: workgroups in dispatch order (x fastest) go to the first free of
   CUs x slots (rounds and the tail fall out of this); compute time = the last one's end, in
   cycles of the engine clock the kernel's matrix load sustains (`Costs.effective_clock_hz`:
   the boost clock when the matrix pipes idle, the clock AMD's max-achievable FLOPs imply
   when they are saturated; the DRAM queue is in seconds, so the clock and the schedule are
   solved together by a few fixed-point steps);
4. memory: DRAM time = footprint (unique bytes read + written) / achievable HBM bandwidth;
   L2 time = requested segment bytes / aggregate L2 bandwidth;
5. modelled time = max(compute, DRAM, L2) + launch overhead; binding = the largest term (for
   compute: its largest part). Speed-of-light bound = the largest of the perfectly balanced
   MFMA, VALU, LDS time over all SIMDs/CUs and footprint / peak HBM, plus launch overhead.

A profile from a launch over a sample of a grid (the first workgroups: same kernel, full-size
arguments, a smaller grid) can stand for the whole grid: `grid=` names the full grid, the
sampled workgroups' costs repeat over it, and `footprint=` gives the full launch's DRAM bytes.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from rocke.arch.costs import MI300X, Costs
from rocke.arch.occupancy_rules import occupancy

LABEL = MI300X.label                # "modelled MI300X time"; a Modelled carries its own
# LDS phases as rocke.emu.profile counts them: gfx942's 32 banks of 4 bytes a clock; a target that
# serves LDS faster (MI355X) takes proportionally fewer cycles for them (rocke/arch/costs.py)
PROFILED_LDS_BYTES_PER_CLOCK = MI300X.lds_bytes_per_clock_cu
VM_WAIT = "s_waitcnt vmcnt"      # rocke.emu.profile's bucket of waits on vector memory
_SCALAR = ("salu", "smem", "branch", "s_waitcnt", "s_barrier", "s_nop", "other")


@dataclass
class Modelled:
    """The model's answer for one launch (times in microseconds, all modelled)."""
    us: float
    bound_us: float
    binding: str
    parts_us: dict = field(default_factory=dict)     # every term of the max, and the bound's
    occupancy: dict = field(default_factory=dict)
    workgroups: int = 0
    label: str = LABEL

    def as_dict(self) -> dict:
        return {"label": self.label, "us": round(self.us, 3), "bound_us": round(self.bound_us, 3),
                "binding": self.binding,
                "parts_us": {k: round(v, 3) for k, v in self.parts_us.items()},
                "occupancy": self.occupancy, "workgroups": self.workgroups}

    def __str__(self):
        return (f"{self.label}: {self.us:.2f} us (speed-of-light bound {self.bound_us:.2f} us, "
                f"bound by {self.binding})")


def _bucket_costs(profile, costs: Costs):
    """Per-bucket cost vectors (cycles per issue): VALU pipe, MFMA pipe, scalar unit, serial."""
    valu, mfma, scalar, serial, wait = [], [], [], [], []
    for name, cls in zip(profile.buckets, profile.bucket_classes):
        v = m = s = 0
        if cls == "valu":
            v = costs.pass_cycles * costs.valu_passes(name)
        elif cls == "mfma":
            m = costs.mfma_cycles(name)
        elif cls in _SCALAR:
            s = 1
        valu.append(v)
        mfma.append(m)
        scalar.append(s)
        serial.append(costs.serial_cycles(name, cls))
        wait.append(1 if name == VM_WAIT else 0)
    return tuple(np.array(a, np.float64) for a in (valu, mfma, scalar, serial, wait))


def _exposed_latency(profile, costs: Costs, vm_waits: np.ndarray) -> np.ndarray:
    """Vector-memory stall cycles per workgroup (summed over its waves): the profiler's replay of
    each wave's timeline at this round trip (latency its own work did not cover), else one full
    round trip per counted round trip, else per vmcnt wait (a hand-built profile)."""
    latency = costs.memory_latency_cycles
    if latency in profile.vm_latencies and profile.wg_vm_stall.size:
        return profile.wg_vm_stall[:, profile.vm_latencies.index(latency)].astype(np.float64)
    trips = profile.wg_vm_round_trips.astype(np.float64) \
        if profile.wg_vm_round_trips.size else vm_waits
    return trips * latency


def matrix_ceiling_us(flops: float, costs: Costs = MI300X) -> float:
    """The least modelled time (us) of any launch that does `flops` of dense f16/bf16 matrix
    work on `costs`' GPU: its compute term is at least the work at `Costs.max_matrix_flops`
    (the schedule's cycles at the clock its matrix load allows), and every modelled time adds
    the launch overhead to its largest term. A bound on what any kernel can reach in this
    model, not a prediction."""
    if not flops >= 0:
        raise ValueError(f"flops: a non-negative count, got {flops}")
    return (flops / costs.max_matrix_flops + costs.launch_overhead_s) * 1e6


_CLOCK_STEPS = 6       # fixed-point steps of clock <-> schedule (converged to <0.1 % on the anchors)


def dram_queue_seconds(resident, share_bytes, costs: Costs = MI300X):
    """Little's law on the HBM: `resident` workgroups that each wait on `share_bytes` of DRAM
    traffic at once see a round trip of at least resident x share / achievable bandwidth ([BW]
    in rocke.arch.costs). The model adds what exceeds the round trip the path already holds."""
    return resident * share_bytes / costs.hbm_achievable_bytes_s


def workgroup_shares(requested: np.ndarray, footprint: float) -> np.ndarray:
    """Each workgroup's share of the DRAM footprint, in proportion to the global bytes it
    requests (equal shares when none are counted): a workgroup that loads nothing waits on none."""
    total = float(requested.sum())
    if total <= 0:
        return np.full(requested.shape, footprint / max(1, requested.size))
    return footprint * requested / total


def shared_bytes(shares: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Bytes the HBM delivers before each workgroup's last byte when the workgroups' requests
    share it fairly: sum over j of min(share_j, share_i) (processor sharing; all equal: n x
    share). `weights`: how many resident workgroups each share stands for (default one each)."""
    if weights is None:
        order = np.sort(shares)
        below = np.concatenate(([0.0], np.cumsum(order)))
        k = np.searchsorted(order, shares, side="left")
        return below[k] + shares * (shares.size - k)
    by_share = np.argsort(shares, kind="stable")
    order, weight = shares[by_share], np.asarray(weights, np.float64)[by_share]
    below = np.concatenate(([0.0], np.cumsum(order * weight)))
    at_or_above = np.concatenate((np.cumsum(weight[::-1])[::-1], [0.0]))
    k = np.searchsorted(order, shares, side="left")
    return below[k] + shares * at_or_above[k]


def _schedule(duration: np.ndarray, total: int, slots: int, order=None) -> float:
    """End of the dispatch: `duration` (sampled workgroups, repeated over `total` in order, or
    picked by `order`) go to the first free of `slots` CU slots."""
    order = np.resize(duration, total) if order is None else duration[order]
    heap = [0.0] * min(total, slots)
    heapq.heapify(heap)
    end = 0.0
    for d in order:
        start = heapq.heappop(heap)
        finish = start + d
        end = max(end, finish)
        heapq.heappush(heap, finish)
    return end


def model_time(profile, *, costs: Costs = MI300X, grid=None, footprint: int | None = None,
               order=None) -> Modelled:
    """Modelled time of the launch `profile` counts on `costs`' GPU (see the module doc).
    `order` (with `grid`): for a launch whose workgroups differ by kind (a split launch's whole
    work items and pieces), the sampled workgroup each dispatched one repeats, in dispatch order
    (len = the grid's workgroups); default: the samples in turn."""
    t = costs.target
    wpw = profile.waves_per_workgroup
    threads = profile.block[0] * profile.block[1] * profile.block[2]
    r = profile.resources
    occ = occupancy(vgprs=r["vgprs"], agprs=r["agprs"], sgprs=r["sgprs"],
                    lds_bytes=r["lds_bytes"], workgroup_size=threads, target=t)
    slots = max(1, occ.workgroups_per_cu)

    sampled = profile.wg_issues.shape[0]
    total = sampled if grid is None else math.prod(grid)
    if order is not None:
        order = np.asarray(order, dtype=np.int64)
        if grid is None or order.shape != (total,) or (order.size and (
                order.min() < 0 or order.max() >= sampled)):
            raise ValueError(f"order: one sampled workgroup (0..{sampled - 1}) for each of the "
                             f"grid's {total} workgroups, with grid=")
        counts = np.bincount(order, minlength=sampled).astype(np.float64)
    elif total < sampled:
        raise ValueError(f"grid {grid} has fewer workgroups ({total}) than the profile ({sampled})")
    valu, mfma, scalar, serial, wait = _bucket_costs(profile, costs)
    issues = profile.wg_issues.astype(np.float64)
    bytes_ = profile.wg_global_bytes.astype(np.float64)
    coalescing = (profile.segments64 * costs.segment_bytes / max(1, profile.global_read_bytes
                  + profile.global_write_bytes + profile.global_atomic_bytes))
    simds = t.simds_per_cu
    lds_scale = PROFILED_LDS_BYTES_PER_CLOCK / costs.lds_bytes_per_clock_cu
    demand = {
        "valu": issues @ valu / simds,
        "mfma": issues @ mfma / simds,
        "scalar": issues @ scalar,
        "lds": profile.wg_lds_cycles.astype(np.float64) * lds_scale,
        "address": bytes_ * coalescing / costs.segment_bytes / costs.segments_per_clock_cu,
    }
    exposed = _exposed_latency(profile, costs, issues @ wait)
    path = (issues @ serial + exposed) / wpw
    cu_demand = np.max(np.stack(list(demand.values())), axis=0)
    share = min(slots, -(-total // t.cu_count))
    duration = np.maximum(path, share * cu_demand)

    if footprint is None:
        footprint = profile.unique_read_bytes + profile.unique_write_bytes
        sample_footprint = footprint
    elif order is not None:     # the samples' share of the launch's bytes
        sample_footprint = footprint * float(bytes_.sum()) / max(float(bytes_ @ counts), 1.0)
    else:
        sample_footprint = footprint * sampled / total
    resident = min(total, t.cu_count * slots)
    shares = workgroup_shares(bytes_, sample_footprint)
    if order is None:           # each sample stands for resident / sampled of the resident set
        queue_s = dram_queue_seconds(resident / sampled, shared_bytes(shares), costs)
    else:                       # ... or for its part of the launch's mix (its dispatched count)
        queue_s = dram_queue_seconds(1.0, shared_bytes(shares, resident * counts / total), costs)
    # the part of the queue each workgroup's path already waits (at most one round trip)
    covered = np.minimum(costs.memory_latency_cycles, exposed / wpw)
    scale = total / sampled

    def launch_sum(per_workgroup) -> float:
        """A per-sampled-workgroup count summed over the launch."""
        return float(per_workgroup @ counts) if order is not None else float(per_workgroup.sum()) * scale
    matrix_cycles = launch_sum(issues @ mfma) / (t.cu_count * t.simds_per_cu)
    clock = costs.clock_hz
    for _ in range(_CLOCK_STEPS if queue_s.any() else 1):
        # the engine clock follows the matrix pipes' load (rocke.arch.costs, [MAF]): their busy
        # share of the schedule, averaged over every SIMD of the GPU
        queued = duration + np.maximum(0.0, queue_s * clock - covered)
        end = _schedule(queued, total, t.cu_count * slots, order)
        matrix_busy = matrix_cycles / end if end > 0 else 0.0
        clock = costs.effective_clock_hz(matrix_busy)
    queue_cycles = float(np.maximum(0.0, queue_s * clock - covered).max(initial=0.0))
    compute_s = end / clock

    dram_s = footprint / costs.hbm_achievable_bytes_s
    l2_scale = scale if order is None else launch_sum(bytes_) / max(float(bytes_.sum()), 1.0)
    l2_s = profile.segments64 * costs.segment_bytes * l2_scale / costs.l2_bytes_s
    launch_s = costs.launch_overhead_s
    # which part of the compute schedule dominates: the summed demand vs the serial path
    totals = {k: float(v.sum()) * share for k, v in demand.items()}
    totals["latency"] = float(path.sum())
    # the DRAM queue inside the schedule: a launch it dominates is bound by DRAM
    totals["dram"] = float(np.maximum(0.0, queue_s * clock - covered).sum())
    compute_part = max(totals, key=totals.get)
    terms = {f"compute ({compute_part})": compute_s, "dram": dram_s, "l2": l2_s}
    binding = max(terms, key=terms.get)
    if binding == "compute (dram)":
        binding = "dram"
    us = (max(terms.values()) + launch_s) * 1e6

    cus = t.cu_count
    sol = {
        "mfma": launch_sum(issues @ mfma) / (cus * simds) / costs.clock_hz,
        "valu": launch_sum(issues @ valu) / (cus * simds) / costs.clock_hz,
        "lds": launch_sum(profile.wg_lds_cycles.astype(np.float64)) * lds_scale / cus / costs.clock_hz,
        "hbm": footprint / costs.hbm_peak_bytes_s,
    }
    bound_us = (max(sol.values()) + launch_s) * 1e6
    parts = {**{k: v * 1e6 for k, v in terms.items()}, "launch": launch_s * 1e6,
             "dram_queue_per_workgroup": queue_cycles / clock * 1e6,
             **{f"sol_{k}": v * 1e6 for k, v in sol.items()}}
    return Modelled(us, bound_us, binding, parts,
                    {"waves_per_simd": occ.waves_per_simd, "workgroups_per_cu": slots,
                     "limiter": occ.limiter, "unified_vgprs": occ.unified_vgprs,
                     "matrix_busy": round(matrix_busy, 3), "clock_ghz": round(clock / 1e9, 3)},
                    total, costs.label)
