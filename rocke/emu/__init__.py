"""gfx942 machine-code emulator: runs the assembly text LLVM prints for AMD CDNA3 kernels."""
from .errors import EmulatorError, LaunchTimeout, LdsFault, LdsRace, MemoryFault
from .launch import LaunchReport, launch

__all__ = ["launch", "LaunchReport", "EmulatorError", "MemoryFault", "LdsFault", "LdsRace", "LaunchTimeout"]
