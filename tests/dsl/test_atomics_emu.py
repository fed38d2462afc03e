"""DSL atomics (rocke.dsl.atomics) on global memory, buffers and LDS, run in the emulator and
checked against torch/Python folds -- with contention: every bucket is hit by lanes of several
waves (and, for global memory, several workgroups) in the same instruction and across waves."""
import functools
import operator

import pytest
import torch

from rocke import dsl
from rocke.dsl import Kernel

from .emu_helper import run

BLOCK, GRID, BUCKETS = 128, 3, 5          # 384 work-items over 5 buckets: ~77 hits per address
N = BLOCK * GRID
INT_OPS = ("add", "sub", "max", "min", "and", "or", "xor", "exchange", "cas")
FLOAT_OPS = ("add", "max", "min", "exchange", "cas")
TORCH = {"i32": torch.int32, "u32": torch.int32, "i64": torch.int64, "u64": torch.int64,
         "f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}


def _build(space: str, dt: str, ops, packed: bool = False):
    """One kernel: for each op, an atomic whose old value is stored and one whose is unused."""
    width = 2 if packed else 1
    k = Kernel(f"atomics_{space}_{dt}{'x2' if packed else ''}", workgroup_size=BLOCK)
    init = k.arg_ptr("init", dt, readonly=True)
    table = k.arg_ptr("table", dt)
    vals = k.arg_ptr("vals", dt, readonly=True)
    olds = k.arg_ptr("olds", dt)
    span = len(ops) * 2 * BUCKETS                       # slots of one table
    t = k.thread_id(0)
    g = k.block_id(0) * BLOCK + t
    if space == "lds":
        bucket = t % BUCKETS
        lds = k.lds("tab", (span * width,), dt)
        with k.if_(t < span * width):
            lds.store(t, init.load(t))
        k.barrier()
        target = lds
    else:
        bucket = g % BUCKETS
        target = table.buffer(span * width) if space == "buffer" else table
    v = vals.load(g * width, width=width)
    for j, op in enumerate(ops):
        slot = j * 2 * BUCKETS + bucket
        if op == "cas":
            expected = init.load(j * 2 * BUCKETS + bucket)
            old = target.atomic_cas(slot, expected, v)
            target.atomic_cas(slot + BUCKETS, expected, v)
        else:
            old = target.atomic(op, slot * width, v)
            target.atomic(op, (slot + BUCKETS) * width, v)
        olds.store((j * N + g) * width, old)
    if space == "lds":
        k.barrier()
        with k.if_(t < span * width):
            table.store(k.block_id(0) * (span * width) + t, lds.load(t))
    return k


def _values(dt: str, n: int) -> list:
    """Per work-item operands: signed ints straddle 0, unsigned ones the top bit, 64-bit ones
    the upper dword; floats are small integers, so every order of the adds is exact."""
    g = torch.arange(n, dtype=torch.int64)
    if dt in ("i32", "i64"):
        base = (g * 37 % 101) - 50
        return (base * (1 << 33) + g if dt == "i64" else base * 1000003 + g).tolist()
    if dt in ("u32", "u64"):
        return [(x * 2654435761 + 1 + (x << 40 if dt == "u64" else 0)) % (1 << (32 if dt == "u32" else 64))
                for x in g.tolist()]
    return ((g * 37 % 23) - 11).to(torch.float64).tolist()


def _tensor(dt: str, xs: list) -> torch.Tensor:
    if dt in ("u32", "u64"):
        bits = 32 if dt == "u32" else 64
        xs = [x - (1 << bits) if x >= 1 << (bits - 1) else x for x in xs]
    return torch.tensor(xs, dtype=TORCH[dt])


def _python(dt: str, t: torch.Tensor) -> list:
    xs = t.tolist()
    if dt in ("u32", "u64"):
        bits = 32 if dt == "u32" else 64
        xs = [x % (1 << bits) for x in xs]
    return xs


def _fold(dt: str, op: str, start, values):
    bits = {"i32": 32, "u32": 32, "i64": 64, "u64": 64}.get(dt)
    if op == "add":
        total = start + sum(values)
    elif op == "sub":
        total = start - sum(values)
    elif op == "max":
        return max([start, *values])
    elif op == "min":
        return min([start, *values])
    else:
        fn = {"and": operator.and_, "or": operator.or_, "xor": operator.xor}[op]
        total = functools.reduce(fn, values, start)
    if bits is None:
        return total
    total %= 1 << bits
    return total - (1 << bits) if dt[0] == "i" and total >= 1 << (bits - 1) else total


def _check(dt, ops, space, init, table, olds, vals):
    groups = GRID if space == "lds" else 1
    span = len(ops) * 2 * BUCKETS
    for wg in range(groups):
        final = table[wg * span:(wg + 1) * span] if space == "lds" else table
        lanes = range(wg * BLOCK, (wg + 1) * BLOCK) if space == "lds" else range(N)
        for j, op in enumerate(ops):
            for b in range(BUCKETS):
                hits = [g for g in lanes if (g % BLOCK if space == "lds" else g) % BUCKETS == b]
                start = init[j * 2 * BUCKETS + b]
                mine = [vals[g] for g in hits]
                got_old = [olds[j * N + g] for g in hits]
                for slot in (j * 2 * BUCKETS + b, j * 2 * BUCKETS + BUCKETS + b):
                    end = final[slot]
                    what = f"{space} {dt} {op} bucket {b} (workgroup {wg})"
                    if op == "exchange":      # the olds and the end value are a permutation
                        if slot == j * 2 * BUCKETS + b:
                            assert sorted(got_old + [end]) == sorted([start] + mine), what
                        assert end in mine, what
                    elif op == "cas":          # exactly one lane sees the expected value and wins
                        if slot == j * 2 * BUCKETS + b:
                            winners = [g for g, o in zip(hits, got_old) if o == start]
                            assert len(winners) == 1, what
                            assert end == vals[winners[0]], what
                            assert all(o == end for o in got_old if o != start), what
                        else:
                            assert end in mine, what
                    else:
                        assert end == _fold(dt, op, start, mine), what
                if op in ("add", "sub") and dt[0] in "iu":
                    # serialized adds: each returned old is the previous one plus its operand
                    step = 1 if op == "add" else -1
                    chain = {o: _fold(dt, "add", o, [step * v]) for o, v in zip(got_old, mine)}
                    cur = start
                    for _ in hits:
                        cur = chain.pop(cur)
                    assert not chain and cur == final[j * 2 * BUCKETS + b], what
                elif op in ("max", "min"):    # each old is the fold of some earlier hits
                    assert all(_fold(dt, op, o, [start]) == o for o in got_old), what


@pytest.mark.parametrize("space", ["global", "buffer", "lds"])
@pytest.mark.parametrize("dt", ["i32", "u32", "i64", "u64", "f32", "f64"])
def test_atomics_under_contention_match_a_sequential_fold(space, dt):
    ops = INT_OPS if dt[0] in "iu" else FLOAT_OPS
    if space == "buffer" and dt == "f32":
        ops = tuple(o for o in ops if o not in ("max", "min"))   # refused: see test below
    span = len(ops) * 2 * BUCKETS
    vals = _values(dt, N)
    # each op's two slots (old value used / unused) start equal
    first = _values(dt, span + 7)[7:] if dt[0] in "iu" else [float(x) * 3 for x in range(span)]
    init_src = [first[(s // (2 * BUCKETS)) * 2 * BUCKETS + s % BUCKETS] for s in range(span)]
    init = _tensor(dt, init_src)
    table = init.repeat(GRID) if space == "lds" else init.clone()
    olds = torch.zeros(len(ops) * N, dtype=TORCH[dt])
    run(_build(space, dt, ops), (GRID, 1, 1), [init, table, _tensor(dt, vals), olds])
    _check(dt, ops, space, _python(dt, init), _python(dt, table), _python(dt, olds), vals)


# no buffer bf16x2: gfx942 lacks buffer_atomic_pk_add_bf16 (its refusal is tested below)
@pytest.mark.parametrize("space, dt", [("global", "f16"), ("buffer", "f16"), ("lds", "f16"),
                                       ("global", "bf16"), ("lds", "bf16")])
def test_packed_half_adds_under_contention(space, dt):
    span = 2 * BUCKETS
    g = torch.arange(N * 2)
    vals = ((g * 7 % 9) - 4).to(TORCH[dt])                     # small ints: exact in any order
    init = (torch.arange(span * 2) - 5).to(TORCH[dt])
    table = init.repeat(GRID) if space == "lds" else init.clone()
    olds = torch.zeros(N * 2, dtype=TORCH[dt])
    run(_build(space, dt, ("add",), packed=True), (GRID, 1, 1), [init, table, vals, olds])
    pairs = vals.view(N, 2).double()
    for wg in range(GRID if space == "lds" else 1):
        lanes = torch.arange(wg * BLOCK, (wg + 1) * BLOCK) if space == "lds" else torch.arange(N)
        bucket = (lanes % BLOCK if space == "lds" else lanes) % BUCKETS
        want = init.view(span, 2).double().clone()
        for off in (0, BUCKETS):
            want[off:off + BUCKETS].index_add_(0, bucket, pairs[lanes])
        got = table.view(-1, 2)[wg * span:(wg + 1) * span].double()
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        # the returned olds of one bucket are distinct partial sums, the first the initial value
        for b in range(BUCKETS):
            hit = lanes[bucket == b]
            got_olds = olds.view(N, 2)[hit].double()
            assert (got_olds == init.view(span, 2)[b].double()).all(dim=1).sum() >= 1


def test_masked_and_out_of_range_buffer_atomics_change_nothing_and_return_zero():
    k = Kernel("buffer_atomic_mask", workgroup_size=64)
    table = k.arg_ptr("table", dsl.i32)
    olds = k.arg_ptr("olds", dsl.i32)
    t = k.thread_id(0)
    buf = table.buffer(8)                               # 8 elements: lanes 8.. are past the extent
    old = buf.atomic_add(t % 16, 1, mask=(t % 2) == 0)  # odd lanes masked off
    olds.store(t, old)
    tab, got = torch.full((16,), 100, dtype=torch.int32), torch.full((64,), -1, dtype=torch.int32)
    run(k, (1, 1, 1), [tab, got])
    lanes = torch.arange(64)
    live = ((lanes % 2) == 0) & ((lanes % 16) < 8)
    want = torch.full((16,), 100, dtype=torch.int32)
    want.index_add_(0, (lanes % 16)[live], torch.ones(int(live.sum()), dtype=torch.int32))
    assert torch.equal(tab, want)
    assert (got[~live] == 0).all() and (got[live] >= 100).all()


@pytest.mark.parametrize("make, message", [
    (lambda k, p, b: p.atomic("and", 0, 1.0), "needs an integer type"),
    (lambda k, p, b: p.atomic("mul", 0, 1.0), "atomic op must be one of"),
    (lambda k, p, b: b.atomic("max", 0, 1.0), "no f32 buffer atomic max"),
    (lambda k, p, b: p.atomic("add", 0, dsl.splat(k.const(1.0, "f32"), 2)), "scalar"),
    (lambda k, p, b: p.atomic("add", 0, k.const(1, "i32")), "convert with .to()"),
])
def test_unsupported_atomics_are_refused_at_the_authors_line(make, message):
    k = Kernel("bad_atomic", workgroup_size=64)
    p = k.arg_ptr("p", dsl.f32)
    with pytest.raises((TypeError, ValueError), match=message) as info:
        make(k, p, p.buffer(4))
    assert __file__ in str(info.value)


def test_packed_bf16_buffer_add_is_refused():
    k = Kernel("bad_atomic", workgroup_size=64)
    p = k.arg_ptr("p", dsl.bf16)
    with pytest.raises(TypeError, match="no buffer_atomic_pk_add_bf16"):
        p.buffer(4).atomic_add(0, dsl.splat(k.const(1.0, "f32").to(dsl.bf16), 2))


def test_readonly_pointer_refuses_atomics():
    k = Kernel("bad_atomic", workgroup_size=64)
    p = k.arg_ptr("p", dsl.i32, readonly=True)
    with pytest.raises(ValueError, match="readonly"):
        p.atomic_add(0, 1)
