"""``reduce_segments``: the exact merge of the 3D split-KV partials (ALGORITHM.md §5, §5.2).

The 3D kernel leaves, per (token, query head, segment), the log2-domain partial ``m`` (running max
of the scaled scores), ``l = Σ 2^(s - m)`` and the unnormalised ``o = Σ 2^(s - m)·V`` in an fp32
workspace (laid out in ``attention_tiled_3d``'s docstring). One wave per (token, query head) merges them into ``out`` in
its own dtype:

- pass 1, lanes in parallel over segments: each lane folds its segments into a running (m, l);
  a butterfly gives the row's ``M = max_s m_s`` and ``L = Σ_s 2^(m_s - M)·l_s``;
- pass 2, ``64 / (head_size / vector_width)`` segments at a time (one lane group per segment,
  ``vector_width`` fp32 per lane, 16-byte loads): ``acc += 2^(m_s - M)·o_s``; the groups are
  summed with an xor butterfly and the first group writes ``acc / L``.

``early_loads`` issues pass 2's first trip right after pass 1's first step (peeled), so the two
round trips overlap: the trip is folded at the first 64 segments' max and rescaled to ``M`` once
pass 1 is done (§5's fold; all of them empty: weight 0). A decode of up to 64 segments then
waits on memory once less.

An empty segment (m = -inf, l = 0) contributes nothing: its weight is 0 and its ``o``, loaded
with the others so that a pass costs one memory round trip, is dropped by a select, so even
garbage there could not leak in. A row whose every segment
is empty (L = 0) writes 0, as the reference does for a row that sees no key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from rocke import dsl
from rocke.dsl import concat, exp2, maximum, rcp, select, shuffle_xor, splat, wave_max, wave_sum
from rocke.kernels.common.checks import (I32_LIMIT, check_choice, check_extent, check_index_extent,
                                         torch_dtype)
from rocke.dsl.softmax import finite_base
from rocke.kernels.gfx942 import attention_quant as quant
from rocke.kernels.gfx942.attention_policy import SHIPPED_HEAD_SIZES

DTYPES = ("f16", "bf16")
# d256: 64 lanes x 4 fp32 hold one segment row (one pass per segment); d512: 64 lanes x 8
HEAD_SIZES = SHIPPED_HEAD_SIZES + (512,)
WAVE = dsl.WAVE_SIZE
PASS_UNROLL = 4     # pass-2 steps whose loads issue together, at least (pass_unroll)
SEGMENTS_PER_TRIP = 32   # pass 2 loads this many segments per round trip (decode: one)


@dataclass(frozen=True)
class ReduceSegmentsSpec:
    target: ClassVar[str] = "gfx942"   # the processor built for (not a field: rocke/kernels/gfx950 subclasses)
    dtype: str = "f16"          # dtype of ``out`` (the attention's q/out dtype)
    head_size: int = 128
    vector_width: int = 4       # fp32 elements of one segment's ``o`` per lane per load
    out_dtype: str | None = None  # None: out in ``dtype``; "fp8_e4m3fnuz": times 1 / output_scale,
                                  # saturated (attention_quant, ALGORITHM.md §13.1)
    head_cols: int = 0          # a padded head (ALGORITHM.md §11.3): out's columns; the
                                # partials keep head_size's (vLLM pads its workspaces so too)
    early_loads: bool = False   # pass 2's first trip loads with pass 1's first step (the two
                                # round trips overlap; the trip's registers live through pass 1)

    def __post_init__(self):
        check_choice("dtype", self.dtype, DTYPES)
        if self.out_dtype is not None:
            check_choice("out_dtype", self.out_dtype, quant.on_target(quant.OUT_DTYPES, self.target))
        check_choice("head_size", self.head_size, HEAD_SIZES)
        check_choice("vector_width", self.vector_width, (1, 2, 4, 8))
        if self.head_cols.__class__ is not int or not (
                self.head_cols == 0 or 0 < self.head_cols < self.head_size
                and self.head_cols % self.vector_width == 0):
            raise ValueError(f"head_cols: must be 0 or a multiple of vector_width "
                             f"{self.vector_width} below head_size {self.head_size}, got "
                             f"{self.head_cols!r}")
        if self.head_size // self.vector_width > WAVE:
            raise ValueError(f"vector_width: head_size {self.head_size} / vector_width "
                             f"{self.vector_width} lanes exceed one wave ({WAVE})")
        if self.early_loads and self.segments_per_pass * self.pass_unroll > WAVE:
            # the early trip is folded at pass 1's first step's max: it must lie inside that step
            raise ValueError(f"early_loads: pass 2's trip of {self.segments_per_pass * self.pass_unroll} "
                             f"segments exceeds pass 1's first step ({WAVE})")

    @property
    def lanes_per_row(self) -> int:
        """Lanes that together hold one segment's ``o`` row."""
        return self.head_size // self.vector_width

    @property
    def segments_per_pass(self) -> int:
        return WAVE // self.lanes_per_row

    @property
    def pass_unroll(self) -> int:
        """Pass-2 steps per loop trip: SEGMENTS_PER_TRIP segments' loads in flight at once (d256
        has one segment per pass; at 4 a trip its 16-22 decode segments took 4-6 exposed round
        trips, most of the launch's modelled time)."""
        return max(PASS_UNROLL, SEGMENTS_PER_TRIP // self.segments_per_pass)

    @property
    def workgroup_size(self) -> int:
        return WAVE

    @property
    def kernel_name(self) -> str:
        return (f"reduce_segments_{self.dtype}_d{self.head_size}_v{self.vector_width}"
                + ("_ofp8" if self.out_dtype else "")
                + (f"_hc{self.head_cols}" if self.head_cols else "")
                + ("_early" if self.early_loads else ""))


VARIANTS = {
    f"{dt}_d{d}": ReduceSegmentsSpec(dt, d, 4) for dt in DTYPES for d in SHIPPED_HEAD_SIZES
} | {f"{dt}_d{d}_early": ReduceSegmentsSpec(dt, d, 4, early_loads=True)
     for dt in DTYPES for d in SHIPPED_HEAD_SIZES}
GOLDEN_PERTURBATION = ("vector_width", {4: 2, 2: 4, 1: 2})     # see rocke.kernels.registry


def build(spec: ReduceSegmentsSpec) -> dsl.Kernel:
    d, vw = spec.head_size, spec.vector_width
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.workgroup_size, target=spec.target)
    segm_output = k.arg_ptr("segm_output", dsl.f32, readonly=True)
    segm_max = k.arg_ptr("segm_max", dsl.f32, readonly=True)
    segm_expsum = k.arg_ptr("segm_expsum", dsl.f32, readonly=True)
    out = k.arg_ptr("out", spec.out_dtype or spec.dtype, strided=True)   # out_stride_token/_head
    num_segments = k.arg_i32("num_segments")
    num_q_heads = k.arg_i32("num_q_heads")
    out_stride_token = k.arg_i32("out_stride_token")
    out_stride_head = k.arg_i32("out_stride_head")
    output_scale = k.arg_ptr("output_scale", dsl.f32, readonly=True) if spec.out_dtype else None

    token, head = k.block_id(0), k.block_id(1)
    lane = k.lane_id()
    row = token * num_q_heads + head
    stats = row * num_segments
    max_buf = segm_max.offset(stats).buffer(num_segments)
    sum_buf = segm_expsum.offset(stats).buffer(num_segments)
    o_buf = segm_output.offset(stats * d).buffer(num_segments * d)

    per_pass, unroll = spec.segments_per_pass, spec.pass_unroll

    def lane_slot():
        """(group, col): one lane group per segment, ``vw`` fp32 of its row per lane."""
        return (lane >> (spec.lanes_per_row.bit_length() - 1),
                (lane & (spec.lanes_per_row - 1)) * vw)

    def trip_loads(first, group, col):
        """Every load of one pass-2 trip from segment ``first``: o unmasked (an empty or
        past-the-end segment's o is dropped by the select in fold_trip, never used)."""
        return [(s, max_buf.load(s), _load_row_part(o_buf, s * d + col, vw))   # past the extent: 0
                for s in (first + (group + u * per_pass) for u in range(unroll))]

    # pass 1: M and L over all segments (ALGORITHM.md §5)
    neg_inf = k.const(-math.inf, dsl.f32)

    def scan_step(m, l, first):
        s = first + lane
        m_s = select(s < num_segments, max_buf.load(s), -math.inf)
        l_s = sum_buf.load(s)                    # past the extent: 0
        m_new = maximum(m, m_s)
        base = finite_base(m_new)
        return m_new, l * exp2(m - base, fast=True) + l_s * exp2(m_s - base, fast=True)

    zeros = k.zeros(dsl.f32, vw)

    def fold_trip(acc, loaded, base):
        """acc + Σ 2^(m_s - base)·o_s over one trip's loads (an empty segment adds nothing)."""
        for s, m_raw, o_s in loaded:
            m_s = select(s < num_segments, m_raw, -math.inf)
            weight = exp2(m_s - base, fast=True)
            acc = acc + select(m_s > -math.inf, o_s * (splat(weight, vw) if vw > 1 else weight), zeros)
        return acc

    early = None
    if spec.early_loads:
        # pass 1's first WAVE segments peeled, pass 2's first trip loaded right after them (one
        # wait, in issue order, covers pass 1's loads); the sched barrier in pass 1's loop keeps
        # LLVM from sinking the trip's loads below it, to the fold's uses after the loop
        m_lane, l_lane = scan_step(neg_inf, k.const(0.0, dsl.f32), 0)
        group, col = lane_slot()
        loaded = trip_loads(0, group, col)
        m_first = wave_max(m_lane)
        early = (m_first, fold_trip(zeros, loaded, finite_base(m_first)))
        rest = (WAVE, (m_lane, l_lane))
    else:
        rest = (0, (neg_inf, k.const(0.0, dsl.f32)))
    with k.for_range(rest[0], num_segments, WAVE, carry=rest[1]) as scan:
        if early is not None:
            k.sched_barrier(dsl.SchedMask.NONE)
        scan.yield_(*scan_step(*scan.carry, scan.index))
    m_lane, l_lane = scan.results
    m_row = wave_max(m_lane)
    base_row = finite_base(m_row)
    l_row = wave_sum(l_lane * exp2(m_lane - base_row, fast=True))

    # pass 2: acc = Σ_s 2^(m_s - M)·o_s, one lane group per segment
    if early is None:
        group, col = lane_slot()
        first, acc0 = 0, zeros
    else:       # the first trip's sum, from the first segments' max to M (0 if all were empty)
        m_first, acc_first = early
        scale = select(m_first > -math.inf, exp2(m_first - base_row, fast=True), 0.0)
        first, acc0 = per_pass * unroll, acc_first * (splat(scale, vw) if vw > 1 else scale)
    with k.for_range(first, num_segments, per_pass * unroll, carry=(acc0,)) as walk:
        (acc,) = walk.carry
        # every load of the unrolled passes first (one memory round trip for all)
        loaded = trip_loads(walk.index, group, col)
        # nothing crosses: LLVM's scheduler interleaved the loads with their uses, one wait each
        k.sched_barrier(dsl.SchedMask.NONE)
        walk.yield_(fold_trip(acc, loaded, base_row))
    (acc,) = walk.results
    step = spec.lanes_per_row
    while step < WAVE:
        acc = acc + shuffle_xor(acc, step)
        step *= 2

    # every segment empty (L = 0) -> 0; a NaN L (a NaN input in some segment) stays NaN (§2.2)
    inv_l = select(l_row == 0.0, 0.0, rcp(l_row))
    result = acc * (splat(inv_l, vw) if vw > 1 else inv_l)
    out_row = out.offset(token * out_stride_token + head * out_stride_head).buffer(d)
    if spec.out_dtype:
        result = quant.quantised(result, quant.inverse_output_scale(output_scale), spec.out_dtype)
    else:
        result = result.to(spec.dtype)
    ok = group == 0
    out_row.store(col, result, mask=ok if not spec.head_cols else ok & (col < spec.head_cols))
    return k


