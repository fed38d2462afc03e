"""rocke.vllm.unified_attention: vLLM's current parameter list, its 3D rule, refusals before
launch, and torch.ops.rocke.unified_attention under torch.compile(fullgraph=True)."""
from __future__ import annotations

import inspect
import math

import pytest
import torch

from rocke import runtime
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from rocke.vllm import KVQuantMode, unified_attention
from tests.kernels.test_attention_2d import make_problem

# vLLM 0.33's `unified_attention` (vllm/v1/attention/ops/triton_unified_attention.py),
# written out here by hand: names, order, and which have defaults (and what they are).
VLLM_PARAMETERS = [
    ("q", None), ("k", None), ("v", None), ("out", None), ("cu_seqlens_q", None),
    ("max_seqlen_q", None), ("seqused_k", None), ("max_seqlen_k", None), ("softmax_scale", None),
    ("causal", None), ("window_size", None), ("block_table", None), ("softcap", None),
    ("q_descale", None), ("k_descale", None), ("v_descale", None),
    ("seq_threshold_3D", "None"), ("num_par_softmax_segments", "None"),
    ("softmax_segm_output", "None"), ("softmax_segm_max", "None"),
    ("softmax_segm_expsum", "None"), ("alibi_slopes", "None"), ("output_scale", "None"),
    ("qq_bias", "None"), ("sinks", "None"), ("mm_prefix_range", "None"),
    ("rswa_prefix_lens", "None"), ("rswa_window", "None"),
    ("use_alibi_sqrt", "False"), ("kv_quant_mode", "KVQuantMode.NONE"),
    ("k_scale_cache", "None"), ("v_scale_cache", "None"), ("chunk_lookback", "-1"),
    ("use_td", "False"), ("mm_prefix_clamp_sliding_window", "False"),
]
VLLM_KV_QUANT_MODES = {"NONE", "FP8_PER_TENSOR", "INT8_PER_TOKEN_HEAD", "FP8_PER_TOKEN_HEAD",
                       "INT4_PER_TOKEN_HEAD", "NVFP4", "TURBOQUANT_K8V4", "TURBOQUANT_4BIT_NC",
                       "TURBOQUANT_K3V4_NC", "TURBOQUANT_3BIT_NC", "NVFP4_DS_MLA",
                       "ULTRAQUANT_4BIT", "OCTAVE_K3V4", "OCTAVE_K3V3", "OCTAVE_K3V3_COMPACT",
                       "CUSTOM"}

D, BLOCK, GROUP, HK = 64, 16, 2, 1


def test_the_parameter_list_is_vllms():
    params = list(inspect.signature(unified_attention).parameters.values())
    got = [(p.name, None if p.default is p.empty else
            ("KVQuantMode." + p.default.name if isinstance(p.default, KVQuantMode)
             else repr(p.default))) for p in params]
    assert got == VLLM_PARAMETERS
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)
    assert set(KVQuantMode.__members__) == VLLM_KV_QUANT_MODES


def _problem(q_lens, kv_lens, seed=0, group=GROUP, hk=HK):
    """vLLM's first 16 arguments for a batch of (query, KV) lengths."""
    q, k, v, table, cu, seqused = make_problem("f16", D, BLOCK, group, list(q_lens),
                                               list(kv_lens), num_kv_heads=hk, seed=seed)
    return dict(q=q, k=k, v=v, out=torch.zeros_like(q), cu_seqlens_q=cu,
                max_seqlen_q=max(q_lens), seqused_k=seqused, max_seqlen_k=max(kv_lens),
                softmax_scale=1 / math.sqrt(D), causal=True, window_size=(-1, -1),
                block_table=table, softcap=0.0, q_descale=None, k_descale=None, v_descale=None)


def _decode(kv_lens=(40, 23), seed=0):
    return _problem([1] * len(kv_lens), kv_lens, seed)


def _workspaces(rows, segments, hq=GROUP * HK, d=D):
    """vLLM's three split-KV workspaces, NaN where nothing wrote."""
    return dict(softmax_segm_output=torch.full((rows, hq, segments, d), math.nan),
                softmax_segm_max=torch.full((rows, hq, segments), math.nan),
                softmax_segm_expsum=torch.full((rows, hq, segments), math.nan))


