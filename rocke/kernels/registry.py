"""Every kernel variant rocke knows, by name: the golden IR table, the CLI and the report walk this.

The family contract -- a family is a Python module (anywhere on ``sys.path``) providing:

- ``build(spec) -> rocke.dsl.Kernel``;
- ``VARIANTS: dict[str, spec]``: the shipped specs, named (a variant is "<family>/<variant>");
- ``GOLDEN_PERTURBATION = (field, {value: other value, ...})``: one spec field and, for each
  value the variants use, a different one; the golden tests rebuild one variant with it and
  check that exactly that variant's IR hash moves (a spec change must reach the IR).

Families come from, in this order (a name may be registered once):
1. ``FAMILIES`` below (rocke's own);
2. Python entry points in the group ``rocke.kernel_families`` (``name = "package.module"``);
3. the ``ROCKE_FAMILIES`` environment lever (``name=package.module,...``, see ``rocke.env``);
4. ``register_family(name, module)`` calls.

A family whose module cannot be imported (missing, or raising at import) or whose name an earlier
source took is reported by ``loadable_variants()`` as one line and leaves the others usable;
``all_variants()`` (every family, e.g. for a golden table) raises ``ValueError`` instead.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any, Callable

from .. import env

ENTRY_POINT_GROUP = "rocke.kernel_families"

# family name -> module path; order is the listing order
FAMILIES: dict[str, str] = {
    "vector_add": "rocke.kernels.samples.vector_add",
    "softmax": "rocke.kernels.samples.softmax",
    "gemm": "rocke.kernels.samples.gemm",
    "rmsnorm_residual": "rocke.kernels.samples.rmsnorm_residual",
    "gemm_bias_gelu": "rocke.kernels.samples.gemm_bias_gelu",
    "paged_decode": "rocke.kernels.samples.paged_decode",
    "flash_attention": "rocke.kernels.samples.flash_attention",
    "int8_gemm": "rocke.kernels.samples.int8_gemm",
    "moe_gemm": "rocke.kernels.samples.moe_gemm",
    "block_sparse_attention": "rocke.kernels.samples.block_sparse_attention",
    "attention_2d": "rocke.kernels.gfx942.attention_tiled_2d",
    "attention_3d": "rocke.kernels.gfx942.attention_tiled_3d",
    "reduce_segments": "rocke.kernels.gfx942.reduce_segments",
    "metadata_guard": "rocke.kernels.common.metadata_guard",
    "dense_prefill_gfx942": "rocke.kernels.gfx942.dense_prefill",
    "dense_prefill_gfx950": "rocke.kernels.gfx950.dense_prefill",
    "attention_2d_gfx950": "rocke.kernels.gfx950.attention_2d_family",
    "attention_3d_gfx950": "rocke.kernels.gfx950.attention_3d_family",
    "reduce_segments_gfx950": "rocke.kernels.gfx950.reduce_segments_family",
}

_REGISTERED: dict[str, str] = {}


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
        from ..arch import get_target
        if not kw:      # the shipped build: served from the prebuilt bundle without an IR build
            from .common.golden_table import prebuilt_for_spec
            served = prebuilt_for_spec(self.spec)
            if served is not None:
                return served
        k = self.kernel()
        kw.setdefault("target", get_target(k.target).target_id)     # the kernel's own target
        return compile_ir(k.ir(), name=k.name, variant=self.name,
                          workgroup_size=getattr(k, "workgroup_size", None), **kw)


def register_family(name: str, module: str) -> None:
    """Register a kernel family (a module following the contract above) under ``name``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"family name must be an identifier, got {name!r}")
    if not isinstance(module, str) or not all(p.isidentifier() for p in module.split(".")):
        raise ValueError(f"family {name!r}: module must be a dotted Python module path, got {module!r}")
    known = families()
    if name in known and known[name][0] != module:
        raise ValueError(f"family {name!r} is already registered to {known[name][0]!r} "
                         f"(from {known[name][1]})")
    _REGISTERED[name] = module
    forget_loaded_families()


def unregister_family(name: str) -> None:
    """Undo ``register_family`` (for tests and interactive use)."""
    _REGISTERED.pop(name, None)
    forget_loaded_families()


def forget_loaded_families() -> None:
    """Load the families afresh on next use (after ``ROCKE_FAMILIES`` or installed entry points
    changed in this process)."""
    _load_every_family.cache_clear()


def _entry_point_families() -> list[tuple[str, str]]:
    return sorted((ep.name, ep.value) for ep in metadata.entry_points(group=ENTRY_POINT_GROUP))


