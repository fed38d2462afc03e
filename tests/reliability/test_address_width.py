"""Address-width audit of every shipped sample family (issue 10 catalog 3 and 4): the host checks
refuse exactly the problems whose address arithmetic (32-bit num_records, i32 indices and head
offsets) would wrap, accept the largest that does not, and are tested at each limit with meta
tensors (shape and strides, no memory) -- nothing here allocates more than a few KiB."""
from __future__ import annotations

import re

import pytest
import torch

from rocke.compiler import CompileCache
from rocke.kernels.registry import get_variant
from rocke.kernels.samples import flash_attention as fa
from rocke.kernels.samples import gemm, softmax, vector_add
from rocke.runtime import launch

from ._host_helpers import snapshot

I32_MAX = 2 ** 31 - 1


def meta(shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


def refused(fn, words, *args, **kw):
    with pytest.raises(ValueError, match=re.escape(words)):
        fn(*args, **kw)


def accepted_up_to_the_device(fn, *args):
    """kernel_args on meta tensors: every shape/width check passes, only the device is refused."""
    with pytest.raises(ValueError, match="must be on the CPU .emulator. or a GPU .HIP., got device meta"):
        fn(*args)


# ---- vector_add: num_records = n * element size (32-bit); first + width is i32 ----------------
F32 = vector_add.VARIANTS["f32_v4"]
F16 = vector_add.VARIANTS["f16_v8"]


def test_vector_add_f32_limit_is_num_records():
    vector_add.check_problem(F32, n=2 ** 30 - 1)                    # 2**32 - 4 bytes
    refused(vector_add.check_problem, "spans 4294967296 bytes", F32, n=2 ** 30)
    t = meta(2 ** 30, torch.float32)
    refused(vector_add.kernel_args, "n: each 1073741824-element f32 buffer spans 4294967296 bytes", F32, t, t, t)
    refused(vector_add.launch_geometry, "below 2**32", F32, n=2 ** 30)
    t = meta(2 ** 30 - 1, torch.float32)
    accepted_up_to_the_device(vector_add.kernel_args, F32, t, t, t)


def test_vector_add_f16_limit_is_the_i32_thread_index():
    per_block = F16.block_size * F16.vector_width                   # 2048 elements per workgroup
    vector_add.check_problem(F16, n=2 ** 31 - per_block)
    refused(vector_add.check_problem, "the last thread's first element + vector_width = 2147483648",
            F16, n=2 ** 31 - per_block + 1)


@pytest.fixture(scope="module")
def f32_vector_add(tmp_path_factory):
    return get_variant("vector_add/f32_v4").compile(cache=CompileCache(tmp_path_factory.mktemp("c")))


def test_vector_add_at_the_limit_addresses_correctly_and_past_it_wraps(f32_vector_add):
    """The kernel itself on the emulator, one workgroup over small tensors: n = 2**30 - 1 (the
    largest accepted) adds correctly; n = 2**30 (refused by the host check) wraps num_records
    to 0, so the launch reads zeros and drops every store -- the silent no-op of catalog 4."""
    a = torch.arange(1024, dtype=torch.float32)
    b = torch.full((1024,), 0.5)
    c = torch.zeros(1024)
    launch(f32_vector_add, (1,), (256,), [a, b, c, 2 ** 30 - 1])
    assert torch.equal(c, a + b)
    c.zero_()
    launch(f32_vector_add, (1,), (256,), [a, b, c, 2 ** 30])
    assert torch.equal(c, torch.zeros(1024))


@pytest.mark.parametrize("bad,words", [
    (lambda t: (t.double(), t, t), "a: dtype must be torch.float32, got torch.float64"),
    (lambda t: (t, t[:-1], t), "b: shape (63,) differs from a's (64,)"),
    (lambda t: (t, t, t.view(8, 8)), "c: must be a 1-D [n] torch tensor, got 2-D tensor"),
    (lambda t: (t, t[::2], t[::2]), "b: must be contiguous, got strides (2,)"),
    (lambda t: (t[::2], t[::2], t[::2]), "a: must be contiguous, got strides (2,)"),
    (lambda t: (t, t, t.to("meta")), "tensor must be on the CPU"),
    (lambda t: (t[:0], t[:0], t[:0]), "n: must be an int in [1, 2**31)"),
    (lambda t: (t.numpy(), t, t), "a: must be a 1-D [n] torch tensor, got ndarray"),
])
def test_vector_add_kernel_args_refuses(bad, words):
    t = torch.zeros(64)
    args = bad(t)
    before = snapshot([x for x in args if hasattr(x, "untyped_storage") and x.device.type == "cpu"])
    refused(vector_add.kernel_args, words, F32, *args)
    assert snapshot([x for x in args if hasattr(x, "untyped_storage") and x.device.type == "cpu"]) == before


# ---- softmax: row start (rows - 1) * cols is i32; a row's num_records; the column loop ----------
SM_F32 = softmax.VARIANTS["f32_wave"]      # 2 warps, vector 4: chunk = 256 columns
SM_F16 = softmax.VARIANTS["f16_wave"]      # 4 warps, vector 2: chunk = 128 columns


def test_softmax_f32_row_extent_limit():
    softmax.check_problem(SM_F32, rows=1, cols=2 ** 30 - 1)
    refused(softmax.check_problem, "one 1073741824-element f32 row spans 4294967296 bytes", SM_F32,
            rows=1, cols=2 ** 30)


def test_softmax_row_start_limit():
    cols = 2 ** 16
    softmax.check_problem(SM_F16, rows=2 ** 15, cols=cols)          # (2**15 - 1) * 2**16 < 2**31
    refused(softmax.check_problem, "(rows - 1) * cols = 2147483648", SM_F16, rows=2 ** 15 + 1, cols=cols)
    x = meta((2 ** 15 + 1, cols), torch.float16)
    refused(softmax.kernel_args, "rows * cols: the kernel computes the last row's start", SM_F16, x, x)
    x = meta((2 ** 15, cols), torch.float16)
    accepted_up_to_the_device(softmax.kernel_args, SM_F16, x, x)


def test_softmax_column_loop_limit():
    largest = 2 ** 31 - 128                                         # a whole number of 128-column chunks
    softmax.check_problem(SM_F16, rows=1, cols=largest)
    refused(softmax.check_problem, "the column loop's last step (cols rounded up to 128) = 2147483648",
            SM_F16, rows=1, cols=largest + 1)


def test_softmax_kernel_args_refuses_mismatch_and_strides():
    x = torch.zeros(4, 8, dtype=torch.float16)
    refused(softmax.kernel_args, "y: shape (4, 7) differs", SM_F16, x, torch.zeros(4, 7, dtype=torch.float16))
    refused(softmax.kernel_args, "x: must be contiguous", SM_F16, x.t(), torch.zeros(8, 4, dtype=torch.float16))
    refused(softmax.kernel_args, "y: dtype must be torch.float16, got torch.bfloat16", SM_F16, x,
            torch.zeros(4, 8, dtype=torch.bfloat16))
    assert softmax.kernel_args(SM_F16, x, x.clone())[2:] == [4, 8]


# ---- gemm: rows * ld extents are i32; B^T staging past K must not wrap ---------------------------
GEMM = gemm.VARIANTS["f16_32x32x8"]        # block 64 x 64 x 32


def test_gemm_extent_limit():
    gemm.check_problem(GEMM, M=2 ** 15, N=64, K=2 ** 16 - 1, lda=2 ** 16 - 1, ldb=64, ldc=64)
    refused(gemm.check_problem, "a: the kernel computes its buffer extent M * lda = 2147483648", GEMM,
            M=2 ** 15, N=64, K=2 ** 16, lda=2 ** 16, ldb=64, ldc=64)


def test_gemm_b_staging_past_k_limit():
    """K = 1 with a wide B: the B^T staging reads rows 1..31 (K rounded up to block_k) at
    row * ldb, which wrapped back into B for ldb > 2**26 while B itself is only 128 MiB."""
    n = 2 ** 26
    gemm.check_problem(GEMM, M=1, N=n, K=1, lda=1, ldb=n, ldc=n)    # 31 * 2**26 + 2**26 - 1 = 2**31 - 1
    refused(gemm.check_problem, "the largest staged B index (K rounded up to 32 - 1) * ldb + N - 1 = 2147483679",
            GEMM, M=1, N=n + 1, K=1, lda=1, ldb=n + 1, ldc=n + 1)
    a, b, c = meta((1, 1), torch.float16), meta((1, n + 1), torch.float16), meta((1, n + 1), torch.float16)
    refused(gemm.kernel_args, "b: the kernel computes the largest staged B index", GEMM, a, b, c)
    accepted_up_to_the_device(gemm.kernel_args, GEMM, a, meta((1, n), torch.float16), meta((1, n), torch.float16))


def test_gemm_padded_leading_dimension_counts():
    a = torch.empty(0, dtype=torch.float16).new_empty((4, 64), device="meta")[:, :8]   # lda 64
    assert a.stride(0) == 64
    refused(gemm.kernel_args, "must be on the CPU", GEMM, a, meta((8, 8), torch.float16), meta((4, 8), torch.float16))


def test_gemm_devices_must_match():
    a = torch.zeros(4, 8, dtype=torch.float16)
    refused(gemm.kernel_args, "must be on the CPU", GEMM, a, meta((8, 8), torch.float16), torch.zeros(4, 8, dtype=torch.float16))


# ---- flash attention: the head offset (B*H - 1) * S * D is an i32 s_mul_i32 --------------------
FA = fa.VARIANTS["f16_d128_causal"]        # D 128, block_n 32


def test_flash_attention_head_offset_limit():
    """Catalog 3: tensors past 2**31 elements were accepted while the head offset is 32-bit."""
    S, D = 4096, 128                                                # one head = 2**19 elements
    fa.check_problem(FA, B=1, H=4096, S=S)                          # last head starts at 2**31 - 2**19
    refused(fa.check_problem, "the last head's start (B * H - 1) * S * D = 2147483648", FA, B=1, H=4097, S=S)
    refused(fa.check_problem, "(B * H - 1) * S * D = 2147483648", FA, B=4097, H=1, S=S)
    q = meta((1, 4097, S, D), torch.float16)
    before = (q.shape, q.stride())
    refused(fa.kernel_args, "B * H: the kernel computes the last head's start", FA, q, q, q, q)
    assert (q.shape, q.stride()) == before
    q = meta((1, 4096, S, D), torch.float16)
    accepted_up_to_the_device(fa.kernel_args, FA, q, q, q, q)


def test_flash_attention_in_head_limit():
    """One head's extent S * D * 2 bytes is the binding 32-bit limit (num_records); the staged
    K/V index (S rounded up to block_n) * D - 1 is i32 and is checked too."""
    fa.check_problem(FA, B=1, H=1, S=2 ** 24 - 1)                   # (2**24 - 1) * 256 B < 2**32
    refused(fa.check_problem, "one head's S x D slice spans 4294967296 bytes", FA, B=1, H=1, S=2 ** 24)
    refused(fa.check_problem, "the largest staged K/V index (S rounded up to 32) * D - 1 = 2147487743",
            FA, B=1, H=1, S=2 ** 24 + 1)


@pytest.mark.parametrize("scale,words", [(float("nan"), "sm_scale: must be a finite number"),
                                          ("0.1", "sm_scale: must be a finite number"),
                                          (True, "sm_scale: must be a finite number")])
def test_flash_attention_bad_scale(scale, words):
    q = torch.zeros(1, 1, 4, 128, dtype=torch.float16)
    refused(fa.kernel_args, words, FA, q, q, q, q, scale)
