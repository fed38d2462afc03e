"""Errors raised by the gfx942 emulator."""


class EmulatorError(RuntimeError):
    """A launch stopped: unimplemented instruction/operand, fault, or checker finding."""


class MemoryFault(EmulatorError):
    """A global/flat/buffer/SMEM access outside the memory the launch was given."""


class LdsFault(EmulatorError):
    """An LDS access beyond the workgroup's static + dynamic LDS allocation."""


class LdsRace(EmulatorError):
    """Two waves of a workgroup touched the same LDS bytes without a barrier in between."""


class LdsUninitialised(EmulatorError):
    """A DS read of LDS bytes no write of its workgroup had set (hardware reads stale data)."""


class LaunchTimeout(EmulatorError):
    """A launch ran past its wall-time budget (`timeout_s`, ROCKE_EMU_TIMEOUT_S): an endless or
    far too long kernel."""


class DecodeError(ValueError):
    """An instruction, operand or modifier the emulator does not implement, or a malformed one:
    raised while a listing is decoded, before anything runs."""
