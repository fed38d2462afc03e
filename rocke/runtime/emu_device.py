"""The emulator device: prepared launches run on rocke's gfx942 / gfx950 emulator (`rocke.emu`;
ROCKE_DEVICE=emu:gfx950 picks gfx950), on CPU
torch tensors, synchronously. Inside a `Graph` capture they are recorded instead (see graph.py)."""
from __future__ import annotations

import time

from .device import Device, PreparedLaunch
from . import graph as _graph


class EmuDevice(Device):
    kind = "emu"

    def __init__(self, emu_target: str = "gfx942"):
        super().__init__()
        self._listing_ok: dict[tuple[str, str], bool] = {}   # (code object, listing) sha256 -> it is its kernel
        self._disassembles: bool | None = None     # whether an llvm-objdump here knows emu_target
        from ..compiler import DEFAULT_TARGET
        from ..arch import get_target
        self.emu_target = get_target(emu_target).name     # the processor the emulator runs as
        self.arch = DEFAULT_TARGET if self.emu_target == "gfx942" else get_target(emu_target).target_id

    def execute(self, launch: PreparedLaunch, *, stream=None, check: bool = True):
        capture = _graph.active_capture(self)
        if capture is not None:
            capture.record(launch, check)
            return None
        return self.run(launch, check)

    def run(self, launch: PreparedLaunch, check: bool = True, profile: bool = False):
        """Emulate one launch now: the kernel of the linked code object HIP would load, with
        exactly the kernarg bytes `prepare_launch` packed (the bytes HIP would receive); returns
        the LaunchReport (with exact counters in `.profile` when `profile`)."""
        from .. import emu
        from .profiling import active
        c = launch.compiled
        built_for = str(c.target).split(":", 1)[0]
        if built_for != self.emu_target:   # as on a GPU: code for one processor does not load on another
            raise ValueError(f"kernel {c.name} was built for {built_for} and cannot run on the "
                             f"emulator as {self.emu_target} (ROCKE_DEVICE=emu:{self.emu_target})")
        with self.serial:
            return emu.launch(self._runnable(c), c.name, launch.grid, launch.block, list(launch.args),
                              shared_mem=launch.shared_mem, check=check,
                              allow_alias=launch.allow_alias, memcheck=launch.memcheck,
                              profile=profile or active(), target=self.emu_target,
                              kernarg=launch.kernarg)

    def _runnable(self, compiled):
        """What the emulator runs for `compiled`: its assembly listing when that is the code
        object's kernel instruction for instruction (checked once per process, code object and
        listing; the listing keeps its source lines), else the code object itself (disassembled).
        gfx950 on Debian's LLVM 19 is disassembled through a newer shared LLVM library, verified
        by re-assembly (rocke.llvm_disasm). Where nothing here can disassemble the processor, the
        listing is proven by a rebuild instead (`listing_proven_by_rebuild`), and a code object
        whose listing is not proven is refused: it could not be disassembled either."""
        import hashlib
        from ..emu.codeobject import cannot_disassemble, disassembler, listing_matches
        digest = (hashlib.sha256(compiled.code_object).hexdigest(),
                  hashlib.sha256(compiled.asm.encode()).hexdigest())
        if self._disassembles is None:      # looked up once per device (~10 ms: tool versions)
            self._disassembles = disassembler(self.emu_target) is not None
        use_listing = self._listing_ok.get(digest)
        if use_listing is None:
            if self._disassembles:
                use_listing = listing_matches(compiled.asm, compiled.code_object, compiled.name)
            else:
                use_listing = listing_proven_by_rebuild(compiled)
            self._listing_ok[digest] = use_listing
        if not use_listing and not self._disassembles:
            raise ValueError(f"kernel {compiled.name}: no assembly listing proven to be its code "
                             f"object's kernel (a rebuild of its IR must give the same code), and "
                             + cannot_disassemble(self.emu_target))
        return compiled.asm if use_listing else compiled.code_object

    def _allocate_record(self):
        import torch
        from .device_checks import RECORD_INTS
        return torch.zeros(RECORD_INTS, dtype=torch.int32)

    def _read_record(self) -> tuple:
        return tuple(int(x) for x in self._error_record.tolist())

    def _write_record(self, data: bytes) -> None:
        import torch
        self._error_record.copy_(torch.frombuffer(bytearray(data), dtype=torch.int32))

    def is_capturing(self, stream=None) -> bool:
        return _graph.active_capture(self) is not None

    def timed(self, fn, stream=None):
        from .timing import EMULATOR_CLOCK, Timing
        start = time.perf_counter()
        fn()
        return Timing(time.perf_counter() - start, EMULATOR_CLOCK)


def listing_proven_by_rebuild(compiled) -> bool:
    """Whether `compiled`'s listing is its code object's kernel, shown without a disassembler:
    its IR compiled again, uncached, gives a code object that loads the same kernel (machine code,
    descriptor, metadata note) and a listing that is `compiled`'s instruction for instruction.
    The compiler prints the listing and encodes the code object from identical copies of one
    module, so the fresh pair is one kernel (test_code_object_truth checks this by disassembly
    on gfx942), hence so is `compiled`'s. Where no ld.lld can link, the fresh unlinked object
    stands in: its kernel bytes, descriptor and metadata note must equal the code object's
    (a relocated field that differs fails the proof). Any doubt (no IR at hand, another opt level or linker)
    is False."""
    from ..compiler import ToolchainError, compile_ir
    from ..compiler.pipeline import codegen_unlinked
    from ..emu.codeobject import kernel_image, listings_agree
    if not compiled.ir or not compiled.asm:
        return False
    try:
        try:
            fresh = compile_ir(compiled.ir, name=compiled.name, target=compiled.target, cache=False)
            fresh_asm, fresh_object = fresh.asm, fresh.code_object
        except ToolchainError:   # no linker here: the unlinked object carries the same kernel
            fresh_asm, fresh_object = codegen_unlinked(compiled.ir, compiled.name,
                                                           compiled.target)
        same_code = (kernel_image(fresh_object, compiled.name)
                     == kernel_image(compiled.code_object, compiled.name))
    except Exception:
        return False
    return same_code and listings_agree(compiled.asm, fresh_asm, compiled.name)
