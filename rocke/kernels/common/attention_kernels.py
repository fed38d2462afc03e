"""The compiled kernels of a unified-attention plan: each spec built and compiled once per process
(first from the prebuilt bundle, else over the on-disk compile cache), spill-checked."""
from __future__ import annotations

from rocke.runtime.kernel_cache import CompiledSpecCache


def _build_and_compile(spec):
    import importlib
    from rocke.compiler import compile_ir
    from rocke.kernels.common.golden_table import prebuilt_for_spec
    served = prebuilt_for_spec(spec)         # a shipped variant: no IR build, no link
    if served is not None:
        return served
    from rocke.arch import get_target
    kern = importlib.import_module(type(spec).__module__).build(spec)
    return compile_ir(kern.ir(), name=kern.name, workgroup_size=kern.workgroup_size,
                      target=get_target(kern.target).target_id)


COMPILED = CompiledSpecCache(_build_and_compile)


def compiled(spec):
    """The compiled kernel of ``spec``: built once per process, on top of the on-disk cache."""
    return COMPILED.get(spec)


def kernel_spills(kernel) -> tuple[int, int]:
    """(VGPR, SGPR) spills of a compiled kernel, from its metadata; (0, 0) for one without
    resource metadata (a test's stand-in)."""
    info = getattr(kernel, "info", None)
    return (0, 0) if info is None else (info.vgpr_spills, info.sgpr_spills)


def spill_checked(target, the_plan) -> tuple:
    """(plan, its compiled kernels) of a call, every build before any launch: the target's
    spill-aware choice (``spill_free_plan``: a planned kernel whose code spills is replaced by
    a spill-free geometry of the same problem, recorded in ``plan.spill_fallback``), or the
    plan itself for a target without one."""
    built = {spec: compiled(spec) for spec in the_plan.specs}
    choose = getattr(target, "spill_free_plan", None)
    if choose is not None:
        the_plan = choose(the_plan, lambda spec: kernel_spills(
            built[spec] if spec in built else compiled(spec)))
    return the_plan, [built[spec] if spec in built else compiled(spec)
                      for spec in the_plan.specs]


def compiled_cache_stats() -> CompiledSpecCache:
    return COMPILED
