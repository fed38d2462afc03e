"""Machine state of a pool of resident workgroups, the batched scheduler, and the checkers."""
from __future__ import annotations

import numpy as np

from .errors import EmulatorError, LdsFault, LdsRace, MemoryFault
from .memory import AccessFault, GlobalMemory
from .memops import apply_atomics
from .operands import EXEC_LO
from .program import CLASSES, DecodedKernel

RUN, BARRIER, DONE = 0, 1, 2


class Pool:
    """`num_wgs` workgroups of `waves_per_wg` waves, stepped together."""

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
        self.sgpr = np.zeros((n, 128), np.uint32)
        self.scc = np.zeros(n, bool)
        self.vgpr = np.zeros((n, kernel.num_vector_regs, 64), np.uint32)
        self.pc = np.full(n, kernel.start, np.int64)
        self.status = np.full(n, RUN, np.int8)
        self.wg_of = np.repeat(np.arange(self.num_wgs), wpw)
        self.wave_in_wg = np.tile(np.arange(wpw), self.num_wgs)
        self.lds_bytes = lds_bytes
        self.lds_stride = max(4, -(-lds_bytes // 4) * 4)
        self.lds = np.zeros(self.num_wgs * self.lds_stride, np.uint8)
        self.lds_words = self.lds.view(np.uint32)
        self.vm_issued = np.zeros(n, np.int64)
        self._exec_sel = self._exec_cached = None
        self._current = None
        self.counts = [0] * len(CLASSES)
        self.lane_instructions = 0
        if check:
            self.race = RaceTracker(self, wpw)

    # ------------------------------------------------------------------ helpers for closures
    def exec_mask(self, sel) -> np.ndarray:
        """EXEC of the batch as bool (n, 64); cached until an EXEC-writing instruction runs."""
        if self._exec_sel is sel:
            return self._exec_cached
        pair = np.ascontiguousarray(self.sgpr[sel, EXEC_LO:EXEC_LO + 2])
        mask = np.unpackbits(pair.view(np.uint8), axis=1, bitorder="little").view(bool)
        mask.flags.writeable = False
        self._exec_sel, self._exec_cached = sel, mask
        return mask

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
        return f"kernel {self.kernel.source.name}, line {ins.line_no} `{ins.text}`"

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
        bad = active & ((addr < 0) | (addr + nbytes > self.lds_bytes))
        if bad.any():
            w, l = np.argwhere(bad)[0]
            wave = np.arange(self.num_waves)[sel][w]
            raise LdsFault(f"LDS out of bounds in {self._where(ins)}: {self.wave_label(wave)}, "
                           f"lane {l}: {nbytes}-byte access at LDS address {int(addr[w, l])} "
                           f"(0x{int(addr[w, l]):x}) but the workgroup has {self.lds_bytes} bytes "
                           f"of LDS (static + dynamic)")
        base = (self.wg_of[sel] * self.lds_stride)[:, None]
        return (base + addr)[active]

    def lds_read(self, ins, sel, addr, nbytes, active):
        flat = self._lds_flat(ins, sel, addr, nbytes, active)
        if nbytes % 4 == 0 and not (flat & 3).any():
            data = self.lds_words[(flat >> 2)[:, None] + np.arange(nbytes // 4)].view(np.uint8)
        else:
            data = self.lds[flat[:, None] + np.arange(nbytes)]
        if self.check:
            self.race.record(ins, sel, active, flat, nbytes, write=False)
        return data.reshape(len(flat), nbytes)

    def lds_write(self, ins, sel, addr, data, active, dma=False):
        nbytes = data.shape[-1]
        flat = self._lds_flat(ins, sel, addr, nbytes, active)
        values = data[active]
        if self.check:  # before the write: rewriting identical bytes is not a race
            self.race.record(ins, sel, active, flat, nbytes, write=True, dma=dma,
                             new_bytes=np.ascontiguousarray(values).reshape(-1))
        if nbytes % 4 == 0 and not (flat & 3).any():
            self.lds_words[(flat >> 2)[:, None] + np.arange(nbytes // 4)] = \
                np.ascontiguousarray(values).view(np.uint32).reshape(len(flat), nbytes // 4)
        else:
            self.lds[flat[:, None] + np.arange(nbytes)] = values
        if self.check:
            self.race.check_batch_writes(ins)

    def lds_atomic(self, ins, sel, addr, dtype, data, cmp, update, ufunc, want_old, active):
        size = np.dtype(dtype).itemsize
        flat = self._lds_flat(ins, sel, addr, size, active)
        if (flat % size).any():
            raise LdsFault(f"misaligned LDS atomic in {self._where(ins)}")
        if self.check:
            # atomics of different waves do not race each other; check them against plain accesses
            self.race.record(ins, sel, active, flat, size, write=True, atomic=True)
        view = self.lds.view(dtype)
        return apply_atomics(view, flat // size, data, cmp, update, ufunc, want_old)

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
        for wg in np.flatnonzero(waiting):
            row = status[wg]
            row[row == BARRIER] = RUN
            if self.check:
                self.race.new_epoch(int(wg))
        return True

    # ------------------------------------------------------------------ the scheduler
    def run(self):
        try:
            self._run()
        except EmulatorError:
            raise
        except Exception as err:  # a defect or unsupported corner inside an instruction
            ins = self._current.instr if self._current is not None else None
            where = self._where(ins) if ins is not None else f"kernel {self.kernel.source.name}"
            raise EmulatorError(f"{where}: emulation failed with {type(err).__name__}: {err}") from err

    def _run(self):
        code = self.kernel.code
        is_target = self.kernel.is_target
        counts = self.counts
        status, pc = self.status, self.pc
        while True:
            runnable = status == RUN
            count = int(np.count_nonzero(runnable))
            if count == 0:
                if (status == DONE).all():
                    return
                if not self.release_barriers():
                    stuck = int(np.flatnonzero(status == BARRIER)[0])
                    raise EmulatorError(f"kernel {self.kernel.source.name}: deadlock, "
                                        f"{self.wave_label(stuck)} waits at a barrier that the "
                                        "rest of its workgroup never reaches")
                continue
            p = int(pc[runnable].min())
            idx = np.flatnonzero(runnable & (pc == p))
            n = len(idx)
            full = n == count
            sel = slice(int(idx[0]), int(idx[-1]) + 1) if idx[-1] - idx[0] + 1 == n else idx
            while True:
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
                    break
                self.lane_instructions += d.run(self, sel, n)
                if d.writes_exec:
                    self._exec_sel = None
                p += 1
                if not full and is_target[p]:
                    pc[sel] = p
                    break


class RaceTracker:
    """Per-byte LDS access bookkeeping within one barrier epoch of each workgroup.

    `writer` holds the wave (index within its workgroup) that last wrote a byte this epoch,
    `readers` a bitmask of the waves that read it; both are cleared when a barrier releases.
    """

    def __init__(self, pool: Pool, waves_per_wg: int):
        if waves_per_wg > 16:
            raise EmulatorError("the LDS race checker supports at most 16 waves per workgroup")
        self.pool = pool
        size = pool.num_wgs * pool.lds_stride
        self.writer = np.full(size, -1, np.int8)
        self.writer_pc = np.zeros(size, np.int32)
        self.readers = np.zeros(size, np.uint16)
        self.reader_pc = np.zeros(size, np.int32)
        self.pending: dict[int, list] = {}   # wave -> [(vm sequence, flat bytes, pc)]
        self._batch = None

    def record(self, ins, sel, active, flat, nbytes, write, dma=False, new_bytes=None,
               atomic=False):
        pool = self.pool
        waves = np.arange(pool.num_waves)[sel]
        lane_wave = np.broadcast_to(waves[:, None], active.shape)[active]
        byte_index = (flat[:, None] + np.arange(nbytes)).reshape(-1)
        byte_wave = np.repeat(lane_wave, nbytes) if nbytes > 1 else lane_wave
        local = pool.wave_in_wg[byte_wave].astype(np.int8)
        pc = ins.index
        self._check_and_mark(ins, pc, byte_index, byte_wave, local, write, new_bytes, atomic)
        if dma:
            for wave in np.unique(lane_wave):
                mine = byte_wave == wave
                self.pending.setdefault(int(wave), []).append(
                    (int(pool.vm_issued[wave]), byte_index[mine], pc))

    def _check_and_mark(self, ins, pc, byte_index, byte_wave, local, write, new_bytes, atomic):
        writer = self.writer[byte_index]
        conflict = (writer >= 0) & (writer != local)
        changes = None
        if write and new_bytes is not None:
            changes = self.pool.lds[byte_index] != new_bytes
            conflict &= changes
        if conflict.any():
            i = int(np.flatnonzero(conflict)[0])
            self._report(ins, pc, byte_index[i], byte_wave[i], write, int(writer[i]),
                         self.writer_pc[byte_index[i]], "write")
        own_bit = np.left_shift(np.uint16(1), local.astype(np.uint16))
        if write:
            others = (self.readers[byte_index] & ~own_bit) != 0
            if changes is not None:
                others &= changes
            if others.any():
                i = int(np.flatnonzero(others)[0])
                bits = int(self.readers[byte_index[i]]) & ~int(own_bit[i])
                self._report(ins, pc, byte_index[i], byte_wave[i], True,
                             (bits & -bits).bit_length() - 1, self.reader_pc[byte_index[i]], "read")
            if atomic:
                return
            self.writer[byte_index] = local
            self.writer_pc[byte_index] = pc
            self._batch = (byte_index, local, byte_wave, pc, new_bytes)
        else:
            # OR each wave's bit in separately: duplicate indices within one wave are harmless
            first, last = int(local.min()), int(local.max())
            if first == last:
                self.readers[byte_index] |= own_bit[0]
            else:
                for w in range(first, last + 1):
                    mine = local == w
                    if mine.any():
                        self.readers[byte_index[mine]] |= np.uint16(1 << w)
            self.reader_pc[byte_index] = pc

    def check_batch_writes(self, ins):
        """After a batch's write landed: two waves of the batch wrote one byte differently."""
        byte_index, local, byte_wave, pc, new_bytes = self._batch
        clash = self.writer[byte_index] != local
        if new_bytes is not None:
            clash &= self.pool.lds[byte_index] != new_bytes
        if clash.any():
            i = int(np.flatnonzero(clash)[0])
            self._report(ins, pc, byte_index[i], byte_wave[i], True,
                         int(self.writer[byte_index[i]]), pc, "write")

    def _report(self, ins, pc, flat_byte, wave, write, other_local, other_pc, other_kind):
        pool = self.pool
        wg = int(flat_byte // pool.lds_stride)
        address = int(flat_byte % pool.lds_stride)
        other_ins = pool.kernel.code[int(other_pc)].instr
        g = pool.wg_ids[wg]
        raise LdsRace(
            f"LDS race in kernel {pool.kernel.source.name}, workgroup ({g[0]}, {g[1]}, {g[2]}), "
            f"LDS byte {address} (0x{address:x}): wave {pool.wave_in_wg[wave]} "
            f"{'writes' if write else 'reads'} it at line {ins.line_no} `{ins.text}` and wave "
            f"{other_local} {other_kind}s it at line {other_ins.line_no} `{other_ins.text}` "
            f"with no s_barrier between them (LDS-DMA writes count once their wave waits "
            f"for them with s_waitcnt vmcnt)")

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

    def new_epoch(self, wg: int):
        pool = self.pool
        span = slice(wg * pool.lds_stride, (wg + 1) * pool.lds_stride)
        self.writer[span] = -1
        self.readers[span] = 0
        # LDS-DMA writes still in flight may land anywhere in the new epoch
        for wave, entries in self.pending.items():
            if pool.wg_of[wave] == wg:
                for _, byte_index, pc in entries:
                    self.writer[byte_index] = pool.wave_in_wg[wave]
                    self.writer_pc[byte_index] = pc
