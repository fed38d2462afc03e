"""benchmarks/calibration.py's own packing of AITER's FMHA fwd v3 arguments (the anchors run
AITER's code objects with it), against layouts worked out by hand."""
import struct
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import calibration as cal  # noqa: E402

META = [{".name": "R", ".offset": 0, ".size": 8, ".value_kind": "global_buffer"},
        {".name": "pad", ".offset": 8, ".size": 8, ".value_kind": "by_value"},
        {".name": "scalar", ".offset": 16, ".size": 4, ".value_kind": "by_value"},
        {".name": "pad", ".offset": 20, ".size": 4, ".value_kind": "by_value"},
        {".name": "seq_len", ".offset": 32, ".size": 4, ".value_kind": "by_value"}]


def test_pack_kernarg_puts_each_value_at_its_offset():
    raw = cal.pack_kernarg(META, 48, {"R": 0x1122334455667788, "scalar": 7, "seq_len": 4096})
    assert len(raw) == 48
    assert struct.unpack_from("<Q", raw, 0)[0] == 0x1122334455667788
    assert struct.unpack_from("<I", raw, 16)[0] == 7
    assert struct.unpack_from("<I", raw, 32)[0] == 4096
    assert raw[8:16] == bytes(8) and raw[20:32] == bytes(12) and raw[36:] == bytes(12)


def test_pack_kernarg_refuses_a_changed_abi():
    with pytest.raises(ValueError, match="metadata only \\['seq_len'\\]"):
        cal.pack_kernarg(META, 48, {"R": 1, "scalar": 2})
    with pytest.raises(ValueError, match="values only \\['extra'\\]"):
        cal.pack_kernarg(META, 48, {"R": 1, "scalar": 2, "seq_len": 3, "extra": 4})
    with pytest.raises(ValueError, match="does not fit"):
        cal.pack_kernarg(META, 24, {"R": 1, "scalar": 2, "seq_len": 3})


def test_aiter_fwd_values_bshd_strides_in_bytes():
    """B=2, S=512, 4 query heads over 2 KV heads, d128, bf16 (2 bytes): a query row is 4 x 128 x 2
    = 1024 bytes, a 256-row tile 262144, a batch 512 x 1024; K/V rows 2 x 128 x 2 = 512."""
    q, o = torch.zeros(2, 512, 4, 128, dtype=torch.bfloat16), torch.zeros(2, 512, 4, 128,
                                                                        dtype=torch.bfloat16)
    k, v = torch.zeros(2, 512, 2, 128, dtype=torch.bfloat16), torch.zeros(2, 512, 2, 128,
                                                                        dtype=torch.bfloat16)
    lse = torch.zeros(2, 4, 512)
    got = cal.aiter_fwd_values(q, k, v, o, lse, 0.5)
    assert (got["Seqs"], got["Ts"], got["Hs"], got["Bs"]) == (1024, 262144, 256, 524288)
    assert (got["k_Seqs"], got["k_Hs"], got["k_Bs"]) == (512, 256, 262144)
    assert (got["v_Seqs"], got["r_Seqs"], got["r_Bs"]) == (512, 1024, 524288)
    assert (got["gqa"], got["q_head_num"], got["seq_len"], got["kv_seq_len"]) == (2, 4, 512, 512)
    assert got["scalar"] == 0x3F000000        # 0.5 as float bits
    assert got["lse_Hs"] == 2048 and got["lse"] == 0
    assert got["Q"] == q.data_ptr() and got["R"] == o.data_ptr()


@pytest.mark.parametrize("s, causal, grid", [(1024, False, (4, 32, 1)), (1024, True, (2, 32, 1)),
                                             (4096, True, (8, 32, 1)), (1000, False, (4, 32, 1))])
def testaiter_grid(s, causal, grid):
    """256 query rows a workgroup; causal pairs the head and tail tiles (half the workgroups)."""
    assert cal.aiter_grid(1, 32, s, causal) == grid


def test_aiter_anchors_say_not_run_without_a_checkout(capsys):
    assert cal.main(["--only", "aiter_fwd_b1h32kv8s1024"]) == 0
    out = capsys.readouterr().out
    assert "not run: pass --aiter-dir" in out
    assert out.rstrip().splitlines()[-2:] == ["calibration: 0 anchors, max |error| nan %",
                                              "test: 0 anchors, max |error| nan %"]


def test_a_wrong_aiter_dir_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cal.main(["--aiter-dir", str(tmp_path)])
    assert "expected a checkout of github.com/ROCm/aiter" in capsys.readouterr().err


