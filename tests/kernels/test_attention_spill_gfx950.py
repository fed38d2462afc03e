"""gfx950's spill fallback (attention_spill with gfx950's ``spill_candidate``, ALGORITHM.md §10.5)
and its reachable enumeration (``rocke report --reachable --target gfx950``)."""
from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from rocke import runtime
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common import attention_kernels
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.knobs import AttentionKnobs
from rocke.kernels.common.tolerances import attention_atol
from rocke.kernels.gfx942 import attention_reachable as reach
from rocke.kernels.gfx942 import attention_spill as spill
from rocke.kernels.gfx950 import attention as g950
from rocke.kernels.gfx950 import attention_dispatch as dispatch
from tests.kernels.unified_inputs import make_inputs


def _wide4_bf16_d128():
    """gfx950's plan for bf16 d128 block 32 with softcap: the combo (32x32x16) wide4 at T = 64."""
    return g950.UnifiedAttention2DSpec(dtype="bf16", head_size=128, block_size=32,
                                       num_queries_per_kv=4, num_warps=4, block_m_per_warp=32,
                                       tile_size=64, regime="transposed_x8", softcap=True,
                                       use_k_single_buffer=False)


def _geometry(c):
    return (c.regime, c.num_warps, c.block_m_per_warp, c.tile_size, c.use_k_single_buffer,
            c.x8t_atom if c.transposed_x8 else c.narrow_atom)


def test_the_gfx950_chain_is_fixed_and_every_candidate_passes_gfx950s_gate():
    """wide4 T = 64 -> its other K buffering -> T = 32 (two K buffers, then one) -> wide2 ->
    L4 (their table tiles and K buffering) -> the d128 narrow row, which takes the wide-K
    16x16x32 on its 32-key tile: each a spec gfx950's gate accepts, with gfx950's atoms."""
    spec = _wide4_bf16_d128()
    chain = spill.candidates(spec)
    assert [_geometry(c) for c in chain] == [
        ("transposed_x8", 4, 32, 64, False, "32x32x16"),
        ("transposed_x8", 4, 32, 64, True, "32x32x16"),
        ("transposed_x8", 4, 32, 32, False, "32x32x16"),
        ("transposed_x8", 4, 32, 32, True, "32x32x16"),
        ("transposed_x8", 2, 32, 32, False, "32x32x16"),
        ("transposed_x8", 1, 32, 32, True, "32x32x16"),
        ("narrow", 2, 16, 32, True, "16x16x32")]
    for c in chain:
        assert type(c) is g950.UnifiedAttention2DSpec and g950.supports_tiled_2d(c), c.kernel_name
        assert (c.dtype, c.head_size, c.block_size, c.num_queries_per_kv, c.features) == \
            (spec.dtype, spec.head_size, spec.block_size, spec.num_queries_per_kv, spec.features)
    assert spill.candidates(spec) == chain             # a pure function of the spec
    # gfx942's plain field replacement would keep the combo's atom on the narrow row: refused,
    # so without gfx950's spill_candidate the chain would have no narrow candidate
    with pytest.raises(ValueError, match="x8t_atom"):
        dataclasses.replace(spec, regime="narrow", num_warps=2, block_m_per_warp=16, tile_size=32)


def test_a_narrow_16x16x32_spec_drops_to_16x16x16_on_a_16_key_tile():
    spec = g950.UnifiedAttention2DSpec(dtype="bf16", head_size=128, block_size=64,
                                       num_queries_per_kv=4, num_warps=2, block_m_per_warp=16,
                                       tile_size=32, qq_bias=True, narrow_atom="16x16x32")
    chain = spill.candidates(spec)
    assert [_geometry(c) for c in chain] == [
        ("narrow", 2, 16, 32, True, "16x16x32"), ("narrow", 2, 16, 32, False, "16x16x32"),
        ("narrow", 2, 16, 16, False, "16x16x16"), ("narrow", 2, 16, 16, True, "16x16x16"),
        ("narrow", 1, 16, 32, True, "16x16x32")]
    assert all(g950.supports_tiled_2d(c) for c in chain)


