"""The HIP device on a gfx950 GPU, beneath the stand-in libamdhip64 reporting a gfx950 (its
launches run on the emulator as gfx950): a gfx950 code object launches through hip-python; the
code object's target is read from its ELF header and a mismatch is refused before any HIP call;
the attention entry point takes the device's processor's kernels; the parity harness runs with
``--device hip --target gfx950``."""
from __future__ import annotations

import dataclasses
import struct

import pytest
import torch

from rocke import runtime
from rocke.arch.elf import code_object_target
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common import attention_kernels
from tests.hip_stub.rocm_torch import install, to_device
from tests.doubling_kernel import doubling_kernel

GFX950 = "gfx950:sramecc+:xnack-"


def _doubler(target="gfx950"):
    from rocke.compiler import compile_ir
    return compile_ir(doubling_kernel(f"double_{target}", target), target=target)


@pytest.fixture(scope="module")
def doubler_gfx950():
    return _doubler()


@pytest.fixture
def gfx950_device(standin):
    standin.arch = GFX950
    runtime.reset_devices()
    return standin


def test_the_elf_header_names_the_code_objects_target(doubler_gfx950, vector_add):
    assert code_object_target(doubler_gfx950.code_object) == GFX950
    assert code_object_target(vector_add[1].code_object) == "gfx942:sramecc+:xnack-"
    image = bytearray(doubler_gfx950.code_object)
    flags, = struct.unpack_from("<I", image, 48)
    struct.pack_into("<I", image, 48, (flags & ~0xF00) | 0x100)    # xnack any, sramecc unsupported
    assert code_object_target(bytes(image)) == "gfx950"
    struct.pack_into("<I", image, 48, (flags & ~0xFF) | 0x040)     # gfx1030
    with pytest.raises(ValueError, match=r"e_flags processor 0x040 is not one rocke builds for"):
        code_object_target(bytes(image))
    with pytest.raises(ValueError, match="not a little-endian ELF64"):
        code_object_target(b"\x7fELF" + bytes(60))


def test_a_gfx950_code_object_launches_through_hip_python(gfx950_device, doubler_gfx950):
    gfx950_device.register(doubler_gfx950)
    dev = runtime.get_device("hip")
    assert dev.arch == GFX950
    x = torch.arange(64, dtype=torch.float32)
    dx = dev.alloc(256).copy_from(x)
    assert runtime.launch(doubler_gfx950, 1, 64, [dx, 64], device="hip") is None
    assert gfx950_device.errors == []
    assert torch.equal(dx.copy_to(torch.empty(64)), 2 * x)
    assert gfx950_device.calls.get("module_load") == 1 and len(gfx950_device.executed) == 1


def test_gfx942_code_on_a_gfx950_device_is_refused_before_any_hip_call(gfx950_device, vector_add):
    _variant, ck = vector_add
    gfx950_device.register(ck)
    dev = runtime.get_device("hip")
    buf = dev.alloc(1024)
    with pytest.raises(ValueError, match=r"vector_add/f32_v4: its code object is built for "
                                         r"gfx942:sramecc\+:xnack- and cannot load on HIP "
                                         r"device 0, a gfx950:sramecc\+:xnack-"):
        runtime.launch(ck, 1, 256, [buf, buf, buf, 256], device="hip")
    assert "module_load" not in gfx950_device.calls and "launch" not in gfx950_device.calls


def test_gfx950_code_on_a_gfx942_device_is_refused_before_any_hip_call(standin, doubler_gfx950):
    standin.register(doubler_gfx950)
    buf = runtime.get_device("hip").alloc(256)
    with pytest.raises(ValueError, match=r"built for gfx950:sramecc\+:xnack- and cannot load on "
                                         r"HIP device 0, a gfx942"):
        runtime.launch(doubler_gfx950, 1, 64, [buf, 64], device="hip")
    assert "module_load" not in standin.calls


def test_the_elf_header_decides_not_the_compiled_kernels_label(gfx950_device, vector_add):
    """A gfx942 code object labelled gfx950 is still refused on the gfx950 device: its ELF
    header says what it is."""
    _variant, ck = vector_add
    relabelled = dataclasses.replace(ck, target=GFX950)
    gfx950_device.register(relabelled)
    buf = runtime.get_device("hip").alloc(1024)
    with pytest.raises(ValueError, match=r"ELF header names gfx942:sramecc\+:xnack-, but it was "
                                         r"compiled for gfx950"):
        runtime.launch(relabelled, 1, 256, [buf, buf, buf, 256], device="hip")
    assert "module_load" not in gfx950_device.calls


def test_the_stand_in_itself_refuses_a_foreign_image(gfx950_device, vector_add):
    """Beneath rocke's check, the stand-in refuses like a runtime would (hipErrorNoBinaryForGpu)."""
    from rocke.runtime.hip_device import HipError, _call
    _variant, ck = vector_add
    gfx950_device.register(ck)
    runtime.get_device("hip")
    with pytest.raises(HipError, match="hipErrorNoBinaryForGpu"):
        _call("hipModuleLoadData", ck.code_object)


