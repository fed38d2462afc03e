"""The DSL and compiler target gfx950 end to end: Kernel(target="gfx950") -> compile_ir for gfx950
-> the emulator's gfx950 mode, with the wide-K MFMA atoms gfx942 lacks."""

import pytest
import torch

from rocke import dsl
from rocke.compiler import compile_ir
from rocke.dsl.fragment import load_fragment_global, store_fragment_global
from rocke import emu

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}


def _matmul_kernel(atom: str, dtype: str, target: str):
    k = dsl.Kernel(f"mm_{dtype}_{atom.replace('x', '_')}_{target}", target=target, workgroup_size=64)
    a = k.arg_ptr("a", dtype, readonly=True)
    b = k.arg_ptr("b", dtype, readonly=True)
    c = k.arg_ptr("c", "f32")
    mma = k.mfma(atom, dtype)
    m, n, kk = mma.atom.m, mma.atom.n, mma.atom.k
    fa = load_fragment_global(a.buffer(m * kk), mma.A, (0, 0), kk)
    fb = load_fragment_global(b.buffer(kk * n), mma.B, (0, 0), n)
    store_fragment_global(c.buffer(m * n), mma(fa, fb, mma.zeros()), (0, 0), n)
    return k, (m, n, kk)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("atom", ["32x32x16", "16x16x32"])
def test_wide_k_mfma_runs_on_gfx950(atom, dtype):
    k, (m, n, kk) = _matmul_kernel(atom, dtype, "gfx950")
    ck = compile_ir(k, target="gfx950", cache=False)
    assert f"v_mfma_f32_{atom}_{dtype}" in ck.asm
    assert '.amdgcn_target "amdgcn-amd-amdhsa--gfx950' in ck.asm
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(m, kk, generator=gen).to(TORCH[dtype])
    b = torch.randn(kk, n, generator=gen).to(TORCH[dtype])
    c = torch.zeros(m, n)
    emu.launch(ck.asm, ck.name, (1, 1, 1), (64, 1, 1), [a, b, c], target="gfx950")
    torch.testing.assert_close(c, a.float() @ b.float(), atol=1e-4, rtol=1e-4)


def test_wide_k_atom_is_refused_on_gfx942():
    k = dsl.Kernel("mm", workgroup_size=64)
    with pytest.raises(ValueError, match="no MFMA atom '32x32x16_f16' on gfx942"):
        k.mfma("32x32x16", "f16")


def test_gfx942_bf16_operands_stay_i16():
    # the bfloat bitcast is only for gfx950's wide-K atoms; gfx942's bf16 IR is unchanged
    k942, _ = _matmul_kernel("32x32x8", "bf16", "gfx942")
    assert "bfloat" not in k942.ir()
    k950, _ = _matmul_kernel("32x32x16", "bf16", "gfx950")
    assert "<8 x bfloat>" in k950.ir()


def test_unknown_target_and_fnuz_fp8_on_gfx950_are_refused():
    with pytest.raises(ValueError, match="unsupported target 'gfx90a'"):
        dsl.Kernel("x", target="gfx90a")
    k = dsl.Kernel("fp8", target="gfx950", workgroup_size=64)
    x = k.arg_f32("x")
    with pytest.raises(TypeError, match="gfx950 has no fnuz fp8"):
        x.to("fp8_e4m3fnuz")


def test_ocp_fp8_converts_on_gfx950_only():
    """gfx950's fp8 is OCP: fp8_e4m3fn / fp8_e5m2 convert there (the same intrinsics gfx942
    uses for fnuz), and gfx942 refuses them."""
    for dt in ("fp8_e4m3fn", "fp8_e5m2"):
        k = dsl.Kernel("ocp", target="gfx950", workgroup_size=64)
        x = k.arg_f32("x")
        kind = "fp8" if dt == "fp8_e4m3fn" else "bf8"
        assert x.to(dt).to("f32").dtype.name == "f32"
        assert f"llvm.amdgcn.cvt.pk.{kind}.f32" in k.ir() and f"llvm.amdgcn.cvt.f32.{kind}" in k.ir()
        k942 = dsl.Kernel("ocp", target="gfx942", workgroup_size=64)
        with pytest.raises(TypeError, match="gfx942 has no OCP fp8"):
            k942.arg_f32("x").to(dt)


