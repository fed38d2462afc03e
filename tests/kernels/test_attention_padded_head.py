"""Head sizes the kernels do not have (vLLM runs any: its kernels pad to a power of two): a
multiple of 8 below 512 runs on the next kernel size up, q, the caches and out holding only their
own columns (ALGORITHM.md §11.3) -- on the emulator against the fp32 reference, both 2D regimes
and 3D, with quantized caches, through the entry point and rocke.vllm; out's padding columns stay
untouched; sizes that do not fit are refused before launch."""
from __future__ import annotations

import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.test_attention_inline_scales import _setup as token_scale_setup
from tests.kernels.test_vllm_033_contract import no_launch
from tests.kernels.unified_inputs import make_inputs, reference

SENTINEL = 7.0


def _out_in_wider_rows(args):
    """out as the first head_size columns of wider rows (the rest holds SENTINEL)."""
    total_q, hq, d = args["out"].shape
    wide = torch.full((total_q, hq, d + 24), SENTINEL, dtype=args["out"].dtype)
    args["out"] = wide[..., :d]
    return wide


@pytest.mark.parametrize("backend, seqs, dtype, d, hq, hk, kernel_d", [
    ("2d", [(5, 40), (9, 9)], "f16", 96, 4, 2, 128),        # transposed-x8
    ("2d", [(17, 40)], "bf16", 96, 4, 2, 128),              # narrow
    ("3d", [(1, 70), (1, 23)], "f16", 96, 4, 2, 128),
    ("2d", [(7, 50)], "bf16", 80, 8, 2, 128),
    ("2d", [(7, 50)], "f16", 40, 4, 4, 64),
    ("3d", [(1, 50), (1, 9)], "bf16", 192, 4, 1, 256),
    ("2d", [(3, 30)], "f16", 384, 4, 2, 512),
])
def test_a_padded_head_matches_the_reference(backend, seqs, dtype, d, hq, hk, kernel_d):
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=16, dtype=dtype, seed=d + hq)
    wide = _out_in_wider_rows(args)
    record = au.run_unified_attention_torch(**args, backend=backend)
    assert record.plan.path == backend
    for spec in record.plan.specs:
        assert spec.head_size == kernel_d and spec.head_cols == d and f"_hc{d}" in spec.kernel_name
    err = (args["out"].float() - reference(args)).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err}"
    assert bool((wide[..., d:] == SENTINEL).all()), "a padding column of out was written"


@pytest.mark.parametrize("kind, inline", [("i8tok", None), ("fp8tok", "HND")])
def test_a_padded_head_reads_per_token_head_caches(kind, inline):
    from rocke.vllm import unified_attention
    args, want = token_scale_setup([(5, 40), (1, 23)], kind, inline or "NHD", d=96, seed=2)
    if not inline:      # the plain layout: the codes and scales as separate tensors
        k, v = args["k"][..., :96].contiguous(), args["v"][..., :96].contiguous()
        args.update(k=k, v=v, k_scale_cache=args["k_scale_cache"].contiguous(),
                    v_scale_cache=args["v_scale_cache"].contiguous())
    unified_attention(**args)
    assert (args["out"].float() - want).abs().max() <= attention_atol("f16")


@pytest.mark.parametrize("d, match", [
    (100, r"^q: head_size must be one of \(64, 128, 256, 512\), or a multiple of 8 below 512"),
    (520, r"^q: head_size must be one of \(64, 128, 256, 512\), or a multiple of 8 below 512"),
])
def test_head_sizes_that_do_not_fit_are_refused_before_launch(monkeypatch, d, match):
    no_launch(monkeypatch)
    args = make_inputs([(3, 20)], hq=4, hk=2, d=d, bs=16, dtype="f16", seed=1)
    before = args["out"].clone()
    with pytest.raises(ValueError, match=match):
        au.run_unified_attention_torch(**args)
    assert torch.equal(args["out"], before)


@pytest.mark.parametrize("backend, dtype", [("2d", "bf16"), ("3d", "f16")])
def test_head_size_512_matches_the_reference(backend, dtype):
    """d512 (vLLM's grid has it): d256's narrow path with twice the K-steps, 2 warps x 16 rows."""
    seqs = [(5, 40), (9, 9)] if backend == "2d" else [(1, 70), (1, 23)]
    args = make_inputs(seqs, hq=4, hk=2, d=512, bs=16, dtype=dtype, seed=5)
    record = au.run_unified_attention_torch(**args, backend=backend)
    assert record.plan.specs[0].head_size == 512 and record.plan.spill_fallback is None
    err = (args["out"].float() - reference(args)).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err}"
