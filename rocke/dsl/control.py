"""Runtime control flow with explicit loop-carried and branch-yielded values.

::

    with k.for_range(0, n_tiles, carry=(m0, l0)) as loop:
        m, l = loop.carry
        ...
        loop.yield_(m_new, l_new)
    m, l = loop.results

    with k.if_(row < rows):                       # no values
        ...

    br = k.if_else(x > 0)
    with br.then_():
        br.yield_(x * 2)
    with br.else_():
        br.yield_(-x)
    (y,) = br.results

Carried and yielded items (``for_range``, ``if_``, ``if_else``) may also be register tiles
(``Fragment``, ``AxisVector``) or any DSL object with the carry protocol (``rocke.dsl.tree``),
and dicts, dataclasses, lists and tuples of those, nested. A list/tuple ``carry`` is a list of
items (``loop.carry`` is a tuple, ``yield_(*items)``); any other ``carry`` (a dict, a
dataclass, one tile) is one structure (``loop.carry`` is that structure, ``yield_(structure)``)::

    with k.for_range(0, n, 1, carry={"m": m0, "l": l0, "o": [acc0, acc1]}) as loop:
        st = loop.carry
        ...
        loop.yield_({"m": m1, "l": l1, "o": [o0, o1]})
    final = loop.results                      # a dict of the same keys

Yielding a structure or tile layout other than the carried one is a ValueError naming the
item's path (``item #2['o'][1]``).

A value defined inside a loop body or branch arm is only usable inside it; using it after the
region closes is a ValueError at the line of the use. Loops compare ``i < hi`` (signed or
unsigned per the index dtype) and require ``step > 0``.
"""

from __future__ import annotations

from . import types as T
from .errors import dsl_type_error, dsl_value_error, user_location
from . import tree
from .values import Value


def _check_values(k, values, what: str):
    for v in values:
        if not isinstance(v, Value):
            raise dsl_type_error(f"{what} must be runtime Values (use k.const for numbers), "
                                 f"got {type(v).__name__}")
        k.ir_of(v)
    return values


def _check_yield(k, region_scope, expected, values, what: str):
    if k.current_scope is not region_scope:
        raise dsl_value_error(f"{what}.yield_ must be called directly in its own body, "
                              f"not inside a nested {k.current_scope.kind}")
    if len(values) != len(expected):
        raise dsl_value_error(f"{what}.yield_ got {len(values)} values, expected {len(expected)}")
    irs = []
    for i, (v, like) in enumerate(zip(values, expected)):
        v = k.coerce(v, like.dtype, like.lanes, "yield_")
        if v.dtype != like.dtype or v.lanes != like.lanes:
            raise dsl_type_error(f"{what}.yield_ value #{i} is {v.type_name} but the carried "
                                 f"value is {like.type_name}")
        irs.append(k.ir_of(v))
    return irs


class _Carried:
    """The flat Values behind a carry: a list/tuple of items (each a Value, a DSL object with
    the carry protocol, or a dict / dataclass / list / tuple of those, nested) or one such
    structure (``single``), and how to rebuild it (``rocke.dsl.tree``)."""

    def __init__(self, carry):
        if tree.is_iterable_items(carry):
            carry = tuple(carry)          # a generator of items
        self.single = not isinstance(carry, (list, tuple))
        items = (carry,) if self.single else tuple(carry)
        flat = [tree.flatten(item) for item in items]
        self.specs = tuple(spec for _, spec in flat)
        self.values = tuple(leaf for leaves, _ in flat for leaf in leaves)

    def unwrap_yield(self, items, what: str):
        """The yielded Values; each item must have the carried item's structure and layouts."""
        if self.single:
            if len(items) != 1:
                raise dsl_value_error(f"{what}.yield_ takes the one carried structure, got {len(items)} items")
        elif len(items) != len(self.specs):
            if all(s.kind == "value" or s.kind == "object" for s in self.specs):
                return list(items)        # _check_yield reports the count mismatch
            raise dsl_value_error(f"{what}.yield_ got {len(items)} items, expected {len(self.specs)}")
        out = []
        for i, (x, spec) in enumerate(zip(items, self.specs)):
            path = f"{what}.yield_ item" if self.single else f"{what}.yield_ item #{i}"
            out += tree.match(spec, x, path)
        return out

    def wrap(self, values):
        it = iter(values)
        items = tuple(tree.unflatten(spec, it) for spec in self.specs)
        return items[0] if self.single else items


