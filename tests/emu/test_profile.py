"""Exact counters (`launch(..., profile=True)`) against counts worked out by hand: coalescing
segments of a gather, LDS bank conflicts of chosen address patterns, a GEMM's MFMA issues."""
import pytest
import torch

import rocke.emu as emu
from rocke.emu.profile import lds_access_cycles
from tests.emu.test_engine import compile_ir

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

# every lane writes then reads LDS element idx[tid] (float, or <2 x float> for the b64 form)
LDS_PATTERN = """
@tile = internal addrspace(3) global [8192 x float] undef, align 16
define amdgpu_kernel void @{name}(ptr addrspace(1) %idx, ptr addrspace(1) %out) {{
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %pi = getelementptr i32, ptr addrspace(1) %idx, i32 %tid
  %i = load i32, ptr addrspace(1) %pi
  %ps = getelementptr {ty}, ptr addrspace(3) @tile, i32 %i
  store volatile {ty} {val}, ptr addrspace(3) %ps, align {align}
  %w = load volatile {ty}, ptr addrspace(3) %ps, align {align}
  %po = getelementptr {ty}, ptr addrspace(1) %out, i32 %tid
  store {ty} %w, ptr addrspace(1) %po
  ret void
}}
"""


def aligned(n, dtype=torch.float32, align=128):
    """A zeroed 1-D tensor of n elements whose first byte is `align`-aligned."""
    size = torch.tensor([], dtype=dtype).element_size()
    raw = torch.zeros(n + align // size, dtype=dtype)
    skip = (-raw.data_ptr() % align) // size
    return raw[skip:skip + n]


def _line(profile, mnemonic):
    (line,) = [l for l in profile.lines if l.text.split()[0] == mnemonic]
    return line


@pytest.mark.parametrize("stride, seg64, seg128", [(1, 4, 2), (16, 64, 32), (0, 1, 1)])
def test_gather_segments_bytes_and_footprint(stride, seg64, seg128):
    """64 lanes read table[stride * lane]: 4-byte loads 4 * stride bytes apart from a 128-byte
    aligned base. Contiguous: 256 bytes = 4 64-byte / 2 128-byte segments; 64 bytes apart:
    one 64-byte segment per lane, two lanes per 128-byte segment; all lanes on one address:
    one segment."""
    asm = compile_ir(GATHER)
    table, idx, out = aligned(1024), aligned(64, torch.int32), aligned(64)
    table += torch.arange(1024, dtype=torch.float32)
    idx += torch.arange(64, dtype=torch.int32) * stride
    report = emu.launch(asm, "gather", 1, 64, [table, idx, out], profile=True)
    assert torch.equal(out, table[idx.long()])
    p = report.profile
    loads = [l for l in p.lines if l.cls == "vmem" and "load" in l.text]
    assert [l.executions for l in loads] == [1, 1]
    gather = loads[1]                    # the table load depends on the index load
    assert (gather.segments64, gather.segments128) == (seg64, seg128)
    assert gather.global_bytes == 256
    assert loads[0].segments64 == 4 and loads[0].segments128 == 2    # the index load
    c = p.counters()
    assert c["global_read_bytes"] == 512 and c["global_write_bytes"] == 256
    distinct = len(set((torch.arange(64) * stride).tolist()))
    assert c["unique_read_bytes"] == 256 + 4 * distinct
    assert c["unique_write_bytes"] == 256
    assert c["segments64"] == 4 + seg64 + 4        # index load, gather, store
    assert c["vmem"] == 3 and c["smem"] >= 1 and c["mfma"] == 0


def _lds_launch(ty, index, align):
    name = "lds_" + ("b64" if ty.startswith("<") else "b32")
    val = "<float 1.0, float 2.0>" if ty.startswith("<") else "1.0"
    asm = compile_ir(LDS_PATTERN.format(name=name, ty=ty, val=val, align=align))
    idx, out = aligned(64, torch.int32), aligned(128)
    idx += index.to(torch.int32)
    return emu.launch(asm, name, 1, 64, [idx, out], profile=True).profile


@pytest.mark.parametrize("stride, conflicts", [(1, 0), (32, 2 * 31), (2, 2 * 1), (0, 0)])
def test_lds_b32_bank_conflicts(stride, conflicts):
    """ds_write_b32 / ds_read_b32, 32 lanes a pass: lane l at dword stride * l. Stride 1: 32
    banks, no conflict; 32: all 32 lanes of a pass in bank 0 (31 extra cycles, two passes);
    2: two lanes per even bank (1 extra cycle a pass); 0: one dword, a broadcast."""
    p = _lds_launch("float", torch.arange(64) * stride, 4)
    for op in ("ds_write_b32", "ds_read_b32"):
        line = _line(p, op)
        assert line.lds_conflicts == conflicts, op
        assert line.lds_cycles == 2 + conflicts
        assert line.lds_bytes == 256
    assert p.lds_bank_conflicts == 2 * conflicts
    assert p.counters()["lds_bytes"] == 512 and p.issues["ds"] == 2


@pytest.mark.parametrize("stride, conflicts", [(2, 0), (4, 4 * 1), (32, 60)])
def test_lds_b64_bank_conflicts(stride, conflicts):
    """ds_write_b64 / ds_read_b64, 16 lanes a pass: lane l at dwords (s*l, s*l + 1). Stride 2
    covers the 32 banks once per pass; stride 4 puts lanes l and l+8 in the same two banks (one
    extra cycle in each of the 4 passes); 128 bytes apart, 15 extra cycles a pass (the measured
    saturation, 60). A 32-lane pass rule would count conflicts for the first two as well."""
    p = _lds_launch("<2 x float>", torch.arange(64) * (stride // 2), 8)
    for op in ("ds_write_b64", "ds_read_b64"):
        line = _line(p, op)
        assert line.lds_conflicts == conflicts, op
        assert line.lds_cycles == 4 + conflicts
        assert line.lds_bytes == 512


def test_lds_b128_phases_of_eight_lanes():
    """b128: 8 lanes a phase, each lane 4 banks. Lanes 16 bytes apart fill the 32 banks exactly
    (8 phases, no conflict); 32 bytes apart, the two quads of a phase share banks (8 extra
    cycles); a fully conflicted read costs 56 (the measured saturation)."""
    active = torch.ones(1, 64, dtype=torch.bool).numpy()
    lanes = torch.arange(64).numpy()[None, :]
    cycles, conflicts = lds_access_cycles(lanes * 128, active, 16)
    assert int(conflicts[0]) == 56
    cycles, conflicts = lds_access_cycles(lanes * 16, active, 16)
    assert (int(cycles[0]), int(conflicts[0])) == (8, 0)
    cycles, conflicts = lds_access_cycles(lanes * 32, active, 16)
    assert (int(cycles[0]), int(conflicts[0])) == (16, 8)
    half = active.copy()
    half[0, (torch.arange(64) // 4 % 2 == 1).numpy()] = False   # inactive lanes take no bank
    cycles, conflicts = lds_access_cycles(lanes * 32, half, 16)
    assert (int(cycles[0]), int(conflicts[0])) == (8, 0)


def test_lds_b128_read_phases_pair_distant_quads():
    """ds_read_b128 pairs quad q with quad 5, 4, 7, 6 (T0-3 + T20-23, ...), ds_write_b128 pairs
    adjacent quads. Quads 0,1 | 2,3 | ... on the same 16 banks, quads 0 and 5 on different ones:
    the read is conflict-free, the write has one extra cycle a phase."""
    lane = torch.arange(64).numpy()
    quad = lane // 4
    half = torch.tensor([0, 0, 1, 1, 1, 1, 0, 0]).numpy()[quad % 8]
    addr = (16 * (lane % 4) + 64 * half + 128 * quad)[None, :]
    active = torch.ones(1, 64, dtype=torch.bool).numpy()
    cycles, conflicts = lds_access_cycles(addr, active, 16, read=True)
    assert (int(cycles[0]), int(conflicts[0])) == (8, 0)
    cycles, conflicts = lds_access_cycles(addr, active, 16, read=False)
    assert (int(cycles[0]), int(conflicts[0])) == (16, 8)


@pytest.mark.parametrize("name, atom, per", [("f16_32x32x8", "v_mfma_f32_32x32x8", 32 * 32 * 8),
                                             ("f16_16x16x16", "v_mfma_f32_16x16x16", 16 * 16 * 16)])
def test_gemm_mfma_issues_are_exact(name, atom, per):
    """C = A @ B with M = N = K = 64 on one 64x64 block: M*N*K / (m*n*k) MFMA issues."""
    from rocke.compiler import compile_ir as compile_kernel
    from rocke.kernels.samples import gemm
    from rocke.runtime import launch
    spec = gemm.VARIANTS[name]
    k = gemm.build(spec)
    ck = compile_kernel(k.ir(), name=k.name)
    A, B = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    C = torch.zeros(64, 64).half()
    grid, block = gemm.launch_geometry(spec, 64, 64, 64)
    report = launch(ck, grid, block, gemm.kernel_args(spec, A, B, C), profile=True)
    p = report.profile
    assert p.issues["mfma"] == 64 ** 3 // per
    (mnemonic,) = p.mfma
    assert mnemonic.startswith(atom)
    assert p.resources["vgprs"] > 0 and p.workgroups == 1
    assert int(p.wg_issues.sum()) == sum(p.issues.values())   # per-workgroup totals add up


def test_profile_is_opt_in_and_checked():
    asm = compile_ir(GATHER)
    table, idx, out = aligned(64), aligned(64, torch.int32), aligned(64)
    assert emu.launch(asm, "gather", 1, 64, [table, idx, out]).profile is None
    with pytest.raises(ValueError, match="profile must be a bool"):
        emu.launch(asm, "gather", 1, 64, [table, idx, out], profile="yes")


# four independent loads, then a chain that needs them in order: LLVM waits vmcnt(3), (2), (1),
# (0) -- one round trip for the wave, not four
CASCADE = """
define amdgpu_kernel void @cascade(ptr addrspace(1) %a, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p0 = getelementptr float, ptr addrspace(1) %a, i32 %tid
  %t1 = add i32 %tid, 256
  %p1 = getelementptr float, ptr addrspace(1) %a, i32 %t1
  %t2 = add i32 %tid, 512
  %p2 = getelementptr float, ptr addrspace(1) %a, i32 %t2
  %t3 = add i32 %tid, 768
  %p3 = getelementptr float, ptr addrspace(1) %a, i32 %t3
  %v0 = load float, ptr addrspace(1) %p0
  %v1 = load float, ptr addrspace(1) %p1
  %v2 = load float, ptr addrspace(1) %p2
  %v3 = load float, ptr addrspace(1) %p3
  %s0 = fmul float %v0, %v0
  %s1 = fmul float %s0, %v1
  %s2 = fmul float %s1, %v2
  %s3 = fmul float %s2, %v3
  %po = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %s3, ptr addrspace(1) %po
  ret void
}
"""


def test_a_wait_cascade_is_one_round_trip_per_wave():
    """3 workgroups of 2 waves; each wave waits vmcnt(3), (2), (1), (0) on four loads issued
    together: 4 vmcnt waits but 1 round trip per wave, so 2 per workgroup."""
    asm = compile_ir(CASCADE)
    assert [l.strip() for l in asm.splitlines() if "vmcnt" in l] == [
        f"s_waitcnt vmcnt({n})" for n in (3, 2, 1, 0)]
    a, out = torch.rand(128 + 768), torch.zeros(128)     # every workgroup writes out[tid]
    p = emu.launch(asm, "cascade", 3, 128, [a, out], profile=True).profile
    n = torch.arange(128)
    assert torch.allclose(out, a[n] ** 2 * a[n + 256] * a[n + 512] * a[n + 768])
    waits = p.wg_issues[:, p.buckets.index("s_waitcnt vmcnt")]
    assert waits.tolist() == [8, 8, 8]
    assert p.wg_vm_round_trips.tolist() == [2, 2, 2]
    assert p.counters()["vm_round_trips"] == 6


def _between(asm: str, first: str, until: str) -> list[str]:
    """Instruction lines of the listing from the first one starting with `first` up to (not
    including) the first one starting with `until` after it."""
    lines = [l.strip() for l in asm.splitlines()]
    code = [l for l in lines if l and not l.startswith((".", ";", "@")) and not l.endswith(":")]
    start = next(i for i, l in enumerate(code) if l.startswith(first))
    stop = next(i for i in range(start, len(code)) if code[i].startswith(until))
    return code[start:stop]


def test_a_cascade_exposes_one_round_trip_less_the_work_between():
    """The cascade above: each wave issues its first load, the other loads and address work
    (k single-pass instructions, 4 cycles each, the first load included), then waits
    vmcnt(3) for it: stall L - 4k. By then the other three loads, issued 4 cycles apart, have
    had their round trips, so the later waits stall nothing. 2 waves a workgroup."""
    asm = compile_ir(CASCADE)
    before = _between(asm, "global_load", "s_waitcnt vmcnt")
    assert not any(l.startswith(("v_exp", "v_log", "v_rcp", "v_sqrt", "v_rsq", "v_mfma"))
                   for l in before)
    k = len(before)
    a, out = torch.rand(128 + 768), torch.zeros(128)
    p = emu.launch(asm, "cascade", 3, 128, [a, out], profile=True).profile
    assert p.vm_latencies == (1000, 2000, 4000)
    for column, latency in enumerate(p.vm_latencies):
        assert p.wg_vm_stall[:, column].tolist() == [2 * (latency - 4 * k)] * 3


# a load, then `n` dependent multiplies of an unrelated value (it needs a kernel argument, so
# the chain cannot start before the kernarg load the global load also waits for), then the
# load's use: the work issued after the load covers part of its round trip
COVERED = """
define amdgpu_kernel void @covered(ptr addrspace(1) %a, ptr addrspace(1) %out, i32 %s) {{
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr float, ptr addrspace(1) %a, i32 %tid
  %v = load float, ptr addrspace(1) %p
  %ts = add i32 %tid, %s
  %f = uitofp i32 %ts to float
{chain}
  %r = fmul float %x{n}, %v
  %po = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %r, ptr addrspace(1) %po
  ret void
}}
"""


def test_work_after_a_load_covers_its_latency():
    """300 dependent v_mul_f32 (one pass each) between a load and its use cover about 1200
    cycles: at a 1000-cycle round trip nothing is left, at 2000 and 4000 what the listing's
    k instructions (4 cycles each) between the load and the wait do not cover."""
    n = 300
    chain = "\n".join(f"  %x{i + 1} = fmul float %{'f' if i == 0 else f'x{i}'}, 1.5"
                      for i in range(n))
    asm = compile_ir(COVERED.format(chain=chain, n=n))
    before = _between(asm, "global_load", "s_waitcnt vmcnt")
    k = len(before)
    assert sum(l.startswith("v_mul_f32") for l in before) == n     # the chain sits in between
    assert not any(l.startswith(("v_exp", "v_log", "v_rcp", "v_sqrt", "v_rsq")) for l in before)
    a, out = torch.rand(64), torch.zeros(64)
    p = emu.launch(asm, "covered", 1, 64, [a, out, 3], profile=True).profile
    assert [max(0, L - 4 * k) for L in p.vm_latencies] == [0, 2000 - 4 * k, 4000 - 4 * k]
    assert p.wg_vm_stall[0].tolist() == [max(0, L - 4 * k) for L in p.vm_latencies]
    assert p.wg_vm_round_trips.tolist() == [1]      # the old count: a full round trip
