"""The verified disassembler (rocke.llvm_disasm): gfx950 machine code decoded by a shared LLVM
library of a new enough release and accepted only when LLVM assembles the listing back to the
same bytes. Expected texts are written here; gfx950-only words are built here from the CDNA4
ISA guide's field layouts and opcode numbers (rocke.emu.cdna4's census table cites them)."""
import struct

import pytest
import torch

from rocke import llvm_disasm
from rocke.emu import codeobject
from tests.doubling_kernel import doubling_kernel

S_NOP_0, S_ENDPGM = 0xBF800000, 0xBF810000    # SOPP: 0b101111111, op 0 / op 1, simm16 0


def _library():
    return llvm_disasm.load(llvm_disasm.find_library("gfx950"))


def _text_section(data):
    """(file offset, address, size) of .text in an ELF64 file (section headers, names)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count, names = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * entsize) for i in range(count)]
    base = headers[names][4]
    for name, _, _, address, offset, size in headers:
        if data[base + name:data.index(b"\0", base + name)] == b".text":
            return offset, address, size
    raise AssertionError("no .text")


def _words(*words):
    return struct.pack(f"<{len(words)}I", *words)


def _vop1(op, vdst, src0):
    """VOP1: [31:25] 0111111, VDST [24:17], OP [16:9], SRC0 [8:0] (a VGPR is 256 + n)."""
    return 0x3F << 25 | vdst << 17 | op << 9 | src0


def _ds(op, offset, vdst, addr):
    """DS, two words: [31:26] 110110, OP [24:17], GDS [16], OFFSET1 [15:8], OFFSET0 [7:0];
    VDST [63:56], DATA1 [55:48], DATA0 [47:40], ADDR [39:32]."""
    return 0x36 << 26 | op << 17 | offset, vdst << 24 | addr


def test_gfx950_only_words_built_from_the_guide_decode_and_verify():
    words = [_vop1(89, 3, 256 + 4), *_ds(227, 64, 0, 2), S_NOP_0, S_ENDPGM]
    rows = llvm_disasm.disassemble_verified(_words(*words), 0x1000, "gfx950")
    assert [(a, t) for a, t, _ in rows] == [
        (0x1000, "v_permlane16_swap_b32_e32 v3, v4"),          # VOP1 opcode 89
        (0x1004, "ds_read_b64_tr_b16 v[0:1], v2 offset:64"),   # DS opcode 227
        (0x100C, "s_nop 0"), (0x1010, "s_endpgm")]
    assert rows[1][2] == f"{words[1]:08X} {words[2]:08X}"


def test_text_written_here_assembles_and_decodes_back_for_gfx950_only():
    lines = ["v_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], v[0:15]",
             "v_permlane32_swap_b32_e32 v1, v2",
             "v_cvt_pk_bf16_f32 v1, v2, v3",
             "global_load_lds_dwordx4 v[2:3], off",
             "s_endpgm"]
    lib = _library()
    code = llvm_disasm.assemble(lib, lines, "gfx950")
    end = 8 + 4 + 8 + 8 + 4
    rows = llvm_disasm.disassemble_verified(code[:end], 0, "gfx950")
    assert [t for _, t, _ in rows] == lines
    with pytest.raises(llvm_disasm.DisassemblyError, match="instruction not supported on this GPU"):
        llvm_disasm.assemble(lib, lines[:1], "gfx942")          # gfx950-only indeed


def test_a_word_llvm_does_not_decode_is_refused_naming_its_offset():
    with pytest.raises(llvm_disasm.DisassemblyError,
                       match=r"offset 0x104: LLVM does not decode words FFFFFFFF"):
        llvm_disasm.disassemble_verified(_words(S_NOP_0, 0xFFFFFFFF, S_ENDPGM), 0x100, "gfx950")


def test_a_word_whose_text_assembles_to_other_bytes_is_refused():
    """s_waitcnt's bit 7 is no counter: LLVM decodes the word as the plain wait-for-all, whose
    text assembles without that bit, so the listing would not be the code."""
    code = _words(S_NOP_0, 0xBF8C0080, S_ENDPGM)
    with pytest.raises(llvm_disasm.DisassemblyError,
                       match=r"offset 0x204: words BF8C0080 decode to 's_waitcnt vmcnt\(0\) "
                             r"expcnt\(0\) lgkmcnt\(0\)', which LLVM assembles to BF8C0000"):
        llvm_disasm.disassemble_verified(code, 0x200, "gfx950")
    with pytest.raises(llvm_disasm.DisassemblyError, match="not a whole number of 4-byte words"):
        llvm_disasm.disassemble_verified(code[:6], 0, "gfx950")


def test_rocke_libllvm_naming_nothing_useful_is_an_error_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("ROCKE_LIBLLVM", str(tmp_path / "libLLVM.so.22"))
    with pytest.raises(llvm_disasm.NoLibraryError, match=r"libLLVM\.so\.22 \(cannot be loaded"):
        llvm_disasm.find_library("gfx950")
    old = "/usr/lib/llvm-19/lib/libLLVM-19.so"
    monkeypatch.setenv("ROCKE_LIBLLVM", old)
    with pytest.raises(llvm_disasm.NoLibraryError,
                       match=r"LLVM 20 or newer .*libLLVM-19\.so \(LLVM 19\)"):
        llvm_disasm.find_library("gfx950")


def test_setup_asks_for_debians_library_only_when_none_serves(monkeypatch, tmp_path):
    assert llvm_disasm.missing_packages() == []
    monkeypatch.setenv("ROCKE_LIBLLVM", str(tmp_path / "libLLVM.so.22"))
    assert llvm_disasm.missing_packages() == ["libllvm22"]


def _doubler(target, factor=2.0):
    from rocke.compiler import compile_ir
    suffix = "" if factor == 2.0 else f"_x{factor:g}"
    return compile_ir(doubling_kernel(f"double_{target}{suffix}", target, factor), target=target)


def test_gfx942_code_objects_still_go_through_llvm_objdump_and_agree():
    """gfx942 keeps llvm-objdump (LLVM 19 knows it); the verified path reads the same kernel."""
    assert codeobject.disassembler("gfx942").rsplit("/", 1)[-1].startswith("llvm-objdump")
    ck = _doubler("gfx942")
    objdump_text = codeobject.code_object_assembly(ck.code_object)
    verified = codeobject.verified_listing(ck.code_object, llvm_disasm.find_library("gfx950"))
    assert "v_add_f32_e32 v1, v1, v1" in verified and "<double_gfx942>:" in verified
    assert codeobject.listings_agree(ck.asm, objdump_text, ck.name)
    via_library = codeobject.code_object_assembly(ck.code_object, verified=True)
    assert codeobject.listings_agree(via_library, objdump_text, ck.name)
    # and the comparison can fail: another kernel's listing does not agree
    other = codeobject.code_object_assembly(_doubler("gfx942", 3.0).code_object, verified=True)
    assert not codeobject.listings_agree(other.replace("double_gfx942_x3", "double_gfx942"),
                                         objdump_text, ck.name)


def test_a_gfx950_code_object_runs_from_the_verified_listing_and_a_corrupt_one_does_not():
    from rocke import emu
    ck = _doubler("gfx950")
    x = torch.arange(64, dtype=torch.float32)
    emu.launch(ck.code_object, ck.name, 1, 64, [x, 64], target="gfx950")
    assert torch.equal(x, 2 * torch.arange(64, dtype=torch.float32))
    # the first s_waitcnt gets bit 7 set: the code object no longer verifies, nothing runs
    data = bytearray(ck.code_object)
    offset, address, size = _text_section(data)
    at = next(p for p in range(offset, offset + size, 4)
              if struct.unpack_from("<I", data, p)[0] >> 16 == 0xBF8C)
    struct.pack_into("<I", data, at, struct.unpack_from("<I", data, at)[0] | 0x80)
    address += at - offset
    y = torch.full((64,), 3.0)
    with pytest.raises(codeobject.CodeObjectError, match=f"offset {address:#x}: words BF8C"):
        emu.launch(bytes(data), ck.name, 1, 64, [y, 64], target="gfx950")
    assert torch.equal(y, torch.full((64,), 3.0))
