"""vLLM's ``mm_prefix_clamp_sliding_window`` (Gemma 4): bidirectional ``mm_prefix_range`` ranges
clamped by the sliding window -- a query still sees a range's keys after it, but none older than
its window -- on the emulator against the fp32 reference (ALGORITHM.md §12.8), 2D and 3D, through
the entry point and rocke.vllm. Without ranges or a window the flag changes nothing."""
from __future__ import annotations

import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from tests.kernels.unified_inputs import make_inputs, reference as _ref

PREFILL = [(9, 20), (6, 6), (1, 30)]
# ranges reaching well behind the window (3 keys) of their queries: clamping changes the result
MM = [[[2, 18], [0, 0]], [[0, 5], [5, 3]], [[3, 29], [-1, -1]]]


def test_the_reference_clamp_matches_the_definition():
    """(causal AND window) OR (range AND key inside the window), by an independent mask."""
    args = make_inputs([(9, 20)], hq=2, hk=1, d=64, bs=16, dtype="f16", seed=3)
    mm = torch.tensor([MM[0]], dtype=torch.int32)
    left = 3
    ref = _ref(args, window_size=(left, 0), mm_prefix_range=mm, mm_clamp_window=True)
    pages = args["block_table"][0, :2].long()
    k = args["k"][pages].float().reshape(-1, 1, 64)[:20]
    v = args["v"][pages].float().reshape(-1, 1, 64)[:20]
    q = args["q"].float()
    qpos = torch.arange(11, 20)[:, None]
    kpos = torch.arange(20)[None, :]
    in_window = (kpos >= qpos - left)
    in_range = (qpos >= 2) & (qpos <= 18) & (kpos >= 2) & (kpos <= 18)
    visible = ((kpos <= qpos) & in_window) | (in_range & in_window)
    scores = torch.einsum("qhd,khd->hqk", q, k.expand(-1, 2, -1)) * args["softmax_scale"]
    weights = scores.masked_fill(~visible[None], float("-inf")).softmax(-1)
    want = torch.einsum("hqk,khd->qhd", weights, v.expand(-1, 2, -1))
    torch.testing.assert_close(ref, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend, dtype, bs, hq, hk, d", [
    ("2d", "bf16", 16, 10, 2, 128),         # GQA 5
    ("2d", "f16", 16, 4, 2, 64),
    ("3d", "f16", 16, 8, 2, 64),
])
def test_clamped_ranges_match_the_reference(backend, dtype, bs, hq, hk, d):
    args = make_inputs(PREFILL, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=bs + hq)
    mm = torch.tensor(MM, dtype=torch.int32)
    args["window_size"] = (3, 0)
    record = au.run_unified_attention_torch(**args, backend=backend, mm_prefix_range=mm,
                                            mm_prefix_clamp_sliding_window=True)
    spec = record.plan.specs[0]
    assert record.plan.path == backend and spec.mm_clamp_window and "_mmcw" in spec.kernel_name
    want = _ref(args, window_size=(3, 0), mm_prefix_range=mm, mm_clamp_window=True)
    unclamped = _ref(args, window_size=(3, 0), mm_prefix_range=mm)
    assert (want - unclamped).abs().max() > 3 * attention_atol(dtype), "the clamp has no effect"
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err} ({spec.kernel_name})"


def test_rocke_vllm_runs_the_clamp():
    from rocke.vllm import unified_attention
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="bf16", seed=2)
    args["window_size"] = (3, 0)
    mm = torch.tensor(MM, dtype=torch.int32)
    unified_attention(**args, mm_prefix_range=mm, mm_prefix_clamp_sliding_window=True)
    want = _ref(args, window_size=(3, 0), mm_prefix_range=mm, mm_clamp_window=True)
    assert (args["out"].float() - want).abs().max() <= attention_atol("bf16")


@pytest.mark.parametrize("window, ranges", [((-1, -1), True), ((3, 0), False)])
def test_without_ranges_or_a_window_the_flag_changes_nothing(window, ranges):
    """vLLM passes the flag on every call of a Gemma 4 layer: inert where it has nothing to
    clamp, the kernels those calls run are the ones without it."""
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=5)
    args["window_size"] = window
    mm = torch.tensor(MM, dtype=torch.int32) if ranges else None
    record = au.run_unified_attention_torch(**args, mm_prefix_range=mm,
                                            mm_prefix_clamp_sliding_window=True)
    assert not any(getattr(s, "mm_clamp_window", False) for s in record.plan.specs)
    want = _ref(args, window_size=window, mm_prefix_range=mm)
    assert (args["out"].float() - want).abs().max() <= attention_atol("f16")


def test_a_spec_clamps_only_ranges_and_a_window():
    with pytest.raises(ValueError, match="^mm_clamp_window: clamps the mm ranges"):
        a2.UnifiedAttention2DSpec(mm_clamp_window=True, mm_prefix_ranges=2)
    assert not a2.supports_tiled_2d(mm_clamp_window=True, sliding_window=True)
    assert a2.supports_tiled_2d(mm_clamp_window=True, sliding_window=True, mm_prefix_ranges=2,
                                interval_mask=False)
