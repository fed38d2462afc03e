"""Non-finite values. NaN in, NaN out, on every path (ALGORITHM.md §2.2): a query row whose input holds a NaN comes
out as a NaN row from the 2D kernel, from the 3D split-KV kernel through `reduce_segments` (with
the caller's workspaces), and as the fp8 NaN code with an fp8 output; the other rows stay right.
A row whose every key is masked is still 0 (ALGORITHM.md §2.1), which the reference tells apart
from a NaN row by its mask, not by `nan_to_num`."""
from __future__ import annotations

import math

import pytest
import torch

from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.attention_unified import run_unified_attention_torch
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.unified_inputs import make_inputs

SEQS = [(1, 40), (1, 75), (3, 33)]       # two decodes and a short prefill
NAN_TOKEN, NAN_HEAD = 1, 2


def _inputs():
    a = make_inputs(SEQS, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=11)
    a["q"][NAN_TOKEN, NAN_HEAD, 5] = math.nan
    return a


def _reference(a, **extra):
    return ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                          a["block_table"], a["softmax_scale"], causal=True, **extra)


def _run(a, backend, **extra):
    if backend == "3d":
        total_q, hq, d = a["q"].shape
        segments = 4
        extra.update(num_segments=segments, segm_workspaces=(
            torch.full((total_q, hq, segments, d), math.nan),
            torch.full((total_q, hq, segments), math.nan),
            torch.full((total_q, hq, segments), math.nan)))
    run_unified_attention_torch(**a, backend=backend, **extra)
    return a["out"]


def _nan_rows(t):
    return torch.isnan(t.float()).any(dim=-1)


def test_the_reference_keeps_a_nan_row_and_zeroes_a_fully_masked_one():
    a = _inputs()
    want = _reference(a)
    assert _nan_rows(want).tolist() == [[t == NAN_TOKEN and h == NAN_HEAD for h in range(4)]
                                        for t in range(want.shape[0])]
    assert torch.isnan(want[NAN_TOKEN, NAN_HEAD]).all()
    # queries before the first key (kv_len < q_len): every key masked -> 0, not NaN
    a = make_inputs([(4, 2)], hq=2, hk=1, d=64, bs=16, seed=3)
    masked_all = _reference(a)
    assert not torch.isnan(masked_all).any()
    assert torch.equal(masked_all[:2], torch.zeros_like(masked_all[:2]))

@pytest.mark.parametrize("backend", ["2d", "3d"])
def test_a_nan_query_gives_a_nan_row_on_every_path(backend):
    a = _inputs()
    want = _reference(a)
    out = _run(a, backend)
    assert torch.equal(_nan_rows(out), _nan_rows(want)), f"{backend}: NaN rows differ"
    assert torch.isnan(out[NAN_TOKEN, NAN_HEAD]).all()
    ok = ~_nan_rows(want)
    err = (out.float()[ok] - want[ok]).abs().max().item()
    assert err <= attention_atol("f16"), err


@pytest.mark.parametrize("backend", ["2d", "3d"])
def test_a_nan_row_is_stored_as_fp8_nan_not_saturated(backend):
    a = _inputs()
    scale = torch.tensor([0.02], dtype=torch.float32)
    a["out"] = torch.zeros(a["q"].shape, dtype=torch.float8_e4m3fnuz)
    want = _reference(a, output_scale=scale)
    out = _run(a, backend, output_scale=scale)
    assert torch.isnan(want[NAN_TOKEN, NAN_HEAD]).all()
    row = out[NAN_TOKEN, NAN_HEAD].view(torch.uint8)
    assert (row == 0x80).all(), f"{backend}: NaN row stored as {out[NAN_TOKEN, NAN_HEAD].float()}"
    ok = ~_nan_rows(want)
    assert not torch.isnan(out.float()[ok]).any()


@pytest.mark.parametrize("backend", ["2d", "3d"])
def test_a_minus_inf_sink_is_a_head_without_a_sink(backend):
    """-inf is a valid sink logit (vLLM passes it for heads without one): accepted, and the
    output equals the reference's, which for those heads is attention without a sink."""
    a = make_inputs(SEQS, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=5)
    sinks = torch.tensor([-math.inf, 1.5, -math.inf, -0.5])
    a["sinks"] = sinks
    want = ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                          a["block_table"], a["softmax_scale"], causal=True, sinks=sinks)
    out = _run(a, backend)
    assert not torch.isnan(out).any()
    assert (out.float() - want).abs().max().item() <= attention_atol("f16")
