"""The emulator's torch backend (ROCKE_EMU_BACKEND=torch, ROCKE_EMU_DEVICE=cpu|cuda).

What lives where: the vector register file and LDS are torch tensors on the chosen device;
the scalar side (SGPRs, SCC, EXEC, the per-wave pc/status the scheduler branches on) stays in
host numpy arrays, so SALU, SMEM, branches and barriers run their numpy closures unchanged and
no branch decision reads the device. The device is read only where the ISA moves data from
vector to scalar or host: VALU compares (their lane mask lands in SGPRs), v_readfirstlane, LDS
and global addresses (bounds checks, the race checker, host global memory). A compare's mask
stays on the device until a host access of its SGPRs needs it, and so does the result of
64-bit mask logic on it (s_and_b64 and kin) whose SCC nothing reads (`_decode_mask_salu`).

Ported to torch (the paths of the benchmark workloads and the attention kernels): the VALU ops
in `PORTED_VALU_OPS` (VOP1/VOP2/VOP3/VOPC/VOP3P, DPP and SDWA forms; no clamp/omod),
v_readfirstlane/v_readlane, global and buffer loads/stores, DS reads/writes (incl. read2/write2/
st64, d16_hi writes), ds_bpermute/ds_swizzle, and the dense f16/bf16 MFMAs. Every result is
bit-identical to the numpy backend: float ops apply the shared NaN rule and the shared
definitions of rocke/emu/backend.py; integer ops compute on int64.

Instructions not ported: on the CPU device their numpy closure runs on the same memory (the
torch tensors are views of the numpy arrays), listed in `TorchKernel.fallbacks`; on CUDA the
launch is refused before anything runs, naming the instruction.
"""
from __future__ import annotations

import numpy as np

from . import backend as shared
from . import memops, torch_cuda_kernels, torch_memory, torch_triton_kernels
from .access import pair_value, put_pair_value, scalar_raw_reader, sgpr_column, sgpr_pair, write_mask
from .errors import DecodeError, EmulatorError
from .memory import AccessFault
from .machine import LDS_GRANULE, Pool
from .valu import dpp_source_lanes
from .memory import access_rows
from .operands import EXEC_LO, VCC_LO, Operand, TYPE_BITS, constant_bits, parse_modifiers, \
    parse_operand
from .program import DS, MFMA, OTHER, SALU, SMEM, VALU, VMEM, DecodedKernel
from .torch_graphs import CaptureRefused, StretchRunner, mask_cuts, stretch_ends

_torch = None
# device arrays and stretch graphs of the last pools, per (kernel, shape, checker, device): a
# later pool of the same kernel and shape reuses them (re-uploads its VGPRs, zeroes its LDS) and
# replays the graphs its predecessor captured
KEEP_POOLS = 4
_KEPT_POOLS: dict = {}
# Tests set this to run the CPU device the way CUDA runs (own copies of VGPRs/LDS, unported
# instructions refused), so CI without a GPU covers the CUDA code path.
SEPARATE_CPU_COPIES = False
INT32_MIN = -(1 << 31)
MASK32 = 0xFFFFFFFF


# Device tensors that captured graphs read: made once per device, outside any capture (the
# first, eager sighting of a stretch), and kept for the process. A graph holds no reference to
# what it reads, and it outlives the pool that captured it (a later pool replays it), so such a
# tensor must not belong to a pool.
_DEVICE_CONSTANTS: dict = {}


def device_constant(name, device, make):
    key = (name, str(device))
    tensor = _DEVICE_CONSTANTS.get(key)
    if tensor is None:
        tensor = _DEVICE_CONSTANTS[key] = make()
    return tensor


def device_memory_bytes(device) -> int:
    """The memory of a CUDA device, in bytes."""
    torch = torch_module()
    return torch.cuda.get_device_properties(torch.device(device)).total_memory


def torch_module():
    global _torch
    if _torch is None:
        import torch
        _torch = torch
    return _torch


# ------------------------------------------------------------------------------- the pool

