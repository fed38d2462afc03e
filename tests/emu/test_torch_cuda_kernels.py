"""The torch backend's one-kernel float ops on CUDA (rocke/emu/torch_cuda_kernels.py).

On a GPU each kernel must give the bits of the torch operations it replaces (which the op tables
in test_torch_backend hold to numpy's) on random words of every kind, read the way the emulator
reads its sources (strided register views, SGPR columns, broadcast constants). Without a GPU
(CI) the CUDA cases skip; the sources' shape and the lever are checked here anyway."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rocke.emu import backend as shared  # noqa: E402
from rocke.emu import semantics, torch_cuda_kernels, torch_exec  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU (CI has none)")

# op -> (the torch backend function it serves, the numpy semantics name, sources)
SERVED = {
    "exp2_f32": (torch_exec._exp2_f32, "v_exp_f32", 1),
    "fma_f32": (torch_exec._fma_f32, "v_fma_f32", 3),
    "add_f32": (torch_exec._add_f32, "v_add_f32", 2),
    "sub_f32": (torch_exec._sub_f32, "v_sub_f32", 2),
    "mul_f32": (torch_exec._mul_f32, "v_mul_f32", 2),
    "max_f32": (torch_exec._max, "v_max_f32", 2),
    "min_f32": (torch_exec._min, "v_min_f32", 2),
    "max3_f32": (torch_exec._max3, "v_max3_f32", 3),
    "min3_f32": (torch_exec._min3, "v_min3_f32", 3),
}


def test_every_kernel_serves_a_torch_backend_op():
    assert set(SERVED) == set(torch_cuda_kernels.OPS)


@pytest.mark.parametrize("op", torch_cuda_kernels.OPS)
def test_each_op_function_runs_its_own_kernel_where_enabled(op, monkeypatch):
    """Checked without a GPU: where the kernels are enabled, the torch backend's function runs
    the kernel of its op with its operands in order; elsewhere its torch operations."""
    function, _, count = SERVED[op]
    calls = []
    monkeypatch.setattr(torch_cuda_kernels, "enabled", lambda x: True)
    monkeypatch.setattr(torch_cuda_kernels, "run", lambda name, *xs: calls.append((name, xs)))
    operands = [torch.full((2, 64), float(i + 1)) for i in range(count)]
    function(*operands)
    assert [name for name, _ in calls] == [op]
    assert all(x is y for x, y in zip(calls[0][1], operands)) and len(calls[0][1]) == count
    monkeypatch.setattr(torch_cuda_kernels, "enabled", lambda x: False)
    assert isinstance(function(*operands), torch.Tensor) and len(calls) == 1


@pytest.mark.parametrize("op", torch_cuda_kernels.OPS)
def test_source_parses_with_its_entry_function_last(op):
    """jiterator takes the last function of the source as the kernel: it must be rocke_<op>."""
    from torch.cuda.jiterator import _CodeParser
    parsed = _CodeParser(torch_cuda_kernels.source(op))
    assert parsed.function_name == f"rocke_{op}"


def test_exp2_source_spells_backends_constants_exactly():
    text = torch_cuda_kernels.source("exp2_f32")
    for value in [shared.LN2, *shared.EXP_TERMS]:
        assert value.hex() in text
    assert text.count("__dadd_rn(__dmul_rn(poly, t)") == len(shared.EXP_TERMS) - 1


def test_lever_is_validated_and_cpu_tensors_never_use_the_kernels(monkeypatch):
    from rocke import env
    monkeypatch.setenv("ROCKE_EMU_CUDA_KERNELS", "1")
    assert env.emu_cuda_kernels()
    assert not torch_cuda_kernels.enabled(torch.zeros(4))
    monkeypatch.setenv("ROCKE_EMU_CUDA_KERNELS", "0")
    assert not env.emu_cuda_kernels()
    monkeypatch.setenv("ROCKE_EMU_CUDA_KERNELS", "yes")
    with pytest.raises(ValueError, match="ROCKE_EMU_CUDA_KERNELS must be 0 or 1"):
        env.emu_cuda_kernels()


def test_a_rocm_build_runs_the_torch_operations(monkeypatch):
    """On a ROCm build of torch the GPU is also torch's "cuda" device, but jiterator is
    CUDA-only: the ops run as torch operations (checked without a GPU: only the device type
    and torch's build are read)."""
    from types import SimpleNamespace
    monkeypatch.setattr(torch_cuda_kernels, "_UNAVAILABLE", [None])
    monkeypatch.setattr(torch.version, "hip", "6.2.0")
    monkeypatch.setenv("ROCKE_EMU_CUDA_KERNELS", "1")
    x = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    assert not torch_cuda_kernels.enabled(x)
    assert "not an NVIDIA CUDA build" in torch_cuda_kernels.unavailable()


_SPECIALS = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                      0x7F800001, 0xFFA00000, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF,
                      0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x42C80000, 0xC2C80000, 0x3F000000,
                      0x44FA0000, 0xC4FA0000], np.uint32)


