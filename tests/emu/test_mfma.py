"""MFMA semantics against float64 numpy matmul.

Operands are placed into lane registers by direct loops over (register, lane, element),
using the register -> matrix-element formulas of AMD's matrix instruction calculator
(CDNA3), written here independently of rocke.emu.mfma. Element encodings come from
torch (float16 / bfloat16 / float8_e4m3fnuz / float8_e5m2fnuz).
"""

import zlib

import numpy as np
import pytest
import torch

from rocke.emu.mfma import MFMA_OPS

# name -> (M, N, K, blocks, A format, B format)
OPS = {
    "v_mfma_f32_32x32x8_f16": (32, 32, 8, 1, "f16", "f16"),
    "v_mfma_f32_16x16x16_f16": (16, 16, 16, 1, "f16", "f16"),
    "v_mfma_f32_32x32x4_2b_f16": (32, 32, 4, 2, "f16", "f16"),
    "v_mfma_f32_16x16x4_4b_f16": (16, 16, 4, 4, "f16", "f16"),
    "v_mfma_f32_4x4x4_16b_f16": (4, 4, 4, 16, "f16", "f16"),
    "v_mfma_f32_32x32x8_bf16": (32, 32, 8, 1, "bf16", "bf16"),
    "v_mfma_f32_16x16x16_bf16": (16, 16, 16, 1, "bf16", "bf16"),
    "v_mfma_f32_32x32x4_2b_bf16": (32, 32, 4, 2, "bf16", "bf16"),
    "v_mfma_f32_16x16x4_4b_bf16": (16, 16, 4, 4, "bf16", "bf16"),
    "v_mfma_f32_4x4x4_16b_bf16": (4, 4, 4, 16, "bf16", "bf16"),
}
for _a in ("fp8", "bf8"):
    for _b in ("fp8", "bf8"):
        OPS[f"v_mfma_f32_16x16x32_{_a}_{_b}"] = (16, 16, 32, 1, _a, _b)
        OPS[f"v_mfma_f32_32x32x16_{_a}_{_b}"] = (32, 32, 16, 1, _a, _b)

TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16,
                "fp8": torch.float8_e4m3fnuz, "bf8": torch.float8_e5m2fnuz}
BITS = {"f16": 16, "bf16": 16, "fp8": 8, "bf8": 8}


def random_matrix(rng, shape, fmt):
    """(values as float64, raw bit codes) of random numbers representable in fmt."""
    values = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(TORCH_DTYPES[fmt])
    unsigned = {16: torch.int16, 8: torch.uint8}[BITS[fmt]]
    codes = values.view(unsigned).numpy().astype(np.int64) & ((1 << BITS[fmt]) - 1)
    return values.double().numpy(), codes