def _load_row_part(buf, index, width: int):
    """``width`` fp32 from ``index``, in loads of at most 16 bytes (a buffer access's most)."""
    if width <= 4:
        return buf.load(index, width=width)
    return concat(*(buf.load(index + i, width=4) for i in range(0, width, 4)))


def _shape(t) -> list[int]:
    return list(t.shape)


def kernel_args(spec: ReduceSegmentsSpec, segm_output, segm_max, segm_expsum, out,
                num_segments: int, output_scale=None) -> list:
    """The launch arguments, after cheap per-tensor checks (dtypes, shapes, strides, 32-bit
    limits). ``out`` may be a strided view with a unit stride on head_size."""
    import torch
    check_extent("num_segments", num_segments)
    if not isinstance(out, torch.Tensor) or out.dim() != 3:
        raise ValueError("out: must be a 3-D [total_q, num_q_heads, head_size] torch tensor")
    total_q, num_q_heads, out_cols = out.shape
    head_size = spec.head_size          # the partials' (padded) head size
    if out_cols != (spec.head_cols or spec.head_size):
        raise ValueError(f"out: head_size {out_cols} does not match the spec's "
                         f"{spec.head_cols or spec.head_size}")
    if out.dtype != torch_dtype(spec.out_dtype or spec.dtype):
        raise ValueError(f"out: dtype must be {torch_dtype(spec.out_dtype or spec.dtype)}, got {out.dtype}")
    if out.stride(2) != 1:
        raise ValueError(f"out: head_size must have unit stride, got strides {out.stride()}")
    check_extent("total_q", total_q)
    check_extent("num_q_heads", num_q_heads)
    want = {"segm_output": [total_q, num_q_heads, num_segments, head_size],
            "segm_max": [total_q, num_q_heads, num_segments],
            "segm_expsum": [total_q, num_q_heads, num_segments]}
    for name, t in (("segm_output", segm_output), ("segm_max", segm_max), ("segm_expsum", segm_expsum)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: must be a torch tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise ValueError(f"{name}: dtype must be torch.float32, got {t.dtype}")
        if _shape(t) != want[name]:
            raise ValueError(f"{name}: shape must be {want[name]} (from out and num_segments), "
                             f"got {_shape(t)}")
        if not t.is_contiguous():
            raise ValueError(f"{name}: must be contiguous, got strides {t.stride()}")
        if t.device != out.device:
            raise ValueError(f"{name}: on {t.device}, but out is on {out.device}")
    check_index_extent("segm_output", segm_output.numel())
    st, sh = out.stride(0), out.stride(1)
    if st < 0 or sh < 0:
        raise ValueError(f"out: strides must be non-negative, got {out.stride()}")
    last = (total_q - 1) * st + (num_q_heads - 1) * sh + out_cols
    if last >= I32_LIMIT:
        raise ValueError(f"out: spans {last} elements, beyond the kernel's 32-bit indexing")
    scale = quant.quant_args(spec, split=False, output_scale=output_scale) if spec.out_dtype else []
    if output_scale is not None and not spec.out_dtype:
        raise ValueError(f"output_scale: the kernel {spec.kernel_name} writes q's dtype and takes "
                         "no output scale")
    return [segm_output, segm_max, segm_expsum, out, num_segments, num_q_heads, st, sh, *scale]


def launch_geometry(spec: ReduceSegmentsSpec, total_q: int, num_q_heads: int):
    """(grid, block): one wave per (token, query head)."""
    check_extent("total_q", total_q)
    check_extent("num_q_heads", num_q_heads)
    return (total_q, num_q_heads, 1), (spec.workgroup_size, 1, 1)
