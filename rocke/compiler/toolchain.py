"""LLVM (llvmlite) initialisation, target machines, and linker discovery."""
from __future__ import annotations

import functools
import os
import subprocess

import llvmlite
import llvmlite.binding as llvm

from .. import env, llvm_tools
from ..arch import get_target

TRIPLE = "amdgcn-amd-amdhsa"
# wall-time limits of the linker subprocesses: a hung linker is an error, never a hang
LINK_TIMEOUT_S = 120.0
VERSION_TIMEOUT_S = 10.0


class ToolchainError(RuntimeError):
    """A toolchain piece is missing or broken; the message says what to install."""


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def llvm_version() -> str:
    return ".".join(map(str, llvm.llvm_version_info))


def toolchain_fingerprint() -> str:
    return f"llvmlite-{llvmlite.__version__}/llvm-{llvm_version()}"


def split_target_id(target_id: str) -> tuple[str, str]:
    """'gfx942:sramecc+:xnack-' -> ('gfx942', '+sramecc,-xnack'); defaults come from rocke.arch."""
    t = get_target(target_id)
    full = target_id if ":" in target_id else t.target_id
    cpu, *feats = full.split(":")
    features = []
    for f in feats:
        if not f or f[-1] not in "+-":
            raise ValueError(f"bad target feature {f!r} in target id {target_id!r} (want e.g. 'xnack-')")
        features.append(f[-1] + f[:-1])
    return cpu, ",".join(features)


@functools.cache
def target_machine(target_id: str, opt: int = 3):
    _init_llvm()
    cpu, features = split_target_id(target_id)
    try:
        target = llvm.Target.from_triple(TRIPLE)
    except RuntimeError as e:
        raise ToolchainError(f"this llvmlite ({llvmlite.__version__}, LLVM {llvm_version()}) has no "
                             f"AMDGPU target ({e}); install llvmlite>=0.50 (`pip install -U "
                             "'llvmlite>=0.50'`, which scripts/setup.sh does)") from None
    return target.create_target_machine(
        cpu=cpu, features=features, opt=opt, reloc="pic", codemodel="default")


def find_linker() -> str:
    """$ROCKE_LD_LLD if set (it must be an executable file; taken as given), else the first
    discovered ld.lld new enough for gfx942 (rocke.llvm_tools: versioned names, Debian's
    /usr/lib/llvm-<N>, ROCm, plain ld.lld on PATH; older ones skipped)."""
    return _find_linker(env.linker_override())


@functools.cache
def _find_linker(override: str | None) -> str:
    if override:
        return _checked_override(override)
    try:
        return llvm_tools.find("ld.lld")
    except llvm_tools.LLVMToolError as err:
        raise ToolchainError(f"{err}, or ROCm, or name an ld.lld in $ROCKE_LD_LLD") from None


find_linker.cache_clear = _find_linker.cache_clear


def _checked_override(path: str) -> str:
    """The linker named by ROCKE_LD_LLD: a misconfiguration is an error, never silently ignored."""
    where = f"ROCKE_LD_LLD={path!r}"
    if not os.path.exists(path):
        raise ToolchainError(f"{where} does not exist; point it at an ld.lld or unset it")
    if os.path.isdir(path):
        raise ToolchainError(f"{where} is a directory; point it at the ld.lld file inside")
    if not os.access(path, os.X_OK):
        raise ToolchainError(f"{where} is not executable (chmod +x it or point it at an ld.lld)")
    return path


def run_tool(argv: list[str], *, timeout: float, what: str) -> subprocess.CompletedProcess:
    """A toolchain subprocess with a wall-time limit; failing to start or overrunning the limit
    is a ToolchainError naming the tool."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{argv[0]} did not finish {what} within {timeout:g} s; "
                             "it was stopped") from None
    except OSError as e:
        raise ToolchainError(f"cannot run {argv[0]} ({what}): {e.strerror or e}") from None


def linker_fingerprint() -> str:
    """Identity and version of the linker in use, for the compile cache key: a different or
    replaced linker never serves another's code objects."""
    ld = find_linker()
    try:
        st = os.stat(ld)
    except OSError as e:
        raise ToolchainError(f"cannot stat linker {ld}: {e.strerror}") from None
    real = os.path.realpath(ld)
    return f"{real}|{st.st_size}|{st.st_mtime_ns}|{_linker_version(real, st.st_size, st.st_mtime_ns)}"


@functools.cache
def _linker_version(path: str, size: int, mtime_ns: int) -> str:
    proc = run_tool([path, "--version"], timeout=VERSION_TIMEOUT_S, what="reporting its version")
    first = (proc.stdout or proc.stderr).strip().splitlines()
    return f"{first[0] if first else 'no version'} (exit {proc.returncode})"


@functools.lru_cache(maxsize=4)
def source_fingerprint(exclude: tuple[str, ...] = ("emu",)) -> str:
    """sha256 of rocke's Python sources (less the subpackages ``exclude`` names) and this LLVM
    toolchain, read once per process: what a bundle entry no golden table pins (``rocke aot
    build --reachable``) is served by spec against -- the code that built it."""
    import hashlib
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]           # the rocke package
    h = hashlib.sha256(toolchain_fingerprint().encode())
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in exclude:
            continue
        h.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
