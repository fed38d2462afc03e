"""The bit-level definitions every emulator array backend shares (rocke/emu/backend.py): numpy
and torch (CPU; CUDA where a GPU is present) must agree bit for bit, on every bit pattern class
(NaN payloads, denormals, infinities, signed zeros), and stay within an ulp of libm."""
import numpy as np
import pytest

from rocke import env
from rocke.emu import backend

torch = pytest.importorskip("torch")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU (CI has none)"))]
SPECIAL_BITS = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
                0xFF812345, 0x7FA00000, 1, 0x807FFFFF, 0x00800000, 0x3F800000, 0xBF800000,
                0x3E800000, 0x3F000000, 0xBF000000, 0x42FE0000, 0x43000000, 0xC3160000,
                0xC2FC0000, 0xC2FE0000, 0x4B000000, 0x7F7FFFFF, 0x3F3504F3, 0x3FB504F3]


def _inputs():
    rng = np.random.default_rng(21)
    any_bits = rng.integers(0, 2 ** 32, size=200_000, dtype=np.uint64).astype(np.uint32)
    moderate = (rng.standard_normal(100_000) * 40).astype(np.float32).view(np.uint32)
    return np.concatenate([np.array(SPECIAL_BITS, np.uint32), any_bits, moderate]).view(np.float32)


UNARY = ["exp2_f32", "log2_f32", "sin_rev_f32", "cos_rev_f32", "sqrt_f32"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", UNARY)
def test_unary_definitions_bit_identical(name, device):
    x = _inputs()
    fn = getattr(backend, name)
    want = fn(backend.NUMPY, x).view(np.uint32)
    got = fn(backend.TorchPrims(device), torch.from_numpy(x.copy()).to(device))
    got = got.view(torch.int32).cpu().numpy().view(np.uint32)
    differ = np.flatnonzero(got != want)
    assert len(differ) == 0, (f"{name} on torch {device}: {len(differ)} lanes differ, e.g. input "
                              f"{x.view(np.uint32)[differ[0]]:#x}: {got[differ[0]]:#x} vs "
                              f"{want[differ[0]]:#x}")


@pytest.mark.parametrize("device", DEVICES)
def test_min_max_bf16_bit_identical(device):
    from rocke.emu import numerics, semantics
    x = _inputs()
    y = np.roll(x, 11)
    prims = backend.TorchPrims(device)
    tx, ty = (torch.from_numpy(v.copy()).to(device) for v in (x, y))
    with np.errstate(all="ignore"):
        legacy = {"max_f32": semantics.VALU_OPS["v_max_f32"].fn(x, y),
                  "min_f32": semantics.VALU_OPS["v_min_f32"].fn(x, y)}
    for name, want in legacy.items():
        fn = getattr(backend, name)
        assert (fn(backend.NUMPY, x, y).view(np.uint32) == want.view(np.uint32)).all(), name
        got = fn(prims, tx, ty).view(torch.int32).cpu().numpy().view(np.uint32)
        assert (got == want.view(np.uint32)).all(), f"{name} on torch {device}"
    got = backend.f32_to_bf16_bits(prims, tx).cpu().numpy()
    assert (got == numerics.f32_to_bf16_bits(x)).all()


def test_nan_rule_is_x86s():
    """A NaN input comes back quiet with its payload (the first NaN input wins); a NaN made from
    numbers is the default NaN 0xFFC00000 — on every backend, whatever its library does."""
    bits = np.array([0x7F800001, 0xFF812345, 0xBF800000, 0x7F800000], np.uint32)
    x = bits.view(np.float32)
    assert [hex(v) for v in backend.sqrt_f32(backend.NUMPY, x).view(np.uint32)] == \
        ["0x7fc00001", "0xffc12345", "0xffc00000", "0x7f800000"]
    assert [hex(v) for v in backend.sin_rev_f32(backend.NUMPY, x).view(np.uint32)] == \
        ["0x7fc00001", "0xffc12345", "0x0", "0xffc00000"]   # sin(-1 turn) = +0
    first = backend.nan_rule_f32(backend.NUMPY, np.float32([np.nan]), x[1:2], x[0:1])
    assert first.view(np.uint32)[0] == 0xFFC12345


def test_transcendentals_within_an_ulp_of_libm():
    """The series are accurate: against libm in float64 rounded to float32, exp2/log2 differ by
    at most one ulp, and sin/cos (in revolutions, |x| < 256, the ISA's input domain) too."""
    x = _inputs()
    finite = np.isfinite(x)
    with np.errstate(all="ignore"):
        cases = {
            "exp2_f32": (x[finite & (x < 127) & (x > -126)], np.exp2),
            "log2_f32": (x[finite & (x > 1e-37)], np.log2),
            "sin_rev_f32": (x[finite & (np.abs(x) < 256)],
                            lambda v: np.where(2 * v == np.rint(2 * v), 0.0,
                                               np.sin(2 * np.pi * (v - np.rint(v))))),
            "cos_rev_f32": (x[finite & (np.abs(x) < 256)],
                            lambda v: np.where(np.abs(v - np.rint(v)) == 0.25, 0.0,
                                               np.cos(2 * np.pi * (v - np.rint(v))))),
        }
        for name, (v, ref) in cases.items():
            got = getattr(backend, name)(backend.NUMPY, v).astype(np.float64)
            want = ref(v.astype(np.float64))
            ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
            error = np.abs(got - want) / np.maximum(ulp, np.spacing(np.float32(2 ** -126)))
            assert error.max() <= 1.0, (name, v[np.argmax(error)], error.max())


def test_levers(monkeypatch):
    monkeypatch.delenv("ROCKE_EMU_BACKEND", raising=False)
    monkeypatch.delenv("ROCKE_EMU_DEVICE", raising=False)
    assert backend.selected() == ("numpy", "cpu")
    monkeypatch.setenv("ROCKE_EMU_BACKEND", "jax")
    with pytest.raises(ValueError, match="ROCKE_EMU_BACKEND must be 'numpy' or 'torch', got 'jax'"):
        env.emu_backend()
    monkeypatch.setenv("ROCKE_EMU_BACKEND", "numpy")
    monkeypatch.setenv("ROCKE_EMU_DEVICE", "cuda")
    with pytest.raises(ValueError, match="needs ROCKE_EMU_BACKEND=torch"):
        env.emu_device()
    monkeypatch.setenv("ROCKE_EMU_DEVICE", "tpu")
    with pytest.raises(ValueError, match="ROCKE_EMU_DEVICE must be 'cpu' or 'cuda', got 'tpu'"):
        env.emu_device()
    monkeypatch.setenv("ROCKE_EMU_BACKEND", "torch")
    monkeypatch.setenv("ROCKE_EMU_DEVICE", "cuda")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="ROCKE_EMU_DEVICE=cuda but torch sees no CUDA GPU"):
            backend.selected()
