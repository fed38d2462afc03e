"""benchmarks/dispatch_sweep.py's sampling: one KV head x one repeat of the sequence pattern,
modelled over the full grid, gives the modelled time of emulating the whole problem."""
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import dispatch_sweep as sweep  # noqa: E402
from rocke.arch.costs import MI300X, MI355X  # noqa: E402
from rocke.kernels.common.knobs import AttentionKnobs  # noqa: E402
from rocke.kernels.common import attention_unified as au  # noqa: E402
from rocke.perf import model_time  # noqa: E402
from rocke.runtime import launch  # noqa: E402
from tests.kernels.unified_inputs import make_inputs  # noqa: E402



@pytest.fixture(autouse=True)
def no_result_store(monkeypatch):
    """These tests check what the sweep computes: the result store (which would answer an
    earlier run's modelled times) is off unless a test sets its own."""
    monkeypatch.setenv("ROCKE_RESULTS_DIR", "off")


def full_3d(seqs, hq, hk, d, ns, target="gfx942", costs=MI300X):
    """Modelled us per latency of the whole problem, every workgroup emulated, launched as the
    entry point launches it (the target's plan packed by attention_dispatch.launches: its grids,
    a GQA group above 16 split over group_split q-head blocks per KV head)."""
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=64, dtype="f16", seed=0)
    p = au.describe_problem(*(args[n] for n in sweep.NAMES))
    ad = au.attention_target(target)
    the_plan = ad.plan(p, "3d", num_segments=ns)
    workspaces = (torch.empty(p.total_q, hq, ns, d), torch.empty(p.total_q, hq, ns),
                  torch.empty(p.total_q, hq, ns))
    runs, _ = ad.launches(the_plan, [au.compiled(s) for s in the_plan.specs], args["q"],
                          args["k"], args["v"], args["out"], args["cu_seqlens_q"],
                          args["seqused_k"], args["block_table"], float(args["softmax_scale"]),
                          (), {}, workspaces)
    out = dict.fromkeys(sweep.LATENCIES, 0.0)
    for c, g, b, a in runs:
        with sweep.emulating_as(target):
            prof = launch(c, g, b, a, device="emu", profile=True).profile
        for cycles in sweep.LATENCIES:
            out[cycles] += model_time(prof, costs=replace(costs, memory_latency_cycles=cycles)).us
    return out, [g for _, g, _, _ in runs]


@pytest.mark.parametrize("hq, hk", [(8, 2), (64, 2)])
def test_sampled_sweep_models_the_full_problem(hq, hk, monkeypatch):
    """GQA 4 and GQA 32: the sample (one KV head, one repeat) modelled over the full grid equals
    emulating every workgroup of the real launch, and models as many workgroups as that launch
    has. GQA 32's 32 query heads a KV head run as group_split = 2 q-head blocks of 16: the
    sample launches both (it once launched one: half the query heads and half the workgroups
    modelled, a time within 2 % here only because this small grid is far from filling the
    CUs)."""
    grids = []
    model = sweep.model_time
    monkeypatch.setattr(sweep, "model_time",
                        lambda prof, **kw: grids.append(kw["grid"]) or model(prof, **kw))
    case = sweep.Case("decode", ((1, 256),), 2, hq, hk, "f16", 64)
    sampled = sweep.modelled(case, "3d", 4)
    full, real_grids = full_3d([(1, 256)] * 2, hq, hk, 64, 4)
    for cycles in sweep.LATENCIES:
        assert sampled[cycles] == pytest.approx(full[cycles], rel=0.02), cycles
    # per launch (3D, reduction), one model_time call per latency: the modelled workgroups
    assert [math.prod(g) for g in grids[::len(sweep.LATENCIES)]] == \
        [math.prod(g) for g in real_grids]


def real_launches(case: sweep.Case, path: str, ns: int):
    """The grids of the full problem's launch as the entry point packs it
    (attention_dispatch.launches), the plan at `path` (3d-narrow: the sweep's narrow specs)."""
    from rocke.kernels.gfx942 import attention_dispatch as ad
    seqs = list(case.pattern) * case.batch
    args = make_inputs(seqs, hq=case.hq, hk=case.hk, d=case.d, bs=case.block_size,
                       dtype=case.dtype, seed=0)
    p = au.describe_problem(*(args[n] for n in sweep.NAMES))
    the_plan = ad.plan(p, "2d" if path == "2d" else "3d", AttentionKnobs(),
                       num_segments=None if path == "2d" else ns)
    if path == "3d-narrow":
        the_plan = replace(the_plan, specs=sweep.narrow_3d_specs(p))
    tq, hq, d = p.total_q, p.num_q_heads, p.head_size
    workspaces = (torch.empty(tq, hq, ns, d), torch.empty(tq, hq, ns), torch.empty(tq, hq, ns))
    runs, _ = ad.launches(the_plan, [None] * len(the_plan.specs), args["q"], args["k"],
                          args["v"], args["out"], args["cu_seqlens_q"], args["seqused_k"],
                          args["block_table"], float(args["softmax_scale"]), (), {}, workspaces)
    return the_plan.specs, [g for _, g, _, _ in runs]


