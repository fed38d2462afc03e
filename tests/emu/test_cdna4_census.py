"""The gfx950 op census: every instruction AMD's CDNA4 ISA guide adds over gfx942
(rocke.emu.cdna4.NEW_OPCODES) either decodes for gfx950 or is refused by name with a reason, and
gfx942 refuses all of them. Then the handlers the census showed missing, one op at a time, with
expected bits restated here from the guide's pseudocode (never from the emulator's tables)."""
from pathlib import Path

import numpy as np
import pytest

from rocke.emu import cdna4, gfx950

from tests.scripts import load_script

from .asm_runner import run_asm

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(4)


@pytest.fixture(scope="module")
def support():
    return load_script("tools/emu_opcode_support.py")


@pytest.fixture(scope="module")
def llvm_samples(support):
    """{opcode: one instruction AMD's LLVM assembles for gfx950} (tests/fixtures)."""
    return {name: sample for _, name, sample in support.samples("gfx950")}


def test_the_census_table_holds_the_guides_facts():
    names = [name for _, _, name in cdna4.NEW_OPCODES]
    assert len(names) == len(set(names)) == 99
    widths = {"VOP1": 8, "VOP2": 6, "VOP3A": 10, "VOP3P": 7, "VOP3PX2": 7, "DS": 8,
              "MUBUF": 7, "GLOBAL": 7}
    for fmt, opcode, name in cdna4.NEW_OPCODES:
        assert 0 <= opcode < 1 << widths[fmt], (fmt, opcode, name)
    pairs = [(fmt, op) for fmt, op, name in cdna4.NEW_OPCODES if fmt != "VOP3PX2"]
    assert len(pairs) == len(set(pairs)), "two instructions share an opcode of one format"
    gfx942 = {line.split("\t")[1] for line in
              (ROOT / "tests/fixtures/gfx942_opcodes.txt").read_text().splitlines()
              if line and not line.startswith("#")}
    assert not set(names) & gfx942
    rows = set(cdna4.NEW_OPCODES)
    for row in [("VOP1", 89, "v_permlane16_swap_b32"), ("VOP1", 91, "v_cvt_f32_bf16"),
                ("VOP3P", 84, "v_mfma_f32_16x16x32_f16"), ("DS", 227, "ds_read_b64_tr_b16"),
                ("GLOBAL", 125, "global_load_lds_dwordx4"), ("VOP3P", 44, "v_mfma_ld_scale_b32")]:
        assert row in rows


def test_the_guides_opcode_numbers_are_llvms(llvm_samples):
    """AMD's LLVM encodes each census sample with the guide's opcode number (needs Triton's
    bundled LLVM, the only one here that knows gfx950)."""
    pytest.importorskip("triton")
    module = load_script("tools/gfx950_opcodes.py")
    checked, wrong = module.check_opcodes(llvm_samples)
    assert checked >= 95 and not wrong, wrong


def test_every_new_opcode_is_in_llvms_gfx950_list(llvm_samples):
    """AMD's LLVM assembles each of the guide's new mnemonics for gfx950: the two sources agree."""
    assert not cdna4.NEW_MNEMONICS - set(llvm_samples)


def test_every_new_opcode_decodes_for_gfx950_or_is_refused_by_name(support, llvm_samples):
    neither, wrong_reason = [], []
    for _, _, name in cdna4.NEW_OPCODES:
        sample = support.cdna4_sample(name, llvm_samples)
        reason = support.decodes(sample, "gfx950")
        if name in cdna4.REFUSED:
            if sample != "?" and (reason is None or cdna4.REFUSED[name] not in reason):
                wrong_reason.append((name, reason))
        elif reason is not None:
            neither.append((name, reason))
    assert not neither, f"new gfx950 opcodes neither emulated nor refused by name: {neither}"
    assert not wrong_reason, f"refused opcodes that decode or refuse for another reason: " \
                             f"{wrong_reason}"


