"""Exact per-launch counters (opt-in: `launch(..., profile=True)`).

The emulator sees every executed instruction with its EXEC mask and addresses; this module turns
that into hardware-style counters. It hooks in two places only, so the default launch pays
nothing: each decoded instruction's closure is wrapped to count its issue (`instrument`), and a
`Pool` subclass records the addresses of global and LDS accesses (`ProfilingPool`).

Counting rules (the readings this module commits to; tests in tests/emu/test_profile.py):
- an issue is one wave executing one instruction; lanes are the EXEC lanes at issue;
- global/buffer/flat: bytes requested = active lanes x access size; segments = the distinct
  64-byte and 128-byte aligned blocks one wave's access touches (per issue, per wave);
  unique bytes = the union of the byte ranges read / written over the launch (the DRAM
  footprint when every byte is fetched once); scalar (SMEM) loads count separately and are left
  out of the footprint; LDS-DMA (`buffer_load ... lds`) counts its global read and its LDS
  bytes as `lds_dma_bytes` (contiguous M0 + 4 * lane: no bank conflicts);
- LDS bank conflicts follow gfx942's LDS: 32 banks of 4 bytes (rocke.arch GFX942.lds_banks),
  a wave's access served in phases of lanes by access width: b8/b16/b32 two phases of 32 lanes
  (T0-31, T32-63), b64 four of 16 lanes, b96/b128 eight of 8 lanes; ds_read_b128's phases
  pair non-adjacent lane quads (T0-3 + T20-23, T32-35 + T52-55, T4-7 + T16-19, ...), as measured
  on MI300X by nod-ai's empirical LDS study (amd-shark-ai docs/empirical-lds/cdna3info.md, with
  rocprof SQ_LDS_BANK_CONFLICT); ds_write_b128 uses adjacent 8-lane groups (AMD CK Tile docs,
  "Understanding AMD GPU LDS and Bank Conflicts"). Within a phase, lanes that read the same dword
  share it (broadcast); distinct dwords in one bank serialize. A phase costs max over banks of
  its distinct dwords (at least 1); its conflict cycles are that minus 1 (so a fully conflicted
  b32/b64/b128 access counts 62/60/56, the study's saturated counts). ds_read2/ds_write2 count as
  two accesses of their element width; ds_swizzle and issue as DS but move no LDS bytes.
- vector-memory round trips (`vm_round_trips`, per workgroup): a wave's `s_waitcnt vmcnt(..)`
  counts one when the wave issued a vector-memory instruction since its previous vmcnt wait;
  the later waits of a cascade (vmcnt(3), (2), (1), (0) on loads issued together) wait on
  requests already in flight and count none.
- exposed vector-memory latency (`wg_vm_stall`, per workgroup, one column per round trip of
  rocke.arch.costs.PROFILED_LATENCIES): each wave's own timeline is replayed as it issues, every
  instruction holding the wave for its serial cycles (`Costs.serial_cycles`); a
  `s_waitcnt vmcnt(N)` waits for the youngest vector-memory instruction that must be done (all
  but the wave's N most recent), and stalls the wave for what is left of that instruction's
  round trip after the work issued since it. A load issued one iteration ahead
  (software pipelining) is thus charged only the latency its iteration did not cover.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import re

import numpy as np

from rocke.arch.costs import MI300X, PROFILED_LATENCIES
from .machine import Pool
from .program import CLASSES, DecodedKernel

LDS_BANKS = 32
LDS_BANK_BYTES = 4
SEGMENTS = (64, 128)
# issue classes reported, finer than the scheduler's: control and waits split out
SPLIT = {"s_waitcnt": "s_waitcnt", "s_barrier": "s_barrier", "s_nop": "s_nop"}
REPORT_CLASSES = ("salu", "valu", "mfma", "ds", "vmem", "smem", "branch", "s_waitcnt",
                  "s_barrier", "s_nop", "other")
_CLASS_NAME = {0: "salu", 1: "valu", 2: "mfma", 3: "ds", 4: "vmem", 5: "smem", 6: "other"}
VM_WAIT = "s_waitcnt vmcnt"   # the per-workgroup bucket of waits on vector memory
_VMEM_ISSUE, _VM_WAIT_ISSUE = 1, 2   # what an instruction does to a wave's round-trip state
_VMCNT = re.compile(r"vmcnt\((\d+)\)")
_RING = 64          # outstanding vector-memory instructions a wave's timeline remembers (vmcnt < 64)
_COMPACT_AT = 1 << 22     # footprint intervals kept before merging them


def report_class(mnemonic: str, cls: int) -> str:
    """The counter class of one instruction: the scheduler's class with waits, barriers, nops
    and branches split out."""
    if mnemonic in SPLIT:
        return SPLIT[mnemonic]
    if mnemonic.startswith("s_waitcnt"):
        return "s_waitcnt"
    if mnemonic.startswith("s_branch") or mnemonic.startswith("s_cbranch") or mnemonic in (
            "s_setpc_b64", "s_swappc_b64", "s_call_b64", "s_getpc_b64"):
        return "branch"
    return _CLASS_NAME[cls]


# ds_read_b128's eight phases as lane quads (see the module doc)
_READ_B128_QUADS = ((0, 5), (8, 13), (1, 4), (9, 12), (2, 7), (10, 15), (3, 6), (11, 14))
READ_B128_ORDER = np.array([4 * q + i for pair in _READ_B128_QUADS for q in pair for i in range(4)])


def lds_passes(nbytes: int) -> int:
    """Lanes served per LDS phase for an access of `nbytes` per lane (see the module doc)."""
    if nbytes > 8:
        return 8
    return 16 if nbytes > 4 else 32


def lds_access_cycles(addr: np.ndarray, active: np.ndarray, nbytes: int,
                      read: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(cycles, conflict cycles) per wave of one LDS access: `addr` (n, 64) byte addresses,
    `active` (n, 64) lanes that access."""
    if nbytes > 8 and read:
        addr, active = addr[:, READ_B128_ORDER], active[:, READ_B128_ORDER]
    n = addr.shape[0]
    lanes_per_pass = lds_passes(nbytes)
    passes = 64 // lanes_per_pass
    words = max(1, -(-nbytes // LDS_BANK_BYTES))
    dword = addr.astype(np.int64) // LDS_BANK_BYTES
    # every dword each lane touches, grouped by (wave, pass)
    per_word = (dword[:, :, None] + np.arange(words)).reshape(n * passes, lanes_per_pass * words)
    on = np.repeat(active.reshape(n * passes, lanes_per_pass), words, axis=1)
    group = np.broadcast_to(np.arange(n * passes)[:, None], per_word.shape)
    keys = np.unique((group[on] << 32) | (per_word[on] & 0xFFFFFFFF))   # distinct dwords a pass
    load = np.zeros((n * passes, LDS_BANKS), np.int64)
    np.add.at(load, (keys >> 32, (keys & 0xFFFFFFFF) % LDS_BANKS), 1)
    worst = load.max(axis=1).reshape(n, passes)
    cycles = worst.sum(axis=1)
    conflicts = np.maximum(worst - 1, 0).sum(axis=1)
    return cycles, conflicts


def _union_bytes(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of byte intervals [start, end) as sorted disjoint intervals."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], reach[last]


class _Footprint:
    """Union of the byte ranges touched (read or written)."""

    def __init__(self):
        self.starts, self.ends, self.count = [], [], 0

    def add(self, starts: np.ndarray, nbytes: int):
        starts = starts.astype(np.int64, copy=False)
        self.starts.append(starts)
        self.ends.append(starts + nbytes)
        self.count += len(starts)
        if self.count > _COMPACT_AT:
            self._compact()

    def _compact(self):
        s, e = _union_bytes(np.concatenate(self.starts), np.concatenate(self.ends))
        self.starts, self.ends, self.count = [s], [e], len(s)

    def total(self) -> int:
        if not self.starts:
            return 0
        self._compact()
        return int((self.ends[0] - self.starts[0]).sum())


@dataclass
class LineCount:
    """One assembly line's counts."""
    index: int
    line_no: int
    text: str
    cls: str
    executions: int = 0        # wave issues
    lanes: int = 0             # active lanes summed over issues
    lds_bytes: int = 0
    lds_cycles: int = 0        # LDS passes incl. conflicts
    lds_conflicts: int = 0     # extra cycles from bank conflicts
    global_bytes: int = 0      # vector global/buffer/flat bytes requested (reads, writes, atomics)
    segments64: int = 0
    segments128: int = 0
    branch_target: bool = False   # some branch may land here (a basic block starts)
    source: str | None = None     # the builder's `file:line` (the assembly's `.loc`), if known
    # exposed vector-memory stall cycles at the MI300X round trip (summed over waves): at a
    # `s_waitcnt vmcnt` the stall it took, at a vector-memory instruction the stall charged to
    # it (it was the youngest load a stalled wait needed)
    vm_stall: float = 0.0


@dataclass
class LaunchProfile:
    """Exact counters of one launch (see the module doc for the rules)."""
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    workgroups: int
    waves_per_workgroup: int
    resources: dict                    # vgprs, agprs, sgprs, lds_bytes (static + dynamic)
    lines: list[LineCount]
    issues: dict[str, int]             # per report class (REPORT_CLASSES)
    lanes: dict[str, int]              # active lanes per report class
    opcodes: dict[str, tuple[int, int]]   # mnemonic -> (issues, lanes)
    lds_bytes: int = 0
    lds_cycles: int = 0
    lds_bank_conflicts: int = 0        # conflict cycles (as SQ_LDS_BANK_CONFLICT counts cycles)
    lds_dma_bytes: int = 0
    global_read_bytes: int = 0
    global_write_bytes: int = 0
    global_atomic_bytes: int = 0
    segments64: int = 0
    segments128: int = 0
    unique_read_bytes: int = 0
    unique_write_bytes: int = 0
    smem_bytes: int = 0
    # per workgroup (flat id, x fastest): issues per mnemonic (`buckets`), LDS cycles, bytes
    buckets: tuple[str, ...] = ()
    bucket_classes: tuple[str, ...] = ()   # report class of each bucket
    wg_issues: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    wg_lds_cycles: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    wg_global_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # vmcnt waits that follow a vector-memory issue of the same wave (see the module doc);
    # empty when not counted (hand-built profiles): the model then takes every vmcnt wait
    wg_vm_round_trips: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # exposed vector-memory stall cycles per workgroup (summed over its waves), one column per
    # round trip in `vm_latencies` (see the module doc); empty when not replayed
    vm_latencies: tuple[int, ...] = ()
    wg_vm_stall: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float64))

    @property
    def mfma(self) -> dict[str, int]:
        """MFMA issues per atom (mnemonic)."""
        return {m: c for m, (c, _) in self.opcodes.items() if m.startswith("v_mfma")}

    def counters(self) -> dict:
        """The flat counter set (names fixed for scripts; see `rocke profile --json`)."""
        out = {name: self.issues.get(name, 0) for name in REPORT_CLASSES}
        out.update(lane_instructions=sum(self.lanes.get(c, 0) for c in ("valu", "mfma", "ds", "vmem")),
                   lds_bytes=self.lds_bytes, lds_cycles=self.lds_cycles,
                   lds_bank_conflicts=self.lds_bank_conflicts, lds_dma_bytes=self.lds_dma_bytes,
                   global_read_bytes=self.global_read_bytes,
                   global_write_bytes=self.global_write_bytes,
                   global_atomic_bytes=self.global_atomic_bytes,
                   segments64=self.segments64, segments128=self.segments128,
                   unique_read_bytes=self.unique_read_bytes,
                   unique_write_bytes=self.unique_write_bytes, smem_bytes=self.smem_bytes,
                   vm_round_trips=int(self.wg_vm_round_trips.sum()),
                   mfma_by_atom=dict(sorted(self.mfma.items())))
        return out

    def annotate(self, limit_blocks: int | None = None) -> str:
        """The kernel's assembly with counts beside each line, hottest basic blocks first."""
        blocks = _blocks(self.lines)
        blocks.sort(key=lambda b: -sum(l.executions for l in b))
        if limit_blocks is not None:
            blocks = blocks[:limit_blocks]
        total = sum(l.executions for l in self.lines) or 1
        out = [f"{'issues':>9} {'lanes':>10} {'lds B':>8} {'bank cf':>7} {'glob B':>9} "
               f"{'seg64':>6}  line  instruction"]
        for b in blocks:
            share = sum(l.executions for l in b) / total
            out.append(f"; block at line {b[0].line_no}: {share:.1%} of issues")
            for l in b:
                extra = (f"{l.lds_bytes:>8} {l.lds_conflicts:>7} " if l.cls == "ds" else " " * 17) \
                    + (f"{l.global_bytes:>9} {l.segments64:>6}" if l.cls == "vmem" else " " * 16)
                out.append(f"{l.executions:>9} {l.lanes:>10} {extra}  {l.line_no:>4}  {l.text}")
        return "\n".join(out)


def _blocks(lines: list[LineCount]) -> list[list[LineCount]]:
    """Basic blocks: a block starts at a branch target, after a branch or the end of the
    program, or where the execution count changes (waves leaving a block early)."""
    blocks: list[list[LineCount]] = []
    for l in lines:
        if not blocks or l.branch_target or l.executions != blocks[-1][-1].executions \
                or blocks[-1][-1].cls == "branch" or blocks[-1][-1].text.startswith("s_endpgm"):
            blocks.append([])
        blocks[-1].append(l)
    return blocks


class Profiler:
    """Collects the counters of one launch; `instrument` wraps a decoded kernel's closures."""

    def __init__(self, kernel: DecodedKernel, grid, block, total_wgs: int, waves_per_wg: int,
                 resources: dict):
        self.kernel = kernel
        self.grid, self.block = grid, block
        self.total_wgs, self.waves_per_wg = total_wgs, waves_per_wg
        self.resources = resources
        n = len(kernel.code)
        self.executions = np.zeros(n, np.int64)
        self.lanes = np.zeros(n, np.int64)
        self.lds_bytes = np.zeros(n, np.int64)
        self.lds_cycles = np.zeros(n, np.int64)
        self.lds_conflicts = np.zeros(n, np.int64)
        self.global_bytes = np.zeros(n, np.int64)
        self.segments = {s: np.zeros(n, np.int64) for s in SEGMENTS}
        self.cls = ["other"] * n
        buckets: list[str] = []     # per-workgroup counts are kept per mnemonic
        classes: list[str] = []
        self.bucket_of = np.zeros(n, np.int64)
        self.round_trip_role = np.zeros(n, np.int8)
        self.serial = np.zeros(n, np.float64)     # cycles each instruction holds its wave
        self.vm_keep = np.zeros(n, np.int64)      # N of a `s_waitcnt vmcnt(N)`
        for i, d in enumerate(kernel.code):
            if d is None:
                continue
            name = report_class(d.instr.mnemonic, d.cls)
            self.cls[i] = name
            self.serial[i] = MI300X.serial_cycles(d.instr.mnemonic, name)
            key = d.instr.mnemonic
            if name == "s_waitcnt" and "vmcnt" in d.instr.text:
                key = VM_WAIT        # a wait on vector memory: a round trip the wave may expose
                self.round_trip_role[i] = _VM_WAIT_ISSUE
                self.vm_keep[i] = int(_VMCNT.search(d.instr.text).group(1))
            elif name == "vmem":
                self.round_trip_role[i] = _VMEM_ISSUE
            if key not in buckets:
                buckets.append(key)
                classes.append(name)
            self.bucket_of[i] = buckets.index(key)
        self.buckets, self.bucket_classes = tuple(buckets), tuple(classes)
        self.wg_issues = np.zeros((total_wgs, len(buckets)), np.int64)
        self.wg_lds_cycles = np.zeros(total_wgs, np.int64)
        self.wg_global_bytes = np.zeros(total_wgs, np.int64)
        self.wg_vm_round_trips = np.zeros(total_wgs, np.int64)
        self.latencies = np.array(PROFILED_LATENCIES, np.float64)
        self.wg_vm_stall = np.zeros((total_wgs, len(PROFILED_LATENCIES)), np.float64)
        self._model_column = PROFILED_LATENCIES.index(MI300X.memory_latency_cycles)
        self.line_vm_stall = np.zeros(n, np.float64)     # see LineCount.vm_stall
        self.read_bytes = self.write_bytes = self.atomic_bytes = 0
        self.smem_bytes = self.lds_dma_bytes = 0
        self.reads, self.writes = _Footprint(), _Footprint()
        self._pending: list = []     # (index, {segment: keys}) of the running issue

    # -------------------------------------------------------------- the issue hook
    def instrument(self) -> DecodedKernel:
        """A copy of the decoded kernel whose closures count their issues first."""
        code = [None if d is None else dataclasses.replace(d, run=self._wrap(i, d))
                for i, d in enumerate(self.kernel.code)]
        return dataclasses.replace(self.kernel, code=code)

    def _wrap(self, index, d):
        run, issue = d.run, self.issue
        if d.control is None:
            def counted(P, sel, n):
                issue(index, P, sel, n)
                return run(P, sel, n)
        else:
            def counted(P, sel, n, p):
                issue(index, P, sel, n)
                return run(P, sel, n, p)
        return counted

    def issue(self, index, P, sel, n):
        if self._pending:
            self._flush()
        self.executions[index] += n
        self.lanes[index] += P.exec_state(sel)[2]
        wgs = P.profile_wg_base + P.wg_of[sel]
        np.add.at(self.wg_issues, (wgs, self.bucket_of[index]), 1)
        self.current = index
        role = self.round_trip_role[index]
        if role:
            in_flight = P.vm_in_flight      # per wave: vector memory issued since its last wait
            if in_flight is None:
                in_flight = P.vm_in_flight = np.zeros(P.num_waves, bool)
            if role == _VM_WAIT_ISSUE:
                np.add.at(self.wg_vm_round_trips, wgs[in_flight[sel]], 1)
                in_flight[sel] = False
            else:
                in_flight[sel] = True
        self._timeline(index, role, P, sel, wgs)

    def _timeline(self, index, role, P, sel, wgs):
        """Advance the issuing waves' own timelines (see the module doc: exposed latency)."""
        tl = P.vm_timeline
        if tl is None:
            tl = P.vm_timeline = _Timeline(P.num_waves, len(self.latencies))
        waves = np.arange(P.num_waves)[sel]
        if role == _VMEM_ISSUE:
            full = waves[tl.count[waves] >= _RING]      # hardware caps vmcnt below the ring
            tl.head[full] = (tl.head[full] + 1) % _RING
            tl.count[full] -= 1
            pos = (tl.head[waves] + tl.count[waves]) % _RING
            tl.ring[waves, :, pos] = tl.clock[waves, None] + tl.stall[waves]
            tl.ring_index[waves, pos] = index
            tl.count[waves] += 1
        elif role == _VM_WAIT_ISSUE:
            keep = self.vm_keep[index]
            due = tl.count[waves] > keep
            if due.any():
                w = waves[due]
                youngest = (tl.head[w] + tl.count[w] - keep - 1) % _RING
                issued = tl.ring[w, :, youngest]
                covered = tl.clock[w, None] + tl.stall[w] - issued
                exposed = np.maximum(0.0, self.latencies - covered)
                tl.stall[w] += exposed
                np.add.at(self.wg_vm_stall, wgs[due], exposed)
                mine = exposed[:, self._model_column]
                self.line_vm_stall[index] += mine.sum()
                np.add.at(self.line_vm_stall, tl.ring_index[w, youngest], mine)
                tl.head[w] = (tl.head[w] + tl.count[w] - keep) % _RING
                tl.count[w] = keep
        tl.clock[waves] += self.serial[index]

    # -------------------------------------------------------------- memory hooks
    def vector_global(self, P, sel, addresses, nbytes, where, kind):
        m = len(addresses)
        if m == 0:
            return
        index = self.current
        addr = addresses.astype(np.int64)
        total = m * nbytes
        self.global_bytes[index] += total
        if kind == "read":
            self.read_bytes += total
        elif kind == "write":
            self.write_bytes += total
        else:
            self.atomic_bytes += total
        if kind in ("read", "atomic"):
            self.reads.add(addr, nbytes)
        if kind in ("write", "atomic"):
            self.writes.add(addr, nbytes)
        wave = np.nonzero(where)[0] if where is not None else np.zeros(m, np.int64)
        waves = np.arange(P.num_waves)[sel]
        wg = P.profile_wg_base + P.wg_of[waves[wave]]
        np.add.at(self.wg_global_bytes, wg, nbytes)
        keys = {}
        for seg in SEGMENTS:
            lo, hi = addr // seg, (addr + nbytes - 1) // seg
            both = np.concatenate([lo, hi[hi != lo]])
            w = np.concatenate([wave, wave[hi != lo]])
            keys[seg] = (w << 48) | both     # (wave, segment): addresses are 48-bit
        self._pending.append((index, keys))

    def scalar_read(self, addresses, nbytes):
        self.smem_bytes += len(addresses) * nbytes

    def lds(self, P, sel, addr, nbytes, active, dma=False, read=False):
        index = self.current
        count = int(np.count_nonzero(active))
        if dma:
            self.lds_dma_bytes += count * nbytes
            return
        self.lds_bytes[index] += count * nbytes
        cycles, conflicts = lds_access_cycles(np.asarray(addr), active, nbytes, read)
        self.lds_cycles[index] += int(cycles.sum())
        self.lds_conflicts[index] += int(conflicts.sum())
        np.add.at(self.wg_lds_cycles, P.profile_wg_base + P.wg_of[sel], cycles)

    def _flush(self):
        """Segments of the issue just finished (a buffer access may arrive in several parts)."""
        index = self._pending[0][0]
        for seg in SEGMENTS:
            keys = np.concatenate([k[seg] for _, k in self._pending])
            self.segments[seg][index] += len(np.unique(keys))
        self._pending.clear()

    # -------------------------------------------------------------- the result
    def result(self) -> LaunchProfile:
        if self._pending:
            self._flush()
        lines, issues, lanes, opcodes = [], dict.fromkeys(REPORT_CLASSES, 0), \
            dict.fromkeys(REPORT_CLASSES, 0), {}
        code = self.kernel.code
        ran = np.flatnonzero(self.executions)
        last = int(ran.max()) if len(ran) else self.kernel.first
        for i, d in enumerate(code):
            # the kernel's lines up to the last one that ran, and any device code that ran
            if d is None or not (self.kernel.first <= i <= last or self.executions[i]):
                continue
            cls = self.cls[i]
            e, la = int(self.executions[i]), int(self.lanes[i])
            lines.append(LineCount(i, d.instr.line_no, d.instr.text, cls, e, la,
                                   int(self.lds_bytes[i]), int(self.lds_cycles[i]),
                                   int(self.lds_conflicts[i]), int(self.global_bytes[i]),
                                   int(self.segments[64][i]), int(self.segments[128][i]),
                                   bool(self.kernel.is_target[i]), d.instr.source,
                                   float(self.line_vm_stall[i])))
            issues[cls] += e
            lanes[cls] += la
            if e:
                c, l0 = opcodes.get(d.instr.mnemonic, (0, 0))
                opcodes[d.instr.mnemonic] = (c + e, l0 + la)
        return LaunchProfile(
            self.kernel.source.name, self.grid, self.block, self.total_wgs, self.waves_per_wg,
            self.resources, lines, issues, lanes, dict(sorted(opcodes.items())),
            lds_bytes=int(self.lds_bytes.sum()), lds_cycles=int(self.lds_cycles.sum()),
            lds_bank_conflicts=int(self.lds_conflicts.sum()), lds_dma_bytes=self.lds_dma_bytes,
            global_read_bytes=self.read_bytes, global_write_bytes=self.write_bytes,
            global_atomic_bytes=self.atomic_bytes,
            segments64=int(self.segments[64].sum()), segments128=int(self.segments[128].sum()),
            unique_read_bytes=self.reads.total(), unique_write_bytes=self.writes.total(),
            smem_bytes=self.smem_bytes, buckets=self.buckets,
            bucket_classes=self.bucket_classes, wg_issues=self.wg_issues,
            wg_lds_cycles=self.wg_lds_cycles, wg_global_bytes=self.wg_global_bytes,
            wg_vm_round_trips=self.wg_vm_round_trips,
            vm_latencies=tuple(int(c) for c in self.latencies), wg_vm_stall=self.wg_vm_stall)


class _Timeline:
    """Per wave of a pool: serial cycles issued, stall cycles per latency, and the issue times
    (cycles + stall) of its outstanding vector-memory instructions (a ring, oldest at head)."""

    def __init__(self, waves: int, latencies: int):
        self.clock = np.zeros(waves, np.float64)
        self.stall = np.zeros((waves, latencies), np.float64)
        self.ring = np.zeros((waves, latencies, _RING), np.float64)
        self.ring_index = np.zeros((waves, _RING), np.int64)     # the instruction of each entry
        self.head = np.zeros(waves, np.int64)
        self.count = np.zeros(waves, np.int64)


class ProfilingPool(Pool):
    """A Pool whose memory accesses are also reported to a Profiler."""
    profiler: Profiler
    profile_wg_base: int = 0
    vm_in_flight: np.ndarray | None = None   # per wave, for Profiler's round-trip count
    vm_timeline: "_Timeline | None" = None   # per wave, for Profiler's exposed latency

    def global_load(self, ins, sel, addresses, nbytes, where, full, scalar=False):
        if scalar:
            self.profiler.scalar_read(addresses, nbytes)
        else:
            self.profiler.vector_global(self, sel, addresses, nbytes, where, "read")
        return super().global_load(ins, sel, addresses, nbytes, where, full, scalar)

    def global_store(self, ins, sel, addresses, data, where, full):
        self.profiler.vector_global(self, sel, addresses, data.shape[1], where, "write")
        return super().global_store(ins, sel, addresses, data, where, full)

    def global_atomic(self, ins, sel, addresses, dtype, data, cmp, update, ufunc, want_old,
                      where, full):
        self.profiler.vector_global(self, sel, addresses, np.dtype(dtype).itemsize, where,
                                    "atomic")
        return super().global_atomic(ins, sel, addresses, dtype, data, cmp, update, ufunc,
                                     want_old, where, full)

    def lds_read(self, ins, sel, addr, nbytes, active):
        self.profiler.lds(self, sel, addr, nbytes, active, read=True)
        return super().lds_read(ins, sel, addr, nbytes, active)

    def lds_write(self, ins, sel, addr, data, active, dma=False):
        self.profiler.lds(self, sel, addr, data.shape[-1], active, dma)
        return super().lds_write(ins, sel, addr, data, active, dma)

    def lds_atomic(self, ins, sel, addr, dtype, data, cmp, update, ufunc, want_old, active):
        self.profiler.lds(self, sel, addr, np.dtype(dtype).itemsize, active)
        return super().lds_atomic(ins, sel, addr, dtype, data, cmp, update, ufunc, want_old,
                                  active)


def resources_of(source, dynamic_lds: int) -> dict:
    """The code object's register and LDS use, as its metadata states them (the inputs of
    occupancy): unified VGPR count split into arch VGPRs and AGPRs, SGPRs, LDS bytes."""
    meta, desc = source.metadata, source.descriptor
    agprs = int(meta.get(".agpr_count", 0) or 0)
    unified = int(meta.get(".vgpr_count", desc.get("amdhsa_next_free_vgpr", 0)) or 0)
    vgprs = int(desc.get("amdhsa_accum_offset", unified)) if agprs else unified
    return {"vgprs": min(vgprs, 256), "agprs": agprs,
            "sgprs": int(meta.get(".sgpr_count", desc.get("amdhsa_next_free_sgpr", 0)) or 0),
            "lds_bytes": int(desc.get("amdhsa_group_segment_fixed_size",
                                      meta.get(".group_segment_fixed_size", 0)) or 0)
            + int(dynamic_lds)}
