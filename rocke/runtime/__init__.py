"""Launching compiled kernels. The emulator is the default device; it needs no GPU.

`launch(compiled, grid, block, args)` runs a `rocke.compiler.CompiledKernel` on the gfx942
emulator (`rocke.emu`), which packs kernel arguments with `rocke.arch.abi` — the same packing a
HIP launch uses.
"""
from __future__ import annotations

from typing import Any, Sequence

DEVICES = ("emu",)


def _dims(name: str, v) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, int) else tuple(v)
    if not 1 <= len(t) <= 3 or not all(isinstance(x, int) for x in t):
        raise ValueError(f"{name} must be an int or 1-3 ints, got {v!r}")
    return t + (1,) * (3 - len(t))


def launch(compiled, grid, block, args: Sequence[Any], *, shared_mem: int = 0,
           device: str = "emu", check: bool = True):
    """Run `compiled` over `grid` workgroups of `block` work-items; returns the device's report."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; rocke has {DEVICES}")
    # launch arguments vs the kernel's declared signature (rocke/runtime/signature.py)
    from .signature import check_launch_args
    args = check_launch_args(compiled, grid, block, args, device=device)
    from .. import emu
    return emu.launch(compiled.asm, compiled.name, _dims("grid", grid), _dims("block", block),
                      list(args), shared_mem=shared_mem, check=check)