class TorchPool(Pool):
    """A Pool whose VGPRs and LDS are torch tensors on `device` (see the module docstring)."""

    def __init__(self, kernel, memory, wg_ids, block, lds_bytes, check, device):
        self._pending_masks = {}    # Pool.__init__ already reads the scalar registers
        self._sgpr_epoch = 0
        # shares_numpy: the tensors are views of the numpy arrays (CPU); else own copies (and
        # Pool.__init__'s _vgpr_file keeps only v0 on the host)
        self.on_cpu = device == "cpu"
        self.shares_numpy = self.on_cpu and not SEPARATE_CPU_COPIES
        super().__init__(kernel, memory, wg_ids, block, lds_bytes, check)
        torch = torch_module()
        self.torch, self.device = torch, device
        self.tv = self.tl = None
        self._tsel = (None, None)
        self._tmask = (None, None)
        self._all_on = None
        # VALU lane masks written to SGPR pairs (v_cmp) stay on the device until a host access
        # of the SGPRs needs them: index -> (sel, bool (n, 64)); no read-back per compare
        self._pending_masks = {}
        self._lds_base = (None, None)
        self._sgpr_epoch = 0        # bumped by every host access: device copies go stale
        self._sgpr_columns = (None, -1, {})   # (sel, epoch, index -> int32 (n, 1) on device)

    def _vgpr_file(self, waves, rows):
        """Device copies: on the host only v0, the one row the initial state writes (launch's
        _initial_state); `run` zeroes the device file and uploads it (not the whole file:
        1 GiB at 16,384 waves of 256 VGPRs)."""
        if not self.shares_numpy:
            return np.zeros((waves, 1, 64), np.uint32)
        return super()._vgpr_file(waves, rows)

    # ---- the scalar registers: host numpy, with device-side masks and copies (see above)
    @property
    def sgpr(self):
        if self._pending_masks:
            self._flush_masks()
        self._sgpr_epoch += 1
        return self._sgpr

    @sgpr.setter
    def sgpr(self, value):
        self._sgpr = value

    @property
    def sgpr64(self):
        """Pool's 64-bit view of the scalar registers: a host access like `sgpr`."""
        self.sgpr
        return self._sgpr64

    @sgpr64.setter
    def sgpr64(self, value):
        self._sgpr64 = value

    def _flush_masks(self):
        pending, self._pending_masks = self._pending_masks, {}
        if not pending:
            self._sgpr_epoch += 1
            return
        # packed on the device (8 bytes a wave) together and read back: one copy, one sync
        masks = [mask for _, mask in pending.values()]
        packed = self.host(self.pack_lanes(masks[0] if len(masks) == 1 else self.torch.cat(masks)))
        start = 0
        for index, (sel, mask) in pending.items():
            count = mask.shape[0]
            put_pair_value(self._sgpr, self._sgpr64, sel, index,
                           packed[start:start + count].view(np.uint64))
            start += count
        self._sgpr_epoch += 1

    def _lane_bits(self):
        torch = self.torch
        return device_constant("lane bits", self.device,
                               lambda: torch.arange(64, dtype=torch.int64, device=self.device))

    def pack_lanes(self, mask):
        """Device bool (n, 64) -> int64 (n,) lane masks (bit i = lane i), on the device."""
        return (mask.to(self.torch.int64) << self._lane_bits()).sum(1)

    def unpack_lanes(self, words):
        """Device int64 (n,) lane masks -> bool (n, 64)."""
        return ((words[:, None] >> self._lane_bits()) & 1).bool()

    def defer_mask(self, sel, index, mask):
        """SGPR pair `index` of the batch := device bool (n, 64) `mask`, read back only when
        the host needs it. A stretch's staged device steps leave it to the stretch runner,
        which hands the pool the stretch's last mask of each pair when the stretch ends."""
        runner = self.stretches
        if runner is not None and runner.mode is not None and runner.keep_mask(index, mask):
            return
        pending = self._pending_masks
        if index - 1 in pending or index + 1 in pending or \
                (index in pending and pending[index][0] is not sel):
            self._flush_masks()
        self._pending_masks[index] = (sel, mask)

    def holds_pending_mask(self, sel, index) -> bool:
        """Whether a compare's mask for SGPR pair `index` of this batch is still on the device
        (a peek: nothing is flushed)."""
        hit = self._pending_masks.get(index)
        return hit is not None and hit[0] is sel

    def pending_mask(self, sel, index):
        """The device bool (n, 64) a VALU compare left for SGPR pair `index` of this batch
        (None when the host SGPRs hold it; an overlapping pending mask is flushed)."""
        pending = self._pending_masks
        if pending:
            hit = pending.get(index)
            if hit is not None and hit[0] is sel:
                return hit[1]
            if hit is not None or index - 1 in pending or index + 1 in pending:
                self._flush_masks()
        return None

    def host_sgpr_pair(self, sel, index) -> np.ndarray:
        """int64 (n,) copy of the SGPR pair at `index` of the batch (bit i = lane i)."""
        pending = self._pending_masks
        if pending and (index - 1 in pending or index in pending or index + 1 in pending):
            self._flush_masks()
        return pair_value(self._sgpr, self._sgpr64, sel, index).astype(np.int64)

    def host_sgpr_column(self, sel, index) -> np.ndarray:
        """int32 (n,) of SGPR `index` of the batch as the host holds it now: a read-only view
        where it can be one (copy it to keep it past the next host step)."""
        pending = self._pending_masks
        if pending and (index in pending or index - 1 in pending):
            self._flush_masks()
        column = sgpr_column(self._sgpr, index)[sel].view(np.int32)
        column.flags.writeable = False
        return column

    def _stretch_input(self, kind, index):
        """Inside a stretch (torch_graphs): None after noting the host input when discovering,
        else its staged device value; None outside one."""
        runner = self.stretches
        if runner is None or runner.mode is None:
            return None
        if kind == "mask" and index in runner.kept_masks:   # an earlier step's, this stretch
            return runner.kept_masks[index] if runner.mode != "discover" else None
        if runner.mode == "discover":
            runner.record(kind, index)
            return None
        return runner.staged(kind, index)

    def mask_on_device(self, sel, index):
        """Device bool (n, 64) of SGPR pair `index` of the batch."""
        staged = self._stretch_input("mask", index)
        if staged is not None:
            return staged
        on_device = self.pending_mask(sel, index)
        if on_device is not None:
            return on_device
        return self.host_mask_on_device(sel, index)

    def host_mask_on_device(self, sel, index):
        """Device bool (n, 64) of the host's SGPR pair `index` of the batch (only a pending
        mask that overlaps it is flushed first; the others stay on the device)."""
        return self.unpack_lanes(self.to_device(self.host_sgpr_pair(sel, index)))

    def sgpr64_on_device(self, sel, index):
        """int64 (n, 1) device copy of the SGPR pair at `index` of the batch."""
        torch = self.torch
        low, high = self.sgpr_on_device(sel, index), self.sgpr_on_device(sel, index + 1)
        return (low.to(torch.int64) & MASK32) | (high.to(torch.int64) << 32)

    def sgpr_on_device(self, sel, index):
        """int32 (n, 1) device copy of SGPR `index` of the batch, uploaded once per host epoch."""
        staged = self._stretch_input("sgpr", index)
        if staged is not None:
            return staged
        pending = self._pending_masks
        if pending and (index in pending or index - 1 in pending):
            self._flush_masks()
        cached_sel, epoch, columns = self._sgpr_columns
        if cached_sel is not sel or epoch != self._sgpr_epoch:
            columns = {}
            self._sgpr_columns = (sel, self._sgpr_epoch, columns)
        column = columns.get(index)
        if column is None:
            column = columns[index] = self.to_device(sgpr_column(self._sgpr, index)[sel].view(np.int32))[:, None]
        return column

    def run(self):
        torch = self.torch
        if self.shares_numpy:   # views: the numpy closures of unported instructions share them
            self.tv = torch.from_numpy(self.vgpr.view(np.int32))
            self.tl = torch.from_numpy(self.lds)
            super().run()
            return
        shape = (self.num_waves, self.kernel.num_vector_regs, 64)
        key = (id(self.kernel), shape, self.lds.size, bool(self.check), self.device,
               stretches_enabled())
        kept = _KEPT_POOLS.pop(key, None)
        if kept is not None and kept[0] is self.kernel:
            _, self.tv, self.tl, self.stretches = kept
            self.tv.zero_()
            self.tl.zero_()
            if self.stretches is not None:
                self.stretches.serve(self)
        else:
            self.tv = torch.zeros(shape, dtype=torch.int32, device=self.device)
            # one granule past the pool's LDS: where inactive lanes' writes go (lds_on_device)
            self.tl = torch.zeros(self.lds.size + LDS_GRANULE, dtype=torch.uint8,
                                  device=self.device)
            steps = getattr(self.kernel, "stretch_steps", None)
            if steps is not None and stretches_enabled():
                self.stretches = StretchRunner(self, *steps[bool(self.check)],
                                               capture=not self.on_cpu)
        host_rows = self.vgpr.shape[1]    # v0 (_vgpr_file)
        self.upload(self.tv[:, :host_rows], self.to_host_staging(self.vgpr.view(np.int32)))
        self.vgpr = self.lds = None    # an unported numpy path must not see stale arrays
        super().run()
        if self.stretches is not None:
            self.stretches.check_lds_faults()
        # a launch that ended well leaves its device arrays and captured graphs to the next
        # pool of the same kernel and shape (a failed one leaves nothing: no stale state)
        _KEPT_POOLS[key] = (self.kernel, self.tv, self.tl, self.stretches)
        while len(_KEPT_POOLS) > KEEP_POOLS:
            _KEPT_POOLS.pop(next(iter(_KEPT_POOLS)))

    # ---- batch plumbing
    def tsel(self, sel):
        """`sel` as a torch index (a slice stays a slice)."""
        if isinstance(sel, slice):
            return sel
        cached_sel, value = self._tsel
        if cached_sel is not sel:
            value = self.to_device(np.asarray(sel, np.int64))
            self._tsel = (sel, value)
        return value

    def tmask(self, sel):
        """(EXEC as a device bool (n, 64), all lanes on, active lane count)."""
        runner = self.stretches
        if runner is not None and runner.mode in ("staged", "capture"):
            return runner.staged_exec()
        full, lanes = self.exec_summary(sel)
        if full:     # every lane on: no host mask to build and upload
            return self._all_lanes(lanes // 64), full, lanes
        active = self.exec_state(sel)[0]
        cached, value = self._tmask
        if cached is not active:
            value = self.to_device(np.array(active))   # a writable copy
            self._tmask = (active, value)
        return value, full, lanes

    def _all_lanes(self, n):
        """Device bool (n, 64), all True: a view of one tensor of the pool's width."""
        if self._all_on is None:
            self._all_on = self.torch.ones((self.num_waves, 64), dtype=self.torch.bool,
                                           device=self.device)
        return self._all_on[:n]

    def host(self, tensor) -> np.ndarray:
        """A device tensor's values on the host (a device sync on CUDA)."""
        self._refuse_in_capture("reads the device")
        if self.stretches is not None:
            self.stretches.check_lds_faults()
        return tensor.cpu().numpy() if not self.on_cpu else tensor.numpy()

    def to_device(self, array):
        """A host array on the device, copied without a device sync (`upload`)."""
        self._refuse_in_capture("copies from the host")
        array = np.ascontiguousarray(array)
        if self.on_cpu:
            return self.torch.from_numpy(array)
        host = self.to_host_staging(array)
        return self.upload(self.torch.empty(host.shape, dtype=host.dtype, device=self.device),
                           host)

    def to_host_staging(self, array):
        """A copy of a host array in a staging buffer (`upload` from it)."""
        tensor, staged = self.staging_buffer(array.shape, array.dtype, zero=False)
        np.copyto(staged, array)
        return tensor

    def staging_buffer(self, shape, dtype, zero=True):
        """(host tensor, its numpy view) to fill on the host and `upload`: pinned memory on
        CUDA. Zeroed by numpy (torch's fill of a large tensor wakes its thread pool, whose
        threads then spin)."""
        torch = self.torch
        tensor = torch.empty(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype,
                             pin_memory=not self.on_cpu)
        array = tensor.numpy()
        if zero:
            array.fill(0)
        return tensor, array

    def upload(self, destination, host):
        """destination := host tensor. From pinned memory a CUDA copy is a DMA queued on the
        stream: the host goes on at once, and torch's pinned-memory cache reuses the buffer
        only after the copy ran. (From pageable memory the driver copies through a staging
        buffer, ~80 us for 128 KiB on an H200, and may wait for the stream.)"""
        self._refuse_in_capture("copies from the host")
        return destination.copy_(host, non_blocking=True)

    def _refuse_in_capture(self, what):
        runner = self.stretches
        if runner is not None and runner.mode == "capture":
            raise CaptureRefused(f"a device step {what}")

    def write_rows(self, sel, row, count, values, full, mask=None):
        """values: int32 (n, count, 64) into VGPR rows row..row+count-1 of the lanes of `mask`
        (device bool (n, 64); default EXEC)."""
        ts = self.tsel(sel)
        if full:
            self.tv[ts, row:row + count] = values
            return
        mask = (self.tmask(sel)[0] if mask is None else mask)[:, None, :]
        old = self.tv[ts, row:row + count]
        if isinstance(ts, slice) and values.untyped_storage().data_ptr() != \
                self.tv.untyped_storage().data_ptr():
            # into the registers in place: no temporary and no copy of it (a source that is a
            # view of the registers could overlap the rows written: that one takes the copy)
            self.torch.where(mask, values, old, out=old)
            return
        self.tv[ts, row:row + count] = self.torch.where(mask, values, old)

    def load_global(self, ins, sel, addresses, nbytes, where):
        """uint8 (m, nbytes) device tensor of `nbytes` at each flat uint64 address (m,), checked
        as Pool.global_load checks them (same faults); the data never passes the host."""
        torch = self.torch
        if addresses.size == 0:
            return torch.zeros((0, nbytes), dtype=torch.uint8, device=self.device)
        try:
            groups = self.memory.groups(addresses, nbytes, False)
        except AccessFault as fault:
            self._fault(ins, sel, where, fault, nbytes, False)
        if len(groups) == 1:
            region, _, offsets = groups[0]
            return torch_memory.take(region, offsets, nbytes, self.device)
        out = torch.empty((addresses.size, nbytes), dtype=torch.uint8, device=self.device)
        for region, pick, offsets in groups:
            out[self.to_device(pick)] = torch_memory.take(region, offsets, nbytes, self.device)
        return out

    def store_global(self, ins, sel, addresses, data, where):
        """Store uint8 (m, nbytes) device tensor `data` at flat uint64 `addresses` (checked as
        Pool.global_store checks them; later lanes win on overlap)."""
        if addresses.size == 0:
            return
        nbytes = data.shape[1]
        try:
            groups = self.memory.groups(addresses, nbytes, True)
        except AccessFault as fault:
            self._fault(ins, sel, where, fault, nbytes, False)
        for region, pick, offsets in groups:
            picked = data if isinstance(pick, slice) else data[self.to_device(pick)]
            torch_memory.put(region, offsets, picked)

    def lds_on_device(self, ins, sel, addr_row, offset, nbytes):
        """Device flat byte index (n, 64) of every lane's LDS access — inactive lanes at the
        sink past the pool's LDS — when the addresses stay on the device: without the race
        checker (it wants them on the host) and on own copies; None otherwise, or when a lane
        is out of bounds (the host path then names it)."""
        if self.check or self.shares_numpy:
            return None
        torch = self.torch
        tmask = self.tmask(sel)[0]
        addr = self.tv[self.tsel(sel), addr_row].to(torch.int64) & MASK32
        if offset:
            addr = (addr + offset) & MASK32
        runner = self.stretches
        if runner is not None and runner.mode in ("staged", "capture"):
            return runner.lds_index(ins, addr, nbytes, tmask)
        outside = runner.lds_flag(ins, addr, nbytes, tmask) \
            if runner is not None and runner.defers_lds_checks else None
        if outside is None:
            if bool(((addr + nbytes > self.lds_bytes) & tmask).any()):    # one read: a flag
                return None
        else:
            tmask = tmask & ~outside
        cached_sel, base = self._lds_base
        if cached_sel is not sel:
            base = self.to_device((self.wg_of[sel] * self.lds_stride).astype(np.int64))[:, None]
            self._lds_base = (sel, base)
        return torch.where(tmask, base + addr, self.tl.numel() - LDS_GRANULE)

    def lds_flat(self, ins, sel, addr, nbytes, active):
        """Pool._lds_flat for the torch closures: host flat byte indices, bounds-checked."""
        return self._lds_flat(ins, sel, addr, nbytes, active)

    def lds_rows(self, granule, rows):
        """(len(rows), granule) uint8 LDS bytes on the host (for the race checker)."""
        if self.shares_numpy:
            return super().lds_rows(granule, rows)
        index = self.to_device(rows.astype(np.int64))[:, None] * granule + \
            self.torch.arange(granule, device=self.device)
        return self.host(self.tl[index])


# ------------------------------------------------------------------------------- typed values
# Sources are read as typed torch values: f32 -> float32, f16 -> float16, b32/u32 -> int64
# holding 0..2**32-1, i32 -> int64 signed, u64/b64 -> int64 (the 64 bits), pk_f32 -> float32 (..., 2),
# mask -> bool. Results come back the same way and are stored as 32-bit words.

def _i32(value):
    """int64 holding any integer -> int32 with its low 32 bits (torch's narrowing conversion
    wraps modulo 2**32 on every device)."""
    return value.to(torch_module().int32)


def bits_to_typed(words, typ):
    """int32 words (..., 64) -> the typed value of `typ` (32-bit and 16-bit types)."""
    torch = torch_module()
    if typ == "f32":
        return words.view(torch.float32)
    if typ in ("b32", "u32"):
        return words.to(torch.int64) & MASK32
    if typ == "i32":
        return words.to(torch.int64)
    if typ == "f16":
        low = (words & 0xFFFF).to(torch.int64)
        return (((low + 0x8000) & 0xFFFF) - 0x8000).to(torch.int16).view(torch.float16)
    raise DecodeError(f"torch backend: operand type {typ} is not ported")


def _typed_to_words(value, typ):
    torch = torch_module()
    if typ == "f32":
        return value.to(torch.float32).view(torch.int32)
    if typ in ("b32", "u32", "i32"):
        return _i32(value)
    if typ == "f16":
        return value.to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF
    raise DecodeError(f"torch backend: result type {typ} is not ported")


def _nan(result, *inputs):
    """The shared NaN rule (backend.nan_rule_f32) on float32 tensors, cheaper form: only lanes
    whose result is NaN change."""
    torch = torch_module()
    fix = torch.full(result.shape, shared.F32_DEFAULT_NAN - (1 << 32), dtype=torch.int32,
                     device=result.device)
    for x in reversed(inputs):
        x = torch.broadcast_to(x, result.shape)
        fix = torch.where(torch.isnan(x), x.view(torch.int32) | shared.F32_QUIET_BIT, fix)
    return torch.where(torch.isnan(result), fix.view(torch.float32), result)


def _flush(x):
    torch = torch_module()
    bits = x.view(torch.int32)
    subnormal = ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)
    return torch.where(subnormal, bits & INT32_MIN, bits).view(torch.float32)


def _signbit(x):
    torch = torch_module()
    return x.view(torch.int32) < 0


@torch_cuda_kernels.serves("fma_f32")
def _fma_f32(a, b, c):
    return _fma_f32_scaled(a, b, c)


def _fma_f32_scaled(a, b, c, scale=None):
    """fma rounded once to float32 (semantics._fma_f32 / _fma_f32_scaled): the error-free float64
    sum rounded to odd, then to float32 — correctly rounded on every lane, as numpy's is."""
    torch = torch_module()
    a64, b64, c64 = a.to(torch.float64), b.to(torch.float64), c.to(torch.float64)
    product = a64 * b64
    hi = product + c64
    bb = hi - product
    lo = (product - (hi - bb)) + (c64 - bb)
    plain = hi
    if scale is not None:
        hi, lo, plain = hi * scale, lo * scale, (product + c64) * scale
    inexact = torch.isfinite(hi) & torch.isfinite(lo) & (lo != 0)
    even = (hi.view(torch.int64) & 1) == 0
    toward = torch.where(lo > 0, float("inf"), float("-inf")).to(torch.float64)
    odd = torch.where(inexact & even, torch.nextafter(hi, toward), hi)
    result = torch.where(torch.isfinite(hi), odd, plain).to(torch.float32)
    a, b, c = torch.broadcast_tensors(a, b, c)
    result = _nan(result, a, b, c)
    # the NaN rule per operation, as numpy's a*b then +c: an invalid product (inf * 0) is the
    # default NaN, and it comes before c's NaN
    invalid = torch.isnan(product) & ~torch.isnan(a) & ~torch.isnan(b)
    default = torch.full(result.shape, shared.F32_DEFAULT_NAN - (1 << 32), dtype=torch.int32,
                         device=result.device).view(torch.float32)
    return torch.where(invalid, default, result)


def _exponent_f32(x):
    torch = torch_module()
    return (x.view(torch.int32) >> 23) & 0xFF


