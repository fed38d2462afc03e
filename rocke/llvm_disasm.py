"""A verified disassembler for AMDGPU machine code through a shared LLVM library's C API, for
processors the llvm-objdump here predates (gfx950 needs LLVM 20; Debian bookworm's newest is 19).

LLVM's own AMDGPU disassembler (llvm-c/Disassembler.h, `LLVMDisasmInstruction`) decodes each
instruction for the processor; then the whole listing is assembled again by the same LLVM (its
AMDGPU assembler parsing module-level inline asm, emitted as an object) and its .text compared
with the original bytes. A listing is handed out only when every byte round-trips, so the text is
known to mean exactly the code: a word LLVM cannot decode, or text that assembles to other bytes,
stops with an error naming the offset and the words.

Which library: `ROCKE_LIBLLVM` when set; otherwise the first `libLLVM` of a new enough release
among Debian's (package libllvm<N>, /usr/lib/<triple>/ and /usr/lib/llvm-<N>/lib), ROCm's
llvm/lib and rustup's toolchains (rustc ships libLLVM built with the AMDGPU target), newest
first. `python -m rocke.llvm_disasm --missing-packages` prints the Debian package still needed
(scripts/setup.sh installs it). A leaf (stdlib, ctypes, rocke.arch,
rocke.env): the emulator's code-object reader uses it.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import re
import struct

from rocke import env
from rocke.arch import get_target

TRIPLE = b"amdgcn-amd-amdhsa"
#: the Debian package (bookworm-security carries LLVM 22) scripts/setup.sh installs when no
#: library is found: the library alone, so no newer llvm-objdump displaces LLVM 19's for gfx942
DEBIAN_PACKAGE = "libllvm22"
LIBRARY_PATTERNS = ("/usr/lib/*-linux-gnu/libLLVM*.so*", "/usr/lib/llvm-*/lib/libLLVM*.so*",
                    "$ROCM_PATH/llvm/lib/libLLVM*.so*",
                    "/opt/rocm/llvm/lib/libLLVM*.so*", "/opt/rocm-*/llvm/lib/libLLVM*.so*",
                    "$RUSTUP_HOME/toolchains/*/lib/libLLVM*.so*")
# libLLVM-19.so, libLLVM.so.19.1, libLLVM.so.22.1-rust-1.95.0-stable, libLLVM-22-rust-....so
_RELEASE = re.compile(r"libLLVM(?:\.so\.|-)(\d+)")
_S_NOP_0 = 0xBF800000          # the assembler pads .text with s_nop 0 after the last instruction
_NEEDED = ("LLVMGetVersion", "LLVMCreateDisasmCPUFeatures", "LLVMDisasmInstruction",
           "LLVMInitializeAMDGPUDisassembler", "LLVMInitializeAMDGPUAsmParser",
           "LLVMTargetMachineEmitToMemoryBuffer")


class DisassemblyError(ValueError):
    """Code that cannot be disassembled and verified; the message names the offset and words."""


class NoLibraryError(RuntimeError):
    """No shared LLVM library here can disassemble the processor; the message says what was
    skipped and why."""


def _release(path: str) -> int | None:
    """The LLVM release a library's name (or its /usr/lib/llvm-<N> directory) says."""
    m = _RELEASE.search(os.path.basename(path)) or re.search(r"/llvm-(\d+)/", path)
    return int(m.group(1)) if m else None


def candidates() -> list[str]:
    """Shared LLVM libraries to try, best first (a set ROCKE_LIBLLVM alone)."""
    chosen = env.raw("ROCKE_LIBLLVM")
    if chosen:
        return [chosen]
    roots = {"$ROCM_PATH": os.environ.get("ROCM_PATH"),
             "$RUSTUP_HOME": os.environ.get("RUSTUP_HOME") or os.path.expanduser("~/.rustup")}
    found = []
    for pattern in LIBRARY_PATTERNS:
        var = pattern.split("/", 1)[0]
        if var in roots:
            if not roots[var]:
                continue
            pattern = roots[var] + pattern[len(var):]
        found += glob.glob(pattern)
    out, seen = [], set()
    for path in sorted(found, key=lambda p: -(_release(p) or 0)):
        real = os.path.realpath(path)
        if real not in seen and os.path.isfile(path):
            seen.add(real)
            out.append(path)
    return out


