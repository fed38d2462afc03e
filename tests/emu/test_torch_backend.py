"""The torch array backend (rocke/emu/torch_exec.py) against the numpy backend, bit for bit.

Three ways to run it: "cpu" (tensors are views of the numpy state; unported instructions fall
back to numpy), "cpu-copies" (the CUDA code path on the CPU: own tensors, unported instructions
refused; "-nocheck" launches without the race checker, whose absence keeps LDS addresses on
the device) and "cuda" (skipped without a CUDA GPU; CI has none).

Existing tests run with every emulator launch doubled: numpy first, then torch on the same
inputs, and every tensor argument's bytes must come out identical (the test's own assertions
then check the torch result too).
"""
import contextlib
from types import SimpleNamespace
import zlib
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rocke.emu  # noqa: E402
from rocke.emu import mfma as emu_mfma  # noqa: E402
from rocke.emu import semantics, torch_exec, torch_graphs  # noqa: E402
from rocke.emu.errors import EmulatorError  # noqa: E402

DEVICES = ["cpu", "cpu-copies", "cpu-copies-nocheck", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU (CI has none)"))]


@contextlib.contextmanager
def backend_env(name, device="cpu"):
    saved = {k: os.environ.get(k) for k in ("ROCKE_EMU_BACKEND", "ROCKE_EMU_DEVICE")}
    os.environ["ROCKE_EMU_BACKEND"], os.environ["ROCKE_EMU_DEVICE"] = name, device
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def _bits(t):
    return t.contiguous().view(torch.uint8)


@pytest.fixture
def dual(monkeypatch, request):
    """Every rocke.emu.launch runs on numpy, then on torch from the same inputs; the bytes of
    every tensor argument must agree. Yields the list of torch reports."""
    device = request.param
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", device.startswith("cpu-copies"))
    # the CUDA path's graph captures stood in for (torch_graphs.SIMULATE_CAPTURE)
    monkeypatch.setattr(torch_graphs, "SIMULATE_CAPTURE", device.startswith("cpu-copies"))
    real = rocke.emu.launch
    reports = []

    def launch(code, kernel, grid, block, args, *rest, **kw):
        if device.endswith("nocheck"):   # LDS addresses then stay on the device
            kw["check"], rest = False, rest[:1]
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        before = [t.clone() for t in tensors]
        with backend_env("numpy"):
            real(code, kernel, grid, block, args, *rest, **kw)
        want = [t.clone() for t in tensors]
        for t, b in zip(tensors, before):
            t.copy_(b)
        with backend_env("torch", "cuda" if device == "cuda" else "cpu"):
            report = real(code, kernel, grid, block, args, *rest, **kw)
        for i, (t, w) in enumerate(zip(tensors, want)):
            assert torch.equal(_bits(t), _bits(w)), f"{kernel}: argument {i} differs from numpy"
        assert report.backend.startswith("torch")
        reports.append(report)
        return report

    monkeypatch.setattr(rocke.emu, "launch", launch)
    yield reports


from tests.emu import test_triton_kernels as T  # noqa: E402

FULLY_PORTED = [   # run with no fallback, so also on CUDA
    ("axpy_f32", lambda: T.test_axpy_ragged_tail(*_param(T.test_axpy_ragged_tail, "axpy_f32"))),
    ("flash_attn_fwd_d128_causal", lambda: T.test_flash_attention_fwd(*_flash("d128_causal"))),
    ("flash_attn_fwd_d64", lambda: T.test_flash_attention_fwd(*_flash("d64"))),
    ("softmax", T.test_softmax_rows_ragged),
    ("matmul_bf16_mfma16", lambda: T.test_matmul_ragged(*_matmul("matmul_bf16_mfma16"))),
    ("matmul_f16_mfma32", lambda: T.test_matmul_ragged(*_matmul("matmul_f16_mfma32"))),
    ("gather_rows", T.test_gather_rows),
]
WITH_FALLBACKS = [   # unported instructions remain (fma_mix, 64-bit shifts, bit counts...)
    ("layernorm", T.test_layernorm_rows_multi_chunk),
    ("silu_mul", T.test_silu_mul_f16),
    ("int_bits", T.test_int_bits_i32),
    ("column_sum_atomic", T.test_column_sum_atomic_f32),
]


def _param(test, name):
    cases = next(m for m in test.pytestmark if m.name == "parametrize").args[1]
    return next(case for case in cases if case[0] == name)


def _flash(suffix):
    return next(case for case in T.FLASH_CASES if case[0] == f"flash_attn_fwd_{suffix}")


def _matmul(name):
    return next(case for case in T.MATMUL_CASES if case[0] == name)


@pytest.mark.parametrize("dual", DEVICES, indirect=True)
@pytest.mark.parametrize("name, run", FULLY_PORTED, ids=[n for n, _ in FULLY_PORTED])
def test_triton_fixture_fully_on_torch(dual, name, run):
    run()
    assert dual and all(r.fallbacks == () for r in dual), dual[0].fallbacks[:3]


@pytest.mark.parametrize("dual", ["cpu"], indirect=True)
@pytest.mark.parametrize("name, run", WITH_FALLBACKS, ids=[n for n, _ in WITH_FALLBACKS])
def test_triton_fixture_with_numpy_fallbacks(dual, name, run):
    run()
    assert dual


def test_unported_instruction_refused_before_any_write(monkeypatch):
    """The CUDA path (here: the CPU with own copies) refuses a kernel with an instruction it
    has not ported, naming it, and leaves the output untouched."""
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", True)
    x = torch.randn(32, 50)
    out = torch.full((50,), 7.0)
    with backend_env("torch"), pytest.raises(
            EmulatorError, match=r"line \d+ `buffer_atomic_add_f32 .*is not ported"):
        T.launch_fixture("column_sum_atomic_f32", (2, 1, 1), x_ptr=x, out_ptr=out,
                         n_rows=32, n_cols=50, row_stride=50)
    assert (out == 7.0).all()


def test_torch_levers_refuse_profile():
    info, asm = T.load_fixture("axpy_f32")
    with backend_env("torch"), pytest.raises(ValueError, match="profile=True"):
        rocke.emu.launch(asm, info["kernel_symbol"], (1, 1, 1), tuple(info["block"]),
                         [torch.zeros(4), torch.zeros(4), torch.zeros(4), 1.0, 4], profile=True)


# ------------------------------------------------------------------ every ported VALU op

_SPECIAL_F32 = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                         0x7F800001, 0xFF812345, 1, 0x807FFFFF, 0x00800000, 0x3F800000,
                         0xBF800000, 0x7F7FFFFF, 0x5F800000, 0x1F800000], np.uint32)


