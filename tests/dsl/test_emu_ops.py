"""DSL operations executed in the gfx942 emulator, compared with numpy/torch references."""

import numpy as np
import pytest
import torch

from rocke import dsl
from rocke.dsl import DppCtrl

from .emu_helper import run

def test_float_conversions_round_like_torch():
    rng = np.random.default_rng(1)
    specials = np.array([0.0, -0.0, 1.0, 1.00390625, 1.01171875, 65504.0, 65520.0, 1e-8, -3.0e-5,
                         np.inf, -np.inf, 3.0e38], np.float32)
    x = torch.from_numpy(np.concatenate([rng.standard_normal(180).astype(np.float32) * 10,
                                         rng.standard_normal(52).astype(np.float32) * 1e-3, specials]))
    n = x.numel()
    k = dsl.Kernel("conversions", workgroup_size=256)
    src = k.arg_ptr("src", dsl.f32, readonly=True)
    to_bf16 = k.arg_ptr("to_bf16", dsl.bf16)
    to_f16 = k.arg_ptr("to_f16", dsl.f16)
    bf16_back = k.arg_ptr("bf16_back", dsl.f32)
    i = k.thread_id(0)
    with k.if_(i < n):
        v = src.load(i)
        b = v.to(dsl.bf16)
        to_bf16.store(i, b)
        to_f16.store(i, v.to(dsl.f16))
        bf16_back.store(i, b.to(dsl.f32) * 2.0)
    outs = [torch.zeros(n, dtype=torch.bfloat16), torch.zeros(n, dtype=torch.float16), torch.zeros(n)]
    run(k, (1, 1, 1), [x, *outs])
    assert torch.equal(outs[0].view(torch.int16), x.to(torch.bfloat16).view(torch.int16))
    assert torch.equal(outs[1].view(torch.int16), x.to(torch.float16).view(torch.int16))
    assert torch.equal(outs[2], x.to(torch.bfloat16).float() * 2)


