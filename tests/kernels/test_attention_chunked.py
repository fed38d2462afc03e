"""vLLM's chunked attention (``chunk_lookback``, Llama 4's local layers): positions fall in chunks of
``(window_left + 1) // (chunk_lookback + 1)`` keys and a query sees the keys of its own chunk and
the ``chunk_lookback`` chunks before it, causal still applying -- on the emulator against the fp32
reference (ALGORITHM.md §12.9), 2D and 3D, through the entry point and rocke.vllm; inert without
a sliding window; refused by name where vLLM asserts."""
from __future__ import annotations

import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.unified_inputs import make_inputs, reference as _ref

PREFILL = [(9, 40), (17, 17), (1, 70)]       # context + prefill, pure prefill, decode


def test_the_reference_chunks_match_the_definition():
    """Each query's visible keys, by an independent loop over positions."""
    args = make_inputs([(12, 30)], hq=2, hk=1, d=64, bs=16, dtype="f16", seed=1)
    left, lookback = 11, 2                       # chunks of 4 keys
    ref = _ref(args, window_size=(left, 0), chunk_lookback=lookback)
    pages = args["block_table"][0, :2].long()
    k = args["k"][pages].float().reshape(-1, 1, 64)[:30, 0]
    v = args["v"][pages].float().reshape(-1, 1, 64)[:30, 0]
    for i in range(12):
        qpos = 18 + i
        first = (qpos // 4 - lookback) * 4
        keys = [j for j in range(30) if max(first, 0) <= j <= qpos]
        for h in range(2):
            s = (args["q"][i, h].float() @ k[keys].T) * args["softmax_scale"]
            want = s.softmax(-1) @ v[keys]
            torch.testing.assert_close(ref[i, h], want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend, dtype, bs, hq, hk, d, left, lookback", [
    ("2d", "f16", 16, 4, 2, 64, 15, 1),         # chunks of 8, one chunk back
    ("2d", "bf16", 16, 10, 2, 128, 11, 2),      # chunks of 4 (not a tile's multiple), GQA 5
    ("2d", "f16", 32, 8, 1, 64, 7, 0),          # a query's own chunk only
    ("3d", "bf16", 16, 8, 2, 64, 15, 1),
])
def test_chunked_attention_matches_the_reference(backend, dtype, bs, hq, hk, d, left, lookback):
    args = make_inputs(PREFILL, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=bs + hq)
    args["window_size"] = (left, 0)
    record = au.run_unified_attention_torch(**args, backend=backend, chunk_lookback=lookback)
    spec = record.plan.specs[0]
    assert record.plan.path == backend and spec.chunked and "_chunk" in spec.kernel_name
    want = _ref(args, window_size=(left, 0), chunk_lookback=lookback)
    windowed = _ref(args, window_size=(left, 0))
    assert (want - windowed).abs().max() > 3 * attention_atol(dtype), "the chunks change nothing"
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err} ({spec.kernel_name})"


def test_chunks_with_mm_ranges():
    """(causal AND chunk) OR in-range: the ranges widen each query's chunks."""
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=4)
    args["window_size"] = (15, 0)
    mm = torch.tensor([[[2, 30]], [[0, 12]], [[5, 60]]], dtype=torch.int32)
    au.run_unified_attention_torch(**args, chunk_lookback=1, mm_prefix_range=mm)
    want = _ref(args, window_size=(15, 0), chunk_lookback=1, mm_prefix_range=mm)
    assert (args["out"].float() - want).abs().max() <= attention_atol("f16")


def test_rocke_vllm_runs_chunked_attention_and_a_repeat_hits():
    from rocke.vllm import unified_attention
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="bf16", seed=2)
    args["window_size"] = (15, 0)
    for _ in range(2):
        args["out"].zero_()
        unified_attention(**args, chunk_lookback=1)
        want = _ref(args, window_size=(15, 0), chunk_lookback=1)
        assert (args["out"].float() - want).abs().max() <= attention_atol("bf16")


def test_without_a_window_chunk_lookback_changes_nothing():
    """vLLM turns chunking off without a window (chunk_lookback = -1): so does rocke."""
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=5)
    record = au.run_unified_attention_torch(**args, chunk_lookback=3)
    assert not any(getattr(s, "chunked", False) for s in record.plan.specs)
    assert (args["out"].float() - _ref(args)).abs().max() <= attention_atol("f16")


@pytest.mark.parametrize("value, match", [
    (2.0, "chunk_lookback: must be -1 .off. or an int >= 0"),
    (True, "chunk_lookback: must be -1 .off. or an int >= 0"),
    (-2, "chunk_lookback: must be -1 .off. or an int >= 0"),
    (4, "chunk_lookback: 4 needs a sliding window of at least"),     # window of 4 keys, 5 chunks
])
def test_a_bad_chunk_lookback_is_refused_before_launch(value, match):
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=6)
    args["window_size"] = (3, 0)
    before = args["out"].clone()
    with pytest.raises(ValueError, match=match):
        au.run_unified_attention_torch(**args, chunk_lookback=value)
    assert torch.equal(args["out"], before)