def _is_denorm_f32(x):
    torch = torch_module()
    bits = x.view(torch.int32)
    return ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)


def _div_scale_f32(s0, s1, s2):
    """semantics._div_scale_f32, step for step."""
    torch = torch_module()
    s0, s1, s2 = torch.broadcast_tensors(s0, s1, s2)
    up = _nan((s0.to(torch.float64) * 2.0 ** 64).to(torch.float32), s0)
    down = _nan((s0.to(torch.float64) * 2.0 ** -64).to(torch.float32), s0)
    reciprocal_denorm = _is_denorm_f32(1.0 / s1)
    quotient_denorm = _is_denorm_f32(s2 / s1)
    result = s0.clone()
    vcc = torch.zeros(s0.shape, dtype=torch.bool, device=s0.device)
    undecided = torch.ones(s0.shape, dtype=torch.bool, device=s0.device)
    nan = torch.full_like(s0, float("nan"))
    cases = [
        ((s2 == 0) | (s1 == 0), nan, False),
        (_exponent_f32(s2) - _exponent_f32(s1) >= 96, torch.where(s0 == s1, up, s0), True),
        (_is_denorm_f32(s1), up, False),
        (reciprocal_denorm & quotient_denorm, torch.where(s0 == s1, down, s0), True),
        (reciprocal_denorm, down, False),
        (quotient_denorm, torch.where(s0 == s2, up, s0), True),
        (_exponent_f32(s2) <= 23, up, False),
    ]
    for cond, value, flag in cases:
        hit = undecided & cond
        result = torch.where(hit, value, result)
        if flag:
            vcc = vcc | hit
        undecided = undecided & ~cond
    return result, vcc


def _div_fmas_f32(a, b, c, vcc):
    torch = torch_module()
    scale = torch.where(vcc, torch.where(_exponent_f32(c) > 127, 2.0 ** 64, 2.0 ** -64), 1.0)
    return _fma_f32_scaled(a, b, c, scale.to(torch.float64))


def _div_fixup_f32(quotient, den, num):
    """semantics._div_fixup for float32, step for step."""
    torch = torch_module()
    quotient, den, num = torch.broadcast_tensors(quotient, den, num)
    inf = float("inf")
    negative = _signbit(den) ^ _signbit(num)
    signed_inf = torch.where(negative, -inf, inf).to(torch.float32)
    signed_zero = torch.where(negative, -0.0, 0.0).to(torch.float32)
    magnitude = torch.where(torch.isnan(quotient), inf, torch.abs(quotient))
    result = torch.where(negative, -magnitude, magnitude)
    gap = _exponent_f32(num) - _exponent_f32(den)
    result = torch.where(gap < -150, signed_zero, result)
    result = torch.where(torch.isinf(den) | (num == 0), signed_zero, result)
    result = torch.where((den == 0) | torch.isinf(num), signed_inf, result)
    result = torch.where(((den == 0) & (num == 0)) | (torch.isinf(den) & torch.isinf(num)),
                         torch.full_like(result, float("nan")), result)
    result = torch.where(torch.isnan(den), den, result)
    return torch.where(torch.isnan(num), num, result)


def _f32_to_f16(x):
    """v_cvt_f16_f32 as numpy's astype: round to nearest even; a NaN keeps its sign and top 10
    payload bits (1 if those are 0), where torch would make it the canonical NaN. On the int32
    words: no int64 widening."""
    torch = torch_module()
    bits = x.view(torch.int32)
    payload = ((bits & 0x7FFFFF) >> 13).clamp_(min=1)
    nan_bits = ((bits >> 16) & 0x8000) | 0x7C00 | payload      # >> sign-extends: bit 31 -> 15
    return torch.where(torch.isnan(x), nan_bits.to(torch.int16),
                       x.to(torch.float16).view(torch.int16)).view(torch.float16)


def _f16_to_f32(x):
    """f16 -> f32 exactly; a NaN keeps its payload and stays signaling (numpy's astype), where
    torch would quiet it."""
    torch = torch_module()
    half = x.view(torch.int16).to(torch.int64) & 0xFFFF
    nan_bits = ((half & 0x8000) << 16) | 0x7F800000 | ((half & 0x3FF) << 13)
    return torch.where(torch.isnan(x), _i32(nan_bits).view(torch.float32), x.float())


def _mul_hi_u32(a, b):
    """High word of the 64-bit product of two u32 (int64 holds 2**64 only modulo)."""
    return (a * (b >> 16) + ((a * (b & 0xFFFF)) >> 16)) >> 16


def _below_u64(x, y):
    """Unsigned x < y of int64 bit patterns."""
    return (x ^ -(1 << 63)) < (y ^ -(1 << 63))


def _mad_u64_u32(a, b, c):
    total = a * b + c            # modulo 2**64, as the register pair holds it
    return total, _below_u64(total, c)


def _cvt_int(x, low, high):
    """V_CVT_{I32,U32}_F32: truncate, saturate to [low, high], NaN -> 0."""
    torch = torch_module()
    value = torch.clamp(torch.nan_to_num(torch.trunc(x.double()), nan=0.0), low, high)
    return value.to(torch.int64)


def _bitreverse32(x):
    for shift, mask in ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF),
                        (16, 0x0000FFFF)):
        x = ((x >> shift) & mask) | ((x & mask) << shift)
    return x


def _ldexp_f32(x, e):
    """x * 2**e rounded once to float32 (numpy's ldexp): |e| clipped to 400, beyond which every
    float32 over/underflows anyway, so x * 2**e is exact in float64."""
    torch = torch_module()
    e = torch.clamp(e, -400, 400)
    half = e // 2
    scale = lambda k: ((k + 1023) << 52).view(torch.float64)
    value = (x.to(torch.float64) * scale(half) * scale(e - half)).to(torch.float32)
    return _nan(value, torch.broadcast_to(x, value.shape))


def _sh5(s):
    return s & 31


def _perm_words(s0, s1, selector):
    """semantics._perm on int32 words: each selector byte picks a byte of {S0, S1}, a sign fill
    or a constant. One gather per lane from a 16-byte table (the 8 bytes of {S0, S1}, the sign
    fills of bytes 1, 3, 5 and 7, then 0x00 and three 0xFF): a few kernels where a byte-by-byte
    select takes fifty."""
    torch = torch_module()
    shape = torch.broadcast_shapes(s0.shape, s1.shape, selector.shape)
    pair = torch.stack([s1.expand(shape), s0.expand(shape)], dim=-1)   # little-endian {S0, S1}
    data_bytes = pair.view(torch.uint8).reshape(-1, 8)
    sign_fills = (data_bytes[:, 1::2] >> 7) * 255
    constants = device_constant("perm table tail", data_bytes.device, lambda: torch.tensor(
        [0, 255, 255, 255], dtype=torch.uint8, device=data_bytes.device))
    table = torch.cat([data_bytes, sign_fills, constants.expand(data_bytes.shape[0], 4)], dim=1)
    selector_bytes = selector.to(torch.int32).expand(shape).contiguous().view(torch.uint8)
    picks = selector_bytes.reshape(-1, 4).to(torch.int64).clamp_(max=15)
    return table.gather(1, picks).view(torch.int32).reshape(shape)


def _perm(s0, s1, selector):
    return _perm_words(_i32(s0), _i32(s1), _i32(selector)).to(torch_module().int64) & MASK32


def _bfe_u32(a, offset, width):
    offset, width = offset & 31, width & 31
    return torch_module().where(width == 0, 0, (a >> offset) & ((1 << width) - 1))


def _bfe_i32(a, offset, width):
    offset, width = offset & 31, width & 31
    field = ((a & MASK32) >> offset) & ((1 << width) - 1)   # the field of the unsigned word
    sign = (field >> torch_module().clamp(width - 1, min=0)) & 1
    value = field - (sign << width)
    return torch_module().where(width == 0, 0, value)


def _ieee_min_max(a, b, pick):
    """backend._ieee_min_max_f32 on the int32 words (no int64 widening): a signaling NaN operand
    gives that NaN made quiet, otherwise a quiet NaN operand yields the other operand."""
    torch = torch_module()
    a, b = torch.broadcast_tensors(a, b)
    a_bits, b_bits, bits = a.view(torch.int32), b.view(torch.int32), pick.view(torch.int32)
    a_nan, b_nan = torch.isnan(a), torch.isnan(b)
    bits = torch.where(b_nan, a_bits, bits)
    bits = torch.where(a_nan, b_bits, bits)
    quiet = shared.F32_QUIET_BIT
    bits = torch.where(b_nan & ((b_bits & quiet) == 0), b_bits | quiet, bits)
    bits = torch.where(a_nan & ((a_bits & quiet) == 0), a_bits | quiet, bits)
    return bits.view(torch.float32)


@torch_cuda_kernels.serves("max_f32")
def _max(a, b):
    """backend.max_f32 (+0 > -0, the IEEE NaN rules) on float32 tensors."""
    torch = torch_module()
    greater = (a > b) | ((a == b) & ~_signbit(a))
    return _ieee_min_max(a, b, torch.where(greater, a, b))


@torch_cuda_kernels.serves("min_f32")
def _min(a, b):
    """backend.min_f32 (-0 < +0, the IEEE NaN rules) on float32 tensors."""
    torch = torch_module()
    less = (a < b) | ((a == b) & _signbit(a))
    return _ieee_min_max(a, b, torch.where(less, a, b))


@torch_cuda_kernels.serves("exp2_f32")
def _exp2_f32(x):
    """backend.exp2_f32 with the torch backend's cheaper flush and NaN rule (a NaN input's
    result is NaN, so the NaN rule's lanes are the result's)."""
    torch = torch_module()
    return _nan(_flush(shared.exp2_f64(_prims(x), x.to(torch.float64)).to(torch.float32)), x)


def _prims(x):
    return shared.TorchPrims(x.device.type)


# f32 ops rounded once with the NaN rule over their sources in order
_add_f32 = torch_cuda_kernels.serves("add_f32")(lambda a, b: _nan(a + b, a, b))
_sub_f32 = torch_cuda_kernels.serves("sub_f32")(lambda a, b: _nan(a - b, a, b))
_mul_f32 = torch_cuda_kernels.serves("mul_f32")(lambda a, b: _nan(a * b, a, b))
_max3 = torch_cuda_kernels.serves("max3_f32")(lambda a, b, c: _max(_max(a, b), c))
_min3 = torch_cuda_kernels.serves("min3_f32")(lambda a, b, c: _min(_min(a, b), c))


def _float_cmp(cond):
    def compare(a, b):
        torch = torch_module()
        return {"lt": lambda: a < b, "eq": lambda: a == b, "le": lambda: a <= b,
                "gt": lambda: a > b, "ge": lambda: a >= b, "lg": lambda: (a < b) | (a > b),
                "o": lambda: ~(torch.isnan(a) | torch.isnan(b)),
                "u": lambda: torch.isnan(a) | torch.isnan(b),
                "neq": lambda: ~(a == b), "nlt": lambda: ~(a < b), "nle": lambda: ~(a <= b),
                "ngt": lambda: ~(a > b), "nge": lambda: ~(a >= b),
                "nlg": lambda: ~((a < b) | (a > b))}[cond]()
    return compare


