"""Hostile inputs to run_unified_attention_torch: each is refused with an error of the right type
whose message names what is wrong, before anything is compiled or launched, and leaves ``out`` and
every input byte-identical."""
import math

import pytest
import torch

from rocke.kernels.common import attention_unified as au

from rocke.kernels.common import attention_kernels
from tests.kernels.unified_inputs import make_inputs

SEQS = [(3, 20), (1, 33), (4, 4)]      # bs 16: 2, 3 and 1 pages used


def _base():
    return make_inputs(SEQS, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=3)


def _set(**changes):
    def mutate(a):
        a.update(changes)
        return a
    return mutate


def _tensor(name, fn):
    def mutate(a):
        a[name] = fn(a[name], a)
        return a
    return mutate


def _ints(name, values):
    return _tensor(name, lambda t, a: torch.tensor(values, dtype=torch.int32))


def _table(s, j, value):
    def fn(t, a):
        t = t.clone()
        t[s, j] = value
        return t
    return _tensor("block_table", fn)


def _aliased_out(a):
    a["out"] = a["q"]
    return a


def _strided_q(a):
    wide = torch.zeros(a["q"].shape[0], a["q"].shape[1], 2 * a["q"].shape[2], dtype=a["q"].dtype)
    a["q"] = wide[:, :, ::2]
    return a


def _gqa_257_to_1(a):          # groups above 16 run split over q-head blocks, up to 256
    a["q"] = torch.zeros(a["q"].shape[0], 2 * 257, 64, dtype=a["q"].dtype)
    a["out"] = torch.zeros_like(a["q"])
    return a


def _gqa_5_over_2(a):
    a["q"] = torch.zeros(a["q"].shape[0], 5, 64, dtype=a["q"].dtype)
    a["out"] = torch.zeros_like(a["q"])
    return a


