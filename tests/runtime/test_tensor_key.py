"""rocke's native tensor key (rocke/runtime/tensor_key.cpp) tells tensors apart exactly as torch's
own getters do: two tuples of tensors get the same native key exactly when every tensor has the
same class, address, shape, dtype, device and strides (what the call cache's Python path reads
with data_ptr, shape, dtype, device, get_device and stride)."""
from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
import torch

from rocke.runtime import tensor_key


class Marked(torch.Tensor):          # a tensor class of the caller's
    __torch_function__ = torch._C._disabled_torch_function_impl


def _getters(tensors: tuple) -> tuple:
    """What torch's Python getters say of each tensor."""
    return tuple((type(t), t.data_ptr(), tuple(t.shape), t.dtype, t.device, t.stride())
                 for t in tensors)


def _tensors() -> list:
    base = torch.arange(48, dtype=torch.float32).reshape(4, 12)
    return [
        base, base.clone(),                          # another address
        base.view(torch.int32),                      # another dtype, same address
        base.view(4, 3, 4),                          # another shape, same address
        base.t(), base.t().contiguous(),             # strides
        base[1:], base[:, 1:],                       # offsets into the same storage
        base[:0],                                    # empty
        base.view(48)[5],                            # 0-dim
        base.as_subclass(Marked),                    # another class, same everything else
        torch.empty(4, 12, device="meta"),           # another device, address 0
        base.to(torch.float16),
        base.unsqueeze(0).expand(3, 4, 12),          # zero stride
    ]


@pytest.fixture(scope="module")
def native():
    found = tensor_key.native()
    assert found is not None, ("the native tensor key is not built: run `python -m "
                               "rocke.runtime.tensor_key --build` (the set-up does)")
    return found


def test_the_native_key_distinguishes_exactly_what_torch_s_getters_do(native):
    tensors = _tensors()
    for a, b in itertools.product(tensors, repeat=2):
        same_native = native((a,)) == native((b,))
        same_getters = _getters((a,)) == _getters((b,))
        assert same_native == same_getters, (a.shape, a.stride(), b.shape, b.stride())
    # a tuple is keyed in order, its hash a function of its bytes
    assert native((tensors[0], tensors[1])) != native((tensors[1], tensors[0]))
    assert native(tuple(tensors)) == native(tuple(tensors))


def test_the_native_key_follows_an_in_place_change_of_a_tensor(native):
    t = torch.zeros(4, 8)
    before = native((t,))
    t.transpose_(0, 1)
    assert native((t,)) != before
    transposed = native((t,))
    t.data = torch.zeros(8, 4)          # set_data: neither _version nor the object changes
    assert native((t,)) not in (before, transposed)


@pytest.mark.parametrize("what", ["not a tensor", "sparse", "too many", "too many dims"])
def test_what_the_native_key_cannot_key_is_none(native, what):
    tensors = {"not a tensor": (torch.zeros(2), 3),
               "sparse": (torch.zeros(3, 4).to_sparse(),),
               "too many": tuple(torch.zeros(1) for _ in range(17)),
               "too many dims": (torch.zeros([1] * 9),)}[what]
    assert native(tensors) is None


def test_a_list_is_refused_by_name(native):
    with pytest.raises(TypeError, match="tuple of tensors"):
        native([torch.zeros(2)])


def test_the_helper_is_found_only_for_its_own_torch_python_and_source(monkeypatch, tmp_path):
    built = tensor_key.built_path()
    assert torch.__version__ in str(built) and sys.implementation.cache_tag in str(built)
    edited = tmp_path / "tensor_key.cpp"
    edited.write_bytes(tensor_key.SOURCE.read_bytes() + b"\n// edited\n")
    monkeypatch.setattr(tensor_key, "SOURCE", edited)
    assert tensor_key.built_path() != built and not tensor_key.built_path().exists()


def test_rocke_native_key_off_uses_torch_s_getters(monkeypatch):
    monkeypatch.setenv("ROCKE_NATIVE_KEY", "off")
    try:
        assert tensor_key.native(reload=True) is None
        done = subprocess.run([sys.executable, "-m", "rocke.runtime.tensor_key", "--check"],
                              capture_output=True, text=True)
        assert done.returncode == 1 and "ROCKE_NATIVE_KEY=off" in done.stdout
    finally:
        monkeypatch.delenv("ROCKE_NATIVE_KEY")
        assert tensor_key.native(reload=True) is not None


def test_a_failed_build_names_the_compiler_and_leaves_nothing_behind(monkeypatch, tmp_path):
    monkeypatch.setattr(tensor_key, "NATIVE_DIR", tmp_path / "native")
    monkeypatch.setenv("CXX", "false")              # a compiler that always fails
    with pytest.raises(RuntimeError, match="false .*failed"):
        tensor_key.build(quiet=True)
    assert not list((tmp_path / "native").rglob("*.so*"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):
        tensor_key.build(quiet=True)