def _bf16_convert_kernel(target: str, rounding: str = "rne"):
    k = dsl.Kernel(f"to_bf16_{target}_{rounding}", target=target, workgroup_size=64)
    x = k.arg_ptr("x", "f32", readonly=True)
    y = k.arg_ptr("y", "bf16")
    i = k.thread_id(0) * 2
    pair = x.load(i, width=2)
    y.store(i, pair.to("bf16", rounding=rounding))
    return k


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_f32_to_bf16_rounds_to_nearest_even_on_both_targets(target):
    """gfx950 converts with its native v_cvt_pk_bf16_f32 (LLVM's fptrunc to bfloat), gfx942 with
    the integer RNE sequence; both give torch's bf16 rounding: ties to even, NaN stays NaN, inf,
    the largest finite value and subnormals."""
    k = _bf16_convert_kernel(target)
    ck = compile_ir(k, target=target, cache=False)
    assert ("v_cvt_pk_bf16_f32" in ck.asm) == (target == "gfx950")
    bits = [0x3F808000, 0x3F818000, 0x3F808001, 0xBF80FFFF, 0x7F7FFFFF, 0x00008000, 0x80018000,
            0x7F800000, 0xFF800000, 0x7FC00001, 0xFFA00000, 0x00000000, 0x80000000, 0x4049FDB0]
    gen = torch.Generator().manual_seed(1)
    rand = torch.randn(128 - len(bits), generator=gen) * 1e3
    x = torch.cat([torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32), rand])
    y = torch.zeros(128, dtype=torch.bfloat16)
    emu.launch(ck.asm, ck.name, (1, 1, 1), (64, 1, 1), [x, y], target=target)
    want = x.to(torch.bfloat16)
    nan = want.isnan()
    assert torch.equal(y.isnan(), nan)
    assert torch.equal(y[~nan].view(torch.int16), want[~nan].view(torch.int16))


def _bf16_by_definition(bits: int, rounding: str) -> int:
    """The bf16 bit pattern of f32 ``bits`` by the modes' definitions, on exact integers: the
    dropped half against half an ulp (0x8000); NaN -> its high half with the quiet bit set."""
    sign, magnitude = bits & 0x80000000, bits & 0x7FFFFFFF
    if magnitude > 0x7F800000:
        return ((bits >> 16) | 0x40) & 0xFFFF
    kept, dropped = magnitude >> 16, magnitude & 0xFFFF
    if rounding == "rna" and dropped >= 0x8000:
        kept += 1          # ties away from zero: a magnitude's tie rounds up (to inf past the top)
    return ((sign >> 16) | kept) & 0xFFFF


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("rounding", ["rna", "rtz"])
def test_f32_to_bf16_ties_away_and_toward_zero(target, rounding):
    """AITER's other two bf16_cvt modes: ties away from zero (0x3F808000 -> 0x3F81, where RNE
    keeps 0x3F80) and toward zero (0xBF80FFFF -> 0xBF80); the largest finite value rounds to inf
    only ties away; NaN stays a quiet NaN; integer code on both targets (no native opcode)."""
    k = _bf16_convert_kernel(target, rounding)
    ck = compile_ir(k, target=target, cache=False)
    assert "v_cvt_pk_bf16_f32" not in ck.asm
    bits = [0x3F808000, 0x3F818000, 0x3F807FFF, 0xBF80FFFF, 0xBF808000, 0x7F7FFFFF, 0x00008000,
            0x7F800000, 0xFF800000, 0x7FC00001, 0x7F800001, 0xFFA00000, 0x00000000, 0x80000000]
    gen = torch.Generator().manual_seed(2)
    rand = (torch.randn(128 - len(bits), generator=gen) * 1e3).view(torch.int32).tolist()
    every = [b & 0xFFFFFFFF for b in bits] + [b & 0xFFFFFFFF for b in rand]
    x = torch.tensor(every, dtype=torch.int64).to(torch.int32).view(torch.float32)
    y = torch.zeros(128, dtype=torch.bfloat16)
    emu.launch(ck.asm, ck.name, (1, 1, 1), (64, 1, 1), [x, y], target=target)
    got = [b & 0xFFFF for b in y.view(torch.int16).tolist()]
    assert got == [_bf16_by_definition(b, rounding) for b in every]
    assert got[0] == (0x3F81 if rounding == "rna" else 0x3F80)
    assert got[5] == (0x7F80 if rounding == "rna" else 0x7F7F)


def test_bf16_rounding_modes_are_refused_where_they_do_not_apply():
    k = dsl.Kernel("bad_rounding", target="gfx942", workgroup_size=64)
    x = k.arg_ptr("x", "f32", readonly=True)
    v = x.load(k.thread_id(0))
    with pytest.raises(ValueError, match="rounding=.rna. is only available for f32 -> bf16"):
        v.to("f16", rounding="rna")
    with pytest.raises(ValueError, match="rounding must be one of"):
        v.to("bf16", rounding="rtne")