@functools.cache
def _load(path: str):
    """(library, (major, minor)) or a one-line reason it cannot serve."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as err:
        return None, f"cannot be loaded ({err})"
    missing = [name for name in _NEEDED if not hasattr(lib, name)]
    if missing:
        return None, f"lacks {', '.join(missing)} (no AMDGPU target or C API)"
    major, minor, patch = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    lib.LLVMGetVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    for part in ("TargetInfo", "TargetMC", "Target", "AsmPrinter", "AsmParser", "Disassembler"):
        getattr(lib, f"LLVMInitializeAMDGPU{part}")()
    _declare(lib)
    return lib, (major.value, minor.value)


def find_library(processor: str) -> str:
    """Path of a shared LLVM library new enough for `processor`, or NoLibraryError."""
    need = get_target(processor).min_llvm_major
    skipped = []
    for path in candidates():
        release = _release(path)
        if release is not None and release < need:
            skipped.append(f"{path} (LLVM {release})")
            continue
        lib, why = _load(path)
        if lib is None:
            skipped.append(f"{path} ({why})")
        elif why[0] < need:
            skipped.append(f"{path} (LLVM {why[0]}.{why[1]})")
        else:
            return path
    where = ", ".join(skipped) if skipped else "none found"
    raise NoLibraryError(f"no shared LLVM library of LLVM {need} or newer with the AMDGPU "
                         f"target for {processor} ({where}); set ROCKE_LIBLLVM to one")


def load(path: str):
    """The ctypes handle of the shared LLVM library at `path` (AMDGPU initialised), or
    NoLibraryError saying why it cannot serve."""
    lib, version = _load(path)
    if lib is None:
        raise NoLibraryError(f"{path} {version}")
    return lib


_P = ctypes.c_void_p


def _declare(lib) -> None:
    sig = {
        "LLVMCreateDisasmCPUFeatures": (_P, [ctypes.c_char_p] * 3 + [_P, ctypes.c_int, _P, _P]),
        "LLVMDisasmDispose": (None, [_P]),
        "LLVMDisasmInstruction": (ctypes.c_size_t, [_P, _P, ctypes.c_uint64, ctypes.c_uint64,
                                                    ctypes.c_char_p, ctypes.c_size_t]),
        "LLVMContextCreate": (_P, []),
        "LLVMContextDispose": (None, [_P]),
        "LLVMContextSetDiagnosticHandler": (None, [_P, _P, _P]),
        "LLVMGetDiagInfoDescription": (_P, [_P]),
        "LLVMGetDiagInfoSeverity": (ctypes.c_int, [_P]),
        "LLVMDisposeMessage": (None, [_P]),
        "LLVMCreateMemoryBufferWithMemoryRangeCopy": (_P, [ctypes.c_char_p, ctypes.c_size_t,
                                                           ctypes.c_char_p]),
        "LLVMParseIRInContext": (ctypes.c_int, [_P, _P, ctypes.POINTER(_P), ctypes.POINTER(_P)]),
        "LLVMGetTargetFromTriple": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P),
                                                   ctypes.POINTER(_P)]),
        "LLVMCreateTargetMachine": (_P, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                         ctypes.c_int, ctypes.c_int, ctypes.c_int]),
        "LLVMDisposeTargetMachine": (None, [_P]),
        "LLVMTargetMachineEmitToMemoryBuffer": (ctypes.c_int, [_P, _P, ctypes.c_int,
                                                               ctypes.POINTER(_P),
                                                               ctypes.POINTER(_P)]),
        "LLVMGetBufferStart": (_P, [_P]),
        "LLVMGetBufferSize": (ctypes.c_size_t, [_P]),
        "LLVMDisposeMemoryBuffer": (None, [_P]),
        "LLVMDisposeModule": (None, [_P]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes


_DIAG_HANDLER = ctypes.CFUNCTYPE(None, _P, _P)


def _message(lib, ptr) -> str:
    if not ptr:
        return ""
    text = ctypes.string_at(ptr).decode(errors="replace")
    lib.LLVMDisposeMessage(ptr)
    return text


def decode(lib, code: bytes, address: int, processor: str) -> list[tuple[int, int, str]]:
    """(offset, size, text) for each instruction of `code` as LLVM decodes it for `processor`
    (branch offsets as numbers, like llvm-objdump without symbols); a word LLVM does not decode
    is a DisassemblyError naming its offset."""
    dc = lib.LLVMCreateDisasmCPUFeatures(TRIPLE, processor.encode(), b"", None, 0, None, None)
    if not dc:
        raise NoLibraryError(f"LLVM cannot create a disassembler for {processor}")
    try:
        src = ctypes.create_string_buffer(code, len(code))
        out = ctypes.create_string_buffer(1024)
        pos, rows = 0, []
        while pos < len(code):
            size = lib.LLVMDisasmInstruction(dc, ctypes.byref(src, pos), len(code) - pos,
                                             address + pos, out, len(out))
            if size == 0:
                raise DisassemblyError(f"{processor} code at offset {address + pos:#x}: LLVM "
                                       f"does not decode words {_words(code[pos:pos + 8])}")
            rows.append((pos, size, out.value.decode().strip()))
            pos += size
        return rows
    finally:
        lib.LLVMDisasmDispose(dc)


def assemble(lib, lines: list[str], processor: str) -> bytes:
    """The .text bytes LLVM's AMDGPU assembler makes of `lines` for `processor` (one module of
    module-level inline asm emitted as an object). DisassemblyError quoting LLVM's diagnostics,
    each with the line it is about."""
    body = "".join('module asm "%s"\n' % line.replace("\\", "\\5C").replace('"', "\\22")
                   for line in [".text", *lines])
    ir = f'target triple = "{TRIPLE.decode()}"\n{body}'.encode()
    errors: list[str] = []

    @_DIAG_HANDLER
    def on_diagnostic(info, _):
        if lib.LLVMGetDiagInfoSeverity(info) == 0:      # LLVMDSError
            errors.append(_message(lib, lib.LLVMGetDiagInfoDescription(info)))

    ctx = lib.LLVMContextCreate()
    lib.LLVMContextSetDiagnosticHandler(ctx, ctypes.cast(on_diagnostic, _P), None)
    tm = None
    try:
        buffer = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(ir, len(ir), b"listing")
        module, err = _P(), _P()
        if lib.LLVMParseIRInContext(ctx, buffer, ctypes.byref(module), ctypes.byref(err)):
            raise DisassemblyError(f"cannot build the re-assembly module: {_message(lib, err)}")
        target = _P()
        if lib.LLVMGetTargetFromTriple(TRIPLE, ctypes.byref(target), ctypes.byref(err)):
            raise NoLibraryError(f"LLVM has no AMDGPU target: {_message(lib, err)}")
        tm = lib.LLVMCreateTargetMachine(target, TRIPLE, processor.encode(), b"", 0, 1, 0)
        out = _P()
        failed = lib.LLVMTargetMachineEmitToMemoryBuffer(tm, module, 1, ctypes.byref(err),
                                                         ctypes.byref(out))
        message = _message(lib, err) if failed else ""
        lib.LLVMDisposeModule(module)
        if failed or errors:
            raise DisassemblyError(f"LLVM does not re-assemble the {processor} listing: "
                                   + "; ".join(errors + [message]).strip("; ")[:2000])
        obj = ctypes.string_at(lib.LLVMGetBufferStart(out), lib.LLVMGetBufferSize(out))
        lib.LLVMDisposeMemoryBuffer(out)
    finally:
        if tm:
            lib.LLVMDisposeTargetMachine(tm)
        lib.LLVMContextDispose(ctx)
    return text_section(obj)


def text_section(obj: bytes) -> bytes:
    """The .text section of a relocatable ELF64 object."""
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    for name, _, _, _, offset, size in headers:
        start = names_at + name
        if obj[start:obj.index(b"\0", start)] == b".text":
            return obj[offset:offset + size]
    raise DisassemblyError("the re-assembled object has no .text section")


def _words(raw: bytes) -> str:
    raw = raw + bytes(-len(raw) % 4)
    return " ".join(f"{w:08X}" for w in struct.unpack(f"<{len(raw) // 4}I", raw))


def disassemble_verified(code: bytes, address: int, processor: str,
                         library: str | None = None) -> list[tuple[int, str, str]]:
    """(address, text, words) for each instruction of the machine code `code` that starts at
    `address`, decoded by LLVM for `processor` and accepted only because LLVM assembles the
    whole listing back to exactly `code`. DisassemblyError names the first instruction that
    does not round-trip (its offset, its words, its text and what the text assembles to)."""
    if len(code) % 4:
        raise DisassemblyError(f"{processor} code at {address:#x}: {len(code)} bytes is not a "
                               f"whole number of 4-byte words")
    lib = load(library or find_library(processor))
    rows = decode(lib, code, address, processor)
    again = assemble(lib, [text for _, _, text in rows], processor)
    tail = again[len(code):]
    if again[:len(code)] != code or any(
            w != _S_NOP_0 for w in struct.unpack(f"<{len(tail) // 4}I", tail[:len(tail) & ~3])):
        first = next((i for i in range(min(len(code), len(again))) if code[i] != again[i]),
                     min(len(code), len(again)))
        for pos, size, text in rows:
            if pos <= first < pos + size or pos >= first:
                raise DisassemblyError(
                    f"{processor} code at offset {address + pos:#x}: words "
                    f"{_words(code[pos:pos + size])} decode to {text!r}, which LLVM assembles to "
                    f"{_words(again[pos:pos + size]) or 'nothing'}; not verified")
        raise DisassemblyError(f"{processor} code at {address:#x}: the re-assembled listing "
                               f"has {len(tail)} extra bytes that are not s_nop padding")
    return [(address + pos, text, _words(code[pos:pos + size])) for pos, size, text in rows]


def missing_packages() -> list[str]:
    """The Debian package that would supply a library for gfx950, when none is found."""
    try:
        find_library("gfx950")
        return []
    except NoLibraryError:
        return [DEBIAN_PACKAGE]


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--missing-packages"]:
        print(" ".join(missing_packages()))
    else:
        try:
            path = find_library("gfx950")
            print(f"gfx950: {path} (LLVM {'.'.join(map(str, _load(path)[1]))})")
        except NoLibraryError as err:
            print(f"gfx950: {err}")
