"""The buffer range rule of the hardware (see rocke/emu/launch.py): SOFFSET and the instruction
offset count toward the check, only VOFFSET + instruction offset wraps at 32 bits, wide
loads/stores are checked per dword, atomics all or nothing, only IDXEN on a strided buffer
checks the index, and out-of-range lanes of an LDS DMA write zeros to LDS.

Each kernel is compiled once from LLVM IR; a test rewrites its one buffer instruction's
offset/addressing fields to the exact form it needs. Expected values are computed here from
the rule, independently of the emulator."""
import re

import numpy as np
import pytest
import torch

import rocke.emu as emu
from tests.emu.test_engine import compile_ir

LOAD_X4 = """
declare <4 x i32> @llvm.amdgcn.raw.buffer.load.v4i32(<4 x i32>, i32, i32, i32)
define amdgpu_kernel void @load_x4(ptr addrspace(1) %memory, <4 x i32> inreg %rsrc, i32 %vbias,
                                   i32 %soff, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %t16 = shl i32 %tid, 4
  %voff = add i32 %t16, %vbias
  %v = call <4 x i32> @llvm.amdgcn.raw.buffer.load.v4i32(<4 x i32> %rsrc, i32 %voff, i32 %soff, i32 0)
  %po = getelementptr <4 x i32>, ptr addrspace(1) %out, i32 %tid
  store <4 x i32> %v, ptr addrspace(1) %po
  ret void
}
"""

STORE_X4 = """
declare void @llvm.amdgcn.raw.buffer.store.v4i32(<4 x i32>, <4 x i32>, i32, i32, i32)
define amdgpu_kernel void @store_x4(ptr addrspace(1) %memory, <4 x i32> inreg %rsrc, i32 %soff) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %t16 = shl i32 %tid, 4
  %base = shl i32 %tid, 2
  %w0 = add i32 %base, 1
  %w1 = add i32 %base, 2
  %w2 = add i32 %base, 3
  %w3 = add i32 %base, 4
  %a = insertelement <4 x i32> poison, i32 %w0, i32 0
  %b = insertelement <4 x i32> %a, i32 %w1, i32 1
  %c = insertelement <4 x i32> %b, i32 %w2, i32 2
  %d = insertelement <4 x i32> %c, i32 %w3, i32 3
  call void @llvm.amdgcn.raw.buffer.store.v4i32(<4 x i32> %d, <4 x i32> %rsrc, i32 %t16, i32 %soff, i32 0)
  ret void
}
"""

ATOMIC_X2 = """
declare i64 @llvm.amdgcn.raw.buffer.atomic.add.i64(i64, <4 x i32>, i32, i32, i32)
define amdgpu_kernel void @atomic_x2(ptr addrspace(1) %memory, <4 x i32> inreg %rsrc,
                                     ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %t8 = shl i32 %tid, 3
  %one = zext i32 %tid to i64
  %add = add i64 %one, 4294967297
  %old = call i64 @llvm.amdgcn.raw.buffer.atomic.add.i64(i64 %add, <4 x i32> %rsrc, i32 %t8, i32 0, i32 0)
  %po = getelementptr i64, ptr addrspace(1) %out, i32 %tid
  store i64 %old, ptr addrspace(1) %po
  ret void
}
"""

LDS_DMA_OVER_OLD = """
@stage = internal addrspace(3) global [64 x i32] undef, align 16
define amdgpu_kernel void @dma(ptr addrspace(1) %memory, <4 x i32> inreg %rsrc,
                               ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %slot = getelementptr i32, ptr addrspace(3) @stage, i32 %tid
  store i32 -1, ptr addrspace(3) %slot
  call void @llvm.amdgcn.s.waitcnt(i32 0)
  %voff = shl i32 %tid, 2
  call void @llvm.amdgcn.raw.buffer.load.lds(<4 x i32> %rsrc, ptr addrspace(3) @stage, i32 4, i32 %voff, i32 0, i32 0, i32 0)
  call void @llvm.amdgcn.s.waitcnt(i32 0)
  %v = load i32, ptr addrspace(3) %slot
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %v, ptr addrspace(1) %po
  ret void
}
"""

