"""Issue 16, second half: GQA groups above 16 (split over q-head blocks), vLLM's
``mm_prefix_range`` (bidirectional multimodal ranges in a causal prefill), the batch-invariant
mode, and the score features on head size 256 -- each through ``run_unified_attention_torch``
in the emulator against ``ref_paged_attn`` (whose mm extension is itself checked against
independent torch math), on both paths, plus bad-input refusals before launch."""
from __future__ import annotations

import math

import pytest
import torch

from rocke import runtime
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.gfx942 import attention_dispatch as dispatch
from tests.kernels.unified_inputs import make_inputs, reference as _ref

PREFILL = [(9, 20), (6, 6), (1, 30)]          # prefill with context, pure prefill, decode


def _check(args, ref, plain, dtype, record):
    err = (args["out"].float() - ref).abs().max().item()
    # the feature matters on these inputs: ignoring it would fail the tolerance
    assert (plain - ref).abs().max().item() > 3 * attention_atol(dtype), "feature has no effect"
    assert err <= attention_atol(dtype), f"max |out - ref| {err} ({record.plan.specs[0].kernel_name})"


# ---- GQA groups above 16 ------------------------------------------------------------------

@pytest.mark.parametrize("group, want", [(1, (1, 1)), (16, (16, 1)), (32, (16, 2)), (64, (16, 4)),
                                         (24, (12, 2)), (17, (1, 17)), (48, (16, 3))])
def test_split_group_keeps_whole_heads_per_block(group, want):
    heads, blocks = dispatch.split_group(group)
    assert (heads, blocks) == want and heads * blocks == group and heads <= 16


@pytest.mark.parametrize("backend, dtype, bs, hq, hk, d, want_split", [
    ("2d", "f16", 16, 32, 1, 64, 2),       # MQA 32:1, transposed-x8
    ("2d", "bf16", 64, 48, 2, 64, 2),      # 24:1 -> 2 blocks of 12 heads per KV head
    ("3d", "bf16", 64, 64, 1, 64, 4),      # MQA 64:1, 3D narrow
    ("3d", "f16", 16, 64, 2, 128, 2),      # 32:1 on 3D
])
def test_large_gqa_groups_match_the_reference(backend, dtype, bs, hq, hk, d, want_split):
    args = make_inputs([(1, 37), (4, 21), (1, 5)], hq=hq, hk=hk, d=d, bs=bs, dtype=dtype,
                       seed=hq + bs)
    record = au.run_unified_attention_torch(**args, backend=backend)
    spec = record.plan.specs[0]
    assert spec.group_split == want_split and spec.num_queries_per_kv * want_split == hq // hk
    ref = _ref(args)
    err = (args["out"].float() - ref).abs().max().item()
    assert err <= attention_atol(dtype), f"{spec.kernel_name}: {err}"


def test_large_group_with_per_head_features():
    """ALiBi slopes and sinks are per query head: each q-head block must read its own."""
    args = make_inputs([(3, 19), (1, 40)], hq=32, hk=1, d=64, bs=16, dtype="f16", seed=3)
    g = torch.Generator().manual_seed(5)
    slopes = torch.rand(32, generator=g) * 0.5 + 0.05
    sinks = torch.randn(32, generator=g) + 3.0
    record = au.run_unified_attention_torch(**args, alibi_slopes=slopes, sinks=sinks, backend="3d")
    assert record.plan.specs[0].group_split == 2
    _check(args, _ref(args, alibi_slopes=slopes, sinks=sinks), _ref(args), "f16", record)


def test_groups_beyond_the_kernels_are_refused_before_launch(monkeypatch):
    args = make_inputs([(1, 5)], hq=257, hk=1, d=64)
    launched = []
    monkeypatch.setattr(runtime, "launch", lambda *x, **y: launched.append(x))
    with pytest.raises(ValueError, match="GQA group of 257 .* exceeds the kernels' 256"):
        au.run_unified_attention_torch(**args)
    assert not launched and (args["out"] == 7.0).all()


def test_a_split_spec_names_its_split_and_the_default_leaves_names_alone():
    from rocke.kernels.gfx942 import attention_tiled_2d as a2
    base = a2.UnifiedAttention2DSpec(num_queries_per_kv=16)
    split = a2.UnifiedAttention2DSpec(num_queries_per_kv=16, group_split=2)
    assert "_gs" not in base.kernel_name and split.kernel_name == base.kernel_name + "_gs2"
    with pytest.raises(ValueError, match=r"^group_split: must be an int in \[1, 256\]"):
        a2.UnifiedAttention2DSpec(group_split=0)


