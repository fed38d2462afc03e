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
    assert out.rstrip().splitlines()[-1] == "calibration: 0 anchors, max |error| nan %"


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
    assert out.rstrip().splitlines()[-1] == "calibration: 0 anchors, max |error| nan %"


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
    assert out.rstrip().splitlines()[-1] == "calibration: 0 anchors, max |error| nan %"


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
