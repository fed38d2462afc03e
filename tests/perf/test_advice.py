"""Profiler advice (rocke.perf.advice): one small kernel per finding, each asserting that the
advice names the builder line behind it and the change, and that the kernel with the change
made gets no such advice (so each test fails if the finding is missed or raised blindly)."""
from pathlib import Path

import pytest
import torch

from rocke import dsl
from rocke.compiler import compile_ir
from rocke.dsl.fragment import load_fragment_global, store_fragment_global
from rocke.perf import model_time
from rocke.perf.advice import advise
from rocke.runtime import launch

HERE = Path(__file__)
SOURCE = HERE.read_text().splitlines()


def line_of(marker: str) -> str:
    """`file:line` of the one source line ending in `# <marker>`."""
    (n,) = [i + 1 for i, text in enumerate(SOURCE) if text.rstrip().endswith(f"# {marker}")]
    return f"{HERE}:{n}"


def profile(k, grid, block, args, full_grid=None):
    ck = compile_ir(k, cache=False)      # from the Kernel: the listing carries builder lines
    p = launch(ck, grid, block, args, device="emu", profile=True).profile
    model = model_time(p, grid=full_grid)
    return model, advise(p, model, grid=full_grid)


def only(advice, kind):
    return [a for a in advice if a.kind == kind]


def streaming_kernel(prefetch: bool, work: int = 300):
    """Each iteration stages a 256-element tile through LDS, then does `work` multiply-adds on
    it; without prefetch the tile's load is waited for right away."""
    k = dsl.Kernel(f"stream_{prefetch}", workgroup_size=256)  # KERNEL
    x, y, tiles = k.arg_ptr("x", "f32", readonly=True), k.arg_ptr("y", "f32"), k.arg_i32("tiles")
    tile = k.lds("tile", (256,), "f32")
    tid = k.thread_id(0)
    buf = x.buffer(tiles * 256)
    with k.for_range(0, tiles, carry=[k.const(0.0, dsl.f32), buf.load(tid)]) as loop:
        acc, current = loop.carry
        if prefetch:
            tile.store(tid, current)
            k.barrier()
            following = buf.load((loop.index + 1) * 256 + tid)     # in flight during the math
        else:
            loaded = buf.load(loop.index * 256 + tid)  # LOAD
            tile.store(tid, loaded)  # WAIT
            k.barrier()
            following = current
        a = tile.load((tid + 1) % 256)
        for _ in range(work):
            a = a * 1.0001 + 0.5
        k.barrier()
        loop.yield_(acc + a, following)
    y.store(tid, loop.results[0])
    return k


def test_exposed_latency_names_the_load_and_the_prefetch_distance():
    x, y = torch.randn(9 * 256), torch.zeros(256)
    model, advice = profile(streaming_kernel(False), (1, 1, 1), (256, 1, 1), [x, y, 8])
    assert model.binding == "compute (latency)"
    (finding,) = [a for a in only(advice, "latency") if a.where == line_of("LOAD")]
    assert f"waited for at {line_of('WAIT')}" in finding.message
    assert "prefetch distance 1" in finding.message and "uncovered" in finding.message
    fixed, after = profile(streaming_kernel(True), (1, 1, 1), (256, 1, 1), [x, y, 8])
    assert not only(after, "latency") and fixed.us < model.us


def test_too_few_waves_names_the_kernel_and_the_grid_it_needs():
    x, y = torch.randn(9 * 256), torch.zeros(256)
    _, advice = profile(streaming_kernel(True), (1, 1, 1), (256, 1, 1), [x, y, 8])
    (finding,) = only(advice, "waves")
    assert finding.where == line_of("KERNEL")
    assert "1 workgroup x 4 waves = 4 waves for 1216 SIMDs" in finding.message
    assert "at least 304 workgroups" in finding.message
    # the same profile standing for a grid of 1024 workgroups: enough waves
    _, full = profile(streaming_kernel(True), (1, 1, 1), (256, 1, 1), [x, y, 8], full_grid=(1024, 1, 1))
    assert not only(full, "waves")


