"""Row softmax of a contiguous [rows, cols] tensor (f16 / bf16 / f32 in and out, f32 math).

One row per wave (``rows_per="wave"``) or per workgroup (``rows_per="workgroup"``). Inputs are
scaled by log2(e) as they are loaded so every exponential is one ``exp2``. Pass 1 runs an online
(max, sum) recurrence per lane over the row in chunks; lanes combine with a butterfly wave
reduction (DPP or ds_swizzle), and waves of a workgroup through LDS. Pass 2 re-reads the row and
writes ``exp2(s - m) / l``. Columns past ``cols`` read as -inf (their exp2 is 0) and are never
written: each row is addressed through a buffer resource whose extent is the row itself.

Address width (``check_problem``): the row start ``row * cols`` is i32 (the last row's must stay
<= 2**31 - 1; it is widened to 64 bits only in the pointer offset); a row's extent is
``cols * element size`` bytes in the 32-bit num_records (f32 needs cols < 2**30); the column loop
steps ``i += chunk`` in i32, so ``cols`` rounded up to a chunk must stay <= 2**31 - 1 or the loop
counter wraps; in per-wave mode the computed row index runs to ``rows`` rounded up to num_warps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocke import dsl
from rocke.dsl import exp2, maximum, rcp, select, vector, wave_max, wave_sum
from rocke.kernels.common.checks import (check_choice, check_device, check_extent, check_i32_value,
                                         check_num_records, check_tensor, check_vector_access, round_up)
from rocke.dsl.softmax import LOG2E, finite_base

DTYPES = ("f16", "bf16", "f32")


@dataclass(frozen=True)
class SoftmaxSpec:
    dtype: str = "f16"
    rows_per: str = "wave"      # "wave": one row per wave; "workgroup": one row per workgroup
    num_warps: int = 4          # waves per workgroup
    vector_width: int = 2       # consecutive elements per lane per chunk
    reduce_via: str = "dpp"     # "dpp" | "swizzle": how lanes exchange partial results

    def __post_init__(self):
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("rows_per", self.rows_per, ("wave", "workgroup"))
        check_choice("num_warps", self.num_warps, (1, 2, 4, 8, 16))
        check_choice("vector_width", self.vector_width, (1, 2, 4, 8))
        check_vector_access("vector_width", self.vector_width, self.dtype)
        check_choice("reduce_via", self.reduce_via, ("dpp", "swizzle"))

    @property
    def workgroup_size(self) -> int:
        return dsl.WAVE_SIZE * self.num_warps

    @property
    def kernel_name(self) -> str:
        return (f"softmax_{self.dtype}_{self.rows_per}_w{self.num_warps}_v{self.vector_width}"
                f"_{self.reduce_via}")


VARIANTS = {
    "f16_wave": SoftmaxSpec("f16", "wave", 4, 2, "dpp"),
    "bf16_workgroup": SoftmaxSpec("bf16", "workgroup", 4, 4, "swizzle"),
    "f32_wave": SoftmaxSpec("f32", "wave", 2, 4, "swizzle"),
}
GOLDEN_PERTURBATION = ("num_warps", {4: 2, 2: 4, 1: 2})     # see rocke.kernels.registry

ARGS = (("x", "global_ptr", None), ("y", "global_ptr", None), ("rows", "scalar", "i32"),
        ("cols", "scalar", "i32"))


def args(spec: SoftmaxSpec) -> list[tuple[str, str, str]]:
    """The kernel's arguments in order: (name, kind, dtype)."""
    return [(name, kind, dt or spec.dtype) for name, kind, dt in ARGS]


def check_problem(spec: SoftmaxSpec, *, rows: int, cols: int) -> None:
    """A [rows, cols] problem fits the kernel's address arithmetic (see the module docstring)."""
    check_extent("rows", rows)
    check_extent("cols", cols)
    check_i32_value("rows * cols", (rows - 1) * cols, "the last row's start (rows - 1) * cols")
    check_num_records("cols", cols * dsl.dtype(spec.dtype).nbytes, f"one {cols}-element {spec.dtype} row")
    chunk = (64 if spec.rows_per == "wave" else spec.workgroup_size) * spec.vector_width
    check_i32_value("cols", round_up(cols, chunk), f"the column loop's last step (cols rounded up to {chunk})")
    if spec.rows_per == "wave":
        check_i32_value("rows", round_up(rows, spec.num_warps) - 1, "the last wave's row index")


def kernel_args(spec: SoftmaxSpec, x, y) -> list:
    """The kernel's ordered arguments for contiguous [rows, cols] torch tensors x (in), y (out)."""
    for name, t in (("x", x), ("y", y)):
        check_tensor(name, t, dtype=spec.dtype, dims=("rows", "cols"), one_buffer=False)
    if y.shape != x.shape:
        raise ValueError(f"y: shape {tuple(y.shape)} differs from x's {tuple(x.shape)}")
    rows, cols = x.shape
    check_problem(spec, rows=rows, cols=cols)
    check_device({"x": x, "y": y})
    return [x, y, rows, cols]


