"""LLVM (llvmlite) initialisation, target machines, and linker discovery."""
from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess

import llvmlite
import llvmlite.binding as llvm

from .. import env
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


_LINKER_HINT = ("no ld.lld found. Install Debian's lld-19 (`apt-get install lld-19`, which "
                "scripts/setup.sh does), or ROCm, or put an ld.lld on PATH / in $ROCKE_LD_LLD")


def find_linker() -> str:
    """$ROCKE_LD_LLD if set (it must be an executable file), else ROCm's ld.lld, ld.lld on PATH,
    Debian's versioned lld."""
    return _find_linker(env.linker_override())


@functools.cache
def _find_linker(override: str | None) -> str:
    if override:
        return _checked_override(override)
    candidates = []
    for root in filter(None, [os.environ.get("ROCM_PATH"), "/opt/rocm"]):
        candidates.append(os.path.join(root, "llvm", "bin", "ld.lld"))
    candidates += sorted(glob.glob("/opt/rocm-*/llvm/bin/ld.lld"), reverse=True)
    on_path = shutil.which("ld.lld")
    if on_path:
        candidates.append(on_path)
    candidates += sorted(glob.glob("/usr/lib/llvm-*/bin/ld.lld"), reverse=True)
    candidates += sorted(filter(None, (shutil.which(f"ld.lld-{v}") for v in range(30, 14, -1))))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise ToolchainError(_LINKER_HINT)


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
