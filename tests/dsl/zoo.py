"""A kernel that touches most DSL operations once, shared by the codegen and determinism tests."""

from rocke import dsl
from rocke.dsl import (DppCtrl, SchedMask, ballot, dpp, ds_swizzle, exp2, fma, maximum, rcp, readfirstlane,
                       rsq, sdiv_const, select, swizzle_bitmask, udiv_const, umod_const, wave_sum)


def build_zoo() -> dsl.Kernel:
    k = dsl.Kernel("ops_zoo", workgroup_size=256, waves_per_eu=2)
    src = k.arg_ptr("src", dsl.f32, readonly=True)
    out = k.arg_ptr("out", dsl.f32)
    half_out = k.arg_ptr("half_out", dsl.f16)
    bf_out = k.arg_ptr("bf_out", dsl.bf16)
    fp8_io = k.arg_ptr("fp8_io", dsl.fp8_e4m3fnuz)
    n = k.arg_i32("n")
    scale = k.arg_f32("scale")

    tid = k.thread_id(0)
    lane = k.lane_id()
    wave = k.wave_id()
    gid = k.block_id(0) * 256 + tid
    tile = k.lds("tile", (4, 64), dsl.f32, pad=4)
    scratch = k.lds("scratch", 256, dsl.f32)

    # async DMA straight into LDS, waited for explicitly, then shared through a barrier
    src_buf = src.buffer(n)
    src_buf.load_to_lds(tile.address(wave, 0), wave * 64 + lane)
    k.wait_vmcnt(0)
    k.barrier()
    x = tile.load((wave, lane))
    vec = src.load(gid * 4, width=4)

    # lane exchanges
    swapped = ds_swizzle(x, swizzle_bitmask(xor_mask=1))
    shifted = dpp(x, DppCtrl.row_shr(1))
    total = wave_sum(x + swapped + shifted, via="dpp")
    uniform = readfirstlane(total)
    votes = ballot(x > 0.0)

    # integer index math with constant divisors
    row = udiv_const(gid, 48)
    col = umod_const(gid, 48)
    signed_q = sdiv_const(gid - 1000, -7)

    # a runtime loop with carried values and a branch that yields
    with k.for_range(0, n, 64, carry=(k.const(0.0, dsl.f32), k.const(-1e30, dsl.f32))) as loop:
        acc, best = loop.carry
        v = src_buf.load(loop.index + lane)
        k.sched_group_barrier(SchedMask.VMEM_READ, 1, 0)
        loop.yield_(fma(v, scale, acc), maximum(best, v))
    acc, best = loop.results
    k.sched_barrier(SchedMask.NONE)
    k.iglp_opt(0)

    choose = k.if_else(acc > best)
    with choose.then_():
        choose.yield_(acc * rcp(best))
    with choose.else_():
        choose.yield_(rsq(best))
    (picked,) = choose.results

    k.s_setprio(2)
    result = exp2(picked, fast=True) + uniform + vec[2] + (votes & 1).to(dsl.f32)
    result = result + (row + col + signed_q).to(dsl.f32)
    k.s_setprio(0)
    scratch.store(tid, result)
    k.barrier()
    neighbour = scratch.load((tid + 1) % 256)
    out.store(gid, select(gid < n, neighbour, 0.0))

    pair = dsl.vector([result, neighbour])
    half_out.store(gid * 2, pair.to(dsl.f16))
    half_out.store(gid * 2 + 512, pair.to(dsl.f16, rounding="rtz"))
    bf_out.store(gid, result.to(dsl.bf16))
    quad = dsl.vector([result, neighbour, x, picked])
    fp8_io.store(gid * 4, quad.to(dsl.fp8_e4m3fnuz))
    back = fp8_io.load(gid * 4 + 1024, width=4).to(dsl.f32)
    out.store(gid + 4096, back[0] + back[3])
    return k
