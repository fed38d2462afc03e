"""reduce_segments in the emulator against merges computed here in torch (fp64), independently of
the kernel: from real split softmax partials (the result must be softmax(s) @ V) and from raw
workspace values (the §5 formula), with empty segments, all-empty rows and strided outputs."""

import math

import pytest
import torch

from rocke.compiler import compile_ir
from rocke.kernels.common.checks import torch_dtype
from rocke.kernels.gfx942 import reduce_segments as rs
from rocke.runtime import launch

LOG2E = 1.4426950408889634
# one output ulp near 1 (the kernel's fp32 math is ~1e-6 off the fp64 merge before rounding)
OUT_ATOL = {"f16": 2 ** -10, "bf16": 2 ** -7}

_compiled = {}


def _run(spec, segm_output, segm_max, segm_expsum, out, num_segments):
    if spec not in _compiled:
        kern = rs.build(spec)
        _compiled[spec] = compile_ir(kern.ir(), name=kern.name)
    args = rs.kernel_args(spec, segm_output, segm_max, segm_expsum, out, num_segments)
    grid, block = rs.launch_geometry(spec, out.shape[0], out.shape[1])
    return launch(_compiled[spec], grid, block, args)


def _partials_from_scores(scores, values, bounds):
    """Split-KV partials in the log2 domain (the contract's meaning) for key ranges ``bounds``."""
    rows, _ = scores.shape
    d = values.shape[-1]
    ns = len(bounds)
    m = torch.full((rows, ns), -math.inf, dtype=torch.float64)
    l = torch.zeros(rows, ns, dtype=torch.float64)
    o = torch.zeros(rows, ns, d, dtype=torch.float64)
    s2 = scores * LOG2E
    for j, (lo, hi) in enumerate(bounds):
        if hi <= lo:
            continue       # an empty segment: m = -inf, l = 0, o = 0
        m[:, j] = s2[:, lo:hi].max(dim=1).values
        p = torch.exp2(s2[:, lo:hi] - m[:, j:j + 1])
        l[:, j] = p.sum(dim=1)
        o[:, j] = torch.einsum("rk,rkd->rd", p, values[:, lo:hi])
    return m, l, o


@pytest.mark.parametrize("name", sorted(rs.VARIANTS))
def test_merge_equals_softmax_over_all_keys(name):
    spec = rs.VARIANTS[name]
    total_q, hq, d, kv = 3, 2, spec.head_size, 45
    gen = torch.Generator().manual_seed(len(name))
    scores = torch.randn(total_q * hq, kv, generator=gen, dtype=torch.float64) * 3
    values = torch.randn(total_q * hq, kv, d, generator=gen, dtype=torch.float64)
    # 7 segments: ragged, two empty (one in the middle, one at the end)
    bounds = [(0, 9), (9, 10), (10, 10), (10, 30), (30, 38), (38, 45), (45, 45)]
    m, l, o = _partials_from_scores(scores, values, bounds)
    ns = len(bounds)
    segm_max = m.float().reshape(total_q, hq, ns).contiguous()
    segm_expsum = l.float().reshape(total_q, hq, ns).contiguous()
    segm_output = o.float().reshape(total_q, hq, ns, d).contiguous()
    out = torch.full((total_q, hq, d), 5.0, dtype=torch_dtype(spec.dtype))
    _run(spec, segm_output, segm_max, segm_expsum, out, ns)
    want = torch.einsum("rk,rkd->rd", torch.softmax(scores, dim=1), values).reshape(total_q, hq, d)
    err = (out.double() - want).abs().max().item()
    assert err <= OUT_ATOL[spec.dtype] * max(1.0, want.abs().max().item()), err


def _formula_merge(segm_output, segm_max, segm_expsum):
    """ALGORITHM.md §5 in fp64, written out directly: M, weights, L, O; L = 0 rows are 0."""
    m = segm_max.double()
    big_m = m.max(dim=-1, keepdim=True).values
    w = torch.where(m == -math.inf, torch.zeros_like(m), torch.exp2(m - big_m))
    big_l = (w * segm_expsum.double()).sum(-1)
    o = (w[..., None] * torch.nan_to_num(segm_output.double()) * (m != -math.inf)[..., None]).sum(-2)
    return torch.where(big_l[..., None] > 0, o / big_l[..., None].clamp_min(1e-300), torch.zeros_like(o))


