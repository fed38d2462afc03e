"""Build-time errors: right exception type, a message naming what is wrong, and the author's line."""

import sys

import pytest

from rocke import dsl
from rocke.kernels.samples import softmax, vector_add

HERE = __file__


def next_line() -> str:
    """``file:line`` of the line two below the caller's (the statement inside ``pytest.raises``)."""
    return f"{HERE}:{sys._getframe(1).f_lineno + 2}"


def new_kernel():
    k = dsl.Kernel("errs", workgroup_size=64)
    p = k.arg_ptr("p", dsl.f32)
    n = k.arg_i32("n")
    x = k.arg_f32("x")
    return k, p, n, x


def test_int_plus_float_names_both_types_at_user_line():
    k, _, n, x = new_kernel()
    where = next_line()
    with pytest.raises(TypeError) as err:
        n + x
    msg = str(err.value)
    assert msg.startswith(where + ":"), msg
    assert "i32" in msg and "f32" in msg and "'+'" in msg


def test_f16_times_bf16_is_a_type_error():
    k, _, n, x = new_kernel()
    h = x.to(dsl.f16)
    b = x.to(dsl.bf16)
    where = next_line()
    with pytest.raises(TypeError) as err:
        h * b
    assert str(err.value).startswith(where + ":")
    assert "f16" in str(err.value) and "bf16" in str(err.value)


def test_vectors_of_different_lengths():
    k, p, n, _ = new_kernel()
    four = p.load(0, width=4)
    two = p.load(8, width=2)
    where = next_line()
    with pytest.raises(TypeError) as err:
        four - two
    assert str(err.value).startswith(where + ":")
    assert "f32x4" in str(err.value) and "f32x2" in str(err.value)


def test_scalar_broadcasts_against_vector_and_python_numbers_adapt():
    k, p, n, x = new_kernel()
    v = p.load(0, width=4) * x + 1
    assert (v.dtype, v.lanes) == (dsl.f32, 4)
    with pytest.raises(TypeError, match="float constant 1.5 cannot become integer type i32"):
        n + 1.5


def test_loop_body_value_used_after_loop():
    k, p, n, x = new_kernel()
    with k.for_range(0, n, 1) as loop:
        inside = p.load(loop.index) * 2.0
    loop_line = f"{HERE}:{sys._getframe().f_lineno - 2}"
    where = next_line()
    with pytest.raises(ValueError) as err:
        inside + 1.0
    msg = str(err.value)
    assert msg.startswith(where + ":"), msg
    assert "for_range opened at " + loop_line in msg
    assert "carry" in msg


def test_loop_index_and_carry_are_scoped_results_are_not():
    k, p, n, x = new_kernel()
    with k.for_range(0, n, 4, carry=(x,)) as loop:
        (acc,) = loop.carry
        loop.yield_(acc + p.load(loop.index))
    (total,) = loop.results
    p.store(0, total)  # fine: results live in the enclosing scope
    where = next_line()
    with pytest.raises(ValueError) as err:
        p.store(1, acc)
    assert str(err.value).startswith(where + ":")
    with pytest.raises(ValueError, match="for_range"):
        loop.index + 1


def test_branch_value_used_after_if_else():
    k, p, n, x = new_kernel()
    br = k.if_else(n > 0)
    with br.then_():
        then_only = x * 3.0
        br.yield_(then_only)
    with br.else_():
        br.yield_(x)
    (y,) = br.results
    p.store(0, y)
    where = next_line()
    with pytest.raises(ValueError) as err:
        p.store(1, then_only)
    assert str(err.value).startswith(where + ":")
    assert "if_else then_ arm" in str(err.value)


def test_yield_type_mismatch_and_missing_yield():
    k, p, n, x = new_kernel()
    where = None
    with pytest.raises(TypeError) as err:
        with k.for_range(0, n, 1, carry=(x,)) as loop:
            where = next_line()
            loop.yield_(loop.index)
    assert where is not None and str(err.value).startswith(where.rsplit(":", 1)[0])
    assert "i32" in str(err.value) and "f32" in str(err.value)

    k, p, n, x = new_kernel()
    with pytest.raises(ValueError, match="never called yield_"):
        with k.for_range(0, n, 1, carry=(x,)):
            pass


def test_if_else_arms_must_agree():
    k, p, n, x = new_kernel()
    br = k.if_else(n > 0)
    with br.then_():
        br.yield_(x)
    with pytest.raises(TypeError, match="i32.*f32"):
        with br.else_():
            br.yield_(n)


def test_python_truth_value_of_runtime_value_is_rejected():
    k, p, n, x = new_kernel()
    where = next_line()
    with pytest.raises(TypeError) as err:
        bool(n > 3)
    assert str(err.value).startswith(where + ":")
    assert "if_" in str(err.value)


def test_integer_true_division_and_fp8_arithmetic_are_rejected():
    k, p, n, x = new_kernel()
    with pytest.raises(TypeError, match="use '//'"):
        n / 2
    q = x.to(dsl.fp8_e4m3fnuz)
    with pytest.raises(TypeError, match="fp8_e4m3fnuz"):
        q + q


