"""c = a + b over n elements.

Each thread owns ``vector_width`` consecutive elements. Threads whose whole vector is in range
use one vector load/store per operand; the (at most one) thread straddling ``n`` falls back to
per-element buffer accesses, where the buffer's range check turns loads past ``n`` into 0 and
drops stores past ``n`` -- so ragged ``n`` needs no padding and writes nothing out of bounds.
bf16 adds in f32 and rounds back to nearest even.

Address width (``check_problem``): each buffer's extent is ``n * element size`` bytes in the
32-bit num_records field (f32 needs n < 2**30: n = 2**30 wraps it to 0 and nothing is read or
written), and each thread's ``first + vector_width`` is i32 arithmetic, so the grid's elements,
``n`` rounded up to ``block_size * vector_width``, must stay <= 2**31 - 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocke import dsl
from rocke.kernels.common.checks import (check_choice, check_device, check_extent, check_i32_value,
                                         check_int_range, check_multiple, check_num_records, check_tensor,
                                         check_vector_access, round_up)

DTYPES = ("f16", "bf16", "f32")


@dataclass(frozen=True)
class VectorAddSpec:
    dtype: str = "f32"
    vector_width: int = 4       # elements per thread
    block_size: int = 256       # threads per workgroup

    def __post_init__(self):
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("vector_width", self.vector_width, (1, 2, 4, 8))
        check_vector_access("vector_width", self.vector_width, self.dtype)
        check_int_range("block_size", self.block_size, dsl.WAVE_SIZE, 1024)
        check_multiple("block_size", self.block_size, dsl.WAVE_SIZE, because="a workgroup is whole waves")

    @property
    def kernel_name(self) -> str:
        return f"vector_add_{self.dtype}_v{self.vector_width}_b{self.block_size}"


VARIANTS = {
    "f32_v4": VectorAddSpec("f32", 4, 256),
    "f16_v8": VectorAddSpec("f16", 8, 256),
    "bf16_v4": VectorAddSpec("bf16", 4, 128),
}
# golden tests: one spec change per variant value, to show a spec change reaches the IR
GOLDEN_PERTURBATION = ("vector_width", {4: 2, 8: 4, 2: 4})

# (name, kind, dtype) in launch order; pointer dtypes follow spec.dtype.
ARGS = (("a", "global_ptr", None), ("b", "global_ptr", None), ("c", "global_ptr", None),
        ("n", "scalar", "i32"))


def args(spec: VectorAddSpec) -> list[tuple[str, str, str]]:
    """The kernel's arguments in order: (name, kind, dtype)."""
    return [(name, kind, dt or spec.dtype) for name, kind, dt in ARGS]


def check_problem(spec: VectorAddSpec, *, n: int) -> None:
    """``n`` elements fit the kernel's address arithmetic (see the module docstring)."""
    check_extent("n", n)
    check_num_records("n", n * dsl.dtype(spec.dtype).nbytes, f"each {n}-element {spec.dtype} buffer")
    check_i32_value("n", round_up(n, spec.block_size * spec.vector_width),
                    "the last thread's first element + vector_width")


def launch_geometry(spec: VectorAddSpec, *, n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid in workgroups, block in threads) covering ``n`` elements."""
    check_problem(spec, n=n)
    per_block = spec.block_size * spec.vector_width
    return (-(-n // per_block), 1, 1), (spec.block_size, 1, 1)


def kernel_args(spec: VectorAddSpec, a, b, c) -> list:
    """The kernel's ordered arguments for contiguous 1-D torch tensors a, b, c of ``n`` elements."""
    for name, t in (("a", a), ("b", b), ("c", c)):
        check_tensor(name, t, dtype=spec.dtype, dims=("n",), one_buffer=False)
        if t.shape != a.shape:
            raise ValueError(f"{name}: shape {tuple(t.shape)} differs from a's {tuple(a.shape)}")
    n = a.shape[0]
    check_problem(spec, n=n)
    check_device({"a": a, "b": b, "c": c})
    return [a, b, c, n]


def build(spec: VectorAddSpec, target: str | None = None) -> dsl.Kernel:
    """The kernel for the DSL's default target, or `target` (the calibration's gfx950 copy)."""
    on = {} if target is None else {"target": target}
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.block_size, **on)
    a = k.arg_ptr("a", spec.dtype, readonly=True)
    b = k.arg_ptr("b", spec.dtype, readonly=True)
    c = k.arg_ptr("c", spec.dtype)
    n = k.arg_i32("n")
    width = spec.vector_width
    first = (k.block_id(0) * spec.block_size + k.thread_id(0)) * width
    a_buf, b_buf, c_buf = a.buffer(n), b.buffer(n), c.buffer(n)

    whole_vector = k.if_else(first + width <= n)
    with whole_vector.then_():
        c_buf.store(first, a_buf.load(first, width=width) + b_buf.load(first, width=width))
    with whole_vector.else_():
        for j in range(width):  # build-time unroll over the tail elements
            c_buf.store(first + j, a_buf.load(first + j) + b_buf.load(first + j))
    return k