def _words(rng, typ, shape):
    """Random 32-bit words for a source of `typ`: floats mix any bit pattern, specials and
    ordinary values; integers any pattern and small values."""
    words = rng.integers(0, 2 ** 32, size=shape, dtype=np.uint64).astype(np.uint32)
    flat = words.reshape(-1)
    if typ in ("f32", "pk_f32"):
        pick = rng.integers(0, 3, size=flat.size)
        normal = (rng.standard_normal(flat.size) * 8).astype(np.float32).view(np.uint32)
        flat[:] = np.where(pick == 0, _SPECIAL_F32[rng.integers(0, 16, flat.size)],
                           np.where(pick == 1, normal, flat))
    elif typ == "f16":
        flat[:] = rng.integers(0, 2 ** 16, size=flat.size)
    else:
        small = rng.integers(0, 40, size=flat.size).astype(np.uint32)
        flat[:] = np.where(rng.integers(0, 2, flat.size) == 0, small, flat)
    return words


def _numpy_typed(words, typ):
    if typ == "f32":
        return words.view(np.float32)
    if typ in ("b32", "u32"):
        return words
    if typ == "i32":
        return words.view(np.int32)
    if typ == "f16":
        return (words & 0xFFFF).astype(np.uint16).view(np.float16)
    if typ in ("u64", "b64"):
        return words[..., 0].astype(np.uint64) | (words[..., 1].astype(np.uint64) << 32)
    if typ == "mask":
        return (words & 1).astype(bool)
    if typ == "pk_f32":
        return words.view(np.float32)
    raise AssertionError(typ)


