"""vLLM 0.33's `unified_attention` through rocke.vllm on the emulator: the five parameters vLLM's
Triton backend added run: R-SWA (rswa_prefix_lens with rswa_window), chunk_lookback and
mm_prefix_clamp_sliding_window (tests/kernels/test_attention_rswa.py, test_attention_chunked.py,
test_attention_mm_clamp.py check their masks), use_td is accepted and ignored, a value of the
wrong type is refused by name; the per-sequence `causal` tensor; vLLM 0.33's
KVQuantMode refused by member name; a positional call in vLLM 0.33's order; the torch op taking
the mode by name."""
from __future__ import annotations

import enum
import json
import math
from pathlib import Path

import pytest
import torch

from rocke import runtime
from rocke.runtime.emu_device import EmuDevice
from rocke.vllm import KVQuantMode, SUPPORTED_KV_QUANT_MODES, unified_attention
from tests.kernels.test_vllm_contract import D, _close, _decode, _problem, _reference, _workspaces

SNAPSHOT = json.loads((Path(__file__).resolve().parents[1] / "fixtures" /
                       "vllm_contract_0.33.json").read_text())
NAMES = [p["name"] for p in SNAPSHOT["unified_attention"]["parameters"]]
VLLM_MODES = SNAPSHOT["KVQuantMode"]["members"]          # name -> value, CUSTOM an alias of 12

# each new parameter at the value vLLM 0.33's Triton backend passes with its feature off
NEUTRAL = [("rswa_prefix_lens", None), ("rswa_window", None), ("chunk_lookback", -1),
           ("chunk_lookback", 2),                         # no window here: changes nothing
           ("use_td", False), ("use_td", True),      # use_td: an XPU hint, accepted and ignored
           ("mm_prefix_clamp_sliding_window", False),
           ("mm_prefix_clamp_sliding_window", True)]    # no ranges here: changes nothing


def no_launch(monkeypatch):
    """Every way onto a device fails the test: rocke.runtime.launch, and what the entry point
    itself calls (rocke.runtime.prepare_launch, the emulator device's execute)."""
    def launch(*args, **kwargs):
        raise AssertionError("launched although the call should have been refused")
    monkeypatch.setattr(runtime, "launch", launch)
    monkeypatch.setattr(runtime, "prepare_launch", launch)
    monkeypatch.setattr(EmuDevice, "execute", launch)


@pytest.fixture(name="no_launch")
def _no_launch_fixture(monkeypatch):
    no_launch(monkeypatch)


def _prefill(q_lens=(3, 1, 2), kv_lens=(40, 23, 17), seed=0):
    return _problem(q_lens, kv_lens, seed)


@pytest.mark.parametrize("name,value", NEUTRAL)
def test_each_new_parameter_at_its_neutral_value_runs(name, value):
    a = _decode()
    unified_attention(**a, **{name: value})
    _close(a["out"], _reference(a))


def test_all_new_parameters_neutral_with_split_kv_and_prefill():
    neutral = dict(rswa_prefix_lens=None, rswa_window=None, chunk_lookback=-1, use_td=True,
                   mm_prefix_clamp_sliding_window=False)
    a = _decode()
    ws = _workspaces(rows=8, segments=3)
    unified_attention(**a, seq_threshold_3D=4, num_par_softmax_segments=3, **ws, **neutral)
    _close(a["out"], _reference(a))
    assert not ws["softmax_segm_max"][:a["q"].shape[0]].isnan().any()     # the 3D path ran
    p = _prefill()
    unified_attention(**p, **neutral)
    _close(p["out"], _reference(p))


@pytest.mark.parametrize("shape", ["decode", "prefill"])
def test_a_host_causal_tensor_of_ones_is_plain_causal(monkeypatch, shape):
    a = _decode() if shape == "decode" else _prefill()
    num_seqs = a["seqused_k"].shape[0]
    for flags in (torch.ones(num_seqs, dtype=torch.int32), torch.ones(num_seqs, dtype=torch.bool)):
        a["out"].zero_()
        unified_attention(**dict(a, causal=flags))
        _close(a["out"], _reference(a))
    if shape == "prefill":      # causal=False with prefill runs (test_attention_non_causal.py)
        a["out"].zero_()
        unified_attention(**dict(a, causal=False))
        from rocke.kernels.common.attention_reference import ref_paged_attn
        _close(a["out"], ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"],
                                        a["seqused_k"], a["block_table"], a["softmax_scale"],
                                        causal=False))


