"""The emulator's ISA readings that were listed as "not confirmed in the ISA text", one test each
(sources in rocke/emu/launch.py's docstring), plus the DPP/SDWA forms no other test ran:
row_ror, row_bcast:15/31, wave_shl/shr/rol/ror, SDWA sext.

Expected values are computed here from the documented definition (lane arithmetic, f16 bits,
fp8 encodings), never by the emulator."""
import numpy as np
import pytest

from rocke.arch import abi
from tests.emu.asm_runner import run_asm

LANE = np.arange(64)
LDS_DESCRIPTOR = "  .amdhsa_group_segment_fixed_size 1024"


def _rows(*rows):
    return np.stack([np.asarray(r, np.int64).astype(np.uint32) for r in rows])


# ---------------------------------------------------------------- LDS DMA instruction offset

@pytest.mark.parametrize("load", [
    "global_load_lds_dword v255, s[12:13] offset:256",
    "buffer_load_dword v255, s[20:23], 0 offen offset:256 lds",
])
def test_lds_dma_adds_the_instruction_offset_to_the_lds_address(load):
    """LDS address = M0 + instruction offset + 4 * lane (the offset applies to both the memory
    and the LDS address). Memory dword of lane i is row 1 of the input (byte 256 + 4i)."""
    source = 5000 + 3 * LANE
    body = f"""
  v_mov_b32_e32 v2, -1
  v_add_u32_e32 v3, 64, v255
  v_add_u32_e32 v4, 0x140, v255
  ds_write_b32 v3, v2
  ds_write_b32 v4, v2
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s20, s12
  s_and_b32 s21, s13, 0xffff
  s_mov_b32 s22, 0x1000
  s_mov_b32 s23, 0x20000
  s_mov_b32 m0, 64
  {load}
  s_waitcnt vmcnt(0)
  ds_read_b32 v5, v4
  ds_read_b32 v6, v3
  s_waitcnt lgkmcnt(0)
"""
    r = run_asm(body, vgprs=_rows(LANE, source), descriptor_extra=LDS_DESCRIPTOR)
    assert r.vgprs[0, 5].tolist() == source.tolist()        # at M0 + 256 + 4i
    assert r.vgprs[0, 6].tolist() == [0xFFFFFFFF] * 64       # M0 + 4i untouched


# ---------------------------------------------------------------- DPP

def _dpp(control, old, src, exec_mask=None):
    """v1 = old, then v_mov_b32_dpp v1, v0 <control> (under `exec_mask` if given)."""
    set_exec = ""
    if exec_mask is not None:
        set_exec = (f"  s_mov_b32 s16, {exec_mask & 0xFFFFFFFF:#x}\n"
                    f"  s_mov_b32 s17, {exec_mask >> 32:#x}\n  s_mov_b64 exec, s[16:17]\n")
    body = set_exec + f"  v_mov_b32_dpp v1, v0 {control}\n  s_mov_b64 exec, -1\n"
    return run_asm(body, vgprs=_rows(src, old)).vgprs[0, 1].astype(np.int64)


SRC = 100 + 7 * LANE
OLD = 9000 + LANE


def _expect(source_lane, valid, write=None, bound_ctrl=False):
    """Per-lane result: src[source_lane] where valid, else 0 (bound_ctrl) or the old value;
    lanes not written keep the old value."""
    write = np.ones(64, bool) if write is None else write
    got = np.where(valid, SRC[np.clip(source_lane, 0, 63)], 0 if bound_ctrl else OLD)
    keep_old = ~write | (~valid & ~bound_ctrl)
    return np.where(keep_old, OLD, got)


@pytest.mark.parametrize("k", [1, 3, 15])
def test_dpp_row_ror(k):
    """Row rotate right by k: lane i reads lane (i mod 16 - k) mod 16 of its own row."""
    src_lane = LANE // 16 * 16 + (LANE % 16 - k) % 16
    got = _dpp(f"row_ror:{k} row_mask:0xf bank_mask:0xf", OLD, SRC)
    assert got.tolist() == _expect(src_lane, np.ones(64, bool)).tolist()


