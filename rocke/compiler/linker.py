"""Linking a relocatable AMDGPU object into a code object: ld.lld (the default) or comgr
(ROCKE_LINKER=comgr; rocke.compiler.comgr). The compile pipeline and the comgr route both use it,
so neither imports the other."""
from __future__ import annotations

import os
import tempfile

from .. import env
from . import comgr, toolchain
from .elf import ET_DYN, InvalidCodeObject, validate_code_object
from .toolchain import ToolchainError, find_linker

LINKERS = ("ld.lld", "comgr")


def link_code_object(obj: bytes, name: str) -> bytes:
    """Link a relocatable AMDGPU object into a shared-object code object (hipModuleLoadData input)."""
    ld = find_linker()
    with tempfile.TemporaryDirectory(prefix="rocke-ld-") as tmp:
        src, dst = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.hsaco")
        with open(src, "wb") as f:
            f.write(obj)
        proc = toolchain.run_tool([ld, "-shared", "--no-undefined", "-o", dst, src],
                                  timeout=toolchain.LINK_TIMEOUT_S, what=f"linking {name}")
        if proc.returncode != 0:
            raise ToolchainError(f"{ld} failed linking {name} (exit {proc.returncode}): "
                                 f"{proc.stderr.strip()}")
        try:
            with open(dst, "rb") as f:
                code_object = f.read()
        except OSError:
            raise ToolchainError(f"{ld} exited 0 linking {name} but wrote no output") from None
    try:
        validate_code_object(code_object, name, e_type=ET_DYN)
    except InvalidCodeObject as e:
        raise ToolchainError(f"{ld} exited 0 linking {name} but its output is not a valid "
                             f"code object: {e}") from None
    return code_object


def link(obj: bytes, name: str, target: str, linker: str | None = None) -> tuple[bytes, str]:
    """(code object, the linker that built it): `linker`, else ROCKE_LINKER, else ld.lld."""
    linker = linker or env.linker()
    if linker not in LINKERS:
        raise ValueError(f"unknown linker {linker!r}; rocke has {LINKERS}")
    if linker == "comgr":
        return comgr.link_with_comgr(obj, name, target), "comgr"
    return link_code_object(obj, name), "ld.lld"
