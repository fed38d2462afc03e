"""A ROCm torch surface over the stand-in libamdhip64, for tests and benchmarks on a CPU torch:
``RocmTensor`` is a view of stand-in device memory (hipMalloc'd) whose ``device`` reads
``cuda:0``; ``install`` sets ``torch.version.hip`` and points torch.cuda's device, stream,
capture flag and allocator at the stand-in. A test double, not a product."""
from __future__ import annotations

import types

import torch

from rocke import runtime
from rocke.runtime import hip_device

CUDA = torch.device("cuda", 0)


class RocmTensor(torch.Tensor):
    """A tensor in stand-in device memory that says it lives on a ROCm GPU. Its methods run as
    a plain tensor's (no __torch_function__ dispatch); views of it stay RocmTensors. ``device``
    and ``is_cuda`` are class attributes, not properties: a read costs about what a real tensor's
    C getter does, not a Python call. (torch's own getters still cost more on a subclass than on
    a real GPU tensor: each first looks the class's __torch_function__ up.)"""
    __torch_function__ = torch._C._disabled_torch_function_impl
    device = CUDA
    is_cuda = True
    is_cpu = False

    def __getitem__(self, index):
        return torch.Tensor.__getitem__(self, index).as_subclass(type(self))

    def view(self, *shape):
        return torch.Tensor.view(self, *shape).as_subclass(type(self))

    def expand(self, *shape):           # vLLM's descales: a layer's scale expanded per call
        return torch.Tensor.expand(self, *shape).as_subclass(type(self))


def to_device(standin, t, cls=RocmTensor):
    """A copy of CPU tensor ``t`` in stand-in device memory (hipMalloc), as ``cls``."""
    dev = runtime.get_device("hip")
    nbytes = max(1, t.numel() * t.element_size())
    buf = dev.alloc(nbytes)
    array = standin.allocations[buf.data_ptr()][0]
    flat = torch.from_numpy(array).view(t.dtype)[:t.numel()]
    flat.copy_(t.contiguous().reshape(-1))
    # the numpy array under `flat` keeps the allocation's memory alive (the stand-in frees
    # nothing behind it); no instance attribute: an instance dict would slow every torch getter
    # on the tensor (each first looks its class's __torch_function__ up through it), which a
    # real ROCm tensor does not pay
    return flat.view(t.shape).as_subclass(cls)


def install(standin, setattr_):
    """Fake a ROCm torch over ``standin`` with ``setattr_`` (e.g. pytest's monkeypatch.setattr,
    so the test undoes it). Returns the stand-in stream torch's current_stream() names."""
    setattr_(torch.version, "hip", "6.2.0", raising=False)
    setattr_(hip_device, "torch_rocm", lambda: True)
    setattr_(torch.cuda, "current_device", lambda: 0)
    stream = hip_device._call("hipStreamCreate")
    setattr_(torch.cuda, "current_stream",
             lambda device=None: types.SimpleNamespace(cuda_stream=int(stream)))
    setattr_(torch.cuda, "is_current_stream_capturing", lambda: False)
    setattr_(torch.cuda, "is_available", lambda: True)
    setattr_(torch.cuda, "synchronize", lambda *a: None)     # the stand-in runs launches at once
    real_empty = torch.empty

    def empty(*shape, dtype=None, device=None, **kw):     # torch's allocator on the GPU
        if device is not None and torch.device(device) == CUDA:
            return to_device(standin, real_empty(*shape, dtype=dtype))
        return real_empty(*shape, dtype=dtype, device=device, **kw)
    setattr_(torch, "empty", empty)
    return int(stream)
