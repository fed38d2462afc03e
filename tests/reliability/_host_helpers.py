"""Helpers of the host-side reliability tests: byte-level snapshots that prove launch arguments
untouched, and fake linkers (shell scripts) for the compiler, cache and CLI tests."""
from __future__ import annotations

import copy
import os
import stat
from pathlib import Path

from rocke.compiler import toolchain


def snapshot(values):
    """A deep, byte-level picture of launch arguments (tensor bytes, dtype, shape, strides)."""
    out = []
    for v in values:
        if hasattr(v, "untyped_storage"):
            out.append(("tensor", v.dtype, tuple(v.shape), v.stride(), v.storage_offset(),
                        bytes(v.untyped_storage().cpu())))
        elif hasattr(v, "tobytes"):          # numpy arrays and scalars
            out.append(("numpy", type(v), getattr(v, "dtype", None), v.tobytes()))
        else:
            out.append(("value", type(v), copy.deepcopy(v)))
    return out

# the shell snippet that finds the value of "-o" in "$@"
_OUT = 'out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'


def script(directory: Path, name: str, body: str) -> str:
    path = directory / name
    path.write_text("#!/bin/sh\n" + _OUT + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def real_linker() -> str:
    toolchain.find_linker.cache_clear()
    saved = os.environ.pop("ROCKE_LD_LLD", None)
    try:
        return toolchain.find_linker()
    finally:
        if saved is not None:
            os.environ["ROCKE_LD_LLD"] = saved


def junk_linker(d: Path) -> str:
    return script(d, "junk-ld", 'printf junk > "$out"; exit 0\n')


def silent_linker(d: Path) -> str:
    return script(d, "silent-ld", "exit 0\n")


def failing_linker(d: Path) -> str:
    return script(d, "failing-ld", 'echo "ld.lld: error: pretend failure" >&2; exit 1\n')


def sleeping_linker(d: Path) -> str:
    return script(d, "sleeping-ld", "exec sleep 30\n")


def wrapper_linker(d: Path, real: str, name: str = "wrapped-ld") -> str:
    return script(d, name, f'exec "{real}" "$@"\n')


def copying_linker(d: Path, blob: Path) -> str:
    """Exits 0 having written a valid code object of some other kernel."""
    return script(d, "copying-ld", f'cp "{blob}" "$out"; exit 0\n')
