"""Every shipped kernel variant, by name: the golden IR table, the CLI and the report walk this.

A kernel family module provides `build(spec) -> dsl.Kernel` and `VARIANTS: dict[str, spec]`
(the shipped specs, named). A variant's name is "<family>/<variant>".
"""
from __future__ import annotations

import difflib
import hashlib
import importlib
from dataclasses import dataclass
from functools import cache
from typing import Any, Callable

# family name -> module path; order is the listing order
FAMILIES: dict[str, str] = {
    "vector_add": "rocke.kernels.samples.vector_add",
    "softmax": "rocke.kernels.samples.softmax",
    "gemm": "rocke.kernels.samples.gemm",
    "flash_attention": "rocke.kernels.samples.flash_attention",
    "attention_2d": "rocke.kernels.gfx942.attention_tiled_2d",
    "attention_3d": "rocke.kernels.gfx942.attention_tiled_3d",
    "reduce_segments": "rocke.kernels.gfx942.reduce_segments",
}


@dataclass(frozen=True)
class Variant:
    name: str
    family: str
    spec: Any
    builder: Callable[[Any], Any]

    def kernel(self):
        return self.builder(self.spec)

    def ir(self) -> str:
        return self.kernel().ir()

    def ir_hash(self) -> str:
        return hashlib.sha256(self.ir().encode()).hexdigest()

    def compile(self, **kw):
        from ..compiler import compile_ir   # compiler sits below kernels; imported lazily for speed
        k = self.kernel()
        return compile_ir(k.ir(), name=k.name, variant=self.name,
                          workgroup_size=getattr(k, "workgroup_size", None), **kw)


def _load_family(family: str):
    return importlib.import_module(FAMILIES[family])


@cache
def all_variants() -> dict[str, Variant]:
    out: dict[str, Variant] = {}
    for family in FAMILIES:
        mod = _load_family(family)
        for vname, spec in mod.VARIANTS.items():
            out[f"{family}/{vname}"] = Variant(f"{family}/{vname}", family, spec, mod.build)
    return out


def get_variant(name: str) -> Variant:
    variants = all_variants()
    if name not in variants:
        family = name.split("/", 1)[0]
        close = [v for v in variants if v.startswith(family + "/")] or difflib.get_close_matches(
            name, list(variants), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close[:5])}" if close else ""
        raise ValueError(f"unknown kernel variant {name!r}{hint} (see `rocke list`)")
    return variants[name]
