"""gfx950 (CDNA4) instructions, one at a time: expected bits come from the ISA's description
restated independently here in numpy / torch (matrices, format decoders), never from the
emulator's own tables. And the target gate: gfx942 refuses gfx950-only opcodes and vice versa.
"""
import numpy as np
import pytest
import torch

from rocke import env
from rocke.emu import gfx950, numerics
from rocke.emu.asm import parse_program
from rocke.emu.errors import EmulatorError
from rocke.emu.program import decode_kernel

from .asm_runner import run_asm

RNG = np.random.default_rng(950)


def words(n_rows):
    return RNG.integers(0, 2 ** 32, size=(n_rows, 64), dtype=np.uint64).astype(np.uint32)


# ------------------------------------------------------------------------------ transposed reads

def _lds_round_trip(read: str, data: np.ndarray, target="gfx950"):
    """ds_write_b64 each lane's v[0:1] to LDS at lane*8, then `read` v[4:5] from lane*8."""
    v = np.zeros((3, 64), np.uint32)
    v[0:2] = data
    v[2] = np.arange(64, dtype=np.uint32) * 8
    body = f"""
  ds_write_b64 v2, v[0:1]
  s_waitcnt lgkmcnt(0)
  s_barrier
  {read} v[4:5], v2
  s_waitcnt lgkmcnt(0)
"""
    return run_asm(body, vgprs=v, rows=6, target=target, lds_bytes=512).vgprs[0, 4:6]


def test_ds_read_b64_tr_b16_gives_each_lane_a_column_of_its_rows_4x16_tile():
    data = words(2)
    got = _lds_round_trip("ds_read_b64_tr_b16", data)
    # lane-major bytes as written: 64 lanes x 4 b16
    elems = np.ascontiguousarray(data.T).view(np.uint16).reshape(64, 4)
    want = np.zeros((64, 4), np.uint16)
    for row in range(4):                       # 16-lane rows of the wave
        tile = elems[16 * row:16 * row + 16].reshape(4, 16)   # lanes 4r..4r+3 hold tile row r
        want[16 * row:16 * row + 16] = tile.T                  # lane j: column j
    assert np.array_equal(got.T.copy().view(np.uint16).reshape(64, 4), want)


def test_ds_read_b64_tr_b8_gives_each_lane_a_column_of_its_rows_8x16_tile():
    data = words(2)
    got = _lds_round_trip("ds_read_b64_tr_b8", data)
    elems = np.ascontiguousarray(data.T).view(np.uint8).reshape(64, 8)
    want = np.zeros((64, 8), np.uint8)
    for row in range(4):
        tile = elems[16 * row:16 * row + 16].reshape(8, 16)   # lanes 2r, 2r+1 hold tile row r
        want[16 * row:16 * row + 16] = tile.T
    assert np.array_equal(got.T.copy().view(np.uint8).reshape(64, 8), want)


# ------------------------------------------------------------------------------ lane swaps