def launch_geometry(spec: SoftmaxSpec, *, rows: int, cols: int):
    """(grid in workgroups, block in threads) for a [rows, cols] problem."""
    check_problem(spec, rows=rows, cols=cols)
    blocks = -(-rows // spec.num_warps) if spec.rows_per == "wave" else rows
    return (blocks, 1, 1), (spec.workgroup_size, 1, 1)


def _load_scaled(k, buf, col, cols, width):
    """``width`` values from ``col`` on, in f32, times log2(e); columns >= cols are -inf."""
    if width == 1:
        loaded = buf.load(col).to(dsl.f32)
    else:
        whole = k.if_else(col + width <= cols)
        with whole.then_():
            whole.yield_(buf.load(col, width=width).to(dsl.f32))
        with whole.else_():  # straddles the row end: element loads, out-of-range ones read 0
            whole.yield_(vector([buf.load(col + j).to(dsl.f32) for j in range(width)]))
        (loaded,) = whole.results
    elems = [loaded] if width == 1 else list(loaded)
    return [select(col + j < cols, e * LOG2E, -math.inf) for j, e in enumerate(elems)]


def _store(k, buf, col, cols, values, dtype):
    out = [v.to(dtype) for v in values]
    if len(out) == 1:
        buf.store(col, out[0])  # past the row end: dropped by the buffer range check
        return
    whole = k.if_else(col + len(out) <= cols)
    with whole.then_():
        buf.store(col, vector(out))
    with whole.else_():
        for j, v in enumerate(out):
            buf.store(col + j, v)


def online_max_sum_update(m, l, scores):
    """Fold a chunk of log2-domain scores into a running (max, sum of exp2(s - max))."""
    chunk_max = scores[0]
    for s in scores[1:]:
        chunk_max = maximum(chunk_max, s)
    m_new = maximum(m, chunk_max)
    base = finite_base(m_new)
    l_new = l * exp2(m - base, fast=True)
    for s in scores:
        l_new = l_new + exp2(s - base, fast=True)
    return m_new, l_new


def build(spec: SoftmaxSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size)
    x = k.arg_ptr("x", spec.dtype, readonly=True)
    y = k.arg_ptr("y", spec.dtype)
    rows = k.arg_i32("rows")
    cols = k.arg_i32("cols")
    width = spec.vector_width
    per_wave = spec.rows_per == "wave"
    if per_wave:
        row = k.block_id(0) * spec.num_warps + k.wave_id()
        lane_in_row, threads_per_row = k.lane_id(), dsl.WAVE_SIZE
    else:
        row = k.block_id(0)
        lane_in_row, threads_per_row = k.thread_id(0), spec.workgroup_size
        row_stats = k.lds("row_stats", (spec.num_warps, 2), dsl.f32)

    with k.if_(row < rows):
        row_start = row * cols
        x_row = x.offset(row_start).buffer(cols)
        y_row = y.offset(row_start).buffer(cols)
        chunk = threads_per_row * width

        with k.for_range(0, cols, chunk, carry=(k.const(-math.inf, dsl.f32), k.const(0.0, dsl.f32))) as scan:
            m, l = scan.carry
            scores = _load_scaled(k, x_row, scan.index + lane_in_row * width, cols, width)
            scan.yield_(*online_max_sum_update(m, l, scores))
        m_lane, l_lane = scan.results

        m_row = wave_max(m_lane, via=spec.reduce_via)
        # a wave may see only masked columns (workgroup mode, short rows): its m_row is -inf
        l_row = wave_sum(l_lane * exp2(m_lane - finite_base(m_row), fast=True), via=spec.reduce_via)
        if not per_wave:
            wave = k.wave_id()
            with k.if_(k.lane_id() == 0):
                row_stats.store((wave, 0), m_row)
                row_stats.store((wave, 1), l_row)
            k.barrier()
            wave_m = [row_stats.load((w, 0)) for w in range(spec.num_warps)]
            wave_l = [row_stats.load((w, 1)) for w in range(spec.num_warps)]
            m_row = wave_m[0]
            for wm in wave_m[1:]:
                m_row = maximum(m_row, wm)
            l_row = wave_l[0] * exp2(wave_m[0] - m_row, fast=True)
            for wm, wl in zip(wave_m[1:], wave_l[1:]):
                l_row = l_row + wl * exp2(wm - m_row, fast=True)
        inv_l = rcp(l_row)

        with k.for_range(0, cols, chunk) as write:
            col = write.index + lane_in_row * width
            scores = _load_scaled(k, x_row, col, cols, width)
            _store(k, y_row, col, cols, [exp2(s - m_row, fast=True) * inv_l for s in scores], spec.dtype)
    return k
