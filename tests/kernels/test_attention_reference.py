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
