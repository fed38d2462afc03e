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
    ((0, 1, 1), 256, 0, r"grid dimension 0 is outside \[1, "),
    ((1, -2, 1), 256, 0, r"grid dimension -2 is outside \[1, "),
    ((1, 1, 1, 1), 256, 0, "grid must be an int or 1-3 ints"),
    ("x", 256, 0, "grid dimensions must be ints"),
    ((2.5, 1), 256, 0, "grid dimensions must be ints"),
    (1, (True,), 0, "block dimensions must be ints"),
    (1, (256, 2, 1), 0, "does not match kernel .*workgroup size"),
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
    with pytest.raises(ValueError, match="outside the i32 range"):
        runtime.launch(ck, 1, 256, [c, c, c, 1 << 40], device="emu")
    with pytest.raises(ValueError, match="list or tuple"):
        runtime.launch(ck, 1, 256, {"a": c}, device="emu")
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        runtime.launch(ck, 1, 256, [c, c, c, 256], device="cuda")
    assert not c.any()


def test_every_launch_is_checked_against_the_kernel_signature(vector_add):
    """prepare_launch runs rocke.runtime.signature's check: a float for the i32 `n` is refused
    before any device work, and the output is untouched."""
    from rocke.runtime.signature import LaunchArgumentError
    _variant, ck = vector_add
    a, c = torch.ones(256), torch.zeros(256)
    with pytest.raises(LaunchArgumentError, match="int"):
        runtime.launch(ck, 1, 256, [a, a, c, 256.0], device="emu")
    assert not c.any()
    runtime.launch(ck, 1, 256, [a, a, c, 256], device="emu")
    assert torch.equal(c, 2 * a)


def test_emulator_is_the_default_without_a_gpu(monkeypatch):
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    runtime.reset_devices()
    assert runtime.get_device().kind == "emu"     # no gfx942 here: hip-python finds none
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    assert runtime.get_device() is runtime.get_device("emu")


def test_aliasing_outputs_are_refused_unless_allowed(vector_add):
    """runtime.launch forwards allow_alias to the emulator: c = a + a in place is refused by
    default (nothing written) and runs with allow_alias=True."""
    _variant, ck = vector_add
    x = torch.ones(256)
    with pytest.raises(ValueError, match="allow_alias=True"):
        runtime.launch(ck, 1, 256, [x, x, x, 256], device="emu")
    assert torch.equal(x, torch.ones(256))
    runtime.launch(ck, 1, 256, [x, x, x, 256], device="emu", allow_alias=True)
    assert torch.equal(x, torch.full((256,), 2.0))


def test_memcheck_scope_is_forwarded_to_the_emulator(vector_add):
    """runtime.launch passes memcheck to the emulator: n beyond the views but inside their
    storage faults under the default view scope and runs under allocation scope."""
    from rocke import emu
    _variant, ck = vector_add
    storage = torch.arange(1024.0)
    a, b, c = storage[:256], storage[256:512], storage[512:768]
    with pytest.raises(emu.MemoryFault, match="memcheck scope: view"):
        runtime.launch(ck, 2, 256, [a, b, c, 300], device="emu")
    assert torch.equal(storage, torch.arange(1024.0))
    runtime.launch(ck, 2, 256, [a, b, c, 300], device="emu", memcheck="allocation")
    expected = torch.arange(1024.0)
    expected[512:812] = torch.arange(300.0) + torch.arange(256.0, 556.0)
    assert torch.equal(storage, expected)
    with pytest.raises(ValueError, match="memcheck must be one of"):
        runtime.launch(ck, 1, 256, [a, b, c, 256], device="emu", memcheck="none")
