"""The reachable-spec enumeration behind ``rocke report --reachable``: it covers what the
dispatcher plans, the command summarises spills in one line and fails on them, and a sample
of the heaviest reachable specs compiles without spills."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.knobs import AttentionKnobs
from rocke.kernels.gfx942 import attention_dispatch as dispatch
from rocke.kernels.gfx942 import attention_pipeline as pipeline
from rocke.kernels.gfx942 import attention_reachable as reach


# one worker runs this module (scripts/test.sh: --dist loadfile), so the enumeration (about a
# minute) is built once, not once per pytest-xdist worker
@pytest.fixture(scope="session")
def reachable():
    return reach.reachable_specs()


def test_the_enumeration_spans_every_dimension(reachable):
    specs = list(reachable.values())
    kinds = {type(s).__name__ for s in specs}
    assert kinds == {"UnifiedAttention2DSpec", "UnifiedAttention3DSpec", "ReduceSegmentsSpec"}
    attn = [s for s in specs if hasattr(s, "features")]
    assert {(s.dtype, s.head_size, s.block_size) for s in attn} == {
        (d, h, b) for d in ("f16", "bf16") for h in (64, 128, 256) for b in (16, 32, 64)}
    assert {(s.kv_dtype, s.kv_token_scales) for s in attn} == {
        (None, False), ("fp8_e4m3fnuz", False), ("i8", True), ("fp8_e4m3fnuz", True)}
    assert {s.alibi_sqrt for s in attn} == {False, True}
    assert all(s.alibi for s in attn if s.alibi_sqrt)
    assert {getattr(s, "out_dtype", None) for s in specs} == {None, "fp8_e4m3fnuz"}
    assert {s.mm_prefix_ranges for s in attn} == {0, 1, 16}
    assert {s.group_split for s in attn} == {1, 2}
    every = {"softcap", "alibi", "qq_bias", "sliding_window", "sinks"}
    assert any(set(s.features) == every and s.mm_prefix_ranges for s in attn)
    x8 = {(s.num_warps, s.family) for s in attn if s.transposed_x8}
    assert x8 == {(4, "attention_2d"), (2, "attention_2d"), (1, "attention_2d")}


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_a_3d_plan_does_not_read_flash_wide(target):
    """The enumeration plans 3D classes under the default levers only (reach.path_knobs): on
    every 97th 3D class of ``target``, each FLASH_WIDE plans the same specs as the default."""
    classes = [p for p, path, _ in reach.problems(target) if path == "3d"][::97]
    assert len(classes) > 250 and reach.path_knobs("3d") == [AttentionKnobs()]
    assert len(reach.path_knobs("2d")) == 3
    for p in classes:
        plans = {wide: [s.kernel_name for s in reach.planned_specs(
            p, "3d", AttentionKnobs(flash_wide=wide), target)] for wide in (4, 2, 0)}
        assert plans[2] == plans[4] and plans[0] == plans[4], (p, plans)


@pytest.mark.parametrize("problem, backend, knobs", [
    (dict(dtype="f16", head_size=64, softcap=50.0, window_left=127), "auto", AttentionKnobs()),
    (dict(dtype="bf16", head_size=256, alibi=True, sinks=True), "3d", AttentionKnobs()),
    (dict(dtype="f16", head_size=128, qq_bias=True, mm_ranges=3), "2d", AttentionKnobs()),
    (dict(dtype="f16", head_size=128, sinks=True, kv_dtype="fp8_e4m3fnuz"), "auto",
     AttentionKnobs(flash_wide=0)),
    (dict(dtype="bf16", head_size=64, num_q_heads=64, window_left=3), "3d", AttentionKnobs()),
    (dict(dtype="f16", head_size=128, qq_bias=True, kv_dtype="i8", kv_token_scales=True,
          out_dtype="fp8_e4m3fnuz"), "auto", AttentionKnobs()),
    (dict(dtype="f16", head_size=64, alibi=True, alibi_sqrt=True, softcap=10.0, kv_dtype="fp8_e4m3fnuz",
          kv_token_scales=True, out_dtype="fp8_e4m3fnuz", sinks=True), "3d", AttentionKnobs()),
])
def test_what_the_dispatcher_plans_is_enumerated(reachable, problem, backend, knobs):
    """A call's specs, with its group set to the enumeration's representative one (the group
    is a constant that stands for all; a split group is enumerated with every feature on only)
    and its mm capacity to the enumerated bound, are among the reachable specs."""
    fields = dict(num_q_heads=8, num_kv_heads=1, block_size=16, num_seqs=2, total_q=9,
                  max_seqlen_q=8, max_seqlen_k=700)
    fields.update(problem)
    p = au.UnifiedAttentionProblem(**fields)
    for spec in dispatch.plan(p, backend, knobs).specs:
        if hasattr(spec, "features"):
            spec = dataclasses.replace(spec, num_queries_per_kv=reach.REPRESENTATIVE_GROUP,
                                       group_split=1,
                                       mm_prefix_ranges=16 if spec.mm_prefix_ranges else 0)
        assert spec.kernel_name in reachable, spec.kernel_name


def test_report_reachable_prints_one_summary_line_and_fails_on_spills(monkeypatch, tmp_path):
    import json
    from rocke import cli
    from rocke.kernels.gfx942 import attention_spill
    from rocke.kernels.gfx942 import attention_tiled_2d as a2
    specs = {n: a2.VARIANTS[n] for n in list(a2.VARIANTS)[:3]}
    spilling_spec, broken_spec = list(specs.values())[:2]
    spilling, broken = spilling_spec.kernel_name, broken_spec.kernel_name
    fallback = attention_spill.candidates(spilling_spec)[1].kernel_name
    monkeypatch.setattr(reach, "reachable_specs",
                        lambda target="gfx942": {s.kernel_name: s for s in specs.values()})

    def fake_counts(spec, spills=3, fallback_spills=0):
        n = spec.kernel_name
        s = spills if n == spilling else fallback_spills if n == fallback else 0
        return n, type(spec).__name__, 0, s, None
    monkeypatch.setenv("ROCKE_RESULTS_DIR", "off")   # faked counts stay out of any store
    monkeypatch.setattr(reach, "spill_counts", fake_counts)
    # the planned kernel spills, the chain's next one does not: a call launches that one
    out = tmp_path / "reach.json"
    result = CliRunner().invoke(cli.main, ["report", "--reachable", "--progress", "2",
                                           "--json", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == f"{spilling}  spills v/s 0/3 -> {fallback} v/s 0/0 (spill-free, 2 tried)"
    assert "report --reachable: 2/3 specs, 1 spill, 0 launch spilling, 0 failed" in result.output
    assert "report --reachable: 3/3 specs, 1 spill, 0 launch spilling, 0 failed" in result.output
    assert lines[-1] == ("reachable attention specs: 3 (3 UnifiedAttention2D); 1 spill (3 spills); "
                         "0 launch spilling after the fallback")
    data = json.loads(out.read_text())
    assert data["summary"] == lines[-1] and data["specs"] == 3 and data["launch_spilling"] == []
    assert data["spilling"] == [dict(name=spilling, vgpr_spills=0, sgpr_spills=3, fallback=dict(
        chosen=fallback, vgpr_spills=0, sgpr_spills=0, spill_free=True, tried=2))]
    # every candidate spills more: launched as planned, spilling, and the exit code says so (1)
    enumerated = {s.kernel_name for s in specs.values()}
    monkeypatch.setattr(reach, "spill_counts", lambda spec: fake_counts(spec) if spec.kernel_name
                        in enumerated else (*fake_counts(spec)[:3], 5, None))
    result = CliRunner().invoke(cli.main, ["report", "--reachable"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[0].startswith(
        f"{spilling}  spills v/s 0/3 -> no candidate spills less (")
    assert result.output.strip().endswith("1 spill (3 spills); 1 launch spilling after the fallback")
    monkeypatch.setattr(reach, "spill_counts", lambda spec: fake_counts(spec, 0))
    result = CliRunner().invoke(cli.main, ["report", "--reachable", "--jobs", "2"])
    assert result.exit_code == 0 and result.output.strip().endswith(
        "; 0 spill (0 spills); 0 launch spilling after the fallback")
    # a spec LLVM rejects is named, the run goes on, and the exit code says so (3)
    monkeypatch.setattr(reach, "spill_counts", lambda spec: (*fake_counts(spec)[:4], "LLVM said no")
                        if spec.kernel_name == broken else fake_counts(spec))
    result = CliRunner().invoke(cli.main, ["report", "--reachable"])
    assert result.exit_code == 3, result.output
    assert f"{broken}  failed: LLVM said no" in result.output
    assert result.output.strip().endswith("1 spill (3 spills); 0 launch spilling after the "
                                          "fallback; 1 failed to compile")
    bad = CliRunner().invoke(cli.main, ["report", "--corners"])
    assert bad.exit_code == 2 and "--corners, --jobs, --shard, --json, --match, --merge and --ray go with " \
        in bad.output
    many = CliRunner().invoke(cli.main, ["report", "--reachable", "--jobs", "257"])
    assert many.exit_code == 2 and "257" in many.output
    unwritable = CliRunner().invoke(cli.main, ["report", "--reachable", "--json",
                                               str(tmp_path / "no" / "such" / "dir.json")])
    assert unwritable.exit_code == 2 and "cannot write" in unwritable.output
    assert "spills" not in unwritable.output          # refused before compiling
    # shards: interleaved parts of the sorted specs, together the whole
    names = sorted(s.kernel_name for s in specs.values())
    for i, part in ((1, names[0::2]), (2, names[1::2])):
        result = CliRunner().invoke(cli.main, ["report", "--reachable", "--shard", f"{i}/2"])
        assert result.output.strip().splitlines()[-1].startswith(
            f"shard {i}/2 of the reachable attention specs: {len(part)} ")
        assert (spilling in result.output) == (spilling in part)
        assert (broken in result.output) == (broken in part)
    for shard in ("0/2", "3/2", "x"):
        bad = CliRunner().invoke(cli.main, ["report", "--reachable", "--shard", shard])
        assert bad.exit_code == 2 and "--shard" in bad.output, shard


def _fake_reachable(monkeypatch, count=5, spilling_index=1):
    """``count`` shipped 2D specs as the enumeration; the one at ``spilling_index`` spills 2
    SGPRs as planned and its fallback (the chain's next) none."""
    from rocke.kernels.gfx942 import attention_spill
    from rocke.kernels.gfx942 import attention_tiled_2d as a2
    specs = {s.kernel_name: s for s in list(a2.VARIANTS.values())[:count]}
    spilling = sorted(specs)[spilling_index]
    fallback = attention_spill.candidates(specs[spilling])[1].kernel_name
    monkeypatch.setattr(reach, "reachable_specs", lambda target="gfx942": dict(specs))
    monkeypatch.setenv("ROCKE_RESULTS_DIR", "off")   # faked counts stay out of any store
    monkeypatch.setattr(reach, "spill_counts", lambda spec: (
        spec.kernel_name, type(spec).__name__, 0, 2 if spec.kernel_name == spilling else 0, None))
    return sorted(specs), spilling, fallback


def test_report_reachable_match_compiles_only_the_matching_specs(monkeypatch, tmp_path):
    import json
    from rocke import cli
    names, spilling, _ = _fake_reachable(monkeypatch)
    compiled = []
    counts = reach.spill_counts
    monkeypatch.setenv("ROCKE_RESULTS_DIR", "off")   # faked counts stay out of any store
    monkeypatch.setattr(reach, "spill_counts", lambda spec: compiled.append(spec.kernel_name)
                        or counts(spec))
    out = tmp_path / "m.json"
    result = CliRunner().invoke(cli.main, ["report", "--reachable", "--match", spilling + "$",
                                           "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert compiled[0] == spilling and set(compiled) - {spilling} <= set(
        s.kernel_name for s in reach.attention_spill.candidates(
            reach.reachable_specs()[spilling]))          # the planned spec, then its fallback
    assert result.output.strip().splitlines()[-1] == (
        f"reachable attention specs matching {spilling + '$'!r}: 1 (1 UnifiedAttention2D); "
        "1 spill (2 spills); 0 launch spilling after the fallback")
    data = json.loads(out.read_text())
    assert data["match"] == spilling + "$" and data["enumerated"] == 1
    none = CliRunner().invoke(cli.main, ["report", "--reachable", "--match", "^no such kernel"])
    assert none.exit_code == 2 and "no reachable spec's name matches" in none.output
    bad = CliRunner().invoke(cli.main, ["report", "--reachable", "--match", "(unclosed"])
    assert bad.exit_code == 2 and "--match" in bad.output and "regular expression" in bad.output


def test_report_reachable_merges_the_shards_of_one_run_and_refuses_others(monkeypatch, tmp_path):
    import json
    from rocke import cli
    names, spilling, fallback = _fake_reachable(monkeypatch)
    paths = []
    for i in (1, 2, 3):
        paths.append(str(tmp_path / f"s{i}.json"))
        result = CliRunner().invoke(cli.main, ["report", "--reachable", "--shard", f"{i}/3",
                                               "--json", paths[-1]])
        assert result.exit_code == 0, result.output
    merged = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", *paths])
    assert merged.exit_code == 0, merged.output
    lines = merged.output.strip().splitlines()
    assert lines[0] == f"{spilling}  spills v/s 0/2 -> {fallback} v/s 0/0"
    assert lines[-1] == ("3 shards merged: reachable attention specs: 5 (5 UnifiedAttention2D); "
                         "1 spill (2 spills); 0 launch spilling after the fallback")
    # a missing shard, a repeated one, a shard of another split, of other code, not a report
    missing = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", *paths[:2]])
    assert missing.exit_code == 2 and "shards 3/3 are missing" in missing.output
    twice = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", *paths, paths[0]])
    assert twice.exit_code == 2 and "both shard 1/3" in twice.output
    other = json.loads(open(paths[2]).read())
    other["code_sha256"] = "0" * 64
    (tmp_path / "other.json").write_text(json.dumps(other))
    mixed = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", *paths[:2],
                                          str(tmp_path / "other.json")])
    assert mixed.exit_code == 2 and "code or LLVM toolchain" in mixed.output
    other = json.loads(open(paths[2]).read())
    other["shard"] = [3, 4]
    (tmp_path / "other.json").write_text(json.dumps(other))
    split = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", *paths[:2],
                                          str(tmp_path / "other.json")])
    assert split.exit_code == 2 and "shard 3/4" in split.output
    (tmp_path / "junk.json").write_text("{}")
    junk = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", str(tmp_path /
                                                                                 "junk.json")])
    assert junk.exit_code == 2 and "not a shard report" in junk.output
    # every shard's counts are summed: a launch-spilling spec in one shard fails the merge
    record = json.loads(open(paths[0]).read())
    record["launch_spilling"] = [names[0]]
    open(paths[0], "w").write(json.dumps(record))
    failing = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", *paths])
    assert failing.exit_code == 1 and failing.output.strip().endswith(
        "1 launch spilling after the fallback")
    mixed_flags = CliRunner().invoke(cli.main, ["report", "--reachable", "--merge", "--jobs",
                                                "2", *paths])
    assert mixed_flags.exit_code == 2


