"""`run_asm`: run a few lines of gfx942 assembly in the emulator, one wave per test case.

Each wave (one 64-lane workgroup) starts with
- v0..v{V-1}: rows of `vgprs[wave]` (uint32, shape (waves, V, 64)),
- s16..s47: `sgprs[wave]` (uint32, shape (waves, 32)),
- EXEC all ones, VCC zero, SCC from `scc[wave]`,
runs `body`, and returns the final v0..v{V-1} (lanes whose EXEC the body cleared keep their
values: the harness restores EXEC before storing), s16..s47, plus EXEC, VCC and SCC after the
body. The body may use v0..v253, s16..s47 and vcc; it must not touch s0..s15 or v254/v255.
"""
from __future__ import annotations

import re

from dataclasses import dataclass

import numpy as np
import torch

import rocke.emu as emu

SGPR_BASE, SGPR_COUNT = 16, 32


@dataclass
class AsmResult:
    vgprs: np.ndarray   # (waves, V, 64) uint32
    sgprs: np.ndarray   # (waves, 32) uint32: s16..s47
    exec: np.ndarray    # (waves,) uint64
    vcc: np.ndarray     # (waves,) uint64
    scc: np.ndarray     # (waves,) bool


def asm_text(body: str, rows: int, descriptor_extra: str = "", name: str = "run_asm") -> str:
    load_rows, store_rows = [], []
    for r in range(rows):
        load_rows.append(f"  global_load_dword v{r}, v255, s[4:5] offset:{256 * (r % 16)}")
        store_rows.append(f"  global_store_dword v255, v{r}, s[4:5] offset:{256 * (r % 16)}")
        if r % 16 == 15:
            for lines in (load_rows, store_rows):
                lines += ["  s_add_u32 s4, s4, 0x1000", "  s_addc_u32 s5, s5, 0"]
    return f"""
  .text
  .globl {name}
  .p2align 8
  .type {name},@function
{name}:
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_mul_i32 s8, s2, {rows * 256}
  s_lshl_b32 s9, s2, 8
  v_lshlrev_b32_e32 v255, 2, v0
  s_waitcnt lgkmcnt(0)
  s_add_u32 s4, s4, s8
  s_addc_u32 s5, s5, 0
  s_add_u32 s6, s6, s9
  s_addc_u32 s7, s7, 0
  s_mov_b64 s[12:13], s[4:5]
  s_load_dwordx16 s[16:31], s[6:7], 0x0
  s_load_dwordx16 s[32:47], s[6:7], 0x40
  s_load_dword s10, s[6:7], 0x80
{chr(10).join(load_rows)}
  s_waitcnt vmcnt(0) lgkmcnt(0)
  s_mov_b64 vcc, 0
  s_cmp_lg_u32 s10, 0
; ---- body
{body}
; ---- end of body
  s_cselect_b32 s11, 1, 0
  s_mov_b64 s[14:15], exec
  s_mov_b64 exec, -1
  s_mov_b64 s[4:5], s[12:13]
{chr(10).join(store_rows)}
  v_mov_b32_e32 v254, 0
""" + "\n".join(f"  v_writelane_b32 v254, s{SGPR_BASE + k}, {k}" for k in range(SGPR_COUNT)) + f"""
  v_writelane_b32 v254, s14, 32
  v_writelane_b32 v254, s15, 33
  v_writelane_b32 v254, vcc_lo, 34
  v_writelane_b32 v254, vcc_hi, 35
  v_writelane_b32 v254, s11, 36
  global_store_dword v255, v254, s[6:7]
  s_endpgm
.Lfunc_end_{name}:
  .size {name}, .Lfunc_end_{name}-{name}

  .rodata
  .p2align 6
.amdhsa_kernel {name}
  .amdhsa_user_sgpr_count 2
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_next_free_vgpr 512
  .amdhsa_next_free_sgpr 48
  .amdhsa_accum_offset 256
  .amdhsa_kernarg_size 16
{descriptor_extra}
.end_amdhsa_kernel

  .amdgpu_metadata
---
amdhsa.kernels:
  - .name: {name}
    .symbol: {name}.kd
    .agpr_count: 256
    .args:
      - {{.address_space: global, .name: vbuf, .offset: 0, .size: 8, .value_kind: global_buffer}}
      - {{.address_space: global, .name: sbuf, .offset: 8, .size: 8, .value_kind: global_buffer}}
    .kernarg_segment_align: 8
    .kernarg_segment_size: 16
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .max_flat_workgroup_size: 64
    .sgpr_count: 48
    .vgpr_count: 512
    .wavefront_size: 64
amdhsa.target: amdgcn-amd-amdhsa--gfx942
amdhsa.version: [1, 2]
  .end_amdgpu_metadata
"""


