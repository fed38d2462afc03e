"""Private (scratch) memory in the emulator: hand-written gfx942 `scratch_*` edge cases
(addressing modes, widths, per-lane and per-wave isolation, EXEC, faults) and a DSL kernel whose
register spills run and match torch. Expected values come from the ISA's definitions (the
private offset is [VADDR] + [SADDR] + signed offset; each lane owns its private bytes)."""
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import rocke.emu as emu
from rocke import dsl
from rocke.compiler import compile_ir as compile_kernel
from rocke.emu import scratch
from rocke.emu.scratch import PrivateFault
from rocke.runtime import launch as runtime_launch

from .test_engine import compile_ir

# a kernel with a private segment, compiled by LLVM for its descriptor and metadata; its body is
# replaced by the hand-written tests below
TEMPLATE_IR = """
define amdgpu_kernel void @priv(ptr addrspace(1) %out, i32 %pick) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %arr = alloca [16 x i32], align 4, addrspace(5)
  %p = getelementptr [16 x i32], ptr addrspace(5) %arr, i32 0, i32 %tid
  store volatile i32 %wg, ptr addrspace(5) %p
  %q = getelementptr [16 x i32], ptr addrspace(5) %arr, i32 0, i32 %pick
  %r = load volatile i32, ptr addrspace(5) %q
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %r, ptr addrspace(1) %po
  ret void
}
"""
BLOCK, GRID, OUTS = 128, 2, 6      # two waves per workgroup, two workgroups, 6 dwords per lane
LANE_BYTES = 64
_TEMPLATE = []


def kernel_asm(body: str, lane_bytes: int = LANE_BYTES, **descriptor) -> str:
    """The template kernel with `body` as its code; `{out}` (the output pointer pair), `{wg}`
    (the workgroup id SGPR) are filled in from the descriptor, and `.amdhsa_*` fields set."""
    if not _TEMPLATE:
        _TEMPLATE.append(compile_ir(TEMPLATE_IR))
    asm = _TEMPLATE[0]
    head, rest = asm.split("priv:\n", 1)
    _, tail = rest.split("\ts_endpgm\n", 1)
    fields = dict(re.findall(r"\.amdhsa_(\w+) (\d+)", asm))
    fields.update((key, str(value)) for key, value in descriptor.items())
    kernarg = 2 * (int(fields["user_sgpr_dispatch_ptr"]) + int(fields["user_sgpr_queue_ptr"]))
    assert fields["system_sgpr_workgroup_id_x"] == "1"
    code = body.format(out=f"s[{kernarg}:{kernarg + 1}]", wg=f"s{fields['user_sgpr_count']}")
    asm = head + "priv:\n" + code + "\n\ts_endpgm\n" + tail
    for key, value in {"private_segment_fixed_size": lane_bytes, "next_free_vgpr": 32,
                       "next_free_sgpr": 40, **descriptor}.items():
        asm, count = re.subn(rf"(\.amdhsa_{key}) \d+", rf"\g<1> {value}", asm)
        assert count == 1, key
    return asm


# v1 = global work-item id, v2 = a value unique to the lane across waves and workgroups,
# s[20:21] = output pointer, v20 = this lane's first output byte
PROLOGUE = """
  s_load_dwordx2 s[20:21], {out}, 0x0
  v_and_b32_e32 v0, 0x3ff, v0
  v_mov_b32_e32 v1, {wg}
  v_mul_u32_u24_e32 v1, 0x80, v1
  v_add_u32_e32 v1, v1, v0
  v_mul_u32_u24_e32 v2, 0x10101, v1
  v_add_u32_e32 v2, 0x5000000, v2
  v_mul_u32_u24_e32 v20, 24, v1
  s_waitcnt lgkmcnt(0)
"""
STORE_OUTS = "\n".join(f"  global_store_dword v20, v{10 + k}, s[20:21] offset:{4 * k}"
                       for k in range(OUTS))


