"""The torch backend's fused Triton kernels on CUDA (rocke/emu/torch_triton_kernels.py): the
dense MFMAs and the LDS reads and writes.

On a GPU each kernel must write the bits the torch operations it replaces write (those hold to
numpy's: test_torch_backend), for operands of every kind, lanes off, a batch that is a list of
waves, and inside a captured CUDA graph. Without a GPU (CI) the CUDA cases skip; which path an
instruction takes is checked here anyway."""
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rocke.emu import mfma as emu_mfma  # noqa: E402
from rocke.emu import torch_exec, torch_triton_kernels  # noqa: E402
from rocke.emu.operands import Operand  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU (CI has none)")
MFMAS = sorted(name for name, op in emu_mfma.MFMA_OPS.items()
               if getattr(op, "a_format", None) in ("f16", "bf16"))


class _Pool:
    """What the closures ask of a pool: VGPRs, LDS, a batch and its EXEC."""

    def __init__(self, tv, tl=None, exec_mask=None, lds_bytes=0):
        self.tv, self.tl, self.torch = tv, (tv if tl is None else tl), torch
        self.exec_mask = exec_mask
        self.stretches, self.check, self.shares_numpy = None, False, False
        self.lds_bytes = lds_bytes

    def tsel(self, sel):
        if isinstance(sel, slice):
            return sel
        return torch.as_tensor(np.asarray(sel), dtype=torch.int64, device=self.tv.device)

    def tmask(self, sel):
        n = self.tv[self.tsel(sel)].shape[0]
        if self.exec_mask is None:      # no device read: a graph capture may ask
            return torch.ones((n, 64), dtype=torch.bool, device=self.tv.device), True, n * 64
        return self.exec_mask, bool(self.exec_mask.all()), int(self.exec_mask.sum())

    def write_rows(self, sel, row, count, values, full, mask=None):
        ts = self.tsel(sel)
        mask = (self.tmask(sel)[0] if mask is None else mask)[:, None, :]
        old = self.tv[ts, row:row + count]
        self.tv[ts, row:row + count] = values if full else torch.where(mask, values, old)


def _words(rng, shape, specials=True):
    """int32 words: 16-bit halves of every kind (NaNs, infinities, subnormals, zeros of both
    signs) and float32 words of every kind."""
    words = rng.integers(0, 2 ** 32, size=shape, dtype=np.uint64).astype(np.uint32)
    if specials:
        halves = words.view(np.uint16).reshape(-1)
        pick = rng.random(halves.size)
        halves[pick < 0.05] = 0x7C00      # f16 infinity
        halves[(pick >= 0.05) & (pick < 0.10)] = 0x8000
        halves[(pick >= 0.10) & (pick < 0.15)] = 0x0001
    return torch.from_numpy(words.view(np.int32))


def _mfma_run(name, d_row_is_c):
    op = emu_mfma.MFMA_OPS[name]
    na, nb, nc = op.a_regs, op.b_regs, op.c_regs
    c = na + nb
    d = c if d_row_is_c else c + nc
    ops = [Operand("v", d, nc), Operand("v", 0, na), Operand("v", na, nb), Operand("v", c, nc)]
    run = torch_exec._decode_mfma(SimpleNamespace(mnemonic=name), ops, {}, emu_mfma.MFMA_OPS)
    return run, na + nb + 2 * nc


@CUDA
@pytest.mark.parametrize("d_is_c", [False, True], ids=["d_apart", "d_is_c"])
@pytest.mark.parametrize("name", MFMAS)
def test_fused_mfma_writes_the_torch_operations_bits(name, d_is_c, monkeypatch):
    """Random operand words (specials included), some lanes off, the batch a list of waves:
    the fused kernel and the torch operations write the same registers, bit for bit (a NaN's
    payload aside: which of two NaNs meeting in a sum survives differs between numpy and the
    torch operations too, test_torch_backend)."""
    rng = np.random.default_rng(len(name) + d_is_c)
    run, regs = _mfma_run(name, d_is_c)
    waves = 24
    tv = _words(rng, (waves, regs, 64)).cuda()
    exec_mask = torch.from_numpy(rng.random((9, 64)) < 0.7).cuda()
    batch = np.sort(rng.choice(waves, 9, replace=False))
    results = []
    for fused in (True, False):
        monkeypatch.setattr(torch_triton_kernels, "enabled", lambda x, on=fused: on)
        for sel, mask in ((slice(0, waves), None), (batch, exec_mask)):
            pool = _Pool(tv.clone(), exec_mask=mask)
            run(pool, sel, pool.tv[pool.tsel(sel)].shape[0])
            results.append(pool.tv.cpu())
    for fused, ops in zip(results[:2], results[2:]):
        fused_nan, ops_nan = torch.isnan(fused.view(torch.float32)), \
            torch.isnan(ops.view(torch.float32))
        assert torch.equal(fused_nan, ops_nan), name
        assert torch.equal(fused[~fused_nan], ops[~ops_nan]), name
    assert not torch.equal(results[0], tv.cpu())     # D was written


