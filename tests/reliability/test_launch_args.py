"""Launch arguments are checked against the kernel's declared signature before any work starts
(issue 10, catalog items 1 and 6). Every refused launch leaves every argument byte-identical."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from rocke.compiler import CompileCache, compile_ir
from rocke.dsl import Kernel, bf16, f16, f32
from rocke.runtime import launch
from rocke.runtime.signature import LaunchArgumentError, check_launch_args

from ._host_helpers import snapshot


def _scale_kernel(dtype, block=256, name="scale"):
    """The README's example: x[i] *= alpha for i < n."""
    k = Kernel(name, workgroup_size=block)
    x = k.arg_ptr("x", dtype)
    n = k.arg_i32("n")
    alpha = k.arg_f32("alpha")
    i = k.block_id(0) * block + k.thread_id(0)
    buf = x.buffer(n)
    buf.store(i, (buf.load(i).to(f32) * alpha).to(dtype))
    return k


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    store = CompileCache(tmp_path_factory.mktemp("cache"))
    out = {}
    for dt, name in ((f32, "scale_f32"), (f16, "scale_f16")):
        k = _scale_kernel(dt, name=name)
        out[dt.name] = compile_ir(k.ir(), name=k.name, cache=store)
    return out


def test_signature_is_in_the_code_object_metadata(kernels):
    info = kernels["f16"].info
    assert [(a.name, a.type_name) for a in info.explicit_args] == [("x", "f16*"), ("n", "i32"), ("alpha", "f32")]
    assert info.reqd_workgroup_size == (256, 1, 1)
    assert b"f16*" in kernels["f16"].code_object       # the linked code object carries it too


def test_int_for_f32_is_converted_exactly_and_runs(kernels):
    """Catalog 1: the README example with alpha=2 (an int) used to pack 2.8e-45."""
    x = torch.arange(1000, dtype=torch.float32)
    launch(kernels["f32"], grid=(4,), block=(256,), args=[x, 1000, 2])
    assert torch.equal(x, torch.arange(1000, dtype=torch.float32) * 2)
    converted = check_launch_args(kernels["f32"], (4,), (256,), [x, 1000, 2])
    assert converted[2] == 2.0 and type(converted[2]) is float and type(converted[1]) is int


def test_numpy_scalars_with_exact_values_are_accepted(kernels):
    x = torch.zeros(4)
    out = check_launch_args(kernels["f32"], 1, 256, [x, np.int64(4), np.float16(0.5)])
    assert out[1] == 4 and out[2] == np.float32(0.5)
    out = check_launch_args(kernels["f32"], 1, 256, [x, np.uint8(7), np.int16(-3)])
    assert out[1] == 7 and out[2] == -3.0


def test_python_float_rounds_to_f32(kernels):
    out = check_launch_args(kernels["f32"], 1, 256, [torch.zeros(4), 4, 0.1])
    assert out[2] == float(np.float32(0.1)) and out[2] != 0.1