def test_dpp_row_bcast15():
    """Lane 15 of each row is broadcast to the whole next row (rows 1..3; row_mask 0xa as
    compilers emit it writes rows 1 and 3 only)."""
    got = _dpp("row_bcast:15 row_mask:0xa bank_mask:0xf", OLD, SRC)
    row = LANE // 16
    expected = np.where((row == 1) | (row == 3), SRC[np.maximum(row * 16 - 1, 0)], OLD)
    assert got.tolist() == expected.tolist()
    got = _dpp("row_bcast:15 row_mask:0xe bank_mask:0xf", OLD, SRC)
    expected = np.where(row >= 1, SRC[np.maximum(row * 16 - 1, 0)], OLD)
    assert got.tolist() == expected.tolist()


def test_dpp_row_bcast31():
    """Lane 31 is broadcast to rows 2 and 3."""
    got = _dpp("row_bcast:31 row_mask:0xc bank_mask:0xf", OLD, SRC)
    assert got.tolist() == np.where(LANE >= 32, SRC[31], OLD).tolist()


@pytest.mark.parametrize("control, source, valid", [
    ("wave_shl:1", LANE + 1, LANE + 1 < 64),
    ("wave_shr:1", LANE - 1, LANE >= 1),
    ("wave_rol:1", (LANE + 1) % 64, np.ones(64, bool)),
    ("wave_ror:1", (LANE - 1) % 64, np.ones(64, bool)),
])
@pytest.mark.parametrize("bound_ctrl", [False, True])
def test_dpp_wave_shifts_and_rotates(control, source, valid, bound_ctrl):
    """Whole-wave shift/rotate by one lane; a shifted-in lane is out of range: it keeps its old
    value, or gets 0 under bound_ctrl."""
    text = control + " row_mask:0xf bank_mask:0xf" + (" bound_ctrl:0" if bound_ctrl else "")
    got = _dpp(text, OLD, SRC)
    assert got.tolist() == _expect(source, valid, bound_ctrl=bound_ctrl).tolist()


@pytest.mark.parametrize("bound_ctrl", [False, True])
def test_dpp_source_lane_with_exec_off_is_invalid(bound_ctrl):
    """quad_perm:[1,0,3,2] swaps lane pairs; lane 5 and 42 are off in EXEC, so lanes 4 and 43
    read an invalid lane: 0 with bound_ctrl, else they keep their old value. The disabled
    lanes themselves are not written."""
    exec_mask = (2 ** 64 - 1) & ~(1 << 5) & ~(1 << 42)
    text = "quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf" + (" bound_ctrl:0" if bound_ctrl else "")
    got = _dpp(text, OLD, SRC, exec_mask)
    source = LANE ^ 1
    enabled = np.array([(exec_mask >> int(i)) & 1 == 1 for i in LANE])
    expected = _expect(source, enabled[source], write=enabled, bound_ctrl=bound_ctrl)
    assert got.tolist() == expected.tolist()
    assert got[4] == (0 if bound_ctrl else OLD[4]) and got[5] == OLD[5]


# ---------------------------------------------------------------- SDWA sext

@pytest.mark.parametrize("sel, shift, bits", [("BYTE_1", 8, 8), ("WORD_1", 16, 16),
                                               ("BYTE_0", 0, 8)])
