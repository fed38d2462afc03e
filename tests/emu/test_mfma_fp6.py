"""gfx950's f8f6f4 MFMAs (plain and block-scaled) with fp6 E2M3 / bf6 E3M2 operands, against a
float64 matmul of the codes decoded by ml_dtypes. The register layout is restated from AMD's
CDNA4 guide: §7.1.4 packs 6-bit items densely (item i at bits 6i+5:6i of the six registers a
lane), and §7.1.5.1's FP6 tables give lane l row (column) l % M and K = 32 * (l // M) + item;
fp8 operands keep their two 16-K runs (tests/emu/test_cdna4_census.py's _fp8_registers)."""
import ml_dtypes
import numpy as np
import pytest

from .asm_runner import run_asm
from .test_cdna4_census import _fp8_registers
from .test_gfx950_ops import _d_matrix
from .test_mx_conversions import pack6

RNG = np.random.default_rng(66)
FORMATS = {0: ("fp8", ml_dtypes.float8_e4m3fn, 8), 1: ("bf8", ml_dtypes.float8_e5m2, 8),
           2: ("fp6", ml_dtypes.float6_e2m3fn, 6), 3: ("bf6", ml_dtypes.float6_e3m2fn, 6),
           4: ("fp4", ml_dtypes.float4_e2m1fn, 4)}


