"""Hostile fp8-cache inputs to run_unified_attention_torch: each is refused with an error of the
right type whose message names what is wrong, before anything is compiled or launched, and leaves
``out`` and every input byte-identical."""
import pytest
import torch

from rocke.kernels.common import attention_unified as au

from rocke.kernels.common import attention_kernels
from tests.kernels.unified_inputs import make_inputs

FP8 = torch.float8_e4m3fnuz
SEQS = [(3, 20), (1, 33), (4, 4)]      # 3 sequences, 2 KV heads


def _base():
    args = make_inputs(SEQS, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=5)
    for name in ("k", "v"):
        args[name] = args[name].to(FP8)
        args[f"{name}_descale"] = torch.tensor([0.5])
    return args


def _set(**changes):
    def mutate(a):
        a.update(changes)
        return a
    return mutate


def _cache(name, dtype):
    def mutate(a):
        a[name] = a[name].view(torch.uint8).view(dtype) if dtype in (torch.uint8, torch.float8_e4m3fn,
                                                                     torch.float8_e5m2fnuz) \
            else a[name].float().to(dtype)
        return a
    return mutate


CASES = [
    # (id, mutate, error type, regex the message must match)
    ("k_descale_missing", _set(k_descale=None), ValueError,
     r"k_descale: the fp8 K cache needs its dequantization scale.*got None"),
    ("v_descale_missing", _set(v_descale=None), ValueError,
     r"v_descale: the fp8 V cache needs its dequantization scale"),
    ("descale_wrong_shape", _set(k_descale=torch.ones(2, 3)), ValueError,
     r"k_descale: shape must be .*\[3, 2\], got \[2, 3\]"),
    ("descale_per_q_head", _set(v_descale=torch.ones(4)), ValueError, r"v_descale: shape"),
    ("descale_f16", _set(k_descale=torch.tensor([0.5], dtype=torch.float16)), ValueError,
     r"k_descale: dtype must be torch.float32, got torch.float16"),
    ("descale_int", _set(v_descale=torch.tensor([1], dtype=torch.int32)), ValueError,
     r"v_descale: dtype must be torch.float32"),
    ("descale_other_device", _set(k_descale=torch.empty(1, device="meta")), ValueError,
     r"k_descale: on meta, but q is on cpu"),
    ("descale_nan", _set(k_descale=torch.tensor([float("nan")])), ValueError,
     r"k_descale: fp8 dequantization scales must be finite and > 0, got nan"),
    ("descale_zero", _set(v_descale=torch.tensor(0.0).expand(3, 2)), ValueError,
     r"v_descale: .*finite and > 0, got 0.0"),
    ("descale_negative", _set(k_descale=torch.tensor([-1.0, 1.0])), ValueError,
     r"k_descale: .*> 0, got -1.0"),
    ("descale_not_a_tensor", _set(k_descale="0.5"), ValueError,
     r"k_descale: must be None or an fp32 tensor, got str"),
    ("e4m3fn_cache", _cache("k", torch.float8_e4m3fn), ValueError,
     r"k: a torch.float8_e4m3fn cache .*bias 7.*e4m3fnuz.*half the value"),
    ("e4m3fn_both", lambda a: _cache("v", torch.float8_e4m3fn)(_cache("k", torch.float8_e4m3fn)(a)),
     ValueError, r"k: a torch.float8_e4m3fn cache"),
    ("e5m2fnuz_cache", _cache("v", torch.float8_e5m2fnuz), ValueError,
     r"v: fp8 cache dtype torch.float8_e5m2fnuz is not supported"),
    ("uint8_cache", _cache("k", torch.uint8), ValueError,
     r"k: a uint8 cache does not say its fp8 encoding"),
    ("k_fp8_v_f16", _cache("v", torch.float16), ValueError, r"v: dtype torch.float16 differs from k's"),
    ("k_f16_v_fp8", _cache("k", torch.float16), ValueError, r"v: dtype .*float8_e4m3fnuz differs from k's"),
    ("q_descale_not_one", _set(q_descale=torch.tensor([2.0])), ValueError,
     r"q_descale: the query is fp16/bf16.*must be 1, got 2.0"),
    ("q_descale_shape", _set(q_descale=torch.ones(5)), ValueError, r"q_descale: shape"),
    # an fp8 query runs with its q_descale (tests/kernels/test_attention_fp8_query.py)
    ("q_fp8_no_descale", _set(q=torch.zeros(8, 4, 64).to(FP8)), ValueError,
     r"q_descale: the fp8 query needs its dequantization scale"),
    ("q_fp8_other_encoding", _set(q=torch.zeros(8, 4, 64).to(torch.float8_e5m2fnuz),
                                  q_descale=torch.tensor([1.0])), ValueError,
     r"q: an fp8 query .*float8_e5m2fnuz.* same encoding"),
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


@pytest.mark.parametrize("backend", ["auto", "3d"])
@pytest.mark.parametrize("case_id, mutate, error, pattern", CASES, ids=[c[0] for c in CASES])
def test_hostile_fp8_input_is_refused_before_launch(case_id, mutate, error, pattern, backend,
                                                    no_launch):
    args = mutate(_base())
    snap = _snapshot(args)
    with pytest.raises(error, match=pattern):
        au.run_unified_attention_torch(**args, backend=backend)
    assert no_launch == []
    _assert_unchanged(args, snap)


def test_kdma_lever_with_an_fp8_cache_is_refused_before_launch(monkeypatch, no_launch):
    monkeypatch.setenv("HIPDNN_GFX942_GLOBAL_LOAD_LDS_K", "1")
    args = _base()
    snap = _snapshot(args)
    with pytest.raises(ValueError, match=r"global_load_lds_k: .*fp8 cache .*dequantized"):
        au.run_unified_attention_torch(**args, backend="2d")
    assert no_launch == []
    _assert_unchanged(args, snap)


@pytest.mark.parametrize("shape", [[], [1], [2], [3, 2]])
def test_base_fp8_inputs_are_valid(shape):
    """The control: the unmutated fp8 inputs, with every descale form vLLM passes, pass
    validation (so each refusal above is the mutation's doing), and q_descale of 1 is accepted."""
    args = _base()
    args["k_descale"] = torch.full(shape, 0.25)
    args["q_descale"] = torch.tensor(1.0)
    problem = au.describe_problem(**args)
    assert problem.kv_dtype == "fp8_e4m3fnuz" and problem.num_kv_heads == 2
