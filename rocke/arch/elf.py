"""Which processor an AMDGPU code object is built for, from its ELF header alone.

LLVM AMDGPUUsage, "ELF Header": ``e_machine`` is EM_AMDGPU (224); ``e_flags`` bits 7:0 are the
processor (EF_AMDGPU_MACH_AMDGCN_*); from code object v4 (EI_ABIVERSION >= 2) bits 9:8 are the
xnack setting and bits 11:10 the sramecc setting (0 unsupported, 1 any, 2 off, 3 on); v3
(EI_ABIVERSION 1) had one bit each, xnack 0x100 and sramecc 0x200, set meaning on.
"""
from __future__ import annotations

import struct

EM_AMDGPU = 224
EF_AMDGPU_MACH = 0x0FF
# the processors rocke builds for, by their e_flags value
MACH_PROCESSOR = {0x04C: "gfx942", 0x04F: "gfx950"}
_ABI_V3 = 1
_SETTING_V4 = {0: None, 1: None, 2: "-", 3: "+"}     # unsupported / any: no feature in the id


def code_object_target(data: bytes) -> str:
    """The target id a code object's ELF header names, e.g. 'gfx950:sramecc+:xnack-' (a feature
    left out when the code runs either way). ValueError, naming what is wrong, for anything that
    is not an AMDGPU ELF64 code object of a processor rocke knows."""
    data = bytes(data[:64])
    if len(data) < 64 or not data.startswith(b"\x7fELF") or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 code object")
    machine, = struct.unpack_from("<H", data, 18)
    if machine != EM_AMDGPU:
        raise ValueError(f"ELF e_machine {machine} is not AMDGPU ({EM_AMDGPU})")
    flags, = struct.unpack_from("<I", data, 48)
    mach = flags & EF_AMDGPU_MACH
    processor = MACH_PROCESSOR.get(mach)
    if processor is None:
        raise ValueError(f"ELF e_flags processor 0x{mach:03x} is not one rocke builds for "
                         f"({', '.join(f'{p} 0x{m:03x}' for m, p in MACH_PROCESSOR.items())})")
    if data[8] == _ABI_V3:
        sramecc = "+" if flags & 0x200 else None
        xnack = "+" if flags & 0x100 else None
    else:
        xnack = _SETTING_V4[(flags >> 8) & 3]
        sramecc = _SETTING_V4[(flags >> 10) & 3]
    features = [f"{name}{value}" for name, value in (("sramecc", sramecc), ("xnack", xnack))
                if value is not None]
    return ":".join([processor, *features])
