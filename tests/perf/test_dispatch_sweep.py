"""benchmarks/dispatch_sweep.py's sampling: one KV head x one repeat of the sequence pattern,
modelled over the full grid, gives the modelled time of emulating the whole problem."""
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import dispatch_sweep as sweep  # noqa: E402
from rocke.arch.costs import MI300X, MI355X  # noqa: E402
from rocke.kernels.common import attention_unified as au  # noqa: E402
from rocke.kernels.gfx942 import attention_tiled_3d as k3, reduce_segments as kr  # noqa: E402
from rocke.perf import model_time  # noqa: E402
from rocke.runtime import launch  # noqa: E402
from tests.kernels.unified_inputs import make_inputs  # noqa: E402


def full_3d(seqs, hq, hk, d, ns, target="gfx942", costs=MI300X):
    """Modelled us per latency of the whole problem, every workgroup emulated."""
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=64, dtype="f16", seed=0)
    p = au.describe_problem(*(args[n] for n in sweep.NAMES))
    spec3, spec_r = au.attention_target(target).plan(p, "3d").specs
    so = torch.empty(p.total_q, hq, ns, d)
    sm, se = torch.empty(p.total_q, hq, ns), torch.empty(p.total_q, hq, ns)
    a3 = k3.kernel_args(spec3, args["q"], args["k"], args["v"], so, sm, se, args["block_table"],
                        args["cu_seqlens_q"], args["seqused_k"], float(args["softmax_scale"]), ns)
    g3, b3 = k3.launch_geometry(spec3, p.num_seqs, p.total_q, hk, ns)
    ar = kr.kernel_args(spec_r, so, sm, se, args["out"], ns)
    gr, br = kr.launch_geometry(spec_r, p.total_q, hq)
    out = dict.fromkeys(sweep.LATENCIES, 0.0)
    for c, g, b, a in ((au.compiled(spec3), g3, b3, a3), (au.compiled(spec_r), gr, br, ar)):
        with sweep.emulating_as(target):
            prof = launch(c, g, b, a, device="emu", profile=True).profile
        for cycles in sweep.LATENCIES:
            out[cycles] += model_time(prof, costs=replace(costs, memory_latency_cycles=cycles)).us
    return out


def test_sampled_sweep_models_the_full_problem():
    case = sweep.Case("decode", ((1, 256),), 2, 8, 2, "f16", 64)
    sampled = sweep.modelled(case, "3d", 4)
    full = full_3d([(1, 256)] * 2, 8, 2, 64, 4)
    for cycles in sweep.LATENCIES:
        assert sampled[cycles] == pytest.approx(full[cycles], rel=0.02), cycles


def test_gfx950_sweep_runs_gfx950_kernels_modelled_as_mi355x():
    """--target gfx950: gfx950's plan, the emulator as gfx950 and MI355X's costs, sampled as on
    gfx942 (one KV head, one repeat) and equal to emulating every workgroup."""
    case = sweep.Case("decode", ((1, 256),), 2, 8, 2, "f16", 64, target="gfx950")
    (prof3, _), = [sweep.profiles(case, "3d", 4)]
    assert prof3.kernel.endswith("_gfx950")
    sampled = sweep.modelled(case, "3d", 4)
    full = full_3d([(1, 256)] * 2, 8, 2, 64, 4, target="gfx950", costs=MI355X)
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
