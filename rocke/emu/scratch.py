"""Private (scratch) memory of a pool of waves: every lane's own private segment.

gfx942 has architected flat scratch (LLVM AMDGPUUsage, "Private Segment" and "Initial Kernel
Execution State"): the hardware sets each wave's FLAT_SCRATCH base, and `scratch_*` instructions
address the lane's private segment by the byte offset [VADDR] + [SADDR] + signed offset. The
hardware interleaves the lanes of a wave dword by dword (swizzled); that interleaving is a
bijection of (lane, private offset) onto the wave's backing memory, so a lane sees its own
linear private bytes — which is what is stored here, one row of `lane_bytes` per lane. An
access outside [0, lane_bytes) would land in another wave's memory (or nowhere) on hardware;
here it is a PrivateFault. The private segment buffer descriptor and flat scratch init user
SGPRs do not exist on architected flat scratch targets (must be 0), so buffer-based spills never
appear in gfx942 code.
"""
from __future__ import annotations

import numpy as np

from .errors import EmulatorError, MemoryFault
from .memory import access_rows, put_rows, take_rows

GRANULE = 16                     # bytes: the widest access of one lane (dwordx4)
# gfx9 (gfx942 included) sizes a wave's scratch in a 13-bit field of 1 KiB units
# (COMPUTE_TMPRING_SIZE.WAVESIZE): at most 8191 KiB per wave of 64 lanes
MAX_WAVE_SCRATCH_BYTES = 8191 * 1024
SCRATCH_POOL_BUDGET = 256 << 20  # bytes of emulated private memory per pool of waves


class PrivateFault(MemoryFault):
    """A private (scratch) access outside the lane's private segment."""


def lane_bytes_of(descriptor: dict, kernel: str) -> int:
    """Bytes of private memory per work-item the kernel descriptor asks for (0: none), or an
    EmulatorError for what the emulator cannot give a kernel (checked before any work)."""
    size = int(descriptor.get("amdhsa_private_segment_fixed_size", 0))
    if int(descriptor.get("amdhsa_uses_dynamic_stack", 0)):
        raise EmulatorError(
            f"kernel {kernel} uses a dynamic stack (amdhsa_uses_dynamic_stack: a variable-size "
            "alloca, recursion or an indirect call), whose private size is only known at run "
            f"time; the emulator supports fixed-size private memory only ({size} bytes per "
            "work-item are fixed). Give the alloca a constant size or remove the recursion.")
    if size and int(descriptor.get("amdhsa_user_sgpr_private_segment_buffer", 0)):
        raise EmulatorError(
            f"kernel {kernel} asks for a private segment buffer descriptor "
            "(amdhsa_user_sgpr_private_segment_buffer), which gfx942 (architected flat "
            "scratch) does not have: was it compiled for another target?")
    if size < 0:
        raise EmulatorError(f"kernel {kernel}: negative private segment size {size}")
    if -(-size * 64 // 1024) * 1024 > MAX_WAVE_SCRATCH_BYTES:
        raise EmulatorError(
            f"kernel {kernel} asks for {size} bytes of private memory per work-item; a gfx942 "
            f"wave can have at most {MAX_WAVE_SCRATCH_BYTES} bytes of scratch "
            f"({MAX_WAVE_SCRATCH_BYTES // 64} per lane)")
    return size


def pool_workgroup_limit(lane_bytes: int, waves_per_wg: int) -> int | None:
    """How many workgroups' private memory fit SCRATCH_POOL_BUDGET (None: no private memory)."""
    if not lane_bytes:
        return None
    per_wg = waves_per_wg * 64 * _stride(lane_bytes)
    return max(1, SCRATCH_POOL_BUDGET // per_wg)


def _stride(lane_bytes: int) -> int:
    return -(-lane_bytes // GRANULE) * GRANULE


class PrivateSegments:
    """The private segments of every lane of `num_waves` waves; zero at wave launch (hardware
    leaves them undefined: a kernel must not read private bytes it did not write)."""

    def __init__(self, num_waves: int, lane_bytes: int):
        self.lane_bytes = lane_bytes
        self.stride = _stride(lane_bytes)
        self.bytes = np.zeros(num_waves * 64 * self.stride, np.uint8)

    def _flat(self, P, ins, sel, offsets, nbytes, active):
        """Flat byte index into self.bytes of every active lane's access (m,), range-checked."""
        bad = active & ((offsets < 0) | (offsets + nbytes > self.lane_bytes))
        if bad.any():
            w, lane = np.argwhere(bad)[0]
            wave = np.arange(P.num_waves)[sel][w]
            offset = int(offsets[w, lane])
            raise PrivateFault(
                f"private (scratch) memory fault in kernel {P.kernel.source.name}, "
                f"{ins.at}: {P.wave_label(wave)}, lane {lane}: {nbytes}-byte "
                f"access at private offset {offset} (0x{offset & 0xFFFFFFFF:x}) is outside the "
                f"lane's {self.lane_bytes}-byte private segment "
                "(.amdhsa_private_segment_fixed_size); on hardware it would reach another "
                "wave's scratch or fault")
        waves = np.arange(P.num_waves)[sel]
        lane_base = (waves[:, None] * 64 + np.arange(64)) * self.stride
        return (lane_base + offsets)[active]

    def load(self, P, ins, sel, offsets, nbytes, active) -> np.ndarray:
        """uint8 (m, nbytes) at each active lane's private byte offset ((n, 64) int64)."""
        flat = self._flat(P, ins, sel, offsets, nbytes, active)
        granule, rows = access_rows(flat, nbytes, GRANULE)
        return take_rows(self.bytes, granule, rows).reshape(len(flat), nbytes)

    def store(self, P, ins, sel, offsets, data, active):
        """Write uint8 (m, nbytes) `data` of the active lanes at their private byte offsets."""
        nbytes = data.shape[-1]
        flat = self._flat(P, ins, sel, offsets, nbytes, active)
        granule, rows = access_rows(flat, nbytes, GRANULE)
        put_rows(self.bytes, granule, rows, np.ascontiguousarray(data).reshape(len(rows), granule))
