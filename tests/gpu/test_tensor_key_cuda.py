"""The native tensor key (rocke/runtime/tensor_key.cpp) on real CUDA tensors: it tells them apart
exactly as torch's getters do (device index and type included), so a call cache hit on a GPU
means what it means on the host. Needs an NVIDIA CUDA GPU and the helper built there
(``python -m rocke.runtime.tensor_key --build``); CI has no GPU: these tests skip there."""
from __future__ import annotations

import itertools

import pytest
import torch

from rocke.runtime import tensor_key

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
    reason="needs an NVIDIA CUDA GPU; CI has none")


def _getters(t) -> tuple:
    return (type(t), t.data_ptr(), tuple(t.shape), t.dtype, t.device, t.stride())


def test_the_native_key_tells_cuda_tensors_apart_as_torch_does():
    native = tensor_key.native()
    assert native is not None, "build it first: python -m rocke.runtime.tensor_key --build"
    base = torch.arange(48, dtype=torch.float32, device="cuda").reshape(4, 12)
    host = base.cpu()
    tensors = [base, base.clone(), base.view(torch.int32), base.t(), base[1:], base[:0],
               base.to(torch.bfloat16), torch.ones((), device="cuda").expand(4, 2), host,
               host.view(torch.int32)]
    if torch.cuda.device_count() > 1:
        tensors.append(base.to("cuda:1"))
    for a, b in itertools.product(tensors, repeat=2):
        assert (native((a,)) == native((b,))) == (_getters(a) == _getters(b))
