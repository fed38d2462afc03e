"""Linked gfx942 code objects (`.co` / `.hsaco` ELF files, or clang offload bundles holding one)
turned into the assembly text the emulator's parser reads: the disassembly with branch labels,
one `.amdhsa_kernel` block per kernel rebuilt from its 64-byte kernel descriptor, and the
`.amdgpu_metadata` YAML of the metadata note.

Disassembly and the metadata note come from LLVM's tools (Debian package `llvm-19`:
`llvm-objdump-19`, `llvm-readelf-19`; rocke.llvm_tools says where they are looked for and skips
tools too old to know gfx942). A processor no llvm-objdump here knows (gfx950 needs LLVM 20) is
disassembled by a newer shared LLVM library and verified by re-assembly (rocke.llvm_disasm),
its listing printed as llvm-objdump would. The
ELF structure (symbols, descriptors) is read here. Kernel descriptor layout: LLVM AMDGPUUsage, "Kernel Descriptor".
Every instruction keeps its byte address (`.emu_address` lines), so s_getpc_b64 / s_setpc_b64 /
s_swappc_b64 arithmetic on real code addresses works.
"""
from __future__ import annotations

import os
import re
import struct
import subprocess
import tempfile
from pathlib import Path

from rocke import llvm_disasm, llvm_tools
# e_flags processor field (LLVM's EF_AMDGPU_MACH_AMDGCN_*): which ISA to disassemble the code as
from rocke.arch.elf import EF_AMDGPU_MACH, EM_AMDGPU, MACH_PROCESSOR as _MACH_PROCESSOR

_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_ELF_MAGIC = b"\x7fELF"


class CodeObjectError(ValueError):
    pass


def find_llvm_tool(name: str) -> str:
    """Path of an LLVM tool `name` (llvm-objdump, llvm-readelf) new enough for gfx942; where it is
    looked for and which versions are taken: rocke.llvm_tools."""
    try:
        return llvm_tools.find(name)
    except llvm_tools.LLVMToolError as err:
        raise CodeObjectError(str(err)) from None


def is_code_object(code) -> bool:
    """True for bytes / paths of a code object (as opposed to assembly text)."""
    if isinstance(code, (bytes, bytearray, memoryview)):
        return True
    if isinstance(code, os.PathLike):
        return True
    return (isinstance(code, str) and "\n" not in code and code.endswith((".co", ".hsaco", ".o"))
            and len(code) < 4096)


def read_code_object(code) -> bytes:
    """The bytes of a code object given as bytes or a path."""
    if isinstance(code, (bytes, bytearray, memoryview)):
        return bytes(code)
    path = Path(code)
    if not path.is_file():
        raise CodeObjectError(f"code object {str(path)!r} does not exist")
    return path.read_bytes()


def _unbundle(data: bytes, target: str = "gfx942") -> bytes:
    """The gfx942 ELF inside a clang offload bundle (uncompressed format)."""
    if data.startswith(b"CCOB"):
        raise CodeObjectError("compressed offload bundles are not supported; unbundle with "
                              "clang-offload-bundler first")
    count = struct.unpack_from("<Q", data, len(_BUNDLE_MAGIC))[0]
    pos = len(_BUNDLE_MAGIC) + 8
    triples = []
    for _ in range(count):
        offset, size, triple_size = struct.unpack_from("<QQQ", data, pos)
        pos += 24
        triple = data[pos:pos + triple_size].decode(errors="replace")
        pos += triple_size
        triples.append(triple)
        if target in triple and size:
            return data[offset:offset + size]
    raise CodeObjectError(f"offload bundle has no {target} entry (entries: {', '.join(triples)})")