def test_all_35_parameters_bind_positionally_in_vllm_033_order():
    a = _decode()
    ws = _workspaces(rows=8, segments=3)
    by_name = dict(a, seq_threshold_3D=4, num_par_softmax_segments=3, **ws, alibi_slopes=None,
                   output_scale=None, qq_bias=None, sinks=None, mm_prefix_range=None,
                   rswa_prefix_lens=None, rswa_window=None, use_alibi_sqrt=False,
                   kv_quant_mode=KVQuantMode.NONE, k_scale_cache=None, v_scale_cache=None,
                   chunk_lookback=-1, use_td=False, mm_prefix_clamp_sliding_window=False)
    assert len(NAMES) == 35 and set(by_name) == set(NAMES)
    unified_attention(*[by_name[n] for n in NAMES])
    _close(a["out"], _reference(a))
    assert not ws["softmax_segm_max"][:a["q"].shape[0]].isnan().any()     # workspaces bound


@pytest.mark.parametrize("position, name", [(26, "rswa_prefix_lens"), (27, "rswa_window")])
def test_a_positional_r_swa_argument_alone_is_refused_by_its_vllm_name(no_launch, position,
                                                                        name):
    """R-SWA's two arguments bind at vLLM 0.33's positions: one without the other is named."""
    a = _decode()
    args = [a[n] for n in NAMES[:16]] + [None] * 10 + [None, None, False, KVQuantMode.NONE,
                                                        None, None, -1, False, False]
    args[position] = torch.zeros(2, dtype=torch.int32) if position == 26 else 7
    assert NAMES[position] == name
    with pytest.raises(ValueError, match=r"R-SWA takes both"):
        unified_attention(*args)
    assert not a["out"].any()


@pytest.mark.parametrize("value", [-1.0, True, "2"])
def test_a_chunk_lookback_that_is_not_an_int_is_refused_before_launch(no_launch, value):
    a = _decode()
    with pytest.raises(ValueError, match="^chunk_lookback: must be an int"):
        unified_attention(**a, chunk_lookback=value)
    assert not a["out"].any()


@pytest.mark.parametrize("value", [0, 1, "yes", None])
def test_a_clamp_flag_that_is_not_a_bool_is_refused_before_launch(no_launch, value):
    a = _decode()
    with pytest.raises(ValueError, match="^mm_prefix_clamp_sliding_window: must be a bool"):
        unified_attention(**a, mm_prefix_clamp_sliding_window=value)
    assert not a["out"].any()


def test_r_swa_as_vllms_backend_passes_it_runs():
    """vLLM's backend sets both R-SWA arguments together (tests/kernels/test_attention_rswa.py
    checks the mask against the reference)."""
    from rocke.kernels.common.attention_reference import ref_paged_attn
    a = _decode(kv_lens=(33, 17))
    prefix = torch.tensor([4, 4], dtype=torch.int32)
    unified_attention(**a, rswa_prefix_lens=prefix, rswa_window=16)
    want = ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                          a["block_table"], a["softmax_scale"], rswa_prefix_lens=prefix,
                          rswa_window=16)
    _close(a["out"], want)


def test_use_td_must_be_a_bool(no_launch):
    a = _decode()
    with pytest.raises(ValueError, match=r"^use_td: must be a bool"):
        unified_attention(**a, use_td="yes")


def test_a_host_causal_tensor_of_zeros_is_non_causal_prefill():
    """Every sequence non-causal: the batch runs as causal=False (test_attention_non_causal.py)."""
    from rocke.kernels.common.attention_reference import ref_paged_attn
    a = _prefill()
    unified_attention(**dict(a, causal=torch.zeros(3, dtype=torch.int32)))
    _close(a["out"], ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                                    a["block_table"], a["softmax_scale"], causal=False))


@pytest.mark.parametrize("flags,error,match", [
    (torch.ones(2, dtype=torch.int32, device="meta"), ValueError,
     r"^causal: on meta, but q is on cpu"),
    (torch.ones(3, dtype=torch.int32), ValueError, r"^causal: a per-sequence causal tensor must"),
    (torch.ones(2, 1, dtype=torch.int32), ValueError,
     r"^causal: a per-sequence causal tensor must"),
    (torch.ones(2), ValueError, r"^causal: a per-sequence causal tensor must"),
])
def test_other_causal_tensors_are_refused_before_launch(no_launch, flags, error, match):
    a = _decode()
    with pytest.raises(error, match=match):
        unified_attention(**dict(a, causal=flags))
    assert not a["out"].any()


def test_kv_quant_mode_is_vllm_033s_enum():
    assert {n: int(m) for n, m in KVQuantMode.__members__.items()} == VLLM_MODES
    assert KVQuantMode.CUSTOM is KVQuantMode.OCTAVE_K3V4


UNIMPLEMENTED = [n for n in VLLM_MODES if n not in SUPPORTED_KV_QUANT_MODES and n != "CUSTOM"]


@pytest.mark.parametrize("name", UNIMPLEMENTED)
def test_every_unimplemented_mode_is_refused_by_its_vllm_name(no_launch, name):
    vllms = enum.IntEnum("KVQuantMode", VLLM_MODES)       # vLLM's own enum, stand-in
    for mode in (getattr(KVQuantMode, name), vllms[name], VLLM_MODES[name]):
        a = _decode()
        with pytest.raises(NotImplementedError,
                           match=rf"^kv_quant_mode: KVQuantMode\.{name} is not implemented by "
                                 r"rocke yet: rocke's kernels read NONE"):
            unified_attention(**a, kv_quant_mode=mode)
        assert not a["out"].any()


