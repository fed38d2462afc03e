"""rocke.emu checkers: global out-of-bounds accesses, LDS bounds and cross-wave LDS races are
stopped with the pc/line, wave, lane and address of the offending access."""
import re

import pytest
import torch

import rocke.emu as emu
from tests.emu.test_engine import LDS_REVERSE, compile_ir

GATHER = """
define amdgpu_kernel void @gather(ptr addrspace(1) %table, ptr addrspace(1) %idx, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %pi = getelementptr i32, ptr addrspace(1) %idx, i32 %tid
  %i = load i32, ptr addrspace(1) %pi
  %pt = getelementptr float, ptr addrspace(1) %table, i32 %i
  %v = load float, ptr addrspace(1) %pt
  %po = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %v, ptr addrspace(1) %po
  ret void
}
"""


def test_global_out_of_bounds_names_argument_lane_and_distance():
    asm = compile_ir(GATHER)
    table = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(64)
    idx = torch.arange(64, dtype=torch.int32)
    emu.launch(asm, "gather", 1, 64, [table, idx, out])
    assert torch.equal(out, table[:64])
    idx[37] = 100 + 1000          # 4000 bytes past the end of `table`'s storage
    with pytest.raises(emu.MemoryFault) as info:
        emu.launch(asm, "gather", 1, 64, [table, idx, out])
    message = str(info.value)
    assert "global_load_dword" in message and re.search(r"line \d+", message)
    assert "wave 0, lane 37" in message
    assert "argument 0 (table" in message
    assert "bytes past its end" in message or "bytes before its start" in message


def test_race_report_names_both_accesses():
    racy = compile_ir(LDS_REVERSE).replace("s_barrier", "s_nop 0")
    with pytest.raises(emu.LdsRace) as info:
        emu.launch(racy, "reverse", 2, 256, [torch.randn(512), torch.zeros(512)])
    message = str(info.value)
    lines = [int(n) for n in re.findall(r"at line (\d+)", message)]
    assert len(lines) == 2 and lines[0] != lines[1]
    assert re.search(r"LDS byte \d+ \(0x[0-9a-f]+\)", message)


def test_identical_rewrites_and_barrier_separated_accesses_are_not_races():
    # every wave writes the same value to one LDS word: benign (Triton's layout conversions)
    ir = """
@flag = internal addrspace(3) global i32 undef, align 4
define amdgpu_kernel void @same(ptr addrspace(1) %out) "amdgpu-flat-work-group-size"="1,256" {
  store volatile i32 42, ptr addrspace(3) @flag
  call void @llvm.amdgcn.s.barrier()
  %v = load volatile i32, ptr addrspace(3) @flag
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %v, ptr addrspace(1) %po
  ret void
}
"""
    out = torch.zeros(256, dtype=torch.int32)
    emu.launch(compile_ir(ir), "same", 1, 256, [out])
    assert torch.all(out == 42)