@pytest.mark.parametrize("hq, path, ns", [(64, "2d", 1), (64, "3d", 4), (64, "3d-narrow", 4),
                                          (16, "2d", 1), (16, "3d", 4)])
def test_the_sampled_launch_covers_every_query_head_of_its_kv_head(hq, path, ns):
    """The sampled launch's head axis is the real launch's over one KV head: for GQA 32 (64/2
    heads, bf16 d128, tools/dispatch_tables.py's bf16/128/64/2) group_split = 2 q-head blocks
    of 16 heads, the real launch's 2 KV heads x 2 = 4 divided by its 2 KV heads (the sample once
    launched 1: half the query heads, half the work modelled); for GQA 8 one block. The 2D
    sample writes every query head of its KV head."""
    case = sweep.Case("decode", ((1, 1024),), 4, hq, 2, "bf16", 128)
    args, sp = sweep.sampled_inputs(case)
    specs, grids = real_launches(case, path, ns)
    split = specs[0].group_split
    assert split == (2 if hq == 64 else 1)
    sweep._PROFILES.clear()
    args["out"].fill_(7.0)                  # make_inputs' fill: a head never written keeps it
    profs = sweep.profiles(case, path, ns)
    head = 0 if path == "2d" and not specs[0].q_major_grid else 1       # the grid's head axis
    assert profs[0].grid[head] == sp.num_kv_heads * split == grids[0][head] // case.hk
    # the reduction's workgroups (a token's query heads) repeat exactly over batch x KV heads
    assert [math.prod(pr.grid) * case.batch * case.hk for pr in profs[1:]] == \
        [math.prod(g) for g in grids[1:]]
    if path == "2d":
        written = (args["out"].float() != 7.0).all(-1).all(0)     # per query head
        assert bool(written.all()), written.tolist()


def test_gfx950_sweep_runs_gfx950_kernels_modelled_as_mi355x():
    """--target gfx950: gfx950's plan, the emulator as gfx950 and MI355X's costs, sampled as on
    gfx942 (one KV head, one repeat) and equal to emulating every workgroup."""
    case = sweep.Case("decode", ((1, 256),), 2, 8, 2, "f16", 64, target="gfx950")
    (prof3, _), = [sweep.profiles(case, "3d", 4)]
    assert prof3.kernel.endswith("_gfx950")
    sampled = sweep.modelled(case, "3d", 4)
    full, _ = full_3d([(1, 256)] * 2, 8, 2, 64, 4, target="gfx950", costs=MI355X)
    for cycles in sweep.LATENCIES:
        assert sampled[cycles] == pytest.approx(full[cycles], rel=0.02), cycles
    assert sampled[2000] != pytest.approx(sweep.modelled(replace(case, target="gfx942"), "3d", 4)[2000])


def test_heads_argument_is_checked_before_any_run(capsys):
    with pytest.raises(SystemExit):
        sweep.main(["--heads", "32/5"])
    assert "--heads" in capsys.readouterr().err


# the engine (rocke.tasks): one task a problem, the output the serial run's byte for byte
TINY = ["--dtypes", "f16", "--head-sizes", "64", "--heads", "8/2", "--kv", "512", "--kinds",
        "decode", "--batches", "1", "4", "--segments", "2"]


def sweep_output(capsys, json_path, *extra):
    """(stdout, the --json file's bytes, stderr) of one dispatch_sweep run of TINY, every cache
    of this process emptied first (forked processes start from the parent's caches)."""
    sweep._INPUTS.clear()
    sweep._PROFILES.clear()
    assert sweep.main([*TINY, "--json", str(json_path), *extra]) == 0
    captured = capsys.readouterr()
    return captured.out, json_path.read_bytes(), captured.err


