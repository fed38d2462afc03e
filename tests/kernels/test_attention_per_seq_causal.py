"""vLLM 0.33's per-sequence ``causal`` tensor (a diffusion model's batch: prompt sequences causal,
denoising ones bidirectional): the kernel reads each sequence's flag and picks its newest visible
key (ALGORITHM.md §12.12) -- on the emulator against the fp32 reference, both 2D regimes, with
and without a window, through the entry point and rocke.vllm; flags of 1 and 4 bytes; decode
batches keep their kernels; what the flags do not combine with is refused before launch."""
from __future__ import annotations

import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.test_vllm_033_contract import no_launch
from tests.kernels.unified_inputs import make_inputs, reference

SEQS = [(20, 20), (9, 40), (17, 17), (12, 12)]      # encoder-like and with context
FLAGS = [0, 1, 0, 1]


def _flags(values, dtype):
    return torch.tensor(values, dtype=dtype)


@pytest.mark.parametrize("dtype, hq, hk, d, window, flag_dtype", [
    ("f16", 4, 2, 64, (-1, -1), torch.int32),        # transposed-x8
    ("bf16", 10, 2, 128, (-1, -1), torch.bool),      # narrow, GQA 5, one-byte flags
    ("f16", 4, 2, 64, (5, 5), torch.uint8),          # vLLM's symmetric window
    ("bf16", 8, 2, 128, (7, 0), torch.int32),        # a causal-form window
])
def test_mixed_flags_match_the_reference(dtype, hq, hk, d, window, flag_dtype):
    args = make_inputs(SEQS, hq=hq, hk=hk, d=d, bs=16, dtype=dtype, seed=hq + d)
    args["window_size"] = window
    args["causal"] = _flags(FLAGS, flag_dtype)
    record = au.run_unified_attention_torch(**args)
    (spec,) = record.plan.specs
    width = 1 if flag_dtype != torch.int32 else 4
    assert record.plan.path == "2d" and spec.per_seq_causal == width
    assert f"_psc{width}" in spec.kernel_name
    sym = (window[0], window[0]) if window[0] >= 0 else window
    want = reference(args, causal=FLAGS, window_size=sym)
    for other in ([1] * 4, [0] * 4):         # each uniform answer differs: the flags decide
        wrong = reference(args, causal=other, window_size=sym)
        assert (want - wrong).abs().max() > 3 * attention_atol(dtype)
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err} ({spec.kernel_name})"


def test_rocke_vllm_runs_mixed_flags():
    from rocke.vllm import unified_attention
    args = make_inputs(SEQS, hq=4, hk=1, d=64, bs=32, dtype="bf16", seed=4)
    args["causal"] = _flags([3, 0, 0, 1], torch.int32)       # any nonzero flag reads as causal
    unified_attention(**args)
    want = reference(args, causal=[1, 0, 0, 1])
    assert (args["out"].float() - want).abs().max() <= attention_atol("bf16")


def test_flags_on_a_decode_batch_keep_the_decode_kernels():
    """A one-token query sees the same keys causal or not: the flags are not read."""
    args = make_inputs([(1, 37), (1, 5)], hq=4, hk=2, d=64, bs=16, dtype="f16", seed=3)
    args["causal"] = _flags([0, 1], torch.int32)
    record = au.run_unified_attention_torch(**args)
    assert not any(getattr(s, "per_seq_causal", 0) for s in record.plan.specs)
    assert (args["out"].float() - reference(args)).abs().max() <= attention_atol("f16")


@pytest.mark.parametrize("flags, extra, error, match", [
    (_flags([0, 1, 0], torch.int32), {}, ValueError, r"causal: a per-sequence causal tensor "
     r"must be \[num_seqs = 4\]"),
    (_flags([0, 1, 0, 1], torch.float32), {}, ValueError, r"causal: .* of bool / int8"),
    (_flags([0, 1, 0, 1], torch.int64), {}, ValueError, r"causal: .* of bool / int8"),
    (_flags([0, 0, 1, 1, 0, 0, 1, 1], torch.int32)[::2], {}, ValueError,
     r"causal: must be contiguous"),
    (_flags([0, 1, 0, 1], torch.int32), dict(window_size=(5, 3)), ValueError,
     r"window_size"),
    (_flags([0, 1, 0, 1], torch.int32), "mm", NotImplementedError,
     r"causal: per-sequence causal flags with mm_prefix_range"),
    (_flags([0, 1, 0, 1], torch.int32), "rswa", NotImplementedError,
     r"causal: per-sequence causal flags with .*R-SWA"),
])
def test_what_the_flags_do_not_take_is_refused_before_launch(monkeypatch, flags, extra, error,
                                                              match):
    no_launch(monkeypatch)
    args = make_inputs(SEQS, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=6)
    args["causal"] = flags
    more = {}
    if extra == "mm":
        more["mm_prefix_range"] = torch.tensor([[[0, 4]]] * 4, dtype=torch.int32)
    elif extra == "rswa":
        args["window_size"] = (7, 0)
        more.update(rswa_prefix_lens=torch.tensor([3] * 4, dtype=torch.int32), rswa_window=4)
    else:
        args.update(extra)
    before = args["out"].clone()
    with pytest.raises(error, match=match):
        au.run_unified_attention_torch(**args, **more)
    assert torch.equal(args["out"], before)