_INT_CMP = {"lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b,
            "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "ne": lambda a, b: a != b}

# name -> (result types, source types, fn over typed torch values); same types as semantics.py
PORTED_VALU_OPS: dict[str, tuple[tuple, tuple, object]] = {}


def _op(name, dsts, srcs, fn):
    PORTED_VALU_OPS[name] = (tuple(dsts.split()), tuple(srcs.split()), fn)


def _register_ops():
    f = "f32"
    _op("v_mov_b32", "b32", "b32", lambda a: a)
    _op("v_add_u32", "u32", "u32 u32", lambda a, b: a + b)
    _op("v_sub_u32", "u32", "u32 u32", lambda a, b: a - b)
    _op("v_subrev_u32", "u32", "u32 u32", lambda a, b: b - a)
    _op("v_mul_lo_u32", "u32", "u32 u32", lambda a, b: (a * b) & MASK32)
    _op("v_mul_hi_u32", "u32", "u32 u32", _mul_hi_u32)
    _op("v_mul_u32_u24", "u32", "u32 u32", lambda a, b: (a & 0xFFFFFF) * (b & 0xFFFFFF))
    _op("v_mad_u32_u24", "u32", "u32 u32 u32",
        lambda a, b, c: (a & 0xFFFFFF) * (b & 0xFFFFFF) + c)
    _op("v_mad_u64_u32", "u64 mask", "u32 u32 u64", _mad_u64_u32)
    _op("v_add_co_u32", "u32 mask", "u32 u32", lambda a, b: (a + b, (a + b) > MASK32))
    _op("v_mov_b64", "b64", "b64", lambda a: a)
    _op("v_bfrev_b32", "b32", "b32", _bitreverse32)
    for t in ("u32", "i32"):
        _op(f"v_min3_{t}", t, f"{t} {t} {t}",
            lambda a, b, c: torch_module().minimum(torch_module().minimum(a, b), c))
        _op(f"v_max3_{t}", t, f"{t} {t} {t}",
            lambda a, b, c: torch_module().maximum(torch_module().maximum(a, b), c))
    _op("v_cvt_f32_u32", f, "u32", lambda x: x.to(torch_module().float32))
    _op("v_cvt_f32_i32", f, "i32", lambda x: x.to(torch_module().float32))
    _op("v_cvt_u32_f32", "u32", "f32", lambda x: _cvt_int(x, 0, MASK32))
    _op("v_cvt_i32_f32", "i32", "f32", lambda x: _cvt_int(x, -(1 << 31), (1 << 31) - 1))
    _op("v_ldexp_f32", f, "f32 i32", _ldexp_f32)
    _op("v_add3_u32", "u32", "u32 u32 u32", lambda a, b, c: a + b + c)
    _op("v_and_b32", "b32", "b32 b32", lambda a, b: a & b)
    _op("v_or_b32", "b32", "b32 b32", lambda a, b: a | b)
    _op("v_xor_b32", "b32", "b32 b32", lambda a, b: a ^ b)
    _op("v_not_b32", "b32", "b32", lambda a: a ^ MASK32)
    _op("v_or3_b32", "b32", "b32 b32 b32", lambda a, b, c: a | b | c)
    _op("v_xor3_b32", "b32", "b32 b32 b32", lambda a, b, c: a ^ b ^ c)
    _op("v_and_or_b32", "b32", "b32 b32 b32", lambda a, b, c: (a & b) | c)
    _op("v_lshlrev_b32", "b32", "u32 b32", lambda s, a: a << _sh5(s))
    _op("v_lshrrev_b32", "b32", "u32 b32", lambda s, a: a >> _sh5(s))
    _op("v_ashrrev_i32", "i32", "u32 i32", lambda s, a: a >> _sh5(s))
    _op("v_lshl_add_u32", "u32", "u32 u32 u32", lambda a, s, c: ((a << _sh5(s)) & MASK32) + c)
    _op("v_add_lshl_u32", "u32", "u32 u32 u32", lambda a, b, s: ((a + b) & MASK32) << _sh5(s))
    _op("v_lshl_or_b32", "b32", "b32 u32 b32", lambda a, s, c: (a << _sh5(s)) | c)
    _op("v_xad_u32", "u32", "u32 u32 u32", lambda a, b, c: (a ^ b) + c)
    _op("v_bfe_u32", "u32", "u32 u32 u32", _bfe_u32)
    _op("v_bfe_i32", "i32", "i32 u32 u32", _bfe_i32)
    _op("v_perm_b32", "b32", "b32 b32 b32", _perm)
    _op("v_min_u32", "u32", "u32 u32", lambda a, b: torch_module().minimum(a, b))
    _op("v_max_u32", "u32", "u32 u32", lambda a, b: torch_module().maximum(a, b))
    _op("v_min_i32", "i32", "i32 i32", lambda a, b: torch_module().minimum(a, b))
    _op("v_max_i32", "i32", "i32 i32", lambda a, b: torch_module().maximum(a, b))
    _op("v_cndmask_b32", "b32", "b32 b32 mask", lambda a, b, m: torch_module().where(m, b, a))
    _op("v_lshl_add_u64", "u64", "u64 u32 u64", lambda a, s, c: (a << (s & 7)) + c)
    for cond, fn in _INT_CMP.items():
        for t in ("i32", "u32"):
            _op(f"v_cmp_{cond}_{t}", "mask", f"{t} {t}", fn)
            _op(f"v_cmpx_{cond}_{t}", "mask", f"{t} {t}", fn)
    for cond in ("lt", "eq", "le", "gt", "ge", "lg", "o", "u", "neq", "nlt", "nle", "ngt",
                 "nge", "nlg"):
        _op(f"v_cmp_{cond}_f32", "mask", "f32 f32", _float_cmp(cond))
        _op(f"v_cmpx_{cond}_f32", "mask", "f32 f32", _float_cmp(cond))
    _op("v_add_f32", f, "f32 f32", _add_f32)
    _op("v_sub_f32", f, "f32 f32", _sub_f32)
    _op("v_subrev_f32", f, "f32 f32", lambda a, b: _sub_f32(b, a))
    _op("v_mul_f32", f, "f32 f32", _mul_f32)
    _op("v_fma_f32", f, "f32 f32 f32", _fma_f32)
    _op("v_fmac_f32", f, "f32 f32 f32", _fma_f32)
    _op("v_max_f32", f, "f32 f32", _max)
    _op("v_min_f32", f, "f32 f32", _min)
    _op("v_max3_f32", f, "f32 f32 f32", _max3)
    _op("v_min3_f32", f, "f32 f32 f32", _min3)
    _op("v_rcp_f32", f, "f32", lambda x: _nan((1.0 / _flush(x).double()).float(), x))
    _op("v_rcp_iflag_f32", f, "f32", lambda x: _nan((1.0 / _flush(x).double()).float(), x))
    _op("v_exp_f32", f, "f32", _exp2_f32)
    _op("v_log_f32", f, "f32", lambda x: shared.log2_f32(_prims(x), x))
    _op("v_sqrt_f32", f, "f32", lambda x: shared.sqrt_f32(_prims(x), x))
    _op("v_sin_f32", f, "f32", lambda x: shared.sin_rev_f32(_prims(x), x))
    _op("v_cos_f32", f, "f32", lambda x: shared.cos_rev_f32(_prims(x), x))
    _op("v_cvt_f16_f32", "f16", "f32", _f32_to_f16)
    _op("v_cvt_f32_f16", f, "f16", _f16_to_f32)
    _op("v_pack_b32_f16", "b32", "f16 f16",
        lambda a, b: (a.view(torch_module().int16).to(torch_module().int64) & 0xFFFF)
        | ((b.view(torch_module().int16).to(torch_module().int64) & 0xFFFF) << 16))
    _op("v_div_scale_f32", "f32 mask", "f32 f32 f32", _div_scale_f32)
    _op("v_div_fmas_f32", f, "f32 f32 f32 mask", _div_fmas_f32)
    _op("v_div_fixup_f32", f, "f32 f32 f32", _div_fixup_f32)
    _op("v_pk_add_f32", "pk_f32", "pk_f32 pk_f32", _add_f32)
    _op("v_pk_mul_f32", "pk_f32", "pk_f32 pk_f32", _mul_f32)
    _op("v_pk_mov_b32", "pk_f32", "pk_f32 pk_f32",
        lambda a, b: torch_module().stack([a[..., 0], b[..., 0]], -1))
    _op("v_pk_fma_f32", "pk_f32", "pk_f32 pk_f32 pk_f32", _fma_f32)


_register_ops()

# Ops whose 32-bit result is a function of their sources' 32 bits alone, modulo 2**32: torch
# computes them on the int32 words (two's complement wrap-around), skipping the widening to
# int64 and back. Same names, same results as PORTED_VALU_OPS (the op tests compare both).
WRAP32_OPS = {
    "v_mov_b32": lambda a: a,
    "v_add_u32": lambda a, b: a + b,
    "v_sub_u32": lambda a, b: a - b,
    "v_subrev_u32": lambda a, b: b - a,
    "v_mul_lo_u32": lambda a, b: a * b,
    "v_add3_u32": lambda a, b, c: a + b + c,
    "v_and_b32": lambda a, b: a & b,
    "v_or_b32": lambda a, b: a | b,
    "v_xor_b32": lambda a, b: a ^ b,
    "v_not_b32": lambda a: ~a,
    "v_or3_b32": lambda a, b, c: a | b | c,
    "v_xor3_b32": lambda a, b, c: a ^ b ^ c,
    "v_and_or_b32": lambda a, b, c: (a & b) | c,
    "v_lshlrev_b32": lambda s, a: a << (s & 31),
    "v_ashrrev_i32": lambda s, a: a >> (s & 31),
    "v_lshl_add_u32": lambda a, s, c: (a << (s & 31)) + c,
    "v_lshl_or_b32": lambda a, s, c: (a << (s & 31)) | c,
    "v_xad_u32": lambda a, b, c: (a ^ b) + c,
    "v_perm_b32": _perm_words,
}
_IMPLICIT = {"v_fmac_f32": ("dst",), "v_div_fmas_f32": ("vcc",)}
_ZEROES_HIGH_16 = {"v_cvt_f16_f32"}


# ------------------------------------------------------------------------------- VALU decode

def _split(mnemonic):
    for suffix in ("_e32", "_e64", "_sdwa", "_dpp"):
        if mnemonic.endswith(suffix):
            return mnemonic[: -len(suffix)], suffix[1:]
    return mnemonic, ""


def _signed_const(value: int, bits: int = 32) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


_SDWA_SEL = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8),
             "WORD_0": (0, 16), "WORD_1": (16, 16), "DWORD": (0, 32)}


def _source(i, src, typ, mods, sdwa=False, raw32=False):
    """Reader (P, sel, n) -> typed torch value of one VALU source (`sdwa`: the SDWA form, whose
    src<i>_sel picks a byte or word of the register)."""
    torch = torch_module()
    if typ == "mask":
        if src.kind != "s" or src.count != 2:
            raise DecodeError(f"mask operand {src.text!r} must be an SGPR pair or vcc")
        index = src.index
        return lambda P, sel, n: P.mask_on_device(sel, index)
    op_sel, op_sel_hi = mods.get("op_sel"), mods.get("op_sel_hi")
    neg_lo, neg_hi = mods.get("neg_lo"), mods.get("neg_hi")
    if typ == "pk_f32":
        sel_lo = op_sel[i] if op_sel else 0
        sel_hi = op_sel_hi[i] if op_sel_hi else 1
        nl, nh = bool(neg_lo and neg_lo[i]), bool(neg_hi and neg_hi[i])
        if src.kind != "v":
            raise DecodeError("torch backend: packed f32 operands must be VGPR pairs")
        row = src.index
        flips = {}

        def read_pk(P, sel, n):
            pair = P.tv[P.tsel(sel), row:row + 2]
            words = torch.stack([pair[:, sel_lo], pair[:, sel_hi]], -1)
            if nl or nh:
                if words.device not in flips:
                    flips[words.device] = torch.tensor([INT32_MIN if nl else 0,
                                                        INT32_MIN if nh else 0],
                                                       dtype=torch.int32, device=words.device)
                words = words ^ flips[words.device]
            return words.view(torch.float32)
        return read_pk
    bits = TYPE_BITS[typ]
    if bits == 64:
        if src.kind == "v":
            r = src.index
            return lambda P, sel, n: (P.tv[P.tsel(sel), r].to(torch.int64) & MASK32) | \
                (P.tv[P.tsel(sel), r + 1].to(torch.int64) << 32)
        if src.kind == "s":
            i0 = src.index
            return lambda P, sel, n: P.sgpr64_on_device(sel, i0)
        value = constant_bits(src, typ)
        value = value - (1 << 64) if value >> 63 else value
        cache = {}
        return lambda P, sel, n: cache.get(P.device) if P.device in cache else \
            cache.setdefault(P.device, torch.tensor(value, dtype=torch.int64, device=P.device))
    half_select = 0
    if bits == 16 and op_sel and i < len(op_sel) - 1:
        half_select = op_sel[i]
    is_float = typ in ("f32", "f16")
    if src.kind == "v":
        r = src.index
        raw = lambda P, sel, n: P.tv[P.tsel(sel), r]
    elif src.kind == "s":
        index = src.index
        raw = lambda P, sel, n: P.sgpr_on_device(sel, index)
    elif src.kind in ("const", "float"):
        value = _signed_const(constant_bits(src, typ))
        cache = {}

        def raw(P, sel, n):
            tensor = cache.get(P.device)
            if tensor is None:
                tensor = cache[P.device] = torch.tensor(value, dtype=torch.int32, device=P.device)
            return tensor
    else:
        raise DecodeError(f"torch backend: source operand {src.text!r} is not ported")
    shift, width = _SDWA_SEL[mods.get(f"src{i}_sel", "DWORD")] if sdwa else (0, 32)
    if src.sext and width == 32:
        raise DecodeError("torch backend: sext() operands outside SDWA byte/word selects")
    sext = src.sext
    neg, absolute = src.neg, src.abs
    if (neg or absolute) and not is_float:
        raise DecodeError("torch backend: neg/abs on integer operands is not ported")
    sign = INT32_MIN if bits == 32 else 0x8000

    def read(P, sel, n, dpp_words=None):
        x = raw(P, sel, n) if dpp_words is None else dpp_words
        if width < 32:
            x = (x >> shift) & ((1 << width) - 1)
            if sext:
                top = 1 << (width - 1)
                x = (x ^ top) - top
        if half_select:
            x = (x >> 16) & 0xFFFF
        if absolute:
            x = x & (sign - 1 if bits == 16 else 0x7FFFFFFF)
        if neg:
            x = x ^ sign
        return x if raw32 else bits_to_typed(x, typ)
    return read


