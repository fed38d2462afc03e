"""A finished pool's register files, LDS and LDS writer marks serve the next pool of the process
(machine.Pool.release): the next pool must see them zeroed, as fresh ones, and no more than
SPARE_BYTES are kept."""
import numpy as np
import torch

from rocke.emu import machine
from rocke.emu.launch import _program
from rocke.emu.memory import GlobalMemory
from rocke.emu.program import decode_kernel

from .test_triton_kernels import cdiv, generator, launch_fixture, load_fixture


def softmax_kernel():
    info, asm = load_fixture("softmax_rows_f32")
    program, _ = _program(asm)
    return decode_kernel(program, program.kernels[info["kernel_symbol"]])


def new_pool(dk, lds_bytes=1024):
    return machine.Pool(dk, GlobalMemory(), np.zeros((2, 3), np.int64), (256, 1, 1), lds_bytes,
                        True)


def test_a_released_pools_arrays_come_back_zeroed(monkeypatch):
    monkeypatch.setattr(machine, "_SPARE_ARRAYS", {})
    dk = softmax_kernel()
    first = new_pool(dk)
    arrays = [first.sgpr, first.vgpr, first.lds, first.race.writer, first.race.initialised]
    for array in arrays:
        array.fill(0x5A)                       # what a kernel leaves behind
    first.release()
    second = new_pool(dk)
    again = [second.sgpr, second.vgpr, second.lds, second.race.writer, second.race.initialised]
    # arrays of one shape may come back in another role (LDS, the writer and initialised marks)
    assert {id(a) for a in arrays} == {id(b) for b in again}, "the released arrays were not reused"
    assert all(not a.any() for a in again)
    assert second.sgpr64 is not None and np.shares_memory(second.sgpr64, second.sgpr)
    other = new_pool(dk, lds_bytes=2048)       # another shape: fresh arrays
    assert other.lds is not first.lds and not other.lds.any()


def test_no_more_than_the_limit_is_kept(monkeypatch):
    monkeypatch.setattr(machine, "_SPARE_ARRAYS", {})
    monkeypatch.setattr(machine, "SPARE_BYTES", 4096)
    pool = new_pool(softmax_kernel())
    pool.release()
    kept = sum(a.nbytes for spares in machine._SPARE_ARRAYS.values() for a in spares)
    assert 0 < kept <= 4096


def test_launches_reusing_pools_match_fresh_ones(monkeypatch):
    # 300 workgroups of 4 waves: three pools a launch, the later ones on reused arrays
    rows, cols = 300, 256
    x = 4 * torch.randn(rows, cols, generator=generator(3))
    monkeypatch.setattr(machine, "SPARE_BYTES", 0)
    fresh = torch.empty(rows, cols)
    launch_fixture("softmax_rows_f32", (rows, 1, 1), in_ptr=x, out_ptr=fresh,
                   in_row_stride=cols, out_row_stride=cols, n_cols=cols)
    monkeypatch.undo()
    for _ in range(2):
        reused = torch.full((rows, cols), 7.0)
        launch_fixture("softmax_rows_f32", (rows, 1, 1), in_ptr=x, out_ptr=reused,
                       in_row_stride=cols, out_row_stride=cols, n_cols=cols)
        assert torch.equal(reused, fresh)
