"""The scaled conversions as LLVM emits them for gfx950: kernels of our own that call the
llvm.amdgcn.cvt.scalef32.* intrinsics with every byte / word / destination select, compiled by
LLVM (llvmlite) for gfx950 and run in rocke's emulator, against ml_dtypes. This pins the asm
op_sel spelling of each select (LLVM's printer) to the intrinsics' documented meaning
(IntrinsicsAMDGPU.td: source byte / word index, destination word / byte, old value kept)."""
import ml_dtypes
import numpy as np
import pytest
import torch

import rocke.emu

from .asm_runner import emit_assembly

RNG = np.random.default_rng(17)
SMALL = {"fp8": ml_dtypes.float8_e4m3fn, "bf8": ml_dtypes.float8_e5m2,
         "fp4": ml_dtypes.float4_e2m1fn, "fp6": ml_dtypes.float6_e2m3fn,
         "bf6": ml_dtypes.float6_e3m2fn}
WIDE_IR = {"f32": "float", "f16": "half", "bf16": "bfloat"}


def gfx950_asm(module: str) -> str:
    return emit_assembly(module, cpu="gfx950")


def kernel(calls: list[str], decls: set[str]) -> str:
    """in: word (i32), scale (f32), old (i32), second f32, six 6-bit words, 32 values; out: one
    i32 slot of 64 lanes per stored word (each call's `store` lines name their slots)."""
    body = "\n".join(calls)
    return f"""target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
{chr(10).join(sorted(decls))}
define amdgpu_kernel void @k(ptr addrspace(1) %in, ptr addrspace(1) %out) {{
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %p0 = getelementptr i32, ptr addrspace(1) %in, i32 %t
  %x = load i32, ptr addrspace(1) %p0
  %p1 = getelementptr i32, ptr addrspace(1) %p0, i32 64
  %s = load float, ptr addrspace(1) %p1
  %p2 = getelementptr i32, ptr addrspace(1) %p0, i32 128
  %old = load i32, ptr addrspace(1) %p2
  %p3 = getelementptr i32, ptr addrspace(1) %p0, i32 192
  %b = load float, ptr addrspace(1) %p3
  %a = bitcast i32 %x to float
  %xh = bitcast i32 %x to <2 x half>
  %xb = bitcast i32 %x to <2 x bfloat>
  %oldh = bitcast i32 %old to <2 x half>
  %old16 = bitcast i32 %old to <2 x i16>
{body}
  ret void
}}
"""


def store(slot: int, value: str) -> str:
    return (f"  %q{slot} = getelementptr i32, ptr addrspace(1) %out, i32 {slot * 64}\n"
            f"  %r{slot} = getelementptr i32, ptr addrspace(1) %q{slot}, i32 %t\n"
            f"  store i32 {value}, ptr addrspace(1) %r{slot}")


def run_slots(asm: str, inputs: np.ndarray, slots: int) -> np.ndarray:
    """One wave of ``kernel``'s code on ``inputs`` (u32 words); its ``slots`` stored rows."""
    out = torch.zeros(slots * 64, dtype=torch.int32)
    rocke.emu.launch(asm, "k", (1, 1, 1), (64, 1, 1),
                     [torch.from_numpy(inputs.view(np.int32)), out], target="gfx950")
    return out.numpy().view(np.uint32).reshape(-1, 64)