def _torch_typed(words, typ, device):
    t = torch.from_numpy(words.view(np.int32).copy()).to(device)
    if typ in ("u64", "b64"):
        return (t[..., 0].to(torch.int64) & 0xFFFFFFFF) | (t[..., 1].to(torch.int64) << 32)
    if typ == "mask":
        return (t & 1).bool()
    if typ == "pk_f32":
        return t.view(torch.float32)
    return torch_exec.bits_to_typed(t, typ)


def _numpy_bits(value, typ):
    value = np.asarray(value)
    if typ in ("f32", "pk_f32"):
        return value.astype(np.float32).view(np.uint32).astype(np.int64)
    if typ == "f16":
        return value.astype(np.float16).view(np.uint16).astype(np.int64)
    if typ in ("u64", "b64"):
        return value.astype(np.uint64).view(np.int64)
    if typ == "mask":
        return value.astype(np.int64)
    return value.astype(np.int64) & 0xFFFFFFFF


def _torch_bits(value, typ):
    if typ in ("f32", "pk_f32"):
        value = value.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    elif typ == "f16":
        value = value.view(torch.int16).to(torch.int64) & 0xFFFF
    elif typ == "mask":
        value = value.to(torch.int64)
    elif typ not in ("u64", "b64"):
        value = value & 0xFFFFFFFF
    return value.cpu().numpy()


@pytest.mark.parametrize("device", ["cpu", DEVICES[-1]])
@pytest.mark.parametrize("name", sorted(torch_exec.PORTED_VALU_OPS))
def test_ported_valu_op_bit_identical(name, device):
    """Each ported op on 4 x 64 lanes of random bits (NaN payloads, denormals, infinities
    included) equals semantics.VALU_OPS[name] bit for bit."""
    dsts, srcs, fn = torch_exec.PORTED_VALU_OPS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    args_np, args_t = [], []
    for typ in srcs:
        shape = (4, 64, 2) if typ in ("u64", "b64", "pk_f32") else (4, 64)
        words = _words(rng, typ, shape)
        args_np.append(_numpy_typed(words, typ))
        args_t.append(_torch_typed(words, typ, device))
    with np.errstate(all="ignore"):
        want = semantics.VALU_OPS[name].fn(*args_np)
    got = fn(*args_t)
    if len(dsts) == 1:
        want, got = (want,), (got,)
    for typ, w, g in zip(dsts, want, got):
        w_bits = np.broadcast_to(_numpy_bits(w, typ), (4, 64, 2) if typ == "pk_f32" else (4, 64))
        g_bits = np.broadcast_to(_torch_bits(g, typ), w_bits.shape)
        differ = np.flatnonzero(w_bits != g_bits)
        assert len(differ) == 0, (f"{name} ({typ}) on torch {device}: {len(differ)} lanes differ, "
                                  f"e.g. {g_bits.reshape(-1)[differ[0]]:#x} vs "
                                  f"{w_bits.reshape(-1)[differ[0]]:#x}")


class _MfmaPool:
    """What the torch backend's MFMA closure asks of a pool: VGPRs, every lane on."""

    def __init__(self, tv):
        self.tv = self.tl = tv
        self.torch = torch

    def tsel(self, sel):
        return sel

    def tmask(self, sel):
        return torch.ones((self.tv.shape[0], 64), dtype=torch.bool, device=self.tv.device), \
            True, self.tv.shape[0] * 64

    def write_rows(self, sel, row, count, values, full, mask=None):
        self.tv[sel, row:row + count] = values


def _mfma_operand(rng, fmt, shape):
    """Register words of 16-bit elements: mostly moderate values, a tenth any non-NaN bit
    pattern (zeros, subnormals, infinities, extremes)."""
    values = (rng.standard_normal(shape + (2,)) * 4).astype(np.float32)
    halves = (values.astype(np.float16).view(np.uint16) if fmt == "f16"
              else (values.view(np.uint32) >> 16).astype(np.uint16)).astype(np.uint32)
    wild = rng.integers(0, 2 ** 16, size=halves.shape).astype(np.uint32)
    exponent = (0x7C00, 0x7F80)[fmt == "bf16"]
    mantissa = (0x03FF, 0x007F)[fmt == "bf16"]
    wild_nan = ((wild & exponent) == exponent) & ((wild & mantissa) != 0)
    wild[wild_nan] &= ~np.uint32(mantissa)            # a NaN's bits become an infinity's
    halves = np.where(rng.random(halves.shape) < 0.1, wild, halves)
    return (halves[..., 0] | (halves[..., 1] << 16)).astype(np.uint32)