def _destination(dst, typ, name, mods, is_cmpx, sdwa=False, raw32=False):
    torch = torch_module()
    if typ == "mask":
        if dst.kind != "s" or dst.count != 2:
            raise DecodeError(f"mask destination {dst.text!r} must be an SGPR pair or vcc")
        index = dst.index

        def write_mask_dst(P, sel, n, value, tmask, full):
            lanes = torch.broadcast_to(value, (n, 64)) & tmask
            if is_cmpx or index in (EXEC_LO - 1, EXEC_LO, EXEC_LO + 1):   # EXEC: on the host now
                lanes = P.host(lanes)
                if is_cmpx:
                    write_mask(P, sel, EXEC_LO, lanes)
                write_mask(P, sel, index, lanes)
            else:
                P.defer_mask(sel, index, lanes)
        return write_mask_dst
    if dst.kind != "v":
        raise DecodeError(f"VALU destination {dst.text!r} must be a VGPR")
    row = dst.index
    if typ == "pk_f32":
        def write_pk(P, sel, n, value, tmask, full):
            words = torch.broadcast_to(value.view(torch.int32), (n, 64, 2)).permute(0, 2, 1)
            P.write_rows(sel, row, 2, words, full, tmask)
        return write_pk
    if TYPE_BITS[typ] == 64:
        def write64(P, sel, n, value, tmask, full):
            value = torch.broadcast_to(value, (n, 64))
            words = torch.stack([_i32(value & MASK32), _i32((value >> 32) & MASK32)], 1)
            P.write_rows(sel, row, 2, words, full, tmask)
        return write64
    op_sel = mods.get("op_sel")
    if TYPE_BITS[typ] == 16:
        if op_sel and op_sel[-1]:
            raise DecodeError("torch backend: op_sel on a 16-bit destination is not ported")
        zero_high = name in _ZEROES_HIGH_16
    else:
        zero_high = True
    shift, width = _SDWA_SEL[mods.get("dst_sel", "DWORD")] if sdwa else (0, 32)
    unused = mods.get("dst_unused", "UNUSED_PAD")
    if width < 32 and TYPE_BITS[typ] != 32:
        raise DecodeError("torch backend: SDWA destinations of 16-bit results are not ported")
    field = ((1 << width) - 1) << shift

    def write(P, sel, n, value, tmask, full):
        words = value if raw32 else _typed_to_words(value, typ)
        if not zero_high:
            words = (P.tv[P.tsel(sel), row] & -65536) | words
        if width < 32:   # SDWA dst_sel: the field, the rest padded / sign-filled / kept
            placed = ((words.to(torch.int64) & MASK32) << shift) & field
            if unused == "UNUSED_PRESERVE":
                old = P.tv[P.tsel(sel), row].to(torch.int64) & MASK32
                placed = (old & (MASK32 ^ field)) | placed
            elif unused == "UNUSED_SEXT":
                high = (MASK32 << (shift + width)) & MASK32
                placed = placed | torch.where(((placed >> (shift + width - 1)) & 1) == 1, high, 0)
            words = _i32(placed)
        P.write_rows(sel, row, 1, torch.broadcast_to(words, (n, 64))[:, None], full, tmask)
    return write


_DPP_MODS = {"quad_perm", "row_shl", "row_shr", "row_ror", "wave_shl", "wave_shr", "wave_rol",
             "wave_ror", "row_mirror", "row_half_mirror", "row_bcast", "row_newbcast", "row_mask",
             "bank_mask", "bound_ctrl", "fi"}