def up_calls():
    """(calls, decls, expected(slot) -> (src fmt, dst fmt, which code of x, half / lane part))."""
    calls, decls, meaning, slot = [], set(), {}, 0

    def emit(expr, ty, parts, what):
        nonlocal slot
        n = len(calls)
        calls.append(f"  %c{n} = {expr}")
        if parts == 2 and ty.startswith("<2 x float>"):
            for j in range(2):
                calls.append(f"  %e{n}_{j} = extractelement <2 x float> %c{n}, i32 {j}")
                calls.append(f"  %i{n}_{j} = bitcast float %e{n}_{j} to i32")
                calls.append(store(slot, f"%i{n}_{j}"))
                meaning[slot] = what(j)
                slot += 1
        else:
            calls.append(f"  %i{n} = bitcast {ty} %c{n} to i32")
            calls.append(store(slot, f"%i{n}"))
            meaning[slot] = what(None)
            slot += 1

    for src in ("fp8", "bf8"):
        for dst in ("f32", "f16", "bf16"):
            ty = f"<2 x {WIDE_IR[dst]}>"
            name = f"llvm.amdgcn.cvt.scalef32.pk.{dst}.{src}"
            decls.add(f"declare {ty} @{name}(i32, float, i1)")
            for word in (0, 1):
                emit(f"call {ty} @{name}(i32 %x, float %s, i1 {word})", ty, 2 if dst == "f32" else 1,
                     lambda j, word=word, dst=dst, src=src:
                     ("pk", src, dst, [2 * word + (j or 0)] if dst == "f32" else [2 * word, 2 * word + 1]))
        name = f"llvm.amdgcn.cvt.scalef32.f32.{src}"
        decls.add(f"declare float @{name}(i32, float, i32)")
        for byte in range(4):
            emit(f"call float @{name}(i32 %x, float %s, i32 {byte})", "float", 1,
                 lambda j, byte=byte, src=src: ("one", src, "f32", [byte]))
        name = f"llvm.amdgcn.cvt.scalef32.f16.{src}"
        decls.add(f"declare <2 x half> @{name}(<2 x half>, i32, float, i32, i1)")
        for byte in range(4):
            for high in (0, 1):
                emit(f"call <2 x half> @{name}(<2 x half> %oldh, i32 %x, float %s, i32 {byte}, "
                     f"i1 {high})", "<2 x half>", 1,
                     lambda j, byte=byte, high=high, src=src: ("half", src, "f16", [byte], high))
    for dst in ("f32", "f16", "bf16"):
        ty = f"<2 x {WIDE_IR[dst]}>"
        name = f"llvm.amdgcn.cvt.scalef32.pk.{dst}.fp4"
        decls.add(f"declare {ty} @{name}(i32, float, i32)")
        for byte in range(4):
            emit(f"call {ty} @{name}(i32 %x, float %s, i32 {byte})", ty, 2 if dst == "f32" else 1,
                 lambda j, byte=byte, dst=dst: ("pk", "fp4", dst,
                                               [2 * byte + (j or 0)] if dst == "f32"
                                               else [2 * byte, 2 * byte + 1]))
    return calls, decls, meaning


def codes_of(words, fmt, index):
    if fmt == "fp4":
        return (words >> np.uint32(4 * index)) & np.uint32(0xF)
    return (words >> np.uint32(8 * index)) & np.uint32(0xFF)


def wide(values, fmt):
    ty = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[fmt]
    bits = values.astype(ty).view(np.uint32 if fmt == "f32" else np.uint16).astype(np.uint32)
    return bits


def test_llvm_up_conversions_every_select():
    calls, decls, meaning = up_calls()
    asm = gfx950_asm(kernel(calls, decls))
    assert "v_cvt_scalef32_f16_fp8" in asm and "op_sel:[1,1,1]" in asm
    words = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    k = RNG.integers(-6, 1, 64)                      # every code is exact in every destination
    inputs = np.zeros(256, np.uint32)
    inputs[:64] = words
    inputs[64:128] = ((k + 127) << 23).astype(np.uint32)
    inputs[128:192] = 0xCAFEF00D
    got = run_slots(asm, inputs, len(meaning))
    factor = np.ldexp(1.0, k)
    for slot, m in meaning.items():
        kind, src, dst = m[:3]
        values = [np.asarray(codes_of(words, src, i), np.uint8).view(SMALL[src]).astype(np.float64)
                  * factor for i in m[3]]
        if dst == "f32" or kind == "one":
            want = wide(values[0], "f32")
        elif kind == "half":
            high = m[4]
            keep = (0xCAFEF00D >> (16 * (1 - high))) & 0xFFFF
            want = (wide(values[0], dst) << (16 * high)) | (keep << (16 * (1 - high)))
        else:
            want = wide(values[0], dst) | (wide(values[1], dst) << 16)
        nan = np.isnan(values[0]) if kind != "pk" or dst == "f32" else (
            np.isnan(values[0]) | np.isnan(values[1]))
        assert np.array_equal(got[slot][~nan], want[~nan]), (slot, m)