def transpose_kernel(pad: int):
    k = dsl.Kernel(f"transpose_pad{pad}", workgroup_size=64)
    x, y = k.arg_ptr("x", "f32", readonly=True), k.arg_ptr("y", "f32")
    t = k.lds("t", (64, 64), "f32", pad=pad)
    tid = k.thread_id(0)
    for j in range(64):
        t.store((tid, j), x.load(j * 64 + tid))  # ROW WRITE
    k.barrier()
    for j in range(64):
        y.store(j * 64 + tid, t.load((j, tid)))
    return k


def test_lds_bank_conflicts_name_the_access_and_the_padding():
    x = torch.randn(64 * 64)
    y = torch.zeros(64 * 64)
    _, advice = profile(transpose_kernel(0), (1, 1, 1), (64, 1, 1), [x, y])
    assert torch.equal(y.view(64, 64), x.view(64, 64).t())   # the kernel transposes through LDS
    (finding,) = only(advice, "lds_conflicts")
    assert finding.where == line_of("ROW WRITE")
    assert "pad=4 for f32" in finding.message          # 16-byte row writes: pad one access width
    _, padded = profile(transpose_kernel(4), (1, 1, 1), (64, 1, 1), [x, torch.zeros(64 * 64)])
    assert not only(padded, "lds_conflicts")


def exp_kernel():
    k = dsl.Kernel("exp_chain", workgroup_size=256)
    x, y = k.arg_ptr("x", "f32", readonly=True), k.arg_ptr("y", "f32")
    i = k.block_id(0) * 256 + k.thread_id(0)
    with k.for_range(0, 32, carry=[x.load(i)]) as loop:
        (a,) = loop.carry
        loop.yield_(dsl.exp(a * 0.5) * 0.25 + dsl.exp(-a) * 0.125)  # EXP
    y.store(i, loop.results[0])
    return k


def test_valu_bound_names_the_transcendental_line():
    x, y = torch.randn(512), torch.zeros(512)
    # two emulated workgroups standing for 4096: the VALU, not one wave's latency, binds
    model, advice = profile(exp_kernel(), (2, 1, 1), (256, 1, 1), [x, y], full_grid=(4096, 1, 1))
    assert model.binding == "compute (valu)"
    (finding,) = only(advice, "valu")
    assert finding.where == line_of("EXP")
    assert "v_exp_f32" in finding.message and "exp2" in finding.message
    _, small = profile(exp_kernel(), (2, 1, 1), (256, 1, 1), [x, torch.zeros(512)])
    assert not only(small, "valu")          # latency-bound at two workgroups: no VALU advice


def mfma_kernel(accumulators: int):
    """32 steps of MFMAs on `accumulators` independent tiles; with one, its result is scaled
    right after each MFMA (a VALU read of the MFMA's result: the chain is one long)."""
    k = dsl.Kernel(f"mfma_chain{accumulators}", workgroup_size=64)
    x, y = k.arg_ptr("x", "f16", readonly=True), k.arg_ptr("y", "f32")
    mma = k.mfma("16x16x16", "f16")
    xb = x.buffer(512)
    a = load_fragment_global(xb, mma.A, (0, 0), 16)
    b = load_fragment_global(xb, mma.B, (16, 0), 16)
    with k.for_range(0, 32, carry=[mma.zeros() for _ in range(accumulators)]) as loop:
        accs = [mma(a, b, c) for c in loop.carry]  # MFMA
        if accumulators == 1:
            accs = [c * 0.5 for c in accs]
        loop.yield_(*accs)
    out = loop.results[0]
    for c in loop.results[1:]:
        out = out + c
    store_fragment_global(y.buffer(256), out, (0, 0), 16)
    return k


@pytest.mark.parametrize("accumulators, short", [(1, True), (8, False)])
def test_short_mfma_chains_name_the_mfma(accumulators, short):
    x, y = torch.randn(512).half(), torch.zeros(256)
    _, advice = profile(mfma_kernel(accumulators), (1, 1, 1), (64, 1, 1), [x, y])
    found = only(advice, "mfma_chains")
    if not short:
        assert not found
        return
    (finding,) = found
    assert finding.where == line_of("MFMA")
    assert "issue 1.0 at a time" in finding.message and "back to back" in finding.message
