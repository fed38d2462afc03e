"""Linking code objects through AMD's Code Object Manager (comgr) instead of ld.lld.

ld.lld stays the default and is what works here. comgr is the route the ROCm runtime itself
uses; it is taken when ROCKE_LINKER=comgr (or `rocke.compiler.linker.link(..., linker="comgr")`) and needs both
hip-python's comgr bindings and ROCm's libamd_comgr.so. The bindings come in two generations with
the same Action / Data / DataSet classes: `rocm.amd_comgr` (rocm-llvm-python, the companion of
hip-python 7.x, which dlopens "libamd_comgr.so" through the loader's search path) and
`rocm.comgr` (rocm-bindings-compiler, hip-python[compiler] >= 10, which looks in $ROCM_PATH/lib).

The link is one comgr action, LINK_RELOCATABLE_TO_EXECUTABLE, on the relocatable object LLVM
emitted, for the ISA `amdgcn-amd-amdhsa--<target id>`.
"""
from __future__ import annotations

from .toolchain import ToolchainError

_BINDINGS_HINT = ("install hip-python's comgr bindings: rocm-llvm-python (with hip-python 7.x) "
                  "or rocm-bindings-compiler (hip-python[compiler] >= 10)")
_LIBRARY_HINT = "install ROCm, whose libamd_comgr.so the bindings load"


def isa_name(target_id: str) -> str:
    """comgr's ISA name for a target id: 'gfx942:sramecc+:xnack-' ->
    'amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-'."""
    return f"amdgcn-amd-amdhsa--{target_id}"


def _bindings():
    """The comgr binding module with Action, Data, DataSet and get_isa_names."""
    try:
        from rocm import comgr                              # rocm-bindings-compiler >= 10
        return comgr
    except ImportError:
        pass
    try:
        from rocm.amd_comgr import amd_comgr_pyext          # rocm-llvm-python 7.x
        return amd_comgr_pyext
    except ImportError as e:
        raise ToolchainError(f"comgr linking needs hip-python's comgr bindings ({e}); "
                             + _BINDINGS_HINT) from None


def availability() -> tuple[bool, str]:
    """(True, "") when comgr can link here, else (False, why not)."""
    try:
        comgr = _bindings()
        names = comgr.get_isa_names()        # the first call that needs libamd_comgr.so
    except ToolchainError as e:
        return False, str(e)
    except Exception as e:   # the bindings raise RuntimeError/OSError when the library is missing
        return False, f"ROCm's comgr library could not be used ({type(e).__name__}: {e}); " \
                      + _LIBRARY_HINT
    wanted = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if not any(n.startswith("amdgcn-amd-amdhsa--gfx942") for n in wanted):
        return False, "this comgr does not know gfx942"
    return True, ""


def link_with_comgr(obj: bytes, name: str, target: str) -> bytes:
    """Link relocatable `obj` (kernel `name`) into a code object with comgr."""
    comgr = _bindings()
    action = comgr.Action("LINK_RELOCATABLE_TO_EXECUTABLE", isa_name=isa_name(target),
                          logging=True)
    inputs = comgr.DataSet(comgr.Data(f"{name}.o", "RELOCATABLE", obj))
    status = action.do_action(inputs, check=False)
    results = action.result_data_set
    if getattr(status, "value", status) != 0 or not results.count_data("EXECUTABLE"):  # 0: SUCCESS
        log = ""
        if results.count_data("LOG"):
            log = results.get_data("LOG", 0).get_data_bytes().decode(errors="replace").strip()
        raise ToolchainError(f"comgr failed linking {name} for {target}: {status}"
                             + (f"\n{log}" if log else ""))
    return results.get_data("EXECUTABLE", 0).get_data_bytes()