def test_a_gfx950_gpu_is_the_default_device(gfx950_device, monkeypatch):
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    assert runtime.default_device_kind() == "hip"
    gfx950_device.arch = "gfx90a:sramecc+:xnack-"
    runtime.reset_devices()
    assert runtime.default_device_kind() == "emu"


def _attention_problem():
    import math
    from tests.kernels.test_attention_2d import make_problem
    q, k, v, table, cu, seqused = make_problem("f16", 64, 16, 2, [1, 3], [40, 23],
                                               num_kv_heads=1, seed=0)
    return dict(q=q, k=k, v=v, out=torch.zeros_like(q), cu_seqlens_q=cu, max_seqlen_q=3,
                seqused_k=seqused, max_seqlen_k=40, softmax_scale=1 / math.sqrt(64),
                causal=True, window_size=(-1, -1), block_table=table, softcap=0.0,
                q_descale=None, k_descale=None, v_descale=None)


def test_attention_on_a_gfx950_gpu_takes_gfx950_kernels(gfx950_device, monkeypatch):
    from rocke.kernels.common.attention_reference import ref_paged_attn
    from rocke.kernels.common.tolerances import attention_atol
    stream = install(gfx950_device, monkeypatch.setattr)
    monkeypatch.setenv("HIPDNN_GFX942_2D_GRAPH", "0")
    au.GRAPHS.clear()
    real_compiled = au.compiled
    built = []

    def compiled(spec):
        ck = real_compiled(spec)
        built.append(ck.target)
        gfx950_device.register(ck)
        return ck
    monkeypatch.setattr(attention_kernels, "compiled", compiled)
    a = _attention_problem()
    g = dict(a)
    for name in ("q", "k", "v", "out", "cu_seqlens_q", "seqused_k", "block_table"):
        g[name] = to_device(gfx950_device, a[name])
    au.run_unified_attention_torch(**g, backend="2d")
    assert gfx950_device.errors == []
    assert built and all(t.startswith("gfx950") for t in built)
    assert all(r.stream == stream for r in gfx950_device.executed)
    got = torch.Tensor.as_subclass(g["out"], torch.Tensor).clone().float()
    want = ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                          a["block_table"], a["softmax_scale"], causal=True)
    torch.testing.assert_close(got, want, atol=attention_atol("f16"), rtol=0)


# ------------------------------------------------------------------------------ the harness

def _harness_on_standin(standin, monkeypatch, argv, tmp_path):
    import json
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import parity_unified_attention
    install(standin, monkeypatch.setattr)
    monkeypatch.setenv("HIPDNN_GFX942_2D_GRAPH", "0")
    monkeypatch.setenv("HIPDNN_GFX942_3D_GRAPH", "0")
    au.GRAPHS.clear()
    real_to, real_compiled = torch.Tensor.to, au.compiled

    def to(self, *args, **kwargs):
        if args and isinstance(args[0], (str, torch.device)) and torch.device(args[0]).type == "cuda":
            return to_device(standin, self)
        return real_to(self, *args, **kwargs)

    def compiled(spec):               # the stand-in's device accepts what rocke compiled
        ck = real_compiled(spec)
        standin.register(ck)
        return ck
    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(attention_kernels, "compiled", compiled)
    monkeypatch.setenv("ROCKE_DEVICE", "hip")     # the harness sets it; undone after the test
    report = tmp_path / "parity.json"
    code = parity_unified_attention.main(argv + ["--report", str(report)])
    return code, (json.loads(report.read_text()) if report.exists() else None)


def test_the_parity_harness_runs_gfx950_kernels_through_hip(gfx950_device, monkeypatch,
                                                             tmp_path):
    """`parity_unified_attention.py --device hip --target gfx950` at its smallest setting, on a
    gfx950 stand-in GPU: gfx950 kernels, launched through hip-python, pass against the CPU
    reference."""
    ran = len(gfx950_device.executed)
    code, data = _harness_on_standin(
        gfx950_device, monkeypatch,
        ["--device", "hip", "--target", "gfx950", "--scenario", "fp16_h8kv2_b4_s3x3_d128",
         "--max-kv", "64", "--attempts", "0", "--warmup", "0"], tmp_path)
    assert code == 0, data
    assert data["device"] == "hip" and data["target"] == "gfx950"
    assert [r["status"] for r in data["results"]] == ["PASS"] * 3
    launched = gfx950_device.executed[ran:]
    assert launched and gfx950_device.errors == []
    names = {gfx950_device.functions[r.function].name for r in launched}
    assert any("gfx950" in n for n in names), names     # gfx950's attention kernels ran


def test_the_harness_refuses_a_target_the_gpu_does_not_run(gfx950_device, monkeypatch, tmp_path,
                                                          capsys):
    with pytest.raises(SystemExit) as exc:
        _harness_on_standin(gfx950_device, monkeypatch,
                            ["--device", "hip", "--target", "gfx942", "--scenario",
                             "fp16_h8kv2_b4_s3x3_d128", "--max-kv", "64"], tmp_path)
    assert exc.value.code == 2
    assert ("--target gfx942: HIP device 0 is a gfx950:sramecc+:xnack-, which runs gfx950 code "
            "objects only") in capsys.readouterr().err
    assert "module_load" not in gfx950_device.calls and "launch" not in gfx950_device.calls
