"""A kernel reads memory as laid out: ``runtime.launch`` refuses a non-contiguous view for a
plain pointer argument, naming the kernel, the argument, its shape and strides (reliability
round 4: ``q = big[..., :64]`` ran and gave max error 1.04). A pointer declared
``arg_ptr(..., strided=True)`` -- the kernel takes the strides as arguments, as the attention
kernels do -- accepts any view. Refused launches leave every argument byte-identical."""
from __future__ import annotations

import re

import pytest
import torch

from rocke.arch.abi import KernArg
from rocke.compiler import CompileCache, compile_ir
from rocke.dsl import Kernel, f32
from rocke.runtime import launch
from rocke.runtime import signature
from rocke.runtime.signature import LaunchArgumentError, check_launch_args, declared_type

from ._host_helpers import snapshot

COLS = 64


def _scale_rows(strided: bool):
    """x[r, c] *= alpha for r < rows, c < 64; x's rows are ``ld`` elements apart. The plain
    kernel indexes x as written (row r at r * 64): it is the one that must see contiguous x."""
    k = Kernel("scale_rows_strided" if strided else "scale_rows", workgroup_size=256)
    x = k.arg_ptr("x", f32, strided=True) if strided else k.arg_ptr("x", f32)
    rows, ld, alpha = k.arg_i32("rows"), k.arg_i32("ld"), k.arg_f32("alpha")
    i = k.block_id(0) * 256 + k.thread_id(0)
    r, c = i // COLS, i % COLS
    where = r * ld + c if strided else i
    buf = x.buffer(rows * ld if strided else rows * COLS)
    with k.if_(r < rows):
        buf.store(where, buf.load(where) * alpha)
    return k


class _Kernels:
    """The plain (False) and strided (True) kernels, each compiled on first use."""

    def __init__(self, store):
        self.store, self.built = store, {}

    def __getitem__(self, strided: bool):
        if strided not in self.built:
            k = _scale_rows(strided)
            self.built[strided] = compile_ir(k.ir(), name=k.name, cache=self.store)
        return self.built[strided]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return _Kernels(CompileCache(tmp_path_factory.mktemp("cache")))


def _views():
    big = torch.arange(4 * 128, dtype=torch.float32).reshape(4, 128)
    return {
        "column slice": (big, lambda t: t[..., :COLS]),                 # the q = big[..., :64]
        "transpose": (torch.arange(64 * 4, dtype=torch.float32).reshape(64, 4), lambda t: t.t()),
        "every other row": (torch.arange(8 * 64, dtype=torch.float32).reshape(8, 64), lambda t: t[::2]),
        "expand": (torch.arange(64, dtype=torch.float32), lambda t: t.expand(4, COLS)),
    }


@pytest.mark.parametrize("what", list(_views()))
def test_non_contiguous_view_for_a_plain_pointer_is_refused(kernels, what):
    base, make = _views()[what]
    x = make(base)
    assert not x.is_contiguous() and tuple(x.shape) == (4, COLS)
    before = snapshot([base])
    words = (f"kernel scale_rows: argument 0 (x: f32*) reads its tensor as laid out in memory "
             f"(row-major, contiguous), got a non-contiguous view of shape [4, 64] with strides "
             f"{tuple(x.stride())}")
    with pytest.raises(LaunchArgumentError, match=re.escape(words)):
        launch(kernels[False], (1,), (256,), [x, 4, COLS, 2.0])
    assert snapshot([base]) == before          # nothing ran
    with pytest.raises(LaunchArgumentError, match="strided=True"):
        check_launch_args(kernels[False], (1,), (256,), [x, 4, COLS, 2.0])


def test_contiguous_tensors_and_contiguous_views_still_run(kernels):
    big = torch.arange(8 * COLS, dtype=torch.float32).reshape(8, COLS)
    want = big.clone()
    want[2:6] *= 2
    launch(kernels[False], (1,), (256,), [big[2:6], 4, COLS, 2.0])     # a row range: contiguous
    assert torch.equal(big, want)
    one = torch.arange(3 * COLS, dtype=torch.float32).reshape(3, 1, COLS).transpose(0, 1)[0]
    assert one.is_contiguous()                 # size-1 dimensions' strides do not matter
    check_launch_args(kernels[False], (1,), (256,), [one, 3, COLS, 2.0])