BAD = [
    # (description, overrides, error words)
    ("float for i32", dict(args=1, value=1000.0), "pass an int, got float"),
    ("numpy float for i32", dict(args=1, value=np.float32(3)), "pass an int, got float32"),
    ("bool for i32", dict(args=1, value=True), "got a bool"),
    ("numpy bool for i32", dict(args=1, value=np.bool_(True)), "got a bool"),
    ("2**31 for i32", dict(args=1, value=2 ** 31), "outside the i32 range"),
    ("2**32 - 1 for i32", dict(args=1, value=2 ** 32 - 1), "outside the i32 range"),
    ("-2**31 - 1 for i32", dict(args=1, value=-2 ** 31 - 1), "outside the i32 range"),
    ("numpy u64 beyond i32", dict(args=1, value=np.uint64(2 ** 40)), "outside the i32 range"),
    ("str for i32", dict(args=1, value="1000"), "pass an int, got str"),
    ("None for i32", dict(args=1, value=None), "passed by value"),
    ("tensor for i32", dict(args=1, value=torch.tensor(3)), "passed by value"),
    ("inexact int for f32", dict(args=2, value=2 ** 24 + 1), "no exact f32 value"),
    ("huge int for f32", dict(args=2, value=10 ** 400), "no exact f32 value"),
    ("inexact numpy f64 for f32", dict(args=2, value=np.float64(0.1)), "no exact f32 value"),
    ("overflowing float for f32", dict(args=2, value=1e39), "overflows f32"),
    ("bool for f32", dict(args=2, value=False), "pass a float, got bool"),
    ("complex for f32", dict(args=2, value=1j), "pass a float, got complex"),
    ("f64 tensor for f32*", dict(args=0, value="f64"), "pass a torch.float32 tensor, got torch.float64"),
    ("numpy array for f32*", dict(args=0, value=np.zeros(4, np.float32)), "pass a torch tensor"),
    ("int address for f32*", dict(args=0, value=12345), "pass a torch tensor"),
    ("block 200 for a 256-thread kernel", dict(block=(200,)), "does not match"),
    ("block (16, 16) for a (256, 1, 1) kernel", dict(block=(16, 16)), "does not match"),
    ("block of 2048 threads", dict(block=(2048,)), "outside [1, 1025)"),
    ("float grid", dict(grid=(3.9,)), "must be ints"),
    ("zero grid", dict(grid=(0,)), "outside [1,"),
    ("4-D grid", dict(grid=(1, 1, 1, 1)), "1-3 ints"),
    ("grid beyond 2**32 work-items", dict(grid=(2 ** 24 + 1,)), "beyond the dispatch limit"),
    ("too few args", dict(drop=1), "takes 3 arguments"),
    ("args as a dict", dict(as_dict=True), "must be a list or tuple"),
]


@pytest.mark.parametrize("what,bad,words", BAD, ids=[b[0] for b in BAD])
def test_bad_launch_is_refused_and_nothing_changes(kernels, what, bad, words):
    x = torch.arange(8, dtype=torch.float32)
    args = [x, 8, 2.0]
    if "args" in bad:
        value = bad["value"]
        args[bad["args"]] = x.double() if isinstance(value, str) and value == "f64" else value
    if bad.get("drop"):
        args = args[:-bad["drop"]]
    grid, block = bad.get("grid", (1,)), bad.get("block", (256,))
    call_args = dict(enumerate(args)) if bad.get("as_dict") else args
    before = snapshot(args)
    with pytest.raises(LaunchArgumentError, match=re.escape(words)):
        launch(kernels["f32"], grid=grid, block=block, args=call_args)
    assert snapshot(args) == before


def test_f32_tensor_for_f16_pointer(kernels):
    """Catalog 6: f32 tensors for f16 pointers ran and returned garbage."""
    x = torch.ones(16, dtype=torch.float32)
    before = snapshot([x])
    with pytest.raises(LaunchArgumentError, match=r"argument 0 \(x: f16\*\) points to f16"):
        launch(kernels["f16"], grid=(1,), block=(256,), args=[x, 16, 2.0])
    assert snapshot([x]) == before


def test_meta_tensor_refused_for_the_emulator(kernels):
    x = torch.empty(16, dtype=torch.float32, device="meta")
    with pytest.raises(LaunchArgumentError, match="the emulator reads CPU tensors .*, got one on meta"):
        check_launch_args(kernels["f32"], 1, 256, [x, 16, 1.0])