def test_report_reachable_needs_no_linker(tmp_path, monkeypatch):
    """The spill counts come from the assembly LLVM emits: with no ld.lld anywhere (an empty
    PATH, ROCKE_LD_LLD naming nothing, an empty compile cache) two real specs, one of them a
    formerly spilling corner, compile and are counted."""
    from rocke import cli
    from rocke.compiler import ToolchainError, find_linker, toolchain
    from rocke.kernels.gfx942 import attention_tiled_2d as a2
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("ROCKE_LD_LLD", str(tmp_path / "no" / "ld.lld"))
    monkeypatch.setenv("ROCKE_CACHE_DIR", str(tmp_path / "cache"))
    toolchain.find_linker.cache_clear()
    try:
        with pytest.raises(ToolchainError):          # the premise: nothing here can link
            find_linker()
        corner = a2.UnifiedAttention2DSpec(
            dtype="bf16", head_size=64, block_size=32, num_queries_per_kv=4, num_warps=4,
            block_m_per_warp=32, tile_size=32, kv_dtype="fp8_e4m3fnuz", softcap=True, alibi=True,
            qq_bias=True, sliding_window=True, sinks=True, interval_mask=True)
        specs = [a2.VARIANTS["narrow_f16_d64_b16_g5_qqb"], corner]
        monkeypatch.setattr(reach, "reachable_specs",
                            lambda target="gfx942": {s.kernel_name: s for s in specs})
        result = CliRunner().invoke(cli.main, ["report", "--reachable"])
    finally:
        toolchain.find_linker.cache_clear()
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == \
        "reachable attention specs: 2 (2 UnifiedAttention2D); 0 spill (0 spills); " \
        "0 launch spilling after the fallback"
    assert len(list((tmp_path / "cache" / "results").rglob("*.json"))) == 4   # 2 compiled here, 2 reports