def test_strided_pointer_accepts_the_view_and_reads_it_through_its_strides(kernels):
    info = kernels[True].info
    assert [(a.name, a.type_name) for a in info.explicit_args][0] == ("x", "strided f32*")
    assert b"strided f32*" in kernels[True].code_object
    big = torch.arange(4 * 128, dtype=torch.float32).reshape(4, 128)
    want = big.clone()
    want[:, :COLS] *= 2
    q = big[..., :COLS]
    launch(kernels[True], (1,), (256,), [q, 4, q.stride(0), 2.0])
    assert torch.equal(big, want)


@pytest.mark.parametrize("type_name,contiguous,dtype", [
    ("f16*", True, "f16"), ("strided f16*", False, "f16"), ("const float*", True, "f32"),
    ("strided i32*", False, "i32"), ("i32", False, "i32"), (None, False, None),
])
def test_strided_is_read_from_the_type_name(type_name, contiguous, dtype):
    pointer = bool(type_name) and type_name.endswith("*")
    arg = KernArg("a", 0, 0, 8, "global_buffer" if pointer else "by_value", type_name=type_name)
    assert signature.contiguous_only(arg) is contiguous
    assert declared_type(arg) == (dtype, pointer)


def test_strided_must_be_a_bool():
    k = Kernel("bad_strided", workgroup_size=64)
    with pytest.raises(ValueError, match="strided must be a bool, got 1"):
        k.arg_ptr("x", f32, strided=1)


@pytest.mark.parametrize("backend", ["2d", "3d"])
def test_attention_takes_vllm_views_through_its_strided_pointers(backend):
    """The shipped attention path: q a view of a wider qkv tensor, out a view of a wider buffer,
    descales a stride-0 expand (vLLM's), a block table with padding columns -- all strided
    pointers, so the launches run, and the result is right."""
    from rocke.kernels.common import attention_unified as au
    from rocke.kernels.common.attention_reference import ref_paged_attn
    from rocke.kernels.common.tolerances import attention_atol
    from tests.kernels.unified_inputs import make_inputs

    args = make_inputs([(3, 20), (1, 33)], hq=4, hk=2, d=64, bs=16, dtype="f16", seed=4, q_view=True)
    wide_out = torch.full((args["q"].shape[0], 6, 64), 7.0, dtype=torch.float16)
    args["out"] = wide_out[:, 1:5]
    assert not args["q"].is_contiguous() and not args["out"].is_contiguous()
    record = au.run_unified_attention_torch(**args, backend=backend)
    names = {a.name: a.type_name for spec in record.plan.specs
             for a in au.compiled(spec).info.explicit_args}
    assert names["q"] == "strided f16*" and names["out"] == "strided f16*"
    ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["seqused_k"],
                         args["block_table"], args["softmax_scale"])
    assert (args["out"].float() - ref).abs().max().item() <= attention_atol("f16")
    assert bool((wide_out[:, 0] == 7).all()) and bool((wide_out[:, 5] == 7).all())   # untouched


def test_shipped_strided_kernels_declare_their_views():
    """The kernels that take strides declare them; the others take contiguous tensors."""
    from rocke.kernels.common import metadata_guard
    from rocke.kernels.gfx942 import reduce_segments
    from rocke.kernels.samples import gemm, vector_add

    def strided(k):
        return {a.name for a in k.args if a.strided}
    guard = metadata_guard.build(next(iter(metadata_guard.VARIANTS.values())))
    assert strided(guard) == {"block_table"}
    reduce = reduce_segments.build(next(iter(reduce_segments.VARIANTS.values())))
    assert strided(reduce) == {"out"}
    assert strided(gemm.build(next(iter(gemm.VARIANTS.values())))) == {"a", "b", "c"}
    assert strided(vector_add.build(next(iter(vector_add.VARIANTS.values())))) == set()