def run(body: str, lane_bytes: int = LANE_BYTES, **descriptor) -> np.ndarray:
    out = torch.full((GRID * BLOCK, OUTS), -1, dtype=torch.int32)
    emu.launch(kernel_asm(PROLOGUE + body + STORE_OUTS, lane_bytes, **descriptor), "priv",
               (GRID,), (BLOCK,), [out, 0])
    return out.numpy().view(np.uint32)


def lane_values() -> np.ndarray:
    gid = np.arange(GRID * BLOCK, dtype=np.uint32)
    return gid * np.uint32(0x10101) + np.uint32(0x5000000)


def test_addressing_modes_alias_the_same_private_bytes_per_lane():
    """ST (off, off), SV (VADDR), SS (SADDR, negative offset) and SVS (both) stores, read back
    crosswise through other modes and widths; every lane stores to the same offsets and reads
    its own values (lanes, waves and workgroups are isolated)."""
    out = run("""
  scratch_store_dword off, v2, off
  v_add_u32_e32 v3, 1, v2
  v_mov_b32_e32 v4, 8
  scratch_store_dword v4, v3, off offset:4
  v_add_u32_e32 v5, 2, v2
  s_mov_b32 s22, 20
  scratch_store_dword off, v5, s22 offset:-4
  v_add_u32_e32 v7, 3, v2
  v_mov_b32_e32 v6, 4
  s_mov_b32 s23, 16
  scratch_store_dword v6, v7, s23 offset:4
  scratch_load_dword v10, off, off offset:24
  scratch_load_dword v11, v4, s22 offset:-28
  scratch_load_dwordx2 v[12:13], off, off offset:12
  scratch_load_ubyte v14, off, off offset:1
  scratch_load_sshort v15, off, off offset:2
  s_waitcnt vmcnt(0)
""")
    val = lane_values()
    assert (out[:, 0] == val + 3).all()           # SVS store at 4 + 16 + 4 = 24
    assert (out[:, 1] == val).all()               # 8 + 20 - 28 = 0: the ST store
    assert (out[:, 2] == val + 1).all()           # SV store at 8 + 4 = 12
    assert (out[:, 3] == val + 2).all()           # SS store at 20 - 4 = 16
    assert (out[:, 4] == (val >> 8) & 0xFF).all()
    assert (out[:, 5] == (((val >> 16) & 0xFFFF).astype(np.int16).astype(np.int32)
                          .astype(np.uint32))).all()


def test_wide_stores_and_byte_stores_land_little_endian_in_the_lane():
    out = run("""
  v_add_u32_e32 v3, 1, v2
  v_add_u32_e32 v4, 2, v2
  v_add_u32_e32 v5, 3, v2
  scratch_store_dwordx4 off, v[2:5], off offset:32
  v_mov_b32_e32 v6, 0xab
  scratch_store_byte off, v6, off offset:41
  scratch_store_dword off, v5, off offset:48
  v_mov_b32_e32 v6, 0x12345678
  scratch_store_short_d16_hi off, v6, off offset:50
  scratch_load_dwordx3 v[10:12], off, off offset:36
  v_mov_b32_e32 v13, 0
  scratch_load_short_d16_hi v13, off, off offset:32
  scratch_load_dword v14, off, off offset:48
  v_mov_b32_e32 v15, 0
  s_waitcnt vmcnt(0)
""")
    val = lane_values()
    assert (out[:, 0] == val + 1).all()
    assert (out[:, 1] == ((val + 2) & ~np.uint32(0xFF00)) | np.uint32(0xAB00)).all()
    assert (out[:, 2] == val + 3).all()
    assert (out[:, 3] == (val & 0xFFFF) << 16).all()
    assert (out[:, 4] == ((val + 3) & 0xFFFF) | np.uint32(0x1234 << 16)).all()