def _reference(a):
    return ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                          a["block_table"], a["softmax_scale"])


def _close(out, ref):
    err = (out.float() - ref).abs().max().item()
    assert err <= attention_atol("f16"), f"max abs error {err}"


def test_3d_runs_with_the_callers_workspaces_and_segments_when_vllm_says_so():
    a = _decode()
    ws = _workspaces(rows=8, segments=3)       # sized for a larger batch, as vLLM allocates
    unified_attention(**a, seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    _close(a["out"], _reference(a))
    rows = a["q"].shape[0]
    for name, t in ws.items():                 # the caller's buffers were the workspace ...
        assert not t[:rows].isnan().any(), f"{name}: rows of this batch left unwritten"
        assert t[rows:].isnan().all(), f"{name}: rows beyond the batch were written"


@pytest.mark.parametrize("why", ["no threshold", "too many sequences", "query past 8 tokens"])
def test_2d_runs_otherwise_and_the_workspaces_stay_untouched(why):
    a = _decode()
    ws = _workspaces(rows=8, segments=3)
    extra = dict(seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    if why == "no threshold":
        extra["seq_threshold_3D"] = None
    elif why == "too many sequences":
        extra["seq_threshold_3D"] = 1          # 2 sequences > 1
    else:
        a = dict(a, max_seqlen_q=9)            # vLLM reads max_seqlen_q: > MAX_3D_QUERY_LEN
    unified_attention(**a, **extra)
    _close(a["out"], _reference(a))
    assert all(t.isnan().all() for t in ws.values())


@pytest.mark.parametrize("argument,value", [
    ("kv_quant_mode", KVQuantMode.TURBOQUANT_K8V4),
    ("kv_quant_mode", KVQuantMode.OCTAVE_K3V3),
    ("kv_quant_mode", KVQuantMode.NVFP4),
])    # output_scale, use_alibi_sqrt and the per-token-head modes run: test_attention_quant.py,
      # test_attention_int4.py
def test_unimplemented_arguments_are_refused_before_launch(monkeypatch, argument, value):
    a = _decode()
    launched = []
    monkeypatch.setattr(runtime, "launch", lambda *x, **y: launched.append(x))
    with pytest.raises(NotImplementedError, match=rf"^{argument}: "):
        unified_attention(**a, **{argument: value})
    assert not launched and not a["out"].any()


def test_a_kv_quant_mode_is_read_by_name_not_number():
    import enum

    class ForeignMode(enum.IntEnum):           # another numbering of the same names
        NVFP4 = 0
        NONE = 4
    a = _decode()
    unified_attention(**a, kv_quant_mode=ForeignMode.NONE)
    _close(a["out"], _reference(a))
    with pytest.raises(NotImplementedError, match=r"kv_quant_mode: KVQuantMode\.NVFP4 "):
        unified_attention(**_decode(), kv_quant_mode=ForeignMode.NVFP4)


def test_bad_3d_arguments_are_named():
    a = _decode()
    with pytest.raises(ValueError, match="softmax_segm_max: shape"):
        unified_attention(**a, seq_threshold_3D=4, num_par_softmax_segments=3,
                          **dict(_workspaces(8, 3), softmax_segm_max=torch.zeros(8, 2, 5)))
    with pytest.raises(ValueError, match="num_par_softmax_segments: must be"):
        unified_attention(**a, seq_threshold_3D=4, num_par_softmax_segments=0, **_workspaces(8, 3))
    assert not a["out"].any()


class _TinyDecoder(torch.nn.Module):
    """A projection into q, rocke's attention op, a projection out (fp16 matmuls only: inductor
    then calls them as extern kernels and generates no C++, which keeps the test quick)."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.w_in = torch.nn.Parameter((torch.rand(D, GROUP * HK * D, generator=gen) / D).half())
        self.w_out = torch.nn.Parameter((torch.rand(GROUP * HK * D, D, generator=gen) / D).half())

    def forward(self, x, k, v, cu, seqused, table):
        q = (x @ self.w_in).reshape(x.shape[0], GROUP * HK, D)
        out = torch.empty_like(q)
        torch.ops.rocke.unified_attention(q, k, v, out, cu, 1, seqused, 40, 0.125, True,
                                          [-1, -1], table, 0.0, None, None, None)
        return out.reshape(x.shape[0], -1) @ self.w_out


def test_the_torch_op_compiles_fullgraph_and_matches_eager():
    a = _decode()
    x = torch.rand(a["q"].shape[0], D, generator=torch.Generator().manual_seed(5)).half()
    model = _TinyDecoder()
    inputs = (x, a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"], a["block_table"])
    with torch.no_grad():
        eager = model(*inputs)
        compiled = torch.compile(model, fullgraph=True, backend="inductor")(*inputs)
    assert torch.equal(compiled, eager)
    assert eager.abs().sum() > 0


# ---- the adapter's per-call work, remembered where it is a pure function of what it reads ----

def test_batch_invariant_follows_every_lever_change(monkeypatch):
    """rocke.vllm.batch_invariant parses the two levers once per pair of raw values: each
    change is seen on the next call, and a bad value is refused on every call."""
    from rocke import vllm
    monkeypatch.delenv("ROCKE_BATCH_INVARIANT", raising=False)
    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    steps = [("ROCKE_BATCH_INVARIANT", None, False), ("ROCKE_BATCH_INVARIANT", "1", True),
             ("ROCKE_BATCH_INVARIANT", "0", False), ("VLLM_BATCH_INVARIANT", "2", True),
             ("VLLM_BATCH_INVARIANT", "0", False), ("VLLM_BATCH_INVARIANT", "-1", True),
             ("VLLM_BATCH_INVARIANT", "on", ValueError), ("VLLM_BATCH_INVARIANT", "on", ValueError),
             ("ROCKE_BATCH_INVARIANT", "1", True),     # ROCKE's on: vLLM's is not read, as before
             ("ROCKE_BATCH_INVARIANT", "", ValueError), ("VLLM_BATCH_INVARIANT", None, False),
             ("ROCKE_BATCH_INVARIANT", "yes", ValueError), ("ROCKE_BATCH_INVARIANT", None, False)]
    for name, value, want in steps:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        for _ in range(2):
            if want is ValueError:
                with pytest.raises(ValueError, match="BATCH_INVARIANT must be"):
                    vllm.batch_invariant()
            else:
                assert vllm.batch_invariant() is want, (name, value)


def test_a_remembered_mode_name_is_keyed_by_class_and_member():
    """The same number in another enum (or as an int, or a bool) is another mode."""
    import enum
    from rocke import vllm

    class ForeignMode(enum.IntEnum):
        NVFP4 = 0
        NONE = 4
    for _ in range(2):
        assert vllm._mode_name(ForeignMode.NONE) == "NONE"
        assert vllm._mode_name(4) == "INT4_PER_TOKEN_HEAD"
        assert vllm._mode_name(KVQuantMode.INT4_PER_TOKEN_HEAD) == "INT4_PER_TOKEN_HEAD"
        assert vllm._mode_name(ForeignMode.NVFP4) == "NVFP4"
        assert vllm._mode_name(0) == "NONE"
        for bad in (False, 0.0, "NONE", [0]):
            with pytest.raises(ValueError, match="kv_quant_mode: must be a KVQuantMode"):
                vllm._mode_name(bad)


@pytest.mark.parametrize("name, value, what", [
    ("seq_threshold_3D", True, "a non-negative int"), ("seq_threshold_3D", -1, "a non-negative int"),
    ("seq_threshold_3D", 2.0, "a non-negative int"),
    ("num_par_softmax_segments", -3, "a positive int"),
    ("num_par_softmax_segments", 0, "a positive int"),
    ("num_par_softmax_segments", False, "a positive int")])
def test_bad_3d_numbers_are_named(name, value, what):
    a = _decode()
    numbers = dict(seq_threshold_3D=4, num_par_softmax_segments=3)
    numbers[name] = value
    with pytest.raises(ValueError, match=f"^{name}: must be None or {what}"):
        unified_attention(**a, **numbers, **_workspaces(8, 3))
    assert not a["out"].any()


def test_a_zero_threshold_is_vllms_2d_always():
    """vLLM's own unified-attention tests pass seq_threshold_3D=0 with 0-row workspaces: 2D."""
    a = _decode()
    ws = _workspaces(rows=0, segments=16)
    unified_attention(**a, seq_threshold_3D=0, num_par_softmax_segments=16, **ws)
    _close(a["out"], _reference(a))