_ASM: dict[str, str] = {}


def asm_of(ir: str, name: str) -> str:
    if name not in _ASM:
        _ASM[name] = compile_ir(ir)
    return _ASM[name]


def rewrite(asm: str, opcode: str, change) -> str:
    """`asm` with the one `opcode` line passed through `change(line)`."""
    lines = asm.splitlines()
    hits = [i for i, line in enumerate(lines) if re.match(rf"\s*{opcode}\b", line)]
    assert len(hits) == 1, hits
    lines[hits[0]] = change(lines[hits[0]])
    return "\n".join(lines) + "\n"


def resource(memory: torch.Tensor, num_records: int, stride: int = 0) -> int:
    return ((memory.data_ptr() & 0xFFFF_FFFF_FFFF) | (stride << 48) | (num_records << 64)
            | (0x00020000 << 96))


def expected_x4(words: np.ndarray, range_offsets: np.ndarray, num_records: int) -> np.ndarray:
    """Per-dword rule: dword k of a lane reads words[(offset + 4k) / 4] if offset + 4k + 4 <=
    num_records, else 0."""
    out = np.zeros((len(range_offsets), 4), np.int64)
    for lane, offset in enumerate(range_offsets):
        for k in range(4):
            if offset + 4 * k + 4 <= num_records:
                out[lane, k] = words[(offset + 4 * k) // 4]
    return out


def run_load(asm, num_records, vbias=0, soff=0, stride=0):
    memory = torch.arange(1, 4097, dtype=torch.int32)
    out = torch.full((64, 4), -7, dtype=torch.int32)
    emu.launch(asm, "load_x4", 1, 64,
               [memory, resource(memory, num_records, stride), vbias, soff, out])
    return memory.numpy(), out.numpy()


def test_wide_loads_are_checked_per_dword():
    asm = asm_of(LOAD_X4, "load_x4")
    assert re.search(r"buffer_load_dwordx4 v\[\d+:\d+\], v\d+, s\[\d+:\d+\], s\d+ offen$",
                     asm, re.M)
    words, out = run_load(asm, num_records=16 * 10 + 8)
    expected = expected_x4(words, 16 * np.arange(64), 16 * 10 + 8)
    assert out.tolist() == expected.tolist()
    assert out[10].tolist() == [41, 42, 0, 0]   # lane 10: two dwords in range, two not


def test_soffset_counts_toward_the_range_check():
    asm = asm_of(LOAD_X4, "load_x4")
    words, out = run_load(asm, num_records=160, soff=32)
    # the address includes SOFFSET, and so does the check: lanes 0..7 read, 8.. read zero
    expected = expected_x4(words, 32 + 16 * np.arange(64), 160)
    assert out.tolist() == expected.tolist()
    assert out[7].tolist() == [37, 38, 39, 40] and not out[8:].any()


def test_instruction_offset_counts_toward_the_range_check():
    asm = rewrite(asm_of(LOAD_X4, "load_x4"), "buffer_load_dwordx4",
                  lambda line: line + " offset:32")
    words, out = run_load(asm, num_records=160)
    expected = expected_x4(words, 32 + 16 * np.arange(64), 160)
    assert out.tolist() == expected.tolist()
    assert out[7].tolist() == [37, 38, 39, 40] and not out[8:].any()


def test_voffset_plus_instruction_offset_wraps_at_32_bits_but_soffset_does_not():
    asm = rewrite(asm_of(LOAD_X4, "load_x4"), "buffer_load_dwordx4",
                  lambda line: line + " offset:16")
    # VOFFSET = 16 * lane - 16 (as u32) plus offset:16 wraps to 16 * lane
    words, out = run_load(asm, num_records=4096, vbias=-16)
    assert out.tolist() == expected_x4(words, 16 * np.arange(64), 4096).tolist()
    # SOFFSET = 2**32 - 16 is added after the wrap: every byte offset is >= 2**32 - 16
    words, out = run_load(asm, num_records=0xFFFF_FFFF, soff=-16)
    in_range = (2 ** 32 - 16 + 16 + 16 * np.arange(64) + 4) <= 0xFFFF_FFFF
    assert not in_range.any() and not out.any()


def test_offen_on_a_strided_buffer_is_checked_by_byte_offset():
    asm = asm_of(LOAD_X4, "load_x4")
    # stride 16 and num_records 100: without IDXEN, 100 is a byte count
    words, out = run_load(asm, num_records=100, stride=16)
    assert out.tolist() == expected_x4(words, 16 * np.arange(64), 100).tolist()
    assert out[6].tolist() == [25, 0, 0, 0] and not out[7:].any()


def test_idxen_on_a_strided_buffer_checks_the_index():
    asm = rewrite(asm_of(LOAD_X4, "load_x4"), "buffer_load_dwordx4",
                  lambda line: line.replace(" offen", " idxen"))
    # VADDR is the index 16 * lane; stride 8; num_records 40 records: lanes 0, 1, 2 in range
    # (index 0, 16, 32), whose 16 bytes run past their 8-byte record but are not cut
    words, out = run_load(asm, num_records=40, stride=8, soff=4)
    expected = np.zeros((64, 4), np.int64)
    for lane in range(3):
        start = (4 + lane * 16 * 8) // 4
        expected[lane] = words[start:start + 4]
    assert out.tolist() == expected.tolist()


def test_wide_stores_drop_out_of_range_dwords_one_by_one():
    asm = asm_of(STORE_X4, "store_x4")
    assert re.search(r"buffer_store_dwordx4 .* offen", asm)
    memory = torch.full((512,), -5, dtype=torch.int32)
    soff = 8
    num_records = 8 + 16 * 10 + 8
    emu.launch(asm, "store_x4", 1, 64, [memory, resource(memory, num_records), soff])
    expected = np.full(512, -5)
    for lane in range(64):
        for k in range(4):
            offset = soff + 16 * lane + 4 * k
            if offset + 4 <= num_records:
                expected[offset // 4] = 4 * lane + k + 1
    assert memory.numpy().tolist() == expected.tolist()
    assert memory[2 + 40:2 + 44].tolist() == [41, 42, -5, -5]


def test_atomics_are_all_or_nothing_and_return_zero_out_of_range():
    asm = asm_of(ATOMIC_X2, "atomic_x2")
    assert re.search(r"buffer_atomic_add_x2 .* offen sc0", asm)
    memory = torch.arange(128, dtype=torch.int64) * 3
    before = memory.clone()
    out = torch.full((64,), -9, dtype=torch.int64)
    num_records = 8 * 10 + 4      # lane 10's 8 bytes straddle the bound: dropped whole
    emu.launch(asm, "atomic_x2", 1, 64, [memory, resource(memory, num_records), out])
    lanes = np.arange(64)
    added = np.where(lanes < 10, lanes + 2 ** 32 + 1, 0)
    assert memory[:64].tolist() == (before[:64].numpy() + added).tolist()
    assert memory[64:].tolist() == before[64:].tolist()
    assert out.tolist() == np.where(lanes < 10, before[:64].numpy(), 0).tolist()


def test_lds_dma_out_of_range_lanes_write_zeros_to_lds():
    asm = asm_of(LDS_DMA_OVER_OLD, "dma")
    assert re.search(r"buffer_load_dword .* lds", asm)
    source = torch.arange(100, 164, dtype=torch.int32)
    out = torch.zeros(64, dtype=torch.int32)
    # LDS holds -1 before the DMA: lanes 0..39 get their dword, lanes 40.. get 0 (not -1)
    emu.launch(asm, "dma", 1, 64, [source, resource(source, 4 * 40), out])
    expected = np.where(np.arange(64) < 40, np.arange(100, 164), 0)
    assert out.tolist() == expected.tolist()
