"""vLLM's HND KV cache: ``[num_blocks, num_kv_heads, block_size, head_size]`` memory passed as
a view ``[num_blocks, block_size, num_kv_heads, head_size]`` (strides ``(Hk*bs*D, D, bs*D,
1)``), as vLLM's ROCm backends may. The attention kernels take the block, token and head
strides as arguments (attention_host.cache_args, rocke.dsl.paged.copy_paged_tile), so the view
runs on the 2D and 3D paths, an fp8 cache too; caches whose rows really overlap stay refused."""
from __future__ import annotations

import math

import pytest
import torch

from rocke import vllm
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.checks import check_paged_cache_strides
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.unified_inputs import make_inputs


def hnd(t):
    """The same values held HND in memory, viewed NHD."""
    return t.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)


def _hnd_inputs(seqs, fp8=False, **kw):
    a = make_inputs(seqs, **kw)
    if fp8:
        a["k"], a["v"] = (t.to(torch.float8_e4m3fnuz) for t in (a["k"], a["v"]))
        hk = a["k"].shape[2]
        a["k_descale"] = torch.tensor(0.75).expand(len(seqs), hk)
        a["v_descale"] = torch.tensor(1.25).expand(len(seqs), hk)
    nhd = (a["k"], a["v"])
    a["k"], a["v"] = hnd(a["k"]), hnd(a["v"])
    nb, bs, hk, d = a["k"].shape
    assert a["k"].stride() == (hk * bs * d, d, bs * d, 1) and a["v"].stride() == a["k"].stride()
    return a, nhd


def _check(a, nhd, dtype="f16"):
    ref = ref_paged_attn(a["q"], *nhd, a["cu_seqlens_q"], a["seqused_k"], a["block_table"],
                         a["softmax_scale"], k_descale=a["k_descale"], v_descale=a["v_descale"])
    err = (a["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype), f"max abs error {err}"


@pytest.mark.parametrize("backend, fp8, d, bs, hq, hk", [
    ("2d", False, 64, 16, 4, 2),
    ("3d", False, 64, 16, 4, 2),
    ("2d", True, 64, 16, 4, 2),
    ("3d", True, 64, 16, 4, 2),
    ("2d", False, 128, 32, 8, 2),       # GQA 4:1, d128, 32-token pages
], ids=["2d", "3d", "2d-fp8", "3d-fp8", "2d-d128-bs32"])
def test_an_hnd_cache_view_runs_against_the_reference(backend, fp8, d, bs, hq, hk):
    a, nhd = _hnd_inputs([(3, 40), (1, 23)], fp8=fp8, hq=hq, hk=hk, d=d, bs=bs, seed=3)
    record = au.run_unified_attention_torch(**a, backend=backend)
    assert record.plan.path == backend
    _check(a, nhd)


def test_an_hnd_cache_through_vllms_adapter_on_both_paths():
    """rocke.vllm.unified_attention with HND caches: a decode step on 3D with the caller's
    workspaces, then on 2D (no 3D arguments)."""
    a, nhd = _hnd_inputs([(1, 40), (1, 23)], hq=4, hk=2, seed=4)
    hq, d = a["q"].shape[1:]
    ws = dict(softmax_segm_output=torch.full((2, hq, 3, d), math.nan),
              softmax_segm_max=torch.full((2, hq, 3), math.nan),
              softmax_segm_expsum=torch.full((2, hq, 3), math.nan))
    vllm.unified_attention(**a, seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    assert not ws["softmax_segm_max"].isnan().any()            # the 3D path ran
    _check(a, nhd)
    a["out"].fill_(7.0)
    vllm.unified_attention(**a)
    _check(a, nhd)


def _expanded_heads(k):         # one head's rows read as every head's: stride 0
    return k[:, :, :1].expand(k.shape)


def _rows_overlap(k):
    return k.as_strided(k.shape, (64, 64, 64, 1))


def _blocks_overlap(k):         # HND rows, but the block stride one head's block long
    nb, bs, hk, d = k.shape
    return k.as_strided(k.shape, (bs * d, d, bs * d, 1))


@pytest.mark.parametrize("mutate, message", [
    (_expanded_heads,
     r"^k: rows overlap: shape \[\d+, 16, 2, 64\] has strides \(2048, 128, 0, 1\)"),
    (_rows_overlap, r"^k: rows overlap: .*NHD layout or HND memory"),
    (_blocks_overlap, r"^k: blocks overlap: .*block stride 1024, but a block's rows span 2048"),
], ids=["expanded-heads", "rows-overlap", "blocks-overlap"])
def test_a_cache_whose_rows_overlap_is_refused(monkeypatch, mutate, message):
    import rocke.runtime
    monkeypatch.setattr(rocke.runtime, "launch", lambda *x, **y: pytest.fail("launched"))
    a = make_inputs([(3, 20), (1, 33)], hq=4, hk=2, d=64, bs=16)
    a["k"] = mutate(a["k"])
    with pytest.raises(ValueError, match=message):
        au.run_unified_attention_torch(**a)
    assert (a["out"] == 7.0).all()


@pytest.mark.parametrize("shape, strides, message", [
    ((8, 16, 2, 64), (2048, 128, 64, 1), None),                    # NHD
    ((8, 16, 2, 64), (2048, 64, 1024, 1), None),                   # HND viewed as NHD
    ((8, 16, 2, 64), (4096, 64, 2048, 1), None),                   # HND, padded blocks and heads
    ((8, 16, 2, 64), (4096, 256, 64, 1), None),                    # NHD, padded tokens
    ((1, 16, 1, 64), (1024, 64, 7, 1), None),                      # one head: its stride unused
    ((8, 16, 2, 64), (2048, 128, 64, 2), r"stride 1"),
    ((8, 16, 2, 64), (2048, 64, 64, 1), r"rows overlap"),          # token and head rows alias
    ((8, 16, 2, 64), (2048, 96, 1024, 1), r"rows overlap"),        # tokens 96 apart, rows 64 long
    ((8, 16, 2, 64), (2047, 128, 64, 1), r"blocks overlap"),
    ((1, 16, 2, 64), (1, 128, 64, 1), r"blocks overlap"),         # one block: still its extent
    ((8, 16, 2, 64), (2 ** 31, 128, 64, 1), r"stride 2147483648 exceeds the kernel's 32-bit"),
    ((8, 16, 2, 64), (2 ** 33, 2 ** 32, 2 ** 31, 1), r"32-bit"),
])
def test_the_cache_stride_rule(shape, strides, message):
    if message is None:
        check_paged_cache_strides("k", shape, strides)
    else:
        with pytest.raises(ValueError, match=rf"^k: .*{message}"):
            check_paged_cache_strides("k", shape, strides)
