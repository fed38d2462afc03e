"""Fused residual add + RMSNorm over contiguous ``[rows, cols]`` rows (f16 / bf16, f32 math).

``residual <- x + residual`` (rounded to the working dtype, written back in place), then
``y = residual * rsqrt(mean(residual^2) + eps) * weight`` -- the statistics are taken from the
rounded residual, as vLLM's fused_add_rms_norm does. One row per wave: pass 1 adds, stores the
residual and accumulates the sum of squares (``sum(vec)`` folds a lane's vector, ``wave_sum``
the wave); pass 2 re-reads the residual this lane wrote and scales it. ``cols`` must be a
multiple of the vector width (checked at launch), so no access straddles the row end.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocke import dsl
from rocke.dsl import rsq, wave_sum
from rocke.kernels.common.checks import (check_choice, check_extent, check_index_extent, check_multiple,
                                         check_tensor, check_vector_access)

DTYPES = ("f16", "bf16")


@dataclass(frozen=True)
class RmsNormResidualSpec:
    dtype: str = "f16"
    num_warps: int = 4          # rows per workgroup (one per wave)
    vector_width: int = 8       # consecutive elements per lane per access

    def __post_init__(self):
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("num_warps", self.num_warps, (1, 2, 4, 8))
        check_choice("vector_width", self.vector_width, (1, 2, 4, 8))
        check_vector_access("vector_width", self.vector_width, self.dtype)

    @property
    def workgroup_size(self) -> int:
        return dsl.WAVE_SIZE * self.num_warps

    @property
    def kernel_name(self) -> str:
        return f"rmsnorm_residual_{self.dtype}_w{self.num_warps}_v{self.vector_width}"


VARIANTS = {
    "f16_v8": RmsNormResidualSpec("f16", 4, 8),
    "bf16_v4": RmsNormResidualSpec("bf16", 4, 4),
}
GOLDEN_PERTURBATION = ("vector_width", {8: 4, 4: 8, 2: 4, 1: 2})     # see rocke.kernels.registry


def launch_geometry(spec: RmsNormResidualSpec, *, rows: int, cols: int):
    check_extent("rows", rows)
    check_extent("cols", cols)
    check_index_extent("rows * cols", rows * cols)
    check_multiple("cols", cols, spec.vector_width, of=f"the spec's vector_width ({spec.vector_width})")
    return (-(-rows // spec.num_warps), 1, 1), (spec.workgroup_size, 1, 1)


def kernel_args(spec: RmsNormResidualSpec, x, residual, weight, y, eps: float = 1e-6) -> list:
    """Ordered kernel arguments: x, residual (updated in place), y ``[rows, cols]``, weight ``[cols]``."""
    for name, t in (("x", x), ("residual", residual), ("y", y)):
        check_tensor(name, t, dtype=spec.dtype, dims=("rows", "cols"))
        if t.shape != x.shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} differs from x's {tuple(x.shape)}")
    check_tensor("weight", weight, dtype=spec.dtype, dims=("cols",))
    if weight.shape[0] != x.shape[1]:
        raise ValueError(f"weight: {weight.shape[0]} entries for {x.shape[1]} columns")
    launch_geometry(spec, rows=x.shape[0], cols=x.shape[1])
    return [x, residual, weight, y, x.shape[0], x.shape[1], float(eps)]


def build(spec: RmsNormResidualSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size)
    x = k.arg_ptr("x", spec.dtype, readonly=True)
    res = k.arg_ptr("residual", spec.dtype)
    weight = k.arg_ptr("weight", spec.dtype, readonly=True)
    y = k.arg_ptr("y", spec.dtype)
    rows, cols, eps = k.arg_i32("rows"), k.arg_i32("cols"), k.arg_f32("eps")
    width, chunk = spec.vector_width, dsl.WAVE_SIZE * spec.vector_width
    row = k.block_id(0) * spec.num_warps + k.wave_id()
    lane_col = k.lane_id() * width

    with k.if_(row < rows):
        start = row * cols
        x_row, r_row, y_row = (p.offset(start).buffer(cols) for p in (x, res, y))
        w_row = weight.buffer(cols)
        with k.for_range(0, cols, chunk, carry={"sum_sq": k.const(0.0, dsl.f32)}) as add:
            col = add.index + lane_col
            h = (x_row.load(col, width=width).to(dsl.f32) + r_row.load(col, width=width).to(dsl.f32)).to(spec.dtype)
            r_row.store(col, h)
            hf = h.to(dsl.f32)
            squares = hf * hf
            add.yield_({"sum_sq": add.carry["sum_sq"] + (sum(squares) if width > 1 else squares)})
        inv_rms = rsq(wave_sum(add.results["sum_sq"]) / cols.to(dsl.f32) + eps)
        with k.for_range(0, cols, chunk) as scale:
            col = scale.index + lane_col
            h = r_row.load(col, width=width).to(dsl.f32)        # this lane's own stores of pass 1
            w = w_row.load(col, width=width).to(dsl.f32)
            y_row.store(col, (h * inv_rms * w).to(spec.dtype))
    return k