def test_3d_gfx950_specs_keep_their_class_through_the_chain():
    spec = g950.UnifiedAttention3DSpec(dtype="f16", head_size=128, block_size=16,
                                       num_queries_per_kv=4, sinks=True)
    chain = spill.candidates(spec)
    assert len(chain) >= 2 and chain[0] == spec
    assert all(type(c) is g950.UnifiedAttention3DSpec and c.kernel_name.endswith("_gfx950")
               for c in chain)


def _fake_spills(spilling):
    return lambda spec: (0, 4) if spec.kernel_name in spilling else (0, 0)


def test_a_fallback_to_another_geometry_is_named_with_its_atom():
    """Every transposed-x8 candidate reads as spilling: the plan falls back to the narrow row,
    its geometry named as gfx950's plan names it (row + wide-K atom), the reason saying so."""
    p = reach.problem_of("bf16", 128, 32, None, ("softcap",), kv_heads=1024, target="gfx950")
    planned = dispatch.plan(p, "2d", AttentionKnobs())
    assert planned.specs == (_wide4_bf16_d128(),) and planned.geometry.name == "wide4_32x32x16"
    spilling = {c.kernel_name for c in spill.candidates(planned.specs[0]) if c.transposed_x8}
    chosen = dispatch.spill_free_plan(planned, _fake_spills(spilling))
    (launched,) = chosen.specs
    assert _geometry(launched) == ("narrow", 2, 16, 32, True, "16x16x32")
    assert chosen.geometry.name == "narrow_w2m16_16x16x32"
    assert chosen.spill_fallback.tried == 7 and chosen.spill_fallback.spill_free
    assert "spill fallback" in chosen.geometry.reason
    # a spill-free plan is the plan itself (no IR moves)
    assert dispatch.spill_free_plan(planned, _fake_spills(set())) is planned


def _spilling_l4_problem():
    """f16 d128 block 16 on L4 (FLASH_WIDE=0) with softcap, ALiBi (square root), window, sinks,
    16 mm ranges, fp8 per-token-head scales and fp8 output: gfx950's planned kernel (one K
    buffer) spills 5 SGPRs (LLVM 22, `report --reachable --corners --target gfx950`)."""
    return reach.problem_of("f16", 128, 16, "fp8_e4m3fn",
                            ("softcap", "alibi", "sliding_window", "sinks", "mm_prefix"),
                            token_scales=True, extras=reach.EXTRAS, kv_heads=1024,
                            target="gfx950")


def test_a_spilling_gfx950_plan_launches_a_spill_free_kernel():
    """The build path's choice (attention_unified.spill_checked on gfx950's dispatcher, on the
    linked code objects): the planned kernel spills, the launched one does not (both counted
    again from the assembly), and the plan records the substitution."""
    planned = dispatch.plan(_spilling_l4_problem(), "2d", AttentionKnobs(flash_wide=0))
    (spec,) = planned.specs
    assert spec.transposed_x8 and spec.num_warps == 1 and spec.x8t_atom == "32x32x16"
    name, _, vgpr_spills, sgpr_spills, error = reach.spill_counts(spec)
    assert error is None and vgpr_spills + sgpr_spills > 0, name     # the premise: it spills
    chosen, kernels = au.spill_checked(dispatch, planned)
    (launched,) = chosen.specs
    assert launched != spec and g950.supports_tiled_2d(launched)
    assert [k.name for k in kernels] == [launched.kernel_name]
    assert kernels[0].target.startswith("gfx950")
    assert reach.spill_counts(launched)[2:] == (0, 0, None), launched.kernel_name
    record = chosen.spill_fallback
    assert (record.planned, record.chosen) == (spec.kernel_name, launched.kernel_name)
    assert record.planned_spills == (vgpr_spills, sgpr_spills) and record.spill_free
    assert (chosen.geometry.tile_size, chosen.geometry.k_single_buffer) == (
        launched.tile_size, launched.use_k_single_buffer)
    assert reach.launch_counts(spec)[5].chosen == launched.kernel_name   # the report agrees


@pytest.fixture
def emu_gfx950(monkeypatch):
    monkeypatch.setenv("ROCKE_DEVICE", "emu:gfx950")
    runtime.reset_devices()
    yield
    runtime.reset_devices()


