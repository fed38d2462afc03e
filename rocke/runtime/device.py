"""The Device interface, the one pre-launch path both devices share, and device selection.

A launch is prepared once on the host -- argument check, launch geometry, kernarg packing with
`rocke.arch.abi` -- into a `PreparedLaunch`; a device only executes prepared launches. So the
emulator and HIP receive byte-identical kernarg segments, and everything but the device call is
exercised here, on a CPU.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .. import env
from ..arch import abi

DEVICE_KINDS = ("emu", "hip")


@dataclass(frozen=True)
class PreparedLaunch:
    """One launch, ready for a device: the packed kernarg segment plus what produced it."""
    compiled: Any                      # rocke.compiler.CompiledKernel
    grid: tuple[int, int, int]         # workgroups
    block: tuple[int, int, int]        # work-items per workgroup
    shared_mem: int                    # dynamic LDS bytes
    args: tuple                        # explicit arguments, as checked
    kernarg: bytes                     # the whole kernarg segment (explicit + hidden)


def _pointer_of(value) -> int:
    return value.data_ptr()


def _dims(value, what: str) -> tuple[int, int, int]:
    # the common cases (an int, a full 3-tuple of ints) without abi's generality: this is per launch
    if type(value) is int and value > 0:
        return (value, 1, 1)
    if type(value) is tuple and len(value) == 3 and all(type(d) is int and d > 0 for d in value):
        return value
    items = (value,) if isinstance(value, (int, np.integer)) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, (tuple, list)) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in items):
        # abi.normalize_dims would int() strings and truncate floats; launches take integers only
        raise ValueError(f"{what} must be an int or a tuple of 1-3 ints, got {value!r}")
    return abi.normalize_dims(value, what)


def _checked_args(compiled, grid, block, args) -> list:
    """The single call site of the signature check (dtypes, value kinds, ranges).

    MERGE: helper host-rel adds `rocke/runtime/signature.py::check_launch_args(compiled, grid,
    block, args)`, which returns the converted arguments; until that module is in this branch the
    arguments pass through unchanged (kernarg packing below still rejects wrong kinds and sizes).
    """
    check = _signature_check()
    if check is not None:
        return list(check(compiled, grid, block, args))
    if not isinstance(args, (list, tuple)):
        raise ValueError(f"args must be a list or tuple of kernel arguments, "
                         f"got {type(args).__name__}")
    return list(args)


_UNRESOLVED = object()
_check_launch_args = _UNRESOLVED


def _signature_check():
    """host-rel's check_launch_args, imported on first use (so rocke.runtime and its
    signature module cannot import each other in a circle); None while it does not exist."""
    global _check_launch_args
    if _check_launch_args is _UNRESOLVED:
        try:
            from .signature import check_launch_args
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.signature":
                raise           # the module exists but something it needs does not
            check_launch_args = None
        _check_launch_args = check_launch_args
    return _check_launch_args


def prepare_launch(compiled, grid, block, args: Sequence[Any],
                   shared_mem: int = 0) -> PreparedLaunch:
    """Check a launch of `compiled` and pack its kernarg segment; raises ValueError before any
    work when something is wrong."""
    info = compiled.info
    grid3 = _dims(grid, "grid")
    block3 = _dims(block, "block")
    if not isinstance(shared_mem, int) or isinstance(shared_mem, bool) or shared_mem < 0:
        raise ValueError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
    threads = block3[0] * block3[1] * block3[2]
    if info.max_workgroup_size and threads > info.max_workgroup_size:
        raise ValueError(f"{compiled.variant}: block {block3} has {threads} work-items, beyond "
                         f"the kernel's maximum workgroup size {info.max_workgroup_size}")
    values = _checked_args(compiled, grid3, block3, args)
    kernarg = abi.pack_kernarg_segment(info.args, values, grid3, block3, shared_mem, _pointer_of,
                                       info.kernarg_size)
    return PreparedLaunch(compiled, grid3, block3, shared_mem, tuple(values), kernarg)


class Device:
    """Where prepared launches run. `kind` is "emu" or "hip"."""
    kind: str = ""
    arch: str = ""      # target id of the device, e.g. "gfx942:sramecc+:xnack-"

    def execute(self, launch: PreparedLaunch, *, stream=None, check: bool = True):
        """Run (or, inside a graph capture, record) one prepared launch."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait until every launch issued to this device has finished."""

    def is_capturing(self, stream=None) -> bool:
        """Whether launches on `stream` (default: the current one) are being captured."""
        raise NotImplementedError

    def timed(self, fn, stream=None):
        """Run `fn`, which launches on this device; a `timing.Timing` on the device's clock."""
        raise NotImplementedError

    def __repr__(self):
        return f"<rocke {self.kind} device {self.arch}>"


_lock = threading.Lock()
_devices: dict[str, Device] = {}
_default_kind: str | None = None


def get_device(device: Device | str | None = None) -> Device:
    """`device` itself, a device by kind ("emu" | "hip"), or the default device: ROCKE_DEVICE if
    set, else hip when hip-python finds a gfx942 GPU, else the emulator."""
    if isinstance(device, Device):
        return device
    if device is None:
        device = default_device_kind()
    if device not in DEVICE_KINDS:
        raise ValueError(f"unknown device {device!r}; rocke has {DEVICE_KINDS}")
    if device == "emu":
        key = "emu"
    else:
        from .hip_device import current_device_index
        key = f"hip:{current_device_index()}"     # the caller's current GPU (torch's, or HIP's)
    found = _devices.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _devices:
            if device == "emu":
                from .emu_device import EmuDevice
                _devices[key] = EmuDevice()
            else:
                from .hip_device import HipDevice
                _devices[key] = HipDevice(int(key.split(":")[1]))
        return _devices[key]


def default_device_kind() -> str:
    global _default_kind
    chosen = env.device()
    if chosen is not None:
        return chosen
    if _default_kind is None:
        from .hip_device import find_gfx942_device
        _default_kind = "hip" if find_gfx942_device() is not None else "emu"
    return _default_kind


def reset_devices() -> None:
    """Forget the devices and the default choice (tests that swap the HIP runtime use this)."""
    global _default_kind
    with _lock:
        _devices.clear()
        _default_kind = None
