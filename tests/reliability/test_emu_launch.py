"""Hostile inputs to `rocke.emu.launch` (foreign assembly, issue 10): each gets the exact error
type with the key words of its message, raised before anything runs or rolled back after, and
every argument's storage is byte-identical afterwards."""
import math
import re
import time

import numpy as np
import pytest
import torch

import rocke.emu as emu
from tests.emu.test_engine import VECTOR_ADD, compile_ir

# out[tid] = -1 first (so a later fault has writes to roll back), then out[tid] = table[idx[tid]]
GATHER_AFTER_WRITE = """
define amdgpu_kernel void @gather(ptr addrspace(1) noalias readonly %table,
                                  ptr addrspace(1) noalias readonly %idx,
                                  ptr addrspace(1) noalias %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %wg, 64
  %gid = add i32 %base, %tid
  %po = getelementptr float, ptr addrspace(1) %out, i32 %gid
  store volatile float -1.0, ptr addrspace(1) %po
  %pi = getelementptr i32, ptr addrspace(1) %idx, i32 %gid
  %i = load i32, ptr addrspace(1) %pi
  %pt = getelementptr float, ptr addrspace(1) %table, i32 %i
  %v = load float, ptr addrspace(1) %pt
  store volatile float %v, ptr addrspace(1) %po
  ret void
}
"""

# writes out[tid], then `for (i = 0; i < n; i += step)` — endless for step 0
STEP_LOOP = """
define amdgpu_kernel void @step_loop(ptr addrspace(1) %out, i32 %n, i32 %step) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store volatile i32 7, ptr addrspace(1) %po
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %next, %loop ]
  store volatile i32 %i, ptr addrspace(1) %po
  %next = add i32 %i, %step
  %more = icmp slt i32 %next, %n
  br i1 %more, label %loop, label %end
end:
  ret void
}
"""

# c[i] = a[i] + b[i] for i < n; declares a and b read-only (LLVM: `.actual_access: read_only`)
ADD_READONLY = """
define amdgpu_kernel void @add_ro(ptr addrspace(1) noalias readonly %a,
                                  ptr addrspace(1) noalias readonly %b,
                                  ptr addrspace(1) noalias %c, i32 %n) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %wg, 64
  %gid = add i32 %base, %tid
  %ok = icmp slt i32 %gid, %n
  br i1 %ok, label %body, label %end
body:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %gid
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %gid
  %pc = getelementptr float, ptr addrspace(1) %c, i32 %gid
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %z = fadd float %x, %y
  store float %z, ptr addrspace(1) %pc
  br label %end
end:
  ret void
}
"""

_ASM: dict[str, str] = {}


def asm(name: str) -> str:
    if name not in _ASM:
        _ASM[name] = compile_ir({"vadd": VECTOR_ADD, "gather": GATHER_AFTER_WRITE,
                                 "step_loop": STEP_LOOP, "add_ro": ADD_READONLY}[name])
    return _ASM[name]