def test_exec_masked_lanes_keep_their_private_bytes():
    out = run("""
  scratch_store_dword off, v2, off offset:60
  v_add_u32_e32 v3, 0x500, v2
  s_mov_b32 exec_hi, 0
  scratch_store_dword off, v3, off offset:60
  s_mov_b32 exec_hi, -1
  scratch_load_dword v10, off, off offset:60
  v_mov_b32_e32 v11, 0
  v_mov_b32_e32 v12, 0
  v_mov_b32_e32 v13, 0
  v_mov_b32_e32 v14, 0
  v_mov_b32_e32 v15, 0
  s_waitcnt vmcnt(0)
""")
    val = lane_values()
    low = (np.arange(GRID * BLOCK) % 64) < 32
    assert (out[low, 0] == val[low] + 0x500).all()
    assert (out[~low, 0] == val[~low]).all()


def test_the_private_segment_size_user_sgpr_holds_the_dword_rounded_lane_size():
    # the size SGPR follows the four 64-bit user SGPR pairs (dispatch, queue, kernarg, dispatch
    # id: s0..s7) and precedes the workgroup id
    template = kernel_asm("")
    assert all(f".amdhsa_user_sgpr_{key} 1" in template
               for key in ("dispatch_ptr", "queue_ptr", "kernarg_segment_ptr", "dispatch_id"))
    out = run("""
  v_mov_b32_e32 v10, s8
  v_mov_b32_e32 v11, 0
  v_mov_b32_e32 v12, 0
  v_mov_b32_e32 v13, 0
  v_mov_b32_e32 v14, 0
  v_mov_b32_e32 v15, 0
""", lane_bytes=61, user_sgpr_private_segment_size=1, user_sgpr_count=9)
    assert (out[:, 0] == 64).all()


def test_flat_access_through_the_private_aperture_is_the_lane_private_memory():
    out = run("""
  v_mov_b32_e32 v8, 8
  v_mov_b32_e32 v9, 0x20000
  flat_store_dword v[8:9], v2
  scratch_load_dword v10, off, off offset:8
  v_add_u32_e32 v3, 7, v2
  scratch_store_dword off, v3, off offset:12
  flat_load_dword v11, v[8:9] offset:4
  v_mov_b32_e32 v12, 0
  v_mov_b32_e32 v13, 0
  v_mov_b32_e32 v14, 0
  v_mov_b32_e32 v15, 0
  s_waitcnt vmcnt(0) lgkmcnt(0)
""")
    val = lane_values()
    assert (out[:, 0] == val).all() and (out[:, 1] == val + 7).all()


def test_the_largest_private_segment_in_pools_of_one_workgroup(monkeypatch):
    """131056 bytes per lane (8191 KiB per wave, gfx942's limit), the emulator's private memory
    budget cut to one workgroup per pool: the far end of every lane's segment is its own."""
    monkeypatch.setattr(scratch, "SCRATCH_POOL_BUDGET", 1)
    out = run("""
  v_mov_b32_e32 v3, 0x1ffe0
  scratch_store_dword v3, v2, off offset:0xc
  s_mov_b32 s22, 0x1ffec
  scratch_load_dword v10, off, s22
  v_mov_b32_e32 v11, 0
  v_mov_b32_e32 v12, 0
  v_mov_b32_e32 v13, 0
  v_mov_b32_e32 v14, 0
  v_mov_b32_e32 v15, 0
  s_waitcnt vmcnt(0)
""", lane_bytes=131056)
    assert (out[:, 0] == lane_values()).all()
    assert "private offset 131056" in _fault("""
  s_mov_b32 s22, 0x1ffe0
  scratch_load_dword v10, off, s22 offset:0x10
""", lane_bytes=131056)


def _fault(body, lane_bytes=LANE_BYTES):
    out = torch.full((GRID * BLOCK, OUTS), -1, dtype=torch.int32)
    with pytest.raises(PrivateFault) as caught:
        emu.launch(kernel_asm(PROLOGUE + body + STORE_OUTS, lane_bytes), "priv", (GRID,),
                   (BLOCK,), [out, 0])
    assert (out == -1).all()      # the launch is transactional: outputs untouched
    return str(caught.value)