def test_the_gfx950_entry_point_launches_the_fallback_and_it_computes_the_same(emu_gfx950,
                                                                            monkeypatch):
    """run_unified_attention_torch in emu:gfx950, the planned combo kernel and its other K
    buffering made to read as spilling: the call launches the chain's T = 32 combo kernel,
    records it, and matches the reference."""
    args = make_inputs([(3, 40), (1, 23)], hq=4, hk=2, d=64, bs=16, dtype="bf16", seed=11)
    p = au.describe_problem(**args, target="gfx950")
    (planned,) = dispatch.plan(p, "auto", AttentionKnobs()).specs
    chain = spill.candidates(planned)
    spilling = {c.kernel_name for c in chain[:2]}
    real = au.kernel_spills
    monkeypatch.setattr(attention_kernels, "kernel_spills",
                        lambda k: (0, 5) if k.name in spilling else real(k))
    au.GRAPHS.clear()
    record = au.run_unified_attention_torch(**args)
    (launched,) = record.plan.specs
    assert launched == chain[2] and launched.tile_size < planned.tile_size
    assert launched.x8t_atom == "32x32x16" and launched.kernel_name.endswith("_gfx950")
    assert record.plan.spill_fallback.planned == planned.kernel_name
    assert record.plan.spill_fallback.spill_free and record.plan.spill_fallback.tried == 3
    want = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                          args["block_table"], args["softmax_scale"], causal=True)
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol("bf16"), err


# ---- the enumeration ----

def test_gfx950s_corners_are_gfx950_specs_of_gfx950s_plans():
    corners = reach.corner_specs("gfx950")
    specs = list(corners.values())
    assert {type(s) for s in specs} == set(g950.SPEC_CLASSES)
    assert all(n.endswith("_gfx950") for n in corners)
    attn = [s for s in specs if hasattr(s, "features")]
    assert {s.kv_dtype for s in attn} == {None, "i8", "fp8_e4m3fn"}          # OCP fp8, no fnuz
    assert {getattr(s, "out_dtype", None) for s in specs} == {None, "fp8_e4m3fn"}
    two_d = [s for s in attn if isinstance(s, g950.UnifiedAttention2DSpec)]
    assert {s.x8t_atom for s in two_d if s.transposed_x8} == {"32x32x16"}
    assert {s.narrow_atom for s in two_d if not s.transposed_x8} == {"16x16x16", "16x16x32"}
    assert {s.num_warps for s in two_d if s.transposed_x8} == {4, 2, 1}
    assert {s.dtype for s in two_d if s.transposed_x8} == {"f16", "bf16"}   # the bf16 combo
    # the spilling corner (above) is one of them, as gfx950's dispatcher plans it
    (l4,) = dispatch.plan(_spilling_l4_problem(), "2d", AttentionKnobs(flash_wide=0)).specs
    assert corners[l4.kernel_name] == l4
    assert set(corners).isdisjoint(reach.corner_specs())       # gfx942's are its own


def test_gfx950s_enumeration_holds_its_shipped_variants():
    """Every variant gfx950 ships (what its dispatcher plans for the shipped grid, GQA 4) is
    among gfx950's reachable specs, and the enumeration is gfx950's alone."""
    from rocke.kernels.gfx950 import attention_shipped
    reachable = reach.reachable_specs("gfx950")
    shipped = [s for kind in attention_shipped.shipped().values() for s in kind.values()]
    assert len(shipped) > 10
    assert [s.kernel_name for s in shipped if reachable.get(s.kernel_name) != s] == []
    assert {type(s) for s in reachable.values()} == set(g950.SPEC_CLASSES)
    assert {s.kv_dtype for s in reachable.values() if hasattr(s, "features")} == {
        None, "i8", "fp8_e4m3fn"}