def test_gfx950_anchors_are_aiters_mi355x_column(capsys):
    """--target gfx950 lists AITER's MI355X figures (the README's column beside the MI300X one)
    and times them against the gfx950 code objects; without a checkout they are not run."""
    rows = {r[:5]: r[5] for r in cal.AITER_ROWS_MI355X}
    assert rows[(1, 32, 8, 1024, False)] == 613.48 and rows[(8, 64, 8, 4096, True)] == 1190.295
    assert cal.aiter_code_object("gfx950", True) == "hsa/gfx950/fmha_v3_fwd/fwd_hd128_bf16_causal.co"
    assert cal.aiter_code_object("gfx942", False).endswith("MI300/fwd_hd128_bf16_rtna.co")
    assert cal.main(["--target", "gfx950", "--only", "aiter_fwd_b1h32kv8s1024_mi355x"]) == 0
    out = capsys.readouterr().out
    assert "FWD TFLOPS MI355X" in out and "not run: pass --aiter-dir" in out
    assert out.rstrip().splitlines()[-2:] == ["calibration: 0 anchors, max |error| nan %",
                                              "test: 0 anchors, max |error| nan %"]


def test_gfx950_anchor_without_a_gfx950_disassembler_says_why(tmp_path, capsys, monkeypatch):
    """A gfx950 code object needs an LLVM 20+ llvm-objdump: without one the anchor is listed as
    not run with that reason (not counted), before anything is emulated."""
    from rocke.emu import codeobject
    fwd = tmp_path / "hsa" / "gfx950" / "fmha_v3_fwd"
    fwd.mkdir(parents=True)
    (fwd / "fwd_hd128_bf16.co").write_bytes(b"not a code object")
    monkeypatch.setattr(codeobject, "disassembler", lambda processor: None)
    assert cal.main(["--target", "gfx950", "--aiter-dir", str(tmp_path),
                     "--only", "aiter_fwd_b1h32kv8s1024_mi355x"]) == 0
    out = capsys.readouterr().out
    assert "not run: cannot disassemble a gfx950 code object" in out
    assert out.rstrip().splitlines()[-2:] == ["calibration: 0 anchors, max |error| nan %",
                                              "test: 0 anchors, max |error| nan %"]


def test_checked_launch_prints_a_race_and_models_a_run_without_the_checker(capsys):
    """The gfx950 AITER rows run with the LDS race checker; a race is a finding printed with
    the row's name, and the row is modelled from a rerun with the checker off on a cleared
    output (what the first run half-wrote does not survive)."""
    from rocke.emu.errors import LdsRace
    calls, out = [], torch.full((4,), 7.0)

    def racy(check):
        calls.append(check)
        if check:
            out.fill_(9.0)
            raise LdsRace("LDS race in kernel k: wave 2 writes it at line 475")
        assert torch.equal(out, torch.zeros(4))
        return "report"

    assert cal.checked_launch(racy, out, "AITER fwd at seqlen 1024") == "report"
    assert calls == [True, False]
    assert ("AITER fwd at seqlen 1024: the LDS race checker stops it: LDS race in kernel k: wave 2 "
            "writes it at line 475; modelled from a run with the checker off") in capsys.readouterr().out
    calls.clear()
    assert cal.checked_launch(lambda check: calls.append(check) or "clean", out, "x") == "clean"
    assert calls == [True] and capsys.readouterr().out == ""


# ---- the calibration / test split (issue 41) ----
def test_the_split_is_declared_and_disjoint():
    """Every row of AITER's table is either calibration or test on each target, never both; on
    gfx942 the nine anchor rows calibrate and the other 85 test; on gfx950 the row MI355X's
    loaded clock is fitted to calibrates as well (84 test)."""
    assert len(cal.AITER_TABLE) == 94
    assert len({r[:5] for r in cal.AITER_TABLE}) == 94
    for target, n_cal in (("gfx942", 9), ("gfx950", 10)):
        calib = {r[:5] for r in cal.aiter_calibration_rows(target)}
        test = {r[:5] for r in cal.aiter_test_rows(target)}
        assert len(calib) == n_cal and len(test) == 94 - n_cal
        assert not calib & test
        assert calib | test == {r[:5] for r in cal.AITER_TABLE}
    assert (1, 32, 8, 10240, False) in {r[:5] for r in cal.aiter_calibration_rows("gfx950")}
    assert (1, 32, 8, 10240, False) in {r[:5] for r in cal.aiter_test_rows("gfx942")}