def _family_table() -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    table: dict[str, tuple[str, str]] = {}
    refused: dict[str, str] = {}
    sources = ([(n, m, "rocke.kernels.registry.FAMILIES") for n, m in FAMILIES.items()]
               + [(n, m, f"entry point group {ENTRY_POINT_GROUP!r}") for n, m in _entry_point_families()]
               + [(n, m, "ROCKE_FAMILIES") for n, m in env.families()]
               + [(n, m, "register_family()") for n, m in _REGISTERED.items()])
    for name, module, source in sources:
        if name in table and table[name][0] != module:
            refused[f"{name} ({source})"] = (
                f"kernel family {name!r} is registered twice: {table[name][0]!r} (from "
                f"{table[name][1]}) and {module!r} (from {source}); the second is ignored")
            continue
        table.setdefault(name, (module, source))
    return table, refused


def families() -> dict[str, tuple[str, str]]:
    """family name -> (module path, where it was registered), in listing order. A name taken
    by an earlier source is not re-registered by a later one (``loadable_variants`` reports it)."""
    return _family_table()[0]


def load_family(family: str):
    """The family's module, checked against the contract; errors name the family and module."""
    known = families()
    if family not in known:
        raise ValueError(f"unknown kernel family {family!r}; known: {', '.join(known)}")
    module_path, source = known[family]
    try:
        mod = importlib.import_module(module_path)
    except ModuleNotFoundError as e:
        raise ValueError(f"kernel family {family!r} (registered by {source}): cannot import module "
                         f"{module_path!r} ({e}); is its package installed or on PYTHONPATH?") from None
    except Exception as e:      # the module itself is broken: name it, don't show its traceback
        first_line = next((line for line in str(e).splitlines() if line.strip()), "")
        raise ValueError(f"kernel family {family!r} (registered by {source}): importing module "
                         f"{module_path!r} raised {type(e).__name__}"
                         + (f": {first_line}" if first_line else "")) from None
    missing = [attr for attr in ("build", "VARIANTS") if not hasattr(mod, attr)]
    if missing:
        raise ValueError(f"kernel family {family!r}: module {module_path!r} lacks {', '.join(missing)} "
                         "(a family provides build(spec), VARIANTS and GOLDEN_PERTURBATION)")
    if not callable(mod.build) or not isinstance(mod.VARIANTS, dict):
        raise ValueError(f"kernel family {family!r}: module {module_path!r} needs a callable build "
                         "and a dict VARIANTS")
    return mod


def golden_perturbation(family: str) -> tuple[str, dict]:
    """The family's declared ``GOLDEN_PERTURBATION`` (field, {value: other value})."""
    mod = load_family(family)
    change = getattr(mod, "GOLDEN_PERTURBATION", None)
    if not (isinstance(change, tuple) and len(change) == 2 and isinstance(change[0], str)
            and isinstance(change[1], dict) and change[1]):
        raise ValueError(f"kernel family {family!r}: {mod.__name__}.GOLDEN_PERTURBATION must be "
                         f"(spec field, {{value: other value}}), got {change!r}")
    return change


def family_variants(family: str) -> dict[str, Variant]:
    """One family's variants, by full name; loads that family only."""
    mod = load_family(family)
    return {f"{family}/{vname}": Variant(f"{family}/{vname}", family, spec, mod.build)
            for vname, spec in mod.VARIANTS.items()}


@cache
def _load_every_family() -> tuple[dict[str, Variant], dict[str, str]]:
    variants: dict[str, Variant] = {}
    table, broken = _family_table()
    for family in table:
        try:
            variants.update(family_variants(family))
        except ValueError as e:
            broken[family] = str(e)
    return variants, broken


def loadable_variants() -> tuple[dict[str, Variant], dict[str, str]]:
    """(every variant of the families that load, family -> one-line error for each that does
    not or whose registration was refused): a broken out-of-tree family does not hide rocke's
    own."""
    variants, broken = _load_every_family()
    return dict(variants), dict(broken)


def all_variants() -> dict[str, Variant]:
    """Every variant of every family; ``ValueError`` naming each family that cannot be loaded."""
    variants, broken = _load_every_family()
    if broken:
        raise ValueError("; ".join(broken.values()))
    return dict(variants)


def get_variant(name: str) -> Variant:
    """The variant ``name`` ("<family>/<variant>"); another family that cannot be loaded does not
    stand in the way, its own family being broken is that family's one-line error."""
    variants, broken = _load_every_family()
    if name in variants:
        return variants[name]
    family = name.split("/", 1)[0]
    if family in broken:
        raise ValueError(broken[family])
    close = [v for v in variants if v.startswith(family + "/")] or difflib.get_close_matches(
        name, list(variants), n=5, cutoff=0.5)
    hint = f"; did you mean {', '.join(close[:5])}" if close else ""
    raise ValueError(f"unknown kernel variant {name!r}{hint} (see `rocke list`)")