def test_sdwa_sext_sign_extends_the_selected_field(sel, shift, bits):
    """v_add_u32_sdwa with sext(src0): the selected field is sign-extended to 32 bits before
    the add; without sext it is zero-extended."""
    rng = np.random.default_rng(7)
    a = rng.integers(0, 2 ** 32, 64, dtype=np.uint64)
    b = rng.integers(0, 2 ** 32, 64, dtype=np.uint64)
    body = (f"  v_add_u32_sdwa v2, sext(v0), v1 dst_sel:DWORD dst_unused:UNUSED_PAD "
            f"src0_sel:{sel} src1_sel:DWORD\n"
            f"  v_add_u32_sdwa v3, v0, v1 dst_sel:DWORD dst_unused:UNUSED_PAD "
            f"src0_sel:{sel} src1_sel:DWORD\n")
    r = run_asm(body, vgprs=_rows(a, b))
    field = (a.astype(np.int64) >> shift) & ((1 << bits) - 1)
    signed = np.where(field >= 1 << (bits - 1), field - (1 << bits), field)
    assert r.vgprs[0, 2].tolist() == ((signed + b.astype(np.int64)) % 2 ** 32).tolist()
    assert r.vgprs[0, 3].tolist() == ((field + b.astype(np.int64)) % 2 ** 32).tolist()


# ---------------------------------------------------------------- VOP3P inline constants

def _f16_bits(x):
    return np.asarray(x, np.float16).view(np.uint16).astype(np.int64)


def test_packed_inline_constants_are_one_32_bit_value():
    """An inline constant in a packed 16-bit operand is a 32-bit value, not a splat: an integer
    is sign-extended (1 -> 0x00000001, -1 -> 0xFFFFFFFF), a float is the f16 value in the low
    half with 0 above for f16 ops and the f32 bits for integer ops. op_sel_hi:0 makes the high
    lane read the low half too (how compilers splat a constant)."""
    lo = LANE * 3
    hi = 1000 + LANE
    words = lo | (hi << 16)
    flo = np.linspace(-4, 4, 64).astype(np.float16)
    fhi = np.linspace(10, -10, 64).astype(np.float16)
    fwords = _f16_bits(flo) | (_f16_bits(fhi) << 16)
    body = ("  v_pk_add_u16 v2, v0, 1\n"
            "  v_pk_add_u16 v3, v0, -1\n"
            "  v_pk_add_u16 v4, v0, 1.0\n"
            "  v_pk_add_f16 v5, v1, 1.0\n"
            "  v_pk_add_f16 v6, v1, 1.0 op_sel_hi:[1,0]\n"
            "  v_pk_mul_f16 v7, v1, -2.0\n")
    r = run_asm(body, vgprs=_rows(words, fwords))

    def pack(a, b):
        return (np.asarray(a, np.int64) & 0xFFFF) | ((np.asarray(b, np.int64) & 0xFFFF) << 16)

    assert r.vgprs[0, 2].tolist() == pack(lo + 1, hi).tolist()
    assert r.vgprs[0, 3].tolist() == pack(lo - 1, hi - 1).tolist()
    assert r.vgprs[0, 4].tolist() == pack(lo, hi + 0x3F80).tolist()       # f32 1.0 = 0x3F800000
    zero, one = np.float16(0), np.float16(1)
    assert r.vgprs[0, 5].tolist() == pack(_f16_bits(flo + one), _f16_bits(fhi + zero)).tolist()
    assert r.vgprs[0, 6].tolist() == pack(_f16_bits(flo + one), _f16_bits(fhi + one)).tolist()
    assert r.vgprs[0, 7].tolist() == pack(_f16_bits(flo * np.float16(-2)),
                                          _f16_bits(fhi * zero)).tolist()


# ---------------------------------------------------------------- hidden_grid_dims

@pytest.mark.parametrize("grid", [7, (7,), (4, 2), (2, 3, 4)])
def test_hidden_grid_dims_is_three_for_every_hip_launch(grid):
    """HIP launches every kernel as a 3-dimensional NDRange (ROCm CLR builds the range with 3
    dimensions and writes its dimension count to hidden_grid_dims)."""
    assert abi.grid_dims_count(grid) == 3
    assert abi.hidden_arg_value("hidden_grid_dims", grid, 64, 0) == 3


# ---------------------------------------------------------------- v_cvt_pk_fp8_f32 overflow

E4M3FNUZ_MAX = 240.0


