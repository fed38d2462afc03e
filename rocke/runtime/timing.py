"""Timing launches honestly: HIP events on a GPU, and on the emulator its wall time -- labelled
"emulator wall time", never GPU time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .device import Device, get_device

GPU_CLOCK = "GPU time (HIP events)"
EMULATOR_CLOCK = "emulator wall time"


@dataclass(frozen=True)
class Timing:
    seconds: float
    clock: str          # GPU_CLOCK or EMULATOR_CLOCK: what the number measures

    def __str__(self):
        return f"{self.seconds * 1e3:.3f} ms {self.clock}"


def timed(fn: Callable[[], object], *, device: Device | str | None = None, stream=None) -> Timing:
    """Run `fn` (which launches on `device`) and time it on the device's own clock."""
    return get_device(device).timed(fn, stream)