CASES = [
    # (id, mutate, error type, regex the message must match)
    ("page_past_cache", _table(0, 1, 10 ** 4), ValueError, r"block_table: .*block index 10000.*outside"),
    ("negative_page", _table(1, 2, -1), ValueError, r"block_table: sequence 1 .*-1.*outside"),
    ("cu_not_monotone", _ints("cu_seqlens_q", [0, 3, 2, 8]),
     ValueError, r"cu_seqlens_q: not monotone"),
    ("cu_not_ending_at_total_q", _ints("cu_seqlens_q", [0, 3, 4, 7]),
     ValueError, r"cu_seqlens_q: must end at total_q = 8"),
    ("cu_not_starting_at_0", _ints("cu_seqlens_q", [1, 3, 4, 8]),
     ValueError, r"cu_seqlens_q: must start at 0"),
    ("cu_wrong_length", _tensor("cu_seqlens_q", lambda t, a: t[:3].clone()), ValueError,
     r"cu_seqlens_q: must have num_seqs \+ 1"),
    ("seqused_k_beyond_table", _ints("seqused_k", [20, 65, 4]),
     ValueError, r"seqused_k: sequence 1 has 65 .*capacity"),
    ("seqused_k_negative", _ints("seqused_k", [20, -1, 4]),
     ValueError, r"seqused_k: .*>= 0"),
    ("q_float32", _tensor("q", lambda t, a: t.float()), ValueError, r"q: dtype"),
    ("k_other_dtype", _tensor("k", lambda t, a: t.bfloat16()), ValueError, r"k: dtype .*differs"),
    ("out_other_dtype", _tensor("out", lambda t, a: t.bfloat16()), ValueError, r"out: dtype"),
    ("block_table_int64", _tensor("block_table", lambda t, a: t.long()), ValueError,
     r"block_table: dtype must be torch.int32"),
    ("cu_int64", _tensor("cu_seqlens_q", lambda t, a: t.long()), ValueError, r"cu_seqlens_q: dtype"),
    ("v_on_other_device", _tensor("v", lambda t, a: torch.empty(t.shape, dtype=t.dtype, device="meta")),
     ValueError, r"v: on meta.*one device"),
    ("q_head_size_strided", _strided_q, ValueError, r"q: the last .* stride 1"),
    ("k_rows_overlap", _tensor("k", lambda t, a: t.as_strided(t.shape, (64, 64, 64, 1))), ValueError,
     r"k: rows overlap"),
    ("gqa_group_too_large", _gqa_257_to_1, ValueError, r"q: a GQA group of 257 .* exceeds .* 256"),
    ("gqa_not_dividing", _gqa_5_over_2, ValueError,
     r"num_q_heads 5 is not a multiple of .*num_kv_heads 2"),
    ("causal_q_longer_than_kv", _ints("seqused_k", [2, 33, 4]),
     ValueError, r"query_len <= kv_len.*sequence 0 has query_len 3 > kv_len 2"),
    # score features (issue 8): supported, but bad values are refused before launch
    ("softcap_negative", _set(softcap=-1.0), ValueError, r"softcap: must be a finite float >= 0"),
    ("softcap_nan", _set(softcap=math.nan), ValueError, r"softcap: must be a finite"),
    ("softcap_not_number", _set(softcap="30"), ValueError, r"softcap: must be a finite"),
    ("window_right_positive", _set(window_size=(8, 4)), ValueError, r"window_size: must be \(-1, -1\)"),
    ("window_left_below_minus_1", _set(window_size=(-2, 0)), ValueError, r"window_size: must be"),
    ("window_right_only", _set(window_size=(-1, 0)), ValueError, r"window_size: must be"),
    ("window_not_a_pair", _set(window_size=(8,)), ValueError, r"window_size: must be a pair of ints"),
    ("window_float", _set(window_size=(8.0, 0)), ValueError, r"window_size: must be a pair of ints"),
    ("alibi_wrong_length", _set(alibi_slopes=torch.ones(3)), ValueError,
     r"alibi_slopes: shape must be \[num_q_heads\] = \[4\], got \[3\]"),
    ("alibi_f16", _set(alibi_slopes=torch.ones(4, dtype=torch.float16)), ValueError,
     r"alibi_slopes: dtype must be torch.float32"),
    ("alibi_other_device", _set(alibi_slopes=torch.ones(4, device="meta")), ValueError,
     r"alibi_slopes: on meta"),
    ("alibi_strided", _set(alibi_slopes=torch.ones(8)[::2]), ValueError, r"alibi_slopes: .*stride 1"),
    ("alibi_list", _set(alibi_slopes=[1.0] * 4), ValueError, r"alibi_slopes: must be a torch.float32 tensor"),
    ("sinks_wrong_length", _set(sinks=torch.zeros(2, 2)), ValueError, r"sinks: shape must be \[num_q_heads\]"),
    ("sinks_f64", _set(sinks=torch.zeros(4, dtype=torch.float64)), ValueError, r"sinks: dtype"),
    ("sinks_other_device", _set(sinks=torch.zeros(4, device="meta")), ValueError, r"sinks: on meta"),
    ("sinks_nan", _set(sinks=torch.tensor([0.0, math.nan, 0.0, 0.0])), ValueError,
     r"sinks: entries must be finite or -inf, got nan"),
    ("sinks_plus_inf", _set(sinks=torch.tensor([0.0, math.inf, 0.0, 0.0])), ValueError,
     r"sinks: entries must be finite or -inf, got inf"),
    ("qq_bias_too_small", _set(qq_bias=torch.zeros(3, 3)), ValueError,
     r"qq_bias: must be 2-D \[max_q, max_q\] covering the longest query \(4 tokens\)"),
    ("qq_bias_1d", _set(qq_bias=torch.zeros(16)), ValueError, r"qq_bias: must be 2-D"),
    ("qq_bias_bf16", _set(qq_bias=torch.zeros(4, 4, dtype=torch.bfloat16)), ValueError, r"qq_bias: dtype"),
    ("qq_bias_other_device", _set(qq_bias=torch.zeros(4, 4, device="meta")), ValueError, r"qq_bias: on meta"),
    ("qq_bias_transposed", _set(qq_bias=torch.zeros(4, 4).t()), ValueError, r"qq_bias: .*stride 1"),
    ("fp8_e4m3fn_cache", _tensor("k", lambda t, a: t.to(torch.float8_e4m3fn)), ValueError,
     r"k: a torch.float8_e4m3fn cache .*e4m3fnuz"),
    ("q_descale_not_one", _set(q_descale=torch.tensor(0.5)), ValueError,
     r"q_descale: the query is fp16/bf16.*must be 1, got 0.5"),
    ("k_descale_not_one", _set(k_descale=torch.tensor(0.5).expand(3, 2)), ValueError,
     r"k_descale: a non-fp8 KV cache .*must be 1, got 0.5"),
    ("v_descale_f16", _set(v_descale=torch.tensor(1.0, dtype=torch.float16)), ValueError,
     r"v_descale: dtype must be torch.float32"),
    ("k_descale_shape", _set(k_descale=torch.ones(2, 3)), ValueError, r"k_descale: shape"),
    ("out_aliases_q", _aliased_out, ValueError, r"out: overlaps q"),
    ("out_wrong_shape", _tensor("out", lambda t, a: t[:-1].clone()), ValueError, r"out: shape"),
    ("head_size_100", _set(q=torch.zeros(8, 4, 100, dtype=torch.float16),
                           k=torch.zeros(9, 16, 2, 100, dtype=torch.float16),
                           v=torch.zeros(9, 16, 2, 100, dtype=torch.float16),
                           out=torch.zeros(8, 4, 100, dtype=torch.float16)), ValueError,
     r"q: head_size must be one of \(64, 128, 256, 512\), or a multiple of 8 below 512 "
     r"\(run padded to the next\), got 100"),
    ("max_seqlen_q_too_small", _set(max_seqlen_q=2), ValueError, r"max_seqlen_q: 2 is below .* 4"),
    ("max_seqlen_k_not_int", _set(max_seqlen_k=33.0), ValueError, r"max_seqlen_k: must be an int"),
    ("softmax_scale_nan", _set(softmax_scale=math.nan), ValueError, r"softmax_scale"),
    ("causal_not_bool", _set(causal=1), ValueError, r"causal: must be a bool"),
    # non-causal prefill runs (tests/kernels/test_attention_non_causal.py); its window is
    # symmetric, vLLM's (sw - 1, sw - 1)
    ("non_causal_one_sided_window", _set(causal=False, window_size=(4, 0)), ValueError,
     r"window_size: non-causal, the window is symmetric"),
]