def _e4m3fnuz_bits(x: float, saturate: bool) -> int:
    """Round-to-nearest-even f32 -> e4m3fnuz (bias 8, no inf, NaN = 0x80) from the format's
    definition: enumerate every finite code and pick the nearest (ties to the even code)."""
    if np.isnan(x):
        return 0x80
    codes = []
    for code in range(0x80):
        e, m = code >> 3, code & 7
        value = (m / 8) * 2.0 ** -7 if e == 0 else (1 + m / 8) * 2.0 ** (e - 8)
        codes.append((value, code))
    sign = 0x80 if x < 0 else 0
    mag = abs(x)
    if mag > E4M3FNUZ_MAX:
        # beyond the largest finite value: round to nearest with the next step being 256
        if saturate:
            return sign | 0x7F
        if mag >= 248.0 or np.isinf(mag):   # halfway to 256 rounds away (0x7F is odd)
            return 0x80
        return sign | 0x7F
    best = min(codes, key=lambda vc: (abs(vc[0] - mag), vc[1] & 1))
    return 0 if best[1] == 0 else sign | best[1]


@pytest.mark.parametrize("clamp", [False, True])
def test_cvt_pk_fp8_f32_overflow(clamp):
    """Without clamp a finite value that rounds past 240 becomes NaN (0x80: fnuz has no inf);
    with clamp it saturates to +-240 (0x7F / 0xFF)."""
    values = np.array([0.0, 1.0, -3.5, 240.0, 244.0, 247.9, 248.0, 300.0, -1e6, 1e30, 0.001,
                       -240.0, 17.0, -250.0, 1e-7, 239.0], np.float32)
    a = np.resize(values, 64)
    b = np.resize(values[::-1], 64)
    body = f"  v_cvt_pk_fp8_f32 v2, v0, v1{' clamp' if clamp else ''}\n"
    r = run_asm(body, vgprs=_rows(a.view(np.uint32), b.view(np.uint32), np.zeros(64)))
    expected = [_e4m3fnuz_bits(float(x), clamp) | (_e4m3fnuz_bits(float(y), clamp) << 8)
                for x, y in zip(a, b)]
    assert (r.vgprs[0, 2] & 0xFFFF).tolist() == expected


# ---------------------------------------------------------------- census against the ISA XML

def test_census_reads_the_isa_xml_and_maps_llvm_names(tmp_path):
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "census", Path(__file__).resolve().parents[2] / "tools" / "triton_fixture_census.py")
    census = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(census)
    entries = [("V_ACCVGPR_READ", "ENC_VOP3P"), ("V_MAD_MIX_F32", "ENC_VOP3P"),
               ("S_NOP", "ENC_SOPP"), ("DS_APPEND", "ENC_DS")]
    xml = "<Spec><ISA><Instructions>" + "".join(
        f"<Instruction><InstructionName>{n}</InstructionName><InstructionEncodings>"
        f"<InstructionEncoding><EncodingName>{e}</EncodingName></InstructionEncoding>"
        f"</InstructionEncodings></Instruction>" for n, e in entries) + \
        "</Instructions></ISA></Spec>"
    path = tmp_path / "isa.xml"
    path.write_text(xml)
    opcodes = census.xml_opcodes(path)
    assert opcodes == {"v_accvgpr_read": "VOP3P", "v_mad_mix_f32": "VOP3P", "s_nop": "SOPP",
                       "ds_append": "DS"}
    usage = census.to_xml_names({"v_accvgpr_read_b32_e64": {"k": 1}, "v_fma_mix_f32": {"k": 2},
                                 "s_nop": {"k": 3}})
    rows, used, total, unknown = census.coverage(usage, opcodes)
    assert (used, total, unknown) == (3, 4, [])
    assert ("DS", 0, 1) in rows and ("VOP3P", 2, 2) in rows
    (tmp_path / "empty.xml").write_text("<Spec/>")
    with pytest.raises(ValueError, match="no <Instruction>"):
        census.xml_opcodes(tmp_path / "empty.xml")