def _decode_valu(ins, ops, mods):
    torch = torch_module()
    name, encoding = _split(ins.mnemonic)
    if name not in PORTED_VALU_OPS:
        raise DecodeError(f"torch backend: {name} is not ported")
    sdwa = encoding == "sdwa"
    if sdwa and any(TYPE_BITS.get(t, 0) not in (32,) and t != "mask"
                    for t in PORTED_VALU_OPS[name][0] + PORTED_VALU_OPS[name][1]):
        raise DecodeError("torch backend: SDWA forms of non-32-bit ops are not ported")
    known = {"op_sel", "op_sel_hi", "neg_lo", "neg_hi"}
    if sdwa:
        known |= {"dst_sel", "dst_unused", "src0_sel", "src1_sel"}
    dpp = None
    if encoding == "dpp":   # src0 from another lane (valu.dpp_source_lanes), as valu.py runs it
        if mods.get("fi"):
            raise DecodeError("torch backend: DPP fetch-inactive is not ported")
        src_lane, in_range, _ = dpp_source_lanes(mods)
        src_lane = np.clip(src_lane, 0, 63)
        row_mask, bank_mask = int(mods.get("row_mask", 0xF)), int(mods.get("bank_mask", 0xF))
        lane = np.arange(64)
        enabled = (((row_mask >> (lane // 16)) & 1) & ((bank_mask >> ((lane >> 2) & 3)) & 1)) \
            .astype(bool)
        dpp = (src_lane, in_range, enabled, "bound_ctrl" in mods)
        known |= _DPP_MODS
        if PORTED_VALU_OPS[name][1][0] not in ("f32", "b32", "u32", "i32", "f16"):
            raise DecodeError("torch backend: DPP of a 64-bit, packed or mask src0 is not ported")
    unknown = set(mods) - known
    if unknown:
        raise DecodeError(f"torch backend: modifier(s) {sorted(unknown)} not ported")
    dsts, srcs, fn = PORTED_VALU_OPS[name]
    raw32 = name in WRAP32_OPS      # computed on the int32 words, no int64 widening
    if raw32:
        fn = WRAP32_OPS[name]
    nd = len(dsts)
    dst_ops, src_ops = ops[:nd], list(ops[nd:])
    for implicit in _IMPLICIT.get(name, ()):
        src_ops.append(dst_ops[0] if implicit == "dst" else Operand("s", VCC_LO, 2, text="vcc"))
    if len(dst_ops) != nd or len(src_ops) != len(srcs):
        raise DecodeError(f"{name} expects {nd} destination and {len(srcs)} source operands")
    readers = [_source(i, s, t, mods, sdwa, raw32) for i, (s, t) in enumerate(zip(src_ops, srcs))]
    if dpp is not None and src_ops[0].kind != "v":
        raise DecodeError("DPP src0 must be a VGPR")
    dpp_row = src_ops[0].index if dpp is not None else None
    writers = [_destination(d, t, name, mods, name.startswith("v_cmpx_"), sdwa, raw32)
               for d, t in zip(dst_ops, dsts)]

    def run(P, sel, n):
        if dpp is None:
            tmask, full, lanes = P.tmask(sel)
            values = [r(P, sel, n) for r in readers]
        else:
            src_lane, in_range, enabled, bound_ctrl = dpp
            active = P.exec_mask(sel)
            valid = in_range & active[:, src_lane]
            write_lanes = active & enabled & (valid | bound_ctrl)
            full, lanes = bool(write_lanes.all()), int(np.count_nonzero(write_lanes))
            tmask = P.to_device(write_lanes)
            gather = P.to_device(src_lane.astype(np.int64))
            words = P.tv[P.tsel(sel), dpp_row][:, gather]
            words = torch.where(P.to_device(valid), words, torch.zeros_like(words))
            values = [readers[0](P, sel, n, words)] + [r(P, sel, n) for r in readers[1:]]
        result = fn(*values)
        if nd == 1:
            result = (result,)
        for w, value in zip(writers, result):
            w(P, sel, n, value, tmask, full)
        return lanes
    # a stretch's device step (torch_graphs): VGPRs written, host inputs asked of the pool,
    # and at most one lane mask to an SGPR pair other than EXEC (`mask_write`: kept on the
    # device, the pool's pending mask once the stretch ends)
    mask_dsts = [d.index for d, t in zip(dst_ops, dsts) if t == "mask"]
    kept = (len(mask_dsts) == 1 and not name.startswith("v_cmpx_")
            and mask_dsts[0] not in (EXEC_LO - 1, EXEC_LO, EXEC_LO + 1))
    run.device_only = dpp is None and (not mask_dsts or kept)
    run.mask_write = mask_dsts[0] if kept else None
    run.mask_reads = frozenset(s.index for s, t in zip(src_ops, srcs) if t == "mask")
    run.scalar_reads = frozenset(i for s, t in zip(src_ops, srcs) if s.kind == "s" and t != "mask"
                                 for i in range(s.index, s.index + s.count))
    return run


def _decode_readlane(ins, ops):
    """v_readlane_b32 sdst, vsrc, lane (an SGPR or constant, & 63): one lane to the host."""
    dst, src, lane_op = ops
    if dst.kind != "s" or src.kind != "v":
        raise DecodeError("torch backend: v_readlane_b32 of a non-VGPR is not ported")
    lane_of = scalar_raw_reader(lane_op, "b32")
    index, row = dst.index, src.index

    def run(P, sel, n):
        lane = (lane_of(P, sel, n) & np.uint32(63)).astype(np.int64)
        picked = P.tv[P.tsel(sel), row].gather(1, P.to_device(lane)[:, None])[:, 0]
        sgpr_column(P.sgpr, index)[sel] = P.host(picked).view(np.uint32)
        return 0
    return run


def _decode_readfirstlane(ins, ops):
    torch = torch_module()
    dst, src = ops
    if dst.kind != "s" or src.kind != "v":
        raise DecodeError("torch backend: v_readfirstlane_b32 of a non-VGPR is not ported")
    index, row = dst.index, src.index

    def run(P, sel, n):
        active = P.exec_mask(sel)
        lane = np.where(active.any(1), active.argmax(1), 0)
        values = P.tv[P.tsel(sel), row]
        picked = values.gather(1, P.to_device(lane.astype(np.int64))[:, None])[:, 0]
        sgpr_column(P.sgpr, index)[sel] = P.host(picked).view(np.uint32)
        return 0
    return run


# ------------------------------------------------------------------------------- memory



def _global_addresses(P, sel, vaddr, saddr, imm):
    """(n, 64) uint64 addresses on the host."""
    torch = torch_module()
    ts = P.tsel(sel)
    if saddr is not None:
        base = sgpr_pair(P, sel, saddr).astype(np.uint64)
        offset = P.host(P.tv[ts, vaddr]).view(np.uint32).astype(np.uint64)
        addr = base[:, None] + offset
    else:
        pair = P.host(P.tv[ts, vaddr:vaddr + 2]).view(np.uint32).astype(np.uint64)
        addr = pair[:, 0] | (pair[:, 1] << np.uint64(32))
    if imm:
        addr = (addr.astype(np.int64) + imm).astype(np.uint64)
    return addr


def _global_addresses_on_device(P, sel, vaddr, saddr, imm):
    """int64 (n, 64) device tensor of the flat addresses of a global access (the VGPR offset
    over an SGPR base, or a VGPR pair), the instruction offset added."""
    torch, ts = P.torch, P.tsel(sel)
    offset = P.tv[ts, vaddr].to(torch.int64) & MASK32
    if saddr is not None:
        base = sgpr_pair(P, sel, saddr)
        addr = P.to_device(base.view(np.int64))[:, None] + offset
    else:
        addr = offset | (P.tv[ts, vaddr + 1].to(torch.int64) << 32)
    if imm:
        addr = addr + imm
    return addr


def _global_store_on_device(P, sel, n, vaddr, saddr, imm, data_row, k, nbytes, how, full):
    """A global store whose active lanes' bytes all fall in one writable region with a tensor
    and do not overlap, done with the addresses on the device (one read: their lowest and
    highest, and whether two lanes overlap); False where the host path must run (overlapping
    lanes, where the later lane wins; several regions; a fault to name)."""
    torch = P.torch
    if P.memory.written is not None:
        return False
    tmask, _, lanes = P.tmask(sel)
    addr = _global_addresses_on_device(P, sel, vaddr, saddr, imm)
    extreme = torch.iinfo(torch.int64)
    active = torch.where(tmask, addr, extreme.max).reshape(-1).sort().values[:lanes]
    gaps = active[1:] - active[:-1]
    overlap = (gaps < nbytes).any() if lanes > 1 else torch.zeros((), dtype=torch.bool,
                                                                   device=addr.device)
    if P.stretches is not None:
        P.stretches.check_lds_faults()
    low, high, overlapping = torch.stack([active[0], active[-1],
                                          overlap.to(torch.int64)]).tolist()
    if overlapping:
        return False
    region = P.memory.enclosing(low, high + nbytes) if low >= 0 else None
    if region is None or region.tensor is None or not region.writable:
        return False
    data = _store_bytes(P, sel, data_row, k, nbytes, how, full)        # active lanes, in order
    dst = region.tensor
    offsets = (addr - region.start)[tmask] if not full else (addr - region.start).reshape(-1)
    index = offsets.to(dst.device)[:, None] + torch.arange(nbytes, device=dst.device)
    dst[index] = data.to(dst.device)
    return True


def _global_load_on_device(P, sel, n, vaddr, saddr, imm, nbytes, how):
    """int32 (n, words, 64) of a global load whose active lanes all fall in one region with a
    tensor, the addresses kept on the device (one read: their lowest and highest); None where
    the host path must run (several regions, host bytes, a fault to name)."""
    torch = P.torch
    tmask = P.tmask(sel)[0]
    addr = _global_addresses_on_device(P, sel, vaddr, saddr, imm)
    extreme = torch.iinfo(torch.int64)
    if P.stretches is not None:
        P.stretches.check_lds_faults()
    low, high = torch.stack([torch.where(tmask, addr, extreme.max).min(),
                             torch.where(tmask, addr, extreme.min).max()]).tolist()
    region = P.memory.enclosing(low, high + nbytes) if low >= 0 else None
    if region is None or region.tensor is None:
        return None
    src = region.tensor
    offsets = torch.where(tmask, addr - region.start, 0).to(src.device)
    data = src[offsets[..., None] + torch.arange(nbytes, device=src.device)].to(P.device)
    words = _loaded_words(data.reshape(-1, nbytes), nbytes, how)
    return words.reshape(n, 64, -1).permute(0, 2, 1)


def _decode_global(ins, ops, mods):
    name = ins.mnemonic
    family, _, rest = name.partition("_")
    unknown = set(mods) - {"offset", "glc", "slc", "nt", "sc0", "sc1"}
    if family != "global" or unknown:
        raise DecodeError(f"torch backend: {name} {sorted(unknown)} is not ported")
    imm = int(mods.get("offset", 0))
    torch = torch_module()
    if rest.startswith("load_") and rest[5:] in _BUFFER_LOAD:
        nbytes, how = _BUFFER_LOAD[rest[5:]]
        dst, vaddr = ops[0], ops[1]
        saddr = ops[2].index if len(ops) > 2 and ops[2].kind == "s" else None
        if dst.kind != "v" or vaddr.kind != "v":
            raise DecodeError("torch backend: global load operands must be VGPRs")
        row, k = dst.index, max(1, nbytes // 4)

        def run_load(P, sel, n):
            full, lanes = P.exec_summary(sel)
            if not P.shares_numpy and lanes:
                words = _global_load_on_device(P, sel, n, vaddr.index, saddr, imm, nbytes, how)
                if words is not None:
                    P.vm_issue(sel)
                    P.write_rows(sel, row, k, words, full)
                    return lanes
            active = P.exec_state(sel)[0]
            addr = _global_addresses(P, sel, vaddr.index, saddr, imm)
            P.vm_issue(sel)
            data = P.load_global(ins, sel, addr.reshape(-1) if full else addr[active], nbytes,
                                 active)
            _write_lanes(P, sel, n, row, k, _loaded_words(data, nbytes, how), full)
            return lanes
        return run_load
    if rest.startswith("store_") and rest[6:] in _BUFFER_STORE:
        nbytes, how = _BUFFER_STORE[rest[6:]]
        vaddr, data_op = ops[0], ops[1]
        saddr = ops[2].index if len(ops) > 2 and ops[2].kind == "s" else None
        if data_op.kind != "v" or vaddr.kind != "v":
            raise DecodeError("torch backend: global store operands must be VGPRs")
        row, k = data_op.index, max(1, nbytes // 4)

        def run_store(P, sel, n):
            full, lanes = P.exec_summary(sel)
            if not P.shares_numpy and lanes and _global_store_on_device(
                    P, sel, n, vaddr.index, saddr, imm, row, k, nbytes, how, full):
                P.vm_issue(sel)
                return lanes
            active = P.exec_state(sel)[0]
            addr = _global_addresses(P, sel, vaddr.index, saddr, imm)
            P.vm_issue(sel)
            data = _store_bytes(P, sel, row, k, nbytes, how, full)
            P.store_global(ins, sel, addr.reshape(-1) if full else addr[active], data, active)
            return lanes
        return run_store
    raise DecodeError(f"torch backend: {name} is not ported")


def _loaded_words(data, nbytes, how):
    """int32 (m, words) of loaded bytes (m, nbytes): whole dwords, or a byte / short zero- or
    sign-extended."""
    torch = torch_module()
    if how == "full":
        return data.view(torch.int32)
    value = data[:, 0].to(torch.int64)
    if nbytes == 2:
        value = value | (data[:, 1].to(torch.int64) << 8)
    if how == "sext":
        sign = 1 << (8 * nbytes - 1)
        value = (value ^ sign) - sign
    return _i32(value[:, None])


def _store_bytes(P, sel, row, k, nbytes, how, full):
    """uint8 (m, nbytes) device tensor of the active lanes' store data (rows row..row+k-1)."""
    torch = P.torch
    words = P.tv[P.tsel(sel), row:row + k].permute(0, 2, 1)
    words = words.reshape(-1, k) if full else words[P.tmask(sel)[0]]
    if how == "hi":
        words = words >> 16
    m = words.shape[0]
    return words.contiguous().reshape(-1).view(torch.uint8).reshape(m, 4 * k)[:, :nbytes] \
        .contiguous()


_BUFFER_LOAD = {"dword": (4, "full"), "dwordx2": (8, "full"), "dwordx3": (12, "full"),
                "dwordx4": (16, "full"), "ubyte": (1, "zext"), "ushort": (2, "zext"),
                "sbyte": (1, "sext"), "sshort": (2, "sext")}
_BUFFER_STORE = {"dword": (4, "full"), "dwordx2": (8, "full"), "dwordx3": (12, "full"),
                 "dwordx4": (16, "full"), "byte": (1, "lo"), "short": (2, "lo"),
                 "byte_d16_hi": (1, "hi"), "short_d16_hi": (2, "hi")}


def _buffer_plan(ins, vaddr, srsrc, soffset, mods):
    """(P, sel) -> (host addresses (n, 64) uint64, byte offsets (n, 64) int64, num_records (n, 1)):
    buffer addressing with OFFEN (or no VGPR offset), as memops' address plan computes it."""
    if mods.get("idxen") or mods.get("addr64"):
        raise DecodeError("torch backend: idxen/addr64 buffer addressing is not ported")
    offen = bool(mods.get("offen"))
    if offen and vaddr.kind != "v":
        raise DecodeError("offen needs a VGPR address")
    if srsrc.kind != "s" or srsrc.count != 4:
        raise DecodeError("buffer resource must be 4 SGPRs")
    if soffset.kind == "s":
        soffset_of = lambda P, sel, n: sgpr_column(P.sgpr, soffset.index)[sel].astype(np.int64)
    elif soffset.kind in ("const",):
        value = int(soffset.value)
        soffset_of = lambda P, sel, n: np.full(n, value, np.int64)
    else:
        raise DecodeError(f"torch backend: buffer soffset {soffset.text!r} is not ported")
    imm, r = int(mods.get("offset", 0)), srsrc.index

    def plan(P, sel, n):
        sgpr = P.sgpr
        w0, w1, w2, w3 = (sgpr_column(sgpr, r + i)[sel] for i in range(4))
        if (w3 & np.uint32(1 << 23)).any():
            raise EmulatorError(f"{ins.at}: buffer resources with ADD_TID_ENABLE are not supported")
        base = w0.astype(np.int64) | ((w1 & np.uint32(0xFFFF)).astype(np.int64) << 32)
        voffset = P.host(P.tv[P.tsel(sel), vaddr.index]).view(np.uint32).astype(np.int64) \
            if offen else np.zeros((n, 64), np.int64)
        byte_offset = soffset_of(P, sel, n)[:, None] + ((voffset + imm) & MASK32)
        return (base[:, None] + byte_offset).astype(np.uint64), byte_offset, \
            w2.astype(np.int64)[:, None]

    def on_device(P, sel, n):
        """(addresses, byte offsets) as int64 (n, 64) device tensors and num_records as an
        int64 (n, 1) one: the plan with the VGPR offsets left on the device; None for a
        resource the host path refuses."""
        torch = P.torch
        sgpr = P.sgpr
        w0, w1, w2, w3 = (sgpr_column(sgpr, r + i)[sel] for i in range(4))
        if (w3 & np.uint32(1 << 23)).any():
            return None
        base = w0.astype(np.int64) | ((w1 & np.uint32(0xFFFF)).astype(np.int64) << 32)
        scalar = P.to_device(np.stack([base, soffset_of(P, sel, n), w2.astype(np.int64)], 1))
        if offen:
            voffset = P.tv[P.tsel(sel), vaddr.index].to(torch.int64) & MASK32
            byte_offset = scalar[:, 1:2] + ((voffset + imm) & MASK32)
        else:
            byte_offset = (scalar[:, 1:2] + (imm & MASK32)).expand(n, 64)
        return scalar[:, 0:1] + byte_offset, byte_offset, scalar[:, 2:3]
    plan.on_device = on_device
    return plan


def _buffer_load_on_device(P, sel, n, plan, nbytes, how):
    """int32 (n, words, 64) of a buffer load whose in-range bytes all fall in one region with
    a tensor (one read: their lowest and highest address); None where the host path must run.
    Out-of-range dwords read 0 (num_records), as on the host path."""
    torch = P.torch
    planned = plan.on_device(P, sel, n)
    if planned is None:
        return None
    addr, byte_offset, limit = planned
    tmask = P.tmask(sel)[0]
    extent = torch.zeros_like(addr)     # the in-range dwords are a prefix: their byte count
    for k in range(0, nbytes, 4):
        width = min(4, nbytes - k)
        extent = extent + width * (tmask & (byte_offset + (k + width) <= limit)).to(torch.int64)
    loaded = extent > 0
    extreme = torch.iinfo(torch.int64)
    low, high = torch.stack([torch.where(loaded, addr, extreme.max).min(),
                             torch.where(loaded, addr + extent, extreme.min).max()]).tolist()
    if high == extreme.min:        # nothing in range: every active lane reads 0
        data = torch.zeros((n * 64, nbytes), dtype=torch.uint8, device=P.device)
    else:
        region = P.memory.enclosing(low, high) if low >= 0 else None
        if region is None or region.tensor is None:
            return None
        src = region.tensor
        byte = torch.arange(nbytes, device=src.device)
        inside = byte < extent.to(src.device)[..., None]
        index = torch.where(inside, (addr - region.start).to(src.device)[..., None] + byte, 0)
        data = torch.where(inside, src[index], 0).to(P.device).reshape(-1, nbytes)
    words = _loaded_words(data, nbytes, how)
    return words.reshape(n, 64, -1).permute(0, 2, 1)


def _decode_buffer(ins, ops, mods):
    rest = ins.mnemonic[len("buffer_"):]
    unknown = set(mods) - {"offset", "offen", "glc", "slc", "nt", "sc0", "sc1"}
    if unknown:
        raise DecodeError(f"torch backend: {ins.mnemonic} modifier(s) {sorted(unknown)}")
    data_op = ops[0]
    if data_op.kind != "v":
        raise DecodeError("buffer data must be a VGPR")
    plan = _buffer_plan(ins, ops[1], ops[2], ops[3], mods)
    row = data_op.index
    if rest.startswith("load_") and rest[5:] in _BUFFER_LOAD:
        nbytes, how = _BUFFER_LOAD[rest[5:]]

        def run_load(P, sel, n):
            full, lanes = P.exec_summary(sel)
            if not P.shares_numpy and lanes:
                words = _buffer_load_on_device(P, sel, n, plan, nbytes, how)
                if words is not None:
                    P.vm_issue(sel)
                    P.write_rows(sel, row, max(1, nbytes // 4), words, full)
                    return lanes
            active = P.exec_state(sel)[0]
            addr, byte_offset, limit = plan(P, sel, n)
            P.vm_issue(sel)
            torch = P.torch
            data = torch.zeros((lanes, max(4, nbytes)), dtype=torch.uint8, device=P.device)
            for k in range(0, nbytes, 4):   # each dword is range-checked; outside reads 0
                width = min(4, nbytes - k)
                ok = active & (byte_offset + (k + width) <= limit)
                if ok.any():
                    loaded = P.load_global(ins, sel, addr[ok] + np.uint64(k), width, ok)
                    if ok.sum() == lanes:
                        data[:, k:k + width] = loaded
                    else:
                        data[P.to_device(ok[active]), k:k + width] = loaded
            words = _loaded_words(data, nbytes, how)[:, :max(1, nbytes // 4)]
            _write_lanes(P, sel, n, row, words.shape[1], words, full)
            return lanes
        return run_load
    if rest.startswith("store_") and rest[6:] in _BUFFER_STORE:
        nbytes, how = _BUFFER_STORE[rest[6:]]
        k_words = max(1, nbytes // 4)

        def run_store(P, sel, n):
            active, full, lanes = P.exec_state(sel)
            addr, byte_offset, limit = plan(P, sel, n)
            P.vm_issue(sel)
            data = _store_bytes(P, sel, row, k_words, nbytes, how, full)
            for k in range(0, nbytes, 4):   # out-of-range dwords are dropped
                width = min(4, nbytes - k)
                ok = active & (byte_offset + (k + width) <= limit)
                if ok.any():
                    part = data[:, k:k + width] if ok.sum() == lanes else \
                        data[P.to_device(ok[active]), k:k + width]
                    P.store_global(ins, sel, addr[ok] + np.uint64(k), part.contiguous(), ok)
            return lanes
        return run_store
    raise DecodeError(f"torch backend: {ins.mnemonic} is not ported")


def _write_lanes(P, sel, n, row, k, words, full):
    """(m, k) int32 words of the active lanes (row-major (wave, lane)) into rows row..row+k-1."""
    torch = P.torch
    if full:
        P.tv[P.tsel(sel), row:row + k] = words.reshape(n, 64, k).permute(0, 2, 1)
        return
    tmask = P.tmask(sel)[0]
    block = P.tv[P.tsel(sel), row:row + k].permute(0, 2, 1).clone()
    block[tmask] = words
    P.tv[P.tsel(sel), row:row + k] = block.permute(0, 2, 1)


_DS_READ = {"b32": (4, "full"), "b64": (8, "full"), "b96": (12, "full"), "b128": (16, "full"),
            "u16": (2, "u16"), "u8": (1, "u8")}
_DS_WRITE = {"b32": (4, "full"), "b64": (8, "full"), "b96": (12, "full"), "b128": (16, "full"),
             "b16": (2, "low"), "b8": (1, "low"), "b16_d16_hi": (2, "hi"), "b8_d16_hi": (1, "hi")}


def _lds_access(P, ins, sel, addr_row, offset, nbytes, active):
    """Host flat byte index of every active lane's access (bounds-checked by Pool._lds_flat),
    and its (granule, rows) for the race checker."""
    base = P.host(P.tv[P.tsel(sel), addr_row]).view(np.uint32).astype(np.int64)
    addr = (base + offset) & MASK32 if offset else base
    return P.lds_flat(ins, sel, addr, nbytes, active)


def _decode_ds(ins, ops, mods):
    torch = torch_module()
    rest = ins.mnemonic[3:]
    unknown = set(mods) - {"offset", "offset0", "offset1"}
    if unknown:
        raise DecodeError(f"torch backend: {ins.mnemonic} modifier(s) {sorted(unknown)}")
    if rest == "swizzle_b32":
        src_lanes = memops.swizzle_source_lanes(memops.decode_swizzle_offset(mods.get("offset", 0)))
        dst, src = ops[0].index, ops[1].index
        lanes_of = {}

        def run_swizzle(P, sel, n):
            tmask, full, lanes = P.tmask(sel)
            index = lanes_of.get(P.device)
            if index is None:
                index = lanes_of[P.device] = P.to_device(src_lanes.astype(np.int64))
            values = P.tv[P.tsel(sel), src][:, index]
            out = torch.where(tmask[:, index], values, torch.zeros_like(values))
            P.write_rows(sel, dst, 1, out[:, None], full)
            return lanes
        run_swizzle.device_only = True
        return run_swizzle
    if rest == "bpermute_b32":
        dst, addr, data = ops[0].index, ops[1].index, ops[2].index
        imm = int(mods.get("offset", 0))

        def run_bpermute(P, sel, n):
            tmask, full, lanes = P.tmask(sel)
            ts = P.tsel(sel)
            src_lane = ((P.tv[ts, addr].to(torch.int64) + imm) >> 2) & 63
            values = P.tv[ts, data].gather(1, src_lane)
            valid = tmask.gather(1, src_lane)
            out = torch.where(valid, values, torch.zeros_like(values))
            P.write_rows(sel, dst, 1, out[:, None], full)
            return lanes
        run_bpermute.device_only = True
        return run_bpermute
    parts = None
    if rest.startswith("read2") or rest.startswith("write2"):
        size = 4 if rest.endswith("b32") else 8
        scale = size * (64 if "st64" in rest else 1)
        offsets = (int(mods.get("offset0", 0)) * scale, int(mods.get("offset1", 0)) * scale)
        if rest.startswith("read2"):
            parts = [(offsets[0], size, "full", ops[0].index),
                     (offsets[1], size, "full", ops[0].index + size // 4)]
            return _ds_read(ins, ops[1].index, parts)
        parts = [(offsets[0], size, "full", ops[1].index), (offsets[1], size, "full", ops[2].index)]
        return _ds_write(ins, ops[0].index, parts)
    if rest.startswith("read_") and rest[5:] in _DS_READ:
        nbytes, how = _DS_READ[rest[5:]]
        return _ds_read(ins, ops[1].index, [(int(mods.get("offset", 0)), nbytes, how, ops[0].index)])
    if rest.startswith("write_") and rest[6:] in _DS_WRITE:
        nbytes, how = _DS_WRITE[rest[6:]]
        return _ds_write(ins, ops[0].index, [(int(mods.get("offset", 0)), nbytes, how, ops[1].index)])
    raise DecodeError(f"torch backend: {ins.mnemonic} is not ported")


def _ds_read_on_device(P, ins, sel, n, addr_row, parts, full) -> bool:
    """The DS read with its addresses on the device (TorchPool.lds_on_device); False (nothing
    done) where the host path must run."""
    torch = P.torch
    flats = []
    for offset, nbytes, how, row in parts:
        flat = P.lds_on_device(ins, sel, addr_row, offset, nbytes)
        if flat is None:
            return False
        flats.append(flat)
    if torch_triton_kernels.enabled(P.tv):   # the flats are taken: each part in one kernel
        tmask = None if full else P.tmask(sel)[0]
        done = [torch_triton_kernels.lds_read(P, sel, n, flat, nbytes, row, tmask, full)
                for flat, (offset, nbytes, how, row) in zip(flats, parts)]
        if all(done):
            return True
        # a kernel failed to build (now off): the torch operations redo every part, the
        # flats taken before any part wrote
    loaded = []
    for flat, (offset, nbytes, how, row) in zip(flats, parts):   # all reads before any write
        data = P.tl[flat[..., None] + torch.arange(nbytes, device=flat.device)]   # (n, 64, b)
        if how == "full":
            words = data.view(torch.int32)
        else:
            wide = data.to(torch.int32)
            words = wide[..., :1] | (wide[..., 1:2] << 8) if how == "u16" else wide[..., :1]
        loaded.append((row, words))
    for row, words in loaded:
        P.write_rows(sel, row, words.shape[-1], words.permute(0, 2, 1), full)
    return True


def _ds_write_on_device(P, ins, sel, addr_row, parts) -> bool:
    """The DS write with its addresses on the device; inactive lanes write the sink."""
    torch = P.torch
    flats = []
    for offset, nbytes, how, row in parts:   # every part checked before any byte is written
        flat = P.lds_on_device(ins, sel, addr_row, offset, nbytes)
        if flat is None:
            return False
        flats.append(flat)
    if torch_triton_kernels.enabled(P.tv):
        done = [torch_triton_kernels.lds_write(P, sel, flat.shape[0], flat, nbytes, row,
                                               16 if how == "hi" else 0)
                for flat, (offset, nbytes, how, row) in zip(flats, parts)]
        if all(done):
            return True
        # a kernel failed to build (now off): the torch operations write every part again
    for flat, (offset, nbytes, how, row) in zip(flats, parts):
        k = max(1, nbytes // 4)
        words = P.tv[P.tsel(sel), row:row + k].permute(0, 2, 1)   # (n, 64, k)
        if how == "hi":
            words = words >> 16
        n = words.shape[0]    # flattened first: a (n, 64, 1) view keeps a stride of 64
        data = words.contiguous().reshape(-1).view(torch.uint8).reshape(n, 64, 4 * k)[..., :nbytes]
        P.tl[flat[..., None] + torch.arange(nbytes, device=flat.device)] = data
    return True


def _ds_read(ins, addr_row, parts):
    torch = torch_module()

    def run(P, sel, n):
        if P.stretches is not None and P.stretches.mode in ("staged", "capture"):
            full = P.tmask(sel)[1]     # a stretch's device step: EXEC is staged
            _ds_read_on_device(P, ins, sel, n, addr_row, parts, full)
            return 0
        full, lanes = P.exec_summary(sel)
        if not P.check and not P.shares_numpy:
            done = _ds_read_on_device(P, ins, sel, n, addr_row, parts, full)
            if done:
                return lanes
        active = P.exec_state(sel)[0]
        loaded = []
        for offset, nbytes, how, row in parts:   # all reads before any write (the ISA's order)
            flat = _lds_access(P, ins, sel, addr_row, offset, nbytes, active)
            if P.check:
                granule, rows = access_rows(flat, nbytes, LDS_GRANULE)
                P.race.record(ins, sel, active, granule, rows, nbytes, write=False)
            index = P.to_device(flat)[:, None] + torch.arange(nbytes, device=P.tl.device)
            data = P.tl[index]
            if how == "full":
                words = data.view(torch.int32)
            else:
                wide = data.to(torch.int32)
                words = wide[:, :1] | (wide[:, 1:2] << 8) if how == "u16" else wide[:, :1]
            loaded.append((row, words))
        for row, words in loaded:
            _write_lanes(P, sel, n, row, words.shape[1], words, full)
        return lanes
    run.device_only = "unchecked"    # a stretch's device step when the race checker is off
    return run


def _ds_write(ins, addr_row, parts):
    torch = torch_module()

    def run(P, sel, n):
        if P.stretches is not None and P.stretches.mode in ("staged", "capture"):
            _ds_write_on_device(P, ins, sel, addr_row, parts)   # EXEC is staged
            return 0
        full, lanes = P.exec_summary(sel)
        if not P.check and not P.shares_numpy and _ds_write_on_device(P, ins, sel, addr_row,
                                                                      parts):
            return lanes
        active = P.exec_state(sel)[0]
        tmask = P.tmask(sel)[0]
        for offset, nbytes, how, row in parts:
            k = max(1, nbytes // 4)
            flat = _lds_access(P, ins, sel, addr_row, offset, nbytes, active)
            words = P.tv[P.tsel(sel), row:row + k].permute(0, 2, 1)
            words = words.reshape(-1, k) if full else words[tmask]
            if how == "hi":
                words = words >> 16
            m = words.shape[0]   # (m, 1) keeps a stride torch will not view as bytes: flatten
            data = words.contiguous().reshape(-1).view(torch.uint8).reshape(m, 4 * k)[:, :nbytes]
            if P.check:
                granule, rows = access_rows(flat, nbytes, LDS_GRANULE)
                values = P.host(data).reshape(len(rows), granule)
                P.race.record(ins, sel, active, granule, rows, nbytes, write=True,
                              new_bytes=values)
            index = P.to_device(flat)[:, None] + torch.arange(nbytes, device=P.tl.device)
            P.tl[index] = data
            if P.check and len(flat):
                P.race.check_batch_writes(ins)
        return lanes
    run.device_only = "unchecked"    # a stretch's device step when the race checker is off
    return run


# ------------------------------------------------------------------------------- MFMA

def _output_rows(d_map, blocks, m, n):
    """Per block, the product rows in D's register order when D's order (`d_map`: the flat
    product index of each D element) takes whole rows of N products, each from its own block;
    else None."""
    flat = d_map.reshape(blocks * m, n)
    starts = flat[:, 0]
    if not (flat == starts[:, None] + np.arange(n)).all() or (starts % n).any():
        return None
    source = (starts // n).reshape(blocks, m)
    if (source // m != np.arange(blocks)[:, None]).any():
        return None
    return source % m


def _decode_mfma(ins, ops, mods, mfma_ops):
    torch = torch_module()
    name = ins.mnemonic.replace("_e64", "")
    op = mfma_ops.get(name) if mfma_ops else None
    if op is None or getattr(op, "a_format", None) not in ("f16", "bf16") or \
            op.b_format != op.a_format or getattr(op, "raw_registers", False):
        raise DecodeError(f"torch backend: {name} is not ported (dense f16/bf16 MFMAs are)")
    if any(int(mods.get(k, 0)) for k in ("cbsz", "abid", "blgp")) or mods.get("neg"):
        raise DecodeError(f"torch backend: {name} with cbsz/abid/blgp/neg is not ported")
    dst, a, b, c = ops
    if c.kind != "v" and not (c.kind == "const" and c.value == 0):
        raise DecodeError(f"torch backend: MFMA C operand {c.text!r} is not ported")
    try:
        a_map, b_map, d_map = op.layout_maps()
    except ValueError as err:
        raise DecodeError(f"torch backend: {err}") from None
    # the fused kernel (torch_triton_kernels) writes D while other programs still read A and
    # B, and each D element reads only its own C: D may be C, but not overlap A, B or C else
    d_rows = set(range(dst.index, dst.index + op.c_regs))
    c_rows = set(range(c.index, c.index + op.c_regs)) if c.kind == "v" else set()
    fused = None if d_rows & (set(range(a.index, a.index + op.a_regs)) |
                              set(range(b.index, b.index + op.b_regs))) or \
        (c_rows & d_rows and c.index != dst.index) else \
        torch_triton_kernels.MfmaTables(a_map, b_map, d_map, op.m, op.n)
    fused_rows = (a.index, b.index, c.index if c.kind == "v" else None, dst.index)
    rows = _output_rows(d_map, op.blocks, op.m, op.n)
    if rows is not None:     # D's order is A's rows reordered: the products come out in it
        a_map, d_map = a_map[np.arange(op.blocks)[:, None], rows], None
    maps = {}
    fmt = op.a_format
    na, nb, nc = op.a_regs, op.b_regs, op.c_regs

    def decode(words, order):
        """int32 (n, regs, 64) -> float64 (n, ...) of the 16-bit elements picked by `order`
        from the (register, lane, half) order — the probe's element order (little-endian
        halves); picked before the widening, which moves a quarter of the bytes."""
        halves = words.reshape(len(words), -1).view(torch.int16)[:, order]
        if fmt == "f16":
            values = halves.view(torch.float16)
        else:       # bf16 bits are the high half of the float32 of the same value
            values = (halves.to(torch.int32) << 16).view(torch.float32)
        return values.to(torch.float64)

    def run(P, sel, n):
        tmask, full, lanes = P.tmask(sel)
        if fused is not None and torch_triton_kernels.enabled(P.tv) and \
                torch_triton_kernels.mfma(P, sel, n, fused, fused_rows, fmt == "bf16", tmask,
                                          full):
            return lanes
        device = P.tl.device
        if device not in maps:
            maps[device] = tuple(None if m is None else torch.from_numpy(m).to(device)
                                 for m in (a_map, b_map, d_map))
        am, bm, dm = maps[device]
        ts = P.tsel(sel)
        a_vals = decode(P.tv[ts, a.index:a.index + na], am)
        b_vals = decode(P.tv[ts, b.index:b.index + nb], bm)
        products = torch.matmul(a_vals, b_vals).reshape(n, -1)
        if dm is not None:
            products = products[:, dm]
        products = products.reshape(n, nc, 64)
        if c.kind == "v":     # widened to float64 inside the add: no float64 copy of C
            products += P.tv[ts, c.index:c.index + nc].view(torch.float32)
        d = products.to(torch.float32).view(torch.int32)
        P.write_rows(sel, dst.index, nc, d, full)
        return lanes
    run.device_only = True
    return run


# ------------------------------------------------------------------------------- the kernel

# 64-bit SALU bitwise ops on lane masks, as bool tensor ops (semantics.py's _BITWISE, bit by bit)
_MASK_SALU = {
    "s_and_b64": lambda a, b: a & b, "s_or_b64": lambda a, b: a | b,
    "s_xor_b64": lambda a, b: a ^ b, "s_andn2_b64": lambda a, b: a & ~b,
    "s_orn2_b64": lambda a, b: a | ~b, "s_nand_b64": lambda a, b: ~(a & b),
    "s_nor_b64": lambda a, b: ~(a | b), "s_xnor_b64": lambda a, b: ~(a ^ b),
}
SCC_SCAN_LIMIT = 64     # instructions looked at for the next SCC write


def _scc_dead_after(dk: DecodedKernel, p: int) -> bool:
    """Whether the SCC that instruction `p` writes is overwritten before anything can read it:
    straight-line code only (a branch target, a branch or an unknown instruction first: live)."""
    from .semantics import SALU_OPS
    from .program import SAVEEXEC
    code = dk.code
    for q in range(p + 1, min(len(code), p + 1 + SCC_SCAN_LIMIT)):
        d = code[q]
        if d is None or dk.is_target[q]:
            return False
        name = d.instr.mnemonic
        if any("scc" in t.lower() for t in d.instr.operands):    # scc, src_scc: a reader
            return False
        if d.control is not None:
            return name == "s_endpgm"
        if d.cls != SALU:
            continue            # vector, memory, waits: no SCC
        if SAVEEXEC.match(name):
            return True         # writes SCC, reads only its source and EXEC
        op = SALU_OPS.get(name)
        if op is None or op.reads_scc:
            return False
        if op.writes_scc:
            return True
    return False


def _decode_mask_salu(ins, ops, host_run):
    """`s_and_b64`-style op on SGPR pairs whose result only feeds lane masks: when a source is
    a compare's mask still on the device, the result stays there too (no read-back; a host
    access of the pair flushes it like a compare's); else the host closure runs. Only used
    where the SCC it writes is dead (`_scc_dead_after`)."""
    fn = _MASK_SALU[ins.mnemonic]
    dst, srcs = ops[0], ops[1:]
    dst_index, src_index = dst.index, [op.index for op in srcs]

    def run(P, sel, n):
        if not any(P.holds_pending_mask(sel, i) for i in src_index):
            return host_run(P, sel, n)
        lanes = []
        for i in src_index:
            on_device = P.pending_mask(sel, i)
            lanes.append(on_device if on_device is not None else P.host_mask_on_device(sel, i))
        P.defer_mask(sel, dst_index, fn(*lanes))
        return 0
    return run


def _mask_salu_ok(ops) -> bool:
    """Two SGPR-pair sources and an SGPR-pair destination other than EXEC."""
    if len(ops) != 3 or any(op.kind != "s" or op.count != 2 or op.index % 2 for op in ops):
        return False
    return ops[0].index != EXEC_LO


def _sgpr_operands(d, accum, regs) -> frozenset | None:
    """The SGPRs instruction `d` names in its operands (None: an operand that does not parse,
    so any)."""
    found = set()
    for token in d.instr.operands:
        try:
            op = parse_operand(token, accum, regs)
        except (ValueError, KeyError, IndexError):
            return None
        if op.kind == "s":
            found.update(range(op.index, op.index + op.count))
    return frozenset(found)


class TorchKernel:
    """A DecodedKernel with the ported instructions' closures swapped for torch ones."""

    def __init__(self, dk: DecodedKernel, decoded: DecodedKernel, fallbacks: list[str]):
        self.numpy_kernel, self.kernel, self.fallbacks = dk, decoded, fallbacks


_HOST_CLASSES = (SALU, SMEM)


def stretches_enabled() -> bool:
    """ROCKE_EMU_STRETCHES (rocke/env.py): device copies run straight-line stretches."""
    from rocke import env
    return env.emu_stretches()
_MFMA_OPS = None


def _mfma_catalog():
    global _MFMA_OPS
    if _MFMA_OPS is None:
        from . import mfma
        _MFMA_OPS = mfma.MFMA_OPS
    return _MFMA_OPS


def _kernel_modes_ok(dk) -> str | None:
    """Why float VALU cannot be ported for this kernel (denormal flushing / rounding modes or
    MODE writes), or None."""
    d = dk.source.descriptor
    if int(d.get("amdhsa_float_denorm_mode_32", 3)) != 3 or \
            int(d.get("amdhsa_float_denorm_mode_16_64", 3)) != 3:
        return "its float denormal mode flushes (only 'preserve' is ported)"
    if int(d.get("amdhsa_float_round_mode_32", 0)) or int(d.get("amdhsa_float_round_mode_16_64", 0)):
        return "its float round mode is not round-to-nearest-even"
    if any(c is not None and c.instr.mnemonic.startswith("s_setreg") for c in dk.code):
        return "it writes MODE with s_setreg"
    return None


def torch_kernel(dk: DecodedKernel, device: str) -> TorchKernel:
    """The torch form of decoded kernel `dk` (cached on it per device and copy mode)."""
    strict = device != "cpu" or SEPARATE_CPU_COPIES
    key = (device, strict)
    cache = getattr(dk, "torch_kernels", None)
    if cache is None:
        cache = dk.torch_kernels = {}
    if key in cache:
        return cache[key]
    from .program import Decoded
    accum, regs = dk.accum_offset, dk.num_vector_regs
    mode_problem = _kernel_modes_ok(dk)
    code, fallbacks = [], []
    for d in dk.code:
        if d is not None and d.cls == SALU and d.instr.mnemonic in _MASK_SALU and \
                _scc_dead_after(dk, len(code)):
            ops = [parse_operand(t, accum, regs) for t in d.instr.operands]
            if _mask_salu_ok(ops):      # a mask op: its result may stay on the device
                code.append(Decoded(_decode_mask_salu(d.instr, ops, d.run), d.cls, None,
                                    d.instr, d.writes_exec))
                continue
        # host-side: scalar ALU and memory, control, and the no-ops / waits / stops (OTHER)
        if d is None or d.control is not None or d.cls in _HOST_CLASSES or d.cls == OTHER:
            code.append(d)
            continue
        ins = d.instr
        try:
            ops = [parse_operand(t, accum, regs) for t in ins.operands]
            mods = parse_modifiers(ins.modifiers)
            if d.cls == VALU:
                base = _split(ins.mnemonic)[0]
                if base == "v_readfirstlane_b32":
                    run = _decode_readfirstlane(ins, ops)
                elif base == "v_readlane_b32":
                    run = _decode_readlane(ins, ops)
                else:
                    if mode_problem and any(t.startswith(("f", "pk_f"))
                                            for t in PORTED_VALU_OPS.get(base, ((), ()))[1]):
                        raise DecodeError(f"torch backend: the kernel's float ops are not "
                                          f"ported because {mode_problem}")
                    run = _decode_valu(ins, ops, mods)
            elif d.cls == VMEM:
                run = (_decode_buffer if ins.mnemonic.startswith("buffer_")
                       else _decode_global)(ins, ops, mods)
            elif d.cls == DS:
                run = _decode_ds(ins, ops, mods)
            elif d.cls == MFMA:
                run = _decode_mfma(ins, ops, mods, _mfma_catalog())
            else:
                raise DecodeError(f"torch backend: {ins.mnemonic} is not ported")
        except (DecodeError, ValueError, KeyError, IndexError) as err:
            message = f"{ins.at}: {ins.mnemonic}: {err}"
            if strict:
                raise EmulatorError(f"kernel {dk.source.name}: {message} — run it with "
                                    "ROCKE_EMU_BACKEND=numpy, or on ROCKE_EMU_DEVICE=cpu where "
                                    "unported instructions fall back to numpy") from None
            fallbacks.append(message)
            code.append(d)
            continue
        code.append(Decoded(run, d.cls, None, ins, d.writes_exec))
    decoded = DecodedKernel(dk.source, code, dk.first, dk.start, dk.is_target,
                            dk.num_vector_regs, dk.accum_offset)
    if strict:   # device copies: straight-line stretches (torch_graphs), per checker setting
        host_step = np.array([d is not None and d.control is None and
                              (d.cls in _HOST_CLASSES or d.cls == OTHER) for d in code], bool)
        decoded.stretch_steps = {}
        for check in (True, False):
            device_step = np.array([d is not None and getattr(d.run, "device_only", False)
                                    in ((True,) if check else (True, "unchecked"))
                                    for d in code], bool)
            cuts = mask_cuts(code, device_step, host_step, dk.is_target,
                             lambda d: _sgpr_operands(d, accum, regs))
            decoded.stretch_steps[check] = (stretch_ends(code, dk.is_target | cuts, device_step,
                                                         host_step), device_step)
    cache[key] = TorchKernel(dk, decoded, fallbacks)
    return cache[key]
