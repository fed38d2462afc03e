"""The emission layer every DSL object builds on: a leaf module (it imports only the DSL's
types, values and errors), so no other DSL module needs to import ``kernel``.

``Emitter`` is the part of ``Kernel`` that other DSL modules call -- its small public internal
API -- holding the builder, the scope stack that makes runtime regions explicit, the LDS arena
and LLVM intrinsic declarations:

- ``builder``: the IR builder, after checking emission is legal here (the kernel is not
  finished, no if_else is waiting for its else_ arm); ``builder_unchecked``: without checks
  (closing a region); ``function``: the llvmlite function;
- ``ir_of(value)``: a Value's IR after checking it is visible from the current scope;
  ``wrap(ir, dtype, lanes)``: a new Value in the current scope; ``coerce(x, dtype, lanes,
  what)``: a Value, or a constant made from a Python number; ``const``, ``const_vector``,
  ``zeros``;
- ``intrinsic(name, ret, params)`` / ``call(name, ret, args)``: declare / call an intrinsic;
  ``call_intrinsic``: the same with Values (the public extension point);
- ``current_scope``, ``enter_scope(kind)``, ``leave_scope(scope)``, ``set_pending_branch``;
- ``lds_arena()``, ``lds_regions``, ``add_lds_region(region)``.

The underscore names of the first version (``_b``, ``_use``, ``_wrap``, ``_coerce``,
``_call``, ``_intrinsic``) remain as aliases for code written against them.
"""

from __future__ import annotations

import math
import struct

import llvmlite.ir as ir

from . import types as T
from .errors import dsl_type_error, dsl_value_error, user_location
from .values import Value

LDS_ARENA_NAME = "rocke_lds"
_I8 = ir.IntType(8)
_I32 = ir.IntType(32)


class Scope:
    """A region of straight-line emission: the kernel body, a loop body or a branch arm."""

    __slots__ = ("kind", "parent", "opened_at", "closed")

    def __init__(self, kind: str, parent: "Scope | None", opened_at: str):
        self.kind = kind
        self.parent = parent
        self.opened_at = opened_at
        self.closed = False


