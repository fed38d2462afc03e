"""Reductions across the waves of a workgroup, argmax/argmin and a small top-k.

Built on the wave reductions of ``rocke.dsl.lanes`` (``wave_reduce``: an xor butterfly) and a
few LDS slots per wave:

- ``block_reduce(k, x, op)`` / ``block_sum`` / ``block_max`` / ``block_min``: every lane gets
  the reduction of ``x`` over the whole workgroup. Float max/min are IEEE maxNum/minNum (a NaN
  loses to a number); float sums are added wave by wave in wave order (deterministic).
- ``wave_argmax(x, index)`` / ``block_argmax`` (and ``argmin``): the extreme value and its
  index; on ties the **lowest index** wins. A NaN beats every number in both (as
  ``torch.argmax`` and ``torch.argmin`` both report a NaN's position); entries with ``valid`` false never win (an all-invalid group reports
  index -1 and the identity value: -inf / +inf, or the type's min / max).
- ``wave_topk(x, index, k)`` / ``block_topk``: the ``k`` largest (``largest=False``: smallest)
  entries, in order, as lists of (value, index); ties by the lowest index. One argmax round per
  entry, so meant for small ``k`` (MoE gating, sampling); a row held one element per lane.
  NaNs rank first here too (``torch.topk(largest=False)`` would put them last).

Each lane holds one scalar entry. Every lane of the workgroup must call the block functions
(not from inside a branch some waves skip) and the workgroup size must be a whole number of
waves. The block functions use a small LDS scratch region per dtype (``block_scratch_*``,
allocated on first use, ``num_waves`` entries) and end with a barrier, so calls can follow
each other freely.
"""

from __future__ import annotations

import math

from . import types as T
from .errors import dsl_type_error, dsl_value_error
from .lanes import shuffle_xor, wave_reduce
from .values import Value, select

_OPS = ("sum", "max", "min")


def _check_block(k):
    if k.workgroup_size % k.wave_size:
        raise dsl_value_error(f"block reductions need whole waves; workgroup_size {k.workgroup_size} "
                              f"is not a multiple of {k.wave_size}")


def _scratch(k, dtype: T.DType):
    """The per-dtype LDS slots (one per wave) the block functions exchange results through."""
    name = f"block_scratch_{dtype.name}"
    region = k.lds_regions.get(name)
    if region is None:
        region = k.lds(name, (k.num_waves,), dtype, align=4)
    return region


def _scalar(x, what: str) -> Value:
    if not isinstance(x, Value) or x.lanes != 1:
        got = x.type_name if isinstance(x, Value) else type(x).__name__
        raise dsl_type_error(f"{what} takes one scalar Value per lane, got {got}")
    return x


def block_reduce(k, x: Value, op: str = "sum") -> Value:
    """``op`` ("sum" | "max" | "min") of ``x`` over every lane of the workgroup, in every lane."""
    if op not in _OPS:
        raise dsl_value_error(f"block_reduce op must be 'sum', 'max' or 'min', got {op!r}")
    x = _scalar(x, "block_reduce")
    _check_block(k)
    partial = wave_reduce(x, op)
    if k.num_waves == 1:
        return partial
    slots = _scratch(k, x.dtype)
    slots.store(k.wave_id(), partial)     # every lane of a wave writes the same value
    k.barrier()
    total = slots.load(0)
    for w in range(1, k.num_waves):
        total = _fold(op, total, slots.load(w))
    k.barrier()                           # the slots may be reused by the next call
    return total


def _fold(op: str, a: Value, b: Value) -> Value:
    from .math import maximum, minimum
    return a + b if op == "sum" else maximum(a, b) if op == "max" else minimum(a, b)


def block_sum(k, x: Value) -> Value:
    return block_reduce(k, x, "sum")


def block_max(k, x: Value) -> Value:
    return block_reduce(k, x, "max")


def block_min(k, x: Value) -> Value:
    return block_reduce(k, x, "min")


# ---- argmax / argmin ------------------------------------------------------------------------

def _identity(k, dtype: T.DType, largest: bool) -> Value:
    if dtype.is_float:
        v = -math.inf if largest else math.inf
        return k.const(v, T.f32).to(dtype) if dtype.kind != "float" else k.const(v, dtype)
    if dtype.is_int:
        lo, hi = (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1) if dtype.is_signed else \
            (0, (1 << dtype.bits) - 1)
        return k.const(lo if largest else hi, dtype)
    raise dsl_type_error(f"argmax/argmin/top-k need an int or float value, got {dtype.name}")


def _wins(a, b, largest: bool) -> Value:
    """Whether entry ``a`` = (value, index, valid) beats ``b``: valid first, then the larger
    (smaller) value -- a NaN beats every number either way -- then the lower index."""
    av, ai, aok = a
    bv, bi, bok = b
    if av.dtype.is_float:
        a_nan, b_nan = av != av, bv != bv
        better = (av > bv) if largest else (av < bv)
        better = better | (a_nan & ~b_nan)
        same = (av == bv) | (a_nan & b_nan)
    else:
        better = (av > bv) if largest else (av < bv)
        same = av == bv
    by_value = better | (same & (ai < bi))
    return (aok & ~bok) | (aok & bok & by_value)