def test_a_refused_opcode_has_no_handler(llvm_samples):
    """A stale refusal (the op gained a handler) fails here: delete its REFUSED entry."""
    from rocke.emu import mfma, semantics
    valu = gfx950.build_valu_ops(semantics.VALU_OPS, semantics.AluOp)
    matrix = gfx950.mfma_ops(mfma.MFMA_OPS, mfma.MfmaOp, mfma.IndexedMfmaOp)
    assert not set(cdna4.REFUSED) & (set(valu) | set(matrix))
    assert set(cdna4.REFUSED) <= cdna4.NEW_MNEMONICS


def test_gfx942_refuses_every_new_opcode_as_gfx950s(support, llvm_samples):
    accepted = [name for _, _, name in cdna4.NEW_OPCODES
                if llvm_samples[name] != "?" and
                "gfx950 (CDNA4) instruction" not in (support.decodes(llvm_samples[name],
                                                                     "gfx942") or "")]
    assert not accepted, accepted


def test_a_refusal_names_the_opcode_and_why():
    from rocke.emu.errors import EmulatorError
    with pytest.raises(EmulatorError, match=r"v_smfmac_f32_16x16x64_f16 is not emulated on "
                                            r"gfx950: sparse MFMA \(smfmac\)"):
        run_asm("  v_smfmac_f32_16x16x64_f16 v[0:3], v[4:7], v[8:15], v16", rows=17,
                target="gfx950")


# ------------------------------------------------------------------------------ new handlers

def words(n):
    return RNG.integers(0, 2 ** 32, size=(n, 64), dtype=np.uint64).astype(np.uint32)


def run(body, v, rows=None):
    return run_asm(body, vgprs=v, rows=rows, target="gfx950").vgprs[0]


def bf16(bits):
    """bf16 bit patterns -> float64, restated: the bf16 is the top half of an f32."""
    return (np.asarray(bits, np.uint32) << 16).view(np.float32).astype(np.float64)


def test_v_cvt_f32_bf16_and_its_sdwa_high_word():
    v = words(2)
    got = run("  v_cvt_f32_bf16 v1, v0\n  v_cvt_f32_bf16_sdwa v2, v0 dst_sel:DWORD "
              "dst_unused:UNUSED_PAD src0_sel:WORD_1", v, rows=3)
    assert np.array_equal(got[1], (v[0] & 0xFFFF) << 16)          # exact: bits move up
    assert np.array_equal(got[2], v[0] & 0xFFFF0000)


def _finite_bf16_pairs(n):
    """Random packed bf16 pairs with moderate exponents (no overflow in the dot products)."""
    sign = RNG.integers(0, 2, (n, 64, 2)).astype(np.uint32) << 15
    exp = RNG.integers(100, 150, (n, 64, 2)).astype(np.uint32) << 7
    man = RNG.integers(0, 128, (n, 64, 2)).astype(np.uint32)
    halves = sign | exp | man
    return halves[..., 0] | (halves[..., 1] << 16)


@pytest.mark.parametrize("form", ["v_dot2_f32_bf16 v3, v0, v1, v2", "v_dot2c_f32_bf16 v3, v0, v1"])
def test_v_dot2_f32_bf16_rounds_once(form):
    v = np.zeros((4, 64), np.uint32)
    v[0:2] = _finite_bf16_pairs(2)
    acc = RNG.normal(size=64).astype(np.float32)
    v[2 if "c_" not in form else 3] = acc.view(np.uint32)
    got = run(f"  {form}", v)[3].view(np.float32)
    a, b = v[0], v[1]
    exact = bf16(a & 0xFFFF) * bf16(b & 0xFFFF) + bf16(a >> 16) * bf16(b >> 16) + acc
    assert np.array_equal(got, exact.astype(np.float32))   # products exact: the sum is exact too


