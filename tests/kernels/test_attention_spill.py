"""The spill-aware last step of gfx942's attention plan (attention_spill, ALGORITHM.md §10.5): a
planned kernel whose code spills is replaced by the first spill-free geometry of a fixed chain,
the substitution recorded on the plan; if all spill, the least-spilling one runs with a warning."""
from __future__ import annotations

import warnings

import pytest
import torch

from rocke.compiler import CompileError
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common import attention_kernels
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.knobs import AttentionKnobs
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.gfx942 import attention_dispatch as dispatch
from rocke.kernels.gfx942 import attention_reachable as reach
from rocke.kernels.gfx942 import attention_spill as spill
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from tests.kernels.unified_inputs import make_inputs


def _spilling_problem():
    """bf16 d128 block 32 2D narrow with ALiBi (square root), QQ-bias, window, sinks, one mm
    range, int8 per-token-head scales and fp8 output: its planned kernel (one K buffer) spills
    2 SGPRs (shard 1/10 of `rocke report --reachable`), two K buffers none."""
    return reach.problem_of("bf16", 128, 32, "i8",
                            ("alibi", "qq_bias", "sliding_window", "sinks", "mm_prefix"),
                            mm_ranges=1, token_scales=True, extras=reach.EXTRAS)


def test_the_chain_is_fixed_and_least_change_first():
    """The chain of a wide2 fp16 d128 kernel: the planned spec, its other K buffering, the
    narrower transposed-x8 geometry (L4), then the narrow one; every candidate keeps the
    problem's fields (features, caches, group) and is a valid spec."""
    spec = a2.UnifiedAttention2DSpec(dtype="f16", head_size=128, block_size=16,
                                     num_queries_per_kv=4, num_warps=2, block_m_per_warp=32,
                                     tile_size=32, regime="transposed_x8", sliding_window=True,
                                     softcap=True)
    chain = spill.candidates(spec)
    assert [(c.regime, c.num_warps, c.block_m_per_warp, c.tile_size, c.use_k_single_buffer)
            for c in chain] == [
        ("transposed_x8", 2, 32, 32, False), ("transposed_x8", 2, 32, 32, True),
        ("transposed_x8", 1, 32, 32, True), ("narrow", 2, 16, 16, False)]
    for c in chain:
        assert (c.dtype, c.head_size, c.block_size, c.num_queries_per_kv, c.features) == \
            (spec.dtype, spec.head_size, spec.block_size, spec.num_queries_per_kv, spec.features)
    assert spill.candidates(spec) == chain          # a pure function of the spec
    # a grown 64-key tile falls back to the smaller ones before another geometry
    grown = a2.UnifiedAttention2DSpec(dtype="bf16", head_size=64, block_size=64,
                                      num_queries_per_kv=4, num_warps=4, block_m_per_warp=32,
                                      tile_size=64)
    assert [(c.num_warps * c.block_m_per_warp, c.tile_size) for c in spill.candidates(grown)][:6] \
        == [(128, 64), (128, 64), (128, 32), (128, 32), (128, 16), (128, 16)]


def test_a_spilling_plan_launches_a_spill_free_geometry():
    """The build path's choice (attention_unified.spill_checked, on the linked code objects):
    the planned kernel spills, the chosen one does not (both counted again from the assembly),
    and the plan records the substitution."""
    p = _spilling_problem()
    planned = dispatch.plan(p, "2d", AttentionKnobs())
    (spec,) = planned.specs
    name, _, vgpr_spills, sgpr_spills, error = reach.spill_counts(spec)
    assert error is None and vgpr_spills + sgpr_spills > 0, name     # the premise: it spills
    chosen, kernels = au.spill_checked(dispatch, planned)
    (launched,) = chosen.specs
    assert [k.name for k in kernels] == [launched.kernel_name]
    assert launched != spec
    assert reach.spill_counts(launched)[2:] == (0, 0, None), launched.kernel_name
    record = chosen.spill_fallback
    assert (record.planned, record.chosen) == (spec.kernel_name, launched.kernel_name)
    assert record.planned_spills == (vgpr_spills, sgpr_spills)
    assert record.chosen_spills == (0, 0) and record.spill_free and record.tried >= 2
    geo = chosen.geometry
    assert (geo.num_warps, geo.block_m_per_warp, geo.tile_size, geo.k_single_buffer) == (
        launched.num_warps, launched.block_m_per_warp, launched.tile_size,
        launched.use_k_single_buffer)
    assert "spill fallback" in geo.reason and chosen.path == planned.path
    # the report's choice, on the assembly, is the same kernel
    assert reach.launch_counts(spec)[5].chosen == launched.kernel_name