_TORCH_MFMAS = sorted(name for name, op in emu_mfma.MFMA_OPS.items()
                      if getattr(op, "a_format", None) in ("f16", "bf16"))


@pytest.mark.parametrize("device", ["cpu", DEVICES[-1]])
@pytest.mark.parametrize("name", _TORCH_MFMAS)
def test_every_ported_mfma_is_numpys(name, device):
    """Each dense f16/bf16 MFMA (multi-block ones too) on the torch backend writes numpy's
    MfmaOp.execute bits, C included; an infinity's product or sum may make a NaN. (Two NaN
    inputs meeting in one dot product give a NaN of either payload: not compared.)"""
    from rocke.emu.operands import Operand
    op = emu_mfma.MFMA_OPS[name]
    rng = np.random.default_rng(len(name))
    n, na, nb, nc = 8, op.a_regs, op.b_regs, op.c_regs
    a = _mfma_operand(rng, op.a_format, (n, na, 64))
    b = _mfma_operand(rng, op.b_format, (n, nb, 64))
    c = rng.standard_normal((n, nc, 64)).astype(np.float32)
    want = op.execute(a, b, c).view(np.uint32)
    registers = np.concatenate([a, b, c.view(np.uint32), np.zeros((n, nc, 64), np.uint32)], 1)
    tv = torch.from_numpy(registers.view(np.int32)).to(device)
    d = na + nb + nc
    ops = [Operand("v", d, nc), Operand("v", 0, na), Operand("v", na, nb), Operand("v", na + nb, nc)]
    run = torch_exec._decode_mfma(SimpleNamespace(mnemonic=name), ops, {}, emu_mfma.MFMA_OPS)
    run(_MfmaPool(tv), slice(0, n), n)
    got = tv[:, d:].cpu().numpy().view(np.uint32)
    nan = np.isnan(want.view(np.float32))
    assert np.array_equal(np.isnan(got.view(np.float32)), nan)
    assert np.array_equal(got[~nan], want[~nan]), name


_SPECIAL_OPS = ["v_max_f32", "v_min_f32", "v_max3_f32", "v_min3_f32", "v_exp_f32", "v_add_f32",
                "v_mul_f32", "v_fma_f32", "v_cvt_f16_f32"]