def test_v_dot2_f32_bf16_refuses_modifiers_and_modes_it_would_ignore(support):
    from rocke.emu.errors import EmulatorError
    assert "neg_lo" in support.decodes("v_dot2_f32_bf16 v3, v0, v1, v2 neg_lo:[1,0,0]", "gfx950")
    assert "neg / abs" in support.decodes("v_cvt_f32_bf16_e64 v1, -v0", "gfx950")
    with pytest.raises(EmulatorError, match="v_dot2_f32_bf16 under MODE round 0 / f32 denorm 0"):
        run_asm("  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 0\n"
                "  v_dot2_f32_bf16 v3, v0, v1, v2", rows=4, target="gfx950")


def _f16(bits):
    return np.asarray(bits, np.uint16).view(np.float16)


@pytest.mark.parametrize("op, lower", [("v_pk_minimum3_f16", True), ("v_pk_maximum3_f16", False)])
def test_v_pk_minimum3_maximum3_f16(op, lower):
    specials = np.array([0x0000, 0x8000, 0x7E00, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x0001],
                        np.uint16)
    halves = RNG.choice(specials, size=(3, 64, 2)).astype(np.uint32)
    halves[:, 32:] = RNG.integers(0, 2 ** 16, size=(3, 32, 2))   # and arbitrary halves
    v = (halves[..., 0] | (halves[..., 1] << 16)).astype(np.uint32)
    got = run(f"  {op} v3, v0, v1, v2", v, rows=4)[3]
    want = np.zeros((64, 2), np.uint16)
    for lane in range(64):
        for h in range(2):
            xs = [float(_f16(halves[i, lane, h])) for i in range(3)]
            if any(np.isnan(x) for x in xs):
                want[lane, h] = 0x7E00           # compare below treats every NaN alike
                continue
            key = (lambda x: (x, not np.signbit(x))) if lower else (lambda x: (x, np.signbit(x) == 0))
            pick = min(xs, key=key) if lower else max(xs, key=key)
            want[lane, h] = np.float16(pick).view(np.uint16)
    out = np.stack([got & 0xFFFF, got >> 16], -1).astype(np.uint16)
    nan_want = want == 0x7E00
    assert np.all(np.isnan(_f16(out[nan_want])))
    assert np.array_equal(out[~nan_want], want[~nan_want])


@pytest.mark.parametrize("op, lo, hi", [("v_ashr_pk_i8_i32", -128, 127), ("v_ashr_pk_u8_i32", 0, 255)])
def test_v_ashr_pk_8_i32_saturates_and_keeps_the_high_half(op, lo, hi):
    v = words(4)
    v[2] = RNG.integers(0, 64, 64)          # shift counts use bits 4:0 only
    got = run(f"  {op} v3, v0, v1, v2", v)[3]
    want = []
    for lane in range(64):
        s = int(v[2, lane]) & 31
        packed = 0
        for k, src in enumerate((v[0, lane], v[1, lane])):
            x = int(np.int32(np.uint32(src))) >> s
            packed |= (min(max(x, lo), hi) & 0xFF) << (8 * k)
        want.append(packed | (int(v[3, lane]) & 0xFFFF0000))
    assert got.tolist() == want


def test_v_prng_b32_is_the_guides_lfsr_step():
    v = words(1)
    v[0, :2] = [0x80000000, 0]
    got = run("  v_prng_b32 v1, v0", v, rows=2)[1]
    want = [((int(x) << 1) & 0xFFFFFFFF) ^ (197 if int(x) >> 31 else 0) for x in v[0]]
    assert got.tolist() == want and want[:2] == [197, 0]


def test_buffer_atomic_pk_add_bf16_is_gfx950_only(support):
    sample = "buffer_atomic_pk_add_bf16 v1, off, s[4:7], 0"
    assert support.decodes(sample, "gfx950") is None
    assert "gfx950 (CDNA4) instruction" in support.decodes(sample, "gfx942")


# ------------------------------------------------------------------------------ scaled MFMA

