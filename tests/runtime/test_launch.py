"""The shared pre-launch path and the emulator device."""
from __future__ import annotations

import pytest
import torch

from rocke import runtime
from rocke.arch import abi
from rocke.emu import LaunchReport
from rocke.runtime import device as device_module


def test_launch_on_the_emulator_returns_its_report(vector_add):
    _variant, ck = vector_add
    a, b, c = torch.arange(300.0), torch.ones(300), torch.zeros(300)
    report = runtime.launch(ck, (1,), (256,), [a, b, c, 300], device="emu")
    assert isinstance(report, LaunchReport) and report.workgroups == 1
    assert torch.equal(c, a + 1)


def test_prepared_kernarg_is_the_abi_packing(vector_add):
    _variant, ck = vector_add
    a = torch.zeros(64)
    prepared = runtime.prepare_launch(ck, (2, 1), 256, [a, a, a, 64])
    assert prepared.grid == (2, 1, 1) and prepared.block == (256, 1, 1)
    expected = abi.pack_kernarg_segment(ck.info.args, [a, a, a, 64], (2, 1, 1), (256, 1, 1), 0,
                                        lambda t: t.data_ptr(), ck.info.kernarg_size)
    assert prepared.kernarg == expected
    assert prepared.kernarg[:8] == a.data_ptr().to_bytes(8, "little")


@pytest.mark.parametrize("grid, block, shared, message", [
    ((0, 1, 1), 256, 0, "zero or negative"),
    ((1, -2, 1), 256, 0, "zero or negative"),
    ((1, 1, 1, 1), 256, 0, "1-3 dimensions"),
    ("x", 256, 0, "grid must be an int or a tuple of 1-3 ints"),
    ((2.5, 1), 256, 0, "grid must be an int or a tuple of 1-3 ints"),
    (1, (True,), 0, "block must be an int or a tuple of 1-3 ints"),
    (1, (256, 2, 1), 0, "maximum workgroup size"),
    (1, 256, -1, "shared_mem must be a non-negative int"),
    (1, 256, 1.5, "shared_mem must be a non-negative int"),
])
def test_bad_geometry_is_refused_before_anything_runs(vector_add, grid, block, shared, message):
    _variant, ck = vector_add
    c = torch.zeros(256)
    with pytest.raises(ValueError, match=message):
        runtime.launch(ck, grid, block, [c, c, c, 256], shared_mem=shared, device="emu")
    assert not c.any()


def test_bad_arguments_are_refused_before_anything_runs(vector_add):
    _variant, ck = vector_add
    c = torch.zeros(256)
    with pytest.raises(ValueError, match="is a pointer"):
        runtime.launch(ck, 1, 256, [c, 3, c, 256], device="emu")
    with pytest.raises(ValueError, match="does not fit in 4 bytes"):
        runtime.launch(ck, 1, 256, [c, c, c, 1 << 40], device="emu")
    with pytest.raises(ValueError, match="list or tuple"):
        runtime.launch(ck, 1, 256, {"a": c}, device="emu")
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        runtime.launch(ck, 1, 256, [c, c, c, 256], device="cuda")
    assert not c.any()


def test_the_signature_check_hook_sees_every_launch(vector_add, monkeypatch):
    """The one call site that helper host-rel's check_launch_args fills at merge."""
    _variant, ck = vector_add
    seen = []

    def check_launch_args(compiled, grid, block, args):
        seen.append((compiled.name, grid, block))
        return [args[0], args[1], args[2], int(args[3])]       # converts, as the real one may

    monkeypatch.setattr(device_module, "_check_launch_args", check_launch_args)
    a, c = torch.ones(256), torch.zeros(256)
    runtime.launch(ck, 1, 256, [a, a, c, 256.0], device="emu")
    assert seen == [(ck.name, (1, 1, 1), (256, 1, 1))]
    assert torch.equal(c, 2 * a)


def test_emulator_is_the_default_without_a_gpu(monkeypatch):
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    runtime.reset_devices()
    assert runtime.get_device().kind == "emu"     # no gfx942 here: hip-python finds none
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    assert runtime.get_device() is runtime.get_device("emu")
