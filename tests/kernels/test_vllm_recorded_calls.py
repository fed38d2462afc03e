"""The calls vLLM 0.33's Triton backend `forward` made for decode, prefill, chunked prefill,
speculative decoding and encoder layers (tests/fixtures/vllm_forward_calls_0.33.json, written
by tools/record_vllm_forward.py running vLLM), replayed through rocke.vllm.unified_attention
with fresh tensors of the recorded shapes, dtypes, strides and offsets, the recorded metadata
values, and random data; each output against the fp32 reference."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from rocke.vllm import KVQuantMode, unified_attention

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" /
                      "vllm_forward_calls_0.33.json").read_text())
CALLS = [(s["name"], i, call) for s in FIXTURE["scenarios"] for i, call in enumerate(s["calls"])]
UNIFIED = [(name, i, call) for name, i, call in CALLS if call["op"] == "unified_attention"]
ROCKE_DTYPE = {"bfloat16": "bf16", "float16": "f16"}


def _tensor(desc, g):
    """A tensor laid out as recorded: its shape, strides and storage offset over a fresh
    storage; the recorded values where there are any, else random data (NaN in workspaces)."""
    dtype = getattr(torch, desc["dtype"])
    shape, stride, offset = desc["shape"], desc["stride"], desc["storage_offset"]
    size = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride) if n)
    if "values" in desc:
        base = torch.zeros(size, dtype=dtype)
        view = base.as_strided(shape, stride, offset)
        values = torch.tensor(desc["values"], dtype=dtype)
        if 0 in stride:         # an expanded view (vLLM's descales): one element behind it
            base[offset] = values.reshape(-1)[0]
            assert torch.equal(view, values), "an expanded view whose values differ"
        else:
            view.copy_(values)
        return view
    base = (torch.rand(size, generator=g) * 2 - 1).to(dtype) if dtype.is_floating_point \
        else torch.zeros(size, dtype=dtype)
    return base.as_strided(shape, stride, offset)


def _value(v, g):
    if isinstance(v, dict) and "tensor" in v:
        return _tensor(v["tensor"], g)
    if isinstance(v, dict) and "tuple" in v:
        return tuple(_value(x, g) for x in v["tuple"])
    if isinstance(v, dict) and "enum" in v:
        cls, name = v["enum"].split(".")
        assert cls == "KVQuantMode"
        return KVQuantMode[name]
    return v


def _replay(call, seed=0):
    g = torch.Generator().manual_seed(seed)
    kwargs = {name: _value(v, g) for name, v in call["kwargs"]}
    for name in ("softmax_segm_output", "softmax_segm_max", "softmax_segm_expsum"):
        if isinstance(kwargs.get(name), torch.Tensor):
            kwargs[name].fill_(math.nan)
    kwargs["out"].fill_(7.0)
    return kwargs


def test_the_fixture_was_recorded_by_running_vllm_033():
    assert FIXTURE["source"].startswith("recorded by running vLLM's TritonAttentionImpl.forward")
    assert FIXTURE["vllm_version"] == "0.33.0"
    names = {s["name"] for s in FIXTURE["scenarios"]}
    assert {"decode", "prefill", "chunked_prefill", "spec_decode", "cross_attention",
            "encoder"} <= names
    assert all(s["calls"] for s in FIXTURE["scenarios"])


def test_vllm_passes_every_parameter_but_qq_bias_by_keyword():
    """What rocke.vllm must bind: 34 of the 35 by name, qq_bias left at its default."""
    from tests.kernels.test_vllm_033_contract import NAMES
    for name, _, call in UNIFIED:
        passed = [k for k, _ in call["kwargs"]]
        assert len(passed) == len(set(passed)) == 34, name
        assert set(NAMES) - set(passed) == {"qq_bias"}, name


@pytest.mark.parametrize("scenario, index, call", UNIFIED,
                         ids=[f"{name}-{i}" for name, i, _ in UNIFIED])
def test_a_recorded_forward_call_matches_the_reference(scenario, index, call):
    a = _replay(call)
    unified_attention(**a)
    causal = a["causal"]
    assert isinstance(causal, bool), "a recorded per-sequence causal tensor: see the fixture"
    want = ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                          a["block_table"], a["softmax_scale"], causal=causal,
                          window_size=a["window_size"], softcap=a["softcap"] or 0.0,
                          sinks=a["sinks"], alibi_slopes=a["alibi_slopes"],
                          q_descale=a["q_descale"], k_descale=a["k_descale"],
                          v_descale=a["v_descale"])
    dtype = ROCKE_DTYPE[str(a["out"].dtype).replace("torch.", "")]
    err = (a["out"].float() - want).abs().max().item()
    assert err <= attention_atol(dtype), f"{scenario}: max |out - ref| {err}"
    rows = a["q"].shape[0]
    if scenario in ("decode", "spec_decode"):     # vLLM's 3D rule sends these to split-KV
        assert not a["softmax_segm_max"][:rows].isnan().any(), "the 3D path did not run"


def test_an_encoder_only_layer_does_not_call_unified_attention():
    """vLLM 0.33 runs encoder-only self-attention with context_attention_fwd on the raw q, k,
    v (bidirectional, no cache): nothing there for rocke.vllm.unified_attention to replay."""
    encoder = next(s for s in FIXTURE["scenarios"] if s["name"] == "encoder")
    assert [c["op"] for c in encoder["calls"]] == ["context_attention_fwd"]
    kwargs = dict(encoder["calls"][0]["kwargs"])
    assert kwargs["is_causal"] is False