def test_table_transcription_against_the_readme_figures():
    """A few cells read by hand off the README (aiter e4048607a535), and the calibration rows
    agree with the table they were taken from."""
    table = {r[:5]: r[5:] for r in cal.AITER_TABLE}
    assert table[(1, 64, 4, 16384, True)] == (544.1, 1398.14)
    assert table[(8, 64, 4, 1024, False)] == (497.15, 1016.32)
    assert table[(1, 32, 8, 10240, False)] == (549.73, 1421.77)
    assert table[(4, 32, 8, 2048, True)] == (419.435, 809.835)
    for row in cal.AITER_ROWS:
        assert table[row[:5]][0] == row[5]
    for row in cal.AITER_ROWS_MI355X:
        assert table[row[:5]][1] == row[5]


def test_anchor_roles_follow_the_split():
    for anchors, target in ((cal.ANCHORS, "gfx942"), (cal.ANCHORS_GFX950, "gfx950")):
        test_names = {cal._aiter_name(*r[:5], target) for r in cal.aiter_test_rows(target)}
        by_role = {a.name: a.role for a in anchors}
        assert {n for n, role in by_role.items() if role == cal.TEST} == test_names
        assert all(not a.fitted for a in anchors if a.role == cal.TEST)
    fitted = [a for a in cal.ANCHORS_GFX950 if a.fitted]
    assert [a.name for a in fitted] == ["aiter_fwd_b1h32kv8s10240_mi355x"]
    assert fitted[0].role == cal.CALIBRATION


def test_split_summary_figures():
    """Errors -0.10, +0.20, -0.30: max 30 %, mean |error| 20 %, signed mean -6.7 %, 2 too fast."""
    line = cal.split_summary(cal.CALIBRATION, [-0.10, 0.20, -0.30])
    assert line == ("calibration: 3 anchors, max |error| 30.0 %, mean |error| 20.0 %, signed "
                    "mean -6.7 %, 2 of 3 too fast")
    assert cal.split_summary(cal.TEST, [0.1, -0.12]).endswith(": met)")
    assert cal.split_summary(cal.TEST, [0.16, 0.0]).endswith(": not met)")     # max 16 %
    assert cal.split_summary(cal.TEST, [-0.06, -0.06]).endswith(": not met)")  # mean -6 %


def test_test_sample_is_even_and_deterministic():
    rows = list(range(85))
    assert cal.test_sample(rows, 5) == [0, 17, 34, 51, 68]
    assert cal.test_sample(rows, None) == rows and cal.test_sample(rows, 100) == rows


def test_no_test_row_feeds_the_calibration_line(monkeypatch, capsys):
    """With every AITER row 'modelled' at a figure chosen here (calibration rows exactly right,
    test rows 2x too slow), the calibration line shows 0 % and the test line +100 %: a test row
    that leaked into the calibration figures would move them."""
    from rocke.perf.model import Modelled
    calib = {r[:5] for r in cal.AITER_ROWS}
    published = {r[:5]: r[5] for r in cal.AITER_TABLE}

    def fake_run(aiter_dir, b, h, hk, s, causal, target="gfx942"):
        tflops = published[(b, h, hk, s, causal)] * (1.0 if (b, h, hk, s, causal) in calib
                                                     else 0.5)
        return None, {}, lambda us: tflops

    monkeypatch.setattr(cal, "run_aiter_fwd", fake_run)
    monkeypatch.setattr(cal, "model_time", lambda profile, costs=None, **kw: Modelled(
        1.0, 1.0, "compute", occupancy={"clock_ghz": 2.1}))
    only = [a.name for a in cal.ANCHORS if a.name.startswith("aiter_")]
    argv = ["--aiter-dir", str(ROOT)]
    monkeypatch.setattr(cal, "aiter_code_object", lambda target, causal: "tests/x.co")  # ROOT/tests passes the checkout check
    for name in only:
        argv += ["--only", name]
    assert cal.main(argv) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    assert out[-3] == "test rows run: 85 of 85"
    assert out[-2] == ("calibration: 9 anchors, max |error| 0.0 %, mean |error| 0.0 %, signed "
                       "mean +0.0 %, 0 of 9 too fast")
    assert out[-1].startswith("test: 85 anchors, max |error| 100.0 %, mean |error| 100.0 %, "
                              "signed mean +100.0 %, 0 of 85 too fast")
