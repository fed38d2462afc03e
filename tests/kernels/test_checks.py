"""Direct tests of the spec / launch-input validation helpers in rocke.kernels.common.checks."""

import re

import pytest
import torch

from rocke.kernels.common import checks

GFX942_LDS_BYTES = 64 * 1024


def _raises(message, fn, *args, **kwargs):
    """``fn`` raises ValueError and its message contains ``message`` literally."""
    with pytest.raises(ValueError, match=re.escape(message)):
        fn(*args, **kwargs)


def test_check_choice():
    checks.check_choice("dtype", "bf16", ("f16", "bf16"))
    checks.check_choice("num_warps", 4, (1, 2, 4, 8))
    _raises("dtype: must be one of f16, bf16, got 'f32'", checks.check_choice, "dtype", "f32", ("f16", "bf16"))
    _raises("num_warps: must be one of 1, 2, 4, 8, got 3", checks.check_choice, "num_warps", 3, (1, 2, 4, 8))
    # equal but of another type: a bool is not an int, a float is not an int
    _raises("num_warps: must be one of 1, 2, 4, 8, got True", checks.check_choice, "num_warps", True, (1, 2, 4, 8))
    _raises("got 4.0", checks.check_choice, "num_warps", 4.0, (1, 2, 4, 8))


def test_check_bool():
    checks.check_bool("causal", False)
    _raises("causal: must be a bool, got 1", checks.check_bool, "causal", 1)


def test_check_positive_int():
    checks.check_positive_int("block_m", 1)
    checks.check_positive_int("lds_pad", 0, allow_zero=True)
    _raises("block_m: must be a positive int, got 0", checks.check_positive_int, "block_m", 0)
    _raises("block_m: must be a positive int, got True", checks.check_positive_int, "block_m", True)
    _raises("block_m: must be a positive int, got 64.0", checks.check_positive_int, "block_m", 64.0)
    _raises("lds_pad: must be a non-negative int, got -4", checks.check_positive_int, "lds_pad", -4,
            allow_zero=True)


def test_check_int_range():
    checks.check_int_range("block_size", 64, 64, 1024)
    checks.check_int_range("block_size", 1024, 64, 1024)
    _raises("block_size: must be an int in [64, 1024], got 1088", checks.check_int_range, "block_size", 1088, 64, 1024)
    _raises("got 32", checks.check_int_range, "block_size", 32, 64, 1024)
    _raises("got '256'", checks.check_int_range, "block_size", "256", 64, 1024)


def test_check_multiple():
    checks.check_multiple("block_k", 48, 8)
    _raises("block_k: 12 must be a multiple of 8", checks.check_multiple, "block_k", 12, 8)
    _raises("block_m: 48 must be a multiple of warps_m (2) x the atom's M (32)",
            checks.check_multiple, "block_m", 48, 64, of="warps_m (2) x the atom's M (32)")
    _raises("lds_pad: 2 must be a multiple of 4, because reads are 8 bytes",
            checks.check_multiple, "lds_pad", 2, 4, because="reads are 8 bytes")


def test_check_vector_access():
    checks.check_vector_access("vector_width", 8, "f16")     # 16 bytes
    checks.check_vector_access("vector_width", 4, "f32")     # 16 bytes
    _raises("vector_width: 8 x f32 exceeds the 16-byte maximum of one buffer access",
            checks.check_vector_access, "vector_width", 8, "f32")


def test_check_lds_budget():
    checks.check_lds_budget("block_n", GFX942_LDS_BYTES, "the K tile")
    _raises(f"block_n: the K tile need {GFX942_LDS_BYTES + 1} bytes of LDS, gfx942 has {GFX942_LDS_BYTES}",
            checks.check_lds_budget, "block_n", GFX942_LDS_BYTES + 1, "the K tile")


def test_check_extent():
    checks.check_extent("n", 1)
    checks.check_extent("n", 2 ** 31 - 1)
    for bad in (0, 2 ** 31, -5, True, 3.0, None):
        _raises(f"n: must be an int in [1, 2**31), got {bad!r}", checks.check_extent, "n", bad)


def test_check_index_and_grid_extent():
    checks.check_index_extent("rows * cols", 2 ** 31 - 1)
    _raises("rows * cols: 2147483648 elements exceed the kernel's 32-bit indexing",
            checks.check_index_extent, "rows * cols", 2 ** 31)
    checks.check_grid_extent("B * H", 2 ** 31 - 1, axis="y")
    _raises("B * H: 2147483648 workgroups exceed the grid's y range", checks.check_grid_extent,
            "B * H", 2 ** 31, axis="y")


def test_check_buffer_bytes():
    checks.check_buffer_bytes("q", 2 ** 31 - 1, "one head")
    _raises("q: one head spans 2147483648 bytes, beyond the 2 GiB range", checks.check_buffer_bytes,
            "q", 2 ** 31, "one head")


def test_torch_dtype():
    assert checks.torch_dtype("f16") is torch.float16
    assert checks.torch_dtype("bf16") is torch.bfloat16
    assert checks.torch_dtype("f32") is torch.float32


def test_check_tensor_accepts_matching_tensors():
    checks.check_tensor("q", torch.zeros(1, 2, 3, 4, dtype=torch.float16), dtype="f16", dims=("B", "H", "S", "D"))
    # a padded leading dimension (lda = 8 > K = 5) is fine when contiguity is not required
    padded = torch.zeros(4, 8, dtype=torch.bfloat16)[:, :5]
    checks.check_tensor("a", padded, dtype="bf16", dims=("M", "K"), contiguous=False)


def test_check_tensor_rejects_bad_tensors():
    t = torch.zeros(4, 8, dtype=torch.float16)
    _raises("a: must be a 2-D [M, K] torch tensor, got ndarray", checks.check_tensor, "a", t.numpy(),
            dtype="f16", dims=("M", "K"))
    _raises("a: must be a 2-D [M, K] torch tensor, got 3-D tensor", checks.check_tensor, "a", t[None],
            dtype="f16", dims=("M", "K"))
    _raises("a: dtype must be torch.float16, got torch.float32", checks.check_tensor, "a", t.float(),
            dtype="f16", dims=("M", "K"))
    _raises("a: must be contiguous, got strides (1, 8)", checks.check_tensor, "a", t.t(),
            dtype="f16", dims=("M", "K"))
    _raises("a: must be row-major with unit column stride, got strides (1, 8)", checks.check_tensor, "a", t.t(),
            dtype="f16", dims=("M", "K"), contiguous=False)
    # rows overlapping (leading dimension 2 < row length 8) are not row-major either
    overlapping = torch.zeros(64, dtype=torch.float16).as_strided((4, 8), (2, 1))
    _raises("a: must be row-major with unit column stride, got strides (2, 1)", checks.check_tensor, "a",
            overlapping, dtype="f16", dims=("M", "K"), contiguous=False)


def test_check_tensor_buffer_range():
    # meta tensors carry shape and strides without memory: 2**15 x 2**15 f16 is exactly 2 GiB
    huge = torch.empty(2 ** 15, 2 ** 15, dtype=torch.float16, device="meta")
    _raises("a: the [32768, 32768] tensor spans 2147483648 bytes, beyond the 2 GiB range of one buffer resource",
            checks.check_tensor, "a", huge, dtype="f16", dims=("M", "K"))
    checks.check_tensor("a", huge, dtype="f16", dims=("M", "K"), one_buffer=False)
    checks.check_tensor("a", huge[:-1], dtype="f16", dims=("M", "K"))