def _pick(cond: Value, a, b):
    return tuple(select(cond, x, y) for x, y in zip(a, b))


def _entry(k, x: Value, index, valid, what: str):
    x = _scalar(x, what)
    idx = k.coerce(index, T.i32, 1, what)
    if idx.dtype != T.i32 or idx.lanes != 1:
        raise dsl_type_error(f"{what}: index must be a scalar i32, got {idx.type_name}")
    ok = k.const(True, T.i1) if valid is None else k.coerce(valid, T.i1, 1, what)
    if ok.dtype != T.i1 or ok.lanes != 1:
        raise dsl_type_error(f"{what}: valid must be a scalar i1, got {ok.type_name}")
    _identity(k, x.dtype, True)          # refuses types without an order
    return x, idx, ok


def _wave_arg(entry, largest: bool):
    acc = entry
    step = 1
    while step < acc[0].kernel.wave_size:
        other = tuple(shuffle_xor(v.to(T.i32) if v.dtype == T.i1 else v, step) for v in acc)
        other = (other[0], other[1], other[2] != 0)
        acc = _pick(_wins(acc, other, largest), acc, other)
        step *= 2
    return acc


def _finish(k, entry, largest: bool):
    value, index, ok = entry
    return select(ok, value, _identity(k, value.dtype, largest)), select(ok, index, -1)


def wave_argmax(x: Value, index, *, valid: Value | None = None, largest: bool = True):
    """(max value, its index) over the wave's lanes, in every lane; lowest index on ties.
    ``largest=False`` is argmin. ``valid`` (i1): entries that take part (default all)."""
    k = x.kernel
    return _finish(k, _wave_arg(_entry(k, x, index, valid, "wave_argmax"), largest), largest)


def wave_argmin(x: Value, index, *, valid: Value | None = None):
    return wave_argmax(x, index, valid=valid, largest=False)


def _block_arg(k, entry, largest: bool):
    _check_block(k)
    best = _wave_arg(entry, largest)
    if k.num_waves == 1:
        return best
    value, index, ok = best
    values, indices = _scratch(k, value.dtype), _scratch(k, T.i32)
    # the validity rides in the index slot: -1 marks "no valid entry in this wave"
    wave = k.wave_id()
    values.store(wave, value)
    indices.store(wave, select(ok, index, -1))
    k.barrier()
    acc = None
    for w in range(k.num_waves):
        i = indices.load(w)
        cand = (values.load(w), i, i >= 0)
        acc = cand if acc is None else _pick(_wins(acc, cand, largest), acc, cand)
    k.barrier()
    return acc


def block_argmax(k, x: Value, index, *, valid: Value | None = None, largest: bool = True):
    """(max value, its index) over the workgroup, in every lane; lowest index on ties.
    Indices must be non-negative i32 (-1 is the "none" answer)."""
    return _finish(k, _block_arg(k, _entry(k, x, index, valid, "block_argmax"), largest), largest)


def block_argmin(k, x: Value, index, *, valid: Value | None = None):
    return block_argmax(k, x, index, valid=valid, largest=False)


# ---- top-k -------------------------------------------------------------------------------------

def _topk(k, x, index, count, valid, largest, block: bool, what: str):
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise dsl_value_error(f"{what}: k must be a positive int, got {count!r}")
    limit = k.workgroup_size if block else k.wave_size
    if count > limit:
        raise dsl_value_error(f"{what}: k={count} exceeds the {limit} entries a "
                              f"{'workgroup' if block else 'wave'} holds")
    value, idx, ok = _entry(k, x, index, valid, what)
    out = []
    for _ in range(count):
        best = _block_arg(k, (value, idx, ok), largest) if block else _wave_arg((value, idx, ok), largest)
        out.append(_finish(k, best, largest))
        ok = ok & ((idx != best[1]) | ~best[2])      # the winner leaves the race
    return out


def wave_topk(x: Value, index, k: int, *, valid: Value | None = None, largest: bool = True):
    """The ``k`` largest entries of the wave (``largest=False``: smallest) as a list of
    (value, index), best first, ties by the lowest index; every lane gets the same list.
    Past the valid entries the list holds (identity, -1). Indices must be distinct."""
    return _topk(x.kernel, x, index, k, valid, largest, False, "wave_topk")


def block_topk(kernel, x: Value, index, k: int, *, valid: Value | None = None, largest: bool = True):
    """``wave_topk`` over the whole workgroup (one block argmax, two barriers, per entry)."""
    return _topk(kernel, x, index, k, valid, largest, True, "block_topk")