class _Elf:
    """The few ELF64 facts needed: sections and the symbol table."""

    def __init__(self, data: bytes):
        if not data.startswith(_ELF_MAGIC) or data[4] != 2 or data[5] != 1:
            raise CodeObjectError("not a little-endian ELF64 code object")
        machine = struct.unpack_from("<H", data, 18)[0]
        if machine != EM_AMDGPU:
            raise CodeObjectError(f"ELF machine {machine} is not AMDGPU ({EM_AMDGPU})")
        self.data = data
        mach = struct.unpack_from("<I", data, 0x30)[0] & EF_AMDGPU_MACH
        if mach not in _MACH_PROCESSOR:
            raise CodeObjectError(f"ELF e_flags processor 0x{mach:03x} is not one the emulator runs "
                                  f"({', '.join(_MACH_PROCESSOR.values())})")
        self.processor = _MACH_PROCESSOR[mach]
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        self.sections = []
        for i in range(shnum):
            name, typ, flags, addr, offset, size, link, info, align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", data, shoff + i * shentsize)
            self.sections.append(dict(name=name, type=typ, addr=addr, offset=offset, size=size,
                                      link=link, entsize=entsize, flags=flags))
        names = self.sections[shstrndx]
        for s in self.sections:
            s["name"] = self._string(names, s["name"])
        self.symbols = {}
        for s in self.sections:
            if s["type"] not in (2, 11):   # SHT_SYMTAB, SHT_DYNSYM
                continue
            strtab = self.sections[s["link"]]
            for k in range(s["size"] // 24):
                name, info, other, shndx, value, size = struct.unpack_from(
                    "<IBBHQQ", data, s["offset"] + 24 * k)
                if name:
                    self.symbols.setdefault(self._string(strtab, name), (value, size, shndx))

    def _string(self, section, offset):
        start = section["offset"] + offset
        return self.data[start:self.data.index(b"\0", start)].decode()

    def read_symbol(self, name: str, size: int | None = None) -> bytes:
        """A symbol's bytes in a relocatable object (its value is an offset into its section)."""
        value, own_size, shndx = self.symbols[name]
        start = self.sections[shndx]["offset"] + value
        return self.data[start:start + (own_size if size is None else size)]

    def read(self, address: int, size: int) -> bytes:
        for s in self.sections:
            if s["addr"] <= address < s["addr"] + s["size"] and s["type"] != 8:   # not NOBITS
                start = s["offset"] + address - s["addr"]
                return self.data[start:start + size]
        raise CodeObjectError(f"address {address:#x} is in no section of the code object")


def _bits(value: int, low: int, width: int) -> int:
    return (value >> low) & ((1 << width) - 1)


def kernel_descriptor_fields(raw: bytes) -> dict[str, int]:
    """The `.amdhsa_*` directive values of a 64-byte gfx90a/gfx942 kernel descriptor."""
    if len(raw) != 64:
        raise CodeObjectError(f"kernel descriptor must be 64 bytes, got {len(raw)}")
    group, private, kernarg = struct.unpack_from("<III", raw, 0)
    entry_offset, = struct.unpack_from("<q", raw, 16)
    rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
    properties, preload = struct.unpack_from("<HH", raw, 56)
    return {
        "amdhsa_group_segment_fixed_size": group,
        "amdhsa_private_segment_fixed_size": private,
        "amdhsa_kernarg_size": kernarg,
        "kernel_code_entry_byte_offset": entry_offset,
        "amdhsa_next_free_vgpr": (_bits(rsrc1, 0, 6) + 1) * 8,   # unified VGPR+AGPR granules of 8
        "amdhsa_next_free_sgpr": (_bits(rsrc1, 6, 4) + 1) * 8,
        "amdhsa_float_round_mode_32": _bits(rsrc1, 12, 2),
        "amdhsa_float_round_mode_16_64": _bits(rsrc1, 14, 2),
        "amdhsa_float_denorm_mode_32": _bits(rsrc1, 16, 2),
        "amdhsa_float_denorm_mode_16_64": _bits(rsrc1, 18, 2),
        "amdhsa_dx10_clamp": _bits(rsrc1, 21, 1),
        "amdhsa_ieee_mode": _bits(rsrc1, 23, 1),
        "amdhsa_fp16_overflow": _bits(rsrc1, 26, 1),
        "amdhsa_enable_private_segment": _bits(rsrc2, 0, 1),
        "amdhsa_user_sgpr_count": _bits(rsrc2, 1, 5),
        "amdhsa_system_sgpr_workgroup_id_x": _bits(rsrc2, 7, 1),
        "amdhsa_system_sgpr_workgroup_id_y": _bits(rsrc2, 8, 1),
        "amdhsa_system_sgpr_workgroup_id_z": _bits(rsrc2, 9, 1),
        "amdhsa_system_sgpr_workgroup_info": _bits(rsrc2, 10, 1),
        "amdhsa_system_vgpr_workitem_id": _bits(rsrc2, 11, 2),
        "amdhsa_accum_offset": (_bits(rsrc3, 0, 6) + 1) * 4,
        "amdhsa_tg_split": _bits(rsrc3, 16, 1),
        "amdhsa_user_sgpr_private_segment_buffer": _bits(properties, 0, 1),
        "amdhsa_user_sgpr_dispatch_ptr": _bits(properties, 1, 1),
        "amdhsa_user_sgpr_queue_ptr": _bits(properties, 2, 1),
        "amdhsa_user_sgpr_kernarg_segment_ptr": _bits(properties, 3, 1),
        "amdhsa_user_sgpr_dispatch_id": _bits(properties, 4, 1),
        "amdhsa_user_sgpr_flat_scratch_init": _bits(properties, 5, 1),
        "amdhsa_user_sgpr_private_segment_size": _bits(properties, 6, 1),
        "amdhsa_wavefront_size32": _bits(properties, 10, 1),
        "amdhsa_uses_dynamic_stack": _bits(properties, 11, 1),
        "amdhsa_user_sgpr_kernarg_preload_length": _bits(preload, 0, 7),
        "amdhsa_user_sgpr_kernarg_preload_offset": _bits(preload, 7, 9),
    }


_INSTRUCTION = re.compile(r"^\s+([a-z][a-z0-9_]*)(.*?)\s*//\s*([0-9A-Fa-f]+):")
_FUNCTION = re.compile(r"^([0-9a-fA-F]+) <([^>]+)>:")
_BRANCHES = ("s_branch", "s_cbranch_")


def _run(tool: str, *args: str) -> str:
    try:
        result = subprocess.run([tool, *args], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise CodeObjectError(f"{Path(tool).name} failed: {err}") from None
    if result.returncode:
        raise CodeObjectError(f"{Path(tool).name} failed: {result.stderr.strip()[:500]}")
    return result.stdout


NT_AMDGPU_METADATA = 32   # LLVM AMDGPUUsage, "Code Object V3 and Above Note Records"


def _msgpack(data: bytes, pos: int = 0):
    """(value, next position) of the MessagePack item at `pos` (the formats the AMDGPU metadata
    map uses: maps, arrays, strings, integers, booleans, nil, floats, binaries)."""
    b = data[pos]
    pos += 1
    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if 0x80 <= b <= 0x8F or b in (0xDE, 0xDF):
        count, pos = (b & 0x0F, pos) if b <= 0x8F else _length(data, pos, 2 if b == 0xDE else 4)
        out = {}
        for _ in range(count):
            key, pos = _msgpack(data, pos)
            out[key], pos = _msgpack(data, pos)
        return out, pos
    if 0x90 <= b <= 0x9F or b in (0xDC, 0xDD):
        count, pos = (b & 0x0F, pos) if b <= 0x9F else _length(data, pos, 2 if b == 0xDC else 4)
        out = []
        for _ in range(count):
            item, pos = _msgpack(data, pos)
            out.append(item)
        return out, pos
    if 0xA0 <= b <= 0xBF or b in (0xD9, 0xDA, 0xDB):
        size, pos = (b & 0x1F, pos) if b <= 0xBF else _length(data, pos, {0xD9: 1, 0xDA: 2,
                                                                           0xDB: 4}[b])
        return data[pos:pos + size].decode(), pos + size
    if b in (0xC4, 0xC5, 0xC6):
        size, pos = _length(data, pos, {0xC4: 1, 0xC5: 2, 0xC6: 4}[b])
        return bytes(data[pos:pos + size]), pos + size
    fixed = {0xC0: None, 0xC2: False, 0xC3: True}
    if b in fixed:
        return fixed[b], pos
    scalar = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
              0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}.get(b)
    if scalar is None:
        raise CodeObjectError(f"metadata note: MessagePack type 0x{b:02x} is not one the AMDGPU "
                              "metadata uses")
    value, = struct.unpack_from(scalar, data, pos)
    return value, pos + struct.calcsize(scalar)


def _length(data: bytes, pos: int, width: int):
    return int.from_bytes(data[pos:pos + width], "big"), pos + width


def _metadata_note(elf: "_Elf") -> dict:
    """The AMDGPU metadata map of a code object's note (NT_AMDGPU_METADATA, owner "AMDGPU"), read
    here rather than by llvm-readelf, so machines without LLVM's tools load code objects."""
    data = elf.data
    for section in elf.sections:
        if section["type"] != 7:          # SHT_NOTE
            continue
        pos, stop = section["offset"], section["offset"] + section["size"]
        while pos + 12 <= stop:
            namesz, descsz, kind = struct.unpack_from("<III", data, pos)
            name = data[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            desc = pos + 12 + (namesz + 3) // 4 * 4
            if name == b"AMDGPU" and kind == NT_AMDGPU_METADATA:
                try:
                    value, _ = _msgpack(data[desc:desc + descsz])
                except (IndexError, struct.error, UnicodeDecodeError) as err:
                    raise CodeObjectError(f"malformed metadata note: {err}") from None
                if not isinstance(value, dict):
                    raise CodeObjectError("malformed metadata note: not a map")
                return value
            pos = desc + (descsz + 3) // 4 * 4
    raise CodeObjectError("the code object has no AMDGPU metadata note")


def code_object_metadata(code) -> dict:
    """The metadata note (`amdhsa.kernels`, ...) of a code object given as bytes or a path."""
    data = read_code_object(code)
    if data.startswith(_BUNDLE_MAGIC) or data.startswith(b"CCOB"):
        data = _unbundle(data)
    return _metadata_note(_Elf(data))


def code_object_assembly(code, verified: bool = False) -> str:
    """Assembly text (the dialect `rocke.emu.asm.parse_program` reads) of a code object given
    as bytes or a path. `verified`: disassemble through rocke.llvm_disasm even where an
    llvm-objdump knows the processor (to cross-check the two)."""
    data = read_code_object(code)
    if data.startswith(_BUNDLE_MAGIC) or data.startswith(b"CCOB"):
        data = _unbundle(data)
    elf = _Elf(data)
    objdump = None if verified else _objdump(elf.processor)
    metadata = _metadata_note(elf)
    library = None
    if objdump is None:
        try:
            library = llvm_disasm.find_library(elf.processor)
        except llvm_disasm.NoLibraryError as err:
            raise CodeObjectError(f"{cannot_disassemble(elf.processor)} [{err}]") from None
    with tempfile.TemporaryDirectory(prefix="rocke-co-") as tmp:
        path = Path(tmp) / "kernel.co"
        path.write_bytes(data)
        if objdump:
            listing = _run(objdump, "-d", f"--mcpu={elf.processor}", "--no-show-raw-insn",
                           str(path))
        else:
            listing = verified_listing(data, library)
    import yaml
    metadata_text = yaml.dump(metadata, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                              explicit_start=True, explicit_end=True, sort_keys=False)

    # instructions with byte addresses; function symbols as labels
    entries: list[tuple[int, str, str]] = []
    labels: dict[int, list[str]] = {}
    for line in listing.splitlines():
        m = _FUNCTION.match(line)
        if m:
            labels.setdefault(int(m.group(1), 16), []).append(m.group(2))
            continue
        m = _INSTRUCTION.match(line)
        if m:
            entries.append((int(m.group(3), 16), m.group(1), m.group(2).strip()))
    if not entries:
        raise CodeObjectError("the code object's .text disassembled to no instructions")
    addresses = [a for a, _, _ in entries]
    next_address = {a: b for a, b in zip(addresses, addresses[1:] + [addresses[-1] + 4])}
    for address, mnemonic, operands in entries:
        if mnemonic.startswith(_BRANCHES) and re.fullmatch(r"-?\d+", operands):
            offset = int(operands)
            offset = offset - 0x10000 if offset >= 0x8000 else offset
            target = next_address[address] + 4 * offset
            labels.setdefault(target, []).append(f".Lcode_{target:x}")

    kernels = []
    for entry in metadata.get("amdhsa.kernels", []) or []:
        symbol = entry.get(".symbol") or f"{entry.get('.name')}.kd"
        if symbol not in elf.symbols:
            raise CodeObjectError(f"kernel descriptor symbol {symbol!r} is not in the code object")
        value, _, _ = elf.symbols[symbol]
        fields = kernel_descriptor_fields(elf.read(value, 64))
        code_address = value + fields.pop("kernel_code_entry_byte_offset")
        name = entry.get(".name")
        if code_address not in {a for a in addresses}:
            raise CodeObjectError(f"kernel {name!r}: code entry {code_address:#x} is not an instruction")
        labels.setdefault(code_address, [])
        if name not in labels[code_address]:
            labels[code_address].insert(0, name)
        kernels.append((name, code_address, fields))

    preload_marks = {code + 256 for _, code, f in kernels
                     if f["amdhsa_user_sgpr_kernarg_preload_length"]}
    lines = ["  .text"]
    for address, mnemonic, operands in entries:
        if address in preload_marks:
            lines.append("  .p2align 8")
        for label in labels.get(address, []):
            if not label.startswith(".Lcode_"):
                lines.append(f"  .type {label},@function")
            lines.append(f"{label}:")
        if mnemonic.startswith(_BRANCHES) and re.fullmatch(r"-?\d+", operands):
            offset = int(operands)
            offset = offset - 0x10000 if offset >= 0x8000 else offset
            operands = f".Lcode_{next_address[address] + 4 * offset:x}"
        lines.append(f"  .emu_address {address:#x}")
        lines.append(f"  {mnemonic} {operands}".rstrip())
    for name, _, fields in kernels:
        lines.append(f".amdhsa_kernel {name}")
        lines += [f"  .{key} {value}" for key, value in fields.items()]
        lines.append(".end_amdhsa_kernel")
    lines += ["  .amdgpu_metadata", metadata_text, "  .end_amdgpu_metadata", ""]
    return "\n".join(lines)


# register counts the descriptor stores in allocation granules (plus reserved SGPRs): the
# listing's exact counts and the descriptor's rounded ones legitimately differ
_GRANULATED = ("amdhsa_next_free_vgpr", "amdhsa_next_free_sgpr")


def _kernel_body(program, kernel: str) -> list[tuple]:
    """The kernel's instructions from its entry on, as (mnemonic, operands, modifiers), a branch's
    label replaced by its target's distance from the entry; the trailing s_nop padding dropped."""
    entry = program.kernels[kernel].entry
    body = []
    for instr in program.instrs[entry:]:
        operands = list(instr.operands)
        if instr.mnemonic.startswith(_BRANCHES) and operands and operands[0] in program.labels:
            operands[0] = program.labels[operands[0]] - entry
        body.append((instr.mnemonic, tuple(operands), tuple(instr.modifiers)))
    while body and body[-1][0] == "s_nop":
        body.pop()
    return body


def listing_matches(listing: str, code, kernel: str) -> bool:
    """Whether assembly text `listing` is the code object `code`'s kernel `kernel`, instruction
    for instruction, with the same kernel arguments and descriptor fields: a listing may then
    stand for the code object (it keeps its `.loc` source lines). Any doubt is False."""
    try:
        truth = code_object_assembly(code)
    except Exception:
        return False
    return listings_agree(listing, truth, kernel)


def listings_agree(listing: str, other: str, kernel: str) -> bool:
    """Whether two assembly texts hold the same kernel `kernel`: instruction for instruction, with
    the same kernel arguments and (ungranulated) descriptor fields; `.loc` lines aside. Any
    doubt is False."""
    from .asm import parse_program, parsed_program
    try:      # the listing is read again by the launch that runs it: the parse is kept
        mine, truth = parsed_program(listing), parse_program(other)
        a, b = mine.kernels[kernel], truth.kernels[kernel]
    except Exception:
        return False
    if a.metadata.get(".args") != b.metadata.get(".args"):
        return False
    if any(a.descriptor[key] != value for key, value in b.descriptor.items()
           if key in a.descriptor and key not in _GRANULATED):
        return False
    return _kernel_body(mine, kernel) == _kernel_body(truth, kernel)


def _objdump(processor: str) -> str | None:
    """Path of an llvm-objdump whose LLVM knows `processor` (rocke.llvm_tools' search), or None."""
    from rocke.arch import get_target
    target = get_target(processor)
    try:
        return llvm_tools.find("llvm-objdump", target.min_llvm_major, target.name)
    except llvm_tools.LLVMToolError:
        return None


def _shared_llvm(processor: str) -> str | None:
    """Path of a shared LLVM library that knows `processor` (rocke.llvm_disasm), or None."""
    try:
        return llvm_disasm.find_library(processor)
    except llvm_disasm.NoLibraryError:
        return None


def disassembler(processor: str) -> str | None:
    """What disassembles a `processor` code object here, or None: an llvm-objdump that knows it
    (Debian bookworm's newest, LLVM 19, predates gfx950), else a shared LLVM library of a new
    enough release whose listing is verified by re-assembly (rocke.llvm_disasm)."""
    return _objdump(processor) or _shared_llvm(processor)


def verified_listing(code, library: str | None = None) -> str:
    """The code object's executable sections as llvm-objdump -d prints them (symbols as
    `<name>:` lines, one instruction a line with its address and words), decoded by the shared
    LLVM `library` (found for the code's processor when None) and verified by re-assembly
    (rocke.llvm_disasm); CodeObjectError naming the offset and words of anything that does not
    round-trip."""
    data = read_code_object(code)
    if data.startswith(_BUNDLE_MAGIC) or data.startswith(b"CCOB"):
        data = _unbundle(data)
    elf = _Elf(data)
    lines = []
    for index, s in enumerate(elf.sections):
        if s["type"] != 1 or not s["flags"] & 4:          # PROGBITS, SHF_EXECINSTR
            continue
        names: dict[int, list[str]] = {}
        for name, (value, _, shndx) in elf.symbols.items():
            if shndx == index:
                names.setdefault(value, []).append(name)
        code = elf.data[s["offset"]:s["offset"] + s["size"]]
        try:
            rows = llvm_disasm.disassemble_verified(code, s["addr"], elf.processor, library)
        except (llvm_disasm.DisassemblyError, llvm_disasm.NoLibraryError) as err:
            raise CodeObjectError(str(err)) from None
        for address, text, words in rows:
            lines += [f"{address:016x} <{name}>:" for name in sorted(names.get(address, []))]
            lines.append(f"\t{text} // {address:012X}: {words}")
    return "\n".join(lines) + "\n"


def cannot_disassemble(processor: str) -> str:
    """The one-line refusal for a code object nothing here can disassemble."""
    from rocke.arch import get_target
    major = get_target(processor).min_llvm_major
    return (f"cannot disassemble a {processor} code object: no llvm-objdump of LLVM {major} or "
            f"newer was found (Debian's llvm-19, rocke's gfx942 tools, predates gfx950), nor a "
            f"shared LLVM library of LLVM {major} or newer with the AMDGPU target (ROCKE_LIBLLVM; Debian's libllvm22 "
            f"serves); put one on PATH, or run the kernel's assembly listing (rocke.emu.launch "
            f"takes it; rocke.runtime runs a rocke-compiled kernel from its listing once a rebuild "
            f"of its IR proves the listing is the code object's kernel)")


def kernel_image(code, kernel: str) -> tuple[bytes, bytes, bytes]:
    """What a loader takes of `kernel` from a code object: its machine code (the function
    symbol's bytes), its 64-byte descriptor with the code-entry offset zeroed (that offset follows
    the link layout), and the metadata note section's bytes."""
    data = read_code_object(code)
    if data.startswith(_BUNDLE_MAGIC) or data.startswith(b"CCOB"):
        data = _unbundle(data)
    elf = _Elf(data)
    if kernel not in elf.symbols or f"{kernel}.kd" not in elf.symbols:
        raise CodeObjectError(f"kernel {kernel!r} (or its descriptor) is not in the code object")
    value, size, _ = elf.symbols[kernel]
    kd_value, _, _ = elf.symbols[f"{kernel}.kd"]
    if struct.unpack_from("<H", data, 16)[0] == 1:   # ET_REL, the unlinked object: by section
        code, descriptor = elf.read_symbol(kernel), bytearray(elf.read_symbol(f"{kernel}.kd", 64))
        descriptor[16:24] = bytes(8)
        notes = b"".join(data[s["offset"]:s["offset"] + s["size"]] for s in elf.sections
                         if s["type"] == 7 and s["flags"] & 2)
        return code, bytes(descriptor), notes
    descriptor = bytearray(elf.read(kd_value, 64))
    descriptor[16:24] = bytes(8)
    notes = b"".join(data[s["offset"]:s["offset"] + s["size"]] for s in elf.sections
                     if s["type"] == 7 and s["flags"] & 2)      # SHT_NOTE, SHF_ALLOC
    return elf.read(value, size), bytes(descriptor), notes