def down_calls(src):
    """Every f32 / f16 / bf16 -> fp8 / bf8 / fp4 intrinsic of source `src`, every destination
    select; meaning[slot] = (dst fmt, shift, width)."""
    calls, decls, meaning, n = [], set(), {}, 0
    ty = "float" if src == "f32" else f"<2 x {WIDE_IR[src]}>"
    args = "float %a, float %b" if src == "f32" else f"{ty} {'%xh' if src == 'f16' else '%xb'}"
    for dst in ("fp8", "bf8"):
        name = f"llvm.amdgcn.cvt.scalef32.pk.{dst}.{src}"
        params = "float, float" if src == "f32" else ty
        decls.add(f"declare <2 x i16> @{name}(<2 x i16>, {params}, float, i1)")
        for high in (0, 1):
            calls.append(f"  %d{n} = call <2 x i16> @{name}(<2 x i16> %old16, {args}, "
                         f"float %s, i1 {high})")
            calls.append(f"  %w{n} = bitcast <2 x i16> %d{n} to i32")
            calls.append(store(n, f"%w{n}"))
            meaning[n] = (dst, 16 * high, 16)
            n += 1
    name = f"llvm.amdgcn.cvt.scalef32.pk.fp4.{src}"
    params = "float, float" if src == "f32" else ty
    decls.add(f"declare i32 @{name}(i32, {params}, float, i32)")
    for byte in range(4):
        calls.append(f"  %d{n} = call i32 @{name}(i32 %old, {args}, float %s, i32 {byte})")
        calls.append(store(n, f"%d{n}"))
        meaning[n] = ("fp4", 8 * byte, 8)
        n += 1
    return calls, decls, meaning