@pytest.mark.parametrize("op, rows_of", [
    ("v_permlane16_swap_b32", lambda lane: (lane // 16) % 2 == 1),
    ("v_permlane32_swap_b32", lambda lane: lane >= 32),
])
def test_permlane_swap(op, rows_of):
    v = words(2)
    got = run_asm(f"  {op} v0, v1", vgprs=v, rows=2, target="gfx950").vgprs[0]
    shift = 16 if "16" in op else 32
    want0, want1 = v[0].copy(), v[1].copy()
    for lane in range(64):
        if rows_of(lane):   # vdst's upper lane swaps with vsrc's lane `shift` below
            want0[lane], want1[lane - shift] = v[1][lane - shift], v[0][lane]
    assert np.array_equal(got[0], want0) and np.array_equal(got[1], want1)


# ------------------------------------------------------------------------------ bitop3

@pytest.mark.parametrize("table, fn", [
    (0xC0, lambda a, b, c: a & b),
    (0x96, lambda a, b, c: a ^ b ^ c),
    (0xE8, lambda a, b, c: (a & b) | (a & c) | (b & c)),
    (0x78, lambda a, b, c: a ^ (b & c)),
    (0xAA, lambda a, b, c: c),
])
def test_bitop3_b32_truth_tables(table, fn):
    # S0 selects the truth-table index's bit 2, S1 bit 1, S2 bit 0 (0xf0 / 0xcc / 0xaa)
    v = words(3)
    got = run_asm(f"  v_bitop3_b32 v3, v0, v1, v2 bitop3:{table:#x}", vgprs=v, rows=4,
                  target="gfx950").vgprs[0, 3]
    assert np.array_equal(got, fn(v[0], v[1], v[2]))


# ------------------------------------------------------------------------------ conversions

def test_cvt_pk_f16_and_bf16_from_f32_round_to_nearest_even():
    x = (RNG.standard_normal((2, 64)) * 1000).astype(np.float32)
    x[0, :4] = [np.inf, -0.0, 65520.0, 1e-8]
    v = x.view(np.uint32)
    got = run_asm("  v_cvt_pk_f16_f32 v2, v0, v1\n  v_cvt_pk_bf16_f32 v3, v0, v1", vgprs=v,
                  rows=4, target="gfx950").vgprs[0]
    for row, dtype in ((2, torch.float16), (3, torch.bfloat16)):
        lo = torch.from_numpy(x[0]).to(dtype).view(torch.int16).numpy().view(np.uint16)
        hi = torch.from_numpy(x[1]).to(dtype).view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(got[row] & 0xFFFF, lo) and np.array_equal(got[row] >> 16, hi)


@pytest.mark.parametrize("fmt, dtype", [("e4m3fn", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)])
def test_ocp_fp8_codes_decode_and_encode_like_torch(fmt, dtype):
    codes = np.arange(256, dtype=np.uint8)
    want = torch.from_numpy(codes).view(dtype).float().numpy()
    assert np.array_equal(numerics.ocp_fp8_bits_to_f32(codes, fmt), want, equal_nan=True)
    x = (RNG.standard_normal(4096) * 40).astype(np.float32)
    x = x[np.abs(x) <= numerics.OCP_FP8_MAX[fmt]]
    bits, overflow = numerics.f32_to_ocp_fp8_bits(x, fmt, saturate=False)
    assert not overflow.any()
    assert np.array_equal(bits, torch.from_numpy(x).to(dtype).view(torch.uint8).numpy())


def test_gfx950_fp8_conversions_are_ocp_not_fnuz():
    codes = np.arange(64, dtype=np.uint32) * 4 + 0x01        # bytes 1, 5, 9, ...
    v = np.stack([codes, (np.arange(64) * 3.5 - 100).astype(np.float32).view(np.uint32),
                  (np.arange(64) * 0.25).astype(np.float32).view(np.uint32)])
    body = "  v_cvt_f32_fp8_e32 v3, v0\n  v_cvt_f32_bf8_e32 v4, v0\n  v_cvt_pk_fp8_f32 v5, v1, v2"
    got = run_asm(body, vgprs=v, rows=6, target="gfx950").vgprs[0]
    e4 = torch.from_numpy((codes & 0xFF).astype(np.uint8)).view(torch.float8_e4m3fn).float().numpy()
    e5 = torch.from_numpy((codes & 0xFF).astype(np.uint8)).view(torch.float8_e5m2).float().numpy()
    assert np.array_equal(got[3].view(np.float32), e4, equal_nan=True)
    assert np.array_equal(got[4].view(np.float32), e5, equal_nan=True)
    pack = [torch.from_numpy(v[r].view(np.float32)).to(torch.float8_e4m3fn).view(torch.uint8)
            .numpy().astype(np.uint32) for r in (1, 2)]
    assert np.array_equal(got[5] & 0xFFFF, pack[0] | (pack[1] << 8))


# ------------------------------------------------------------------------------ MFMAs

def _operand_registers(matrix, per_lane_k, extent, elem_bits):
    """[extent, K] values (row or column major along K) -> registers [regs, 64]: lane l holds
    index l % extent and K elements per_lane_k * (l // extent) + i (CDNA single-block layout)."""
    regs = np.zeros((64, per_lane_k), matrix.dtype)
    for lane in range(64):
        k0 = per_lane_k * (lane // extent)
        regs[lane] = matrix[lane % extent, k0:k0 + per_lane_k]
    return np.ascontiguousarray(regs).view(np.uint32).T.copy()


def _d_matrix(registers, m):
    """C/D registers [regs, 64] of an m x m single-block atom -> [m, m] (CDNA3 C/D layout)."""
    out = np.zeros((m, m), np.float32)
    groups = 64 // m
    for lane in range(64):
        for reg in range(registers.shape[0]):
            row = 4 * groups * (reg // 4) + 4 * (lane // m) + reg % 4
            out[row, lane % m] = registers[reg, lane].view(np.float32)
    return out


@pytest.mark.parametrize("op, m, k, dtype", [
    ("v_mfma_f32_16x16x32_f16", 16, 32, torch.float16),
    ("v_mfma_f32_16x16x32_bf16", 16, 32, torch.bfloat16),
    ("v_mfma_f32_32x32x16_f16", 32, 16, torch.float16),
    ("v_mfma_f32_32x32x16_bf16", 32, 16, torch.bfloat16),
])
def test_wide_k_16bit_mfma_against_matmul(op, m, k, dtype):
    a = torch.randn(m, k, dtype=torch.float64).to(dtype)
    b = torch.randn(k, m, dtype=torch.float64).to(dtype)
    c = np.random.default_rng(1).standard_normal((m, m)).astype(np.float32)
    raw = lambda t: t.view(torch.int16).numpy().view(np.uint16)
    a_regs = _operand_registers(raw(a), 8, m, 16)            # 4 registers
    b_regs = _operand_registers(raw(b.T.contiguous()), 8, m, 16)
    c_regs = np.zeros((m * m // 64, 64), np.uint32)
    for lane in range(64):
        for reg in range(c_regs.shape[0]):
            row = 4 * (64 // m) * (reg // 4) + 4 * (lane // m) + reg % 4
            c_regs[reg, lane] = c[row, lane % m].view(np.uint32)
    nc = c_regs.shape[0]
    v = np.concatenate([a_regs, b_regs, c_regs])
    got = run_asm(f"  {op} v[8:{7 + nc}], v[0:3], v[4:7], v[8:{7 + nc}]", vgprs=v,
                  target="gfx950").vgprs[0, 8:8 + nc]
    want = (a.double() @ b.double() + torch.from_numpy(c).double()).float().numpy()
    assert np.array_equal(_d_matrix(got, m), want)


@pytest.mark.parametrize("cbsz, blgp, a_dtype, b_dtype", [
    (0, 0, torch.float8_e4m3fn, torch.float8_e4m3fn),
    (1, 0, torch.float8_e5m2, torch.float8_e4m3fn),
    (0, 1, torch.float8_e4m3fn, torch.float8_e5m2),
])
def test_f8f6f4_mfma_formats_from_cbsz_blgp(cbsz, blgp, a_dtype, b_dtype):
    m, k = 16, 128
    a = (torch.randn(m, k) * 4).to(a_dtype)
    b = (torch.randn(k, m) * 4).to(b_dtype)
    raw = lambda t: t.view(torch.uint8).numpy()
    v = np.concatenate([_operand_registers(raw(a), 32, m, 8),
                        _operand_registers(raw(b.T.contiguous()), 32, m, 8),
                        np.zeros((4, 64), np.uint32)])
    mods = (f" cbsz:{cbsz}" if cbsz else "") + (f" blgp:{blgp}" if blgp else "")
    got = run_asm(f"  v_mfma_f32_16x16x128_f8f6f4 v[16:19], v[0:7], v[8:15], v[16:19]{mods}",
                  vgprs=v, target="gfx950").vgprs[0, 16:20]
    want = (a.double() @ b.double()).float().numpy()
    assert np.array_equal(_d_matrix(got, m), want)


def test_f8f6f4_mfma_refuses_format_codes_past_fp4_and_checks_widths():
    with pytest.raises(EmulatorError, match="code 5.*not emulated"):
        run_asm("  v_mfma_f32_16x16x128_f8f6f4 v[16:19], v[0:7], v[8:15], v[16:19] cbsz:5",
                vgprs=np.zeros((20, 64), np.uint32), target="gfx950")
    # fp6 / bf6 take 6 registers a lane
    with pytest.raises(EmulatorError, match="B operand 'v\\[8:15\\]' must be 6 vector registers"):
        run_asm("  v_mfma_f32_16x16x128_f8f6f4 v[16:19], v[0:7], v[8:15], v[16:19] blgp:3",
                vgprs=np.zeros((20, 64), np.uint32), target="gfx950")
    # fp4 takes 4 registers a lane, not fp8's 8
    with pytest.raises(EmulatorError, match="A operand 'v\\[0:7\\]' must be 4 vector registers"):
        run_asm("  v_mfma_f32_16x16x128_f8f6f4 v[16:19], v[0:7], v[8:15], v[16:19] cbsz:4",
                vgprs=np.zeros((20, 64), np.uint32), target="gfx950")


@pytest.mark.parametrize("a_byte, b_byte, cbsz, expected", [
    (0x22, 0xFF, 4, 128 * 1.0 * -6.0),    # every code 1.0 times every code -6.0
    (0x01, 0x04, 4, 64 * 0.5 * 2.0),      # low nibbles 0.5 / 2.0 meet; high ones are 0
    (0x01, 0x40, 4, 0.0),                 # 0.5 only in low nibbles, 2.0 only in high ones
    (0x9B, 0x33, 4, 64 * (-1.5 * 1.5 - 0.5 * 1.5)),   # low 0xB = -1.5, high 0x9 = -0.5; 1.5
])
def test_f8f6f4_mfma_fp4_codes(a_byte, b_byte, cbsz, expected):
    """E2M1 operands (CBSZ = BLGP = 4), 4 registers a lane holding 32 codes, low nibble first:
    hand-computed sums over K = 128 of uniform operands."""
    word = lambda byte: np.uint32(byte * 0x01010101)
    v = np.concatenate([np.full((4, 64), word(a_byte), np.uint32),
                        np.full((4, 64), word(b_byte), np.uint32), np.zeros((4, 64), np.uint32)])
    got = run_asm(f"  v_mfma_f32_16x16x128_f8f6f4 v[8:11], v[0:3], v[4:7], v[8:11] cbsz:{cbsz} "
                  "blgp:4", vgprs=v, target="gfx950").vgprs[0, 8:12]
    assert np.all(got.view(np.float32) == np.float32(expected))


# ------------------------------------------------------------------------------ LDS DMA

def test_global_load_lds_dwordx4_lands_16_bytes_per_lane_at_m0():
    data = words(4)          # the harness buffer: row r of lane l at byte 256*r + 4*l
    body = """
  v_mov_b32 v6, s12
  v_mov_b32 v7, s13
  v_lshlrev_b32 v8, 4, v255
  v_lshrrev_b32 v8, 2, v8
  v_lshl_add_u64 v[6:7], v[8:9], 0, v[6:7]
  s_mov_b32 m0, 64
  global_load_lds_dwordx4 v[6:7], off
  s_waitcnt vmcnt(0)
  v_add_u32 v10, 64, v8
  ds_read_b128 v[0:3], v10
  s_waitcnt lgkmcnt(0)
"""
    v = np.concatenate([data, np.zeros((7, 64), np.uint32)])
    got = run_asm(body, vgprs=v, rows=11, target="gfx950", lds_bytes=64 + 1024).vgprs[0, 0:4]
    flat = data.reshape(-1)                       # the buffer's first 1024 bytes as words
    want = flat.reshape(64, 4).T                  # lane l received words 4l..4l+3
    assert np.array_equal(got, want)


# ------------------------------------------------------------------------------ the gate

PROBE = """
  .text
  .globl probe
  .p2align 8
  .type probe,@function
probe:
  {instruction}
  s_endpgm
.Lfunc_end_probe:
.amdhsa_kernel probe
  .amdhsa_next_free_vgpr 64
  .amdhsa_next_free_sgpr 32
  .amdhsa_accum_offset 64
.end_amdhsa_kernel
  .amdgpu_metadata
---
amdhsa.kernels:
  - .name: probe
    .symbol: probe.kd
    .args: []
    .kernarg_segment_size: 0
    .max_flat_workgroup_size: 64
    .wavefront_size: 64
amdhsa.version: [1, 2]
  .end_amdgpu_metadata
"""

GFX950_SAMPLES = ["v_mfma_f32_16x16x32_f16 v[0:3], v[4:7], v[8:11], v[0:3]",
                  "ds_read_b64_tr_b16 v[0:1], v2", "global_load_lds_dwordx4 v[0:1], off",
                  "v_permlane32_swap_b32_e32 v0, v1", "v_bitop3_b32 v0, v1, v2, v3 bitop3:0x78",
                  "v_cvt_pk_bf16_f32 v0, v1, v2",
                  "buffer_load_dwordx4 v1, s[4:7], 0 offen lds"]


def _decode(instruction, target):
    program = parse_program(PROBE.format(instruction=instruction))
    return decode_kernel(program, program.kernels["probe"], target)


@pytest.mark.parametrize("instruction", GFX950_SAMPLES)
def test_gfx942_refuses_gfx950_only_opcodes(instruction):
    _decode(instruction, "gfx950")
    with pytest.raises(EmulatorError, match="gfx950 \\(CDNA4\\) instruction that gfx942 does not have"):
        _decode(instruction, "gfx942")


def test_gfx950_refuses_the_xf32_mfmas_it_dropped():
    instruction = "v_mfma_f32_16x16x8_xf32 v[0:3], v[4:5], v[6:7], v[0:3]"
    _decode(instruction, "gfx942")      # gfx942 has it (run on inputs xf32 holds exactly)
    with pytest.raises(EmulatorError, match="gfx942 instruction that gfx950 does not have"):
        _decode(instruction, "gfx950")


def test_unknown_target_is_refused():
    with pytest.raises(ValueError, match="unknown emulator target 'gfx90a'"):
        _decode("s_nop 0", "gfx90a")


def test_gfx950_lds_is_160_kib_and_gfx942_64():
    body = "  s_nop 0"
    run_asm(body, vgprs=np.zeros((1, 64), np.uint32), target="gfx950", lds_bytes=160 * 1024)
    with pytest.raises(ValueError, match="LDS request too large.*gfx942"):
        run_asm(body, vgprs=np.zeros((1, 64), np.uint32), target="gfx942", lds_bytes=64 * 1024 + 4)


def test_rocke_device_emu_gfx950(monkeypatch):
    monkeypatch.setenv("ROCKE_DEVICE", "emu:gfx950")
    assert env.device() == "emu" and env.emu_target() == "gfx950"
    # code without a .amdgcn_target runs as the device's target
    out = run_asm("  v_cvt_pk_bf16_f32 v2, v0, v1",
                  vgprs=np.array([[0x3F800000] * 64, [0x40000000] * 64], np.uint32), rows=3)
    assert out.vgprs[0, 2, 0] == 0x40003F80
    monkeypatch.setenv("ROCKE_DEVICE", "emu:gfx90a")
    with pytest.raises(ValueError, match="ROCKE_DEVICE must be"):
        env.device()
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    assert env.emu_target() == "gfx942"


def test_scalef32_fp8_pack_unit_scale_and_fp16_ovfl():
    a = np.array([1.5, -3.0, 500.0, np.inf] * 16, np.float32)
    b = np.array([0.1, 448.0, -1e6, -np.inf] * 16, np.float32)
    v = np.stack([a.view(np.uint32), b.view(np.uint32)])
    body = ("  s_setreg_imm32_b32 hwreg(HW_REG_MODE, 23, 1), 1\n"
            "  v_cvt_scalef32_pk_fp8_f32 v2, v0, v1, 1.0\n"
            "  v_cvt_scalef32_pk_bf8_f32 v3, v0, v1, 1.0 op_sel:[0,0,0,1]")
    got = run_asm(body, vgprs=v, rows=4, target="gfx950").vgprs[0]

    def codes(x, dtype, limit):   # FP16_OVFL (CDNA4 guide Table 31): beyond max and ±inf -> ±max
        t = torch.from_numpy(np.clip(x, -limit, limit))
        return t.to(dtype).view(torch.uint8).numpy().astype(np.uint32)
    e4 = codes(a, torch.float8_e4m3fn, 448.0) | (codes(b, torch.float8_e4m3fn, 448.0) << 8)
    e5 = codes(a, torch.float8_e5m2, 57344.0) | (codes(b, torch.float8_e5m2, 57344.0) << 8)
    assert np.array_equal(got[2] & 0xFFFF, e4)
    assert np.array_equal(got[3] >> 16, e5)


def test_gate_lists_agree_with_llvms_opcode_lists():
    """GFX950_ONLY opcodes are in AMD LLVM's gfx950 list and not in LLVM 19's gfx942 list;
    GFX942_ONLY the other way round."""
    from pathlib import Path
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"

    def names(target):
        return {line.split("\t")[1] for line in (fixtures / f"{target}_opcodes.txt").read_text()
                .splitlines() if line and not line.startswith("#")}
    gfx942, gfx950_list = names("gfx942"), names("gfx950")
    plain = {n for n in gfx950.GFX950_ONLY if " " not in n}       # 'buffer_load_dwordx4 lds' is a form
    assert plain <= gfx950_list and not plain & gfx942
    assert gfx950.GFX942_ONLY <= gfx942 and not gfx950.GFX942_ONLY & gfx950_list


def test_minimum3_maximum3_propagate_nan_and_order_signed_zeros():
    vals = np.array([1.0, -0.0, 0.0, np.nan, -np.inf, 3.0, 2.0, 0.0], np.float32)
    a, b, c = (np.resize(np.roll(vals, s), 64) for s in (0, 1, 3))
    v = np.stack([a, b, c]).view(np.uint32)
    got = run_asm("  v_minimum3_f32 v3, v0, v1, v2\n  v_maximum3_f32 v4, v0, v1, v2", vgprs=v,
                  rows=5, target="gfx950").vgprs[0]
    # IEEE 754-2019 minimum / maximum: NaN if any input is NaN, and -0 < +0
    def pick(xs, smallest):
        if any(np.isnan(x) for x in xs):
            return np.float32(np.nan)
        return (min if smallest else max)(xs, key=lambda x: (float(x), not np.signbit(x)))
    want_min = np.array([pick(t, True) for t in zip(a, b, c)], np.float32)
    want_max = np.array([pick(t, False) for t in zip(a, b, c)], np.float32)
    for row, want in ((3, want_min), (4, want_max)):
        out = got[row].view(np.float32)
        assert np.array_equal(np.isnan(out), np.isnan(want))
        ok = ~np.isnan(want)
        assert np.array_equal(out[ok].view(np.uint32), want[ok].view(np.uint32))


def test_ds_read_tr_under_exec_whole_rows_and_refused_for_part_of_a_row():
    data = words(2)
    v = np.zeros((6, 64), np.uint32)
    v[0:2] = data
    v[2] = np.arange(64, dtype=np.uint32) * 8
    v[4:6] = 0xDEADBEEF
    body = """
  ds_write_b64 v2, v[0:1]
  s_waitcnt lgkmcnt(0)
  s_barrier
  s_mov_b32 exec_lo, {lo}
  s_mov_b32 exec_hi, {hi}
  ds_read_b64_tr_b16 v[4:5], v2
  s_waitcnt lgkmcnt(0)
  s_mov_b64 exec, -1
"""
    got = run_asm(body.format(lo="0xffff0000", hi="0xffffffff"), vgprs=v, rows=6,
                  target="gfx950", lds_bytes=512).vgprs[0, 4:6]
    full = _lds_round_trip("ds_read_b64_tr_b16", data)
    assert np.array_equal(got[:, 16:], full[:, 16:])          # rows 1-3 as with every lane on
    assert np.all(got[:, :16] == 0xDEADBEEF)                   # row 0 untouched
    with pytest.raises(EmulatorError, match="16-lane row with only some lanes active"):
        run_asm(body.format(lo="0xffffff00", hi="0xffffffff"), vgprs=v, rows=6, target="gfx950",
                lds_bytes=512)


# ------------------------------------------------------------------------------ OCP fp8, by hand
# Expected values written out from the OCP E4M3 layout (bias 7, no infinity, NaN = S.1111.111,
# max 1.75 * 2^8 = 448, subnormal step 2^-9), never from numerics' tables; the gfx942 (fnuz)
# meaning of the same codes is given beside them where it differs.

E4M3_BY_HAND = [          # (code, value on gfx950, value of the code on gfx942 (e4m3fnuz))
    (0x7E, 448.0, 224.0),        # top finite: 1.110 x 2^(15-7) (fnuz: 1.110 x 2^(15-8))
    (0xFE, -448.0, -224.0),
    (0x7F, np.nan, 240.0),       # NaN (fnuz: 1.111 x 2^7 = 240 is its max)
    (0xFF, np.nan, -240.0),
    (0x80, -0.0, np.nan),        # negative zero (fnuz: the only NaN)
    (0x01, 2.0 ** -9, 2.0 ** -10),   # smallest subnormal 0.001 x 2^(1-7)
    (0x07, 7 * 2.0 ** -9, 7 * 2.0 ** -10),   # largest subnormal
    (0x08, 2.0 ** -6, 2.0 ** -7),    # smallest normal
    (0x38, 1.0, 0.5),
    (0x3C, 1.5, 0.75),
]


def _f32_bits(values):
    return np.asarray(values, np.float32).view(np.uint32)


@pytest.mark.parametrize("sel", [0, 1, 2, 3])
def test_gfx950_cvt_f32_fp8_reads_ocp_codes_from_the_sdwa_byte(sel):
    """v_cvt_f32_fp8 as LLVM emits it for gfx950 (``_sdwa src0_sel:BYTE_n`` for bytes 1..3):
    the selected byte decodes as OCP E4M3, the other bytes are ignored."""
    codes = np.array([c for c, _, _ in E4M3_BY_HAND] * 7)[:64].astype(np.uint32)
    noise = RNG.integers(0, 256, size=64, dtype=np.uint32)
    word = (noise * 0x01010101) & ~(np.uint32(0xFF) << np.uint32(8 * sel)) | (codes << np.uint32(8 * sel))
    op = "v_cvt_f32_fp8_e32 v1, v0" if sel == 0 else f"v_cvt_f32_fp8_sdwa v1, v0 src0_sel:BYTE_{sel}"
    got = run_asm(f"  {op}", vgprs=np.stack([word, word]), rows=2, target="gfx950").vgprs[0, 1]
    want = np.array([v for _, v, _ in E4M3_BY_HAND] * 7, np.float32)[:64]
    assert np.array_equal(got.view(np.float32), want, equal_nan=True)
    assert np.array_equal(np.signbit(got.view(np.float32)), np.signbit(want))   # -0 stays -0
    fnuz = run_asm(f"  {op}", vgprs=np.stack([word, word]), rows=2, target="gfx942").vgprs[0, 1]
    want_fnuz = np.array([v for _, _, v in E4M3_BY_HAND] * 7, np.float32)[:64]
    assert np.array_equal(fnuz.view(np.float32), want_fnuz, equal_nan=True)


def test_gfx950_cvt_pk_f32_fp8_word_select():
    """v_cvt_pk_f32_fp8: two OCP codes of the selected 16-bit word -> two f32 (sdwa WORD_1,
    LLVM's form of the intrinsic's word_sel, reads bytes 2 and 3); the VOP3 op_sel select is
    refused, not ignored."""
    lo = np.array([0x7E, 0x01] * 32, np.uint32)
    hi = np.array([0xFE, 0x38] * 32, np.uint32)
    word = lo | (hi << 8) | (np.uint32(0x3C) << 16) | (np.uint32(0x7F) << 24)   # [lo, hi, 1.5, NaN]
    body = ("  v_cvt_pk_f32_fp8_e64 v[2:3], v0\n"
            "  v_cvt_pk_f32_fp8_sdwa v[4:5], v0 src0_sel:WORD_1")
    got = run_asm(body, vgprs=np.stack([word]), rows=6, target="gfx950").vgprs[0].view(np.float32)
    assert np.array_equal(got[2], np.where(lo == 0x7E, 448.0, 2.0 ** -9).astype(np.float32))
    assert np.array_equal(got[3], np.where(hi == 0xFE, -448.0, 1.0).astype(np.float32))
    assert (got[4] == 1.5).all() and np.isnan(got[5]).all()
    for op in ("v_cvt_pk_f32_fp8_e64 v[4:5], v0 op_sel:[1,0]", "v_cvt_f32_fp8_e64 v4, v0 op_sel:[1,0]"):
        with pytest.raises(EmulatorError, match="op_sel .* is not emulated on gfx950"):
            run_asm(f"  {op}", vgprs=np.stack([word]), rows=6, target="gfx950")


def test_gfx950_cvt_pk_fp8_f32_encodes_ocp_and_keeps_the_other_word():
    """v_cvt_pk_fp8_f32 (round to nearest even, OCP E4M3): op_sel:[0,0,1] writes the high word
    and keeps the low one, as LLVM packs four values into one dword."""
    a = np.array([448.0, -448.0, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10, 1.0625, 1.1875, 0.0] * 8, np.float32)
    b = np.array([np.nan, -np.nan, 240.0, 256.0, 272.0, 1e-30, -0.0, 300.0] * 8, np.float32)
    # by hand: 448 = 0x7E; 2^-9 = 0x01; 2^-10 ties to even 0x00; 3 * 2^-10 = 1.5 steps -> 2 steps
    # 0x02; 1.0625 = 1 + 1/16 ties to even 1.000 = 0x38; 1.1875 ties up to 1.250 = 0x3A;
    # NaN = 0x7F (sign kept); 240 = 1.111 x 2^7 = 0x77; 256 = 0x78; 272 = 1.0625 x 2^8 ties to
    # 0x78; 1e-30 -> +0; -0 -> 0x80; 300 = 1.171875 x 2^8 -> 1.125 x 2^8 = 0x79 (step 32)
    lo_codes = np.array([0x7E, 0xFE, 0x01, 0x00, 0x02, 0x38, 0x3A, 0x00] * 8, np.uint32)
    hi_codes = np.array([0x7F, 0xFF, 0x77, 0x78, 0x78, 0x00, 0x80, 0x79] * 8, np.uint32)
    keep = np.full(64, 0xBEEF, np.uint32)
    v = np.stack([_f32_bits(a), _f32_bits(b), keep])
    body = ("  v_cvt_pk_fp8_f32 v3, v0, v1\n"
            "  v_cvt_pk_fp8_f32 v2, v0, v1 op_sel:[0,0,1]")
    got = run_asm(body, vgprs=v, rows=4, target="gfx950").vgprs[0]
    assert np.array_equal(got[3] & 0xFFFF, lo_codes | (hi_codes << 8))
    assert np.array_equal(got[2] & 0xFFFF, keep)
    assert np.array_equal(got[2] >> 16, lo_codes | (hi_codes << 8))


def test_gfx950_cvt_pk_fp8_f32_refuses_an_unpinned_overflow():
    """Without clamp the ISA text does not pin the code of a finite value beyond 448 (rounding
    above it) or of an infinity: the emulator stops rather than guess. 463.99 rounds to 448."""
    ok = np.stack([_f32_bits(np.full(64, 463.99)), _f32_bits(np.full(64, -463.99))])
    got = run_asm("  v_cvt_pk_fp8_f32 v2, v0, v1", vgprs=ok, rows=3, target="gfx950").vgprs[0, 2]
    assert (got & 0xFFFF == 0xFE7E).all()
    for bad in (465.0, np.inf):   # 464 is the tie between 448 and 480: even 448
        v = np.stack([_f32_bits(np.full(64, bad)), _f32_bits(np.zeros(64))])
        with pytest.raises(EmulatorError, match="overflow without clamp is not modelled"):
            run_asm("  v_cvt_pk_fp8_f32 v2, v0, v1", vgprs=v, rows=3, target="gfx950")