def _mx_reference(a, b, sa, sb):
    """The guide's block-scaled product (§7.2.1), restated: every 32 K values of A's row m are
    multiplied by 2^(sa[m, kb] - 127), of B's column n by 2^(sb[n, kb] - 127); 0xFF is NaN."""
    def factor(s):
        s = s.astype(np.float64)
        return np.where(s == 255, np.nan, 2.0 ** (s - 127))
    fa = np.repeat(factor(sa), 32, axis=1)              # [M, K]
    fb = np.repeat(factor(sb), 32, axis=1).T            # [K, N]
    return a.double().numpy() * fa @ (b.double().numpy() * fb)


def _fp8_registers(matrix, m):
    """[m, K] bytes (A's rows, or B's columns) -> 8 registers [8, 64] in the guide's FP8 layout
    of the f8f6f4 atoms (§7.1.5.1): lane l holds row l % m; byte e of register r holds
    k = 16 * G * (r // 4) + 16 * (l // m) + 4 * (r % 4) + e, G = 64 / m lane groups."""
    groups = 64 // m
    regs = np.zeros((8, 64), np.uint32)
    for lane in range(64):
        for r in range(8):
            for e in range(4):
                k = 16 * groups * (r // 4) + 16 * (lane // m) + 4 * (r % 4) + e
                regs[r, lane] |= np.uint32(matrix[lane % m, k]) << np.uint32(8 * e)
    return regs


@pytest.mark.parametrize("m, k, byte", [(16, 128, 0), (32, 64, 2), (16, 128, 3)])
def test_v_mfma_scale_f8f6f4_against_the_guides_block_scaling(m, k, byte):
    import torch
    from .test_gfx950_ops import _d_matrix
    a = (torch.randn(m, k) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(k, m) * 4).to(torch.float8_e4m3fn)
    blocks = k // 32
    sa = RNG.integers(120, 135, (m, blocks)).astype(np.uint8)
    sb = RNG.integers(120, 135, (m, blocks)).astype(np.uint8)
    sa[0, 0] = 255                                      # a NaN scale poisons row 0 only
    # the scale registers: lane l holds row / column l % m, K block l // m, in byte `byte`
    lanes = np.arange(64)
    scale_rows = np.zeros((2, 64), np.uint32)
    scale_rows[0] = sa[lanes % m, lanes // m].astype(np.uint32) << (8 * byte)
    scale_rows[1] = sb[lanes % m, lanes // m].astype(np.uint32) << (8 * byte)
    scale_rows |= (RNG.integers(0, 256, (2, 64)).astype(np.uint32) << (8 * ((byte + 1) % 4)))
    raw = lambda t: t.view(torch.uint8).numpy()
    c_regs = m * m // 64
    v = np.concatenate([_fp8_registers(raw(a), m), _fp8_registers(raw(b.T.contiguous()), m),
                        np.zeros((c_regs, 64), np.uint32), scale_rows])
    srow = 16 + c_regs
    sel = {0: "op_sel_hi:[0,0,0]", 1: "op_sel:[1,1,0] op_sel_hi:[0,0,0]",
           2: "op_sel_hi:[1,1,0]", 3: "op_sel:[1,1,0] op_sel_hi:[1,1,0]"}[byte]
    body = (f"  v_mfma_scale_f32_{m}x{m}x{k}_f8f6f4 v[16:{15 + c_regs}], v[0:7], v[8:15], 0, "
            f"v{srow}, v{srow + 1} {sel}")
    got = _d_matrix(run_asm(body, vgprs=v, target="gfx950").vgprs[0, 16:16 + c_regs], m)
    want = _mx_reference(a, b, sa, sb).astype(np.float32)
    assert np.all(np.isnan(got[0])) and not np.isnan(got[1:]).any()
    np.testing.assert_allclose(got[1:], want[1:], rtol=1e-6)


# v_cvt_scalef32_pk_{f16,bf16}_fp4: source word bytes 0x21, 0x9B, 0x3A, 0x7F; each byte's low
# nibble goes to D[15:0], its high nibble to D[31:16]. E2M1 by hand: 0x1 = 0.5, 0x2 = 1.0,
# 0x3 = 1.5, 0x7 = 6.0, 0x9 = -0.5, 0xA = -1.0, 0xB = -1.5, 0xF = -6.0.
FP4_WORD = 0x7F3A9B21
FP4_UNPACKED = {   # (op_sel, scale bits) -> (f16 result, bf16 result)
    ("", 0x3F800000): (0x3C003800, 0x3F803F00),              # 0.5, 1.0
    (" op_sel:[1,0,0]", 0x3F800000): (0xB800BE00, 0xBF00BFC0),  # -1.5, -0.5
    (" op_sel:[0,1,0]", 0x3F800000): (0x3E00BC00, 0x3FC0BF80),  # -1.0, 1.5
    (" op_sel:[1,1,0]", 0x3F800000): (0x4600C600, 0x40C0C0C0),  # -6.0, 6.0
    (" op_sel:[1,1,0]", 0x3E000000): (0x3A00BA00, 0x3F40BF40),  # times 2^-3: -0.75, 0.75
    (" op_sel:[0,1,0]", 0x41000000): (0x4A00C800, 0x4140C100),  # times 2^3: -8.0, 12.0
}


@pytest.mark.parametrize("select, scale", list(FP4_UNPACKED), ids=lambda x: str(x))
@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_v_cvt_scalef32_pk_16bit_fp4(fmt, select, scale):
    v = np.array([[FP4_WORD] * 64, [scale] * 64], np.uint32)
    got = run(f"  v_cvt_scalef32_pk_{fmt}_fp4 v2, v0, v1{select}", v, rows=3)[2]
    assert np.all(got == FP4_UNPACKED[select, scale][fmt == "bf16"])


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_v_cvt_scalef32_pk_16bit_fp4_signed_zeros(fmt):
    v = np.array([[0x80] * 64, [0x3F800000] * 64], np.uint32)      # codes +0 (low), -0 (high)
    assert np.all(run(f"  v_cvt_scalef32_pk_{fmt}_fp4 v2, v0, v1", v, rows=3)[2] == 0x80000000)


@pytest.mark.parametrize("scale, want", [
    (0x40400000, (0x4200C000, 0x4040C000)),      # 3.0: only the exponent is read, so 2^1
    (0xBF800000, (0x3E00BC00, 0x3FC0BF80)),      # -1.0: the sign is ignored too
    (0x38000000, (0x03008200, 0x3840B800)),      # 2^-15: exact f16 subnormals are kept
])
def test_v_cvt_scalef32_pk_16bit_fp4_reads_the_scales_exponent(scale, want):
    v = np.array([[FP4_WORD] * 64, [scale] * 64], np.uint32)
    for fmt, w in zip(("f16", "bf16"), want):
        got = run(f"  v_cvt_scalef32_pk_{fmt}_fp4 v2, v0, v1 op_sel:[0,1,0]", v, rows=3)[2]
        assert np.all(got == w), (fmt, hex(got[0]))


@pytest.mark.parametrize("scale, why", [
    (0x00400000, "cannot hold exactly"),          # 2^-127: 0.5 * 2^-127 is below f16's range
    (0x7F800000, "E8M0 NaN"),                     # exponent 0xFF
    (0x47800000, "cannot hold exactly"),          # 2^16: 6 * 2^16 overflows f16
])
def test_v_cvt_scalef32_pk_f16_fp4_refuses_what_would_round(scale, why):
    from rocke.emu.errors import EmulatorError
    v = np.array([[FP4_WORD] * 64, [scale] * 64], np.uint32)
    with pytest.raises(EmulatorError, match=why):
        run("  v_cvt_scalef32_pk_f16_fp4 v2, v0, v1 op_sel:[1,1,0]", v, rows=3)


def test_v_cvt_scalef32_pk_16bit_fp4_refuses_modifiers(support):
    assert "neg / abs" in support.decodes("v_cvt_scalef32_pk_bf16_fp4 v2, v0, -v1", "gfx950")
