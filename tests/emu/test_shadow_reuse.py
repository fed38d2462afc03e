"""The rollback copies' memory is kept between launches (launch._Shadow.release): a failed
launch must still restore every argument from a reused buffer, whatever an earlier launch left
in it, and no more than SPARE_SHADOW_BYTES are kept."""
import importlib

import pytest
import torch

from rocke.emu.errors import MemoryFault

from .test_triton_kernels import cdiv, generator, launch_fixture

launch_module = importlib.import_module("rocke.emu.launch")


def axpy(n, x, y, out):
    return launch_fixture("axpy_f32", (cdiv(n, 1024), 1, 1), x_ptr=x, y_ptr=y, out_ptr=out,
                          alpha=0.75, n_elements=n)


@pytest.fixture
def serial(monkeypatch):
    monkeypatch.setenv("ROCKE_EMU_WORKERS", "1")
    monkeypatch.setattr(launch_module, "_SPARE_SHADOWS", [])
    return monkeypatch


def test_a_failed_launch_restores_from_a_reused_dirty_buffer(serial):
    # 200 workgroups = 800 waves: two pools; the second one's last workgroup reads past x and
    # faults after the first pool stored its 128 Ki outputs
    n = 199 * 1024 + 512
    rng = generator(5)
    x, y = torch.randn(n, generator=rng), torch.randn(n, generator=rng)
    out = torch.full((n,), 7.0)
    axpy(n, x, y, out)
    torch.testing.assert_close(out, 0.75 * x + y)   # fused: an ulp from torch's two roundings
    first = out.clone()
    spares = launch_module._SPARE_SHADOWS
    # one per argument the kernel may write (this fixture's metadata marks none read-only)
    assert len(spares) == 3 and all(b.size >= out.numel() * 4 for b in spares)
    kept = list(spares)
    for buffer in kept:
        buffer.fill(0xAB)                  # what an earlier launch's copy may have left
    out.fill_(7.0)
    with pytest.raises(MemoryFault, match=r"workgroup \(199, 0, 0\)"):
        axpy(200 * 1024, x, y, out)
    assert torch.all(out == 7.0), "the failed launch was not rolled back"
    assert not any(b is k for b in spares for k in kept), "the launch did not use the kept buffers"
    axpy(n, x, y, out)                     # a fresh buffer again, kept again
    assert torch.equal(out, first)
    assert len(spares) == 3


def test_no_more_than_the_limit_is_kept(serial):
    serial.setattr(launch_module, "SPARE_SHADOW_BYTES", 1024)
    x, y, out = torch.ones(4096), torch.ones(4096), torch.zeros(4096)
    axpy(4096, x, y, out)
    assert torch.all(out == 1.75)
    assert launch_module._SPARE_SHADOWS == []