def test_report_reachable_target_gfx950(monkeypatch, tmp_path):
    """`report --reachable --target gfx950` enumerates gfx950's specs (corners with --corners),
    says so in its summary and JSON, and runs gfx950's chain on a spilling spec; other targets
    and --merge with --target are refused."""
    import json
    from rocke import cli
    specs = {s.kernel_name: s for s in (_wide4_bf16_d128(), *spill.candidates(
        _wide4_bf16_d128())[4:6])}
    asked = []
    monkeypatch.setattr(reach, "reachable_specs",
                        lambda target="gfx942": asked.append(("all", target)) or dict(specs))
    monkeypatch.setattr(reach, "corner_specs",
                        lambda target="gfx942": asked.append(("corners", target)) or dict(specs))
    spilling = _wide4_bf16_d128().kernel_name
    fallback = spill.candidates(_wide4_bf16_d128())[1].kernel_name
    monkeypatch.setenv("ROCKE_RESULTS_DIR", "off")   # faked counts stay out of any store
    monkeypatch.setattr(reach, "spill_counts", lambda spec: (
        spec.kernel_name, type(spec).__name__, 0, 3 if spec.kernel_name == spilling else 0, None))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli.main, ["report", "--reachable", "--target", "gfx950",
                                           "--json", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == f"{spilling}  spills v/s 0/3 -> {fallback} v/s 0/0 (spill-free, 2 tried)"
    assert lines[-1] == ("gfx950's reachable attention specs: 3 (3 UnifiedAttention2D); 1 spill "
                         "(3 spills); 0 launch spilling after the fallback")
    data = json.loads(out.read_text())
    assert data["target"] == "gfx950" and data["summary"] == lines[-1]
    result = CliRunner().invoke(cli.main, ["report", "--reachable", "--corners", "--target",
                                           "gfx950", "--shard", "1/1"])
    assert result.exit_code == 0 and result.output.strip().splitlines()[-1].startswith(
        "gfx950's heaviest reachable attention specs: 3 ")
    assert asked == [("all", "gfx950"), ("corners", "gfx950")]
    # every candidate spills more: launched spilling, exit 1
    monkeypatch.setattr(reach, "spill_counts", lambda spec: (
        spec.kernel_name, type(spec).__name__, 0, 3 if spec.kernel_name == spilling else 9, None))
    result = CliRunner().invoke(cli.main, ["report", "--reachable", "--target", "gfx950",
                                           "--match", f"^{spilling}$"])
    assert result.exit_code == 1 and result.output.strip().endswith(
        "1 spill (3 spills); 1 launch spilling after the fallback"), result.output
    bad = CliRunner().invoke(cli.main, ["report", "--reachable", "--target", "gfx90a"])
    assert bad.exit_code == 2 and "gfx942, gfx950" in bad.output and "gfx90a" in bad.output
    merge = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", "--target",
                                          "gfx950", str(out)])
    assert merge.exit_code == 2 and "--merge takes only" in merge.output
    # shards of gfx950's run merge into gfx950's summary
    monkeypatch.setattr(reach, "spill_counts", lambda spec: (
        spec.kernel_name, type(spec).__name__, 0, 3 if spec.kernel_name == spilling else 0, None))
    paths = [str(tmp_path / f"s{i}.json") for i in (1, 2)]
    for i, path in enumerate(paths, 1):
        result = CliRunner().invoke(cli.main, ["report", "--reachable", "--target", "gfx950",
                                               "--shard", f"{i}/2", "--json", path])
        assert result.exit_code == 0 and result.output.strip().splitlines()[-1].startswith(
            f"shard {i}/2 of gfx950's reachable attention specs: "), result.output
    merged = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", *paths])
    assert merged.exit_code == 0 and merged.output.strip().splitlines()[-1].startswith(
        "2 shards merged: gfx950's reachable attention specs: 3 ")


def test_a_spilling_gfx950_3d_corner_launches_its_other_k_buffering():
    """The 3D corner (d128 block 64, every feature, int8 per-token-head scales): gfx950's plan
    (two K buffers) spills 5 SGPRs; the report's fallback, on the assembly, is the same kernel
    with one K buffer, which does not spill (counted again here)."""
    p = reach.problem_of("bf16", 128, 64, "i8", reach.FEATURES, token_scales=True,
                         extras=reach.EXTRAS, kv_heads=1024, target="gfx950")
    spec = dispatch.plan(p, "3d", AttentionKnobs()).specs[0]
    assert type(spec) is g950.UnifiedAttention3DSpec and not spec.use_k_single_buffer
    name, _, vgpr_spills, sgpr_spills, error, record = reach.launch_counts(spec)
    assert error is None and vgpr_spills + sgpr_spills > 0, name     # the premise: it spills
    assert record.chosen == dataclasses.replace(spec, use_k_single_buffer=True).kernel_name
    assert record.spill_free and record.tried == 2
    launched = spill.candidates(spec)[1]
    assert reach.spill_counts(launched)[2:] == (0, 0, None)
