"""vLLM's R-SWA (``rswa_prefix_lens`` with ``rswa_window``): a key is visible to a query when it
lies before its sequence's prefix length or fewer than ``rswa_window`` positions behind the query
(causal still applying; the window of ``window_size`` is then not applied, as in vLLM) -- on the
emulator against the fp32 reference (ALGORITHM.md §12.10), 2D and 3D, through the entry point and
rocke.vllm; what it does not combine with is refused by name before launch."""
from __future__ import annotations

import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.unified_inputs import make_inputs, reference as _ref

PREFILL = [(9, 40), (17, 17), (1, 70)]       # context + prefill, pure prefill, decode
PREFIX = [5, 0, 40]                          # per sequence; 40 reaches past a decode's window


def test_the_reference_r_swa_matches_the_definition():
    args = make_inputs([(6, 30)], hq=2, hk=1, d=64, bs=16, dtype="f16", seed=1)
    prefix, window = 7, 5
    ref = _ref(args, rswa_prefix_lens=torch.tensor([prefix], dtype=torch.int32),
               rswa_window=window)
    pages = args["block_table"][0, :2].long()
    k = args["k"][pages].float().reshape(-1, 1, 64)[:30, 0]
    v = args["v"][pages].float().reshape(-1, 1, 64)[:30, 0]
    for i in range(6):
        qpos = 24 + i
        keys = [j for j in range(30) if j <= qpos and (j < prefix or qpos - j < window)]
        for h in range(2):
            s = (args["q"][i, h].float() @ k[keys].T) * args["softmax_scale"]
            torch.testing.assert_close(ref[i, h], s.softmax(-1) @ v[keys], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend, dtype, bs, hq, hk, d, window, window_size", [
    ("2d", "f16", 16, 4, 2, 64, 8, (-1, -1)),
    ("2d", "bf16", 16, 10, 2, 128, 5, (20, 0)),     # window_size not applied under R-SWA
    ("3d", "f16", 16, 8, 2, 64, 8, (-1, -1)),
])
def test_r_swa_matches_the_reference(backend, dtype, bs, hq, hk, d, window, window_size):
    args = make_inputs(PREFILL, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=bs + hq)
    args["window_size"] = window_size
    prefix = torch.tensor(PREFIX, dtype=torch.int32)
    record = au.run_unified_attention_torch(**args, backend=backend, rswa_prefix_lens=prefix,
                                            rswa_window=window)
    spec = record.plan.specs[0]
    assert record.plan.path == backend and spec.rswa_prefix and "_rswa" in spec.kernel_name
    want = _ref(args, rswa_prefix_lens=prefix, rswa_window=window)
    windowed = _ref(args, window_size=(window - 1, 0))
    assert (want - windowed).abs().max() > 3 * attention_atol(dtype), "the prefix changes nothing"
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err} ({spec.kernel_name})"


def test_rocke_vllm_runs_r_swa_as_its_backend_passes_it():
    from rocke.vllm import unified_attention
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="bf16", seed=2)
    prefix = torch.tensor(PREFIX, dtype=torch.int32)
    unified_attention(**args, rswa_prefix_lens=prefix, rswa_window=8)
    want = _ref(args, rswa_prefix_lens=prefix, rswa_window=8)
    assert (args["out"].float() - want).abs().max() <= attention_atol("bf16")


@pytest.mark.parametrize("change, error, match", [
    (dict(rswa_window=None), ValueError, "R-SWA takes both"),
    (dict(rswa_prefix_lens=None), ValueError, "R-SWA takes both"),
    (dict(rswa_window=0), ValueError, "rswa_window: must be an int in"),
    (dict(rswa_window=8.0), ValueError, "rswa_window: must be an int in"),
    (dict(rswa_prefix_lens=torch.tensor([5, 0], dtype=torch.int32)), ValueError,
     "rswa_prefix_lens: must be a contiguous int32 tensor"),
    (dict(rswa_prefix_lens=torch.tensor([5, 0, 40])), ValueError,
     "rswa_prefix_lens: must be a contiguous int32 tensor"),
    (dict(rswa_prefix_lens=torch.tensor([5, -1, 40], dtype=torch.int32)), ValueError,
     "rswa_prefix_lens: prefix lengths must be >= 0"),
    (dict(chunk_lookback=1, window_size=(15, 0)), NotImplementedError,
     "R-SWA with chunked attention"),
])
def test_bad_r_swa_arguments_are_refused_before_launch(change, error, match):
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=6)
    call = dict(rswa_prefix_lens=torch.tensor(PREFIX, dtype=torch.int32), rswa_window=8)
    call.update({k: v for k, v in change.items() if k != "window_size"})
    if "window_size" in change:
        args["window_size"] = change["window_size"]
    before = args["out"].clone()
    with pytest.raises(error, match=match):
        au.run_unified_attention_torch(**args, **call)
    assert torch.equal(args["out"], before)