@pytest.mark.parametrize("rounding", ["rne", "rna"])
def test_without_the_nan_check_finite_values_round_as_with_it(rounding):
    """nan_check=False (the caller's NaNs reach its result another way): no NaN compare on
    gfx942, every non-NaN value (ties, the largest finite, infinities, zeros, random) converts
    bit for bit as with the check, and a NaN becomes what the integer rounding add gives: the
    default NaN 0x7FC00000 and a NaN with a zero low half stay NaNs (0x7FC0, 0xFFFF), one whose
    low half carries into the exponent does not (0x7FFFFFFF + 0x7FFF + 1 -> 0x8000, -0.0 in
    rne; + 0x8000 -> 0x8000 in rna too)."""
    k = dsl.Kernel(f"to_bf16_unchecked_{rounding}", target="gfx942", workgroup_size=64)
    x = k.arg_ptr("x", "f32", readonly=True)
    y = k.arg_ptr("y", "bf16")
    i = k.thread_id(0) * 2
    y.store(i, x.load(i, width=2).to("bf16", rounding=rounding, nan_check=False))
    ck = compile_ir(k, target="gfx942", cache=False)
    checked = compile_ir(_bf16_convert_kernel("gfx942", rounding), target="gfx942", cache=False)
    assert "v_cmp_u_f32" in checked.asm and "v_cmp_u_f32" not in ck.asm
    finite = [0x3F808000, 0x3F818000, 0x3F807FFF, 0xBF80FFFF, 0x7F7FFFFF, 0x00008000,
              0x7F800000, 0xFF800000, 0x00000000, 0x80000000]
    nans = [0x7FC00000, 0xFFFF0000, 0x7FFFFFFF]
    gen = torch.Generator().manual_seed(5)
    rand = (torch.randn(128 - len(finite) - len(nans), generator=gen) * 1e3).view(torch.int32)
    every = [b & 0xFFFFFFFF for b in finite + nans + rand.tolist()]
    x_t = torch.tensor(every, dtype=torch.int64).to(torch.int32).view(torch.float32)
    y_t = torch.zeros(128, dtype=torch.bfloat16)
    emu.launch(ck.asm, ck.name, (1, 1, 1), (64, 1, 1), [x_t, y_t], target="gfx942")
    got = [b & 0xFFFF for b in y_t.view(torch.int16).tolist()]
    with_check = torch.zeros(128, dtype=torch.bfloat16)
    emu.launch(checked.asm, checked.name, (1, 1, 1), (64, 1, 1), [x_t, with_check], target="gfx942")
    want = [b & 0xFFFF for b in with_check.view(torch.int16).tolist()]
    n = len(finite)
    assert got[:n] == want[:n] and got[n + len(nans):] == want[n + len(nans):]
    if rounding == "rna":
        assert got[:n] == [_bf16_by_definition(b, "rna") for b in finite]
    assert got[n:n + len(nans)] == [0x7FC0, 0xFFFF, 0x8000]
    other = dsl.Kernel("to_bf16_bad_check", target="gfx942", workgroup_size=64)
    v = other.arg_ptr("x", "f32", readonly=True).load(other.thread_id(0))
    with pytest.raises(ValueError, match="nan_check must be a bool"):
        v.to("bf16", nan_check=0)


def test_toward_zero_with_quiet_nans_is_the_bare_truncation():
    """quiet_nans (the value is an arithmetic result): f32 -> bf16 toward zero keeps the high
    half with no NaN compare; every quiet NaN stays a NaN (its quiet bit is in the high half) and
    every other value converts as with the check. A signaling NaN whose payload is only in the
    low half (0x7F800001) is what the promise rules out: it truncates to +inf."""
    k = dsl.Kernel("to_bf16_rtz_quiet", target="gfx942", workgroup_size=64)
    x = k.arg_ptr("x", "f32", readonly=True)
    y = k.arg_ptr("y", "bf16")
    i = k.thread_id(0) * 2
    y.store(i, x.load(i, width=2).to("bf16", rounding="rtz", quiet_nans=True))
    ck = compile_ir(k, target="gfx942", cache=False)
    checked = compile_ir(_bf16_convert_kernel("gfx942", "rtz"), target="gfx942", cache=False)
    assert "v_cmp_u_f32" in checked.asm and "v_cmp_u_f32" not in ck.asm
    bits = [0xBF80FFFF, 0x7F7FFFFF, 0x7FC00001, 0xFFC00000, 0x7FFFFFFF, 0x7F800000, 0x7F800001]
    gen = torch.Generator().manual_seed(4)
    rand = (torch.randn(128 - len(bits), generator=gen) * 1e3).view(torch.int32).tolist()
    every = [b & 0xFFFFFFFF for b in bits] + [b & 0xFFFFFFFF for b in rand]
    x_t = torch.tensor(every, dtype=torch.int64).to(torch.int32).view(torch.float32)
    y_t = torch.zeros(128, dtype=torch.bfloat16)
    emu.launch(ck.asm, ck.name, (1, 1, 1), (64, 1, 1), [x_t, y_t], target="gfx942")
    got = [b & 0xFFFF for b in y_t.view(torch.int16).tolist()]
    assert got[:6] == [0xBF80, 0x7F7F, 0x7FC0, 0xFFC0, 0x7FFF, 0x7F80]
    assert got[6] == 0x7F80                       # the signaling NaN: +inf, as the doc says
    assert got[7:] == [_bf16_by_definition(b, "rtz") for b in every[7:]]
    other = dsl.Kernel("to_bf16_bad", target="gfx942", workgroup_size=64)
    v = other.arg_ptr("x", "f32", readonly=True).load(other.thread_id(0))
    with pytest.raises(ValueError, match="quiet_nans must be a bool"):
        v.to("bf16", rounding="rtz", quiet_nans=1)