def _random_words(rng, shape):
    """A third any bit pattern, a third specials, a third values near the ops' working range
    (exp2's inputs around its over/underflow edges included)."""
    words = rng.integers(0, 2 ** 32, size=shape, dtype=np.uint64).astype(np.uint32)
    pick = rng.integers(0, 3, size=shape)
    near = (rng.standard_normal(shape) * 60).astype(np.float32).view(np.uint32)
    return np.where(pick == 0, _SPECIALS[rng.integers(0, len(_SPECIALS), shape)],
                    np.where(pick == 1, near, words))


def _sources(rng, count, device):
    """The emulator's kinds of sources: a strided register of a (waves, regs, 64) file, an SGPR
    column (waves, 1), and a 0-dim constant."""
    waves = 4096
    file = torch.from_numpy(_random_words(rng, (waves, 3, 64)).view(np.int32)).to(device)
    column = torch.from_numpy(_random_words(rng, (waves, 1)).view(np.int32)).to(device)
    constant = torch.tensor(int(_SPECIALS[rng.integers(0, len(_SPECIALS))].view(np.int32)),
                            dtype=torch.int32, device=device)
    kinds = [file[:, i] for i in range(count)]
    layouts = [kinds]
    if count > 1:
        layouts.append([column] + kinds[1:])
        layouts.append(kinds[:-1] + [constant])
    return [[s.view(torch.float32) for s in layout] for layout in layouts]


def _bits(t):
    return t.contiguous().view(torch.int32).cpu().numpy()


@CUDA
@pytest.mark.parametrize("op", torch_cuda_kernels.OPS)
def test_kernel_is_the_torch_operations_bit_for_bit(op, monkeypatch):
    function, name, count = SERVED[op]
    rng = np.random.default_rng(len(op) * 7 + count)
    for sources in _sources(rng, count, "cuda"):
        monkeypatch.setenv("ROCKE_EMU_CUDA_KERNELS", "1")
        got = function(*sources)
        monkeypatch.setenv("ROCKE_EMU_CUDA_KERNELS", "0")
        want = function(*sources)
        assert got.shape == torch.broadcast_shapes(*(s.shape for s in sources))
        g, w = _bits(got), _bits(want)
        differ = np.flatnonzero(g != w)
        assert len(differ) == 0, (f"{op}: {len(differ)} of {g.size} lanes differ, e.g. "
                                  f"{g.reshape(-1)[differ[0]] & 0xFFFFFFFF:#x} vs "
                                  f"{w.reshape(-1)[differ[0]] & 0xFFFFFFFF:#x}")
        # numpy's semantics, on contiguous copies: where two NaNs meet (two NaN sources, or an
        # fma's invalid product inf * 0 and a NaN c), numpy's choice of payload depends on the
        # arrays' layout and the expression's form (noticed here: an fma of sNaNs b and c on
        # 4096 x 64 lanes gives c's), so those lanes are left to the comparison above
        full = [np.ascontiguousarray(np.broadcast_to(s.cpu().numpy(), g.shape)) for s in sources]
        with np.errstate(all="ignore"):
            numpy = np.asarray(semantics.VALU_OPS[name].fn(*full), np.float32).view(np.int32)
            nans = sum(np.isnan(x).astype(int) for x in full)
            if op == "fma_f32":
                a, b = (x.astype(np.float64) for x in full[:2])
                nans += np.isnan(a * b) & ~np.isnan(a) & ~np.isnan(b)
        one_nan = nans <= 1
        assert one_nan.mean() > 0.8
        assert np.array_equal(numpy[one_nan], g[one_nan]), op


@CUDA
def test_kernels_are_captured_and_replayed_in_a_cuda_graph():
    """A stretch's graph holds these kernels: compiled before the capture (its eager first
    sighting), replayed on new values."""
    a = torch.randn(256, 64, device="cuda")
    b = torch.randn(256, 64, device="cuda")
    torch_exec._add_f32(a, b), torch_exec._exp2_f32(a)         # compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch_exec._exp2_f32(torch_exec._add_f32(a, b))
    a.copy_(torch.randn(256, 64, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, torch_exec._exp2_f32(torch_exec._add_f32(a, b)))
