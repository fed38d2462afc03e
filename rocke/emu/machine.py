"""Machine state of a pool of resident workgroups, the batched scheduler, and the checkers."""
from __future__ import annotations

import time

import numpy as np

from rocke import env

from .access import pair_view, pair_words, sgpr_file_shape
from .errors import EmulatorError, LaunchTimeout, LdsFault, LdsRace, LdsUninitialised, MemoryFault
from .memory import AccessFault, GlobalMemory, access_rows, put_rows, take_rows
from .memops import apply_atomics
from .operands import EXEC_LO
from .program import CLASSES, DecodedKernel

RUN, BARRIER, DONE = 0, 1, 2
# backward branches a wave may run ahead of the runnable wave furthest behind (see Pool._run)
FAIR_SLACK = 32
LDS_GRANULE = 16   # bytes: the widest LDS access of one lane; LDS strides are multiples


SPARE_BYTES = 128 << 20   # arrays of finished pools kept for the next ones (per process)
_SPARE_ARRAYS: dict[tuple, list[np.ndarray]] = {}   # (shape, dtype) -> zeroable arrays


def _zeros(shape: tuple, dtype) -> np.ndarray:
    """np.zeros(shape, dtype), in a finished pool's array of that shape when one is spare."""
    spares = _SPARE_ARRAYS.get((shape, np.dtype(dtype)))
    try:
        array = spares.pop()
    except (AttributeError, IndexError):   # none kept (another thread may take the last)
        return np.zeros(shape, dtype)
    array.fill(0)
    return array


def _keep(arrays):
    """Keep a finished pool's arrays for later pools, up to SPARE_BYTES. (Keeping its scratch
    arrays too was measured to raise the page faults of a bf16 GEMM launch 8-fold.)"""
    kept = sum(a.nbytes for spares in _SPARE_ARRAYS.values() for a in spares)
    for array in arrays:
        if kept + array.nbytes <= SPARE_BYTES:
            _SPARE_ARRAYS.setdefault((array.shape, array.dtype), []).append(array)
            kept += array.nbytes


