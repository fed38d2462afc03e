"""Public entry point of the gfx942 emulator: `launch(code, kernel, grid, block, args, ...)`.

Readings of the ISA this engine commits to (each has a test in tests/emu/test_engine.py):
- raw buffer range check: (VGPR offset + instruction offset) + access size <= num_records per
  dword, the SGPR offset excluded; structured buffers check index < num_records;
  out-of-range loads return 0 and out-of-range stores are dropped;
- LDS DMA writes lane i's dword to LDS at M0 + instruction offset + 4 * i;
- DPP: a source lane outside the row/wave or with EXEC off is invalid (bound_ctrl writes 0,
  otherwise the lane keeps its old value); row_mask/bank_mask disable writes;
- 16-bit VALU results zero or preserve the high half per LLVM's gfx9 opcode table;
- without `check`, out-of-bounds global/LDS accesses still stop the launch (they would touch
  host memory); `check` adds the LDS race checker.
"""
from __future__ import annotations

import hashlib
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from rocke.arch import abi

from .asm import Program, parse_program
from .errors import EmulatorError
from .memory import GlobalMemory
from .machine import Pool
from .program import CLASSES, DecodedKernel, decode_kernel

LDS_LIMIT = 64 * 1024
MAX_POOL_WAVES = 512
RACE_TRACKER_BUDGET = 96 << 20   # bytes of race bookkeeping per pool
_CACHE: OrderedDict[str, tuple[Program, dict[str, DecodedKernel]]] = OrderedDict()
_CACHE_SIZE = 32


@dataclass
class LaunchReport:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    workgroups: int
    waves: int
    instructions: dict[str, int] = field(default_factory=dict)  # wave-level issues per class
    lane_instructions: int = 0   # active lanes summed over VALU/VMEM/DS/MFMA issues
    emulator_wall_time_s: float = 0.0   # host time spent emulating: not GPU time

    @property
    def total_instructions(self) -> int:
        return sum(self.instructions.values())

    def __str__(self):
        mix = ", ".join(f"{k} {v}" for k, v in self.instructions.items())
        return (f"{self.kernel}: {self.workgroups} workgroups, {self.waves} waves; "
                f"wave instructions: {mix}; lane instructions {self.lane_instructions}; "
                f"emulator wall time {self.emulator_wall_time_s:.3f} s")


def _program(code: str) -> tuple[Program, dict[str, DecodedKernel]]:
    from .codeobject import code_object_assembly, is_code_object   # code objects: bytes or a path
    if is_code_object(code):
        code = code_object_assembly(code)
    if not isinstance(code, str):
        raise ValueError(f"code must be gfx942 assembly text (str), got {type(code).__name__}")
    key = hashlib.sha256(code.encode()).hexdigest()
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    entry = (parse_program(code), {})
    _CACHE[key] = entry
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return entry


def _is_tensor(value) -> bool:
    return hasattr(value, "untyped_storage") and hasattr(value, "data_ptr")


