"""The prebuilt bundle (`rocke aot build`): a shipped variant's first use with no linker at all,
served by IR or by spec (no IR build), and never served when anything about an entry is off."""
from __future__ import annotations

import json
import os

import pytest
import torch
from click.testing import CliRunner

from rocke import runtime
from rocke.cli import main
from rocke.compiler import DEFAULT_TARGET, ToolchainError, compile_ir, prebuilt
from rocke.kernels import golden as golden_mod
from rocke.kernels.registry import all_variants
from rocke.kernels.samples import vector_add

VARIANT = "vector_add/f32_v4"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "gfx942"
    result = CliRunner().invoke(main, ["aot", "build", "--quiet", "--out", str(out), VARIANT])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def no_linker(tmp_path, monkeypatch, bundle):
    """No ld.lld anywhere: an empty PATH, ROCKE_LD_LLD naming nothing, an empty compile cache."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("ROCKE_LD_LLD", str(tmp_path / "no" / "ld.lld"))
    monkeypatch.setenv("ROCKE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ROCKE_PREBUILT", str(bundle))
    return bundle


def _adds(ck):
    a, b, c = torch.arange(256.0), torch.ones(256), torch.zeros(256)
    runtime.launch(ck, 1, 256, [a, b, c, 256], device="emu")
    return torch.equal(c, torch.arange(256.0) + 1)


def test_first_use_needs_no_linker(no_linker):
    variant = all_variants()[VARIANT]
    with pytest.raises(ToolchainError):       # the premise: nothing here can link
        all_variants()["gemm/f16_32x32x8"].compile()
    ck = variant.compile()
    assert ck.prebuilt and ck.ir_hash == golden_mod.load_golden()[VARIANT]
    assert _adds(ck)


def test_served_by_spec_without_building_ir(no_linker, monkeypatch):
    spec = all_variants()[VARIANT].spec

    def no_build(_spec):
        raise AssertionError("the IR was built")
    monkeypatch.setattr(vector_add, "build", no_build)
    ck = prebuilt.lookup_spec(spec, golden_mod.load_golden(), DEFAULT_TARGET)
    assert ck is not None and ck.prebuilt and _adds(ck)
    stale = dict(golden_mod.load_golden(), **{VARIANT: "0" * 64})    # the golden IR moved on
    assert prebuilt.lookup_spec(spec, stale, DEFAULT_TARGET) is None


def _damaged_copy(bundle, tmp_path, damage):
    copy = tmp_path / "damaged"
    copy.mkdir()
    for f in bundle.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    damage(copy)
    return copy


def _edit_index(field, value):
    def damage(root):
        index = json.loads((root / "index.json").read_text())
        for entry in index["entries"].values():
            entry[field] = value
        (root / "index.json").write_text(json.dumps(index))
    return damage


def _flip_code_object(root):
    (hsaco,) = root.glob("*.hsaco")
    data = bytearray(hsaco.read_bytes())
    data[-1] ^= 0xFF
    hsaco.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_edit_index("ir_sha256", "1" * 64),
                                    _edit_index("llvm", "0.0.1"), _flip_code_object],
                         ids=["another IR", "another LLVM", "damaged code object"])
def test_an_entry_that_does_not_check_out_is_never_served(no_linker, tmp_path, monkeypatch,
                                                          damage):
    monkeypatch.setenv("ROCKE_PREBUILT", str(_damaged_copy(no_linker, tmp_path, damage)))
    variant = all_variants()[VARIANT]
    with pytest.raises(ToolchainError):       # not served, so it had to be linked
        variant.compile()
    spec_hit = prebuilt.lookup_spec(variant.spec, golden_mod.load_golden(), DEFAULT_TARGET)
    assert spec_hit is None


def test_aot_build_refuses_a_variant_whose_ir_left_the_golden_table(tmp_path, monkeypatch):
    table = dict(golden_mod.load_golden(), **{VARIANT: "2" * 64})
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(table))
    monkeypatch.setattr(golden_mod, "GOLDEN_PATH", path)
    out = tmp_path / "bundle"
    result = CliRunner().invoke(main, ["aot", "build", "--quiet", "--out", str(out), VARIANT,
                                       "softmax/f16_wave"])
    assert result.exit_code == 1
    assert f"refused (IR differs from the golden table): {VARIANT}" in result.output
    entries = json.loads((out / "index.json").read_text())["entries"].values()
    assert [e["variant"] for e in entries] == ["softmax/f16_wave"]
    assert os.stat(out).st_mode & 0o755 == 0o755


def test_aot_build_leaves_out_variants_built_for_another_processor(tmp_path):
    """The bundle is gfx942's: a gfx950 variant is left out (compiling its IR for gfx942 would
    fail or, worse, make code for the wrong processor), and said so."""
    other = next(n for n in all_variants() if n.startswith("dense_prefill_gfx950/"))
    out = tmp_path / "bundle"
    result = CliRunner().invoke(main, ["aot", "build", "--quiet", "--out", str(out), "-j", "1",
                                       other, "reduce_segments_gfx950/f16_d64_v4_early",
                                       "softmax/f16_wave"])
    assert result.exit_code == 0, result.output
    assert "2 built for another processor left out" in result.output
    entries = json.loads((out / "index.json").read_text())["entries"].values()
    assert [e["variant"] for e in entries] == ["softmax/f16_wave"]


def test_variant_compile_serves_the_bundle_without_building_ir(no_linker, monkeypatch):
    def no_build(_spec):
        raise AssertionError("the IR was built")
    monkeypatch.setattr(vector_add, "build", no_build)
    variant = all_variants()[VARIANT]
    ck = variant.compile()
    assert ck.prebuilt and ck.variant == VARIANT and _adds(ck)


def test_attention_compiled_spec_asks_the_bundle_first(no_linker, monkeypatch):
    """The attention entry point's per-spec compile takes a bundle entry by spec (no IR build);
    nothing here can link, so only the bundle can have served it."""
    from rocke.kernels.common import attention_unified as au
    from rocke.kernels.common import attention_kernels
    from rocke.kernels.common.golden_table import pinned
    assert pinned()[VARIANT] == golden_mod.load_golden()[VARIANT]
    monkeypatch.setattr(vector_add, "build", lambda _spec: (_ for _ in ()).throw(
        AssertionError("the IR was built")))
    ck = au.compiled(all_variants()[VARIANT].spec)
    assert ck.prebuilt and _adds(ck)


GUARD = "metadata_guard/t64"


def test_the_metadata_guard_is_shipped_and_served_without_a_linker(tmp_path, monkeypatch):
    """The GPU path's metadata guard is a shipped variant: golden-pinned, in the default
    `rocke aot build`, and at first use served by spec with no IR build and no linker; the
    served kernel still finds a lie (run on the emulator)."""
    import re
    from rocke.cli import _variants
    from rocke.kernels.common import attention_unified as au, metadata_guard
    from rocke.runtime.device_checks import DeviceCheckError
    assert GUARD in [v.name for v in _variants(())]           # the default build's variants
    assert all_variants()[GUARD].spec == metadata_guard.SPEC
    assert golden_mod.load_golden()[GUARD] == all_variants()[GUARD].ir_hash()
    out = tmp_path / "gfx942"
    result = CliRunner().invoke(main, ["aot", "build", "--quiet", "--out", str(out), GUARD])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("ROCKE_LD_LLD", str(tmp_path / "no" / "ld.lld"))
    monkeypatch.setenv("ROCKE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ROCKE_PREBUILT", str(out))
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    monkeypatch.setattr(metadata_guard, "build", lambda _spec: (_ for _ in ()).throw(
        AssertionError("the guard's IR was built")))
    from rocke.kernels.common import attention_kernels
    ck = attention_kernels._build_and_compile(metadata_guard.SPEC)   # what the first GPU call compiles
    assert ck.prebuilt and ck.name == metadata_guard.SPEC.kernel_name
    cu = torch.tensor([0, 1, 4], dtype=torch.int32)
    used = torch.tensor([40, 23], dtype=torch.int32)
    table = torch.tensor([[0, 1, 2], [3, -5, 4]], dtype=torch.int32)
    device = runtime.get_device("emu")
    grid, block = metadata_guard.launch_geometry(metadata_guard.SPEC, 2)
    runtime.launch(ck, grid, block, metadata_guard.kernel_args(
        cu, used, table, device.error_record(), total_q=4, num_blocks=6, block_size=16,
        causal=True, max_seqlen_q=3, max_seqlen_k=40), device=device)
    with pytest.raises(DeviceCheckError, match=re.escape(
            "block_table: sequence 1 uses block index -5 at column 1, outside the cache's [0, 6) "
            "pages")):
        runtime.check_errors("emu")
