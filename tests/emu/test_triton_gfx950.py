"""The gfx950 emulator refereed by Triton: our own kernels (tools/gen_triton_fixtures.py
--target gfx950), compiled by Triton for gfx950 on the CPU, must reproduce torch's answers when
rocke.emu runs them as gfx950 — and a gfx942 launch must refuse them.

They exercise what gfx950 code brings: the wide-K MFMAs (16x16x32 / 32x32x16 f16 and bf16),
the f8f6f4 MFMAs on OCP fp8 (e4m3fn) and their block-scaled form (tl.dot_scaled) on fp8 and
fp4 (e2m1) operands, the scaled fp4 unpacks v_cvt_scalef32_pk_{bf16,f16}_fp4,
ds_read_b64_tr_b16/b8, global_load_lds_dwordx4,
v_permlane16/32_swap, v_bitop3_b32 and v_cvt_pk_{f16,bf16}_f32.
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import rocke.emu
from rocke.emu.errors import EmulatorError

from .test_triton_kernels import SENTINEL, TORCH_DTYPES, assert_close, attention_reference, cdiv, generator

FIXTURE_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "triton_gfx950"


def load(name):
    return (json.loads((FIXTURE_DIR / f"{name}.json").read_text()),
            (FIXTURE_DIR / f"{name}.s").read_text())


def launch_fixture(name, grid, target="gfx950", **runtime_args):
    info, asm = load(name)
    assert info["target"] == "gfx950"
    ordered = []
    for arg in info["runtime_args"]:
        value = runtime_args.pop(arg["name"])
        if arg["type"].startswith("*"):
            assert value.dtype == TORCH_DTYPES[arg["type"][1:]], arg["name"]
        elif arg["name"] in info["divisible_by_16"]:
            assert value % 16 == 0, f"{name}: {arg['name']}={value} must be a multiple of 16"
        ordered.append(value)
    assert not runtime_args
    ordered += [None] * info["extra_trailing_pointer_args"]
    return rocke.emu.launch(asm, info["kernel_symbol"], grid, tuple(info["block"]), ordered,
                            shared_mem=info["shared_mem_bytes"], check=True, target=target)


def opcodes(name):
    return set(re.findall(r"^\s+([a-z_][a-z0-9_]*)", load(name)[1], re.M))


# (fixture, in dtype, out dtype, M, N, K, tolerance kind, an opcode it must contain)
MATMUL_CASES = [
    ("matmul_f16_k32_mfma16", torch.float16, torch.float16, 70, 50, 150, "fp16_gemm",
     "v_mfma_f32_16x16x32_f16"),
    ("matmul_f16_k16_mfma32", torch.float16, torch.float16, 70, 80, 192, "fp16_gemm",
     "v_mfma_f32_32x32x16_f16"),
    ("matmul_bf16_k32_mfma16", torch.bfloat16, torch.bfloat16, 70, 48, 128, "bf16_gemm",
     "v_mfma_f32_16x16x32_bf16"),
    ("matmul_bf16_k16_mfma32", torch.bfloat16, torch.float32, 70, 50, 150, "bf16_gemm",
     "v_mfma_f32_32x32x16_bf16"),
    ("matmul_fp8e4nv_mfma16", torch.float8_e4m3fn, torch.float32, 70, 48, 256, "fp8_gemm",
     "v_mfma_f32_16x16x128_f8f6f4"),
    ("matmul_fp8e4nv_mfma32", torch.float8_e4m3fn, torch.float32, 70, 80, 192, "fp8_gemm",
     "v_mfma_f32_32x32x64_f8f6f4"),
]


@pytest.mark.parametrize("name, in_dtype, out_dtype, M, N, K, kind, opcode", MATMUL_CASES,
                         ids=[c[0] for c in MATMUL_CASES])
def test_matmul_gfx950(name, in_dtype, out_dtype, M, N, K, kind, opcode):
    assert opcode in opcodes(name)
    lda, ldb, ldc = cdiv(K, 16) * 16, cdiv(N, 16) * 16, cdiv(N, 16) * 16 + 16
    rng = generator(50)
    scale = 8.0 if in_dtype == torch.float8_e4m3fn else 1.0
    a = (scale * torch.randn(M, lda, generator=rng)).to(in_dtype)
    b = (scale * torch.randn(K, ldb, generator=rng)).to(in_dtype)
    c = torch.full((M, ldc), SENTINEL, dtype=out_dtype)
    launch_fixture(name, (cdiv(M, 64), cdiv(N, 64), 1), a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K,
                   stride_am=lda, stride_bk=ldb, stride_cm=ldc)
    expected = a[:, :K].float() @ b[:K, :N].float()
    if in_dtype == torch.float8_e4m3fn:   # every product and partial sum is exact in f64 / f32
        torch.testing.assert_close(c[:, :N], expected, rtol=1e-6, atol=1e-3)
    else:
        assert_close(c[:, :N], expected, kind)
    assert torch.all(c[:, N:] == SENTINEL), "masked columns of C were written"


def test_scaled_dot_block_scaled_mfma():
    """Triton's native tl.dot_scaled on gfx950: v_mfma_scale_f32_32x32x64_f8f6f4 with E8M0
    scales, against torch: every 32 K values of A's row / B's column times 2^(scale - 127)."""
    name = "scaled_dot_e4m3_64x64x256"
    assert "v_mfma_scale_f32_32x32x64_f8f6f4" in opcodes(name)
    m = n = 64
    k = 256
    rng = generator(52)
    a = (4 * torch.randn(m, k, generator=rng)).to(torch.float8_e4m3fn)
    b = (4 * torch.randn(k, n, generator=rng)).to(torch.float8_e4m3fn)
    sa = torch.randint(118, 137, (m, k // 32), generator=rng, dtype=torch.int32).to(torch.uint8)
    sb = torch.randint(118, 137, (n, k // 32), generator=rng, dtype=torch.int32).to(torch.uint8)
    c = torch.full((m, n), SENTINEL, dtype=torch.float32)
    launch_fixture(name, (1, 1, 1), a_ptr=a, b_ptr=b, sa_ptr=sa, sb_ptr=sb, c_ptr=c)
    fa = torch.pow(2.0, sa.double() - 127).repeat_interleave(32, dim=1)      # [M, K]
    fb = torch.pow(2.0, sb.double() - 127).repeat_interleave(32, dim=1).T    # [K, N]
    scaled_a, scaled_b = a.double() * fa, b.double() * fb
    expected = scaled_a @ scaled_b
    # each product is exact; the kernel rounds to f32 once per MFMA (K = 4 x 64): the error is
    # at most 4 roundings of the running sum, each within 2^-24 of the sum of |products|
    bound = 4 * 2.0 ** -24 * (scaled_a.abs() @ scaled_b.abs())
    assert torch.all((c.double() - expected).abs() <= bound)


@pytest.mark.parametrize("name, causal", [("flash_attn_fwd_d64", False),
                                          ("flash_attn_fwd_d64_causal", True)])
def test_flash_attention_gfx950(name, causal):
    assert {"ds_read_b64_tr_b16", "v_permlane32_swap_b32_e32"} <= opcodes(name)
    batch_heads, seq_len, head_dim = 2, 100, 64
    rng = generator(51)
    q, k, v = (torch.randn(batch_heads, seq_len, head_dim, generator=rng).half() for _ in range(3))
    out = torch.zeros(batch_heads, seq_len, head_dim, dtype=torch.float16)
    sm_scale = head_dim ** -0.5
    launch_fixture(name, (cdiv(seq_len, 64), batch_heads, 1), q_ptr=q, k_ptr=k, v_ptr=v,
                   out_ptr=out, stride_bh=seq_len * head_dim, stride_seq=head_dim,
                   seq_len=seq_len, sm_scale=sm_scale)
    assert_close(out, attention_reference(q, k, v, sm_scale, causal), "fp16_attention")


def test_gfx950_code_refused_as_gfx942():
    a = torch.zeros(64, 64, dtype=torch.float16)
    b = torch.zeros(64, 64, dtype=torch.float16)
    c = torch.full((64, 80), SENTINEL, dtype=torch.float16)
    with pytest.raises(ValueError, match="does not match the code's .amdgcn_target 'gfx950'"):
        launch_fixture("matmul_f16_k32_mfma16", (1, 1, 1), target="gfx942", a_ptr=a, b_ptr=b,
                       c_ptr=c, M=64, N=64, K=64, stride_am=64, stride_bk=64, stride_cm=80)
    # without the directive, the opcode gate refuses it before anything runs
    info, asm = load("matmul_f16_k32_mfma16")
    asm = re.sub(r'^\s*\.amdgcn_target.*$', "", asm, flags=re.M)
    with pytest.raises(EmulatorError, match="gfx950 \\(CDNA4\\) instruction that gfx942 does not have"):
        rocke.emu.launch(asm, info["kernel_symbol"], (1, 1, 1), tuple(info["block"]),
                         [a, b, c, 64, 64, 64, 64, 64, 80] + [None] * info["extra_trailing_pointer_args"],
                         shared_mem=info["shared_mem_bytes"], target="gfx942")
    assert torch.all(c == SENTINEL)


@pytest.mark.parametrize("name", ["matmul_i8_mfma16", "matmul_i8_mfma32"])
def test_matmul_i8_wide_k(name):
    assert {"matmul_i8_mfma16": "v_mfma_i32_16x16x64_i8",
            "matmul_i8_mfma32": "v_mfma_i32_32x32x32_i8"}[name] in opcodes(name)
    M, N, K = 70, 48, 128
    rng = generator(52)
    a = torch.randint(-128, 128, (M, K), generator=rng, dtype=torch.int8)
    b = torch.randint(-128, 128, (K, N), generator=rng, dtype=torch.int8)
    c = torch.full((M, N + 16), 7, dtype=torch.int32)
    launch_fixture(name, (cdiv(M, 64), cdiv(N, 64), 1), a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K,
                   stride_am=K, stride_bk=N, stride_cm=N + 16)
    assert torch.equal(c[:, :N], (a.long() @ b.long()).to(torch.int32))
    assert torch.all(c[:, N:] == 7)


def test_fp8_conversions_on_gfx950():
    """OCP casts run on v_cvt_scalef32_* (unit scale) under MODE.FP16_OVFL: finite overflow
    saturates, NaN stays NaN; the FNUZ casts are software on gfx950. Infinities are left out:
    the emulator refuses them for these instructions (their code is not pinned)."""
    assert "v_cvt_scalef32_pk_fp8_f32" in opcodes("fp8_convert")
    n = 200
    rng = generator(53)
    x = torch.randn(n, generator=rng) * 50
    specials = [0.0, -0.0, 1.0, -1.0, 240.0, 250.0, 300.0, 1e6, -1e6, float("nan"), 448.0, 460.0,
                57344.0, 60000.0, 1e-3, 1e-9, -2.5e-3, 0.0625, -500.0, 70000.0]
    x[:len(specials)] = torch.tensor(specials)
    outs = {k: torch.zeros(n, dtype=TORCH_DTYPES[t]) for k, t in
            (("e4", "fp8e4b8_"), ("e5", "fp8e5b16"), ("e4nv", "fp8e4nv"), ("e5nv", "fp8e5"))}
    back = torch.zeros(n, 4)
    launch_fixture("fp8_convert", (cdiv(n, 128), 1, 1), x_ptr=x, e4_ptr=outs["e4"],
                   e5_ptr=outs["e5"], e4nv_ptr=outs["e4nv"], e5nv_ptr=outs["e5nv"], back_ptr=back,
                   n=n)
    for key, limit in (("e4", 240.0), ("e5", 57344.0), ("e4nv", 448.0), ("e5nv", 57344.0)):
        expected = x.clamp(-limit, limit).to(outs[key].dtype).float()
        torch.testing.assert_close(outs[key].float(), expected, rtol=0, atol=0, equal_nan=True,
                                   msg=key)
        torch.testing.assert_close(back[:, list(outs).index(key)], outs[key].float(), rtol=0,
                                   atol=0, equal_nan=True, msg=f"{key} decoded")


def e2m1_reference_values(codes):
    """OCP fp4 E2M1 by the format's definition, for the reference (not the emulator's table):
    bit 3 sign, bits 2:1 exponent (bias 1), bit 0 mantissa; exponent 0 is subnormal
    (m * 2^-1), otherwise (1 + m/2) * 2^(e - 1); no infinity or NaN."""
    codes = codes.astype(np.int64)
    sign = np.where(codes & 8, -1.0, 1.0)
    exponent, mantissa = (codes >> 1) & 3, codes & 1
    magnitude = np.where(exponent == 0, mantissa * 0.5, (1 + mantissa / 2) * 2.0 ** (exponent - 1))
    return sign * magnitude


def unpack_e2m1(packed, axis):
    """uint8 bytes holding two codes along `axis` (low nibble first) -> float64 values."""
    packed = packed.numpy().astype(np.uint8)
    low, high = e2m1_reference_values(packed & 0xF), e2m1_reference_values(packed >> 4)
    return np.stack((low, high), axis=axis + 1).reshape(
        *(2 * s if i == axis else s for i, s in enumerate(packed.shape)))


# (fixture, A format, B format, M = N, K, the MFMA it must contain)
SCALED_FP4_CASES = [
    ("scaled_dot_e2m1_64x64x256", "e2m1", "e2m1", 64, 256, "v_mfma_scale_f32_32x32x64_f8f6f4"),
    ("scaled_dot_e2m1_16x16x256", "e2m1", "e2m1", 16, 256, "v_mfma_scale_f32_16x16x128_f8f6f4"),
    ("scaled_dot_e4m3_e2m1_64x64x128", "e4m3", "e2m1", 64, 128,
     "v_mfma_scale_f32_32x32x64_f8f6f4"),
    ("scaled_dot_e2m1_e4m3_64x64x128", "e2m1", "e4m3", 64, 128,
     "v_mfma_scale_f32_32x32x64_f8f6f4"),
]


@pytest.mark.parametrize("name, a_fmt, b_fmt, m, k, opcode", SCALED_FP4_CASES,
                         ids=[c[0] for c in SCALED_FP4_CASES])
def test_scaled_dot_fp4_block_scaled_mfma(name, a_fmt, b_fmt, m, k, opcode):
    """tl.dot_scaled with fp4 (E2M1) operands on gfx950: the block-scaled MFMA with CBSZ / BLGP
    = 4 (4 registers a lane), against numpy: E2M1 decoded by its definition, every 32 K
    values of A's row / B's column times 2^(scale - 127), products summed in float64."""
    assert opcode in opcodes(name)
    assert re.search(rf"{opcode} .*(cbsz|blgp):4", load(name)[1])
    rng = generator(54)
    if a_fmt == "e2m1":
        a = torch.randint(0, 256, (m, k // 2), generator=rng, dtype=torch.int32).to(torch.uint8)
        a_values = unpack_e2m1(a, axis=1)
    else:
        a = (4 * torch.randn(m, k, generator=rng)).to(torch.float8_e4m3fn)
        a_values = a.double().numpy()
    if b_fmt == "e2m1":
        b = torch.randint(0, 256, (k // 2, m), generator=rng, dtype=torch.int32).to(torch.uint8)
        b_values = unpack_e2m1(b, axis=0)
    else:
        b = (4 * torch.randn(k, m, generator=rng)).to(torch.float8_e4m3fn)
        b_values = b.double().numpy()
    sa = torch.randint(118, 137, (m, k // 32), generator=rng, dtype=torch.int32).to(torch.uint8)
    sb = torch.randint(118, 137, (m, k // 32), generator=rng, dtype=torch.int32).to(torch.uint8)
    c = torch.full((m, m), SENTINEL, dtype=torch.float32)
    launch_fixture(name, (1, 1, 1), a_ptr=a, b_ptr=b, sa_ptr=sa, sb_ptr=sb, c_ptr=c)
    fa = np.repeat(2.0 ** (sa.numpy().astype(np.float64) - 127), 32, axis=1)       # [M, K]
    fb = np.repeat(2.0 ** (sb.numpy().astype(np.float64) - 127), 32, axis=1).T     # [K, N]
    scaled_a, scaled_b = a_values * fa, b_values * fb
    expected = scaled_a @ scaled_b
    # products are exact; the kernel rounds to f32 once per MFMA: at most k / (atom K) roundings
    # of the running sum, each within 2^-24 of the sum of |products|
    roundings = k // int(opcode.split("x")[-1].split("_")[0])
    bound = roundings * 2.0 ** -24 * (np.abs(scaled_a) @ np.abs(scaled_b))
    assert np.all(np.abs(c.double().numpy() - expected) <= bound)


@pytest.mark.parametrize("b_fmt, b_dtype, opcode", [
    ("bf16", torch.bfloat16, "v_cvt_scalef32_pk_bf16_fp4"),
    ("fp16", torch.float16, "v_cvt_scalef32_pk_f16_fp4"),
])
def test_scaled_dot_fp4_times_16bit(b_fmt, b_dtype, opcode):
    """tl.dot_scaled of a scaled E2M1 A and an unscaled 16-bit B: Triton unpacks A with the
    scaled fp4 conversions (every byte select) and multiplies on the 16-bit MFMA."""
    name = f"scaled_dot_e2m1_{b_fmt}_64x64x128"
    asm = load(name)[1]
    assert opcode in opcodes(name)
    assert {f"op_sel:[{i},{j},0]" for i in (0, 1) for j in (0, 1)} - {"op_sel:[0,0,0]"} <= set(
        re.findall(rf"{opcode} [^\n]*(op_sel:\[\d,\d,\d\])", asm))
    m = n = 64
    k = 128
    rng = generator(55)
    a = torch.randint(0, 256, (m, k // 2), generator=rng, dtype=torch.int32).to(torch.uint8)
    b = torch.randn(k, n, generator=rng).to(b_dtype)
    # scales within what the 16-bit A can hold exactly (f16: 6 * 2^9 and 0.5 * 2^-9)
    sa = torch.randint(118, 137, (m, k // 32), generator=rng, dtype=torch.int32).to(torch.uint8)
    c = torch.full((m, n), SENTINEL, dtype=torch.float32)
    launch_fixture(name, (1, 1, 1), a_ptr=a, b_ptr=b, sa_ptr=sa, c_ptr=c)
    scaled_a = unpack_e2m1(a, axis=1) * np.repeat(2.0 ** (sa.numpy().astype(np.float64) - 127),
                                                  32, axis=1)
    b_values = b.double().numpy()
    expected = scaled_a @ b_values
    roundings = k // 16   # one f32 rounding per 32x32x16 MFMA
    bound = roundings * 2.0 ** -24 * (np.abs(scaled_a) @ np.abs(b_values))
    assert np.all(np.abs(c.double().numpy() - expected) <= bound)
