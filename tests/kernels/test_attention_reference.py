"""ref_paged_attn against torch's dense SDPA on hand-gathered K/V: the referee is refereed."""
import math

import pytest
import torch

from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol


def _case(seed=0):
    g = torch.Generator().manual_seed(seed)
    hq, hk, d, bs = 4, 2, 16, 4
    lens = [(5, 9), (3, 3), (1, 7)]
    cu = [0]
    for ql, _ in lens:
        cu.append(cu[-1] + ql)
    kc, vc = torch.randn(10, bs, hk, d, generator=g), torch.randn(10, bs, hk, d, generator=g)
    q = torch.randn(cu[-1], hq, d, generator=g)
    bt = torch.tensor([[3, 0, 5], [7, 1, 2], [9, 4, 6]], dtype=torch.int32)
    return q, kc, vc, torch.tensor(cu, dtype=torch.int32), lens, bt


def _dense(q, kc, vc, cu, lens, bt, s, scale, mask_fn):
    ql, kl = lens[s]
    bs, hk = kc.shape[1], kc.shape[2]
    group = q.shape[1] // hk
    pages = bt[s, :-(-kl // bs)].long()
    k = kc[pages].reshape(-1, hk, kc.shape[3])[:kl].repeat_interleave(group, 1)
    v = vc[pages].reshape(-1, hk, vc.shape[3])[:kl].repeat_interleave(group, 1)
    qs = q[cu[s]:cu[s + 1]]
    return torch.nn.functional.scaled_dot_product_attention(
        qs.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask_fn(ql, kl),
        scale=scale).transpose(0, 1)


@pytest.mark.parametrize("causal", [True, False])
def test_matches_sdpa_bottom_right_causal(causal):
    q, kc, vc, cu, lens, bt = _case()
    out = ref_paged_attn(q, kc, vc, cu, torch.tensor([kl for _, kl in lens]), bt, 0.3, causal=causal)
    for s in range(len(lens)):
        mask = (lambda ql, kl: torch.ones(ql, kl, dtype=torch.bool).tril(kl - ql)) if causal else \
            (lambda ql, kl: torch.ones(ql, kl, dtype=torch.bool))
        want = _dense(q, kc, vc, cu, lens, bt, s, 0.3, mask)
        assert (want - out[cu[s]:cu[s + 1]]).abs().max() < 1e-5


def test_sliding_window_masks_old_keys():
    q, kc, vc, cu, lens, bt = _case(1)
    out = ref_paged_attn(q, kc, vc, cu, torch.tensor([kl for _, kl in lens]), bt, 0.3,
                         window_size=(2, -1))
    for s in range(len(lens)):
        def mask(ql, kl):
            qpos = torch.arange(ql)[:, None] + kl - ql
            kpos = torch.arange(kl)[None, :]
            return (kpos <= qpos) & (kpos >= qpos - 2)
        want = _dense(q, kc, vc, cu, lens, bt, s, 0.3, mask)
        assert (want - out[cu[s]:cu[s + 1]]).abs().max() < 1e-5


def test_sinks_only_add_to_the_denominator():
    q, kc, vc, cu, lens, bt = _case(2)
    kv = torch.tensor([kl for _, kl in lens])
    plain = ref_paged_attn(q, kc, vc, cu, kv, bt, 0.3)
    huge_sink = ref_paged_attn(q, kc, vc, cu, kv, bt, 0.3, sinks=torch.full((4,), 60.0))
    assert plain.abs().max() > 0.1 and huge_sink.abs().max() < 1e-6
    assert ref_paged_attn(q, kc, vc, cu, kv, bt, 0.3, sinks=torch.full((4,), -math.inf)).sub(plain).abs().max() < 1e-6


def test_tolerances_are_named_and_refuse_unknown_dtypes():
    assert attention_atol("f16") == 2e-2 and attention_atol("bf16") == 4e-2
    with pytest.raises(ValueError, match="dtype"):
        attention_atol("f64")


def test_alibi_sqrt_matches_sdpa_with_vllms_bias():
    """ALGORITHM.md §13.3: slope * -sqrt(query_pos - key_pos) on visible keys, as an SDPA bias."""
    q, kc, vc, cu, lens, bt = _case(3)
    slopes = torch.tensor([0.5, 0.25, 1.0, 2.0])
    out = ref_paged_attn(q, kc, vc, cu, torch.tensor([kl for _, kl in lens]), bt, 0.3,
                         alibi_slopes=slopes, alibi_sqrt=True)
    plain = ref_paged_attn(q, kc, vc, cu, torch.tensor([kl for _, kl in lens]), bt, 0.3,
                           alibi_slopes=slopes)
    assert (out - plain).abs().max() > 0.05
    for s in range(len(lens)):
        def bias(ql, kl):
            qpos = torch.arange(ql)[:, None] + kl - ql
            kpos = torch.arange(kl)[None, :]
            dist = (qpos - kpos).float()
            b = slopes[:, None, None] * -dist.clamp(min=0).sqrt()
            return b.masked_fill(kpos > qpos, -math.inf)
        want = _dense(q, kc, vc, cu, lens, bt, s, 0.3, bias)
        assert (want - out[cu[s]:cu[s + 1]]).abs().max() < 1e-5


def test_per_token_head_scales_scale_each_cache_row():
    """k/v_scale_cache [num_blocks, block_size, Hk] multiply each (token, head) row: the same as
    SDPA on a cache dequantized row by row by hand."""
    q, kc, vc, cu, lens, bt = _case(4)
    g = torch.Generator().manual_seed(9)
    ks, vs = torch.rand(10, 4, 2, generator=g) + 0.1, torch.rand(10, 4, 2, generator=g) + 0.1
    codes_k, codes_v = (kc * 20).round().to(torch.int8), (vc * 20).round().to(torch.int8)
    out = ref_paged_attn(q, codes_k, codes_v, cu, torch.tensor([kl for _, kl in lens]), bt, 0.3,
                         k_scale_cache=ks, v_scale_cache=vs)
    deq_k = torch.empty(10, 4, 2, 16)
    deq_v = torch.empty(10, 4, 2, 16)
    for b in range(10):
        for t in range(4):
            for h in range(2):
                deq_k[b, t, h] = codes_k[b, t, h].float() * ks[b, t, h]
                deq_v[b, t, h] = codes_v[b, t, h].float() * vs[b, t, h]
    for s in range(len(lens)):
        want = _dense(q, deq_k, deq_v, cu, lens, bt, s, 0.3,
                      lambda ql, kl: torch.ones(ql, kl, dtype=torch.bool).tril(kl - ql))
        assert (want - out[cu[s]:cu[s + 1]]).abs().max() < 1e-4


def test_fp8_output_is_vllms_saturating_e4m3fnuz_store():
    """output_scale: o * (1 / scale), clamped to +-240, rounded to nearest-even e4m3fnuz."""
    from rocke.kernels.common.attention_reference import quantize_fp8_output
    got = quantize_fp8_output(torch.tensor([1000.0, -1000.0, 1.0625, 1.1875, 0.3, 250.0, 2.0]), 1.0)
    # 1.0625 ties between 1.0 and 1.125 -> even (1.0); 1.1875 ties -> 1.25; 0.3 -> 10 * 2^-5
    assert got.tolist() == [240.0, -240.0, 1.0, 1.25, 0.3125, 240.0, 2.0]
    halved = quantize_fp8_output(torch.tensor([1.0, 3.0]), torch.tensor([0.5]))
    assert halved.tolist() == [2.0, 6.0]
    q, kc, vc, cu, lens, bt = _case(5)
    kv = torch.tensor([kl for _, kl in lens])
    plain = ref_paged_attn(q, kc, vc, cu, kv, bt, 0.3)
    out = ref_paged_attn(q, kc, vc, cu, kv, bt, 0.3, output_scale=torch.tensor([0.01]))
    step = torch.exp2(torch.floor(torch.log2((plain / 0.01).abs().clamp(min=2 ** -7))) - 3)
    assert ((out - (plain / 0.01).clamp(-240, 240)).abs() <= step / 2 + 1e-6).all()
