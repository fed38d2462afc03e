from click.testing import CliRunner

from rocke.cli import main as cli
from rocke.kernels.registry import all_variants


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_list_names_every_variant():
    r = run("list")
    assert r.exit_code == 0
    listed = [line.split()[0] for line in r.output.splitlines()]
    assert listed == list(all_variants())


def test_emit_ll_asm_and_code_object(tmp_path):
    name = "vector_add/f32_v4"
    r = run("emit", name)
    assert r.exit_code == 0 and "define amdgpu_kernel" in r.output
    r = run("emit", name, "--format", "asm")
    assert r.exit_code == 0 and ".amdhsa_kernel" in r.output and "buffer_" in r.output
    out = tmp_path / "k.hsaco"
    r = run("emit", name, "--format", "co", "-o", str(out))
    assert r.exit_code == 0 and out.read_bytes()[:4] == b"\x7fELF"
    r = run("emit", name, "--format", "co")
    assert r.exit_code != 0 and "-o FILE" in r.output


def test_report_shows_resources_and_occupancy():
    r = run("report", "softmax/f32_wave", "vector_add/f16_v8")
    assert r.exit_code == 0, r.output
    assert "VGPR" in r.output and "w/SIMD" in r.output and "total spills: 0" in r.output


def test_unknown_variant_is_a_usage_error():
    r = run("emit", "vector_add/f64")
    assert r.exit_code == 2 and "unknown kernel variant 'vector_add/f64'" in r.output
    assert "vector_add/f32_v4" in r.output       # suggestions


def test_list_and_report_by_target():
    """--target keeps the variants built for that processor: gfx950's attention families and
    its dense prefill, no gfx942 attention; an unknown processor is a usage error."""
    r = run("list", "--target", "gfx950")
    assert r.exit_code == 0, r.output
    listed = {line.split()[0].split("/")[0] for line in r.output.splitlines()}
    assert listed == {"dense_prefill_gfx950", "attention_2d_gfx950", "attention_3d_gfx950",
                      "reduce_segments_gfx950"}
    gfx942 = {line.split()[0].split("/")[0] for line in run("list", "--target", "gfx942").output.splitlines()}
    assert "attention_2d" in gfx942 and "vector_add" in gfx942 and not gfx942 & listed
    r = run("list", "--target", "gfx90a")
    assert r.exit_code == 2 and "--target: rocke knows gfx942, gfx950, got 'gfx90a'" in r.output
    r = run("report", "--target", "gfx950", "reduce_segments_gfx950/f16_d64_v4_early",
            "vector_add/f32_v4")
    assert r.exit_code == 0, r.output
    assert "reduce_segments_gfx950/f16_d64_v4_early" in r.output and "vector_add" not in r.output
    assert "1 variants for gfx950; total spills: 0" in r.output


def test_rocke_list_does_not_import_torch():
    """Listing the variants plans gfx950's shipped ones ahead of time; whether a caller is
    capturing is not asked of a torch that nobody imported (importing it cost 2 of `rocke
    list`'s 4.5 s)."""
    import subprocess
    import sys
    code = ("import sys; from click.testing import CliRunner; from rocke.cli import main; "
            "r = CliRunner().invoke(main, ['list']); assert r.exit_code == 0, r.output; "
            "assert 'attention_2d_gfx950/' in r.output, r.output[-500:]; "
            "print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"
