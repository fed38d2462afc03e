"""Shape check of an AMDGPU code object (ELF64): what the cache stores and serves must be one.

Checked: ELF magic, 64-bit little-endian, ``e_machine == EM_AMDGPU``, the expected ``e_type``
(shared object for a linked code object), section headers inside the file, a symbol table with
the kernel's function symbol and its 64-byte kernel descriptor ``<name>.kd``, and an ``AMDGPU``
note of type ``NT_AMDGPU_METADATA`` (LLVM AMDGPUUsage, "Code Object Metadata"). Every read is
bounds-checked; any mismatch is an ``InvalidCodeObject`` saying what is wrong.
"""
from __future__ import annotations

import struct

EM_AMDGPU = 224
ET_REL, ET_DYN = 1, 3
SHT_SYMTAB, SHT_NOTE, SHT_DYNSYM = 2, 7, 11
NT_AMDGPU_METADATA = 32
KERNEL_DESCRIPTOR_BYTES = 64


class InvalidCodeObject(ValueError):
    """Bytes that are not a well-formed AMDGPU code object for the expected kernel."""


def _unpack(fmt: str, data: bytes, offset: int, what: str):
    size = struct.calcsize(fmt)
    if offset < 0 or offset + size > len(data):
        raise InvalidCodeObject(f"{what} at byte {offset} lies outside the {len(data)}-byte file")
    return struct.unpack_from(fmt, data, offset)


def _sections(data: bytes) -> list[tuple[int, int, int, int, int]]:
    """(type, offset, size, link, entsize) per section header."""
    shoff, = _unpack("<Q", data, 0x28, "section header offset")
    shentsize, shnum = _unpack("<HH", data, 0x3A, "section header counts")
    if shnum and shentsize != 64:
        raise InvalidCodeObject(f"section header size {shentsize}, want 64")
    out = []
    for i in range(shnum):
        _, sh_type, _, _, off, size, link, _, _, entsize = _unpack(
            "<IIQQQQIIQQ", data, shoff + i * 64, f"section header {i}")
        if sh_type not in (0, 8) and off + size > len(data):      # NULL and NOBITS hold no bytes
            raise InvalidCodeObject(f"section {i} ({off}+{size} bytes) runs past the end of the file")
        out.append((sh_type, off, size, link, entsize))
    return out


def _cstring(data: bytes, offset: int, limit: int) -> bytes:
    end = data.find(b"\0", offset, limit)
    if offset >= limit or end < 0:
        raise InvalidCodeObject(f"symbol name at byte {offset} is not a terminated string")
    return data[offset:end]


def _symbols(data: bytes, sections) -> dict[bytes, tuple[int, int]]:
    """name -> (symbol type, size) over every SYMTAB/DYNSYM section."""
    out = {}
    for sh_type, off, size, link, entsize in sections:
        if sh_type not in (SHT_SYMTAB, SHT_DYNSYM):
            continue
        if entsize != 24 or link >= len(sections):
            raise InvalidCodeObject("malformed symbol table header")
        _, str_off, str_size, _, _ = sections[link]
        for pos in range(off, off + size - size % 24, 24):
            st_name, st_info, _, _, _, st_size = _unpack("<IBBHQQ", data, pos, "symbol")
            if st_name:
                out[_cstring(data, str_off + st_name, str_off + str_size)] = (st_info & 0xF, st_size)
    return out


def _has_metadata_note(data: bytes, sections) -> bool:
    for sh_type, off, size, _, _ in sections:
        if sh_type != SHT_NOTE:
            continue
        pos, end = off, off + size
        while pos + 12 <= end:
            namesz, descsz, n_type = _unpack("<III", data, pos, "note header")
            name = data[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            if name == b"AMDGPU" and n_type == NT_AMDGPU_METADATA and descsz > 0:
                return True
            pos += 12 + -(-namesz // 4) * 4 + -(-descsz // 4) * 4
    return False


def validate_code_object(data: bytes, kernel: str, *, e_type: int = ET_DYN) -> None:
    """Raise InvalidCodeObject unless `data` is an AMDGPU ELF defining `kernel` and `kernel.kd`
    with a metadata note."""
    if not isinstance(data, (bytes, bytearray)):
        raise InvalidCodeObject(f"code object must be bytes, got {type(data).__name__}")
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise InvalidCodeObject(f"not an ELF file ({len(data)} bytes, starts {bytes(data[:4])!r})")
    if data[4] != 2 or data[5] != 1:
        raise InvalidCodeObject("not a 64-bit little-endian ELF")
    got_type, machine = _unpack("<HH", data, 16, "ELF header")
    if machine != EM_AMDGPU:
        raise InvalidCodeObject(f"ELF machine {machine}, not EM_AMDGPU ({EM_AMDGPU})")
    if got_type != e_type:
        raise InvalidCodeObject(f"ELF type {got_type}, want {e_type}")
    sections = _sections(bytes(data))
    symbols = _symbols(bytes(data), sections)
    name = kernel.encode()
    if name not in symbols:
        raise InvalidCodeObject(f"no symbol for kernel {kernel!r}")
    kd = symbols.get(name + b".kd")
    if kd is None or kd[1] != KERNEL_DESCRIPTOR_BYTES:
        raise InvalidCodeObject(f"no {KERNEL_DESCRIPTOR_BYTES}-byte kernel descriptor {kernel}.kd")
    if not _has_metadata_note(bytes(data), sections):
        raise InvalidCodeObject("no AMDGPU metadata note (NT_AMDGPU_METADATA)")