@pytest.mark.parametrize("device", ["cpu", DEVICES[-1]])
@pytest.mark.parametrize("name", _SPECIAL_OPS)
def test_float_op_on_every_pair_of_specials(name, device):
    """Random lanes rarely pair two specials (+0 with -0, two NaNs of different kinds): each
    op here gets every combination of the special floats (zeros, infinities, quiet and
    signaling NaNs, subnormals, extremes) in its sources, against semantics.VALU_OPS."""
    dsts, srcs, fn = torch_exec.PORTED_VALU_OPS[name]
    grids = np.meshgrid(*[_SPECIAL_F32] * len(srcs), indexing="ij")
    words = [g.reshape(-1, 64) if g.size % 64 == 0 else
             np.resize(g.reshape(-1), (-(-g.size // 64), 64)) for g in grids]
    args_np = [w.view(np.float32) for w in words]
    args_t = [torch.from_numpy(w.view(np.int32).copy()).to(device).view(torch.float32)
              for w in words]
    with np.errstate(all="ignore"):
        want = _numpy_bits(semantics.VALU_OPS[name].fn(*args_np), dsts[0])
    got = _torch_bits(fn(*args_t), dsts[0])
    differ = np.flatnonzero(np.broadcast_to(got, want.shape) != want)
    assert len(differ) == 0, (f"{name} on torch {device}: {len(differ)} of {want.size} differ, "
                              f"e.g. sources {[hex(w.reshape(-1)[differ[0]]) for w in words]}")


@pytest.mark.parametrize("device", ["cpu", DEVICES[-1]])
@pytest.mark.parametrize("name", sorted(torch_exec.WRAP32_OPS))
def test_wrap32_op_bit_identical(name, device):
    """The int32 forms (no int64 widening) equal semantics.VALU_OPS[name] on random words,
    incl. the wrap-around corners (0x7FFFFFFF + 1, products past 2**32, shifts of 31)."""
    dsts, srcs, _ = torch_exec.PORTED_VALU_OPS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    args_np, args_t = [], []
    for typ in srcs:
        words = _words(rng, typ, (4, 64))
        words[0, :8] = [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0, 1, 31, 32, 0xFFFFFFE1]
        args_np.append(_numpy_typed(words, typ))
        args_t.append(torch.from_numpy(words.view(np.int32).copy()).to(device))
    with np.errstate(all="ignore"):
        want = _numpy_bits(semantics.VALU_OPS[name].fn(*args_np), dsts[0])
    got = torch_exec.WRAP32_OPS[name](*args_t)
    assert got.dtype == torch.int32
    got = got.to(torch.int64).cpu().numpy() & 0xFFFFFFFF
    assert np.array_equal(np.broadcast_to(got, want.shape), want), name


# ------------------------------------------------------------------ rocke's own attention kernel

@pytest.mark.parametrize("dual", DEVICES, indirect=True)
def test_attention_2d_kernel_bit_identical(dual):
    """rocke's unified paged attention (2D, f16, d64, 4 warps) on the torch backend: the same
    output bytes as numpy and within the reference's tolerance."""
    from rocke.kernels.gfx942 import attention_tiled_2d as a2
    from tests.kernels.test_attention_2d import MIX, assert_close, run_2d
    spec = a2.UnifiedAttention2DSpec(dtype="f16", head_size=64, block_size=16,
                                     num_queries_per_kv=1, num_warps=4)
    out, ref, _ = run_2d(spec, *MIX)
    assert_close(spec, out, ref)
    assert dual and all(r.fallbacks == () for r in dual), "no launch, or a numpy fallback"


@pytest.mark.parametrize("dual", DEVICES, indirect=True)
def test_attention_3d_and_reduce_segments_fully_on_torch(dual):
    """rocke's split-KV decode kernel (3D, with empty segments) and reduce_segments: the same
    bytes as numpy, no numpy fallback (so they also run on CUDA), and the tests' own checks."""
    from tests.kernels import test_attention_3d as t3
    from tests.kernels import test_reduce_segments as trs
    t3.test_empty_segments_write_the_neutral_partial()
    trs.test_empty_segments_and_rows_strided_out("bf16", 64, 5)
    names = {r.kernel for r in dual}
    assert any(n.startswith("attention_3d") for n in names) and \
        any(n.startswith("reduce_segments") for n in names), names
    assert all(r.fallbacks == () for r in dual), [r.fallbacks[:2] for r in dual if r.fallbacks]


# ------------------------------------------------------------------ CUDA tensors as global memory

def _attention_call(on_cuda, backend_name, device, seqs, dtype="f16"):
    """run_unified_attention_torch on make_inputs' batch (a mixed prefill/decode batch, 2D and
    3D paths by the dispatcher), the tensors on CUDA or the CPU; returns `out` on the CPU."""
    from rocke.kernels.common.attention_unified import run_unified_attention_torch
    from tests.kernels.unified_inputs import make_inputs
    inputs = make_inputs(seqs, dtype=dtype)
    if on_cuda:
        inputs = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    with backend_env(backend_name, device):
        run_unified_attention_torch(*inputs.values())
    return inputs["out"].cpu()


CUDA_ONLY = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU (CI has none)")


@CUDA_ONLY
@pytest.mark.parametrize("seqs", [[(5, 40), (1, 70)], [(1, 300), (1, 33)]], ids=["mixed", "decode"])
def test_unified_attention_on_cuda_tensors_is_numpys(monkeypatch, seqs):
    """vLLM's entry point on CUDA tensors emulates on the GPU (the tensors are the emulator's
    global memory) and writes the bytes the numpy backend writes on CPU tensors."""
    from rocke.emu import memory
    seen = []
    real_add = memory.GlobalMemory.add

    def add(self, start, size, name, writable, array=None, tensor=None, on_host=True):
        seen.append((name, tensor is not None and tensor.device.type == "cuda", on_host))
        return real_add(self, start, size, name, writable, array, tensor, on_host)
    monkeypatch.setattr(memory.GlobalMemory, "add", add)
    want = _attention_call(False, "numpy", "cpu", seqs)
    seen.clear()
    got = _attention_call(True, "torch", "cuda", seqs)
    assert torch.equal(_bits(got), _bits(want))
    assert any(cuda and not on_host for _, cuda, on_host in seen), seen   # GPU-only regions
    assert not any(cuda and on_host for _, cuda, on_host in seen), seen


def test_cuda_tensors_are_emulated_only_with_the_torch_cuda_backend(monkeypatch):
    """An NVIDIA CUDA q goes to the emulator with ROCKE_EMU_BACKEND=torch ROCKE_EMU_DEVICE=cuda
    and is refused otherwise (checked without a GPU: only q.device is read)."""
    from types import SimpleNamespace
    from rocke.kernels.common.attention_unified import launch_device_kind
    monkeypatch.setattr(torch.version, "hip", None)
    q = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    with backend_env("numpy", "cpu"):
        with pytest.raises(ValueError, match="NVIDIA CUDA build"):
            launch_device_kind(q)
    with backend_env("torch", "cuda"):
        assert launch_device_kind(q) == "emu"


def test_device_store_keeps_the_last_overlapping_lane():
    """torch_memory.put (the GPU's global stores) against memory.put_rows (numpy's): lanes that
    store to one address, or to overlapping bytes, leave the last lane's bytes."""
    from rocke.emu import memory, torch_memory
    rng = np.random.default_rng(0)
    for nbytes, offsets in ((4, [8, 0, 8, 4, 8]), (4, [0, 2, 4, 6]), (1, [3, 3, 1, 3]),
                            (8, rng.integers(0, 7, 40) * 4)):
        offsets = np.asarray(offsets, np.int64)
        data = rng.integers(0, 256, (len(offsets), nbytes), dtype=np.uint8)
        host = np.zeros(64, np.uint8)
        region = memory.Region(0, 64, "x", True, host)
        if np.all(offsets % nbytes == 0):
            memory.region_rows(region, offsets, nbytes, put=data)
        else:   # numpy's store of unaligned overlapping accesses: one lane after another
            for o, row in zip(offsets, data):
                host[o:o + nbytes] = row
        view = torch.zeros(64, dtype=torch.uint8)
        torch_memory.put(memory.Region(0, 64, "x", True, None, view), offsets,
                         torch.from_numpy(data))
        assert np.array_equal(view.numpy(), host), (nbytes, offsets)


def test_gpu_only_region_serves_scalar_loads_and_stores():
    """A range reached only through its torch view (GPU memory; here a CPU tensor in copies
    mode): the host's scalar loads and stores go through the view."""
    from rocke.emu import memory
    t = torch.arange(64, dtype=torch.uint8)
    mem = memory.GlobalMemory()
    mem.add(0x1000, 64, "x", True, tensor=t, on_host=False)
    assert mem.regions[0].bytes is None
    got = mem.load(np.array([0x1000 + 8, 0x1000 + 60], np.uint64), 4)
    assert got.tolist() == [[8, 9, 10, 11], [60, 61, 62, 63]]
    mem.store(np.array([0x1000 + 4], np.uint64), np.array([[200, 201]], np.uint8))
    assert t[4:6].tolist() == [200, 201] and t[3] == 3 and t[6] == 6


def test_fault_after_a_pool_wrote_rolls_back_gpu_memory(monkeypatch):
    """The GPU memory path (copies mode on the CPU): a fault in the launch's second pool leaves
    what the first pool stored undone — the rollback copies of GPU ranges are put back."""
    from rocke.emu.errors import MemoryFault
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", True)
    n, first_pool = 256 * 1024, 128 * 1024     # a pool: 512 waves = 128 groups of 1024 elements
    x, y = torch.ones(n), torch.ones(n)
    out = torch.full((first_pool + 5,), 7.0)   # the second pool's stores fall outside it
    with backend_env("torch", "cpu"), pytest.raises(MemoryFault):
        T.launch_fixture("axpy_f32", (256, 1, 1), x_ptr=x, y_ptr=y, out_ptr=out, alpha=0.5,
                         n_elements=n)
    assert torch.all(out == 7.0), "the first pool's stores were not rolled back"


MASK_LOGIC = """
  v_cmp_gt_u32_e64 s[16:17], v0, v1
  v_cmp_lt_u32_e64 s[18:19], v0, v2
  s_and_b64 s[20:21], s[16:17], s[18:19]
  s_or_b64 s[22:23], s[16:17], s[24:25]
  s_xor_b64 s[26:27], s[20:21], s[22:23]
  s_andn2_b64 s[28:29], s[26:27], s[16:17]
  s_orn2_b64 s[30:31], s[28:29], s[18:19]
  s_nand_b64 s[32:33], s[30:31], s[20:21]
  s_nor_b64 s[34:35], s[32:33], s[22:23]
  s_xnor_b64 vcc, s[34:35], s[26:27]
  v_cndmask_b32_e64 v3, v1, v2, s[20:21]
  v_cndmask_b32_e32 v4, v1, v2, vcc
  v_cndmask_b32_e64 v5, v1, v2, s[34:35]
  s_and_b64 s[36:37], s[16:17], s[18:19]
  s_cselect_b32 s38, 7, 9
"""


@pytest.mark.parametrize("dual", ["cpu"], indirect=True)   # the harness's v_writelane falls back
def test_mask_logic_on_compare_results_stays_on_the_device(dual, monkeypatch):
    """`s_and_b64`-style ops on compare masks (and a host-held pair) run on the device when the
    SCC they write is dead -- eight here -- and as numpy does: the masks, the lanes they select
    and, where SCC is read (`s_cselect`), SCC itself, from the last `s_and_b64` that ran on the
    host. (The causal flash fixture runs the same ops on every device, CUDA included.)"""
    from tests.emu.asm_runner import run_asm
    deferred = []
    real = torch_exec.TorchPool.defer_mask

    def spy(self, sel, index, mask):
        deferred.append(self._current.instr.mnemonic)
        return real(self, sel, index, mask)
    monkeypatch.setattr(torch_exec.TorchPool, "defer_mask", spy)
    rng = np.random.default_rng(7)
    vgprs = rng.integers(0, 64, (4, 3, 64), dtype=np.uint32)
    sgprs = rng.integers(0, 2**32, (4, 32), dtype=np.uint64)
    run_asm(MASK_LOGIC, vgprs=vgprs, sgprs=sgprs)
    assert len(dual) == 1
    on_device = [m for m in deferred if m.startswith("s_")]
    assert len(on_device) == 8 and on_device.count("s_and_b64") == 1, " ".join(on_device)


@pytest.mark.parametrize("after, dead", [
    ("s_cmp_eq_u32 s20, 0", True),                        # the next SCC write
    ("v_add_u32_e32 v1, v1, v2\n  s_or_b64 s[24:25], s[24:25], s[26:27]", True),
    ("s_and_saveexec_b64 s[24:25], vcc", True),
    ("s_endpgm", True),
    ("s_cselect_b32 s20, 1, 0", False),                   # a reader
    ("s_addc_u32 s20, s20, 0", False),
    ("s_cmov_b32 s20, s21", False),
    ("s_cbranch_scc1 .Lskip\n  s_nop 0\n.Lskip:", False),   # a branch first
    ("s_mov_b32 s20, 0\n.Lloop:\n  s_cmp_eq_u32 s20, 0", False),   # a label first
])
def test_scc_liveness_scan(after, dead):
    """`_scc_dead_after`: a mask op's SCC is dead only when straight-line code overwrites it
    before anything could read it."""
    from rocke.emu.asm import parse_program
    from rocke.emu.program import decode_kernel
    from tests.emu.asm_runner import asm_text
    body = "  s_and_b64 s[20:21], s[16:17], s[18:19]\n  " + after
    program = parse_program(asm_text(body, 3))
    dk = decode_kernel(program, program.kernels["run_asm"])
    p = next(i for i, d in enumerate(dk.code)
             if d is not None and d.instr.text.startswith("s_and_b64 s[20:21]"))
    assert torch_exec._scc_dead_after(dk, p) is dead
