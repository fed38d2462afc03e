"""Bad input to the tools is a clear error naming what is wrong, raised before any work: no
traceback, no silently ignored input (`rocke profile --shape`, `rocke report --reachable
--merge`, benchmarks/calibration.py --only, benchmarks/profile.py --json / --segments)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocke.cli import EXIT_USER_ERROR, main as cli

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return CliRunner().invoke(cli, list(args))


def one_line_error(r, *words):
    assert r.exit_code == EXIT_USER_ERROR, (r.exit_code, r.output, r.exception)
    assert isinstance(r.exception, SystemExit) and "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ---------------------------------------------------------------- rocke profile --shape

def test_profile_refuses_a_shape_key_given_twice():
    """It used to profile n=200 and drop n=100 without a word."""
    one_line_error(run("profile", "vector_add/f32_v4", "--shape", "n=100,n=200"),
                   "--shape", "n is given twice", "n=100", "n=200")
    one_line_error(run("profile", "gemm/f16_32x32x8", "--shape", "M=64,N=64,K=64,M=64"),
                   "M is given twice")


def test_profile_refuses_a_shape_beyond_host_memory_before_allocating(monkeypatch):
    """It used to try a 12 GB host allocation (torch.randn) and print torch's traceback: the
    footprint is now checked, naming the shape and the bytes, before any tensor exists."""
    import torch
    from rocke.perf import problems

    def no_allocation(*args, **kwargs):
        raise AssertionError("a tensor was allocated before the size check")
    monkeypatch.setattr(problems.torch, "randn", no_allocation)
    monkeypatch.setattr(problems.torch, "zeros", no_allocation)
    line = one_line_error(run("profile", "vector_add/f32_v4", "--shape", "n=3000000000"),
                          "--shape n=3000000000", "vector_add/f32_v4", "36,000,000,000 bytes",
                          "a 12,000,000,000", "profile a smaller shape")
    assert f"limit of {problems.MAX_HOST_BYTES:,} bytes" in line
    one_line_error(run("profile", "gemm/f16_32x32x8", "--shape", "M=65536,N=65536,K=64"),
                   "--shape M=65536,N=65536,K=64", "c 8,589,934,592")
    assert torch.randn is no_allocation      # (restored by monkeypatch)


def test_host_bytes_is_what_each_builder_allocates():
    """The size check's arithmetic against the builders themselves, family by family, at the
    defaults and at a small shape."""
    import torch
    from rocke.kernels.registry import all_variants
    from rocke.perf import problems
    small = {"vector_add": {"n": 1000}, "gemm": {"M": 64, "N": 32, "K": 16},
             "gemm_bias_gelu": {"M": 32, "N": 64, "K": 32}, "flash_attention": {"S": 64},
             "softmax": {"rows": 2, "cols": 256}, "rmsnorm_residual": {"rows": 3, "cols": 512}}
    assert set(small) == set(problems.BUILDERS) == set(problems.TENSORS)
    seen = set()
    for v in all_variants().values():
        if v.family not in problems.BUILDERS or v.family in seen:
            continue
        seen.add(v.family)
        for shape in ({}, small[v.family]):
            p = problems.build_problem(v, dict(shape))
            allocated = sum(a.numel() * a.element_size() for a in p.args
                            if isinstance(a, torch.Tensor))
            assert problems.host_bytes(v, shape)[0] == allocated, (v.name, shape)
    assert seen == set(problems.BUILDERS)


# ---------------------------------------------------------------- rocke report --merge

def shard_report(**changes) -> dict:
    """A well-formed one-shard report of `rocke report --reachable --json`, as the writer
    makes it, with `changes` applied."""
    record = dict(
        summary="reachable attention specs: 2 (2 UnifiedAttention2D); 1 spill (2 spills); 0 "
                "launch spilling after the fallback",
        target="gfx942", corners=False, shard=[1, 1], specs=2, match=None, enumerated=2,
        enumeration_sha256="e" * 64, code_sha256="c" * 64,
        kinds={"UnifiedAttention2DSpec": 2}, seconds=1.5,
        spilling=[dict(name="k_a", vgpr_spills=0, sgpr_spills=2, fallback=dict(
            chosen="k_b", vgpr_spills=0, sgpr_spills=0, spill_free=True, tried=2))],
        launch_spilling=[], failed=[])
    record.update(changes)
    return record


def merge(tmp_path, record, name="s1.json"):
    path = tmp_path / name
    path.write_text(json.dumps(record))
    return str(path), run("report", "--reachable", "--merge", str(path))


def test_merge_of_a_well_formed_shard_report(tmp_path):
    _, r = merge(tmp_path, shard_report())
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == (
        "1 shards merged: reachable attention specs: 2 (2 UnifiedAttention2D); 1 spill "
        "(2 spills); 0 launch spilling after the fallback")


@pytest.mark.parametrize("changes, words", [
    # a shard of 0 shards: it used to print "0 shards merged" and exit 0
    (dict(shard=[1, 0]), ["'shard'", "[I, N] with integers 1 <= I <= N", "[1, 0]"]),
    # "too many values to unpack", naming neither file nor field
    (dict(shard="2/2"), ["'shard'", '"2/2"']),
    (dict(shard=[1, 1, 1]), ["'shard'"]),
    (dict(shard=[True, 1]), ["'shard'"]),
    # an AttributeError traceback
    (dict(kinds=["UnifiedAttention2DSpec"]), ["'kinds'", "JSON object of spec class"]),
    (dict(kinds={"UnifiedAttention2DSpec": "2"}), ["'kinds'"]),
    (dict(kinds={"UnifiedAttention2DSpec": 3}), ["'kinds' counts 3 specs", "'specs' 2"]),
    # a KeyError traceback
    (dict(spilling=[dict(name="k_a", fallback=None)]), ["'spilling'[0]", "'vgpr_spills'"]),
    (dict(spilling=[dict(name="k_a", vgpr_spills=-1, sgpr_spills=0, fallback=None)]),
     ["'spilling'[0]", "'vgpr_spills'", "non-negative integer", "-1"]),
    (dict(spilling=["k_a"]), ["'spilling'[0]", "JSON object"]),
    (dict(spilling=[dict(name="k_a", vgpr_spills=0, sgpr_spills=2, fallback={"chosen": "k"})]),
     ["'spilling'[0]'s 'fallback'", "'vgpr_spills'"]),
    (dict(spilling={}), ["'spilling'", "a list"]),
    (dict(failed=[dict(name="k_a")]), ["'failed'[0]", "'error'"]),
    (dict(launch_spilling="k_a"), ["'launch_spilling'", "list of spec names"]),
    (dict(specs=True), ["'specs'"]),
    (dict(enumerated=-2), ["'enumerated'"]),
    (dict(corners="no"), ["'corners'", "true or false"]),
    (dict(match=3), ["'match'"]),
    (dict(code_sha256=None), ["'code_sha256'"]),
    (dict(target="gfx90a"), ["'target'", "gfx942, gfx950"]),
])
def test_merge_refuses_a_forged_shard_report_naming_file_and_field(tmp_path, changes, words):
    path, r = merge(tmp_path, shard_report(**changes))
    one_line_error(r, path, "not a valid shard report", *words)
    assert "shards merged" not in r.output


def test_merge_names_the_forged_file_among_good_ones(tmp_path):
    good1 = tmp_path / "s1.json"
    good1.write_text(json.dumps(shard_report(shard=[1, 2], specs=1, enumerated=2,
                                             kinds={"UnifiedAttention2DSpec": 1})))
    bad, _ = merge(tmp_path, shard_report(shard="2/2"), "s2.json")
    r = run("report", "--reachable", "--merge", str(good1), bad)
    line = one_line_error(r, bad, "'shard'")
    assert str(good1) not in line


# ---------------------------------------------------------------- benchmarks/calibration.py

def test_calibration_refuses_an_only_of_the_other_target(capsys):
    """--target gfx950 --only <a gfx942 anchor> used to run nothing and exit 0."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import calibration as cal
    finally:
        sys.path.remove(str(ROOT))
    with pytest.raises(SystemExit) as exc:
        cal.main(["--target", "gfx950", "--only", "hbm_copy"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--only hbm_copy: not an anchor of --target gfx950" in err
    assert "hbm_copy_mi350x" in err and "aiter_fwd_b1h32kv8s1024_mi355x" in err
    with pytest.raises(SystemExit):
        cal.main(["--only", "hbm_copy_mi350x"])          # a gfx950 anchor, gfx942 by default
    assert "not an anchor of --target gfx942" in capsys.readouterr().err


# ---------------------------------------------------------------- benchmarks/profile.py

@pytest.mark.parametrize("argv, words", [
    (["--json", "{tmp}"], "--json {tmp}: cannot write it: it is a directory"),
    (["--json", "{tmp}/no/such/dir/rows.json"], "does not exist"),
    (["--segments", "0"], "--segments: a segment count must be >= 1, got 0"),
    (["--segments", "16", "-3"], "got -3"),
    (["--segments", "300000"], "exceed the kernels' 32-bit indexing; at most 262143"),
])
def test_profile_benchmark_checks_every_flag_before_any_work(argv, words, tmp_path):
    """--json naming a directory and --segments 0 used to be found after every emulation, as a
    traceback: now exit 2, one line, before the first row (the header line is not printed)."""
    argv = [a.format(tmp=tmp_path) for a in argv]
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile.py"),
                        "--shapes", "decode", "--backends", "2d", *argv],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert words.format(tmp=tmp_path) in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""
