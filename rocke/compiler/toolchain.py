"""LLVM (llvmlite) initialisation, target machines, and linker discovery."""
from __future__ import annotations

import functools
import glob
import os
import shutil

import llvmlite
import llvmlite.binding as llvm

from .. import env
from ..arch import get_target

TRIPLE = "amdgcn-amd-amdhsa"


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


@functools.cache
def find_linker() -> str:
    """ROCm's ld.lld first, then $ROCKE_LD_LLD, ld.lld on PATH, Debian's versioned lld."""
    candidates = []
    if env.linker_override():
        candidates.append(env.linker_override())
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
