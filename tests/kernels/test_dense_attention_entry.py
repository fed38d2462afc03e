"""rocke.dense_attention (and torch.ops.rocke.dense_attention) on the emulator against torch SDPA
in fp32: both layouts, GQA, causal, a ragged batch, the rounding modes; refusals before launch."""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import rocke.dense_attention as dense
from rocke.kernels.common.tolerances import attention_atol


def _reference(q, k, v, lens, causal, scale):
    """SDPA per sequence on its first L rows, [B, S, H, D] in and out (fp32)."""
    out = torch.zeros(q.shape, dtype=torch.float32)
    group = q.shape[2] // k.shape[2]
    for b, n in enumerate(lens):
        qb, kb, vb = (t[b, :n].float().transpose(0, 1) for t in (q, k, v))
        kb, vb = kb.repeat_interleave(group, 0), vb.repeat_interleave(group, 0)
        out[b, :n] = F.scaled_dot_product_attention(qb, kb, vb, is_causal=causal,
                                                    scale=scale).transpose(0, 1)
    return out


def _inputs(B, S, H, HKV, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, 128, generator=gen).to(dtype)
    k, v = (torch.randn(B, S, HKV, 128, generator=gen).to(dtype) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_both_layouts_against_sdpa(layout, causal):
    q, k, v = _inputs(1, 300, 4, 2)
    ref = _reference(q, k, v, [300], causal, 1 / math.sqrt(128))
    if layout == "bhsd":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = dense.dense_attention(q, k, v, causal=causal, layout=layout)
    if layout == "bhsd":
        out = out.transpose(1, 2)
    assert float((out.float() - ref).abs().max()) <= attention_atol("bf16")


def test_ragged_batch_and_torch_op_with_rounding():
    q, k, v = _inputs(2, 260, 2, 1, torch.bfloat16, seed=3)
    lens = torch.tensor([260, 70], dtype=torch.int32)
    out = torch.ops.rocke.dense_attention(q, k, v, True, 0.1, lens, "bshd", "rtz")
    again = dense.dense_attention(q, k, v, causal=True, sm_scale=0.1, seq_lens=lens, rounding="rtz")
    assert torch.equal(out[0], again[0]) and torch.equal(out[1, :70], again[1, :70])   # bit-identical
    ref = _reference(q, k, v, [260, 70], True, 0.1)
    assert float((out[0].float() - ref[0]).abs().max()) <= attention_atol("bf16")
    assert float((out[1, :70].float() - ref[1, :70]).abs().max()) <= attention_atol("bf16")


@pytest.mark.parametrize("change, words", [
    (dict(k=torch.zeros(1, 64, 3, 128, dtype=torch.bfloat16),
          v=torch.zeros(1, 64, 3, 128, dtype=torch.bfloat16)), "3 KV heads for 4 query heads"),
    (dict(v=torch.zeros(1, 64, 1, 128, dtype=torch.bfloat16)), "differs from k's"),
    (dict(k=torch.zeros(1, 32, 2, 128, dtype=torch.bfloat16),
          v=torch.zeros(1, 32, 2, 128, dtype=torch.bfloat16)), "use dense_attention_varlen"),
    (dict(q=torch.zeros(1, 64, 4, 64, dtype=torch.bfloat16)), "head size 64"),
    (dict(q=torch.zeros(1, 64, 4, 128)), "bfloat16 or float16"),
    (dict(layout="sbhd"), "layout: one of"),
    (dict(rounding="rtne"), "rounding: one of"),
    (dict(seq_lens=torch.tensor([65], dtype=torch.int32)), r"seq_lens: every length must be in \[0, 64\], got \[65\]"),
    (dict(rounding="rna", q=torch.zeros(1, 64, 4, 128, dtype=torch.float16),
          k=torch.zeros(1, 64, 2, 128, dtype=torch.float16),
          v=torch.zeros(1, 64, 2, 128, dtype=torch.float16)), "bf16 mode"),
])
def test_bad_calls_are_refused_before_launch(change, words, monkeypatch):
    import rocke.runtime
    monkeypatch.setattr(rocke.runtime, "launch", lambda *a, **kw: pytest.fail("launched"))
    args = dict(q=torch.zeros(1, 64, 4, 128, dtype=torch.bfloat16),
                k=torch.zeros(1, 64, 2, 128, dtype=torch.bfloat16),
                v=torch.zeros(1, 64, 2, 128, dtype=torch.bfloat16))
    args.update(change)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(ValueError, match=words):
        dense.dense_attention(q, k, v, **args)


def _packed(lq, lk, H=4, HKV=2, seed=7):
    gen = torch.Generator().manual_seed(seed)
    cq = torch.tensor([0] + list(itertools.accumulate(lq)), dtype=torch.int32)
    ck = torch.tensor([0] + list(itertools.accumulate(lk)), dtype=torch.int32)
    q = torch.randn(int(cq[-1]), H, 128, generator=gen).bfloat16()
    k, v = (torch.randn(int(ck[-1]), HKV, 128, generator=gen).bfloat16() for _ in range(2))
    return q, k, v, cq, ck


def _varlen_reference(q, k, v, cq, ck, causal, scale):
    """SDPA per sequence, bottom-right causal (key j visible to query i when j <= i + L_k - L_q)."""
    out = torch.zeros(q.shape, dtype=torch.float32)
    group = q.shape[1] // k.shape[1]
    for b in range(len(cq) - 1):
        qs, qe, ks, ke = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
        if qe == qs:
            continue
        qb = q[qs:qe].float().transpose(0, 1)
        kb, vb = (t[ks:ke].float().transpose(0, 1).repeat_interleave(group, 0) for t in (k, v))
        mask = None
        if causal:
            mask = torch.arange(ke - ks)[None, :] <= torch.arange(qe - qs)[:, None] + (ke - ks) - (qe - qs)
        out[qs:qe] = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask,
                                                    scale=scale).transpose(0, 1)
    return out


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_varlen_and_cross_attention_lengths_against_sdpa(causal):
    """Packed sequences of different lengths, keys longer or (non-causal) shorter than queries,
    an empty sequence; the rows past the last token untouched."""
    lq = [300, 37, 0, 65]
    lk = [330, 37, 9, 200] if causal else [20, 300, 9, 64]
    q, k, v, cq, ck = _packed(lq, lk)
    out = torch.full_like(q, 7.0)
    dense.dense_attention_varlen(q, k, v, cq, ck, max(lq), causal=causal, sm_scale=0.1, out=out)
    ref = _varlen_reference(q, k, v, cq, ck, causal, 0.1)
    assert float((out.float() - ref).abs().max()) <= attention_atol("bf16")


