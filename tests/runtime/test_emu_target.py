"""ROCKE_DEVICE=emu:gfx950: the runtime's emulator device runs as gfx950 and, like a GPU, will not
run code built for another processor; a rocke-compiled gfx950 kernel runs from its proven listing."""
import pytest
import torch

from rocke import runtime
from tests.doubling_kernel import doubling_kernel


def test_emu_gfx950_device(monkeypatch):
    runtime.reset_devices()
    monkeypatch.setenv("ROCKE_DEVICE", "emu:gfx950")
    device = runtime.get_device()
    assert device.kind == "emu" and device.emu_target == "gfx950"
    assert device.arch.startswith("gfx950")
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    assert runtime.get_device().emu_target == "gfx942"
    assert runtime.get_device() is not device
    runtime.reset_devices()


def test_emu_gfx950_device_refuses_gfx942_code(monkeypatch, vector_add):
    _variant, ck = vector_add
    a, c = torch.ones(256), torch.zeros(256)
    runtime.reset_devices()
    monkeypatch.setenv("ROCKE_DEVICE", "emu:gfx950")
    try:
        with pytest.raises(ValueError, match="built for gfx942 and cannot run on the emulator as gfx950"):
            runtime.launch(ck, 1, 256, [a, a, c, 256])
        assert not c.any()
        monkeypatch.setenv("ROCKE_DEVICE", "emu")
        runtime.launch(ck, 1, 256, [a, a, c, 256])
        assert torch.equal(c, 2 * a)
    finally:
        runtime.reset_devices()


# --- gfx950 kernels through rocke.runtime: no llvm-objdump here knows gfx950 (Debian's LLVM 19),
# so a rocke-compiled kernel runs from its listing once a rebuild of its IR proves it.

def _doubler_gfx950():
    from rocke.compiler import compile_ir
    return compile_ir(doubling_kernel("double_gfx950", "gfx950"), target="gfx950")


def _launch_on_gfx950(monkeypatch, ck, x):
    runtime.reset_devices()
    monkeypatch.setenv("ROCKE_DEVICE", "emu:gfx950")
    try:
        return runtime.launch(ck, 1, 64, [x, 64])
    finally:
        runtime.reset_devices()


def test_a_rocke_compiled_gfx950_kernel_runs_through_the_runtime(monkeypatch):
    ck = _doubler_gfx950()
    assert ck.target.startswith("gfx950")
    x = torch.arange(64, dtype=torch.float32)
    _launch_on_gfx950(monkeypatch, ck, x)
    assert torch.equal(x, 2 * torch.arange(64, dtype=torch.float32))


def test_a_forged_gfx950_listing_is_refused_before_launch(monkeypatch):
    import dataclasses
    from rocke.emu.codeobject import disassembler
    ck = _doubler_gfx950()
    assert "v_add_f32_e32 v1, v1, v1" in ck.asm                 # x + x
    forged = dataclasses.replace(ck, asm=ck.asm.replace("v_add_f32_e32 v1, v1, v1", "v_sub_f32_e32 v1, v1, v1"))
    x = torch.full((64,), 3.0)
    if disassembler("gfx950") is None:       # Debian bookworm: the listing cannot be trusted, nor the code disassembled
        with pytest.raises(ValueError, match="no assembly listing proven.*cannot disassemble a gfx950 code object"):
            _launch_on_gfx950(monkeypatch, forged, x)
        assert torch.equal(x, torch.full((64,), 3.0))
    else:                                    # a newer llvm-objdump: the code object runs, not the forged listing
        _launch_on_gfx950(monkeypatch, forged, x)
        assert torch.equal(x, torch.full((64,), 6.0))


def test_a_gfx950_listing_beside_another_code_object_is_not_proven():
    import dataclasses
    from rocke.runtime.emu_device import listing_proven_by_rebuild
    ck = _doubler_gfx950()
    assert listing_proven_by_rebuild(ck)
    assert not listing_proven_by_rebuild(dataclasses.replace(ck, code_object=b""))   # no code object
    assert not listing_proven_by_rebuild(dataclasses.replace(ck, ir=""))       # no IR to rebuild
    # the same kernel scaled by 3 instead of 2: the code differs in one constant
    from rocke.compiler import compile_ir
    tripler = compile_ir(doubling_kernel("double_gfx950", "gfx950", factor=3.0), target="gfx950")
    assert not listing_proven_by_rebuild(dataclasses.replace(ck, code_object=tripler.code_object))
    assert not listing_proven_by_rebuild(dataclasses.replace(tripler, asm=ck.asm))


def test_a_foreign_gfx950_code_object_without_a_listing_is_refused(monkeypatch):
    import dataclasses
    from rocke import emu
    from rocke.emu.codeobject import disassembler
    ck = _doubler_gfx950()
    foreign = dataclasses.replace(ck, asm="", ir="")
    x = torch.full((64,), 3.0)
    if disassembler("gfx950") is None:
        with pytest.raises(ValueError, match="cannot disassemble a gfx950 code object: no llvm-objdump of LLVM 20"):
            _launch_on_gfx950(monkeypatch, foreign, x)
        with pytest.raises(ValueError, match="cannot disassemble a gfx950 code object"):
            emu.launch(ck.code_object, ck.name, 1, 64, [x, 64], target="gfx950")
        assert torch.equal(x, torch.full((64,), 3.0))
    else:
        _launch_on_gfx950(monkeypatch, foreign, x)
        assert torch.equal(x, torch.full((64,), 6.0))