@pytest.mark.parametrize("src", ["f32", "f16", "bf16"])
def test_llvm_down_conversions_every_select(src):
    calls, decls, meaning = down_calls(src)
    asm = gfx950_asm(kernel(calls, decls))
    assert "op_sel:[0,0,1,1]" in asm
    k = RNG.integers(-4, 5, 64)
    ty = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[src]
    pair = (RNG.normal(size=(64, 2)) * np.exp2(RNG.uniform(-8, 3, (64, 2)))).astype(ty)
    pair = pair.astype(np.float64)
    inputs = np.zeros(256, np.uint32)
    if src == "f32":
        inputs[:64] = pair[:, 0].astype(np.float32).view(np.uint32)
        inputs[192:] = pair[:, 1].astype(np.float32).view(np.uint32)
    else:
        halves = pair.astype(ty).view(np.uint16).astype(np.uint32)
        inputs[:64] = halves[:, 0] | (halves[:, 1] << 16)
    inputs[64:128] = ((k + 127) << 23).astype(np.uint32)
    inputs[128:192] = 0x9ABCDEF0
    got = run_slots(asm, inputs, len(meaning))
    y = pair / np.ldexp(1.0, k)[:, None]
    for slot, (dst, shift, width) in meaning.items():
        code = [y[:, i].astype(SMALL[dst]).view(np.uint8).astype(np.uint32)
                & np.uint32((1 << (width // 2)) - 1) for i in (0, 1)]
        field = code[0] | (code[1] << np.uint32(width // 2))
        mask = np.uint32(((1 << width) - 1) << shift)
        want = (np.uint32(0x9ABCDEF0) & ~mask) | (field << np.uint32(shift))
        assert np.array_equal(got[slot], want), (slot, src, dst, shift)


@pytest.mark.parametrize("fmt", ["fp6", "bf6"])
def test_llvm_fp6_pk32_round_trip(fmt):
    """pk32 f16 -> fp6 / bf6 and back, and 2xpk16 f32 -> fp6 / bf6, as LLVM emits them."""
    decls = {f"declare <6 x i32> @llvm.amdgcn.cvt.scalef32.pk32.{fmt}.f16(<32 x half>, float)",
             f"declare <32 x half> @llvm.amdgcn.cvt.scalef32.pk32.f16.{fmt}(<6 x i32>, float)",
             f"declare <6 x i32> @llvm.amdgcn.cvt.scalef32.2xpk16.{fmt}.f32(<16 x float>, "
             "<16 x float>, float)"}
    module = f"""target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
{chr(10).join(sorted(decls))}
define amdgpu_kernel void @k(ptr addrspace(1) %h, ptr addrspace(1) %f, ptr addrspace(1) %s,
                             ptr addrspace(1) %packed, ptr addrspace(1) %back,
                             ptr addrspace(1) %packed2) {{
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %hp = getelementptr <32 x half>, ptr addrspace(1) %h, i32 %t
  %hv = load <32 x half>, ptr addrspace(1) %hp
  %fp = getelementptr <32 x float>, ptr addrspace(1) %f, i32 %t
  %fv = load <32 x float>, ptr addrspace(1) %fp
  %f0 = shufflevector <32 x float> %fv, <32 x float> poison, <16 x i32> <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15>
  %f1 = shufflevector <32 x float> %fv, <32 x float> poison, <16 x i32> <i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23, i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31>
  %sp = getelementptr float, ptr addrspace(1) %s, i32 %t
  %sc = load float, ptr addrspace(1) %sp
  %p = call <6 x i32> @llvm.amdgcn.cvt.scalef32.pk32.{fmt}.f16(<32 x half> %hv, float %sc)
  %t6 = mul i32 %t, 6
  %pp = getelementptr i32, ptr addrspace(1) %packed, i32 %t6
  store <6 x i32> %p, ptr addrspace(1) %pp, align 4
  %u = call <32 x half> @llvm.amdgcn.cvt.scalef32.pk32.f16.{fmt}(<6 x i32> %p, float %sc)
  %up = getelementptr <32 x half>, ptr addrspace(1) %back, i32 %t
  store <32 x half> %u, ptr addrspace(1) %up
  %p2 = call <6 x i32> @llvm.amdgcn.cvt.scalef32.2xpk16.{fmt}.f32(<16 x float> %f0, <16 x float> %f1, float %sc)
  %pp2 = getelementptr i32, ptr addrspace(1) %packed2, i32 %t6
  store <6 x i32> %p2, ptr addrspace(1) %pp2, align 4
  ret void
}}
"""
    asm = gfx950_asm(module)
    big = float(ml_dtypes.finfo(SMALL[fmt]).max)
    k = RNG.integers(-3, 4, 64)
    scale = np.ldexp(1.0, k)[:, None]
    h = (RNG.normal(size=(64, 32)) * big / 2 * scale).astype(np.float16)
    f = (RNG.normal(size=(64, 32)) * big / 2 * scale).astype(np.float32)
    outs = [torch.zeros(64 * 6, dtype=torch.int32), torch.zeros(64 * 32, dtype=torch.float16),
            torch.zeros(64 * 6, dtype=torch.int32)]
    rocke.emu.launch(asm, "k", (1, 1, 1), (64, 1, 1),
                     [torch.from_numpy(h.reshape(-1)), torch.from_numpy(f.reshape(-1)),
                      torch.from_numpy(((k + 127) << 23).astype(np.uint32).view(np.float32))]
                     + outs, target="gfx950")
    codes = (h.astype(np.float64) / scale).astype(SMALL[fmt]).view(np.uint8) & 0x3F
    from .test_mx_conversions import pack6
    assert np.array_equal(outs[0].numpy().view(np.uint32).reshape(64, 6), pack6(codes))
    back = codes.view(SMALL[fmt]).astype(np.float64) * scale
    assert np.array_equal(outs[1].numpy().reshape(64, 32), back.astype(np.float16))
    # 2xpk16: S0's item p and S1's item p interleave (the guide's pass loop)
    fd = f.astype(np.float64) / scale
    inter = np.stack([fd[:, :16], fd[:, 16:]], -1).reshape(64, 32)
    codes2 = inter.astype(SMALL[fmt]).view(np.uint8) & 0x3F
    assert np.array_equal(outs[2].numpy().view(np.uint32).reshape(64, 6), pack6(codes2))