def storage_bytes(args) -> list[bytes]:
    """Every tensor argument's whole storage (not just its view), as bytes."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.layout == torch.strided and a.device.type == "cpu":
            s = a.untyped_storage()
            out.append(bytes(np.ctypeslib.as_array(
                (np.ctypeslib.ctypes.c_uint8 * s.nbytes()).from_address(s.data_ptr()))))
    return out


def expect(error, words, call, args):
    """`call()` raises exactly `error` whose message holds every word of `words` (regexes), and
    leaves every tensor of `args` byte-identical."""
    before = storage_bytes(args)
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    for word in words:
        assert re.search(word, str(info.value)), f"{word!r} not in: {info.value}"
    assert storage_bytes(args) == before, "an argument changed"
    return str(info.value)


def vadd_args():
    return [torch.ones(256), torch.ones(256), torch.full((256,), 3.0), 256, 1.0]


# ----------------------------------------------------------------------------- launch geometry

@pytest.mark.parametrize("grid, block, words", [
    ((3.9,), 256, [r"grid dimensions must be ints", "3.9"]),
    (3.9, 256, [r"grid dimensions must be ints", "float"]),
    (1.0, 256, [r"grid dimensions must be ints"]),
    ((True,), 256, [r"grid dimensions must be ints", "bool"]),
    ("4", 256, [r"grid dimensions must be ints", "str"]),
    ((np.float32(2),), 256, [r"grid dimensions must be ints"]),
    (1, (256.0,), [r"block dimensions must be ints"]),
    ((0,), 256, [r"grid has a zero or negative dimension"]),
    ((2, -1), 256, [r"grid has a zero or negative dimension"]),
    ((1, 1, 1, 1), 256, [r"grid must have 1-3 dimensions"]),
    ((), 256, [r"grid must have 1-3 dimensions"]),
    (1, (0, 1), [r"block has a zero or negative dimension"]),
    ((2 ** 24 + 1,), 256, [r"32-bit grid size", r"axis x"]),
    ((1, 2 ** 32), (1, 1), [r"32-bit grid size", r"axis y"]),
    (1, (32, 32, 2), [r"2048 work-items", r"max_flat_workgroup_size 1024"]),
])
def test_bad_geometry_is_refused_before_running(grid, block, words):
    args = vadd_args()
    expect(ValueError, words, lambda: emu.launch(asm("vadd"), "vadd", grid, block, args), args)


@pytest.mark.parametrize("shared_mem, words", [
    (-1, ["shared_mem must be a non-negative int"]),
    (True, ["shared_mem must be a non-negative int"]),
    (16.0, ["shared_mem must be a non-negative int"]),
    (65537, ["LDS request too large"]),
])
def test_bad_shared_mem(shared_mem, words):
    args = vadd_args()
    expect(ValueError, words,
           lambda: emu.launch(asm("vadd"), "vadd", 1, 256, args, shared_mem=shared_mem), args)


def test_huge_legal_grid_allocates_nothing_up_front_and_is_stopped_by_the_watchdog():
    # 2**38 workgroups: legal per axis; must neither build all ids (~6 TiB) nor run for ages
    args = [torch.zeros(64), torch.zeros(64), torch.zeros(64), 0, 1.0]
    start = time.perf_counter()
    message = expect(emu.LaunchTimeout, [r"wall-time budget of 0.3 s", r"workgroups not started"],
                     lambda: emu.launch(asm("vadd"), "vadd", (2 ** 22 - 1, 2 ** 16), 256, args,
                                        timeout_s=0.3), args)
    assert time.perf_counter() - start < 20, message


# ----------------------------------------------------------------------------- arguments

@pytest.mark.parametrize("position, value, words", [
    (3, 2 ** 31 * 2, [r"argument 3 \(n, by_value\)", "does not fit in 4 bytes"]),
    (3, -2 ** 31 - 1, [r"argument 3 \(n, by_value\)", "does not fit in 4 bytes"]),
    (4, 1e39, [r"argument 4 \(scale, by_value\)", r"does not fit in 4 bytes", "f32"]),
    (4, -3.5e38, [r"argument 4 \(scale, by_value\)", r"does not fit in 4 bytes"]),
    (4, np.float64(0.1), [r"argument 4 \(scale, by_value\)", "float64 0.1",
                          "not exactly representable in 4 bytes"]),
    (3, np.int64(2 ** 40), [r"argument 3 \(n, by_value\)", "does not fit in 4 bytes"]),
    (3, "256", [r"argument 3 \(n, by_value\)", "unsupported argument type str"]),
    (3, None, [r"argument 3 \(n, by_value\)", "pass a number"]),
    (3, torch.ones(1), [r"argument 3 \(n, by_value\)", "pass a number"]),
    (4, 1 + 2j, [r"argument 4 \(scale, by_value\)", "unsupported argument type complex"]),
    (0, 3, [r"argument 0 \(a, global_buffer\)", "pass a tensor or None"]),
    (1, np.zeros(4, np.float32), [r"argument 1 \(b, global_buffer\)", "pass a tensor or None"]),
    (2, torch.zeros(256, device="meta"), [r"argument 2 \(c, global_buffer\)", "on the CPU"]),
    (2, torch.zeros(4, 4).to_sparse(), [r"argument 2 \(c, global_buffer\)", "strided"]),
])
def test_bad_arguments(position, value, words):
    args = vadd_args()
    args[position] = value
    expect(ValueError, words, lambda: emu.launch(asm("vadd"), "vadd", 4, 256, args), args)


def test_numpy_scalars_of_another_size_pass_when_exact():
    a, b, c = torch.arange(256.0), torch.ones(256), torch.zeros(256)
    emu.launch(asm("vadd"), "vadd", 1, 256, [a, b, c, np.int64(200), np.float64(0.5)])
    assert c[:200].tolist() == (a[:200] * 0.5 + 1).tolist() and torch.all(c[200:] == 0)


@pytest.mark.parametrize("args_of, words", [
    (lambda a: a[:4], ["takes 5 explicit arguments", r"\(a, b, c, n, scale\)", "got 4"]),
    (lambda a: a + [1], ["takes 5 explicit arguments", "got 6"]),
    (lambda a: {i: v for i, v in enumerate(a)}, ["args must be a list or tuple"]),
    (lambda a: iter(a), ["args must be a list or tuple"]),
])
def test_bad_argument_lists(args_of, words):
    args = vadd_args()
    expect(ValueError, words, lambda: emu.launch(asm("vadd"), "vadd", 1, 256, args_of(args)), args)


@pytest.mark.parametrize("kernel, words", [
    ("vsub", [r"unknown kernel 'vsub'", "vadd"]),
    (None, [r"unknown kernel None"]),
])
def test_unknown_kernel(kernel, words):
    args = vadd_args()
    expect(ValueError, words, lambda: emu.launch(asm("vadd"), kernel, 1, 256, args), args)


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), float("inf"), "10", True])
def test_bad_timeout(timeout_s):
    args = vadd_args()
    expect(ValueError, ["timeout_s must be a positive number of seconds"],
           lambda: emu.launch(asm("vadd"), "vadd", 1, 256, args, timeout_s=timeout_s), args)


@pytest.mark.parametrize("value", ["0", "-5", "soon", "inf"])
def test_bad_timeout_environment_variable(monkeypatch, value):
    monkeypatch.setenv("ROCKE_EMU_TIMEOUT_S", value)
    args = vadd_args()
    expect(ValueError, ["ROCKE_EMU_TIMEOUT_S must be a positive number"],
           lambda: emu.launch(asm("vadd"), "vadd", 1, 256, args), args)


# ----------------------------------------------------------------------------- aliasing

def test_output_overlapping_an_input_is_refused_unless_allowed():
    store = torch.arange(300, dtype=torch.float32)
    a, c = store[:256], store[40:296]         # c (written) overlaps a (read)
    b = torch.ones(256)
    args = [a, b, c, 256]
    expect(ValueError, [r"argument 0 \(a, global_buffer\) and argument 2 \(c, global_buffer\) "
                        r"overlap", "864 bytes", "allow_alias=True"],
           lambda: emu.launch(asm("add_ro"), "add_ro", 4, 64, args), args)
    # in place on purpose: the same tensor as input and output
    x = torch.arange(256, dtype=torch.float32)
    same = [x, torch.ones(256), x, 256]
    expect(ValueError, ["overlap"], lambda: emu.launch(asm("add_ro"), "add_ro", 4, 64, same), same)
    emu.launch(asm("add_ro"), "add_ro", 4, 64, same, allow_alias=True)
    assert x.tolist() == (torch.arange(256) + 1.0).tolist()


def test_two_writable_arguments_overlapping_are_refused():
    # VECTOR_ADD declares no pointer read-only: every pointer may be written
    store = torch.zeros(600)
    args = [store[:256], store[300:556], store[255:511], 256, 1.0]
    expect(ValueError, [r"argument 0 \(a, global_buffer\) and argument 2 \(c, global_buffer\) "
                        r"overlap", "4 bytes"],
           lambda: emu.launch(asm("vadd"), "vadd", 1, 256, args), args)


def test_read_only_inputs_may_share_memory():
    # what marks them: LLVM's metadata for a noalias readonly pointer (rocke's readonly=True)
    assert asm("add_ro").count(".actual_access:  read_only") == 2
    x = torch.arange(256, dtype=torch.float32)
    out = torch.zeros(256)
    emu.launch(asm("add_ro"), "add_ro", 4, 64, [x, x, out, 256])
    assert out.tolist() == (2 * torch.arange(256.0)).tolist()


# ----------------------------------------------------------------------------- memcheck

def test_write_past_the_view_into_the_same_storage_is_a_fault():
    # the case: c = store[:1000], the kernel writes 1024 elements
    store = torch.full((2048,), 5.0)
    c = store[:1000]
    args = [torch.ones(1024), torch.ones(1024), c, 1024, 1.0]
    expect(emu.MemoryFault, [r"global_store_dword", r"argument 2 \(c, global_buffer\)",
                             r"0 bytes past its end", r"4000 bytes"],
           lambda: emu.launch(asm("vadd"), "vadd", 4, 256, args), args)


def test_read_past_a_strided_view_is_a_fault():
    # a column of a [64, 8] matrix: the view spans elements 0..63*8 of the storage, the kernel
    # reads 64 consecutive floats from its start, which stay inside it — then one past its end
    matrix = torch.arange(64 * 8, dtype=torch.float32).reshape(64, 8)
    column = matrix[:, 3]
    out = torch.zeros(64)
    idx = torch.arange(64, dtype=torch.int32)
    emu.launch(asm("gather"), "gather", 1, 64, [column, idx, out])
    assert out.tolist() == matrix.reshape(-1)[3:67].tolist()
    idx[5] = 63 * 8 + 1                       # first element past the column's last
    args = [column, idx, out]
    expect(emu.MemoryFault, [r"global_load_dword", r"lane 5", r"argument 0 \(table",
                             r"0 bytes past its end"],
           lambda: emu.launch(asm("gather"), "gather", 1, 64, args), args)


# ----------------------------------------------------------------------------- transactional

def test_fault_after_writes_rolls_every_argument_back():
    table = torch.arange(256, dtype=torch.float32)
    idx = torch.arange(256, dtype=torch.int32)
    idx[200] = 10 ** 6                        # workgroup 3 faults after all 4 wrote -1
    out = torch.full((256,), 9.0)
    args = [table, idx, out]
    expect(emu.MemoryFault, [r"workgroup \(3, 0, 0\) wave 0, lane 8", "outside every buffer"],
           lambda: emu.launch(asm("gather"), "gather", 4, 64, args), args)
    assert torch.all(out == 9.0)


def test_trap_after_writes_rolls_back():
    text = asm("gather")
    # trap right after the first store (of -1) landed
    trapped = re.sub(r"(\tglobal_store_dword [^\n]*\n\ts_waitcnt vmcnt\(0\)\n)", r"\1\ts_trap 2\n",
                     text, count=1)
    assert "s_trap 2" in trapped
    out = torch.full((64,), 9.0)
    args = [torch.arange(64.0), torch.arange(64, dtype=torch.int32), out]
    expect(emu.EmulatorError, ["s_trap", "workgroup"],
           lambda: emu.launch(trapped, "gather", 1, 64, args), args)


# ----------------------------------------------------------------------------- watchdog

def endless_vadd() -> tuple[str, int]:
    """vadd with a branch to itself right after its store, and the store's line index."""
    lines = asm("vadd").splitlines()
    at = next(i for i, line in enumerate(lines) if "global_store_dword" in line)
    lines[at + 1:at + 1] = [".Lforever:", "\ts_branch .Lforever"]
    return "\n".join(lines) + "\n", at