def test_bf16_value_argument_is_packed_as_bf16(tmp_path):
    k = Kernel("fill_bf16", workgroup_size=64)
    y = k.arg_ptr("y", bf16)
    v = k.arg("v", bf16)
    y.buffer(64).store(k.thread_id(0), v)
    ck = compile_ir(k.ir(), name=k.name, cache=CompileCache(tmp_path))
    y_t = torch.zeros(64, dtype=torch.bfloat16)
    launch(ck, grid=1, block=64, args=[y_t, 1.5])
    assert torch.equal(y_t, torch.full((64,), 1.5, dtype=torch.bfloat16))
    with pytest.raises(LaunchArgumentError, match="int 257 has no exact bf16 value"):
        check_launch_args(ck, 1, 64, [y_t, 257])
    assert check_launch_args(ck, 1, 64, [y_t, 256])[1] == 0x4380    # 256.0 in bf16


def test_kernel_reading_y_ids_keeps_a_flat_workgroup_size(tmp_path):
    """A kernel that reads thread_id(1) is not pinned to (N, 1, 1): (16, 16) launches are valid."""
    k = Kernel("two_d", workgroup_size=256)
    y = k.arg_ptr("y", f32)
    y.buffer(256).store(k.thread_id(1) * 16 + k.thread_id(0), k.const(1.0, f32))
    ck = compile_ir(k.ir(), name=k.name, cache=CompileCache(tmp_path))
    assert ck.info.reqd_workgroup_size is None
    t = torch.zeros(256)
    launch(ck, grid=1, block=(16, 16), args=[t])
    assert torch.equal(t, torch.ones(256))


# ---- spec construction: hostile specs are refused in __post_init__, before any build ----------
from rocke.kernels.samples.flash_attention import FlashAttentionSpec   # noqa: E402
from rocke.kernels.samples.gemm import GemmSpec                         # noqa: E402
from rocke.kernels.samples.softmax import SoftmaxSpec                   # noqa: E402
from rocke.kernels.samples.vector_add import VectorAddSpec              # noqa: E402

BAD_SPECS = [
    (lambda: VectorAddSpec("f64"), "dtype: must be one of f16, bf16, f32, got 'f64'"),
    (lambda: VectorAddSpec("F32"), "dtype: must be one of"),
    (lambda: VectorAddSpec("f32", True), "vector_width: must be one of 1, 2, 4, 8, got True"),
    (lambda: VectorAddSpec("f32", np.int64(4)), "vector_width: must be one of"),
    (lambda: VectorAddSpec("f32", 8), "8 x f32 exceeds the 16-byte maximum"),
    (lambda: VectorAddSpec("f32", 4, 100), "block_size: 100 must be a multiple of 64"),
    (lambda: VectorAddSpec("f32", 4, 256.0), "block_size: must be an int in [64, 1024], got 256.0"),
    (lambda: SoftmaxSpec(rows_per="warp"), "rows_per: must be one of wave, workgroup"),
    (lambda: SoftmaxSpec(num_warps=3), "num_warps: must be one of 1, 2, 4, 8, 16, got 3"),
    (lambda: SoftmaxSpec(reduce_via="shfl"), "reduce_via: must be one of dpp, swizzle"),
    (lambda: GemmSpec(block_m=0), "block_m: must be a positive int, got 0"),
    (lambda: GemmSpec(block_k=12), "block_k: 12 must be a multiple of"),
    (lambda: GemmSpec(lds_pad=2), "lds_pad: 2 must be a multiple of 4"),
    (lambda: GemmSpec(dtype="f32"), "dtype: must be one of f16, bf16, got 'f32'"),
    (lambda: GemmSpec(block_m=1024, block_n=1024, block_k=8, num_warps=1, lds_pad=0),
     "each warp's fp32 C accumulators need 16384 registers per lane, gfx942 has 512"),
    (lambda: FlashAttentionSpec(head_dim=96), "head_dim: must be one of 64, 128, got 96"),
    (lambda: FlashAttentionSpec(causal=1), "causal: must be a bool, got 1"),
    (lambda: FlashAttentionSpec(block_n=24), "block_n: 24 must be a multiple of the atom's M (16)"),
    # used to be accepted, then the builder unrolled 15.6 million query fragments
    (lambda: FlashAttentionSpec(block_m=10 ** 9), "O^T and S^T accumulators need 750000000 registers"),
]


