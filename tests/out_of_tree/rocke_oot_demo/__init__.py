"""An out-of-tree kernel family (lives outside rocke/): y = alpha * x + bias over n elements.

It follows the family contract of ``rocke.kernels.registry`` -- ``build``, ``VARIANTS`` and
``GOLDEN_PERTURBATION`` -- and is registered without editing rocke (``ROCKE_FAMILIES``, an
entry point, or ``register_family``); tests/test_families.py drives it through the CLI.
"""
from dataclasses import dataclass

from rocke import dsl


@dataclass(frozen=True)
class AxpbSpec:
    dtype: str = "f32"
    vector_width: int = 4

    def __post_init__(self):
        if self.dtype not in ("f32", "f16"):
            raise ValueError(f"dtype: must be f32 or f16, got {self.dtype!r}")
        if self.vector_width not in (1, 2, 4):
            raise ValueError(f"vector_width: must be 1, 2 or 4, got {self.vector_width!r}")


VARIANTS = {"f32_v4": AxpbSpec("f32", 4), "f16_v2": AxpbSpec("f16", 2)}
GOLDEN_PERTURBATION = ("vector_width", {4: 2, 2: 4, 1: 2})


def build(spec: AxpbSpec) -> dsl.Kernel:
    k = dsl.Kernel(f"oot_axpb_{spec.dtype}_v{spec.vector_width}", workgroup_size=256)
    x = k.arg_ptr("x", spec.dtype, readonly=True)
    y = k.arg_ptr("y", spec.dtype)
    n = k.arg_i32("n")
    alpha = k.arg_f32("alpha")
    bias = k.arg_f32("bias")
    i = (k.block_id(0) * 256 + k.thread_id(0)) * spec.vector_width
    src, dst = x.buffer(n), y.buffer(n)
    v = src.load(i, width=spec.vector_width).to(dsl.f32)
    dst.store(i, (v * alpha + bias).to(spec.dtype))
    return k


# `rocke profile oot_demo/f32_v4 --shape n=...`: the family declares its problem (shape -> launch)
def profile_tensors(spec: AxpbSpec, n: int = 65536):
    """What profile_problem allocates, before it does: (dtype, {tensor: elements})."""
    return spec.dtype, {"x": n, "y": n}


def profile_problem(spec: AxpbSpec, n: int = 65536):
    import torch
    from rocke.perf.problems import Problem
    dt = {"f32": torch.float32, "f16": torch.float16}[spec.dtype]
    x, y = torch.randn(n).to(dt), torch.zeros(n, dtype=dt)
    per_block = 256 * spec.vector_width
    size = x.element_size()
    return Problem((-(-n // per_block), 1, 1), (256, 1, 1), [x, y, n, 2.0, 1.0],
                   read_bytes=n * size, write_bytes=n * size)
