"""The sample kernels run in the emulator and match torch (ragged sizes included)."""

import numpy as np
import pytest
import torch

from rocke.kernels.samples import softmax, vector_add

from .emu_helper import run

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# half an ulp of values in [0.5, 1] after rounding to the output type, plus fp32 math slack
SOFTMAX_ATOL = {"f32": 2e-6, "f16": 6e-4, "bf16": 4e-3}


@pytest.mark.parametrize("name", sorted(vector_add.VARIANTS))
@pytest.mark.parametrize("n", [1, 1000 + 7])
def test_vector_add_matches_torch(name, n):
    spec = vector_add.VARIANTS[name]
    dt = TORCH_DTYPES[spec.dtype]
    gen = torch.Generator().manual_seed(n)
    a, b = (torch.randn(n, generator=gen) * 4).to(dt), torch.randn(n, generator=gen).to(dt)
    guard = 16  # elements past n that must stay untouched
    c = torch.full((n + guard,), 7.0, dtype=dt)
    grid, block = vector_add.launch_geometry(spec, n=n)
    run(vector_add.build(spec), grid, [a, b, c[:n], n], block)
    # torch rounds the exact sum of two same-typed values once, as the kernel does
    assert torch.equal(c[:n], (a.float() + b.float()).to(dt))
    assert torch.equal(c[n:], torch.full((guard,), 7.0, dtype=dt))


@pytest.mark.parametrize("name", sorted(softmax.VARIANTS))
@pytest.mark.parametrize("rows, cols", [(5, 37), (3, 700), (2, 1)])
def test_softmax_matches_torch(name, rows, cols):
    spec = softmax.VARIANTS[name]
    dt = TORCH_DTYPES[spec.dtype]
    gen = torch.Generator().manual_seed(rows * cols)
    x = (torch.randn(rows, cols, generator=gen) * 5).to(dt)
    x[0, 0] = -1e4  # a very negative logit underflows to exactly 0
    y = torch.full((rows + 1, cols), 3.0, dtype=dt)
    grid, block = softmax.launch_geometry(spec, rows=rows, cols=cols)
    run(softmax.build(spec), grid, [x, y[:rows], rows, cols], block)
    ref = torch.softmax(x.float(), dim=1)
    np.testing.assert_allclose(y[:rows].float().numpy(), ref.numpy(), atol=SOFTMAX_ATOL[spec.dtype], rtol=0)
    assert torch.equal(y[rows], torch.full((cols,), 3.0, dtype=dt))