@pytest.mark.parametrize("dtype, head_size, num_segments", [("f16", 128, 67), ("bf16", 64, 5)])
def test_empty_segments_and_rows_strided_out(dtype, head_size, num_segments):
    spec = rs.ReduceSegmentsSpec(dtype, head_size, 4)
    total_q, hq, d = 2, 3, head_size
    gen = torch.Generator().manual_seed(num_segments)
    segm_max = torch.randn(total_q, hq, num_segments, generator=gen) * 4
    segm_expsum = torch.rand(total_q, hq, num_segments, generator=gen) * 3 + 1
    segm_output = torch.randn(total_q, hq, num_segments, d, generator=gen)
    empty = torch.rand(total_q, hq, num_segments, generator=gen) < 0.3
    segm_max[empty] = -math.inf
    segm_expsum[empty] = 0
    segm_output[empty] = float("nan")        # never read: an empty segment contributes nothing
    segm_max[1, 2] = -math.inf               # a row whose every segment is empty writes 0
    segm_expsum[1, 2] = 0
    segm_output[1, 2] = float("nan")
    # out: a strided view (token stride padded) inside a guarded buffer
    backing = torch.full((total_q, hq + 1, d), 9.0, dtype=torch_dtype(dtype))
    out = backing[:, :hq]
    _run(spec, segm_output, segm_max, segm_expsum, out, num_segments)
    want = _formula_merge(segm_output, segm_max, segm_expsum)
    assert not torch.isnan(out).any()
    assert torch.equal(out[1, 2], torch.zeros(d, dtype=out.dtype))
    err = (out.double() - want).abs().max().item()
    assert err <= OUT_ATOL[dtype] * max(1.0, want.abs().max().item()), err
    assert torch.equal(backing[:, hq], torch.full((total_q, d), 9.0, dtype=out.dtype))


