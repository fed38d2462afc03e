"""Launching compiled kernels on a device: rocke's emulator ("emu") or a gfx942 / gfx950 GPU
through hip-python ("hip").

`launch(compiled, grid, block, args)` checks the launch, packs the kernarg segment with
`rocke.arch.abi` (one path for both devices, see device.py) and runs it on `device` -- by default
ROCKE_DEVICE, else hip when hip-python finds a gfx942 / gfx950 GPU, else the emulator. `Graph` captures
launches and replays them (graph.py).
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import env

from .device import (DEVICE_KINDS, Device, DeviceBackend, PreparedLaunch, default_device_kind,
                     device_generation, get_device, known_devices, prepare_launch, register_backend,
                     reset_devices)
from .device_checks import DeviceCheckError
from . import emu_device, hip_device
from .graph import Graph, GraphError, is_capturing
from .profiling import profiling
from .timing import EMULATOR_CLOCK, GPU_CLOCK, Timing, timed

DEVICES = DEVICE_KINDS


def _emu_key() -> str:
    emu_target = env.emu_target()     # ROCKE_DEVICE=emu:gfx950 -> the emulator as gfx950
    return "emu" if emu_target == "gfx942" else f"emu:{emu_target}"


register_backend("emu", DeviceBackend(
    current_key=_emu_key,
    make=lambda key: emu_device.EmuDevice(key.partition(":")[2] or "gfx942")))
register_backend("hip", DeviceBackend(
    current_key=lambda: f"hip:{hip_device.current_device_index()}",   # the caller's current GPU
    make=lambda key: hip_device.HipDevice(int(key.partition(":")[2])),
    preferred=lambda: hip_device.find_supported_device() is not None))


def launch(compiled, grid, block, args: Sequence[Any], *, shared_mem: int = 0,
           device: Device | str | None = None, stream=None, check: bool = True,
           allow_alias: bool = False, memcheck: str = "view", profile: bool = False):
    """Run `compiled` over `grid` workgroups of `block` work-items with explicit `args`.

    Returns the emulator's LaunchReport on "emu" (None while a Graph is capturing), None on
    "hip" (the launch is asynchronous on `stream`). `check` turns on the emulator's LDS race
    checker (with its check for reads of never-written LDS); HIP ignores it.
    `allow_alias=True` lets an output share memory with another argument
    (kernels written for in-place use); otherwise the emulator refuses overlapping arguments.
    `profile=True` (emulator only) returns the report with exact counters in `.profile`
    (rocke.emu.profile.LaunchProfile); the default launch does not collect them.
    `memcheck` is the emulator's addressable range per tensor argument: "view" (default) or
    "allocation" (its whole storage, for kernels that index outside their view); HIP ignores it.
    Every error is raised before the device is touched.
    """
    if not isinstance(allow_alias, bool):
        raise ValueError(f"allow_alias must be a bool, got {allow_alias!r}")
    if not isinstance(profile, bool):
        raise ValueError(f"profile must be a bool, got {profile!r}")
    target = get_device(device)
    if profile and target.kind != "emu":
        raise ValueError(f"profile=True needs the emulator device (counters come from emulation), "
                         f"got device {target.kind!r}")
    prepared = prepare_launch(compiled, grid, block, args, shared_mem, device_kind=target.kind,
                              allow_alias=allow_alias, memcheck=memcheck)
    if profile:
        if target.is_capturing(stream):
            raise ValueError("profile=True cannot be used while a Graph is capturing")
        return target.run(prepared, check, profile=True)
    return target.execute(prepared, stream=stream, check=check)


def check_errors(device: Device | str | None = None) -> None:
    """Report what device check kernels (e.g. the attention metadata guard) recorded: waits for
    the device (a synchronisation), raises ``DeviceCheckError`` naming the first violation and
    resets the record. ``device``: one device (or kind); default every device made so far."""
    devices = [get_device(device)] if device is not None else known_devices()
    for d in devices:
        d.check_errors()


__all__ = ["launch", "check_errors", "DeviceCheckError", "Device", "PreparedLaunch", "get_device", "prepare_launch", "device_generation",
           "default_device_kind", "reset_devices", "Graph", "GraphError", "is_capturing",
           "DEVICES", "Timing", "timed", "GPU_CLOCK", "EMULATOR_CLOCK", "profiling"]