def _lds_case(rng, nbytes, waves=12, lds_bytes=4096):
    tv = _words(rng, (waves, 8, 64), specials=False).cuda()
    tl = torch.from_numpy(rng.integers(0, 256, lds_bytes + 16, dtype=np.uint8)).cuda()
    flat = torch.from_numpy(rng.integers(0, lds_bytes - nbytes, (waves, 64))).cuda()
    flat[0, 5] = lds_bytes      # the sink past the pool's LDS, where lanes off point
    return tv, tl, flat


@CUDA
@pytest.mark.parametrize("nbytes, how", [(16, "full"), (12, "full"), (8, "full"), (4, "full"),
                                         (2, "u16"), (1, "u8")])
def test_fused_lds_read_moves_the_bytes_the_gather_moves(nbytes, how, monkeypatch):
    """Unaligned byte addresses, some lanes off, whole-pool and listed batches: the fused read
    and the torch gather write the same registers."""
    rng = np.random.default_rng(nbytes)
    tv, tl, flat = _lds_case(rng, nbytes)
    mask = torch.from_numpy(rng.random((12, 64)) < 0.6).cuda()
    batch = np.array([1, 4, 5, 11])
    results = []
    for fused in (True, False):
        monkeypatch.setattr(torch_triton_kernels, "enabled", lambda x, on=fused: on)
        for sel, lanes_on in ((slice(0, 12), None), (batch, mask[:4])):
            pool = _Pool(tv.clone(), tl, exec_mask=lanes_on, lds_bytes=4096)
            n = pool.tv[pool.tsel(sel)].shape[0]
            full = lanes_on is None
            pool.lds_on_device = lambda ins, sel, row, offset, nb, f=flat[:n]: f
            assert torch_exec._ds_read_on_device(pool, None, sel, n, 0, [(0, nbytes, how, 2)],
                                                 full)
            results.append(pool.tv.cpu())
    for fused, ops in zip(results[:2], results[2:]):
        assert torch.equal(fused, ops), (nbytes, how)


@CUDA
@pytest.mark.parametrize("nbytes, how", [(16, "full"), (8, "full"), (4, "full"), (2, "low"),
                                         (1, "low"), (2, "hi"), (1, "hi")])
