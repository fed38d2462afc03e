"""vLLM 0.33's inline per-token-head scale layout: one cache tensor whose rows hold
``[K (head_size) | K scale (4 bytes) | V (head_size) | V scale (4 bytes)]`` per (block, head,
slot), the k/v caches views of its two halves (rows ``head_size + 4`` bytes' worth long) and the
scale caches strided fp32 views into the same bytes -- physically HND or NHD. Through rocke.vllm
on the emulator (2D and 3D) against the fp32 reference, built from the same codes and scales
stored plainly; a scale view whose rows overlap is refused before launch."""
from __future__ import annotations

import pytest
import torch

from rocke.kernels.common.tolerances import attention_atol
from rocke.vllm import KVQuantMode, unified_attention
from tests.kernels.test_attention_quant import _quant_caches
from tests.kernels.test_vllm_033_contract import no_launch
from tests.kernels.test_vllm_contract import _workspaces
from tests.kernels.unified_inputs import make_inputs, reference

MODES = {"i8tok": KVQuantMode.INT8_PER_TOKEN_HEAD, "fp8tok": KVQuantMode.FP8_PER_TOKEN_HEAD}


def inline_caches(codes, scales, physical: str):
    """(k view, v view, k scale view, v scale view) laid out as vLLM 0.33 packs them: a
    logical ``[num_blocks, num_kv_heads, block_size, 2 * (head_size + pad)]`` tensor (pad: one
    fp32's elements), its memory HND (that order) or NHD (block, slot, head), the k/v views
    taken by swapping the head and slot dimensions and splitting the row."""
    k_codes, v_codes = codes
    nb, bs, hk, d = k_codes.shape
    pad = 4 // k_codes.element_size()
    row = 2 * (d + pad)
    if physical == "HND":
        packed = torch.zeros(nb, hk, bs, row, dtype=torch.uint8)
    else:
        packed = torch.zeros(nb, bs, hk, row, dtype=torch.uint8).transpose(1, 2)
    packed = packed.view(k_codes.dtype)
    k, v = packed.transpose(1, 2).split(d + pad, dim=-1)
    k[..., :d] = k_codes
    v[..., :d] = v_codes
    words = torch.empty(0, dtype=torch.float32).set_(packed.untyped_storage())
    stride = tuple(st * packed.element_size() // 4 for st in packed.stride())
    views = []
    for offset in (d, d + pad + d):       # the scale after K's row, then after V's
        view = torch.as_strided(words, (nb, bs, hk), (stride[0], stride[2], stride[1]),
                                offset * packed.element_size() // 4)
        view.copy_(scales[len(views)])
        views.append(view)
    return k, v, views[0], views[1]


def _setup(seqs, kind, physical, d=64, hq=4, hk=2, bs=16, seed=0):
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype="f16", seed=seed)
    codes, scales = _quant_caches(args, kind, seed)
    k, v, ks, vs = inline_caches(codes, scales, physical)
    assert k.shape[-1] == d + 4 // k.element_size() and not ks.is_contiguous()
    want = reference(dict(args, k=codes[0], v=codes[1]), k_scale_cache=scales[0],
                     v_scale_cache=scales[1])
    plain = reference(dict(args, k=codes[0], v=codes[1]))     # without the scales
    assert (want - plain).abs().max() > 0.05, "the scales change nothing"
    args.update(k=k, v=v, k_scale_cache=ks, v_scale_cache=vs, kv_quant_mode=MODES[kind])
    return args, want


@pytest.mark.parametrize("kind, physical, seqs, d", [
    ("i8tok", "HND", [(5, 40), (9, 9), (1, 23)], 64),
    ("fp8tok", "NHD", [(5, 40), (9, 9), (1, 23)], 64),
    ("i8tok", "NHD", [(3, 33), (7, 20)], 128),
])
def test_inline_scale_caches_run_on_2d(kind, physical, seqs, d):
    args, want = _setup(seqs, kind, physical, d=d, seed=len(seqs) + d)
    unified_attention(**args)
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol("f16"), f"max |out - ref| {err}"


def test_inline_scale_caches_run_on_3d():
    args, want = _setup([(1, 40), (1, 70)], "i8tok", "HND", seed=3)
    hq, d = args["q"].shape[1:]
    ws = _workspaces(2, 3, hq, d)              # one row per token: the 3D path writes them all
    unified_attention(**args, seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    assert not ws["softmax_segm_expsum"].isnan().any()           # the 3D path ran
    assert (args["out"].float() - want).abs().max() <= attention_atol("f16")


@pytest.mark.parametrize("mutate, match", [
    # scale rows that overlap: every slot of a block reads one word
    (lambda a: a.update(k_scale_cache=torch.as_strided(a["k_scale_cache"], a["k_scale_cache"].shape,
                                                       (a["k_scale_cache"].stride(0), 0, 1))),
     r"^k_scale_cache: rows overlap"),
    # a row longer than head_size + one fp32 is no layout vLLM writes
    (lambda a: a.update(k=torch.zeros(*a["k"].shape[:3], a["k"].shape[3] + 4, dtype=torch.int8),
                        v=torch.zeros(*a["k"].shape[:3], a["k"].shape[3] + 4, dtype=torch.int8)),
     r"^k: head_size 72 differs from q's 64 \(with per-token-head scales stored inline after "
     r"each row: 68\)"),
])
def test_bad_inline_layouts_are_refused_before_launch(monkeypatch, mutate, match):
    no_launch(monkeypatch)
    args, _ = _setup([(5, 40), (1, 23)], "i8tok", "HND", seed=7)
    mutate(args)
    before = args["out"].clone()
    with pytest.raises(ValueError, match=match):
        unified_attention(**args)
    assert torch.equal(args["out"], before)