def test_branch_to_itself_is_stopped_naming_line_and_waves():
    endless, at = endless_vadd()
    args = vadd_args()
    expect(emu.LaunchTimeout, [r"wall-time budget of 0.2 s", r"4 waves had not ended",
                               rf"line {at + 3} `s_branch \.Lforever`",
                               r"workgroup \(0, 0, 0\) wave 0"],
           lambda: emu.launch(endless, "vadd", 1, 256, args, timeout_s=0.2), args)


def test_a_real_timeout_is_caught_as_an_emulator_error():
    """Code that handles every emulator failure with `except emu.EmulatorError` also gets the
    watchdog's stop of an endless kernel, as a LaunchTimeout that says what ran out."""
    endless, _ = endless_vadd()
    start = time.perf_counter()
    with pytest.raises(emu.EmulatorError) as info:
        emu.launch(endless, "vadd", 1, 256, vadd_args(), timeout_s=0.2)
    assert type(info.value) is emu.LaunchTimeout, f"{type(info.value).__name__}: {info.value}"
    assert "wall-time budget of 0.2 s" in str(info.value)
    assert time.perf_counter() - start < 20


def test_loop_with_step_zero_is_stopped_by_the_environment_budget(monkeypatch):
    monkeypatch.setenv("ROCKE_EMU_TIMEOUT_S", "0.2")
    out = torch.zeros(64, dtype=torch.int32)
    args = [out, 10, 0]
    message = expect(emu.LaunchTimeout, [r"ROCKE_EMU_TIMEOUT_S", r"1 wave had not ended",
                                         r"line \d+ `"],
                     lambda: emu.launch(asm("step_loop"), "step_loop", 1, 64, args), args)
    assert torch.all(out == 0), message
    emu.launch(asm("step_loop"), "step_loop", 1, 64, [out, 10, 3])   # a real step finishes
    assert torch.all(out == 9)
