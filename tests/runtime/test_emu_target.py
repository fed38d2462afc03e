"""ROCKE_DEVICE=emu:gfx950: the runtime's emulator device runs as gfx950 and, like a GPU, will not
run code built for another processor (rocke's kernels are gfx942 builds today)."""
import pytest
import torch

from rocke import runtime


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
