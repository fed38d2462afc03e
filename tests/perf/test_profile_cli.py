"""`rocke profile`: the JSON interface scripts rely on, hand-checkable counts, and one-line
errors for bad input."""
import json
import sys

import pytest
from click.testing import CliRunner

from rocke.cli import main as cli

REQUIRED = ("valu", "mfma", "salu", "ds", "vmem", "smem", "lds_bytes", "lds_bank_conflicts",
            "global_read_bytes", "global_write_bytes", "unique_read_bytes", "unique_write_bytes")


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_json_has_the_fixed_counter_and_model_names():
    r = run("profile", "vector_add/f32_v4", "--shape", "n=8192", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert all(k in out["counters"] for k in REQUIRED)
    c = out["counters"]
    # c = a + b over 8192 f32: 2 x 32 KiB read, 32 KiB written, each byte once
    assert (c["global_read_bytes"], c["global_write_bytes"]) == (65536, 32768)
    assert (c["unique_read_bytes"], c["unique_write_bytes"]) == (65536, 32768)
    assert c["mfma"] == 0 and c["lds_bytes"] == 0
    model = out["model"]
    assert model["label"] == "modelled MI300X time"
    assert model["us"] >= model["bound_us"] > 0 and model["binding"]


def test_gemm_mfma_count_and_annotation():
    r = run("profile", "gemm/f16_16x16x16", "--shape", "M=64,N=128,K=64", "--annotate")
    assert r.exit_code == 0, r.output
    # 64 * 128 * 64 / (16 * 16 * 16) = 128 MFMA issues
    assert "v_mfma_f32_16x16x16_f16 128" in r.output
    assert "modelled MI300X time" in r.output and "; block at line" in r.output


def test_sampled_rows_model_the_full_grid():
    r = run("profile", "gemm/f16_32x32x8", "--shape", "M=256,N=128,K=64", "--json",
            "--sample-rows", "1")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["grid"] == [2, 4, 1] and out["emulated_grid"] == [2, 1, 1]
    assert out["model"]["workgroups"] == 8
    assert out["counters"]["mfma"] == 256 * 128 * 64 // (32 * 32 * 8) // 4   # one row of four


@pytest.mark.parametrize("args, message", [
    (("--shape", "M=0"), "M must be >= 1"),
    (("--shape", "M"), "key=value"),
    (("--shape", "Q=4"), "unknown Q"),
])
def test_bad_shapes_are_one_line_errors(args, message):
    r = run("profile", "gemm/f16_32x32x8", *args)
    assert r.exit_code == 2 and message in r.output
    assert "Traceback" not in r.output


def test_families_without_a_problem_builder_say_so():
    r = run("profile", "reduce_segments/f16_d64")
    assert r.exit_code == 2 and "no problem builder" in r.output and "benchmarks/profile.py" in r.output


def test_an_out_of_tree_family_declares_its_problem(monkeypatch):
    """A family outside rocke declares profile_problem / profile_tensors in its module, and
    `rocke profile` runs it at a shape (it used to refuse: "no problem builder for family")."""
    import sys
    from pathlib import Path
    from rocke.kernels.registry import register_family, unregister_family
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "out_of_tree"))
    register_family("oot_demo", "rocke_oot_demo")
    try:
        r = run("profile", "oot_demo/f32_v4", "--shape", "n=8192", "--json")
        assert r.exit_code == 0, r.output
        c = json.loads(r.output)["counters"]
        assert (c["unique_read_bytes"], c["unique_write_bytes"]) == (32768, 32768)
        r = run("profile", "oot_demo/f32_v4", "--shape", "m=8")
        assert r.exit_code == 2 and "oot_demo takes n; unknown m" in r.output
        r = run("profile", "oot_demo/f32_v4", "--shape", "n=2000000000")    # 16 GB: refused
        assert r.exit_code == 2 and "host memory" in r.output and "Traceback" not in r.output
    finally:
        unregister_family("oot_demo")
        sys.modules.pop("rocke_oot_demo", None)


def _expected_mfma(variant: str) -> int:
    """MFMA issues of the shapes below, from the problem's own routing / mask."""
    from rocke.kernels.registry import get_variant
    from rocke.kernels.samples import block_sparse_attention, moe_gemm
    spec = get_variant(variant).spec
    if variant.startswith("int8"):
        return 64 * 64 * 64 // (16 * 16 * 32)
    if variant.startswith("moe"):        # 16 tokens x top-2 = 32 routes: one 32-route block per used expert
        offsets = moe_gemm.profile_problem(spec, T=16, N=64, K=64).args[4]
        return int((offsets[1:] > offsets[:-1]).sum()) * 32 * 64 * 64 // 16 ** 3
    mask = block_sparse_attention.profile_problem(spec, B=1, H=1, S=128).args[4]
    return int(mask.sum()) * 2 * 64 * 64 * 64 // 16 ** 3      # S^T and O^T per kept 64 x 64 block


@pytest.mark.parametrize("variant, shape, atom", [
    ("int8_gemm/i8_16x16x32", "M=64,N=64,K=64", "v_mfma_i32_16x16x32_i8"),
    ("moe_gemm/bf16_16x16x16", "T=16,N=64,K=64", "v_mfma_f32_16x16x16_bf16"),
    ("block_sparse_attention/f16_d64", "B=1,H=1,S=128", "v_mfma_f32_16x16x16_f16"),
])
def test_the_issue_40_samples_declare_their_problems(variant, shape, atom):
    """The samples registered as families declare their problems (profile_problem): `rocke
    profile` runs them, the MoE skipping unused experts, the block-sparse kernel masked blocks."""
    r = run("profile", variant, "--shape", shape, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["counters"]["mfma_by_atom"] == {atom: _expected_mfma(variant)}
    assert out["model"]["tflops"] > 0
    # each was bound by latency with a wait right after a tile load: the advice names that
    # load's line in the builder (the int8 GEMM's main loop is the gemm sample's)
    from rocke.kernels.registry import get_variant
    from rocke.kernels.samples import gemm
    module = gemm if variant.startswith("int8") else sys.modules[get_variant(variant).builder.__module__]
    assert out["model"]["binding"] == "compute (latency)"
    assert any(a["kind"] == "latency" and a["where"].startswith(f"{module.__file__}:")
               for a in out["advice"]), out["advice"]
    r = run("profile", variant, "--shape", "Z=1")
    assert r.exit_code == 2 and "unknown Z" in r.output
