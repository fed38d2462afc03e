"""The emulator device: prepared launches run on rocke's gfx942 emulator (`rocke.emu`), on CPU
torch tensors, synchronously. Inside a `Graph` capture they are recorded instead (see graph.py)."""
from __future__ import annotations

import time

from .device import Device, PreparedLaunch
from . import graph as _graph


class EmuDevice(Device):
    kind = "emu"

    def __init__(self):
        super().__init__()
        from ..compiler import DEFAULT_TARGET
        self.arch = DEFAULT_TARGET

    def execute(self, launch: PreparedLaunch, *, stream=None, check: bool = True):
        capture = _graph.active_capture(self)
        if capture is not None:
            capture.record(launch, check)
            return None
        return self.run(launch, check)

    def run(self, launch: PreparedLaunch, check: bool = True):
        """Emulate one launch now: the linked code object HIP would load (disassembled once per
        process; the assembly listing is not what runs), with exactly the kernarg bytes
        `prepare_launch` packed (the bytes HIP would receive); returns the LaunchReport."""
        from .. import emu
        c = launch.compiled
        with self.serial:
            return emu.launch(c.code_object, c.name, launch.grid, launch.block, list(launch.args),
                              shared_mem=launch.shared_mem, check=check,
                              allow_alias=launch.allow_alias, kernarg=launch.kernarg)

    def is_capturing(self, stream=None) -> bool:
        return _graph.active_capture(self) is not None

    def timed(self, fn, stream=None):
        from .timing import EMULATOR_CLOCK, Timing
        start = time.perf_counter()
        fn()
        return Timing(time.perf_counter() - start, EMULATOR_CLOCK)