def test_argument_after_code_and_duplicate_names():
    k, p, n, x = new_kernel()
    with pytest.raises(ValueError, match="duplicate kernel argument name 'n'"):
        k.arg_i32("n")
    p.store(0, x)
    with pytest.raises(ValueError, match="declared after code was emitted"):
        k.arg_i32("late")


def test_kernel_and_lds_validation():
    with pytest.raises(ValueError, match="workgroup_size"):
        dsl.Kernel("bad", workgroup_size=2048)
    with pytest.raises(ValueError, match="name"):
        dsl.Kernel("not an identifier")
    k, p, n, x = new_kernel()
    k.lds("a", (16, 16), dsl.f32)
    with pytest.raises(ValueError, match="overlaps 'a'"):
        k.lds("b", 16, dsl.f32, offset=64)
    alias = k.lds("b", 16, dsl.f32, offset=64, alias=True)
    assert alias.byte_offset == 64
    where = next_line()
    with pytest.raises(ValueError, match="LDS") as err:
        k.lds("huge", (128, 128), dsl.f32)
    # the allocation that overflows is named at the author's line, with every region listed
    msg = str(err.value)
    assert msg.startswith(where + ":"), msg
    assert "to 66560 bytes of LDS; gfx942 has 65536 per workgroup" in msg
    for line in ("a                [     0,   1024)   1024 B  16x16 f32  at " + HERE,
                 "huge             [  1024,  66560)  65536 B  128x128 f32  at " + where):
        assert line in msg, msg
    k.ir()                                    # the failed allocation left the kernel as it was


def test_readonly_pointer_store_and_wrong_store_type():
    k = dsl.Kernel("ro", workgroup_size=64)
    a = k.arg_ptr("a", dsl.f16, readonly=True)
    b = k.arg_ptr("b", dsl.f16)
    with pytest.raises(ValueError, match="readonly"):
        a.store(0, a.load(0))
    with pytest.raises(TypeError, match="storing f32 into memory of f16"):
        b.store(0, a.load(0).to(dsl.f32))


@pytest.mark.parametrize("kwargs, field", [
    (dict(dtype="f64"), "dtype"),
    (dict(vector_width=3), "vector_width"),
    (dict(dtype="f32", vector_width=8), "vector_width"),
    (dict(block_size=100), "block_size"),
])
def test_vector_add_spec_validation(kwargs, field):
    with pytest.raises(ValueError) as err:
        vector_add.VectorAddSpec(**kwargs)
    assert str(err.value).startswith(field + ":")


@pytest.mark.parametrize("kwargs, field", [
    (dict(dtype="i8"), "dtype"),
    (dict(rows_per="block"), "rows_per"),
    (dict(num_warps=3), "num_warps"),
    (dict(dtype="f32", vector_width=8), "vector_width"),
    (dict(reduce_via="shfl"), "reduce_via"),
])
def test_softmax_spec_validation(kwargs, field):
    with pytest.raises(ValueError) as err:
        softmax.SoftmaxSpec(**kwargs)
    assert str(err.value).startswith(field + ":")


def test_launch_geometry_and_args():
    spec = vector_add.VectorAddSpec("f16", 8, 256)
    assert vector_add.launch_geometry(spec, n=2049) == ((2, 1, 1), (256, 1, 1))
    assert [a[0] for a in vector_add.args(spec)] == ["a", "b", "c", "n"]
    kernel = vector_add.build(spec)
    assert [(a.name, a.kind, a.dtype, a.offset, a.size) for a in kernel.args] == [
        ("a", "global_ptr", "f16", 0, 8), ("b", "global_ptr", "f16", 8, 8),
        ("c", "global_ptr", "f16", 16, 8), ("n", "scalar", "i32", 24, 4)]
    sm = softmax.SoftmaxSpec("bf16", "wave", 4)
    assert softmax.launch_geometry(sm, rows=9, cols=100) == ((3, 1, 1), (256, 1, 1))
    wg = softmax.SoftmaxSpec("bf16", "workgroup", 2)
    assert softmax.launch_geometry(wg, rows=9, cols=100) == ((9, 1, 1), (128, 1, 1))
    with pytest.raises(ValueError, match="cols"):
        softmax.launch_geometry(sm, rows=9, cols=0)


def test_fence_names_a_bad_ordering_or_scope_and_emits_an_agent_fence():
    from rocke import dsl
    k = dsl.Kernel("fences", workgroup_size=64)
    with pytest.raises(ValueError, match="fence ordering"):
        k.fence("seq_cst")
    with pytest.raises(ValueError, match="fence scope"):
        k.fence("release", "system")
    k.fence("release")
    k.fence("acquire", "workgroup")
    ir = k.ir()
    assert 'fence syncscope("agent") release' in ir and 'fence syncscope("workgroup") acquire' in ir
