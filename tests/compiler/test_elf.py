"""The code-object shape check the cache relies on: each mutation of a real code object is
refused with the reason, and a real one passes."""
import struct

import pytest

from rocke.compiler import CompileCache, compile_ir
from rocke.compiler.elf import ET_REL, SHT_NOTE, InvalidCodeObject, _sections, validate_code_object

from .test_compiler import SAXPY_IR


@pytest.fixture(scope="module")
def ck(tmp_path_factory):
    return compile_ir(SAXPY_IR, name="saxpy", cache=CompileCache(tmp_path_factory.mktemp("c")))


def test_real_code_object_and_object_pass(ck):
    validate_code_object(ck.code_object, "saxpy")
    validate_code_object(ck.object, "saxpy", e_type=ET_REL)


def _patched(data: bytes, offset: int, fmt: str, *values) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


def _note_offset(data: bytes) -> int:
    return next(off for sh_type, off, *_ in _sections(data) if sh_type == SHT_NOTE)


@pytest.mark.parametrize("mutate,words", [
    (lambda d: b"", "not an ELF file (0 bytes"),
    (lambda d: b"\x7fELF" + bytes(12), "not an ELF file (16 bytes"),
    (lambda d: _patched(d, 4, "<B", 1), "not a 64-bit little-endian ELF"),
    (lambda d: _patched(d, 5, "<B", 2), "not a 64-bit little-endian ELF"),
    (lambda d: _patched(d, 18, "<H", 62), "ELF machine 62, not EM_AMDGPU (224)"),
    (lambda d: _patched(d, 16, "<H", 2), "ELF type 2, want 3"),
    (lambda d: _patched(d, 0x28, "<Q", 2 ** 40), "section header 0 at byte 1099511627776 lies outside"),
    (lambda d: _patched(d, 0x3A, "<H", 40), "section header size 40, want 64"),
    (lambda d: d[:len(d) // 2], "lies outside"),
    (lambda d: _patched(d, _note_offset(d) + 8, "<I", 1), "no AMDGPU metadata note"),
    (lambda d: d.replace(b"saxpy.kd", b"saxpy.kx"), "no 64-byte kernel descriptor saxpy.kd"),
    (lambda d: d.replace(b"saxpy", b"other"), "no symbol for kernel 'saxpy'"),
])
def test_mutated_code_object_is_refused(ck, mutate, words):
    with pytest.raises(InvalidCodeObject) as e:
        validate_code_object(mutate(ck.code_object), "saxpy")
    assert words in str(e.value)


def test_not_bytes_is_refused():
    with pytest.raises(InvalidCodeObject, match="code object must be bytes, got str"):
        validate_code_object("\x7fELF", "saxpy")
