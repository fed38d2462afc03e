"""exp, log, erf, tanh, sigmoid and gelu run in the gfx942 emulator and stay within the precision
their docstrings state, measured against torch in float64."""

import numpy as np
import pytest
import torch

from rocke import dsl

from .emu_helper import run

N = 4096


def _spacing(want: np.ndarray) -> np.ndarray:
    """The f32 spacing (1 ulp) at each reference value."""
    return np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)


def _run_unary(fn, x: torch.Tensor, dtype=dsl.f32, width: int = 4):
    k = dsl.Kernel("math_unary", workgroup_size=256)
    src, dst = k.arg_ptr("x", dtype, readonly=True), k.arg_ptr("y", dtype)
    n = k.arg_i32("n")
    i = (k.block_id(0) * 256 + k.thread_id(0)) * width
    a, b = src.buffer(n), dst.buffer(n)
    b.store(i, fn(a.load(i, width=width)))
    y = torch.empty_like(x)
    run(k, (-(-x.numel() // (256 * width)),), [x, y, x.numel()])
    return y


# (name, dsl function, float64 reference, range, max abs error, max ulp error): each element's
# error must be within max(abs, ulp * spacing) -- the bounds the docstrings state
CASES = [
    ("exp", dsl.exp, torch.exp, (-87.0, 88.0), 0.0, 1),
    ("exp_fast", lambda v: dsl.exp(v, fast=True), torch.exp, (-10.0, 10.0), 0.0, 16),
    ("log", dsl.log, torch.log, (1e-30, 1e30), 0.0, 2),
    ("erf", dsl.erf, torch.erf, (-6.0, 6.0), 2e-7, 4),
    ("tanh", dsl.tanh, torch.tanh, (-10.0, 10.0), 2e-7, 4),
    ("sigmoid", dsl.sigmoid, torch.sigmoid, (-30.0, 30.0), 1.2e-7, 4),
    ("gelu", dsl.gelu, torch.nn.functional.gelu, (-8.0, 8.0), 2e-7, 2),
    ("gelu_tanh", lambda v: dsl.gelu(v, approximate="tanh"),
     lambda t: torch.nn.functional.gelu(t, approximate="tanh"), (-8.0, 8.0), 2e-7, 2),
]


@pytest.mark.parametrize("name, fn, ref, span, max_abs, max_ulp", CASES, ids=[c[0] for c in CASES])
def test_math_within_stated_precision(name, fn, ref, span, max_abs, max_ulp):
    lo, hi = span
    if name == "log":   # log-spaced positive inputs
        x = torch.logspace(np.log10(lo), np.log10(hi), N, dtype=torch.float64).float()
    else:
        x = torch.linspace(lo, hi, N, dtype=torch.float64).float()
    x[:5] = torch.tensor([0.0, 1e-20, -1e-20, 0.5, -0.5]).clamp(lo, hi) if lo < 0 else x[:5]
    y = _run_unary(fn, x)
    want = ref(x.double()).numpy()
    got = y.double().numpy()
    allowed = np.maximum(max_abs, max_ulp * _spacing(want))
    worst = int(np.argmax(np.abs(got - want) / allowed))
    assert abs(got[worst] - want[worst]) <= allowed[worst], (name, x[worst].item(), got[worst], want[worst])


def test_tanh_and_sigmoid_saturate_and_bf16_rounds_back():
    x = torch.tensor([-1e30, -50.0, 50.0, 1e30, float("inf"), float("-inf"), 0.0, 1.0])
    assert torch.equal(_run_unary(dsl.tanh, x, width=1), torch.tanh(x))
    np.testing.assert_allclose(_run_unary(dsl.sigmoid, x, width=1).numpy(), torch.sigmoid(x).numpy(), atol=1e-7)
    xb = torch.linspace(-4, 4, 64).bfloat16()
    got = _run_unary(dsl.gelu, xb, dtype=dsl.bf16, width=4)
    assert torch.equal(got, torch.nn.functional.gelu(xb.double()).bfloat16())


def test_gelu_rejects_unknown_form():
    k = dsl.Kernel("gelu_bad", workgroup_size=64)
    x = k.arg_f32("x")
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        dsl.gelu(x, approximate="fast")
    with pytest.raises(TypeError, match="needs an f16, bf16 or f32"):
        dsl.erf(k.const(1, dsl.i32))


def test_python_sum_adds_a_vectors_lanes():
    k = dsl.Kernel("lane_sum", workgroup_size=64)
    src, dst = k.arg_ptr("x", dsl.f32), k.arg_ptr("y", dsl.f32)
    v = src.load(0, width=4)
    total = sum(v)
    assert (total.dtype, total.lanes) == (dsl.f32, 1)
    dst.store(0, total)
    x, y = torch.tensor([1.0, 2.0, 4.0, 8.5]), torch.zeros(1)
    run(k, (1,), [x, y])
    assert y.item() == 15.5