def test_a_spill_free_plan_is_launched_as_planned():
    p = reach.problem_of("f16", 64, 16, None, ())
    planned = dispatch.plan(p, "2d", AttentionKnobs())
    the_plan, kernels = au.spill_checked(dispatch, planned)
    assert the_plan is planned and [k.name for k in kernels] == [planned.specs[0].kernel_name]


def _fake_spills(table):
    """spills_of from a table kernel name -> (VGPR, SGPR); a name it lacks raises as LLVM would
    when the value is an exception, else (0, 0) for names it does not hold."""
    def spills_of(spec):
        got = table.get(spec.kernel_name, (0, 0))
        if isinstance(got, Exception):
            raise got
        return got
    return spills_of


def test_when_every_candidate_spills_the_least_spilling_runs_and_one_warning_says_so():
    spec = a2.VARIANTS[next(iter(a2.VARIANTS))]
    chain = spill.candidates(spec)
    assert len(chain) >= 3
    table = {c.kernel_name: (0, 9) for c in chain}
    table[chain[1].kernel_name] = CompileError("LLVM said no")     # skipped, not fatal
    table[chain[2].kernel_name] = (1, 2)
    spill._WARNED.discard(spec.kernel_name)
    with pytest.warns(RuntimeWarning, match="least-spilling") as caught:
        launched, record = spill.choose(spec, _fake_spills(table))
    assert len(caught) == 1
    assert launched == chain[2] and record.chosen_spills == (1, 2) and not record.spill_free
    assert record.tried == len(chain) - 1          # the rejected candidate is not counted
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # once per planned kernel
        assert spill.choose(spec, _fake_spills(table))[0] == chain[2]
    # no candidate spills less: launched as planned, and said so
    worse = {c.kernel_name: (0, 20) for c in chain}
    worse[spec.kernel_name] = (0, 3)
    spill._WARNED.discard(spec.kernel_name)
    with pytest.warns(RuntimeWarning, match="launched as planned"):
        launched, record = spill.choose(spec, _fake_spills(worse))
    assert launched == spec and record.chosen == record.planned


def test_the_entry_point_launches_the_fallback_and_it_computes_the_same(monkeypatch):
    """run_unified_attention_torch on the emulator, the shipped kernel it plans made to read as
    spilling (its real code does not spill): the call launches the chain's next kernel, records
    it, and matches the reference."""
    args = make_inputs([(3, 40), (1, 23)], hq=4, hk=2, d=64, bs=16, dtype="bf16", seed=7)
    p = au.describe_problem(**args, target="gfx942")
    (planned,) = dispatch.plan(p, "auto", AttentionKnobs()).specs
    real = au.kernel_spills

    def spills_of(kernel):
        return (0, 5) if kernel.name == planned.kernel_name else real(kernel)
    monkeypatch.setattr(attention_kernels, "kernel_spills", spills_of)
    au.GRAPHS.clear()
    record = au.run_unified_attention_torch(**args)
    (launched,) = record.plan.specs
    assert launched == spill.candidates(planned)[1] != planned
    assert record.plan.spill_fallback.planned == planned.kernel_name
    assert record.plan.spill_fallback.spill_free
    want = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                          args["block_table"], args["softmax_scale"], causal=True)
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol("bf16"), err


def test_a_window_alone_on_l4_d128_masks_by_interval_and_matches_the_reference(monkeypatch):
    """The dispatcher's rule for fp16 d128 wide2/L4 with a window alone (the plain mask spilled
    17-19 SGPRs on L4): the interval mask, on the emulator against the reference."""
    monkeypatch.setenv("HIPDNN_GFX942_FLASH_WIDE", "0")
    args = make_inputs([(3, 40), (1, 23)], hq=4, hk=1, d=128, bs=16, dtype="f16", seed=3)
    args["window_size"] = (5, 0)
    au.GRAPHS.clear()
    record = au.run_unified_attention_torch(**args)
    (spec,) = record.plan.specs
    assert spec.transposed_x8 and spec.num_warps == 1 and spec.interval_mask, spec.kernel_name
    assert record.plan.spill_fallback is None           # the planned kernel does not spill
    want = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                          args["block_table"], args["softmax_scale"], causal=True,
                          window_size=(5, 0))
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol("f16"), err