def test_private_accesses_outside_the_lane_segment_fault_with_lane_and_offset():
    # lane k stores at 4k: lane 16 is the first beyond 64 bytes; earlier global stores roll back
    message = _fault(STORE_OUTS + """
  v_lshlrev_b32_e32 v3, 2, v0
  scratch_store_dword v3, v2, off
""")
    assert "lane 16" in message and "private offset 64" in message
    assert "64-byte private segment" in message and "scratch_store_dword v3, v2, off" in message
    # a dword straddling the end, and a negative offset (wraps to 4 GiB - 4 on hardware)
    assert "private offset 62" in _fault("  scratch_load_dword v10, off, off offset:62\n")
    assert "private offset -4 (0xfffffffc)" in _fault("  scratch_load_dword v10, off, off offset:-4\n")
    # flat through the private aperture is range-checked the same way
    assert "private offset 64" in _fault("""
  v_mov_b32_e32 v8, 64
  v_mov_b32_e32 v9, 0x20000
  flat_load_dword v10, v[8:9]
""")


def test_kernels_the_emulator_cannot_give_private_memory_are_refused_before_running():
    out = torch.full((GRID * BLOCK, OUTS), -1, dtype=torch.int32)
    body = PROLOGUE + "  scratch_load_dword v10, off, off\n" + STORE_OUTS
    with pytest.raises(emu.EmulatorError, match="gives it none"):
        emu.launch(kernel_asm(body, 0), "priv", (GRID,), (BLOCK,), [out, 0])
    with pytest.raises(emu.EmulatorError, match="dynamic stack"):
        emu.launch(kernel_asm(body, uses_dynamic_stack=1), "priv", (GRID,), (BLOCK,), [out, 0])
    with pytest.raises(emu.EmulatorError, match="at most 8387584 bytes of scratch"):
        emu.launch(kernel_asm(body, 131057), "priv", (GRID,), (BLOCK,), [out, 0])
    assert (out == -1).all()


# ------------------------------------------------------------------ compiler-made private memory

GENERIC_ALLOCA_IR = """
define amdgpu_kernel void @generic_alloca(ptr addrspace(1) %out, i32 %pick) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %arr = alloca [8 x i32], align 4, addrspace(5)
  %generic = addrspacecast ptr addrspace(5) %arr to ptr
  %p = getelementptr [8 x i32], ptr %generic, i32 0, i32 %pick
  store volatile i32 %tid, ptr %p
  %q = getelementptr [8 x i32], ptr addrspace(5) %arr, i32 0, i32 %pick
  %r = load volatile i32, ptr addrspace(5) %q
  %s = load volatile i32, ptr %p
  %sum = add i32 %r, %s
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %sum, ptr addrspace(1) %po
  ret void
}
"""


def test_a_generic_pointer_to_an_alloca_goes_through_the_private_aperture():
    """LLVM builds the flat address from `src_private_base` (64-bit: the aperture's base) and
    mixes flat and scratch accesses to the same private bytes."""
    asm = compile_ir(GENERIC_ALLOCA_IR)
    assert "src_private_base" in asm and "flat_store_dword" in asm and "scratch_load" in asm
    out = torch.zeros(128, dtype=torch.int32)
    emu.launch(asm, "generic_alloca", (1,), (128,), [out, 5])
    assert torch.equal(out, 2 * torch.arange(128, dtype=torch.int32))


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scratch"


def test_a_clang_compiled_hip_kernel_with_a_private_table():
    asm = (FIXTURES / "private_table.s").read_text()
    n = 120          # the last workgroup's upper lanes return early
    idx = torch.randint(0, 1000, (128 * 8,), dtype=torch.int32)
    x = torch.randn(128 * 32)
    y = torch.full((128,), -1.0)
    emu.launch(asm, "private_table", (2,), (64,), [idx, x, y, n])
    rows = torch.arange(n)
    table = x.view(128, 32)[:n] * torch.arange(1, 33, dtype=torch.float32)
    want = torch.zeros(n)
    for k in range(8):          # the kernel's order of float additions
        want = want + table[rows, idx.view(128, 8)[:n, k] & 31]
    assert torch.equal(y[:n], want) and (y[n:] == -1.0).all()