class Emitter:
    """Mixin of ``Kernel`` (which owns the state: ``module``, ``name``, ``_function``,
    ``_builder``, ``_scope``, ``_pending_branch``, ``_lds_regions``, ``_lds_arena``,
    ``_ir_text``) exposing the emission API listed in the module docstring."""

    def _open_function(self):
        """Create the function (the Kernel does it once its arguments are final)."""
        raise NotImplementedError

    # ---- the builder and the function -------------------------------------------------------
    @property
    def builder(self) -> ir.IRBuilder:
        """The builder, after checking that emitting here is legal."""
        if self._ir_text is not None:
            raise dsl_value_error(f"kernel {self.name!r} is finished (ir() was called); cannot emit more")
        if self._pending_branch is not None:
            raise dsl_value_error("an if_else has a then_ arm but no else_ arm yet; "
                                  "open the else_ arm before emitting other code")
        if self._function is None:
            self._open_function()
        return self._builder

    @property
    def builder_unchecked(self) -> ir.IRBuilder:
        """The builder without the checks of ``builder`` (for closing a region)."""
        return self._builder

    @property
    def function(self):
        """The llvmlite function (created on first use of ``builder``)."""
        return self._function

    # ---- values ------------------------------------------------------------------------------
    def ir_of(self, value: Value):
        """The IR of ``value``, after checking it is visible from the current scope."""
        if not isinstance(value, Value):
            raise dsl_type_error(f"expected a runtime Value, got {type(value).__name__}")
        if value.kernel is not self:
            raise dsl_value_error(f"value of type {value.type_name} belongs to kernel "
                                  f"{value.kernel.name!r}, not {self.name!r}")
        if value.scope is not None:
            scope = self._scope
            while scope is not None and scope is not value.scope:
                scope = scope.parent
            if scope is None:
                region = value.scope
                state = "after it closed" if region.closed else "outside it"
                hint = ("pass it out through carry=/yield_ and use loop.results"
                        if region.kind == "for_range" else
                        "pass it out through yield_ and use the branch's results")
                raise dsl_value_error(
                    f"{value.type_name} value defined inside the {region.kind} opened at "
                    f"{region.opened_at} is used {state}; {hint}")
        if value.ir is None:
            self.builder  # creating the function binds the argument values
        return value.ir

    def wrap(self, ir_value, dtype: T.DType, lanes: int) -> Value:
        """A Value of ``dtype`` x ``lanes`` for ``ir_value``, living in the current scope."""
        return Value(self, ir_value, dtype, lanes, self._scope)

    def coerce(self, x, dtype: T.DType, lanes: int, what: str) -> Value:
        """``x`` itself if it is a Value, else a constant of ``dtype`` made from a Python number."""
        if isinstance(x, Value):
            if x.kernel is not self:
                raise dsl_value_error(f"value used in '{what}' belongs to kernel {x.kernel.name!r}")
            return x
        return self.const(x, dtype, lanes)

    def const(self, value, dtype, lanes: int = 1) -> Value:
        """A constant of ``dtype`` (a Python bool/int/float), broadcast to ``lanes``."""
        dt = T.dtype(dtype)
        if isinstance(value, Value):
            raise dsl_type_error("const() takes a Python number, not a runtime Value")
        scalar = ir.Constant(dt.ir_type, _const_payload(value, dt))
        ir_value = scalar if lanes == 1 else ir.Constant(dt.vector_ir_type(lanes), [scalar] * lanes)
        return Value(self, ir_value, dt, lanes, None)

    def const_vector(self, values, dtype) -> Value:
        """A constant vector of ``dtype`` with one Python number per lane (one value: a scalar)."""
        dt = T.dtype(dtype)
        if isinstance(values, Value) or not isinstance(values, (list, tuple)) or not values:
            raise dsl_type_error(f"const_vector takes a non-empty list/tuple of Python numbers, "
                                 f"got {type(values).__name__}")
        if len(values) == 1:
            return self.const(values[0], dt)
        scalars = [ir.Constant(dt.ir_type, _const_payload(v, dt)) for v in values]
        return Value(self, ir.Constant(dt.vector_ir_type(len(scalars)), scalars), dt, len(scalars), None)

    def zeros(self, dtype, lanes: int = 1) -> Value:
        return self.const(0, dtype, lanes)

    # ---- intrinsics --------------------------------------------------------------------------
    def intrinsic(self, name: str, ret: ir.Type, params: list) -> ir.Function:
        """The declaration of intrinsic ``name`` (declared once per module)."""
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, params), name)

    def call(self, name: str, ret: ir.Type, args: list, builder: ir.IRBuilder | None = None):
        """Call intrinsic ``name`` on IR operands ``args`` (at ``builder``, default: here)."""
        fn = self.intrinsic(name, ret, [a.type for a in args])
        return (builder or self.builder).call(fn, args)

    def call_intrinsic(self, name: str, args, result=None) -> Value | None:
        """Call an LLVM intrinsic (e.g. an MFMA) -- the extension point for layers built on
        the DSL. ``args``: Values, or Python ints passed as i32 immediates (make other immediate
        widths with ``k.const``). ``result``: None for void, else ``(dtype, lanes)``."""
        if not isinstance(name, str) or not name.startswith("llvm."):
            raise dsl_value_error(f"intrinsic name must start with 'llvm.', got {name!r}")
        operands = []
        for a in args:
            if isinstance(a, int) and not isinstance(a, bool):
                operands.append(ir.Constant(_I32, a))
            else:
                operands.append(self.ir_of(a))
        if result is None:
            self.call(name, ir.VoidType(), operands)
            return None
        dt, lanes = T.dtype(result[0]), int(result[1])
        return self.wrap(self.call(name, dt.vector_ir_type(lanes), operands), dt, lanes)

    # ---- scopes ------------------------------------------------------------------------------
    @property
    def current_scope(self) -> Scope:
        return self._scope

    def enter_scope(self, kind: str) -> Scope:
        """Open a region (a loop body, a branch arm) at the author's line; returns it."""
        scope = Scope(kind, self._scope, user_location())
        self._scope = scope
        return scope

    def leave_scope(self, scope: Scope):
        """Close ``scope``: its values are no longer usable; emission returns to its parent."""
        scope.closed = True
        self._scope = scope.parent

    def set_pending_branch(self, branch):
        """An if_else whose else_ arm must open before anything else is emitted (or None)."""
        self._pending_branch = branch

    # ---- LDS ---------------------------------------------------------------------------------
    @property
    def lds_regions(self) -> dict:
        """name -> LdsTensor of every allocated region (read it, do not modify it)."""
        return self._lds_regions

    def add_lds_region(self, region):
        self._lds_regions[region.name] = region

    def lds_arena(self):
        """The kernel's single LDS array ``@rocke_lds`` (sized when the IR is finished)."""
        if self._lds_arena is None:
            arena = ir.GlobalVariable(self.module, ir.ArrayType(_I8, 0), LDS_ARENA_NAME, addrspace=3)
            arena.linkage = "internal"
            arena.align = 16
            arena.type = T.ptr_lds.ir_type  # opaque pointer, so accesses of any type need no casts
            self._lds_arena = arena
        return self._lds_arena

    # ---- the first version's names -----------------------------------------------------------
    _b = builder
    _use = ir_of
    _wrap = wrap
    _coerce = coerce
    _intrinsic = intrinsic
    _call = call


def _const_payload(value, dt: T.DType):
    """The llvmlite constant payload of Python number ``value`` as ``dt`` (range-checked)."""
    if not isinstance(value, (bool, int, float)):
        raise dsl_type_error(f"cannot make a {dt.name} constant from {type(value).__name__}")
    if dt.kind == "bool":
        if value not in (0, 1, True, False):
            raise dsl_type_error(f"i1 constant must be a bool, got {value!r}")
        return int(bool(value))
    if dt.kind in ("sint", "uint"):
        if isinstance(value, float):
            raise dsl_type_error(f"float constant {value!r} cannot become integer type {dt.name}")
        lo, hi = -(1 << (dt.bits - 1)), (1 << dt.bits) - 1
        if not lo <= value <= hi:
            raise dsl_type_error(f"constant {value} does not fit in {dt.name}")
        return int(value) & ((1 << dt.bits) - 1)
    if dt.kind == "float":
        return float(value)
    if dt.kind == "bf16":
        return _bf16_bits(float(value))
    raise dsl_type_error(f"constants of {dt.name} are not supported; convert from f32")


def _bf16_bits(value: float) -> int:
    """bf16 bit pattern of a Python float, rounded to nearest even via f32."""
    if math.isnan(value):
        return 0x7FC0
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