class ForRange:
    """``with k.for_range(lo, hi, step, carry=(...)) as loop``: see the module docstring."""

    def __init__(self, k, lo, hi, step, carry):
        self.k = k
        like = next((x for x in (lo, hi, step) if isinstance(x, Value)), None)
        dtype = like.dtype if like is not None else T.i32
        if not dtype.is_int:
            raise dsl_type_error(f"for_range bounds must be integers, got {dtype.name}")
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step <= 0:
            raise dsl_value_error(f"for_range step must be positive, got {step!r}")
        bounds = [k.coerce(x, dtype, 1, "for_range") for x in (lo, hi, step)]
        for b in bounds:
            if b.dtype != dtype or b.lanes != 1:
                raise dsl_type_error(f"for_range bounds must all be scalar {dtype.name}, got {b.type_name}")
        self.lo, self.hi, self.step = bounds
        self.dtype = dtype
        self._carried = _Carried(carry)
        self._init_carry = _check_values(k, self._carried.values, "for_range carry values")
        self._yielded = None
        self.results = None

    def __enter__(self):
        k = self.k
        b = k.builder
        lo, hi, self._step_ir = k.ir_of(self.lo), k.ir_of(self.hi), k.ir_of(self.step)
        inits = [k.ir_of(c) for c in self._init_carry]
        fn = k.function
        preheader = b.block
        self._header = fn.append_basic_block("loop_header")
        body = fn.append_basic_block("loop_body")
        self._exit = fn.append_basic_block("loop_exit")
        b.branch(self._header)
        b.position_at_end(self._header)
        self._index_phi = b.phi(self.dtype.ir_type, name="loop_i")
        self._index_phi.add_incoming(lo, preheader)
        self._carry_phis = []
        for init in inits:
            phi = b.phi(init.type, name="loop_carry")
            phi.add_incoming(init, preheader)
            self._carry_phis.append(phi)
        cmp = b.icmp_signed if self.dtype.is_signed else b.icmp_unsigned
        b.cbranch(cmp("<", self._index_phi, hi), body, self._exit)
        b.position_at_end(body)
        self._parent = k.current_scope
        self._scope = k.enter_scope("for_range")
        self.index = Value(k, self._index_phi, self.dtype, 1, self._scope)
        self.carry = self._carried.wrap(Value(k, phi, c.dtype, c.lanes, self._scope)
                                        for phi, c in zip(self._carry_phis, self._init_carry))
        return self

    def yield_(self, *values):
        """The carried values for the next iteration (once, at the end of the body)."""
        if self._yielded is not None:
            raise dsl_value_error("for_range.yield_ called twice in one body")
        values = self._carried.unwrap_yield(values, "for_range")
        self._yielded = _check_yield(self.k, self._scope, self._init_carry, values, "for_range")

    def __exit__(self, exc_type, exc, tb):
        k = self.k
        k.leave_scope(self._scope)
        if exc_type is not None:
            return False
        if self._init_carry and self._yielded is None:
            raise dsl_value_error(f"the for_range opened at {self._scope.opened_at} carries "
                                  f"{len(self._init_carry)} values but its body never called yield_")
        b = k.builder_unchecked
        next_index = b.add(self._index_phi, self._step_ir, name="loop_next")
        latch = b.block
        b.branch(self._header)
        self._index_phi.add_incoming(next_index, latch)
        for phi, value in zip(self._carry_phis, self._yielded or ()):
            phi.add_incoming(value, latch)
        b.position_at_end(self._exit)
        self.results = self._carried.wrap(Value(k, phi, c.dtype, c.lanes, self._parent)
                                          for phi, c in zip(self._carry_phis, self._init_carry))
        return False


def _check_cond(k, cond):
    if not isinstance(cond, Value) or cond.dtype != T.i1 or cond.lanes != 1:
        got = cond.type_name if isinstance(cond, Value) else type(cond).__name__
        raise dsl_type_error(f"branch condition must be a scalar i1 value, got {got}")
    return k.ir_of(cond)