@pytest.mark.parametrize("fmt, limit", [("fp8_e4m3fnuz", 240.0), ("fp8_e5m2fnuz", 57344.0)])
def test_fp8_conversions_match_torch(fmt, limit):
    torch_fmt = getattr(torch, fmt.replace("fp8_", "float8_"))
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(-limit, limit, 64), rng.standard_normal(64),
                        rng.standard_normal(64) * 1e-2, [0.0, limit, -limit, 1.0]]).astype(np.float32)
    x = torch.from_numpy(x[: 4 * (x.size // 4)])
    n = x.numel()
    k = dsl.Kernel(f"to_{fmt}", workgroup_size=64)
    src = k.arg_ptr("src", dsl.f32, readonly=True)
    packed = k.arg_ptr("packed", fmt)
    single = k.arg_ptr("single", fmt)
    back = k.arg_ptr("back", dsl.f32)
    i = k.thread_id(0)
    with k.if_(i * 4 < n):
        quad = src.load(i * 4, width=4)
        q8 = quad.to(fmt)
        packed.store(i * 4, q8)
        for j in range(4):
            single.store(i * 4 + j, quad[j].to(fmt))
        back.store(i * 4, q8.to(dsl.f32))
    outs = [torch.zeros(n, dtype=torch.uint8), torch.zeros(n, dtype=torch.uint8), torch.zeros(n)]
    run(k, (1, 1, 1), [x, *outs])
    expected = x.to(torch_fmt)
    assert torch.equal(outs[0], expected.view(torch.uint8))
    assert torch.equal(outs[1], expected.view(torch.uint8))
    assert torch.equal(outs[2], expected.float())


def test_integer_arithmetic_semantics():
    rng = np.random.default_rng(3)
    a = rng.integers(-5000, 5000, 128).astype(np.int32)
    b = rng.integers(1, 300, 128).astype(np.int32) * rng.choice([-1, 1], 128).astype(np.int32)
    k = dsl.Kernel("int_ops", workgroup_size=128)
    pa = k.arg_ptr("a", dsl.i32, readonly=True)
    pb = k.arg_ptr("b", dsl.i32, readonly=True)
    out = k.arg_ptr("out", dsl.i32)
    i = k.thread_id(0)
    x, y = pa.load(i), pb.load(i)
    ux = x.bitcast(dsl.u32)
    results = [x // y, x % y, x >> 3, (ux >> 3).bitcast(dsl.i32), x << 2, x & y, x | 7, x ^ y,
               dsl.maximum(x, y), dsl.minimum(x, y), dsl.select(x < y, x, y * 2), abs(x),
               (x >= y).to(dsl.i32), (ux // 7).bitcast(dsl.i32), dsl.sdiv_const(x, -7), dsl.smod_const(x, 9),
               dsl.udiv_const(ux, 1000).bitcast(dsl.i32), -x]
    for j, r in enumerate(results):
        out.store(i + 128 * j, r)
    got = torch.zeros(128 * len(results), dtype=torch.int32)
    run(k, (1, 1, 1), [torch.from_numpy(a), torch.from_numpy(b), got])
    ua = a.view(np.uint32)
    trunc_div = np.trunc(a / b).astype(np.int32)
    expected = [trunc_div, a - trunc_div * b, a >> 3, (ua >> 3).view(np.int32), a << 2, a & b, a | 7, a ^ b,
                np.maximum(a, b), np.minimum(a, b), np.where(a < b, a, b * 2), np.abs(a),
                (a >= b).astype(np.int32), (ua // 7).view(np.int32), np.trunc(a / -7).astype(np.int32),
                np.fmod(a, 9), (ua // 1000).view(np.int32), -a]
    np.testing.assert_array_equal(got.numpy().reshape(len(results), 128), np.stack(expected))


def test_float_math_against_numpy():
    rng = np.random.default_rng(4)
    x = rng.uniform(0.1, 20.0, 64).astype(np.float32)
    y = rng.uniform(-3.0, 3.0, 64).astype(np.float32)
    k = dsl.Kernel("float_ops", workgroup_size=64)
    px = k.arg_ptr("x", dsl.f32, readonly=True)
    py = k.arg_ptr("y", dsl.f32, readonly=True)
    out = k.arg_ptr("out", dsl.f32)
    i = k.thread_id(0)
    a, b = px.load(i), py.load(i)
    results = [dsl.exp2(b), dsl.exp2(b, fast=True), dsl.log2(a), dsl.rcp(a), dsl.rsq(a), dsl.sqrt(a),
               dsl.fma(a, b, 1.5), dsl.floor(b), abs(b), dsl.maximum(a, b), a / b, a // b, a % b, -b]
    for j, r in enumerate(results):
        out.store(i + 64 * j, r)
    got = torch.zeros(64 * len(results))
    run(k, (1, 1, 1), [torch.from_numpy(x), torch.from_numpy(y), got])
    expected = [np.exp2(y), np.exp2(y), np.log2(x), 1 / x, 1 / np.sqrt(x), np.sqrt(x), x * y + 1.5,
                np.floor(y), np.abs(y), np.maximum(x, y), x / y, np.floor(x / y), np.fmod(x, y), -y]
    np.testing.assert_allclose(got.numpy().reshape(len(results), 64), np.stack(expected).astype(np.float32),
                               rtol=2e-6, atol=1e-6)


def test_loops_and_branches_with_carried_values():
    n = 50
    k = dsl.Kernel("control", workgroup_size=64)
    out = k.arg_ptr("out", dsl.i32)
    count = k.arg_i32("count")
    lane = k.lane_id()
    with k.for_range(0, count, 3, carry=(k.const(0, dsl.i32), k.const(1, dsl.i32))) as loop:
        total, prod = loop.carry
        odd = k.if_else((loop.index & 1) == 1)
        with odd.then_():
            odd.yield_(loop.index * lane)
        with odd.else_():
            odd.yield_(loop.index + lane)
        (term,) = odd.results
        loop.yield_(total + term, (prod * 3) % 1000)
    total, prod = loop.results
    with k.if_(lane >= 32, carry=(total,)) as upper:
        upper.yield_(total * -1)
    (signed_total,) = upper.results
    with k.for_range(lane, 64, 16) as inner:  # runtime per-lane bounds: divergent trip counts
        out.store(64 + inner.index, inner.index)
    out.store(lane, signed_total + prod)
    got = torch.full((128,), -7, dtype=torch.int32)
    run(k, (1, 1, 1), [got, n])
    lanes = np.arange(64)
    idx = np.arange(0, n, 3)
    terms = np.where((idx[:, None] & 1) == 1, idx[:, None] * lanes, idx[:, None] + lanes)
    prod = 1
    for _ in idx:
        prod = prod * 3 % 1000
    expected = np.where(lanes >= 32, -terms.sum(0), terms.sum(0)) + prod
    np.testing.assert_array_equal(got[:64].numpy(), expected)
    np.testing.assert_array_equal(got[64:].numpy(), np.arange(64))


@pytest.mark.parametrize("via", ["swizzle", "dpp"])
def test_wave_reductions_all_widths(via):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(64).astype(np.float32)
    xi = rng.integers(-1000, 1000, 64).astype(np.int32)
    widths = [2, 4, 8, 16, 32, 64]
    k = dsl.Kernel(f"reduce_{via}", workgroup_size=64)
    px = k.arg_ptr("x", dsl.f32, readonly=True)
    pi = k.arg_ptr("xi", dsl.i32, readonly=True)
    out = k.arg_ptr("out", dsl.f32)
    out_i = k.arg_ptr("out_i", dsl.i32)
    lane = k.lane_id()
    v, vi = px.load(lane), pi.load(lane)
    for j, w in enumerate(widths):
        out.store(lane + 64 * (2 * j), dsl.wave_max(v, width=w, via=via))
        out.store(lane + 64 * (2 * j + 1), dsl.wave_min(v, width=w, via=via))
        out_i.store(lane + 64 * j, dsl.wave_sum(vi, width=w, via=via))
    got = torch.zeros(64 * 2 * len(widths))
    got_i = torch.zeros(64 * len(widths), dtype=torch.int32)
    run(k, (1, 1, 1), [torch.from_numpy(x), torch.from_numpy(xi), got, got_i])
    got = got.numpy().reshape(-1, 64)
    got_i = got_i.numpy().reshape(-1, 64)
    for j, w in enumerate(widths):
        groups = x.reshape(-1, w)
        np.testing.assert_array_equal(got[2 * j], np.repeat(groups.max(1), w))
        np.testing.assert_array_equal(got[2 * j + 1], np.repeat(groups.min(1), w))
        np.testing.assert_array_equal(got_i[j], np.repeat(xi.reshape(-1, w).sum(1), w))


def test_lane_movement_primitives():
    k = dsl.Kernel("lane_moves", workgroup_size=128)
    out = k.arg_ptr("out", dsl.i32)
    lane = k.lane_id()
    wave = k.wave_id()
    base = lane * 10 + wave * 1000
    results = [
        dsl.ds_swizzle(base, dsl.swizzle_bitmask(and_mask=0x1C, or_mask=0x1)),    # (l & 0x1C) | 1 within 32
        dsl.ds_swizzle(base, dsl.swizzle_quad_perm(3, 2, 1, 0)),
        dsl.ds_bpermute(((lane + 5) % 64) * 4, base),
        dsl.dpp(base, DppCtrl.row_shr(1)),                                      # lane 0 of each row reads 0
        dsl.dpp(base, DppCtrl.quad_perm(0, 0, 2, 2)),
        dsl.dpp(base, DppCtrl.row_ror(4)),
        dsl.shuffle_xor(base, 32),
        dsl.readfirstlane(base + 3),
        dsl.ballot((lane % 3) == 0).to(dsl.i32),
        k.thread_id(0),
    ]
    for j, r in enumerate(results):
        out.store(k.thread_id(0) + 128 * j, r)
    got = torch.zeros(128 * len(results), dtype=torch.int32)
    run(k, (1, 1, 1), [got])
    got = got.numpy().reshape(len(results), 2, 64)
    lanes = np.arange(64)
    rows = lanes // 16 * 16
    ballot_low = np.int32(np.uint32(sum(1 << l for l in range(0, 32, 3))).view(np.int32))
    for w in range(2):
        val = lambda src: src * 10 + w * 1000  # noqa: E731
        expected = [
            val((lanes & ~31) | ((lanes & 0x1C) | 1)),
            val(lanes // 4 * 4 + (3 - lanes % 4)),
            val((lanes + 5) % 64),
            np.where(lanes % 16 == 0, 0, val(lanes - 1)),
            val(lanes // 4 * 4 + (lanes % 4) // 2 * 2),
            val(rows + (lanes - rows - 4) % 16),
            val(lanes ^ 32),
            np.full(64, val(0) + 3),
            np.full(64, ballot_low),
            lanes + 64 * w,
        ]
        np.testing.assert_array_equal(got[:, w, :], np.stack(expected))


def test_buffer_range_checks_and_lds_dma():
    n = 150
    src = torch.arange(1, 257, dtype=torch.float32)
    k = dsl.Kernel("buffers", workgroup_size=128)
    psrc = k.arg_ptr("src", dsl.f32, readonly=True)
    out = k.arg_ptr("out", dsl.f32)
    count = k.arg_i32("count")
    tid = k.thread_id(0)
    lane, wave = k.lane_id(), k.wave_id()
    buf = psrc.buffer(count)
    tile = k.lds("tile", (2, 64), dsl.f32, pad=1)
    flat = k.lds("flat", (2, 64), dsl.f32, offset=0, alias=True)  # the same bytes, unpadded view
    # row 0's pad, which `flat` reads below: LDS starts undefined (the emulator's init check)
    flat.store((1, 0), k.const(0.0, dsl.f32))
    # each wave DMAs 64 dwords; pad=1 lays its rows 65 floats apart in LDS
    buf.load_to_lds(tile.address(wave, 0), wave * 64 + lane + 100)
    k.wait_vmcnt(0)
    k.barrier()
    out.store(tid, tile.load((1 - wave, 63 - lane)))
    out.store(128 + tid, flat.load((wave, lane)))
    out.store(256 + tid, buf.load(tid + 100))                     # past `count` reads 0
    out_buf = out.offset(384).buffer(count - 100)
    out_buf.store(tid, k.const(5.0, dsl.f32))                     # past the extent: dropped
    pairs = buf.load(tid * 2, width=2)
    out.store(512 + tid * 2, pairs, align=4)
    got = torch.full((768,), -1.0)
    run(k, (1, 1, 1), [src, got, n])
    fetched = np.where(np.arange(128) + 100 < n, src.numpy()[100:228], 0)
    padded = np.zeros(130, np.float32)
    padded[:64], padded[65:129] = fetched[:64], fetched[64:]
    np.testing.assert_array_equal(got[:128].numpy(), fetched.reshape(2, 64)[::-1, ::-1].reshape(-1))
    np.testing.assert_array_equal(got[128:256].numpy(), padded[:128])
    np.testing.assert_array_equal(got[256:384].numpy(), fetched)
    np.testing.assert_array_equal(got[384:512].numpy(), np.where(np.arange(128) < n - 100, 5.0, -1.0))
    np.testing.assert_array_equal(got[512:768].numpy(), np.where(np.arange(256) < n, src.numpy(), 0))


def test_package_docstring_example_runs():
    code = dsl.__doc__.split("::\n", 1)[1].split("\n\n    ir_text")[0]
    namespace = {}
    exec(compile("\n".join(line[4:] for line in code.splitlines()), "dsl-docstring", "exec"), namespace)
    kernel = namespace["build_scale"](64)
    x = torch.arange(100, dtype=torch.float32)
    padded = torch.cat([x.clone(), torch.full((28,), -1.0)])
    run(kernel, (2, 1, 1), [padded[:100], 100, 0.5])
    assert torch.equal(padded[:100], x * 0.5)
    assert torch.equal(padded[100:], torch.full((28,), -1.0))
