"""The suite's processes emulate hundreds of kernels each: collect cycles less often
(rocke.emu.relax_garbage_collection says why; about a quarter of an emulator test's time)."""
from rocke.emu import relax_garbage_collection

relax_garbage_collection()
