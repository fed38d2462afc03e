"""Structured carries: dicts, dataclasses and nested lists of Values and tiles go through
for_range / if_ / if_else and come back with the same structure; the IR is the same as the
equivalent flat-list carry; a yield of another structure names the item's path."""

import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from rocke import dsl
from rocke.dsl.fragment import COL, AxisVector, load_fragment_global, store_axis, store_fragment_global

from .emu_helper import run


@dataclass
class Running:
    best: AxisVector
    count: dsl.Value
    note: None = None


def _build(structured: bool):
    k = dsl.Kernel("carry_tree", workgroup_size=64)
    a, bt, out, best_out, n_out = (k.arg_ptr(n, t) for n, t in
                                   (("a", "f16"), ("bt", "f16"), ("out", "f32"), ("best", "f32"), ("n_out", "i32")))
    n = k.arg_i32("n")
    mma = k.mfma("16x16x16", "f16")
    fa = load_fragment_global(a.buffer(256), mma.A, (0, 0), 16)
    fb = load_fragment_global(bt.buffer(256), mma.B, (0, 0), 16, transposed=True)
    best0 = AxisVector.full(k, mma.C, COL, dsl.f32, -1e30)
    if structured:
        carry = {"acc": [mma.zeros(), mma.zeros()], "run": Running(best0, k.const(0, dsl.i32))}
        with k.for_range(0, n, 1, carry=carry) as loop:
            st = loop.carry
            acc0 = mma(fa, fb, st["acc"][0])
            acc1 = st["acc"][1] + acc0
            loop.yield_({"acc": [acc0, acc1],
                         "run": Running(st["run"].best.maximum(acc0.reduce(COL, "max")), st["run"].count + 1)})
        acc0, acc1 = loop.results["acc"]
        run_ = loop.results["run"]
        best, count = run_.best, run_.count
        assert run_.note is None
    else:
        with k.for_range(0, n, 1, carry=[mma.zeros(), mma.zeros(), best0, k.const(0, dsl.i32)]) as loop:
            a0, a1, b, c = loop.carry
            acc0 = mma(fa, fb, a0)
            loop.yield_(acc0, a1 + acc0, b.maximum(acc0.reduce(COL, "max")), c + 1)
        acc0, acc1, best, count = loop.results
    store_fragment_global(out.buffer(256), acc1, (0, 0), 16)
    store_axis(best_out.buffer(16), best)
    n_out.store(0, count)
    return k


def test_structured_carry_ir_equals_flat_carry_and_runs():
    flat, structured = _build(False), _build(True)
    assert structured.ir() == flat.ir()
    gen = torch.Generator().manual_seed(1)
    A, B = torch.randn(16, 16, generator=gen).half(), torch.randn(16, 16, generator=gen).half()
    O, R, C = torch.zeros(16, 16), torch.zeros(16), torch.zeros(1, dtype=torch.int32)
    run(structured, (1,), [A, B.t().contiguous(), O, R, C, 3])
    prod = A.float() @ B.float()                   # acc0 after i steps is i * prod
    np.testing.assert_allclose(O.numpy(), (prod * 6).numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(R.numpy(), torch.maximum(prod * 3, prod).max(dim=1).values.numpy(), rtol=1e-5, atol=1e-4)
    assert C.item() == 3


def test_if_and_if_else_carry_structures():
    k = dsl.Kernel("carry_branches", workgroup_size=64)
    out = k.arg_ptr("out", dsl.f32)
    flag = k.arg_i32("flag")
    x, y = k.const(1.0, dsl.f32), k.const(2.0, dsl.f32)
    with k.if_(flag > 0, carry={"x": x, "pair": (y, x)}) as br:
        assert set(br.carry) == {"x", "pair"}
        br.yield_({"x": x + 10.0, "pair": (y * 3.0, x * 5.0)})
    got = br.results
    assert isinstance(got, dict) and isinstance(got["pair"], tuple)
    choose = k.if_else(flag > 1)
    with choose.then_():
        choose.yield_({"v": got["x"]})
    with choose.else_():
        choose.yield_({"v": got["pair"][0]})
    (picked,) = choose.results
    out.store(0, picked["v"])
    out.store(1, got["pair"][1])
    k_ir = k.ir()
    assert "if_result" in k_ir
    for f, want in ((0, (2.0, 1.0)), (1, (6.0, 5.0)), (2, (11.0, 5.0))):
        o = torch.zeros(2)
        run(k, (1,), [o, f])
        assert o.tolist() == list(want), f


def _here() -> str:
    frame = sys._getframe(1)
    return f"{frame.f_code.co_filename}:{frame.f_lineno + 2}"


def test_yield_of_another_structure_names_the_path():
    k = dsl.Kernel("carry_bad", workgroup_size=64)
    mma = k.mfma("16x16x16", "f16")
    with k.for_range(0, 4, 1, carry={"o": [mma.zeros(), mma.zeros()], "s": k.const(0.0, dsl.f32)}) as loop:
        st = loop.carry
        message = r"item\['o'\]\[1\] is Fragment of 16x16x16_f16.C\^T but the carried item is Fragment of 16x16x16_f16.C"
        where = _here()
        with pytest.raises(ValueError, match=message) as e:
            loop.yield_({"o": [st["o"][0], dsl.fragment.Fragment(st["o"][1].value, mma.C.transpose())], "s": st["s"]})
        assert str(e.value).startswith(where)
        with pytest.raises(ValueError, match=r"is a dict with keys \['o'\] but the carried item is a dict"):
            loop.yield_({"o": st["o"]})
        with pytest.raises(ValueError, match="takes the one carried structure"):
            loop.yield_(st, st)
        loop.yield_(st)