def test_the_compile_path_never_loads_the_emulator():
    """code_fingerprint leaves out NOT_ON_COMPILE_PATH (the emulator): planning, building and
    counting a spilling spec's spills, fallback included, must then never import it."""
    import subprocess
    import sys
    program = (
        "import sys\n"
        "from rocke.kernels.gfx942 import attention_reachable as reach\n"
        "from rocke.kernels.gfx942 import attention_tiled_2d as a2\n"
        "spec = a2.UnifiedAttention2DSpec(dtype='f16', head_size=64, block_size=16,\n"
        "    num_queries_per_kv=4, num_warps=4, block_m_per_warp=32, tile_size=32, softcap=True,\n"
        "    sliding_window=True)\n"
        "assert len(reach.corner_specs()) > 100\n"
        "print(reach.launch_counts(spec)[:5])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in\n"
        "      [['rocke', p] for p in reach.NOT_ON_COMPILE_PATH]))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


# The heaviest reachable spec (every feature on, 16 mm ranges) of each geometry the dispatcher
# picks, at block 16, plus the combination the issue measured spilling (fp16 2D wide4 softcap +
# sliding window: 19 SGPR spills before): compiled here (on-disk cache; ~3 s each cold), the
# whole enumeration by `rocke report --reachable`.
SAMPLE = [
    ("2d", "f16", 64, 4, ("softcap", "alibi", "sliding_window", "sinks", "mm_prefix")),     # wide4
    ("2d", "f16", 128, 2, ("softcap", "alibi", "sliding_window", "sinks", "mm_prefix")),    # wide2
    ("2d", "f16", 128, 0, ("softcap", "alibi", "sliding_window", "sinks", "mm_prefix")),    # L4
    ("2d", "bf16", 64, 4, reach.FEATURES),          # narrow 4 x 32 rows
    ("2d", "bf16", 128, 4, reach.FEATURES),         # narrow 2 x 16 rows
    ("2d", "f16", 256, 4, reach.FEATURES),          # narrow d256
    ("3d", "bf16", 256, 4, reach.FEATURES),
    ("3d", "f16", 64, 4, reach.FEATURES),
    ("2d", "f16", 64, 4, ("softcap", "sliding_window")),
]


@pytest.mark.parametrize("path, dtype, d, wide, feats", SAMPLE)
def test_heaviest_reachable_specs_do_not_spill(reachable, path, dtype, d, wide, feats):
    p = reach.problem_of(dtype, d, 16, None, feats)
    (spec, *rest) = dispatch.plan(p, path, AttentionKnobs(flash_wide=wide)).specs
    assert spec.kernel_name in reachable
    info = au.compiled(spec).info
    assert (info.vgpr_spills, info.sgpr_spills) == (0, 0), spec.kernel_name


# The worst corners of the enumeration before the QQ-bias mask, the transposed-x8 epilogue's
# row test, the epilogue scalars read before the loop, the compare-free bf16 rounding of the
# per-token-head copy and the two per-token-head geometry rules (SGPR spills then in brackets);
# the last four: per-token-head scales before the compare-free int8 rounding, one page lookup per
# tile in one-wave kernels and the 3D d64 QQ-bias tile rule.
NO_MASK = tuple(f for f in reach.FEATURES if f != "mm_prefix")
WORST = [
    ("2d", "bf16", 64, 32, "fp8_e4m3fnuz", False, NO_MASK, 4, ()),               # 37
    ("3d", "bf16", 64, 32, "fp8_e4m3fnuz", False, reach.FEATURES, 4, ()),        # 30
    ("2d", "f16", 128, 64, None, False, ("softcap", "alibi", "sliding_window", "sinks"), 0, ()),  # 8, L4
    ("2d", "bf16", 64, 32, "i8", True, NO_MASK, 4, reach.EXTRAS),                # 15
    ("2d", "bf16", 128, 64, "fp8_e4m3fnuz", True, NO_MASK, 4, reach.EXTRAS),     # 3
    ("2d", "bf16", 256, 16, "fp8_e4m3fnuz", True, reach.FEATURES, 4, reach.EXTRAS),  # 2
    ("3d", "bf16", 256, 64, "i8", True, NO_MASK, 4, reach.EXTRAS),               # 41
    ("3d", "f16", 256, 64, "fp8_e4m3fnuz", True, NO_MASK, 4, reach.EXTRAS),      # 7
    ("3d", "bf16", 64, 16, "i8", True, NO_MASK, 4, reach.EXTRAS),                # 2
    ("2d", "f16", 128, 64, "fp8_e4m3fnuz", True, ("softcap", "sliding_window"), 0, reach.EXTRAS),  # 6, L4
]


@pytest.mark.parametrize("path, dtype, d, bs, kv, tok, feats, wide, extras", WORST)
def test_formerly_worst_corners_do_not_spill(reachable, path, dtype, d, bs, kv, tok, feats, wide, extras):
    p = reach.problem_of(dtype, d, bs, kv, feats, token_scales=tok, extras=extras)
    spec = dispatch.plan(p, path, AttentionKnobs(flash_wide=wide)).specs[0]
    assert spec.kernel_name in reachable
    name, _, vgpr_spills, sgpr_spills, error = reach.spill_counts(spec)
    assert (vgpr_spills, sgpr_spills, error) == (0, 0, None), name


def test_a_window_with_other_features_masks_by_interval_and_does_not_spill():
    """fp16 wide4 with an fp8 cache, softcap, ALiBi, window and sinks spilled 110 SGPRs with the
    two-compare window mask; the dispatcher now picks the interval mask (alone too on
    transposed-x8: dispatch.x8_window_interval)."""
    p = reach.problem_of("f16", 64, 16, "fp8_e4m3fnuz", ("softcap", "alibi", "sliding_window",
                                                          "sinks"), mm_ranges=0)
    (spec,) = dispatch.plan(p, "2d", AttentionKnobs()).specs
    assert spec.interval_mask and spec.transposed_x8
    info = au.compiled(spec).info
    assert (info.vgpr_spills, info.sgpr_spills) == (0, 0), spec.kernel_name
    alone = reach.problem_of("f16", 64, 16, None, ("sliding_window",), mm_ranges=0)
    assert dispatch.plan(alone, "2d", AttentionKnobs()).specs[0].interval_mask
    narrow = reach.problem_of("bf16", 64, 16, None, ("sliding_window",), mm_ranges=0)
    assert not dispatch.plan(narrow, "2d", AttentionKnobs()).specs[0].interval_mask


@pytest.mark.parametrize("block_size, group, tile", [(16, 4, 32), (64, 1, 64)])
def test_a_plain_window_on_one_round_grows_only_to_a_pages_tile_and_does_not_spill(block_size,
                                                                                  group, tile):
    """fp16 d128 transposed-x8 with a window alone, its 2D grid in one round: the one-round
    64-key tile spilled 9-10 SGPRs with the plain mask; interval-masked, it is taken where a page
    holds it, looked up once per tile (block 64), else the table's 32-key tile; none spills."""
    p = reach.problem_of("f16", 128, block_size, None, ("sliding_window",), kv_heads=1,
                         group=group)
    (spec,) = dispatch.plan(p, "2d", AttentionKnobs()).specs
    assert spec.transposed_x8 and spec.interval_mask and spec.tile_size == tile, spec.kernel_name
    assert spec.one_page_tile is (tile == 64), spec.kernel_name
    name, _, vgpr_spills, sgpr_spills, error = reach.spill_counts(spec)
    assert (vgpr_spills, sgpr_spills, error) == (0, 0, None), name


@pytest.mark.parametrize("wide, block_size", [(2, 16), (0, 32)])
def test_a_plain_window_on_few_warp_transposed_x8_d128_masks_by_interval(wide, block_size):
    """fp16 d128 wide2 / L4 (FLASH_WIDE=2 / 0) with a window alone: the plain two-compare mask
    spilled 9 / 17-19 SGPRs; the dispatcher now takes the interval mask, which does not spill."""
    p = reach.problem_of("f16", 128, block_size, None, ("sliding_window",))
    (spec,) = dispatch.plan(p, "2d", AttentionKnobs(flash_wide=wide)).specs
    assert spec.transposed_x8 and spec.interval_mask and spec.num_warps < 4, spec.kernel_name
    name, _, vgpr_spills, sgpr_spills, error = reach.spill_counts(spec)
    assert (vgpr_spills, sgpr_spills, error) == (0, 0, None), name


@pytest.mark.parametrize("head_size, block_size, group", [(128, 64, 4), (128, 64, 1), (64, 64, 8)])
def test_a_window_alone_on_wide4_masks_by_interval_and_keeps_the_late_v_store(head_size, block_size,
                                                                             group):
    """fp16 wide4 with a window alone: the plain mask kept the tile loop from waiting for V_j
    after S_j's softmax (d128 spilled 8 SGPRs with it); the interval mask lets it, spill-free
    (benchmarks/profile.py "window 128", modelled MI300X 19.19 -> 16.08 us)."""
    p = reach.problem_of("f16", head_size, block_size, None, ("sliding_window",), group=group,
                         mm_ranges=0)
    (spec,) = dispatch.plan(p, "2d", AttentionKnobs()).specs
    assert spec.transposed_x8 and spec.num_warps == 4 and spec.interval_mask, spec.kernel_name
    assert not spec.use_k_single_buffer and pipeline.late_v_store(spec), spec.kernel_name
    name, _, vgpr_spills, sgpr_spills, error = reach.spill_counts(spec)
    assert (vgpr_spills, sgpr_spills, error) == (0, 0, None), name


@pytest.mark.parametrize("dtype, head_size, block_size, group", [("bf16", 128, 64, 4),
                                                                 ("f16", 256, 16, 1),
                                                                 ("bf16", 256, 32, 16)])
def test_a_plain_one_round_narrow_prefill_double_buffers_k(dtype, head_size, block_size, group):
    """A plain prefill whose 2D grid runs in one round on a narrow geometry whose rows fit the
    grown tile: two K buffers (the LDS fits, no workgroup shares the CU), so the tile loop overlaps
    the first K tile with Q and lands V_j after S_j's softmax; spill-free (benchmarks/profile.py
    short prefill, modelled MI300X: bf16 d128 12.43 -> 11.36 us, f16 d256 17.76 -> 15.35).
    With a score feature the tile keeps one K buffer."""
    p = reach.problem_of(dtype, head_size, block_size, None, (), group=group, kv_heads=1)
    the_plan = dispatch.plan(p, "2d", AttentionKnobs())
    (spec,) = the_plan.specs
    assert spec.regime == "narrow" and not spec.use_k_single_buffer, spec.kernel_name
    assert "two K buffers" in the_plan.geometry.reason
    # the table's rows fit the tile (one K buffer by default); d256 then takes 4 warps x 16 rows
    assert spec.tile_size >= 2 * spec.block_m_per_warp, spec.kernel_name
    assert spec.num_warps == (4 if head_size == 256 else 2), spec.kernel_name
    name, _, vgpr_spills, sgpr_spills, error = reach.spill_counts(spec)
    assert (vgpr_spills, sgpr_spills, error) == (0, 0, None), name
    with_softcap = reach.problem_of(dtype, head_size, block_size, None, ("softcap",), group=group,
                                    kv_heads=1)
    assert dispatch.plan(with_softcap, "2d", AttentionKnobs()).specs[0].use_k_single_buffer