def test_a_triton_gemm_that_spills_runs_and_matches_torch():
    """Triton's fp16 GEMM, 128x128 tiles held to 64 VGPRs: hundreds of spills (the fixture's
    generator is next to it). Ragged M and N leave masked rows and columns."""
    info = json.loads((FIXTURES / "matmul_f16_spill.json").read_text())
    asm = (FIXTURES / "matmul_f16_spill.s").read_text()
    assert re.search(r"\.vgpr_spill_count:\s+[1-9]", asm) and "scratch_load" in asm
    M, N, K = 100, 112, 64
    ldc = N + 16
    generator = torch.Generator().manual_seed(11)
    a = torch.randn(M, K, generator=generator).half()
    b = torch.randn(K, N, generator=generator).half()
    c = torch.full((M, ldc), 7.0)
    args = [a, b, c, M, N, K, K, N, ldc] + [None] * info["extra_trailing_pointer_args"]
    emu.launch(asm, info["kernel_symbol"], (1, 1, 1), tuple(info["block"]), args,
               shared_mem=info["shared_mem_bytes"])
    # fp16 products are exact in fp32; only the order of the fp32 sums differs
    torch.testing.assert_close(c[:, :N], a.float() @ b.float(), rtol=1e-5, atol=1e-4)
    assert (c[:, N:] == 7.0).all()


# ------------------------------------------------------------------ a DSL kernel that spills

ROW = 160   # floats per work-item held in registers: more than 64 VGPRs can hold


def row_mean_var_kernel(waves_per_eu: int | None) -> dsl.Kernel:
    """Two-pass mean and variance of each work-item's row, the whole row live in registers
    across the first pass: spills when `waves_per_eu` leaves a wave too few registers."""
    k = dsl.Kernel(f"row_mean_var_wpe{waves_per_eu or 0}", workgroup_size=64,
                   waves_per_eu=waves_per_eu)
    src, dst = k.arg_ptr("x", dsl.f32, readonly=True), k.arg_ptr("y", dsl.f32)
    rows = k.arg_i32("rows")
    row = k.block_id(0) * 64 + k.thread_id(0)
    a, b = src.buffer(rows * ROW), dst.buffer(rows * 2)
    values = []
    for j in range(0, ROW, 4):
        v = a.load(row * ROW + j, width=4)
        values += [v[i] for i in range(4)]
    total = values[0]
    for v in values[1:]:
        total = total + v
    mean = total * (1.0 / ROW)
    squares = (values[0] - mean) * (values[0] - mean)
    for v in values[1:]:
        squares = squares + (v - mean) * (v - mean)
    b.store(row * 2, mean)
    b.store(row * 2 + 1, squares * (1.0 / ROW))
    return k


def _row_mean_var(waves_per_eu):
    k = row_mean_var_kernel(waves_per_eu)
    return compile_kernel(k.ir(), name=k.name, cache=False)


def test_a_spilling_dsl_kernel_runs_and_matches_torch():
    spilling = _row_mean_var(8)          # 8 waves per SIMD: at most 64 VGPRs
    assert spilling.info.vgpr_spills > 0 and spilling.info.scratch_bytes > 0
    assert "scratch_store" in spilling.asm and "scratch_load" in spilling.asm
    x = torch.randn(128, ROW)
    y = torch.zeros(128, 2)
    runtime_launch(spilling, (2,), (64, 1, 1), [x, y, 128])
    want = torch.stack([x.double().mean(1), x.double().var(1, unbiased=False)], 1)
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-6)
    # the same arithmetic without spills gives the same bits
    resident = _row_mean_var(None)
    assert resident.info.spills == 0
    y_resident = torch.zeros(128, 2)
    runtime_launch(resident, (2,), (64, 1, 1), [x, y_resident, 128])
    assert torch.equal(y, y_resident)