class IfThen:
    """``with k.if_(cond, carry=(...)) as br``: ``br.results`` are the yielded values when
    ``cond`` held and the original ``carry`` values otherwise."""

    def __init__(self, k, cond, carry):
        self.k = k
        self._cond = cond
        self._carried = _Carried(carry)
        self._init_values = _check_values(k, self._carried.values, "if_ carry values")
        self.carry = carry
        self._yielded = None
        self.results = None

    def __enter__(self):
        k = self.k
        b = k.builder
        cond = _check_cond(k, self._cond)
        fn = k.function
        self._entry = b.block
        then_block = fn.append_basic_block("if_then")
        self._merge = fn.append_basic_block("if_end")
        b.cbranch(cond, then_block, self._merge)
        b.position_at_end(then_block)
        self._parent = k.current_scope
        self._scope = k.enter_scope("if_")
        return self

    def yield_(self, *values):
        if self._yielded is not None:
            raise dsl_value_error("if_.yield_ called twice")
        values = self._carried.unwrap_yield(values, "if_")
        self._yielded = _check_yield(self.k, self._scope, self._init_values, values, "if_")

    def __exit__(self, exc_type, exc, tb):
        k = self.k
        k.leave_scope(self._scope)
        if exc_type is not None:
            return False
        if self._init_values and self._yielded is None:
            raise dsl_value_error(f"the if_ opened at {self._scope.opened_at} carries "
                                  f"{len(self._init_values)} values but never called yield_")
        b = k.builder_unchecked
        then_end = b.block
        b.branch(self._merge)
        b.position_at_end(self._merge)
        results = []
        for value, original in zip(self._yielded or (), self._init_values):
            phi = b.phi(value.type, name="if_result")
            phi.add_incoming(value, then_end)
            phi.add_incoming(original.ir, self._entry)
            results.append(Value(k, phi, original.dtype, original.lanes, self._parent))
        self.results = self._carried.wrap(results)
        return False


class _Arm:
    def __init__(self, owner: "IfElse", which: str):
        self.owner = owner
        self.which = which

    def __enter__(self):
        return self.owner._enter_arm(self.which)

    def __exit__(self, exc_type, exc, tb):
        return self.owner._exit_arm(self.which, exc_type)


class IfElse:
    """``br = k.if_else(cond)``; ``with br.then_(): ...``; ``with br.else_(): ...``;
    both arms ``yield_`` the same number and types of values, read back as ``br.results``."""

    def __init__(self, k, cond):
        self.k = k
        b = k.builder
        cond_ir = _check_cond(k, cond)
        fn = k.function
        self._entry = b.block
        self._blocks = {"then": fn.append_basic_block("if_then"), "else": fn.append_basic_block("if_else")}
        self._merge = fn.append_basic_block("if_end")
        b.cbranch(cond_ir, self._blocks["then"], self._blocks["else"])
        self._parent = k.current_scope
        self._opened_at = user_location()
        self._state = "then"
        self._yields = {}
        self._ends = {}
        self._like = None
        self._carried = None
        self.results = None
        k.set_pending_branch(self)

    def then_(self):
        return _Arm(self, "then")

    def else_(self):
        return _Arm(self, "else")

    def _enter_arm(self, which: str):
        k = self.k
        if self._state != which or k.current_scope is not self._parent:
            raise dsl_value_error(f"if_else arms must be opened in order then_, else_ right after "
                                  f"if_else (at {self._opened_at}); got {which}_ out of order")
        k.set_pending_branch(None)
        k.builder_unchecked.position_at_end(self._blocks[which])
        self._scope = k.enter_scope(f"if_else {which}_ arm")
        return self

    def yield_(self, *values):
        which = self._state
        if which in self._yields:
            raise dsl_value_error(f"if_else {which}_ arm yielded twice")
        k = self.k
        if which == "then":
            self._carried = _Carried(values)
            coerced = []
            for v in self._carried.values:
                if not isinstance(v, Value):
                    raise dsl_type_error("the then_ arm must yield runtime Values, tiles or "
                                         "structures of them (it fixes the types)")
                coerced.append(v)
            self._like = coerced
            self._yields[which] = _check_yield(k, self._scope, coerced, coerced, "if_else")
        else:
            values = self._carried.unwrap_yield(values, "if_else") if self._carried else values
            self._yields[which] = _check_yield(k, self._scope, self._like or [], values, "if_else")

    def _exit_arm(self, which: str, exc_type):
        k = self.k
        k.leave_scope(self._scope)
        if exc_type is not None:
            k.set_pending_branch(None)
            return False
        b = k.builder_unchecked
        self._ends[which] = b.block
        b.branch(self._merge)
        if which == "then":
            self._state = "else"
            k.set_pending_branch(self)
            return False
        then_count = len(self._yields.get("then", ()))
        if then_count != len(self._yields.get("else", ())):
            raise dsl_value_error(f"if_else arms yield different numbers of values "
                                  f"(then_: {then_count}, else_: {len(self._yields.get('else', ()))})")
        self._state = "done"
        b.position_at_end(self._merge)
        results = []
        for like, tv, ev in zip(self._like or (), self._yields.get("then", ()), self._yields.get("else", ())):
            phi = b.phi(tv.type, name="if_result")
            phi.add_incoming(tv, self._ends["then"])
            phi.add_incoming(ev, self._ends["else"])
            results.append(Value(k, phi, like.dtype, like.lanes, self._parent))
        self.results = self._carried.wrap(results) if self._carried else tuple(results)
        return False