@pytest.mark.parametrize("extra, words", [(["--jobs", "0"], "--jobs must be at least 1"),
                                          (["--ray", "not an address"], "--ray: want HOST:PORT")])
def test_a_bad_engine_is_refused_before_any_run(capsys, monkeypatch, extra, words):
    monkeypatch.setattr(sweep, "sweep_case", lambda *a: pytest.fail("ran"))
    with pytest.raises(SystemExit):
        sweep.main([*TINY, *extra])
    assert words in capsys.readouterr().err


def test_forked_processes_give_the_serial_output(tmp_path, capsys):
    """Two decode problems (fp16 d64, 8/2 heads, 1 and 4 sequences x 512 keys) serially and in
    two forked processes (--jobs 2): the printed table and summary and the written JSON are
    identical byte for byte, and so are tools/dispatch_tables.py's rows, log and classes."""
    out, js, err = sweep_output(capsys, tmp_path / "serial.json")
    jobs_out, jobs_js, jobs_err = sweep_output(capsys, tmp_path / "jobs.json", "--jobs", "2")
    assert "(serial)" in err and "(2 processes)" in jobs_err
    assert out.count("\n") == 6 and "decode [1x512]x4 h8/2 f16 d64: dispatcher" in out
    assert (jobs_out, jobs_js) == (out, js)
    from rocke import tasks
    from tools import dispatch_tables as dt
    cases = [sweep.Case("decode", ((1, 512),), b, 8, 2, "f16", 64) for b in (1, 4)]
    built = {}
    for engine in (tasks.Engine("serial", 1), tasks.Engine("processes", 2)):
        sweep._INPUTS.clear()
        sweep._PROFILES.clear()
        log = []
        built[engine.kind] = (*dt.build(cases, log=log.append, engine=engine), log)
    assert built["processes"] == built["serial"] and len(built["serial"][2]) == 2


# the result store: an option's modelled times kept under its kernels' IR and the code they
# depend on (benchmarks/dispatch_sweep.modelled_key)
def test_modelled_times_come_from_the_store_and_move_with_one_family(tmp_path, monkeypatch):
    """A second run is answered by the store (no emulation); an edit that moves only
    reduce_segments' IR moves the 3D options' keys (they launch it) and keeps the 2D one's."""
    monkeypatch.setenv("ROCKE_RESULTS_DIR", str(tmp_path / "results"))
    case = sweep.Case("decode", ((1, 512),), 4, 8, 2, "f16", 64)
    first = {opt: sweep.modelled(case, *opt) for opt in (("2d", 1), ("3d", 2))}
    keys = {opt: sweep.modelled_key(case, *opt) for opt in first}
    monkeypatch.setattr(sweep, "model_option", lambda *a: pytest.fail("modelled again"))
    assert {opt: sweep.modelled(case, *opt) for opt in first} == first
    from rocke.kernels.gfx942 import reduce_segments
    monkeypatch.setattr(reduce_segments, "SEGMENTS_PER_TRIP", 16)
    assert sweep.modelled_key(case, "2d", 1) == keys[("2d", 1)]
    assert sweep.modelled_key(case, "3d", 2) != keys[("3d", 2)]
    with pytest.raises(pytest.fail.Exception, match="modelled again"):
        sweep.modelled(case, "3d", 2)


def test_the_2d_options_name_their_regime_whatever_the_table_says(monkeypatch):
    """"2d" is the rules' regime (bf16: narrow) even where the committed table names the other
    for the class -- tools/dispatch_tables.py models both from it, so the table cannot feed back
    into its own options; "2d:x8t" / "2d:narrow" are the regimes outright."""
    from rocke.kernels.gfx942 import attention_dispatch as ad
    case = sweep.Case("prefill", ((96, 96),), 2, 8, 2, "bf16", 64)
    _, sp = sweep.sampled_inputs(case)
    key = ad.problem_class(sweep.full_problem(case, sp))
    monkeypatch.setattr(ad, "_MODEL_TABLE", {key: {"path": "2d", "segments": 2, "best": "2d:x8t",
                                                   "regime": "transposed_x8", "us": {"2d:x8t": 1.0}}})
    (rules,) = sweep.option_specs(case, "2d")
    (x8t,) = sweep.option_specs(case, "2d:x8t")
    (narrow,) = sweep.option_specs(case, "2d:narrow")
    assert not rules.transposed_x8 and x8t.transposed_x8 and narrow == rules
    assert sweep.is_2d("2d:x8t") and not sweep.is_2d("3d-narrow")