def registers(codes, code, m):
    """[m, K] codes (A's rows or B's columns) -> the operand registers [regs, 64]."""
    width = FORMATS[code][2]
    if width == 8:
        return _fp8_registers(codes, m)
    lanes = np.stack([codes[lane % m, 32 * (lane // m):32 * (lane // m) + 32]
                      for lane in range(64)])                     # (64, 32) items
    if width == 6:
        return pack6(lanes).T
    words = np.zeros((4, 64), np.uint32)
    for i in range(32):
        words[i // 8] |= lanes[:, i].astype(np.uint32) << np.uint32(4 * (i % 8))
    return words


def random_codes(code, shape):
    """Finite codes of a format (fp8's NaN code 0x7F/0xFF and bf8's inf/NaN left out)."""
    width = FORMATS[code][2]
    codes = RNG.integers(0, 1 << width, shape)
    if code == 0:
        codes = np.where((codes & 0x7F) == 0x7F, 0x7E, codes)
    if code == 1:
        codes = np.where((codes & 0x7F) >= 0x7C, 0x3C, codes)
    return codes.astype(np.uint8)


def value(codes, code):
    return codes.view(FORMATS[code][1]).astype(np.float64)


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "scaled"])
@pytest.mark.parametrize("m, k", [(16, 128), (32, 64)])
@pytest.mark.parametrize("cbsz, blgp", [(2, 2), (3, 3), (2, 0), (1, 3), (3, 4), (4, 2)])
def test_f8f6f4_mfma_with_fp6_operands(cbsz, blgp, m, k, scaled):
    a = random_codes(cbsz, (m, k))
    bt = random_codes(blgp, (m, k))                   # B's columns, as rows
    a_regs, b_regs = registers(a, cbsz, m), registers(bt, blgp, m)
    na, nb, nc = len(a_regs), len(b_regs), m * m // 64
    c = RNG.normal(size=(nc, 64)).astype(np.float32)
    v = np.concatenate([a_regs, b_regs, c.view(np.uint32), np.zeros((2, 64), np.uint32)])
    ra, rb, rc = 0, na, na + nb
    sa = RNG.integers(120, 135, (m, k // 32))
    sb = RNG.integers(120, 135, (m, k // 32))
    lanes = np.arange(64)
    v[rc + nc] = sa[lanes % m, lanes // m]
    v[rc + nc + 1] = sb[lanes % m, lanes // m]
    regs = lambda r, n: f"v[{r}:{r + n - 1}]"  # noqa: E731
    fmt = f" cbsz:{cbsz} blgp:{blgp}" if not scaled else ""
    if scaled:
        body = (f"  v_mfma_scale_f32_{m}x{m}x{k}_f8f6f4 {regs(rc, nc)}, {regs(ra, na)}, "
                f"{regs(rb, nb)}, {regs(rc, nc)}, v{rc + nc}, v{rc + nc + 1} op_sel_hi:[0,0,0] "
                f"cbsz:{cbsz} blgp:{blgp}")
    else:
        body = (f"  v_mfma_f32_{m}x{m}x{k}_f8f6f4 {regs(rc, nc)}, {regs(ra, na)}, "
                f"{regs(rb, nb)}, {regs(rc, nc)}{fmt}")
    got = _d_matrix(run_asm(body, vgprs=v, target="gfx950").vgprs[0, rc:rc + nc], m)
    fa, fb = value(a, cbsz), value(bt, blgp)
    if scaled:
        fa = fa * np.repeat(np.ldexp(1.0, sa - 127), 32, axis=1)
        fb = fb * np.repeat(np.ldexp(1.0, sb - 127), 32, axis=1)
    want = (fa @ fb.T + _d_matrix(c.view(np.uint32), m).astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cbsz, blgp, byte_a, byte_b", [(2, 3, 1, 2), (3, 0, 3, 0), (4, 2, 0, 1)])
def test_llvm_scaled_mfma_with_fp6_operands(cbsz, blgp, byte_a, byte_b):
    """llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4 with fp6 / bf6 operands, compiled by LLVM for
    gfx950 (our own kernel: each lane loads its operand registers) and run in the emulator."""
    from .test_mx_llvm import gfx950_asm
    import rocke.emu
    import torch
    m, k = 16, 128
    a, bt = random_codes(cbsz, (m, k)), random_codes(blgp, (m, k))
    a_regs, b_regs = registers(a, cbsz, m), registers(bt, blgp, m)
    na, nb = len(a_regs), len(b_regs)
    sa, sb = RNG.integers(118, 137, (m, k // 32)), RNG.integers(118, 137, (m, k // 32))
    lanes = np.arange(64)
    noise = RNG.integers(0, 256, (2, 64)).astype(np.uint32)
    scale_words = np.stack([
        (noise[0] << np.uint32(8 * ((byte_a + 1) % 4))) | (sa[lanes % m, lanes // m].astype(np.uint32) << np.uint32(8 * byte_a)),
        (noise[1] << np.uint32(8 * ((byte_b + 1) % 4))) | (sb[lanes % m, lanes // m].astype(np.uint32) << np.uint32(8 * byte_b))])
    c = RNG.normal(size=(4, 64)).astype(np.float32)
    ta, tb = f"<{na} x i32>", f"<{nb} x i32>"
    name = f"llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4.v{na}i32.v{nb}i32"
    module = f"""target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare <4 x float> @{name}({ta}, {tb}, <4 x float>, i32, i32, i32, i32, i32, i32)
define amdgpu_kernel void @k(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c,
                             ptr addrspace(1) %s, ptr addrspace(1) %d) {{
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %ia = mul i32 %t, {na}
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %ia
  %va = load {ta}, ptr addrspace(1) %pa, align 4
  %ib = mul i32 %t, {nb}
  %pb = getelementptr i32, ptr addrspace(1) %b, i32 %ib
  %vb = load {tb}, ptr addrspace(1) %pb, align 4
  %pc = getelementptr <4 x float>, ptr addrspace(1) %c, i32 %t
  %vc = load <4 x float>, ptr addrspace(1) %pc
  %psa = getelementptr i32, ptr addrspace(1) %s, i32 %t
  %scale_a = load i32, ptr addrspace(1) %psa
  %psb = getelementptr i32, ptr addrspace(1) %psa, i32 64
  %scale_b = load i32, ptr addrspace(1) %psb
  %r = call <4 x float> @{name}({ta} %va, {tb} %vb, <4 x float> %vc, i32 {cbsz}, i32 {blgp},
                                i32 {byte_a}, i32 %scale_a, i32 {byte_b}, i32 %scale_b)
  %pd = getelementptr <4 x float>, ptr addrspace(1) %d, i32 %t
  store <4 x float> %r, ptr addrspace(1) %pd
  ret void
}}
"""
    asm = gfx950_asm(module)
    assert f"cbsz:{cbsz}" in asm and "v_mfma_scale_f32_16x16x128_f8f6f4" in asm
    out = torch.zeros(64 * 4, dtype=torch.float32)
    args = [torch.from_numpy(np.ascontiguousarray(a_regs.T).view(np.int32).reshape(-1)),
            torch.from_numpy(np.ascontiguousarray(b_regs.T).view(np.int32).reshape(-1)),
            torch.from_numpy(np.ascontiguousarray(c.T).reshape(-1)),
            torch.from_numpy(scale_words.view(np.int32).reshape(-1)), out]
    rocke.emu.launch(asm, "k", (1, 1, 1), (64, 1, 1), args, target="gfx950")
    got = _d_matrix(out.numpy().reshape(64, 4).T.copy().view(np.uint32), m)
    fa = value(a, cbsz) * np.repeat(np.ldexp(1.0, sa - 127), 32, axis=1)
    fb = value(bt, blgp) * np.repeat(np.ldexp(1.0, sb - 127), 32, axis=1)
    want = (fa @ fb.T + _d_matrix(c.view(np.uint32), m).astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(got, want)
