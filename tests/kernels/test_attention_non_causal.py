"""Non-causal prefill (vLLM's ``causal=False``: embedding and encoder-only models): a query sees
every key of its sequence, or with a window those within ``window_left`` on either side (vLLM's
symmetric window, ``(sw - 1, sw - 1)``) -- on the emulator against the fp32 reference
(ALGORITHM.md §12.11), 2D on both regimes and 3D, through the entry point and rocke.vllm."""
from __future__ import annotations

import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.unified_inputs import make_inputs, reference

ENCODER = [(20, 20), (9, 9), (33, 33)]       # vLLM's encoder layers: query_len == kv_len
MIXED = [(9, 40), (17, 17), (1, 70)]         # with context; a decode row is causal either way


def _ref(args, **kw):
    return reference(args, causal=False, window_size=args["window_size"], **kw)


@pytest.mark.parametrize("backend, seqs, dtype, bs, hq, hk, d, window", [
    ("2d", ENCODER, "f16", 16, 4, 2, 64, (-1, -1)),       # transposed-x8
    ("2d", ENCODER, "bf16", 16, 10, 2, 128, (-1, -1)),    # narrow, GQA 5
    ("2d", MIXED, "f16", 32, 8, 1, 64, (-1, -1)),
    ("2d", ENCODER, "f16", 16, 4, 2, 64, (5, 5)),         # symmetric window
    ("2d", MIXED, "bf16", 16, 8, 2, 128, (7, 7)),
    ("3d", [(3, 40), (8, 8)], "f16", 16, 8, 2, 64, (-1, -1)),
])
def test_non_causal_prefill_matches_the_reference(backend, seqs, dtype, bs, hq, hk, d, window):
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=bs + hq, causal=False)
    args["window_size"] = window
    record = au.run_unified_attention_torch(**args, backend=backend)
    spec = record.plan.specs[0]
    assert record.plan.path == backend and spec.non_causal and "_nc" in spec.kernel_name
    want = _ref(args)
    causal = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"],
                            args["seqused_k"], args["block_table"], args["softmax_scale"],
                            window_size=(window[0], 0) if window[0] >= 0 else window)
    assert (want - causal).abs().max() > 3 * attention_atol(dtype), "the mask changes nothing"
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err} ({spec.kernel_name})"


def test_rocke_vllm_runs_non_causal_prefill():
    from rocke.vllm import unified_attention
    args = make_inputs(ENCODER, hq=4, hk=2, d=64, bs=16, dtype="bf16", seed=2, causal=False)
    unified_attention(**args)
    assert (args["out"].float() - _ref(args)).abs().max() <= attention_atol("bf16")


def test_non_causal_decode_runs_the_causal_kernels():
    """A one-token query sees every key either way: decode batches keep their kernels."""
    args = make_inputs([(1, 37), (1, 5)], hq=4, hk=2, d=64, bs=16, dtype="f16", seed=3,
                       causal=False)
    record = au.run_unified_attention_torch(**args)
    assert not any(getattr(s, "non_causal", False) for s in record.plan.specs)
    assert (args["out"].float() - _ref(args)).abs().max() <= attention_atol("f16")


@pytest.mark.parametrize("change, match", [
    (dict(window_size=(5, 0)), r"window_size: non-causal, the window is symmetric"),
    (dict(window_size=(5, -1)), r"window_size: non-causal, the window is symmetric"),
    ("mm", r"mm_prefix_range: bidirectional ranges widen a causal mask"),
])
def test_what_non_causal_prefill_does_not_take_is_refused_before_launch(change, match):
    args = make_inputs(ENCODER, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=6, causal=False)
    extra = {}
    if change == "mm":
        extra["mm_prefix_range"] = torch.tensor([[[0, 4]]] * 3, dtype=torch.int32)
    else:
        args.update(change)
    before = args["out"].clone()
    with pytest.raises(ValueError, match=match):
        au.run_unified_attention_torch(**args, **extra)
    assert torch.equal(args["out"], before)