def launch(code: str, kernel: str, grid, block, args, shared_mem: int = 0,
           check: bool = True) -> LaunchReport:
    """Run `kernel` from gfx942 assembly `code` over `grid` workgroups of `block` work-items.

    Tensors in `args` are CPU torch tensors, read and written in place.
    """
    program, decoded = _program(code)
    if kernel not in program.kernels:
        raise ValueError(f"unknown kernel {kernel!r}; the assembly defines: "
                         f"{', '.join(sorted(program.kernels))}")
    source = program.kernels[kernel]
    grid3 = abi.normalize_dims(grid, "grid")
    block3 = abi.normalize_dims(block, "block")
    threads = block3[0] * block3[1] * block3[2]
    max_flat = int(source.metadata.get(".max_flat_workgroup_size", 1024))
    if threads > max_flat:
        raise ValueError(f"block {block3} has {threads} work-items, beyond the kernel's "
                         f".max_flat_workgroup_size {max_flat}")
    if not isinstance(shared_mem, (int, np.integer)) or shared_mem < 0:
        raise ValueError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
    static_lds = int(source.descriptor.get("amdhsa_group_segment_fixed_size", 0))
    if static_lds + shared_mem > LDS_LIMIT:
        raise ValueError(f"LDS request too large: {static_lds} static + {shared_mem} dynamic bytes "
                         f"> {LDS_LIMIT} bytes")
    if int(source.descriptor.get("amdhsa_private_segment_fixed_size", 0)) or \
            int(source.descriptor.get("amdhsa_uses_dynamic_stack", 0)):
        raise EmulatorError(f"kernel {kernel} uses private (scratch) memory, which the "
                            "emulator does not support")
    kernel_args = abi.parse_kernel_args(source.metadata)
    explicit = abi.explicit_args(kernel_args)
    if not isinstance(args, (list, tuple)):
        raise ValueError("args must be a list or tuple of kernel arguments")
    if len(args) != len(explicit):
        names = ", ".join(a.name or f"#{a.index}" for a in explicit)
        raise ValueError(f"kernel {kernel} takes {len(explicit)} explicit arguments ({names}), "
                         f"got {len(args)}")
    memory = GlobalMemory()
    for arg, value in zip(explicit, args):
        if _is_tensor(value):
            if value.device.type != "cpu":
                raise ValueError(f"{arg.label}: tensor must be on the CPU, got {value.device}")
            storage = value.untyped_storage()
            memory.add(storage.data_ptr(), storage.nbytes(), f"{arg.label}", True)
    segment_size = int(source.descriptor.get("amdhsa_kernarg_size", 0))
    packed = abi.pack_kernarg_segment(kernel_args, list(args), grid3, block3, int(shared_mem),
                                      lambda t: t.data_ptr(), segment_size)
    if kernel not in decoded:
        decoded[kernel] = decode_kernel(program, source)
    dk = decoded[kernel]

    kernarg = np.zeros(-(-max(len(packed), 16) // 64) * 64 + 64, np.uint8)
    kernarg[:len(packed)] = np.frombuffer(packed, np.uint8)
    dispatch = _dispatch_packet(grid3, block3, static_lds + int(shared_mem), kernarg.ctypes.data)
    queue = np.zeros(256, np.uint8)
    memory.add(kernarg.ctypes.data, kernarg.size, "kernarg segment (read-only)", False, kernarg)
    memory.add(dispatch.ctypes.data, dispatch.size, "dispatch packet (read-only)", False, dispatch)
    memory.add(queue.ctypes.data, queue.size, "queue (read-only)", False, queue)

    start = time.perf_counter()
    waves_per_wg = -(-threads // 64)
    lds_bytes = static_lds + int(shared_mem)
    per_wg_tracker = (lds_bytes + 4) * 11 if check else 0
    pool_wgs = max(1, MAX_POOL_WAVES // waves_per_wg)
    if per_wg_tracker:
        pool_wgs = max(1, min(pool_wgs, RACE_TRACKER_BUDGET // per_wg_tracker))
    gx, gy, gz = grid3
    all_ids = np.stack(np.meshgrid(np.arange(gx), np.arange(gy), np.arange(gz), indexing="ij"),
                       -1).transpose(2, 1, 0, 3).reshape(-1, 3)   # x fastest
    counts = [0] * len(CLASSES)
    lane_instructions = 0
    for first in range(0, len(all_ids), pool_wgs):
        pool = Pool(dk, memory, all_ids[first:first + pool_wgs], block3, lds_bytes, check)
        _initial_state(pool, dk, block3, kernarg, dispatch, queue)
        pool.run()
        counts = [a + b for a, b in zip(counts, pool.counts)]
        lane_instructions += pool.lane_instructions
    wall = time.perf_counter() - start
    return LaunchReport(kernel, grid3, block3, len(all_ids), len(all_ids) * waves_per_wg,
                        dict(zip(CLASSES, counts)), lane_instructions, wall)


def _dispatch_packet(grid, block, group_segment, kernarg_address) -> np.ndarray:
    """An hsa_kernel_dispatch_packet_t for the launch (64 bytes)."""
    dims = abi.grid_dims_count(grid)
    raw = struct.pack("<HHHHHHIIIIIQQQQ", 2, dims, block[0], block[1], block[2], 0,
                      grid[0] * block[0], grid[1] * block[1], grid[2] * block[2], 0,
                      group_segment, 0, kernarg_address, 0, 0)
    return np.frombuffer(raw, np.uint8).copy()


def _initial_state(pool: Pool, dk: DecodedKernel, block, kernarg, dispatch, queue):
    """Register state at wave launch per AMDGPUUsage "Initial Kernel Execution State"."""
    d = dk.source.descriptor
    sg = pool.sgpr
    i = 0

    def put64(value):
        nonlocal i
        sg[:, i] = value & 0xFFFFFFFF
        sg[:, i + 1] = value >> 32
        i += 2
    if d.get("amdhsa_user_sgpr_private_segment_buffer", 0):
        i += 4   # no scratch: an all-zero buffer resource
    if d.get("amdhsa_user_sgpr_dispatch_ptr", 0):
        put64(dispatch.ctypes.data)
    if d.get("amdhsa_user_sgpr_queue_ptr", 0):
        put64(queue.ctypes.data)
    if d.get("amdhsa_user_sgpr_kernarg_segment_ptr", 0):
        put64(kernarg.ctypes.data)
    if d.get("amdhsa_user_sgpr_dispatch_id", 0):
        put64(0)
    if d.get("amdhsa_user_sgpr_flat_scratch_init", 0):
        put64(0)
    if d.get("amdhsa_user_sgpr_private_segment_size", 0):
        i += 1
    preload = int(d.get("amdhsa_user_sgpr_kernarg_preload_length", 0))
    if preload:
        offset = int(d.get("amdhsa_user_sgpr_kernarg_preload_offset", 0))
        words = kernarg[:len(kernarg) - len(kernarg) % 4].view(np.uint32)
        sg[:, i:i + preload] = words[offset:offset + preload]
        i += preload
    s = int(d.get("amdhsa_user_sgpr_count", i))
    wg = pool.wg_ids[pool.wg_of]
    for axis, key in enumerate(("x", "y", "z")):
        if d.get(f"amdhsa_system_sgpr_workgroup_id_{key}", 0):
            sg[:, s] = wg[:, axis]
            s += 1
    if d.get("amdhsa_system_sgpr_workgroup_info", 0):
        s += 1
    if d.get("amdhsa_enable_private_segment", 0) or d.get("amdhsa_system_sgpr_private_segment_wavefront_offset", 0):
        s += 1
    threads = block[0] * block[1] * block[2]
    flat = pool.wave_in_wg[:, None] * 64 + np.arange(64)
    valid = flat < threads
    x = flat % block[0]
    y = (flat // block[0]) % block[1]
    z = flat // (block[0] * block[1])
    pool.vgpr[:, 0, :] = np.where(valid, x | (y << 10) | (z << 20), 0).astype(np.uint32)
    packed_exec = np.packbits(valid, axis=1, bitorder="little").view(np.uint32)
    sg[:, 126:128] = packed_exec