def _snapshot(args):
    snap = {}
    for name, value in args.items():
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            snap[name] = value.contiguous().view(torch.uint8).clone() if value.dim() else value.clone()
    return snap


def _assert_unchanged(args, snap):
    for name, before in snap.items():
        value = args[name]
        now = value.contiguous().view(torch.uint8) if value.dim() else value
        assert torch.equal(now, before), f"{name} changed"


@pytest.fixture
def no_launch(monkeypatch):
    """Record any compile or launch: a refused call must do neither."""
    calls = []
    import rocke.runtime
    monkeypatch.setattr(rocke.runtime, "launch", lambda *a, **k: calls.append("launch"))
    monkeypatch.setattr(attention_kernels, "compiled", lambda spec: calls.append(("compile", spec)))
    return calls


@pytest.mark.parametrize("case_id, mutate, error, pattern", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_refused_before_launch(case_id, mutate, error, pattern, no_launch):
    args = mutate(_base())
    snap = _snapshot(args)
    with pytest.raises(error, match=pattern):
        au.run_unified_attention_torch(**args)
    assert no_launch == []
    _assert_unchanged(args, snap)


def test_unknown_backend_is_refused(no_launch):
    args = _base()
    snap = _snapshot(args)
    with pytest.raises(ValueError, match=r"backend: must be one of auto, 2d, 3d, got '4d'"):
        au.run_unified_attention_torch(**args, backend="4d")
    assert no_launch == []
    _assert_unchanged(args, snap)


def test_bad_lever_is_refused_before_launch(monkeypatch, no_launch):
    monkeypatch.setenv("HIPDNN_GFX942_FLASH_WIDE", "3")
    args = _base()
    snap = _snapshot(args)
    with pytest.raises(ValueError, match=r"HIPDNN_GFX942_FLASH_WIDE: must be one of 0, 2, 4, got '3'"):
        au.run_unified_attention_torch(**args)
    assert no_launch == []
    _assert_unchanged(args, snap)


def test_base_inputs_are_valid():
    """The control: the unmutated inputs pass validation, so every refusal above is the
    mutation's doing. An out-of-range index in an UNUSED table column is not an error (only
    the pages a sequence uses are read), nor is vLLM's expanded fp32 descale of 1."""
    args = _base()
    args["block_table"][2, 3] = 10 ** 6          # sequence 2 uses one page; column 3 is unused
    problem = au.describe_problem(**args)
    assert (problem.num_seqs, problem.total_q, problem.num_queries_per_kv) == (3, 8, 2)
    assert (problem.max_seqlen_q, problem.max_seqlen_k, problem.block_size) == (4, 33, 16)