def test_a_mode_newer_than_vllm_033_is_refused_by_its_name(no_launch):
    class Newer(enum.IntEnum):
        NONE = 0
        SOME_FUTURE_MODE = 99
    a = _decode()
    with pytest.raises(NotImplementedError, match=r"^kv_quant_mode: KVQuantMode\.SOME_FUTURE_MODE "
                                                  r"is not implemented by rocke yet \(nor is it"):
        unified_attention(**a, kv_quant_mode=Newer.SOME_FUTURE_MODE)


# ---- torch.ops.rocke.unified_attention --------------------------------------------------------

def test_the_ops_schema_is_vllm_033s_list_with_the_mode_by_name():
    schema = torch.ops.rocke.unified_attention.default._schema
    assert [arg.name for arg in schema.arguments] == NAMES
    mode = next(arg for arg in schema.arguments if arg.name == "kv_quant_mode")
    assert str(mode.type) == "str" and mode.default_value == "NONE"


def _op_args(a):
    return [a[n] for n in NAMES[:16]]


def test_the_op_runs_with_every_parameter_positional():
    a = _decode()
    ws = _workspaces(rows=8, segments=3)
    torch.ops.rocke.unified_attention(
        *_op_args(dict(a, window_size=[-1, -1])), 4, 3, ws["softmax_segm_output"],
        ws["softmax_segm_max"], ws["softmax_segm_expsum"], None, None, None, None, None, None,
        None, False, "NONE", None, None, -1, True, False)
    _close(a["out"], _reference(a))


@pytest.mark.parametrize("mode", ["TURBOQUANT_K8V4", "CUSTOM", "NVFP4", "ULTRAQUANT_4BIT",
                                  "SOME_FUTURE_MODE"])
def test_the_op_takes_the_mode_by_name_and_refuses_it_by_name(no_launch, mode):
    a = _decode()
    with pytest.raises(NotImplementedError, match=rf"^kv_quant_mode: KVQuantMode\.{mode} is not "
                                                  r"implemented by rocke yet"):
        torch.ops.rocke.unified_attention(*_op_args(dict(a, window_size=[-1, -1])),
                                          kv_quant_mode=mode)
    assert not a["out"].any()


def test_the_op_reads_no_mode_number(no_launch):
    """6 is vLLM 0.33's TURBOQUANT_K8V4 (and was rocke's INT2): the op takes names only."""
    a = _decode()
    with pytest.raises(RuntimeError, match="Expected a value of type 'str' for argument "
                                           "'kv_quant_mode'"):
        torch.ops.rocke.unified_attention(*_op_args(dict(a, window_size=[-1, -1])),
                                          kv_quant_mode=6)


def test_the_ops_fake_refuses_what_the_op_refuses():
    from torch._subclasses.fake_tensor import FakeTensorMode
    a = _decode()
    with FakeTensorMode(allow_non_fake_inputs=True):
        torch.ops.rocke.unified_attention(*_op_args(dict(a, window_size=[-1, -1])),
                                          chunk_lookback=-1, use_td=True)
        with pytest.raises(NotImplementedError, match=r"^kv_quant_mode: KVQuantMode\.NVFP4 "):
            torch.ops.rocke.unified_attention(*_op_args(dict(a, window_size=[-1, -1])),
                                              kv_quant_mode="NVFP4")
    assert not a["out"].any()


class _Attend(torch.nn.Module):
    """The op called as vLLM 0.33's backend would call it, by keyword, every new parameter at
    its neutral value and the mode by name."""

    def forward(self, q, k, v, cu, seqused, table):
        out = torch.empty_like(q)
        torch.ops.rocke.unified_attention(
            q=q, k=k, v=v, out=out, cu_seqlens_q=cu, max_seqlen_q=1, seqused_k=seqused,
            max_seqlen_k=40, softmax_scale=1 / math.sqrt(D), causal=True, window_size=[-1, -1],
            block_table=table, softcap=0.0, q_descale=None, k_descale=None, v_descale=None,
            rswa_prefix_lens=None, rswa_window=None, kv_quant_mode="NONE", chunk_lookback=-1,
            use_td=False, mm_prefix_clamp_sliding_window=False)
        return out      # no pointwise work: inductor then generates no C++ (a quick test)


def test_the_op_with_the_new_parameters_compiles_fullgraph():
    a = _decode()
    inputs = (a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"], a["block_table"])
    with torch.no_grad():
        eager = _Attend()(*inputs)
        compiled = torch.compile(_Attend(), fullgraph=True, backend="inductor")(*inputs)
    assert torch.equal(compiled, eager)
    _close(eager, _reference(a))