@pytest.mark.parametrize("make,words", BAD_SPECS, ids=[w[:40] for _, w in BAD_SPECS])
def test_hostile_spec_is_refused(make, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        make()


# ---- foreign kernels: no .type_name, so checks come from sizes and the metadata ----------------
from rocke.arch.abi import KernArg                                      # noqa: E402
from rocke.runtime.signature import declared_type                       # noqa: E402
from tests.compiler.test_compiler import SAXPY_IR                       # noqa: E402


@pytest.fixture(scope="module")
def saxpy(tmp_path_factory):
    return compile_ir(SAXPY_IR, name="saxpy", cache=CompileCache(tmp_path_factory.mktemp("c")))


def test_foreign_kernel_block_beyond_its_flat_maximum(saxpy):
    y, x = torch.zeros(4), torch.ones(4)
    before = snapshot([y, x])
    with pytest.raises(LaunchArgumentError, match=r"block \(256, 1, 1\) has 256 work-items, beyond kernel saxpy's maximum of 128"):
        launch(saxpy, (1,), (256,), [y, x, 2.0])
    assert snapshot([y, x]) == before


@pytest.mark.parametrize("value,words", [(True, "pass an int or a float, got bool"),
                                         ("2", "pass an int or a float, got str"),
                                         (2 ** 32, "does not fit in 4 bytes")])
def test_foreign_kernel_by_value_checked_by_size(saxpy, value, words):
    with pytest.raises(LaunchArgumentError, match=re.escape(words)):
        check_launch_args(saxpy, 1, 64, [torch.zeros(4), torch.zeros(4), value])


@pytest.mark.parametrize("type_name,want", [
    ("f16*", ("f16", True)), ("i32", ("i32", False)), ("float*", ("f32", True)),
    ("const float*", ("f32", True)), ("__half*", ("f16", True)), ("unsigned int", ("u32", False)),
    ("struct foo", (None, False)), (None, (None, False)),
])
def test_declared_type_reads_rocke_and_c_names(type_name, want):
    arg = KernArg("a", 0, 0, 8, "global_buffer" if want[1] else "by_value", type_name=type_name)
    assert declared_type(arg) == want


# ---- pointer element types that torch names differently ----------------------------------------
@pytest.fixture(scope="module")
def typed_pointers(tmp_path_factory):
    from rocke.dsl import fp8_e4m3fnuz, u8, u32
    k = Kernel("typed_ptrs", workgroup_size=64)
    p8 = k.arg_ptr("p8", fp8_e4m3fnuz, readonly=True)
    pu = k.arg_ptr("pu", u32)
    pu.buffer(64).store(k.thread_id(0), p8.buffer(64).load(k.thread_id(0)).bitcast(u8).to(u32))
    return compile_ir(k.ir(), name=k.name, cache=CompileCache(tmp_path_factory.mktemp("c")))


@pytest.mark.parametrize("p8,pu,ok", [
    (torch.uint8, torch.int32, True),                       # raw fp8 bytes; u32 as torch int32
    (torch.float8_e4m3fnuz, torch.uint32, True),
    (torch.float8_e5m2fnuz, torch.int32, False),            # the other fp8 format
    (torch.int8, torch.int32, False),
    (torch.uint8, torch.float32, False),                    # same width, but a float
    (torch.uint8, torch.int64, False),                      # an integer of another width
])
def test_pointer_types_with_other_torch_names(typed_pointers, p8, pu, ok):
    args = [torch.zeros(64, dtype=p8), torch.zeros(64, dtype=pu)]
    if ok:
        check_launch_args(typed_pointers, 1, 64, args)
    else:
        with pytest.raises(LaunchArgumentError, match="points to"):
            check_launch_args(typed_pointers, 1, 64, args)