def input_element(m, k, blocks, bits, lane, reg, elem):
    """(block, row-or-col, k) held by (lane, reg, element) of A (or B), per the calculator."""
    per_reg = 32 // bits
    if blocks == 1:  # K split over the 64 // M lane groups
        k_per_lane = k // (64 // m)
        return 0, lane % m, k_per_lane * (lane // m) + per_reg * reg + elem
    return lane // m, lane % m, per_reg * reg + elem


def acc_element(m, lane, reg):
    """(block, i, j) held by (lane, reg) of C/D, per the calculator."""
    if m == 32:
        return reg // 16, (8 * ((reg % 16) // 4)) % 32 + 4 * (lane // 32) + reg % 4, lane % 32
    if m == 16:
        return reg // 4, 4 * (lane // 16) + reg % 4, lane % 16
    return lane // 4, reg % 4, lane % 4  # 4x4x4, 16 blocks


def pack_inputs(codes, m, k, blocks, bits, regs, transpose):
    """codes: [blocks, M, K] for A, or [blocks, K, N] for B (transpose=True)."""
    words = np.zeros((regs, 64), dtype=np.uint64)
    for lane in range(64):
        for reg in range(regs):
            for elem in range(32 // bits):
                block, index, kk = input_element(m, k, blocks, bits, lane, reg, elem)
                code = codes[block, kk, index] if transpose else codes[block, index, kk]
                words[reg, lane] |= np.uint64(code) << np.uint64(bits * elem)
    return words.astype(np.uint32)


def pack_acc(matrix, m, regs):
    out = np.zeros((regs, 64), dtype=np.float32)
    for lane in range(64):
        for reg in range(regs):
            out[reg, lane] = matrix[acc_element(m, lane, reg)]
    return out


def make_case(rng, name, waves=2):
    m, n, k, blocks, a_fmt, b_fmt = OPS[name]
    op = MFMA_OPS[name]
    a_vals, a_codes, b_vals, b_codes, c_vals = [], [], [], [], []
    for _ in range(waves):
        av, ac = random_matrix(rng, (blocks, m, k), a_fmt)
        bv, bc = random_matrix(rng, (blocks, k, n), b_fmt)
        a_vals.append(av), a_codes.append(ac), b_vals.append(bv), b_codes.append(bc)
        c_vals.append(rng.standard_normal((blocks, m, n)).astype(np.float32))
    a = np.stack([pack_inputs(c, m, k, blocks, BITS[a_fmt], op.a_regs, False) for c in a_codes])
    b = np.stack([pack_inputs(c, n, k, blocks, BITS[b_fmt], op.b_regs, True) for c in b_codes])
    c = np.stack([pack_acc(cv, m, op.c_regs) for cv in c_vals])
    return op, (a, b, c), (np.array(a_vals), np.array(b_vals), np.array(c_vals))


@pytest.mark.parametrize("name", sorted(OPS))
def test_mfma_matches_float64_matmul(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    m, n, k, blocks, a_fmt, b_fmt = OPS[name]
    op, (a, b, c), (a_vals, b_vals, c_vals) = make_case(rng, name)
    assert (op.a_regs, op.b_regs, op.c_regs) == (k * m * blocks * BITS[a_fmt] // 32 // 64,
                                                  k * n * blocks * BITS[b_fmt] // 32 // 64,
                                                  m * n * blocks // 64)
    d = op.execute(a, b, c)
    assert d.dtype == np.float32 and d.shape == c.shape
    reference = a_vals @ b_vals + c_vals.astype(np.float64)  # [waves, blocks, M, N]
    for wave in range(a.shape[0]):
        expected = pack_acc(reference[wave], m, op.c_regs)
        np.testing.assert_allclose(d[wave], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["v_mfma_f32_32x32x8_f16", "v_mfma_f32_16x16x4_4b_bf16",
                                  "v_mfma_f32_4x4x4_16b_f16", "v_mfma_f32_16x16x32_fp8_bf8"])
def test_register_file_views_in_place_output_and_reused_workspace(name):
    """How the emulator calls execute: operands are strided slices of one register file, D
    overwrites C in place, and scratch memory is reused across calls of other batch sizes."""
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    m, n, k, blocks, a_fmt, b_fmt = OPS[name]
    workspace = {}
    for waves in (3, 1, 4):
        op, (a, b, c), (a_vals, b_vals, c_vals) = make_case(rng, name, waves=waves)
        registers = np.zeros((waves, 2 + op.a_regs + op.b_regs + op.c_regs, 64), np.uint32)
        a_rows = slice(1, 1 + op.a_regs)
        b_rows = slice(a_rows.stop, a_rows.stop + op.b_regs)
        c_rows = slice(b_rows.stop + 1, b_rows.stop + 1 + op.c_regs)
        registers[:, a_rows], registers[:, b_rows] = a, b
        registers[:, c_rows] = c.view(np.uint32)
        acc = registers[:, c_rows].view(np.float32)
        d = op.execute(registers[:, a_rows], registers[:, b_rows], acc, out=acc,
                       workspace=workspace)
        assert d is acc
        reference = a_vals @ b_vals + c_vals.astype(np.float64)
        for wave in range(waves):
            np.testing.assert_allclose(registers[wave, c_rows].view(np.float32),
                                       pack_acc(reference[wave], m, op.c_regs), rtol=1e-6, atol=1e-6)
        assert not registers[:, 0].any() and not registers[:, b_rows.stop].any()


def test_identity_a_gives_b_plus_c_exactly():
    rng = np.random.default_rng(7)
    name = "v_mfma_f32_16x16x16_f16"
    op = MFMA_OPS[name]
    identity_codes = torch.eye(16, dtype=torch.float16).view(torch.int16).numpy().astype(np.int64)[None] & 0xFFFF
    b_vals, b_codes = random_matrix(rng, (1, 16, 16), "f16")
    c_vals = rng.standard_normal((1, 16, 16)).astype(np.float32)
    a = pack_inputs(identity_codes, 16, 16, 1, 16, op.a_regs, False)[None]
    b = pack_inputs(b_codes, 16, 16, 1, 16, op.b_regs, True)[None]
    c = pack_acc(c_vals, 16, op.c_regs)[None]
    d = op.execute(a, b, c)
    expected = pack_acc((b_vals + c_vals).astype(np.float32), 16, op.c_regs)
    np.testing.assert_array_equal(d[0], expected)


def test_small_hand_example_4x4x4():
    # A = all 1.0 (f16 0x3C00), B = all 2.0 (0x4000), C = 0.5 -> D = 4 * 2 + 0.5 in every block.
    op = MFMA_OPS["v_mfma_f32_4x4x4_16b_f16"]
    a = np.full((1, 2, 64), 0x3C003C00, dtype=np.uint32)
    b = np.full((1, 2, 64), 0x40004000, dtype=np.uint32)
    c = np.full((1, 4, 64), 0.5, dtype=np.float32)
    np.testing.assert_array_equal(op.execute(a, b, c), np.full((1, 4, 64), 8.5, dtype=np.float32))


def test_cbsz_abid_broadcast_and_blgp_swizzle():
    rng = np.random.default_rng(11)
    name = "v_mfma_f32_16x16x4_4b_f16"
    op, (a, b, c), (a_vals, b_vals, c_vals) = make_case(rng, name, waves=1)
    # cbsz=1, abid=1: blocks {0,1} both use A block 1, blocks {2,3} use A block 3.
    d = op.execute(a, b, c, cbsz=1, abid=1)
    a_used = a_vals[0][[1, 1, 3, 3]]
    expected = pack_acc(a_used @ b_vals[0] + c_vals[0], 16, op.c_regs)
    np.testing.assert_allclose(d[0], expected, rtol=1e-6, atol=1e-6)
    # blgp=3: lane l reads the B registers of lane (l + 16) % 64 -> block b sees B block (b+1)%4.
    d = op.execute(a, b, c, blgp=3)
    expected = pack_acc(a_vals[0] @ b_vals[0][[1, 2, 3, 0]] + c_vals[0], 16, op.c_regs)
    np.testing.assert_allclose(d[0], expected, rtol=1e-6, atol=1e-6)


def test_bad_operands_and_modifiers_are_rejected():
    op = MFMA_OPS["v_mfma_f32_32x32x8_f16"]
    a = np.zeros((1, 2, 64), np.uint32)
    c = np.zeros((1, 16, 64), np.float32)
    with pytest.raises(ValueError, match="shape"):
        op.execute(a, a, np.zeros((1, 4, 64), np.float32))
    with pytest.raises(TypeError, match="uint32"):
        op.execute(a.astype(np.int64), a, c)
    with pytest.raises(NotImplementedError, match="cbsz"):
        op.execute(a, a, c, cbsz=1)
    blocked = MFMA_OPS["v_mfma_f32_32x32x4_2b_f16"]
    with pytest.raises(NotImplementedError, match="abid"):
        blocked.execute(a, a, np.zeros((1, 32, 64), np.float32), cbsz=1, abid=2)


def test_catalog_names_match_llvm_gfx942_asm():
    """Every dense f16/bf16/fp8 MFMA intrinsic, compiled by LLVM for gfx942, prints a name we know."""
    import re

    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    intrinsics = [("32x32x8f16", "<4 x half>", 16), ("16x16x16f16", "<4 x half>", 4),
                  ("32x32x4f16", "<4 x half>", 32), ("16x16x4f16", "<4 x half>", 16),
                  ("4x4x4f16", "<4 x half>", 4), ("32x32x8bf16.1k", "<4 x i16>", 16),
                  ("16x16x16bf16.1k", "<4 x i16>", 4), ("32x32x4bf16.1k", "<4 x i16>", 32),
                  ("16x16x4bf16.1k", "<4 x i16>", 16), ("4x4x4bf16.1k", "<4 x i16>", 4)]
    intrinsics += [(f"{shape}.{a}.{b}", "i64", regs) for a in ("fp8", "bf8") for b in ("fp8", "bf8")
                   for shape, regs in (("16x16x32", 4), ("32x32x16", 16))]
    lines = []
    for index, (suffix, operand, c_regs) in enumerate(intrinsics):
        acc = f"<{c_regs} x float>"
        lines.append(f"declare {acc} @llvm.amdgcn.mfma.f32.{suffix}({operand}, {operand}, {acc}, i32, i32, i32)")
        lines.append(f"define amdgpu_kernel void @k{index}(ptr addrspace(1) %p, {operand} %a, {operand} %b) {{\n"
                     f"  %c = load {acc}, ptr addrspace(1) %p\n"
                     f"  %d = call {acc} @llvm.amdgcn.mfma.f32.{suffix}({operand} %a, {operand} %b, {acc} %c,"
                     f" i32 0, i32 0, i32 0)\n  store {acc} %d, ptr addrspace(1) %p\n  ret void\n}}")
    target = llvm.Target.from_triple("amdgcn-amd-amdhsa")
    machine = target.create_target_machine(cpu="gfx942", features="+sramecc,-xnack", opt=2)
    asm = machine.emit_assembly(llvm.parse_assembly("\n".join(lines)))
    printed = set(re.findall(r"\bv_mfma_\w+", asm))
    dense = {name for name, op in MFMA_OPS.items() if not getattr(op, "raw_registers", False)}
    assert len(printed) == len(intrinsics) == len(dense)
    assert printed == dense
    # The accumulator register range LLVM allocates for each instruction matches c_regs.
    for name, first, last in re.findall(r"\b(v_mfma_\w+) [av]\[(\d+):(\d+)\]", asm):
        assert int(last) - int(first) + 1 == MFMA_OPS[name].c_regs, name