def test_fused_lds_write_moves_the_bytes_the_scatter_moves(nbytes, how, monkeypatch):
    """Distinct lanes' byte ranges (no two lanes write one byte: which would win is not fixed
    on a GPU either way), listed batches: the fused write and the torch scatter leave the same
    LDS."""
    rng = np.random.default_rng(nbytes + len(how))
    tv, tl, _ = _lds_case(rng, nbytes, lds_bytes=16384)
    slots = rng.permutation(16384 // 16)[:12 * 64].reshape(12, 64)
    flat = torch.from_numpy(slots * 16 + rng.integers(0, 16 - nbytes + 1, (12, 64))).cuda()
    batch = np.array([0, 3, 7])
    results = []
    for fused in (True, False):
        monkeypatch.setattr(torch_triton_kernels, "enabled", lambda x, on=fused: on)
        for sel in (slice(0, 12), batch):
            pool = _Pool(tv, tl.clone(), lds_bytes=16384)
            n = pool.tv[pool.tsel(sel)].shape[0]
            pool.lds_on_device = lambda ins, sel, row, offset, nb, f=flat[:n]: f
            assert torch_exec._ds_write_on_device(pool, None, sel, 0, [(0, nbytes, how, 3)])
            results.append(pool.tl.cpu())
    for fused, ops in zip(results[:2], results[2:]):
        assert torch.equal(fused, ops), (nbytes, how)


@CUDA
def test_fused_kernels_replay_in_a_captured_graph():
    """Warmed at their first eager launch, the kernels capture and replay (new operands in the
    same tensors give the new results)."""
    rng = np.random.default_rng(3)
    run, regs = _mfma_run("v_mfma_f32_32x32x8_f16", False)
    tv = _words(rng, (8, regs, 64)).cuda()
    pool = _Pool(tv)
    run(pool, slice(0, 8), 8)               # eager: compiles and warms every variant
    fresh = _words(rng, (8, regs, 64)).cuda()
    want = _Pool(fresh.clone())
    run(want, slice(0, 8), 8)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin()
        run(pool, slice(0, 8), 8)
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    tv.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(tv, want.tv)


def test_mfma_takes_the_fused_kernel_only_where_d_does_not_overlap_its_sources(monkeypatch):
    """Checked without a GPU: where the kernels are enabled an MFMA runs the fused kernel unless
    D overlaps A, B, or C without being C (the kernel's programs would read what others wrote)."""
    calls = []
    monkeypatch.setattr(torch_triton_kernels, "enabled", lambda x: True)
    monkeypatch.setattr(torch_triton_kernels, "mfma", lambda *args: calls.append(args[4]))
    name = "v_mfma_f32_16x16x16_f16"      # A 2 registers, B 2, C/D 4
    cases = {(8, 0, 2, 4): True, (4, 0, 2, 4): True, (5, 0, 2, 4): False, (2, 0, 4, 8): False,
             (0, 2, 6, 8): False, (0, 4, 6, 8): True}
    for (d, a, b, c), fused in cases.items():
        ops = [Operand("v", d, 4), Operand("v", a, 2), Operand("v", b, 2), Operand("v", c, 4)]
        run = torch_exec._decode_mfma(SimpleNamespace(mnemonic=name), ops, {}, emu_mfma.MFMA_OPS)
        pool = _Pool(torch.zeros((2, 16, 64), dtype=torch.int32))
        before = len(calls)
        if fused:
            run(pool, slice(0, 2), 2)
            assert len(calls) == before + 1 and calls[-1] == (a, b, c, d), (d, a, b, c)
        else:
            run(pool, slice(0, 2), 2)      # the torch operations, on the CPU
            assert len(calls) == before, (d, a, b, c)


def test_cpu_tensors_never_use_the_fused_kernels(monkeypatch):
    monkeypatch.setenv("ROCKE_EMU_CUDA_KERNELS", "1")
    assert not torch_triton_kernels.enabled(torch.zeros(4))


def test_mfma_tables_index_each_d_elements_own_terms():
    """For a D element, term k's A half is the A map's (block, row, k) and its B half the B
    map's (block, k, column), the row and column being those of the product the D map names
    (checked against the maps, on a 16x16x16 op: 4 D registers, K = 16)."""
    op = emu_mfma.MFMA_OPS["v_mfma_f32_16x16x16_f16"]
    a_map, b_map, d_map = op.layout_maps()
    tables = torch_triton_kernels.MfmaTables(a_map, b_map, d_map, op.m, op.n)
    assert tables.a.shape == tables.b.shape == (16, 4 * 64)
    for e in (0, 1, 63, 64, 200, 255):
        block, rest = divmod(int(d_map[e]), op.m * op.n)
        row, column = divmod(rest, op.n)
        assert list(tables.a[:, e]) == list(a_map[block, row, :])
        assert list(tables.b[:, e]) == list(b_map[block, :, column])


def test_a_kernel_that_fails_to_build_turns_the_kernels_off_and_the_torch_operations_run(
        monkeypatch):
    """Checked without a GPU: a Triton kernel whose first (scratch) launch fails writes
    nothing, turns the kernels off for the process (`unavailable` names it) and the MFMA runs
    as torch operations, with numpy's bits."""
    class Broken:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise RuntimeError("no kernel image is available")
            return launch
    monkeypatch.setattr(torch_triton_kernels, "_UNAVAILABLE", [""])
    monkeypatch.setattr(torch_triton_kernels, "_WARM", set())
    monkeypatch.setattr(torch_triton_kernels, "_kernels", lambda: {"mfma": Broken()})
    monkeypatch.setattr(torch_triton_kernels, "enabled", lambda x: True)
    name = "v_mfma_f32_16x16x16_f16"
    op = emu_mfma.MFMA_OPS[name]
    run, regs = _mfma_run(name, False)
    rng = np.random.default_rng(9)
    a = rng.integers(0, 0x3C00, (2, 2, 64), dtype=np.uint32) | \
        (rng.integers(0, 0x3C00, (2, 2, 64), dtype=np.uint32) << 16)
    b = rng.integers(0, 0x3C00, (2, 2, 64), dtype=np.uint32) | \
        (rng.integers(0, 0x3C00, (2, 2, 64), dtype=np.uint32) << 16)
    c = rng.standard_normal((2, 4, 64)).astype(np.float32)
    tv = torch.from_numpy(np.concatenate([a, b, c.view(np.uint32), np.zeros((2, 4, 64),
                                                                            np.uint32)], 1)
                          .view(np.int32))
    pool = _Pool(tv)
    run(pool, slice(0, 2), 2)
    assert "Triton kernel mfma failed: RuntimeError: no kernel image" in \
        torch_triton_kernels.unavailable()
    assert np.array_equal(tv[:, 8:].numpy().view(np.uint32), op.execute(a, b, c).view(np.uint32))