def run_asm(body: str, vgprs=None, sgprs=None, scc=None, rows: int | None = None,
            waves: int | None = None, descriptor_extra: str = "", target: str | None = None,
            lds_bytes: int = 0) -> AsmResult:
    """Run `body` once per wave; see the module docstring for the register contract. `target`
    picks the emulator's target (gfx950 code); `lds_bytes` of dynamic LDS for DS bodies."""
    if vgprs is not None:
        vgprs = np.asarray(vgprs)
        if vgprs.ndim == 2:
            vgprs = vgprs[None]
        vgprs = vgprs.astype(np.uint32) if vgprs.dtype != np.uint32 else vgprs
    n_waves = waves or (vgprs.shape[0] if vgprs is not None else
                        np.asarray(sgprs).reshape(-1, SGPR_COUNT).shape[0] if sgprs is not None else 1)
    if rows is None:   # every v register the body names comes back
        named = [int(x) for x in re.findall(r"\bv(\d+)\b", body)]
        named += [int(x) for x in re.findall(r"\bv\[\d+:(\d+)\]", body)]
        rows = max([vgprs.shape[1] if vgprs is not None else 1] + [x + 1 for x in named if x < 254])
    v_in = np.zeros((n_waves, rows, 64), np.uint32)
    if vgprs is not None:
        v_in[:, :vgprs.shape[1]] = vgprs
    s_in = np.zeros((n_waves, 64), np.uint32)
    if sgprs is not None:
        s_in[:, :SGPR_COUNT] = np.asarray(sgprs, dtype=np.uint64).astype(np.uint32).reshape(n_waves, -1)
    if scc is not None:
        s_in[:, SGPR_COUNT] = np.asarray(scc, dtype=bool).reshape(n_waves)
    vbuf = torch.from_numpy(v_in.view(np.int32).copy())
    sbuf = torch.from_numpy(s_in.view(np.int32).copy())
    emu.launch(asm_text(body, rows, descriptor_extra), "run_asm", (n_waves, 1, 1), (64, 1, 1),
               [vbuf, sbuf], shared_mem=lds_bytes, target=target)
    s_out = sbuf.numpy().view(np.uint32)
    words = s_out[:, SGPR_COUNT:SGPR_COUNT + 5].astype(np.uint64)
    return AsmResult(vbuf.numpy().view(np.uint32).copy(), s_out[:, :SGPR_COUNT].copy(),
                     words[:, 0] | (words[:, 1] << np.uint64(32)),
                     words[:, 2] | (words[:, 3] << np.uint64(32)), words[:, 4] != 0)


_TARGET_MACHINES = {}


def emit_assembly(module_text: str, cpu: str = "gfx942", opt: int = 2) -> str:
    """``cpu``'s assembly of an LLVM IR module as given (llvmlite; one target machine per
    ``(cpu, opt)``)."""
    import llvmlite.binding as llvm
    if (cpu, opt) not in _TARGET_MACHINES:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        target = llvm.Target.from_triple("amdgcn-amd-amdhsa")
        _TARGET_MACHINES[cpu, opt] = target.create_target_machine(cpu=cpu, opt=opt)
    return _TARGET_MACHINES[cpu, opt].emit_assembly(llvm.parse_assembly(module_text))


def compile_ir(module_text: str) -> str:
    """gfx942 assembly of an LLVM IR module (llvmlite, -O2)."""
    return emit_assembly('target triple = "amdgcn-amd-amdhsa"\n' + module_text)