@pytest.mark.parametrize("lk, words", [
    ([30, 37], "sequence 0 has 30 keys for 100 queries"),
    ([0, 37], "has 100 queries and no keys"),
])
def test_varlen_refusals_name_the_sequence(lk, words, monkeypatch):
    import rocke.runtime
    monkeypatch.setattr(rocke.runtime, "launch", lambda *a, **kw: pytest.fail("launched"))
    q, k, v, cq, ck = _packed([100, 37], lk)
    with pytest.raises(ValueError, match=words):
        dense.dense_attention_varlen(q, k, v, cq, ck, 100, causal=True)
    with pytest.raises(ValueError, match="more than the spec's seq_len 256"):
        dense.dense_attention_varlen(*_packed([300, 37], [300, 37])[:5], 100, causal=True)


def test_a_split_launch_through_the_entry_point(monkeypatch):
    """dense_attention's split launch with a plan that splits this small problem (6 resident
    workgroups): 8 items, 6 whole and 2 in 3 pieces each (the last
    piece of each merging); the ragged second sequence's padding untouched."""
    from rocke.kernels.gfx942 import dense_prefill as family
    real = family.tail_split
    plans = []

    def small(spec, B):
        plans.append(real(spec, B, slots=6))
        return plans[-1]
    monkeypatch.setattr(family, "tail_split", small)
    q, k, v = _inputs(2, 300, 2, 1, seed=4)
    lens = torch.tensor([300, 90], dtype=torch.int32)
    out = torch.full_like(q, 5.0)
    dense.dense_attention(q, k, v, seq_lens=lens, out=out)
    assert plans and (plans[0].full_items, plans[0].chunks, plans[0].tail_items) == (6, 3, 2)
    # dense_spec names the kernel the call launches: the split one here, the plain one unsplit
    assert dense.dense_spec(q, k, v).kernel_name.endswith("_split")
    monkeypatch.setattr(family, "tail_split", real)
    assert not dense.dense_spec(q, k, v).split_tail
    ref = _reference(q, k, v, [300, 90], False, 1 / math.sqrt(128))
    assert float((out[0].float() - ref[0]).abs().max()) <= attention_atol("bf16")
    assert float((out[1, :90].float() - ref[1, :90]).abs().max()) <= attention_atol("bf16")
    assert (out[1, 90:] == 5.0).all()
