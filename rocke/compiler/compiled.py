"""A compiled kernel: what the compile pipeline builds and the prebuilt bundle serves (both
import it from here, so neither imports the other)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from .metadata import KernelInfo


@dataclass(frozen=True)
class CompiledKernel:
    name: str                 # kernel symbol
    variant: str              # human label of the spec variant (for errors and reports)
    target: str
    ir: str
    asm: str
    object: bytes = field(repr=False)
    code_object: bytes = field(repr=False)
    info: KernelInfo = field(repr=False)
    cache_hit: bool = False
    build_seconds: float = 0.0
    linker: str = "ld.lld"    # what linked the code object: "ld.lld" or "comgr" (ROCKE_LINKER)
    source_ir_sha256: str | None = None   # the IR's hash where `ir` is not at hand (prebuilt)
    prebuilt: bool = False    # served from the prebuilt bundle (compiler/prebuilt.py)

    @property
    def ir_hash(self) -> str:
        if self.source_ir_sha256 is not None:
            return self.source_ir_sha256
        return hashlib.sha256(self.ir.encode()).hexdigest()
