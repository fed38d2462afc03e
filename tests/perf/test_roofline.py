"""The roofline picture: its roofs against the data sheet, its points worked out by hand, and
a real PNG with one marker per kernel row (benchmarks/profile.py --plot)."""
import importlib.util
import sys
from pathlib import Path

import pytest

from rocke.perf.roofline import KernelPoint, mfma_flops, plot, roofline_data, roofs

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("bench_profile", ROOT / "benchmarks/profile.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_profile", mod)
    spec.loader.exec_module(mod)
    return mod


def test_roofs_match_the_data_sheet():
    r = roofs()
    # MI300X data sheet: 1307.4 dense f16 TFLOPS at 2.1 GHz; LDS 128 B/clk x 304 CUs
    assert r["mfma_f16_flops_s"] == pytest.approx(1307.4e12, rel=1e-3)
    assert r["lds_bytes_s"] == pytest.approx(128 * 304 * 2.1e9)
    assert 4.0e12 < r["hbm_bytes_s"] < 5.3e12


def test_mfma_flops_by_hand():
    # 32x32x8 f16: 2*32*32*8 = 16384 FLOPs; 4x4x4 16-block: 2*4*4*4*16 = 2048
    assert mfma_flops({"v_mfma_f32_32x32x8_f16": 10, "v_mfma_f32_4x4x4_16b_f16": 3}) == \
        163840 + 6144
    with pytest.raises(ValueError, match="v_mfma_f32_99x99x9_f16"):
        mfma_flops({"v_mfma_f32_99x99x9_f16": 1})


def test_plot_writes_a_png_with_one_point_per_kernel(tmp_path):
    points = [KernelPoint("a", 2e9, 1e6, 4e6, 10.0),       # 2000 FLOP/B, 200 TFLOP/s
              KernelPoint("b", 1e9, 1e8, 0, 100.0),        # 10 FLOP/B, no LDS
              KernelPoint("copy", 0, 3e8, 0, 80.0)]        # no MFMA work: not drawn
    out = tmp_path / "roof.png"
    data = plot(points, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p["label"] for p in data["points"]] == ["a", "b"]
    assert data["skipped"] == ["copy"]
    a, b = data["points"]
    assert a["dram_intensity"] == pytest.approx(2000) and a["lds_intensity"] == pytest.approx(500)
    assert a["flops_per_s"] == pytest.approx(2e14)
    assert b["dram_intensity"] == pytest.approx(10) and b["lds_intensity"] is None
    assert "modelled MI300X" in data["title"]
    assert data == roofline_data(points)


def test_benchmark_rows_become_points_and_bad_plot_names_fail_early(tmp_path, capsys):
    bench = _benchmark()
    row = {"shape": "decode", "dtype": "f16", "head_size": 128, "backend": "auto", "path": "3d",
           "mfma_flops": 4096, "modelled_us": 2.0,
           "counters": {"unique_read_bytes": 100, "unique_write_bytes": 28, "lds_bytes": 64}}
    (p,) = bench.kernel_points([row, {"shape": "decode", "segments": 16}])   # sweep rows: none
    assert (p.label, p.flops, p.dram_bytes, p.lds_bytes) == ("decode f16 d128 auto->3d", 4096,
                                                             128, 64)
    with pytest.raises(SystemExit) as e:
        bench.main(["--shapes", "decode", "--plot", str(tmp_path / "roof.svg")])
    assert e.value.code == 2 and "PNG" in capsys.readouterr().err


def test_default_backends_run_without_triton_and_a_named_peer_needs_it(tmp_path, capsys,
                                                                         monkeypatch):
    """Triton is an optional extra: the default set drops the peer with a note, naming it fails."""
    bench = _benchmark()
    monkeypatch.setitem(sys.modules, "triton", None)        # import triton -> ImportError
    with pytest.raises(SystemExit) as e:
        bench.main(["--shapes", "decode", "--plot", str(tmp_path / "roof.svg")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "PNG" in err and "peer" in err and "not run" in err
    with pytest.raises(SystemExit) as e:
        bench.main(["--shapes", "decode", "--backends", "auto", "peer"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--backends peer: Triton is not importable" in err
    with pytest.raises(SystemExit):
        bench.main(["--shapes", "decode", "--plot", str(tmp_path / "missing" / "roof.png")])
    assert "does not exist" in capsys.readouterr().err