class Pool:
    """`num_wgs` workgroups of `waves_per_wg` waves, stepped together."""

    stretches = None    # a torch_graphs.StretchRunner on the torch backend's device copies

    def __init__(self, kernel: DecodedKernel, memory: GlobalMemory, wg_ids: np.ndarray,
                 block: tuple[int, int, int], lds_bytes: int, check: bool):
        self.kernel = kernel
        self.memory = memory
        self.check = check
        self.block = block
        threads = block[0] * block[1] * block[2]
        self.waves_per_wg = wpw = -(-threads // 64)
        self.num_wgs = len(wg_ids)
        self.wg_ids = wg_ids                          # (num_wgs, 3) workgroup coordinates
        n = self.num_waves = self.num_wgs * wpw
        self.sgpr = _zeros(sgpr_file_shape(n), np.uint32)   # pair-major: see access.py
        self.sgpr64 = pair_view(self.sgpr)
        self.scc = np.zeros(n, bool)
        self.vgpr = self._vgpr_file(n, kernel.num_vector_regs)
        self.pc = np.full(n, kernel.start, np.int64)
        self.status = np.full(n, RUN, np.int8)
        self.wg_of = np.repeat(np.arange(self.num_wgs), wpw)
        self.wave_in_wg = np.tile(np.arange(wpw), self.num_wgs)
        self.lds_bytes = lds_bytes
        self.lds_stride = lds_stride(lds_bytes)
        self.lds = _zeros((self.num_wgs * self.lds_stride,), np.uint8)
        self._lane_lds_offsets = None
        self.vm_issued = np.zeros(n, np.int64)
        self.loops = np.zeros(n, np.int64)   # backward branches taken, per wave
        self.loops_floor = 0
        self._exec_sel = self._exec_cached = None
        self._current = None
        self.workspace: dict = {}   # scratch arrays reused by instructions (see mfma.execute)
        self.counts = [0] * len(CLASSES)
        self.lane_instructions = 0
        self.batches = 0          # scheduler picks (a group of waves run together)
        self.deadline = None      # time.perf_counter() value past which the launch stops
        self.budget_s = 0.0
        self.not_started = 0      # workgroups of the launch waiting for later pools
        if check:
            self.race = RaceTracker(self, wpw)

    def _vgpr_file(self, waves, rows):
        """The VGPRs as the launch's initial state writes them (v0: work-item ids), zeroed."""
        return _zeros((waves, rows, 64), np.uint32)

    def release(self):
        """The pool has run: its register files, LDS and LDS writer marks serve the next pool
        of this process (fresh arrays cost a page fault per 4 KiB on first touch, several
        times the zeroing). The pool must not be used afterwards."""
        arrays = [self.sgpr, self.vgpr, self.lds]
        if self.check:   # not the reader planes and pcs: mostly never touched, zeroing all of
            arrays.append(self.race.writer)   # them would cost more than their page faults
            if self.race.initialised is not None:
                arrays.append(self.race.initialised)
        _keep(arrays)
        self.sgpr = self.sgpr64 = self.vgpr = self.lds = None

    # ------------------------------------------------------------------ helpers for closures
    def exec_mask(self, sel) -> np.ndarray:
        """EXEC of the batch as bool (n, 64); cached until an EXEC-writing instruction runs."""
        return self.exec_state(sel)[0]

    def exec_summary(self, sel):
        """(whether every lane of the batch is on, active lane count): exec_state without its
        lane mask, which costs a byte per lane to build. Cached likewise."""
        if self._exec_sel is not sel:
            pair = pair_words(self.sgpr, self.sgpr64, sel, EXEC_LO)
            full = bool((pair == 0xFFFFFFFF).all())
            lanes = pair.size * 32 if full else int(np.bitwise_count(pair).sum())
            self._exec_sel, self._exec_cached = sel, [None, full, lanes]
        cached = self._exec_cached
        return cached[1], cached[2]

    def exec_state(self, sel):
        """(EXEC as read-only bool (n, 64), whether every lane is on, active lane count).

        Cached until an EXEC-writing instruction runs or the batch changes.
        """
        full, lanes = self.exec_summary(sel)
        cached = self._exec_cached
        if cached[0] is None:
            pair = pair_words(self.sgpr, self.sgpr64, sel, EXEC_LO)
            if full:
                mask = np.ones((len(pair), 64), bool)
            else:
                pair = np.ascontiguousarray(pair)
                mask = np.unpackbits(pair.view(np.uint8), axis=1, bitorder="little").view(bool)
            mask.flags.writeable = False
            cached[0] = mask
        return cached[0], full, lanes

    def begin_step(self, d, n):
        """Count instruction `d` for a batch of `n` waves and name it in errors (for a runner of
        several instructions at once; the scheduler does the same inline)."""
        self.counts[d.cls] += n
        self._current = d

    def exec_changed(self):
        self._exec_sel = None

    def where(self, ins) -> str:
        return self._where(ins)

    def vm_issue(self, sel):
        self.vm_issued[sel] += 1

    def wait_vm(self, sel, vmcnt):
        if vmcnt is not None and self.check and self.race.pending:
            self.race.wait(np.arange(self.num_waves)[sel], vmcnt)
        return 0

    def wave_label(self, wave: int) -> str:
        g = self.wg_ids[self.wg_of[wave]]
        return f"workgroup ({g[0]}, {g[1]}, {g[2]}) wave {self.wave_in_wg[wave]}"

    def _where(self, ins) -> str:
        return f"kernel {self.kernel.source.name}, {ins.at}"

    def _fault(self, ins, sel, where, fault: AccessFault, nbytes, scalar, cls=MemoryFault):
        waves = np.arange(self.num_waves)[sel]
        if scalar:  # SMEM: one access per wave (or per (wave, dword) under `where`)
            row = fault.flat_index if where is None else np.argwhere(where)[fault.flat_index][0]
            wave, lane = waves[row], None
        elif where is None:
            wave, lane = waves[0], None
        else:
            w, l = np.argwhere(where)[fault.flat_index]
            wave, lane = waves[w], int(l)
        lane_text = "" if lane is None else f", lane {lane}"
        raise cls(f"global memory fault in {self._where(ins)}: {self.wave_label(wave)}{lane_text}: "
                  f"{nbytes}-byte access at address 0x{fault.address:x} is {fault.reason}; "
                  f"{self.memory.nearest(fault.address)}") from None

    def fault_at(self, ins, sel, bad, addr, reason):
        w, l = np.argwhere(bad)[0]
        wave = np.arange(self.num_waves)[sel][w]
        raise MemoryFault(f"{reason}: {self._where(ins)}: {self.wave_label(wave)}, lane {l}, "
                          f"address 0x{int(addr[w, l]):x}")

    # ------------------------------------------------------------------ global memory
    def global_load(self, ins, sel, addresses, nbytes, where, full, scalar=False):
        try:
            return self.memory.load(addresses, nbytes)
        except AccessFault as fault:
            self._fault(ins, sel, where, fault, nbytes, scalar)

    def global_store(self, ins, sel, addresses, data, where, full):
        try:
            self.memory.store(addresses, data)
        except AccessFault as fault:
            self._fault(ins, sel, where, fault, data.shape[1], False)

    def global_atomic(self, ins, sel, addresses, dtype, data, cmp, update, ufunc, want_old,
                      where, full):
        try:
            groups = self.memory.typed_view(addresses, dtype, True)
        except AccessFault as fault:
            self._fault(ins, sel, where, fault, np.dtype(dtype).itemsize, False)
        old = np.zeros(len(addresses), dtype) if want_old else None
        for pick, view, index in groups:
            result = apply_atomics(view, index, data[pick], None if cmp is None else cmp[pick],
                                   update, ufunc, want_old)
            if want_old:
                old[pick] = result
        return old

    # ------------------------------------------------------------------ LDS
    def _lds_flat(self, ins, sel, addr, nbytes, active):
        """Flat byte index into self.lds of every active lane's access (m,), bounds-checked."""
        if self._exec_sel is sel and self._exec_cached[0] is active:
            full = self._exec_cached[1]   # exec_state's mask: whether it is full is known
        else:
            full = bool(active.all())
        if full:   # two reductions instead of masking every lane
            in_bounds = addr.min() >= 0 and addr.max() + nbytes <= self.lds_bytes
        else:
            in_bounds = False
        bad = None if in_bounds else active & ((addr < 0) | (addr + nbytes > self.lds_bytes))
        if bad is not None and bad.any():
            raise self.lds_bounds_fault(ins, sel, bad, addr, nbytes)
        flat = self._lane_lds_offset()[sel] + addr
        return flat.reshape(-1) if full else flat[active]

    def lds_bounds_fault(self, ins, sel, bad, addr, nbytes) -> LdsFault:
        """The fault naming the first lane of bool (n, 64) `bad` of the batch."""
        w, l = np.argwhere(bad)[0]
        wave = np.arange(self.num_waves)[sel][w]
        return LdsFault(f"LDS out of bounds in {self._where(ins)}: {self.wave_label(wave)}, "
                        f"lane {l}: {nbytes}-byte access at LDS address {int(addr[w, l])} "
                        f"(0x{int(addr[w, l]):x}) but the workgroup has {self.lds_bytes} bytes "
                        f"of LDS (static + dynamic)")

    def _lane_lds_offset(self):
        """Each lane's workgroup LDS offset in self.lds (num_waves, 64): a whole-array add,
        several times faster than broadcasting a per-wave column."""
        if self._lane_lds_offsets is None:
            self._lane_lds_offsets = np.repeat((self.wg_of * self.lds_stride)[:, None], 64, axis=1)
        return self._lane_lds_offsets

    def lds_read(self, ins, sel, addr, nbytes, active):
        flat = self._lds_flat(ins, sel, addr, nbytes, active)
        granule, rows = access_rows(flat, nbytes, LDS_GRANULE)
        data = take_rows(self.lds, granule, rows)
        if self.check:
            self.race.record(ins, sel, active, granule, rows, nbytes, write=False)
        return data.reshape(len(flat), nbytes)

    def lds_write(self, ins, sel, addr, data, active, dma=False):
        nbytes = data.shape[-1]
        flat = self._lds_flat(ins, sel, addr, nbytes, active)
        granule, rows = access_rows(flat, nbytes, LDS_GRANULE)
        values = (data.reshape(-1, nbytes) if len(flat) == active.size else data[active]) \
            .reshape(len(rows), granule)
        if self.check:  # before the write: rewriting identical bytes is not a race
            self.race.record(ins, sel, active, granule, rows, nbytes, write=True, dma=dma,
                             new_bytes=values)
        put_rows(self.lds, granule, rows, values)
        if self.check and len(rows):
            self.race.check_batch_writes(ins)

    def lds_atomic(self, ins, sel, addr, dtype, data, cmp, update, ufunc, want_old, active):
        size = np.dtype(dtype).itemsize
        flat = self._lds_flat(ins, sel, addr, size, active)
        if (flat % size).any():
            raise LdsFault(f"misaligned LDS atomic in {self._where(ins)}")
        if self.check:
            # atomics of different waves do not race each other; check them against plain accesses
            self.race.record(ins, sel, active, size, flat // size, size, write=True, atomic=True)
        view = self.lds.view(dtype)
        return apply_atomics(view, flat // size, data, cmp, update, ufunc, want_old)

    def lds_rows(self, granule: int, rows: np.ndarray) -> np.ndarray:
        """(len(rows), granule) bytes of LDS on the host (the race checker's reads)."""
        return take_rows(self.lds, granule, rows)

    # ------------------------------------------------------------------ barriers and ends
    def arrive_barrier(self, sel, pc):
        self.status[sel] = BARRIER
        self.pc[sel] = pc + 1
        self.release_barriers()

    def end_waves(self, sel):
        self.status[sel] = DONE
        if self.check and self.race.pending:
            self.race.finish(np.arange(self.num_waves)[sel])
        self.release_barriers()

    def release_barriers(self) -> bool:
        status = self.status.reshape(self.num_wgs, self.waves_per_wg)
        waiting = (status == BARRIER).any(1) & ~(status == RUN).any(1)
        if not waiting.any():
            return False
        released = status[waiting]
        released[released == BARRIER] = RUN
        status[waiting] = released
        if self.check:
            self.race.new_epoch(np.flatnonzero(waiting))
        return True

    # ------------------------------------------------------------------ the scheduler
    def run(self):
        try:
            with np.errstate(all="ignore"):   # once here, not per instruction (see valu/salu)
                self._run()
        except EmulatorError:
            raise
        except Exception as err:  # a defect or unsupported corner inside an instruction
            ins = self._current.instr if self._current is not None else None
            where = self._where(ins) if ins is not None else f"kernel {self.kernel.source.name}"
            raise EmulatorError(f"{where}: emulation failed with {type(err).__name__}: {err}") from err

    def _run(self):
        """Batched scheduling: the runnable waves at the lowest pc run together until a branch
        (or, when some runnable waves are elsewhere, a branch target). For forward progress,
        each wave counts the backward branches it takes (`loops`); a wave more than
        FAIR_SLACK loop iterations ahead of the runnable wave furthest behind is not scheduled,
        so a wave spinning on memory lets the wave it waits for run. Waves whose loop counts
        stay within the slack are scheduled by pc alone, which keeps batches wide."""
        code = self.kernel.code
        is_target = self.kernel.is_target
        counts = self.counts
        stretches = self.stretches   # torch backend: straight-line stretches run as one unit
        status, pc, loops = self.status, self.pc, self.loops
        eligible = None            # runnable waves within the slack; None: every runnable wave
        while True:
            runnable = status == RUN
            if eligible is not None:
                runnable &= eligible
            count = int(np.count_nonzero(runnable))
            if count == 0:
                if eligible is not None:
                    eligible = self._eligible()
                    continue
                if (status == DONE).all():
                    return
                if not self.release_barriers():
                    stuck = int(np.flatnonzero(status == BARRIER)[0])
                    raise EmulatorError(f"kernel {self.kernel.source.name}: deadlock, "
                                        f"{self.wave_label(stuck)} waits at a barrier that the "
                                        "rest of its workgroup never reaches")
                continue
            p = int(pc[runnable].min())
            self.batches += 1
            idx = np.flatnonzero(runnable & (pc == p))
            n = len(idx)
            full = n == count
            sel = slice(int(idx[0]), int(idx[-1]) + 1) if idx[-1] - idx[0] + 1 == n else idx
            while True:
                if stretches is not None and stretches.ends[p] > p:
                    p = stretches.run(p, sel, n)
                    if not full and is_target[p]:
                        pc[sel] = p
                        break
                    continue
                d = code[p] if p < len(code) else None
                if d is None:
                    raise EmulatorError(f"kernel {self.kernel.source.name}: execution ran past "
                                        "the end of the kernel without s_endpgm")
                counts[d.cls] += n
                self._current = d
                if d.control is not None:
                    pc[sel] = p
                    d.run(self, sel, n, p)
                    self._exec_sel = None
                    if d.control == "branch":
                        back = pc[sel] <= p
                        if back.any():
                            loops[sel] += back
                            self.watchdog_tick()
                            if eligible is not None or \
                                    int(loops[sel].max()) > self.loops_floor + FAIR_SLACK:
                                eligible = self._eligible()
                    elif eligible is not None:
                        eligible = self._eligible()
                    break
                self.lane_instructions += d.run(self, sel, n)
                if d.writes_exec:
                    self._exec_sel = None
                p += 1
                if not full and is_target[p]:
                    pc[sel] = p
                    break

    def _eligible(self):
        """Runnable waves at most FAIR_SLACK backward branches ahead of the one furthest behind
        (None when that is all of them), and the new floor of loop counts."""
        runnable = self.status == RUN
        if not runnable.any():
            return None
        behind = int(self.loops[runnable].min())
        self.loops_floor = behind
        within = self.loops <= behind + FAIR_SLACK
        return None if within[runnable].all() else within

    def watchdog_tick(self):
        """Called at every backward branch batch (only loops can run forever): stop the launch
        once its wall-time budget is spent."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.raise_timeout()

    def raise_timeout(self, also: str = ""):
        running = np.flatnonzero(self.status != DONE)
        code = self.kernel.code
        shown = []
        for wave in running[:4]:
            p = int(self.pc[wave])
            where = (code[p].instr.at if p < len(code)
                     else f"instruction {p}")
            state = "at a barrier" if self.status[wave] == BARRIER else "running"
            shown.append(f"{self.wave_label(wave)} {state} at {where}")
        more = f" (and {len(running) - 4} more)" if len(running) > 4 else ""
        count = f"{len(running)} wave{'s' if len(running) != 1 else ''}"
        waves = f"{count} had not ended: " + "; ".join(shown) + more if len(running) else ""
        later = ""
        if self.not_started and len(running):
            later = (f"{self.not_started} workgroups of the launch had not started yet (the "
                     f"emulator keeps {self.num_wgs} workgroups resident at a time; a wave "
                     "waiting for a workgroup not yet resident cannot finish)")
        raise LaunchTimeout(
            f"kernel {self.kernel.source.name}: stopped after its emulator wall-time budget of "
            f"{self.budget_s:g} s (timeout_s= / ROCKE_EMU_TIMEOUT_S); "
            + "; ".join(t for t in (waves, later, also) if t))


_FULL_BATCH_ROWS: dict = {}
_FULL_BATCH_ROWS_SIZE = 16


def _full_batch_rows(waves_per_wg: int, phase: int, n: int, per_lane: int, granule: int):
    """RaceTracker per-row arrays of an access by every lane of `n` consecutive waves, the first
    `phase` waves into its workgroup: (row -> wave offset from the first, wave within the
    workgroup per row, its write mark local + 1 per byte as uint8 (rows, granule)).
    Cached read-only across batches and launches (a few shapes per kernel)."""
    key = (waves_per_wg, phase, n, per_lane, granule)
    entry = _FULL_BATCH_ROWS.get(key)
    if entry is None:
        offsets = np.repeat(np.arange(n), 64 * per_lane)
        local = (offsets + phase) % waves_per_wg
        entry = (offsets, local, np.repeat((local + 1).astype(np.uint8)[:, None], granule, 1))
        for array in entry:
            array.flags.writeable = False
        if len(_FULL_BATCH_ROWS) >= _FULL_BATCH_ROWS_SIZE:
            _FULL_BATCH_ROWS.pop(next(iter(_FULL_BATCH_ROWS)))
        _FULL_BATCH_ROWS[key] = entry
    return entry


READ_LOG_ROWS = 1 << 21   # rows of reads (and of writes, for their pcs) kept unreplayed (16 MiB)
# RaceTracker's `initialised` marks per access granule: the array as one opaque item per row,
# a row of set marks as such an item (assigning one item is ~2x faster than memory.put_rows),
# and the integer words a row of set marks reads as (comparing words is ~2x faster than
# np.all over the bytes)
_INIT_GRANULES = (1, 2, 4, 8, 16)
_INIT_ITEM = {g: np.dtype((np.void, g)) for g in _INIT_GRANULES}
_INIT_SET = {g: np.ones(g, np.uint8).view(_INIT_ITEM[g])[0] for g in _INIT_GRANULES}
_INIT_WORD = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.uint64}
_INIT_WORD_SET = {g: np.ones(min(g, 8), np.uint8).view(_INIT_WORD[g])[0] for g in _INIT_GRANULES}


def _lane_ranges(lanes) -> str:
    """Ascending lane numbers as runs: [0, 1, 2, 5] -> '0-2, 5'."""
    lanes = [int(lane) for lane in lanes]
    runs, start = [], 0
    for i in range(1, len(lanes) + 1):
        if i == len(lanes) or lanes[i] != lanes[i - 1] + 1:
            runs.append(str(lanes[start]) if start == i - 1 else f"{lanes[start]}-{lanes[i - 1]}")
            start = i
    return ", ".join(runs)


def lds_stride(lds_bytes: int) -> int:
    """Bytes of a pool's LDS array per workgroup: its LDS rounded up to whole granules."""
    return max(LDS_GRANULE, -(-lds_bytes // LDS_GRANULE) * LDS_GRANULE)


class RaceTracker:
    """Per-byte LDS access bookkeeping within one barrier epoch of each workgroup.

    `writer` holds wave + 1 of the last write of a byte this epoch (wave: index within the
    workgroup; 0 = not written). A write's pc is only needed to report a race, so writes are
    logged (`write_log`: pc, granule, rows) and only a long log is replayed into `writer_pc`;
    the log is dropped once no workgroup has writes this epoch. `readers` has one plane of
    `size` bytes per wave
    index w, nonzero where wave w read the byte this epoch, and `reader_pc` the pc of a byte's
    last read (only to report a race). Both are filled lazily: a read is only appended to
    `read_log` (time, pc, granule, rows, wave of each row), and the log is replayed into them
    when a write meets a workgroup read this epoch or the log grows long — most kernels put a
    barrier between reading and rewriting LDS, so most reads are never replayed. An entry is
    stale for a workgroup whose epoch began after it (`clock` counts barrier releases,
    `epoch_start` per workgroup). `writer` and `readers` are cleared when a barrier releases.
    An access moves each array a row of `granule` bytes at a time (see memory.access_rows).

    The initialisation check (ROCKE_EMU_INIT_CHECK, on by default): `initialised` is 1 where
    any write of the byte's workgroup (DS write, DS atomic, LDS DMA) set the byte, for the
    workgroup's whole life (a pool's workgroups never share LDS, and each pool starts zeroed);
    a DS read of a byte still 0 there stops the launch (`LdsUninitialised`) — the emulator's
    LDS starts at 0, the hardware's holds whatever the last workgroup left.
    """

    @staticmethod
    def bytes_per_workgroup(lds_bytes: int, waves_per_wg: int) -> int:
        """What `__init__` allocates per workgroup: per LDS byte, `writer` (1), `writer_pc`
        (4), one `readers` byte per wave, `reader_pc` (4) and, with the initialisation check,
        `initialised` (1)."""
        return lds_stride(lds_bytes) * (1 + 4 + waves_per_wg + 4 + int(env.emu_init_check()))

    def __init__(self, pool: Pool, waves_per_wg: int):
        if waves_per_wg > 16:
            raise EmulatorError("the LDS race checker supports at most 16 waves per workgroup")
        self.pool = pool
        size = pool.num_wgs * pool.lds_stride
        if len(pool.kernel.code) >= 1 << 23:
            raise EmulatorError("the LDS race checker supports kernels of fewer than 2**23 "
                                "instructions")
        self.writer = _zeros((size,), np.uint8)
        # bytes some write of their workgroup set (initialisation check; None when it is off)
        self.initialised = _zeros((size,), np.uint8) if env.emu_init_check() else None
        self._init_rows = None if self.initialised is None else \
            {g: self.initialised.view(_INIT_ITEM[g]) for g in _INIT_GRANULES}
        self.writer_pc = _zeros((size,), np.int32)
        self.write_log: list[tuple[int, int, np.ndarray]] = []
        self.write_log_rows = 0
        self.size, self.waves_per_wg = size, waves_per_wg
        self.readers = _zeros((waves_per_wg * size,), np.uint8)
        self.reader_pc = _zeros((size,), np.int32)
        self.read_log: list[tuple[int, int, int, np.ndarray, np.ndarray]] = []
        self.read_log_rows = 0
        self.clock = 0
        self.epoch_start = np.zeros(pool.num_wgs, np.int64)
        self.replayed = np.zeros(pool.num_wgs, bool)   # `readers` may hold marks
        self.pending: dict[int, list] = {}   # wave -> [(vm sequence, flat bytes, pc)]
        # workgroups whose `writer` / `readers` may hold marks this epoch: the others are known
        # clean, so their checks and clearing can be skipped
        self.wrote = np.zeros(pool.num_wgs, bool)
        self.was_read = np.zeros(pool.num_wgs, bool)
        self._batch = None
        self._lanes = (None, None, None, {})   # (sel, active, workgroups, per-row arrays)

    def _row_waves(self, sel, active, per_lane, granule):
        """(pool wave, wave within its workgroup) of each row of an access of `per_lane` rows
        of `granule` bytes per active lane, each byte's own write mark local + 1 (uint8
        (rows, granule)), and the workgroups of the batch; cached per batch (a batch's
        accesses share them). Per-byte arrays rather than
        (rows, 1) columns: numpy's loops over a broadcast column of a few bytes per row run
        several times slower than over two arrays of one shape."""
        cached_sel, cached_active, wgs, rows_of = self._lanes
        if cached_sel is not sel or cached_active is not active:
            pool = self.pool
            waves = np.arange(pool.num_waves)[sel]
            wgs = pool.wg_of[waves]
            rows_of = {}
            self._lanes = (sel, active, wgs, rows_of)
        key = (per_lane, granule)
        if key not in rows_of:
            n = len(active)
            if isinstance(sel, slice) and active.all():
                # a whole-batch access: the per-row arrays depend only on where the batch starts
                # in its workgroup, so they are built once per shape (_full_batch_rows)
                offsets, local, mine = _full_batch_rows(
                    self.waves_per_wg, sel.start % self.waves_per_wg, n, per_lane, granule)
                rows_of[key] = (offsets + sel.start, local, mine)
                return rows_of[key] + (wgs,)
            waves = np.arange(self.pool.num_waves)[sel]
            lane_wave = np.broadcast_to(waves[:, None], active.shape)[active]
            row_wave = np.repeat(lane_wave, per_lane) if per_lane > 1 else lane_wave
            local = self.pool.wave_in_wg[row_wave]
            rows_of[key] = (row_wave, local,
                            np.repeat((local + 1).astype(np.uint8)[:, None], granule, 1))
        return rows_of[key] + (wgs,)

    def record(self, ins, sel, active, granule, rows, nbytes, write, dma=False, new_bytes=None,
               atomic=False):
        """Check and mark an LDS access given as `rows` of `granule` bytes, row r belonging to
        active lane r // (nbytes // granule) in row-major (wave, lane) order."""
        if len(rows) == 0:   # no active lane: nothing accessed
            return
        pool = self.pool
        row_wave, local, mine, wgs = self._row_waves(sel, active, nbytes // granule, granule)
        pc = ins.index
        if self.initialised is not None:
            if write:   # DS writes, atomics and LDS DMA alike set their bytes
                self._init_rows[granule][rows] = _INIT_SET[granule]
            else:
                marks = np.take(self._init_rows[granule], rows)
                if not (marks.view(_INIT_WORD[granule]) == _INIT_WORD_SET[granule]).all():
                    self._report_uninitialised(ins, sel, active, granule, rows, nbytes,
                                               marks.view(np.uint8).reshape(-1, granule))
        self._check_and_mark(ins, pc, granule, rows, row_wave, local, mine, write,
                             new_bytes, atomic, self.wrote[wgs].any(),
                             write and self.was_read[wgs].any())
        if write and not atomic:
            self.wrote[wgs] = True
        elif not write:
            self.was_read[wgs] = True
        if dma:
            byte_index = (rows[:, None] * granule + np.arange(granule)).reshape(-1)
            byte_wave = np.repeat(row_wave, granule)
            for wave in np.unique(row_wave):
                mine = byte_wave == wave
                self.pending.setdefault(int(wave), []).append(
                    (int(pool.vm_issued[wave]), byte_index[mine], pc))

    def _check_and_mark(self, ins, pc, granule, rows, row_wave, local, mine, write,
                        new_bytes, atomic, any_writer, any_reader):
        """`local`: each row's wave within its workgroup; `mine`: each byte's write mark
        local + 1 (uint8 (rows, granule)). `any_writer` / `any_reader`: whether the
        batch's workgroups may have writer / reader marks this epoch (when not, those checks
        cannot fire and are skipped)."""
        changes = None

        def changing(suspects):
            """`suspects` limited to the bytes this write changes (rewriting a byte with its
            current value is not a race); LDS is read only when there is a suspect."""
            nonlocal changes
            if new_bytes is None or not suspects.any():
                return suspects
            if changes is None:
                changes = self.pool.lds_rows(granule, rows) != new_bytes
            return suspects & changes

        if any_writer:
            writer = take_rows(self.writer, granule, rows)
            conflict = (writer != 0) & (writer != mine)
            if write:
                conflict = changing(conflict)
            if conflict.any():
                row, byte = divmod(int(np.flatnonzero(conflict)[0]), granule)
                flat_byte = rows[row] * granule + byte
                self._report(ins, pc, flat_byte, row_wave[row], write, int(writer[row, byte]) - 1,
                             self._writer_pc(flat_byte), "write")
        plane_rows = self.size // granule
        if write:
            if any_reader:
                self._replay_reads()
                # readers marks are 0 or 1: a byte was read by another wave of its workgroup
                # when more planes mark it than its own wave's plane does
                readers = take_rows(self.readers, granule, rows)
                for w in range(1, self.waves_per_wg):
                    readers += take_rows(self.readers, granule, rows + w * plane_rows)
                others = changing(readers != take_rows(self.readers, granule,
                                                       rows + local * plane_rows))
                if others.any():
                    row, byte = divmod(int(np.flatnonzero(others)[0]), granule)
                    flat_byte = rows[row] * granule + byte
                    other = next(w for w in range(self.waves_per_wg) if w != local[row]
                                 and self.readers[w * self.size + flat_byte])
                    self._report(ins, pc, flat_byte, row_wave[row], True, other,
                                 int(self.reader_pc[flat_byte]), "read")
            if atomic:
                return
            put_rows(self.writer, granule, rows, mine)
            self._log_write(pc, granule, rows)
            self._batch = (granule, rows, mine, row_wave, pc, new_bytes)
        else:
            self.read_log.append((self.clock, pc, granule, rows, local))
            self.read_log_rows += len(rows)
            if self.read_log_rows > READ_LOG_ROWS:
                self._replay_reads()

    def _replay_reads(self):
        """Mark the logged reads of still-current epochs in `readers` / `reader_pc`."""
        stride = self.pool.lds_stride
        plane_rows_of = {}
        for time_, pc, granule, rows, local in self.read_log:
            wg = rows * granule // stride
            current = time_ >= self.epoch_start[wg]
            if not current.all():
                rows, local, wg = rows[current], local[current], wg[current]
                if not len(rows):
                    continue
            plane_rows = plane_rows_of.setdefault(granule, self.size // granule)
            put_rows(self.readers, granule, rows + local * plane_rows, np.ones((1, granule)))
            put_rows(self.reader_pc, granule, rows, np.full((1, granule), pc))
            self.replayed[wg] = True
        self._forget_reads()

    def _log_write(self, pc, granule, rows):
        self.write_log.append((pc, granule, rows))
        self.write_log_rows += len(rows)
        if self.write_log_rows > READ_LOG_ROWS:
            for logged_pc, logged_granule, logged_rows in self.write_log:
                put_rows(self.writer_pc, logged_granule, logged_rows,
                         np.full((1, logged_granule), logged_pc, np.int32))
            self.write_log.clear()
            self.write_log_rows = 0

    def _writer_pc(self, flat_byte) -> int:
        """The pc of the last write of LDS byte `flat_byte` (one with a writer this epoch)."""
        for pc, granule, rows in reversed(self.write_log):
            if (rows == flat_byte // granule).any():
                return pc
        return int(self.writer_pc[flat_byte])

    def _forget_reads(self):
        self.read_log.clear()
        self.read_log_rows = 0

    def check_batch_writes(self, ins):
        """After a batch's write landed: two waves of the batch wrote one byte differently."""
        granule, rows, mine, row_wave, pc, new_bytes = self._batch
        # a row's bytes all carry its writer's mark, and a later duplicate row overwrites a
        # whole row: comparing each row's first byte finds every row another wave won (the
        # batch's writes share one pc: the wave tells them apart)
        lost = np.flatnonzero(np.take(self.writer, rows * granule) != mine[:, 0])
        if not len(lost):
            return
        # only the rows another wave won: every byte of such a row carries the winner's mark,
        # not this one's, so those bytes clash unless the loser wrote what the row now holds
        lost_rows = rows[lost]
        if new_bytes is None:
            clash = np.ones((len(lost), granule), bool)
        else:
            clash = self.pool.lds_rows(granule, lost_rows) != new_bytes[lost]
        if clash.any():
            first, byte = divmod(int(np.flatnonzero(clash)[0]), granule)
            row = lost[first]
            flat_byte = rows[row] * granule + byte
            self._report(ins, pc, flat_byte, row_wave[row], True,
                         int(self.writer[flat_byte]) - 1, pc, "write")

    def _report(self, ins, pc, flat_byte, wave, write, other_local, other_pc, other_kind):
        pool = self.pool
        wg = int(flat_byte // pool.lds_stride)
        address = int(flat_byte % pool.lds_stride)
        other_ins = pool.kernel.code[int(other_pc)].instr
        g = pool.wg_ids[wg]
        raise LdsRace(
            f"LDS race in kernel {pool.kernel.source.name}, workgroup ({g[0]}, {g[1]}, {g[2]}), "
            f"LDS byte {address} (0x{address:x}): wave {pool.wave_in_wg[wave]} "
            f"{'writes' if write else 'reads'} it at {ins.at} and wave "
            f"{other_local} {other_kind}s it at {other_ins.at} "
            f"with no s_barrier between them (LDS-DMA writes count once their wave waits "
            f"for them with s_waitcnt vmcnt)")

    def _report_uninitialised(self, ins, sel, active, granule, rows, nbytes, marks):
        """A read of `rows` found bytes no write of their workgroup set (`marks` 0): name the
        first such lane's wave, its lanes that read unset bytes, and those bytes' range."""
        pool = self.pool
        per_lane = nbytes // granule
        unset = (marks == 0).reshape(-1, per_lane * granule)   # (active lanes, nbytes)
        lane_ids = np.argwhere(active)                          # (active lanes, 2): batch wave, lane
        first = int(np.flatnonzero(unset.any(1))[0])
        in_wave = lane_ids[:, 0] == lane_ids[first, 0]
        bad = np.flatnonzero(in_wave & unset.any(1))
        wave = int(np.arange(pool.num_waves)[sel][lane_ids[first, 0]])
        starts = rows.reshape(-1, per_lane)[:, 0] * granule           # each lane's flat byte
        wg = int(starts[first] // pool.lds_stride)
        base = wg * pool.lds_stride
        unset_bytes = (starts[bad][:, None] + np.arange(nbytes))[unset[bad]] - base
        lo, hi = int(unset_bytes.min()), int(unset_bytes.max())
        address = int(starts[first] - base)
        g = pool.wg_ids[wg]
        raise LdsUninitialised(
            f"LDS read of uninitialised bytes in kernel {pool.kernel.source.name}, workgroup "
            f"({g[0]}, {g[1]}, {g[2]}): wave {pool.wave_in_wg[wave]} reads unwritten LDS bytes "
            f"{lo}..{hi} (0x{lo:x}..0x{hi:x}) at {ins.at}, lane{'s' if len(bad) > 1 else ''} "
            f"{_lane_ranges(lane_ids[bad, 1])} "
            f"(lane {lane_ids[first, 1]}: {nbytes}-byte read at LDS address {address} "
            f"(0x{address:x})), and no write of this workgroup set them before — the hardware "
            f"would read stale data, the emulator reads 0 (a tile never filled, or filled after "
            f"this read with no s_barrier between; ROCKE_EMU_INIT_CHECK=0 turns this check off)")

    def wait(self, waves, vmcnt):
        issued = self.pool.vm_issued
        for wave in waves:
            entries = self.pending.get(int(wave))
            if entries:
                keep = [e for e in entries if e[0] > issued[wave] - vmcnt]
                if keep:
                    self.pending[int(wave)] = keep
                else:
                    del self.pending[int(wave)]

    def finish(self, waves):
        for wave in waves:
            self.pending.pop(int(wave), None)

    def new_epoch(self, wgs: np.ndarray):
        """Workgroups `wgs` passed a barrier: forget their epoch's accesses."""
        pool = self.pool
        wrote, was_read = wgs[self.wrote[wgs]], wgs[self.was_read[wgs]]
        if len(wrote):
            self.writer.reshape(pool.num_wgs, pool.lds_stride)[wrote] = 0
            self.wrote[wrote] = False
            if not self.wrote.any():   # no byte has a writer: no pc can be asked for
                self.write_log.clear()
                self.write_log_rows = 0
        self.clock += 1
        self.epoch_start[wgs] = self.clock    # logged reads of these workgroups are now stale
        if len(was_read):
            marked = was_read[self.replayed[was_read]]
            if len(marked):
                self.readers.reshape(self.waves_per_wg, pool.num_wgs, pool.lds_stride)[:, marked] = 0
                self.replayed[marked] = False
            self.was_read[was_read] = False
            if not self.was_read.any():
                self._forget_reads()   # every logged read is stale
        # LDS-DMA writes still in flight may land anywhere in the new epoch
        released = set(wgs.tolist())
        for wave, entries in self.pending.items():
            wg = int(pool.wg_of[wave])
            if wg in released:
                self.wrote[wg] = True
                for _, byte_index, pc in entries:
                    self.writer[byte_index] = int(pool.wave_in_wg[wave]) + 1
                    self._log_write(pc, 1, byte_index)
