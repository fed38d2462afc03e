"""gfx942's dispatch table from the model (issue 41): tools/dispatch_tables.py writes, per problem
class, the plan the model puts fastest; attention_dispatch.plan follows it. The committed file
must equal what the tool produces (checked here on a subset the emulator models in seconds)."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import dispatch_sweep as ds  # noqa: E402
from rocke.kernels.common.knobs import AttentionKnobs  # noqa: E402
from rocke.kernels.gfx942 import attention_dispatch as ad  # noqa: E402
from tools import dispatch_tables as dt  # noqa: E402

COMMITTED = json.loads((ROOT / "rocke/kernels/gfx942/dispatch_table.json").read_text())["classes"]


def problem(case):
    _, sp = ds.sampled_inputs(case)
    return ds.full_problem(case, sp)


def test_committed_table_equals_the_tools_output_on_a_subset(monkeypatch):
    """Three decode classes re-modelled from scratch (the result store off, so nothing is read
    from an earlier run) (fp16 d128, 32/8 heads, one sequence of 1024 keys; 8 sequences x 2048
    keys over an int8 cache with per-token-head scales; bf16 d64, one sequence of 1024 keys;
    the reduce runs early_loads in all three): the tool's entries equal the committed ones,
    times included."""
    cases = [ds.Case("decode", ((1, 1024),), 1, 32, 8, "f16", 128)]
    cases.append(ds.Case("decode", ((1, 2048),), 8, 32, 8, "f16", 128, kv="int8_per_token_head"))
    cases.append(ds.Case("decode", ((1, 1024),), 1, 32, 8, "bf16", 64))
    monkeypatch.setenv("ROCKE_RESULTS_DIR", "off")
    classes, rows = dt.build(cases, log=lambda *a: None)
    assert len(classes) == 3
    assert "f16/d128/kv:i8/out:-/g4/bs64/decode/f:kv_token_scales/grid80/k2048/q1" in classes
    for key, entry in classes.items():
        assert COMMITTED[key] == entry, key


def test_problem_class_by_hand():
    """8 sequences x 2048 keys, fp16 d128, 32/8 heads, block 64: the reference 2D grid is
    (8 // 4 + 8) q blocks x 8 KV heads = 80; KV 2048; one query token. Exact numbers: 5
    sequences x 3000 keys bf16 d64 -> (5 // 4 + 5) x 8 = 48."""
    p = problem(ds.Case("decode", ((1, 2048),), 8, 32, 8, "f16", 128))
    assert ad.problem_class(p) == "f16/d128/kv:-/out:-/g4/bs64/decode/f:-/grid80/k2048/q1"
    p = problem(ds.Case("decode", ((1, 3000),), 5, 32, 8, "bf16", 64))
    assert ad.problem_class(p) == "bf16/d64/kv:-/out:-/g4/bs64/decode/f:-/grid48/k3000/q1"


def test_plan_follows_the_table(monkeypatch):
    """A made-up entry for the class (2D where the rules split, and 3D at 5 segments) is what
    plan() launches; a class the table lacks keeps the rules; batch-invariant calls, another
    CU count and a caller's segment count are not overridden."""
    p = problem(ds.Case("decode", ((1, 2048),), 8, 32, 8, "f16", 128))
    key = ad.problem_class(p)
    knobs = AttentionKnobs()
    monkeypatch.setattr(ad, "_MODEL_TABLE", {key: {"path": "2d", "segments": 5, "best": "2d",
                                                   "us": {"2d": 1.0}}})
    got = ad.plan(p, "auto", knobs, with_specs=False)
    assert got.path == "2d" and "model's fastest plan" in got.reason
    forced = ad.plan(p, "3d", knobs, with_specs=False)
    assert forced.geometry.num_segments == 5
    assert ad.plan(p, "3d", knobs, with_specs=False, num_segments=7).geometry.num_segments == 7
    assert ad.plan(p, "auto", knobs, with_specs=False, sms=256).path == "3d"   # rules (decode)
    monkeypatch.setattr(ad, "_MODEL_TABLE", {key: {"path": "3d", "segments": 100, "best": "3d/100",
                                                   "us": {"3d/100": 1.0}}})
    got = ad.plan(p, "auto", knobs, with_specs=False)
    # 100 segments over 2048 / 32 = 64 tiles: at most the tiles and MAX_SEGMENTS -> 64
    assert got.path == "3d" and got.geometry.num_segments == 64
    monkeypatch.setattr(ad, "_MODEL_TABLE", {})
    got = ad.plan(p, "auto", knobs, with_specs=False)
    assert (got.path, got.reason) == ad.select_path(p)
    assert got.geometry.num_segments == ad.geometry(p, "3d").num_segments


def test_fill_segments_by_hand(monkeypatch):
    """8 decode sequences x 2048 keys, fp16 d128, 32/8 heads: the 3D grid's q blocks are
    8 // 4 + 8 = 10 a KV head, x 8 heads = 80 workgroups a segment; a CU holds 3 narrow d128
    3D workgroups (20224 B of LDS each), 912 on 304 CUs: one round 912 // 80 = 11 segments
    (64 tiles: 6 a segment -> 11), two rounds 1824 // 80 = 22 (3 a segment -> 22). An entry
    naming "fill2" launches 22."""
    p = problem(ds.Case("decode", ((1, 2048),), 8, 32, 8, "f16", 128))
    geo = ad.geometry(p, "3d")
    assert ad.resident_3d_workgroups(p, geo) == 3
    assert ad.rounds_segments(p, geo, 1) == 11 and ad.rounds_segments(p, geo, 2) == 22
    monkeypatch.setattr(ad, "_MODEL_TABLE", {ad.problem_class(p): {
        "path": "3d", "segments": "fill2", "best": "3d/fill2", "us": {"3d/fill2": 1.0}}})
    assert ad.plan(p, "auto", AttentionKnobs(), with_specs=False).geometry.num_segments == 22


def test_fill_counts_the_launched_grid_of_a_split_group(monkeypatch):
    """GQA 32 (64/2 heads, bf16 d128) is launched as 2 q-head blocks of 16 heads a KV head
    (split_group): 8 decode sequences x 1024 keys are (8 // 1 + 8) q blocks x 2 KV heads x 2 =
    64 workgroups a segment, not the 32 the rules counted before. One round of the 912 resident
    slots: 912 // 64 = 14 segments (32 tiles: 3 a segment -> 11), 704 workgroups; two rounds
    28 -> 16, 1024 workgroups. An entry naming "fill1" / "fill2" launches a 3D grid within one /
    two rounds (the old count, 16, launched 1024 workgroups for "fill1": 1.12 rounds)."""
    from rocke.kernels.gfx942 import attention_launch as al
    p = problem(ds.Case("decode", ((1, 1024),), 8, 64, 2, "bf16", 128))
    geo = ad.geometry(p, "3d")
    slots = ad.num_sms() * ad.resident_3d_workgroups(p, geo)
    assert slots == 912 and ad.segment_workgroups(p, geo) == 64
    assert ad.rounds_segments(p, geo, 1) == 11 and ad.rounds_segments(p, geo, 2) == 16
    for rounds in (1, 2):
        monkeypatch.setattr(ad, "_MODEL_TABLE", {ad.problem_class(p): {
            "path": "3d", "segments": f"fill{rounds}", "best": f"3d/fill{rounds}",
            "us": {f"3d/fill{rounds}": 1.0}}})
        planned = ad.plan(p, "auto", AttentionKnobs())
        (grid, _), _ = al.launch_geometries(p, planned.specs, planned.geometry.num_segments)
        assert grid[1] == 4 and grid[0] * grid[1] * grid[2] <= rounds * slots


@pytest.mark.parametrize("case", [
    ds.Case("decode", ((1, 2048),), 8, 32, 8, "f16", 128),        # GQA 4
    ds.Case("decode", ((1, 8192),), 3, 32, 32, "f16", 128),       # GQA 1
    ds.Case("decode", ((1, 4096),), 16, 32, 2, "f16", 128),       # GQA 16
    ds.Case("decode", ((1, 1024),), 64, 16, 2, "bf16", 256),      # GQA 8, d256
    ds.Case("prefill-mix", ((96, 512), (32, 1024), (1, 700)), 1, 32, 8, "bf16", 64)])
def test_segment_rules_unchanged_up_to_gqa_16(case):
    """A group of at most 16 heads is one q-head block a KV head: a segment's workgroups are
    q blocks x KV heads, as the rules counted before the split group was counted, so their
    counts are unchanged."""
    p = problem(case)
    geo = ad.geometry(p, "3d")
    block_q = max(1, geo.block_m // p.num_queries_per_kv)
    assert ad.segment_workgroups(p, geo) == \
        ad.total_num_q_blocks(p.total_q, p.num_seqs, block_q) * p.num_kv_heads


@pytest.mark.parametrize("n, tiles, want", [(64, 64, 64), (40, 64, 32), (24, 64, 22),
                                            (9, 32, 8), (100, 4096, 64), (3, 2, 2)])
def test_table_segments_by_hand(n, tiles, want):
    """At most the tiles and 64, then the fewest segments with the same longest walk:
    40 over 64 tiles walk 2 tiles each -> 32 segments; 24 walk 3 -> 22; 9 over 32 walk 4 -> 8."""
    assert ad.table_segments(n, tiles) == want


def test_choose_takes_the_least_worst_ratio():
    """Two problems of one class: 3d/8 is 1.00x / 1.10x, 3d/16 1.05x / 1.00x, 2D 1.5x / 1.0x:
    the least worst ratio is 3d/16 (1.05x); the best 3D count is the same."""
    rows = [{"case": "a", "us": {"2d": 15.0, "3d/8": 10.0, "3d/16": 10.5}},
            {"case": "b", "us": {"2d": 20.0, "3d/8": 22.0, "3d/16": 20.0}}]
    e = dt.choose(rows)
    assert (e["path"], e["segments"], e["best"], e["worst_ratio"]) == ("3d", 16, "3d/16", 1.05)
    e = dt.choose([{"case": "a", "us": {"2d": 10.0, "3d/8": 10.0}}])     # a tie: 2D
    assert (e["path"], e["segments"], e["best"]) == ("2d", 8, "2d")
    # a fill option ties with the count it is on one problem and wins on the other
    rows = [{"case": "a", "us": {"2d": 30.0, "3d/11": 20.0, "3d/7": 25.0, "3d/fill1": 20.0}},
            {"case": "b", "us": {"2d": 30.0, "3d/11": 26.0, "3d/7": 21.0, "3d/fill1": 21.0}}]
    e = dt.choose(rows)
    assert (e["path"], e["segments"], e["best"], e["worst_ratio"]) == ("3d", "fill1",
                                                                     "3d/fill1", 1.0)


def test_choose_names_the_other_regime_when_it_is_fastest():
    """"2d:x8t" (transposed-x8 where the rules run narrow) 1.0x, the rules' 2D 1.6x, 3d/8
    2.0x: the entry is 2D with regime transposed_x8 and 8 segments for a forced 3D call; on a
    tie the rules' regime wins and no regime is named."""
    e = dt.choose([{"case": "a", "us": {"2d": 16.0, "2d:x8t": 10.0, "3d/8": 20.0}}])
    assert (e["path"], e["best"], e["regime"], e["segments"]) == ("2d", "2d:x8t", "transposed_x8", 8)
    e = dt.choose([{"case": "a", "us": {"2d": 10.0, "2d:x8t": 10.0, "3d/8": 20.0}}])
    assert (e["path"], e["best"]) == ("2d", "2d") and "regime" not in e


def test_add_regime_keeps_the_plan_unless_the_option_is_faster():
    """A class whose best is 3d/8 (10 us) gains "2d:x8t": at 12 us only the time is added (the
    plan, worst ratio and problems stay); at 8 us the entry is chosen again and names
    transposed-x8."""
    entry = dt.choose([{"case": "a", "us": {"2d": 16.0, "3d/8": 10.0}},
                       {"case": "b", "us": {"2d": 16.0, "3d/8": 10.0}}])
    slower = dt.add_regime(entry, "2d:x8t", 12.0)
    assert slower == {**entry, "us": {"2d": 16.0, "2d:x8t": 12.0, "3d/8": 10.0}}
    faster = dt.add_regime(entry, "2d:x8t", 8.0)
    assert (faster["path"], faster["best"], faster["regime"], faster["segments"]) == \
        ("2d", "2d:x8t", "transposed_x8", 8)
    assert faster["problems"] == ["a", "b"] and faster["worst_ratio"] == 1.0


def test_every_committed_class_holds_its_other_regimes_time():
    """Where a committed class's problem can launch 2D in the regime the rules do not pick, its
    entry holds that option's time (tools/dispatch_tables.py --add-regimes fills it in), so the
    plan is the model's best over both regimes; and every class's problem can be named."""
    logged = []
    assert dt.missing_regimes(COMMITTED, log=logged.append) == []
    assert logged == []


@pytest.mark.parametrize("argv, message", [
    (["--add-regimes", "--remodel", "/d256/"], "--add-regimes and --remodel: choose one"),
    (["--remodel", "("], "--remodel '\\(': missing \\)"),
    (["--remodel", "no such class"], "--remodel 'no such class': no committed class matches")])
def test_the_table_tools_modes_refuse_bad_arguments(argv, message, capsys):
    """Before modelling anything: two modes at once, a pattern that is not a regular expression,
    one that matches no committed class -- a usage error naming the option, the table as it was."""
    before = dt.TABLE.read_text()
    with pytest.raises(SystemExit) as exit_info:
        dt.main(argv + ["--list"])
    assert exit_info.value.code == 2
    import re
    assert re.search(message, capsys.readouterr().err)
    assert dt.TABLE.read_text() == before


def _bf16_prefill():
    return problem(ds.Case("prefill", ((96, 96),), 2, 8, 2, "bf16", 64))


def test_regime_geometry_applies_to_the_generic_2d_rows_only():
    """bf16 d64 prefill: the rules run it narrow, transposed-x8 applies (4 warps x 32 query
    columns); d256 and QQ-bias pin narrow (None); a regime that is not one is refused."""
    from dataclasses import replace
    p = _bf16_prefill()
    assert ad.geometry(p, "2d").regime == "narrow"
    x8 = ad.regime_geometry(p, "transposed_x8")
    assert (x8.regime, x8.num_warps, x8.block_m_per_warp) == ("transposed_x8", 4, 32)
    assert ad.regime_geometry(p, "narrow").regime == "narrow"
    assert ad.regime_geometry(replace(p, head_size=256), "transposed_x8") is None
    assert ad.regime_geometry(replace(p, qq_bias=True), "transposed_x8") is None
    with pytest.raises(ValueError, match="regime: must be one of transposed_x8, narrow, got 'x8t'"):
        ad.regime_geometry(p, "x8t")


def test_plan_follows_a_tables_regime(monkeypatch):
    """An entry naming transposed-x8 for a bf16 class: plan() (auto and forced 2D) launches
    that regime and says so; a caller's regime= overrides it; a class without an entry keeps
    the rules' narrow; regime= on 3D or a pinned problem is refused."""
    from dataclasses import replace
    p = _bf16_prefill()
    knobs = AttentionKnobs()
    monkeypatch.setattr(ad, "_MODEL_TABLE", {ad.problem_class(p): {
        "path": "2d", "segments": 4, "best": "2d:x8t", "regime": "transposed_x8",
        "us": {"2d:x8t": 1.0}}})
    for backend in ("auto", "2d"):
        got = ad.plan(p, backend, knobs)
        assert got.geometry.regime == "transposed_x8" and "regime from the model's table" in got.geometry.reason
        assert got.specs[0].transposed_x8 and got.specs[0].dtype == "bf16"
    assert ad.plan(p, "2d", knobs, regime="narrow").geometry.regime == "narrow"
    monkeypatch.setattr(ad, "_MODEL_TABLE", {})
    assert ad.plan(p, "auto", knobs).geometry.regime == "narrow"
    with pytest.raises(ValueError, match="regime: only gfx942's 2D path has a choice of regime"):
        ad.plan(p, "3d", knobs, regime="transposed_x8")
    with pytest.raises(ValueError, match="regime: 'transposed_x8' does not apply to this problem"):
        ad.plan(replace(p, head_size=256), "2d", knobs, regime="transposed_x8")


@pytest.mark.parametrize("dtype,option,kv,heads,seqs", [
    ("bf16", "2d:x8t", "auto", (8, 2), [(1, 40), (33, 33), (5, 70)]),
    ("bf16", "2d:x8t", "fp8", (8, 2), [(1, 40), (33, 33), (5, 70)]),
    ("bf16", "2d:x8t", "int8_per_token_head", (8, 2), [(1, 40), (33, 33), (5, 70)]),
    ("f16", "2d:narrow", "auto", (4, 4), [(1, 90), (1, 17), (1, 64)])])
def test_a_plan_in_the_other_regime_from_the_table_matches_the_reference(
        monkeypatch, dtype, option, kv, heads, seqs):
    """Through the entry point: a d64 problem whose (made-up) entry names the regime the rules
    do not pick runs that kernel, and its output matches the reference -- a bf16 prefill mix on
    the 32x32x8 bf16 kernel over a bf16 cache, an fp8 one with per-tensor descales and an int8
    one with per-token-head scales, and an fp16 GQA-1 decode on the narrow kernel (the committed
    table sends problems of each kind there)."""
    from rocke.kernels.common import attention_unified as au
    from rocke.kernels.common.tolerances import attention_atol
    from tests.kernels.unified_inputs import make_inputs, quantize_caches, reference
    args = make_inputs(seqs, hq=heads[0], hk=heads[1], d=64, bs=16, dtype=dtype, seed=3)
    scales = {}
    if kv != "auto":
        quantize_caches(args, kv, seed=3)
        scales = {n: args[n] for n in ("k_scale_cache", "v_scale_cache", "k_descale",
                                       "v_descale") if args.get(n) is not None}
    quant = {n: args[n] for n in ds.QUANT_NAMES if n in args}
    p = au.describe_problem(*(args[n] for n in ds.NAMES), **quant)
    regime = ds.REGIME_OPTIONS[option]
    assert ad.geometry(p, "2d").regime != regime        # the rules pick the other one
    monkeypatch.setattr(ad, "_MODEL_TABLE", {ad.problem_class(p): {
        "path": "2d", "segments": 2, "best": option, "regime": regime, "us": {option: 1.0}}})
    record = au.run_unified_attention_torch(**args, backend="auto")
    spec = record.plan.specs[0]
    assert spec.transposed_x8 == (regime == "transposed_x8") and spec.dtype == dtype
    assert (spec.kv_dtype, spec.kv_token_scales) == {
        "auto": (None, False), "fp8": ("fp8_e4m3fnuz", False),
        "int8_per_token_head": ("i8", True)}[kv]
    err = (args["out"].float() - reference(args, **scales)).abs().max().item()
    assert err <= attention_atol(dtype)


def test_committed_entries_are_their_problems_best_within_3_percent():
    """Every committed class's plan is within 3 % of the fastest option of each of its swept
    problems (the tool's worst ratio), and its times hold the option it names."""
    assert COMMITTED
    for key, e in COMMITTED.items():
        assert e["worst_ratio"] <= dt.WITHIN, key
        assert e["best"] in e["us"] and e["path"] == ("2d" if ds.is_2d(e["best"]) else "3d"), key
        assert e.get("regime") == ds.REGIME_OPTIONS.get(e["best"]), key
        assert e["us"][e["best"]] <= dt.WITHIN * min(e["us"].values()), key


def test_a_plan_the_table_moved_matches_the_reference():
    """A windowed decode (1 x 2048 keys, window 1024, fp16 d128, 32/8 heads) that the rules sent
    to 2D and the table sends to 3D (its fastest modelled plan): the launched plan is the
    table's, and its output matches the reference."""
    from rocke.kernels.common import attention_unified as au
    from tests.kernels.unified_inputs import make_inputs, reference
    args = make_inputs([(1, 2048)], hq=32, hk=8, d=128, bs=64, dtype="f16", seed=1)
    args["window_size"] = (1024, 0)
    p = au.describe_problem(*(args[n] for n in ds.NAMES))
    entry = COMMITTED[ad.problem_class(p)]
    assert ad.select_path(p)[0] == "2d" and entry["path"] == "3d"
    record = au.run_unified_attention_torch(**args, backend="auto")
    assert record.plan.path == "3d"
    assert record.plan.geometry.num_segments == ad.entry_segments(p, record.plan.geometry,
                                                                  entry["segments"])
    err = (args["out"].float() - reference(args, window_size=(1024, 0))).abs().max().item()
    assert err < 2e-3


def test_a_problem_with_an_unswept_field_never_takes_a_swept_plan(monkeypatch):
    """A non-causal prefill (no 3D kernel) of the same shape as a tabulated causal one whose
    entry is 3D: its class differs, so the rules plan it (2D), and it runs."""
    from dataclasses import replace
    p = problem(ds.Case("prefill", ((64, 64),), 2, 8, 2, "f16", 64))
    key = ad.problem_class(p)
    monkeypatch.setattr(ad, "_MODEL_TABLE", {key: {"path": "3d", "segments": 4, "best": "3d/4",
                                                   "us": {"3d/4": 1.0}}})
    assert ad.plan(p, "auto", AttentionKnobs(), with_specs=False).path == "3d"
    nc = replace(p, causal=False)
    assert ad.problem_class(nc) != key and ad.problem_class(nc).endswith("/x:causal=False")
    planned = ad.plan(nc, "auto", AttentionKnobs())
    assert planned.path == "2d" and planned.specs[0].non_causal


@pytest.mark.parametrize("which", ["profile", "vllm033"])
def test_a_profile_shapes_case_is_the_problem_profile_launches(which):
    """--problems profile / vllm033: the Case tools/dispatch_tables.py builds for a shape of
    benchmarks/profile.py (its windowed prefill at bf16 d64; vLLM 0.33's windowed softcapped
    decode, 5/1 heads, d256, 16-token pages) has the class of the problem profile.py launches
    (its inputs through describe_problem, as run_unified_attention_torch builds it), and the
    same problem but for the cache's page count; a padded head size (d96) is skipped."""
    from dataclasses import replace
    from benchmarks import profile as pf
    from rocke.kernels.common import attention_unified as au
    if which == "profile":
        shape, dtype, d = pf.SHAPES["window"], "bf16", 64
    else:
        shape = pf.vllm033_shapes()["vllm033 q1x65-1x37-1x251 h5/1 sw32 cap50 d256"]
        dtype, d = shape.dtype, shape.head_size
    kind = "profile-window" if which == "profile" else "vllm033"
    case, why = dt.shape_case(kind, shape, dtype, d)
    assert why is None
    args = pf.inputs(shape, dtype, d)
    launched = au.describe_problem(*(args[n] for n in ds.NAMES))
    assert ad.problem_class(problem(case)) == ad.problem_class(launched)
    pages = dict(num_blocks=1, kv_cache_bytes=0)
    assert replace(problem(case), **pages) == replace(launched, **pages)
    if which == "vllm033":      # (profile's set models 42 problems' inputs: seconds)
        assert case in dt.problems([which], log=lambda *a: None)
    d96 = pf.vllm033_shapes()["vllm033 q1x166-5x18-17x58 h5/1 d96"]
    assert dt.shape_case("vllm033", d96, d96.dtype, d96.head_size)[0] is None


def test_merge_keeps_a_committed_problem_of_the_class():
    """A class committed from one grid problem and modelled again from a profile shape of the
    same exact class is chosen over both problems' times (2D 1.0x / 1.3x, 3d/8 1.2x / 1.0x:
    3d/8); merging the same rows again changes nothing; a new class is added; a class
    re-modelled from all its committed problems is replaced."""
    old = {"c": dt.choose([{"case": "grid a", "us": {"2d": 10.0, "3d/8": 12.0}}]),
           "k": dt.choose([{"case": "z", "us": {"2d": 1.0, "3d/8": 2.0}}])}
    rows = [{"case": "profile b", "class": "c", "us": {"2d": 13.0, "3d/8": 10.0}},
            {"case": "profile n", "class": "n", "us": {"2d": 5.0, "3d/8": 4.0}},
            {"case": "z", "class": "k", "us": {"2d": 3.0, "3d/8": 4.0}}]
    classes = {k: dt.choose([r for r in rows if r["class"] == k]) for k in ("c", "n", "k")}
    merged = dt.merge(old, classes, rows)
    assert merged["c"]["problems"] == ["grid a", "profile b"]
    assert merged["c"]["best"] == "3d/8" and merged["c"]["worst_ratio"] == 1.2
    assert merged["c"]["us"] == old["c"]["us"]          # the first problem's times
    assert merged["n"] == classes["n"] and merged["k"] == classes["k"] != old["k"]
    assert dt.merge(merged, classes, rows) == merged


@pytest.mark.parametrize("case", [
    ds.Case("decode", ((1, 1024),), 8, 32, 8, "f16", 128),           # fill options
    ds.Case("decode", ((1, 2048),), 256, 32, 8, "f16", 128),
    ds.Case("chunked-prefill", ((128, 2048),), 1, 32, 8, "bf16", 128),  # no fill options
    ds.Case("decode", ((1, 1024),), 32, 32, 8, "f16", 128),          # both 2D regimes apply
])
def test_per_option_models_exactly_the_options_a_row_holds(case, monkeypatch):
    """--per-option models each (path, segments) option as its own task, then builds the rows
    from the result store: it must model every option model_case then asks for, and no other
    (a missing one would be modelled again inside the row's task; an extra is wasted)."""
    asked = []
    monkeypatch.setattr(ds, "modelled", lambda c, path, ns=1: asked.append((path, ns)) or
                        {dt.LATENCY: 1.0})
    row = dt.model_case(case)
    options = dt.case_options(case)
    assert len(options) == len(set(options))
    assert set(options) == set(asked)
    # the row's options are exactly these (the fill aliases name counts among them)
    named = {(o.split("/")[0], 1 if "/" not in o else int(o.split("/")[1]))
             for o in row["us"] if "fill" not in o}
    assert named == set(options)


def test_per_option_needs_the_result_store(monkeypatch, capsys):
    monkeypatch.setenv("ROCKE_RESULTS_DIR", "off")
    with pytest.raises(SystemExit):
        dt.main(["--remodel", "/d128/.*/grid320/k1024/", "--per-option"])
    assert "ROCKE_RESULTS_DIR is off" in capsys.readouterr().err


@pytest.mark.parametrize("other", [["--add-regimes"], ["--from-rows", "rows.jsonl"]])
def test_per_option_refuses_a_mode_that_models_no_problem_set(other, capsys):
    """--per-option beside --add-regimes / --from-rows would be ignored: an error instead,
    before anything is read or modelled."""
    with pytest.raises(SystemExit):
        dt.main(["--per-option", *other])
    assert "--per-option models the problems of --remodel or the grid" in capsys.readouterr().err