def test_kernel_args_reject_mismatched_workspace():
    spec = rs.VARIANTS["f16_d64"]
    out = torch.zeros(2, 3, 64, dtype=torch.float16)
    good = (torch.zeros(2, 3, 4, 64), torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    assert len(rs.kernel_args(spec, *good, out, 4)) == 8
    with pytest.raises(ValueError, match="segm_max: shape"):
        rs.kernel_args(spec, good[0], torch.zeros(2, 3, 5), good[2], out, 4)
    with pytest.raises(ValueError, match="segm_output: dtype"):
        rs.kernel_args(spec, good[0].half(), *good[1:], out, 4)
    with pytest.raises(ValueError, match="out: head_size"):
        rs.kernel_args(spec, *good, torch.zeros(2, 3, 128, dtype=torch.float16), 4)
    with pytest.raises(ValueError, match="out: dtype"):
        rs.kernel_args(spec, *good, out.bfloat16(), 4)
    with pytest.raises(ValueError, match="num_segments"):
        rs.kernel_args(spec, *good, out, 0)


def test_spec_rules_name_the_field():
    with pytest.raises(ValueError, match="dtype"):
        rs.ReduceSegmentsSpec("f32", 64, 4)
    with pytest.raises(ValueError, match="head_size"):
        rs.ReduceSegmentsSpec("f16", 96, 4)
    with pytest.raises(ValueError, match="vector_width"):
        rs.ReduceSegmentsSpec("f16", 128, 1)      # 128 lanes per row: more than a wave


@pytest.mark.parametrize("num_segments, trips", [(16, 2), (32, 2), (36, 3), (70, 5)])
def test_pass_two_loads_issue_together(num_segments, trips):
    """d128, 2 segments per pass, 16 passes per loop step: a wave waits on memory once per
    64-segment step of pass 1 and once per loop step of pass 2 (16 and 32 segments: 1 + 1; 36:
    1 + 2; 70: 2 + 3, the last steps partly past the end), not once per pass or per load (exact
    emulator counts), and the merge is right."""
    spec = rs.ReduceSegmentsSpec("f16", 128, 4)
    assert spec.segments_per_pass * spec.pass_unroll == 32
    gen = torch.Generator().manual_seed(num_segments)
    m = torch.randn(1, 1, num_segments, generator=gen) * 4
    m[0, 0, 3] = -math.inf                               # one empty segment: its o is garbage
    l = torch.rand(1, 1, num_segments, generator=gen) + 0.5
    l[0, 0, 3] = 0.0
    o = torch.randn(1, 1, num_segments, 128, generator=gen)
    o[0, 0, 3] = math.nan
    out = torch.zeros(1, 1, 128, dtype=torch.float16)
    if spec not in _compiled:
        kern = rs.build(spec)
        _compiled[spec] = compile_ir(kern.ir(), name=kern.name)
    report = launch(_compiled[spec], (1, 1, 1), (64, 1, 1),
                    rs.kernel_args(spec, o, m, l, out, num_segments), profile=True)
    assert report.profile.wg_vm_round_trips.tolist() == [trips]
    w = torch.exp2(m.double() - m.double().max())
    live = torch.arange(num_segments) != 3
    want = (w[0, 0, live, None] * o.double()[0, 0, live]).sum(0) / (w * l.double())[0, 0].sum()
    torch.testing.assert_close(out[0, 0].double(), want, atol=OUT_ATOL["f16"], rtol=2 ** -10)


def _round_trips_and_out(spec, o, m, l):
    out = torch.zeros(1, 1, spec.head_size, dtype=torch_dtype(spec.dtype))
    if spec not in _compiled:
        kern = rs.build(spec)
        _compiled[spec] = compile_ir(kern.ir(), name=kern.name)
    report = launch(_compiled[spec], (1, 1, 1), (64, 1, 1),
                    rs.kernel_args(spec, o, m, l, out, m.shape[-1]), profile=True)
    return report.profile.wg_vm_round_trips.tolist()[0], out


@pytest.mark.parametrize("head_size, num_segments, empty_first", [
    (256, 5, 0), (256, 43, 43), (256, 70, 64), (128, 36, 0), (64, 100, 3)])
def test_early_loads_wait_once_less(head_size, num_segments, empty_first):
    """early_loads: pass 2's first trip issues with pass 1's first step, so a wave waits on
    memory once less than the same merge without it (exact emulator counts), and the merge is
    the §5 formula's -- also where the first ``empty_first`` segments are empty (a window: the
    first trip folds at -inf and must add nothing; every segment empty: a zero row)."""
    plain = rs.ReduceSegmentsSpec("f16", head_size, 4)
    early = rs.ReduceSegmentsSpec("f16", head_size, 4, early_loads=True)
    assert early.kernel_name == plain.kernel_name + "_early"
    gen = torch.Generator().manual_seed(num_segments + empty_first)
    m = torch.randn(1, 1, num_segments, generator=gen) * 4
    l = torch.rand(1, 1, num_segments, generator=gen) + 0.5
    o = torch.randn(1, 1, num_segments, head_size, generator=gen)
    m[..., :empty_first] = -math.inf
    l[..., :empty_first] = 0.0
    o[..., :empty_first, :] = math.nan                   # never read: an empty segment adds nothing
    trips_plain, _ = _round_trips_and_out(plain, o, m, l)
    trips_early, out = _round_trips_and_out(early, o, m, l)
    assert trips_early == trips_plain - 1
    want = _formula_merge(o, m, l)[0, 0]
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out[0, 0].double(), want, atol=OUT_ATOL["f16"], rtol=2 ** -10)


@pytest.mark.parametrize("field, num_segments", [("m", 5), ("o", 43), ("l", 70)])
def test_early_loads_keep_nan_in_nan_out(field, num_segments):
    """A NaN partial (max, sum or output; in the early trip, or past pass 1's first step) makes
    the row NaN with early_loads exactly where it does without (ALGORITHM.md §2.2)."""
    gen = torch.Generator().manual_seed(num_segments)
    parts = {"m": torch.randn(1, 1, num_segments, generator=gen) * 4,
             "l": torch.rand(1, 1, num_segments, generator=gen) + 0.5,
             "o": torch.randn(1, 1, num_segments, 128, generator=gen)}
    parts[field][0, 0, 3 if num_segments < 64 else 66] = math.nan
    nans = [torch.isnan(_round_trips_and_out(rs.ReduceSegmentsSpec("f16", 128, 4, early_loads=e),
                                             parts["o"], parts["m"], parts["l"])[1])
            for e in (False, True)]
    assert nans[0].all() and torch.equal(nans[0], nans[1])


def test_early_loads_refuse_a_trip_beyond_pass_ones_first_step(monkeypatch):
    """The early trip folds at the max of pass 1's first 64 segments, so it must lie inside
    them: a trip of 128 segments is refused by the spec, naming the field."""
    monkeypatch.setattr(rs, "SEGMENTS_PER_TRIP", 128)
    assert rs.ReduceSegmentsSpec("f16", 256, 4).pass_unroll == 128
    with pytest.raises(ValueError, match=r"^early_loads: pass 2's trip of 128 segments exceeds"):
        rs.ReduceSegmentsSpec("f16", 256, 4, early_loads=True)