# ---- mm_prefix_range ------------------------------------------------------------------------

def _independent_mm_attention(q, k, v, q_len, kv_len, scale, ranges):
    """One sequence's fp32 attention with vLLM's mm mask built as a full [kv, kv] position
    matrix (causal lower triangle OR same-range blocks), sliced to the queries' rows, and
    torch's scaled_dot_product_attention; no code shared with ref_paged_attn."""
    full = torch.ones(kv_len, kv_len, dtype=torch.bool).tril()
    for start, end in ranges:
        if start < end:
            lo, hi = max(start, 0), min(end, kv_len - 1)
            if lo <= hi:
                full[lo:hi + 1, lo:hi + 1] = True
    mask = full[kv_len - q_len:]
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, 1).transpose(0, 1)
    v = v.repeat_interleave(group, 1).transpose(0, 1)
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), k, v,
                                                           attn_mask=mask, scale=scale)
    return out.transpose(0, 1)


MM = [[[12, 16], [0, 0]], [[1, 4], [5, 3]], [[2, 29], [-1, -1]]]   # inclusive; start >= end unused


def test_reference_mm_prefix_matches_independent_torch_math():
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="f16", seed=11)
    mm = torch.tensor(MM, dtype=torch.int32)
    ref = _ref(args, mm_prefix_range=mm)
    cu, lens = args["cu_seqlens_q"].tolist(), args["seqused_k"].tolist()
    for s, kv_len in enumerate(lens):
        pages = args["block_table"][s, :-(-kv_len // 16)].long()
        k = args["k"][pages].float().reshape(-1, 2, 64)[:kv_len]
        v = args["v"][pages].float().reshape(-1, 2, 64)[:kv_len]
        q = args["q"][cu[s]:cu[s + 1]].float()
        want = _independent_mm_attention(q, k, v, cu[s + 1] - cu[s], kv_len,
                                         args["softmax_scale"], MM[s])
        torch.testing.assert_close(ref[cu[s]:cu[s + 1]], want, atol=1e-5, rtol=1e-5)
    # the ranges change the result (a query sees keys after it inside its range)
    assert (ref - _ref(args)).abs().max() > 0.05


@pytest.mark.parametrize("names, backend, dtype, bs, hq, hk, d", [
    ((), "2d", "f16", 16, 4, 2, 64),                  # transposed-x8
    ((), "2d", "bf16", 64, 4, 1, 64),                 # narrow, GQA 4
    ((), "3d", "f16", 16, 8, 2, 64),                  # split-KV
    (("window",), "2d", "bf16", 16, 10, 2, 128),      # (causal AND window) OR range, GQA 5
    (("softcap", "alibi", "sinks"), "3d", "bf16", 64, 8, 1, 64),   # GQA 8
    (("softcap", "window"), "2d", "f16", 64, 4, 1, 128),
])
def test_mm_prefix_range_matches_the_reference(names, backend, dtype, bs, hq, hk, d):
    args = make_inputs(PREFILL, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=bs + hq)
    mm = torch.tensor(MM, dtype=torch.int32)
    g = torch.Generator().manual_seed(7)
    feats = {}
    if "window" in names:
        feats["window_size"] = (3, 0)
    if "softcap" in names:
        feats["softcap"] = 0.3
    if "alibi" in names:
        feats["alibi_slopes"] = torch.rand(hq, generator=g) * 0.3
    if "sinks" in names:
        feats["sinks"] = torch.randn(hq, generator=g)
    args.update(feats)
    record = au.run_unified_attention_torch(**args, backend=backend, mm_prefix_range=mm)
    assert record.plan.path == backend and record.plan.specs[0].mm_prefix_ranges == 2
    _check(args, _ref(args, mm_prefix_range=mm, **feats), _ref(args, **feats), dtype, record)


def test_mm_prefix_range_through_rocke_vllm():
    from rocke.vllm import unified_attention
    args = make_inputs(PREFILL, hq=4, hk=2, d=64, bs=16, dtype="bf16", seed=2)
    mm = torch.tensor(MM, dtype=torch.int32)
    unified_attention(**args, mm_prefix_range=mm)
    record_ref = _ref(args, mm_prefix_range=mm)
    assert (args["out"].float() - record_ref).abs().max() <= attention_atol("bf16")


@pytest.mark.parametrize("value, pattern", [
    (torch.zeros(3, 1, 2, dtype=torch.int64), r"^mm_prefix_range: dtype must be torch.int32"),
    (torch.zeros(2, 1, 2, dtype=torch.int32), r"^mm_prefix_range: shape must be \[num_seqs"),
    (torch.zeros(3, 1, 3, dtype=torch.int32), r"^mm_prefix_range: shape must be"),
    (torch.zeros(3, 17, 2, dtype=torch.int32), r"^mm_prefix_range: 17 ranges per sequence exceed"),
    (torch.tensor([[[0, 2 ** 30]]] * 3, dtype=torch.int32), r"^mm_prefix_range: positions must lie"),
    # int32's abs(-2**31) is -2**31 again: the bound is checked in a wider type
    (torch.tensor([[[-2 ** 31, 5]]] * 3, dtype=torch.int32),
     r"^mm_prefix_range: positions must lie within \+-2\*\*30 .*got 2147483648"),
    (torch.zeros(3, 2, dtype=torch.int32), r"^mm_prefix_range: shape must be"),
    (torch.zeros(3, 4, 2, dtype=torch.int32)[:, :2], None),   # a sequence-strided view: accepted
    (torch.zeros(2, 3, 2, dtype=torch.int32).transpose(0, 1)[:, :1], r"^mm_prefix_range: .*packed"),
    ([[[0, 3]]] * 3, r"^mm_prefix_range: must be None or an int32 tensor"),
])
def test_bad_mm_prefix_range_is_refused_before_launch(monkeypatch, value, pattern):
    args = make_inputs(PREFILL, hq=4, hk=2, d=64)
    launched = []
    if pattern is None:
        au.run_unified_attention_torch(**args, mm_prefix_range=value)
        return
    monkeypatch.setattr(runtime, "launch", lambda *x, **y: launched.append(x))
    with pytest.raises(ValueError, match=pattern):
        au.run_unified_attention_torch(**args, mm_prefix_range=value)
    assert not launched and (args["out"] == 7.0).all()


def test_mm_prefix_range_needs_causal():
    with pytest.raises(ValueError, match="^mm_prefix_range: bidirectional ranges widen a causal"):
        au.check_mm_prefix_range(torch.zeros(1, 1, 2, dtype=torch.int32), torch.zeros(1, 1, 64),
                                 1, causal=False)


def test_kernel_args_refuse_ranges_the_kernel_does_not_take():
    from rocke.kernels.gfx942.attention_host import mm_prefix_args
    from rocke.kernels.gfx942 import attention_tiled_2d as a2
    with pytest.raises(ValueError, match="^mm_prefix_range: the kernel .* does not apply it"):
        mm_prefix_args(a2.UnifiedAttention2DSpec(), torch.zeros(1, 1, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^mm_prefix_range: must be an int32 tensor \[num_seqs, 1..2, 2\]"):
        mm_prefix_args(a2.UnifiedAttention2DSpec(mm_prefix_ranges=2),
                       torch.zeros(1, 3, 2, dtype=torch.int32))


# ---- batch-invariant mode ---------------------------------------------------------------------

TARGET = (1, 700)       # a long decode: alone, the dispatcher would split it into 3D segments
BATCHES = [
    [TARGET],
    [(1, 90), TARGET, (1, 33)],
    [(7, 40), (1, 700), (12, 12), (1, 520)],     # prefill around it; same lengths, other values
    [(1, 5)] * 5 + [TARGET],
]


def _target_output(batch, seed_of_others, monkeypatch, backend="auto"):
    """The target sequence's output bits inside ``batch`` (its q/k/v the same in every batch)."""
    i = batch.index(TARGET)
    args = make_inputs(batch, hq=4, hk=1, d=64, bs=16, dtype="bf16", seed=seed_of_others)
    own = make_inputs([TARGET], hq=4, hk=1, d=64, bs=16, dtype="bf16", seed=99)
    q0 = int(args["cu_seqlens_q"][i])
    args["q"][q0] = own["q"][0]
    pages = -(-TARGET[1] // 16)
    for j in range(pages):          # the target's pages hold its own keys/values
        args["k"][args["block_table"][i, j]] = own["k"][own["block_table"][0, j]]
        args["v"][args["block_table"][i, j]] = own["v"][own["block_table"][0, j]]
    record = au.run_unified_attention_torch(**args, backend=backend)
    return args["out"][q0].clone(), record


def test_batch_invariant_output_bits_do_not_depend_on_the_batch(monkeypatch):
    monkeypatch.setenv("ROCKE_BATCH_INVARIANT", "1")
    alone, record = _target_output(BATCHES[0], 1, monkeypatch)
    assert record.plan.path == "2d" and "batch-invariant" in record.plan.reason
    for n, batch in enumerate(BATCHES[1:]):
        got, record = _target_output(batch, 2 + n, monkeypatch)
        assert torch.equal(got.view(torch.int16), alone.view(torch.int16)), f"batch {n + 1}"
    own = make_inputs([TARGET], hq=4, hk=1, d=64, bs=16, dtype="bf16", seed=99)
    assert (alone.float() - _ref(own)[0]).abs().max() <= attention_atol("bf16")


def test_without_the_mode_the_plan_follows_the_batch():
    """The positive control: the dispatcher's own plan of the target differs between batches
    (3D with a batch-sized segment count: alone 44, one segment a 16-key tile of 700 keys, as
    304 CUs x 10 resident workgroups (6144 B of LDS) hold them; in 1300 decode rows the
    square-root rule's 12 cut to whole rounds of 1216 workgroups over 1625 a segment: 11), so
    its bits could."""
    def problem(batch, invariant):
        return au.UnifiedAttentionProblem(
            dtype="bf16", head_size=64, num_q_heads=4, num_kv_heads=1, block_size=16,
            num_seqs=len(batch), total_q=sum(q for q, _ in batch),
            max_seqlen_q=max(q for q, _ in batch), max_seqlen_k=max(k for _, k in batch),
            batch_invariant=invariant)
    big = [(1, 700)] * 1300
    plans = [dispatch.plan(problem(b, False), with_specs=False) for b in (BATCHES[0], big)]
    assert [(p.path, p.geometry.num_segments) for p in plans] == [("3d", 44), ("3d", 11)]
    fixed = [dispatch.plan(problem(b, True), with_specs=False) for b in (BATCHES[0], big)]
    assert [p.path for p in fixed] == ["2d", "2d"]
    forced = [dispatch.plan(problem(b, True), "3d", with_specs=False) for b in (BATCHES[0], big)]
    assert {p.geometry.num_segments for p in forced} == {dispatch.BATCH_INVARIANT_SEGMENTS}


def test_vllm_batch_invariant_never_takes_3d(monkeypatch):
    from rocke.vllm import unified_attention
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    args = make_inputs([(1, 40), (1, 23)], hq=2, hk=1, d=64, bs=16, dtype="f16")
    ws = dict(softmax_segm_output=torch.full((2, 2, 3, 64), math.nan),
              softmax_segm_max=torch.full((2, 2, 3), math.nan),
              softmax_segm_expsum=torch.full((2, 2, 3), math.nan))
    unified_attention(**args, seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    assert all(t.isnan().all() for t in ws.values())          # the 2D kernel ran
    assert (args["out"].float() - _ref(args)).abs().max() <= attention_atol("f16")


@pytest.mark.parametrize("name, value", [("ROCKE_BATCH_INVARIANT", "yes"),
                                         ("VLLM_BATCH_INVARIANT", "on")])
def test_bad_batch_invariant_levers_are_named(monkeypatch, name, value):
    from rocke.vllm import unified_attention
    monkeypatch.setenv(name, value)
    args = make_inputs([(1, 5)], hq=2, hk=1, d=64)
    with pytest.raises(ValueError, match=f"^{name} must be"):
        unified_attention(**args)
    assert (args["out"] == 7.0).all()


def test_many_overlapping_mm_ranges():
    """16 ranges (the most a kernel takes), overlapping, some unused, one past the sequence's
    end (its keys past kv_len stay masked)."""
    seqs = [(12, 30), (5, 9)]
    args = make_inputs(seqs, hq=2, hk=1, d=64, bs=16, dtype="bf16", seed=21)
    g = torch.Generator().manual_seed(4)
    raw = torch.randint(0, 34, (2, 16, 2), generator=g, dtype=torch.int32)
    raw[0, 0] = torch.tensor([20, 40])               # reaches past kv_len 30
    raw[1, :3] = torch.tensor([[4, 8], [2, 2], [7, 1]])
    record = au.run_unified_attention_torch(**args, mm_prefix_range=raw, backend="2d")
    assert record.plan.specs[0].mm_prefix_ranges == 16
    ref = _ref(args, mm_prefix_range=raw)
    cu, lens = args["cu_seqlens_q"].tolist(), args["seqused_k"].tolist()
    for s, kv_len in enumerate(lens):          # the reference itself, on overlapping ranges
        pages = args["block_table"][s, :-(-kv_len // 16)].long()
        k = args["k"][pages].float().reshape(-1, 1, 64)[:kv_len]
        v = args["v"][pages].float().reshape(-1, 1, 64)[:kv_len]
        want = _independent_mm_attention(args["q"][cu[s]:cu[s + 1]].float(), k, v,
                                         cu[s + 1] - cu[s], kv_len, args["softmax_scale"],
                                         raw[s].tolist())
        torch.testing.assert_close(ref[cu[s]:cu[s + 1]], want, atol=1e-5, rtol=1e-5)
    _check(args, ref, _ref(args), "bf16", record)


# ---- the score features on head size 256 ------------------------------------------------------

@pytest.mark.parametrize("names, backend, dtype, bs, hq, hk", [
    (("softcap", "alibi"), "2d", "f16", 16, 4, 1),
    (("window", "sinks"), "2d", "bf16", 64, 5, 1),
    (("qq_bias", "softcap"), "3d", "bf16", 16, 4, 2),
    (("alibi", "sinks", "window"), "3d", "f16", 64, 8, 2),
])
def test_features_on_head_size_256(names, backend, dtype, bs, hq, hk):
    args = make_inputs([(5, 21), (1, 30)], hq=hq, hk=hk, d=256, bs=bs, dtype=dtype, seed=hq + bs)
    g = torch.Generator().manual_seed(hq)
    feats = {}
    if "softcap" in names:
        feats["softcap"] = 0.1
    if "alibi" in names:
        feats["alibi_slopes"] = torch.rand(hq, generator=g) * 0.5 + 0.05
    if "qq_bias" in names:
        feats["qq_bias"] = torch.randn(6, 6, generator=g)
    if "window" in names:
        feats["window_size"] = (4, 0)
    if "sinks" in names:
        feats["sinks"] = torch.randn(hq, generator=g) + 3.0
        args["v"] = (args["v"].float() + 1.0).to(args["v"].dtype)
    args.update(feats)
    record = au.run_unified_attention_torch(**args, backend=backend)
    spec = record.plan.specs[0]
    assert spec.head_size == 256 and record.plan.path == backend
    want = {"softcap", "alibi", "qq_bias", "sinks"} & set(names) | \
        ({"sliding_window"} if "window" in names else set())
    assert set(spec.features) == want
    _check(args, _ref(args, **feats), _ref(args), dtype, record)


@pytest.mark.parametrize("path, fields", [
    ("2d", dict(dtype="bf16", head_size=64, num_warps=4, block_m_per_warp=32)),
    ("2d", dict(dtype="f16", head_size=128, num_warps=4, block_m_per_warp=32, tile_size=32,
                regime="transposed_x8")),
    ("3d", dict(dtype="f16", head_size=256, num_warps=1, block_m_per_warp=16)),
])
def test_mm_ranges_lds_region_is_in_the_lds_model(path, fields):
    """The staged ranges are a region of the LDS plan: the model matches the compiled kernel."""
    from rocke.kernels.gfx942 import attention_tiled_2d as a2
    from rocke.kernels.gfx942 import attention_tiled_3d as a3
    cls = a2.UnifiedAttention2DSpec if path == "2d" else a3.UnifiedAttention3DSpec
    spec = cls(block_size=16, num_queries_per_kv=4, mm_prefix_ranges=8, **fields)
    plain = cls(block_size=16, num_queries_per_kv=4, **fields)
    model = a2.lds_model(spec)
    assert model["mm_ranges"] == 8 * 2 * 4
    assert sum(model.values()) == au.compiled(spec).info.lds_bytes
    assert sum(a2.lds_model(plain).values()) == au.compiled(plain).info.lds_bytes
