"""``Kernel``: the builder every DSL kernel is written against.

Owns the llvmlite module and function, the argument list, the LDS arena, the scope stack that
makes runtime loops/branches explicit, and the IR text (``Kernel.ir()``), which is a pure
function of the build: names are either given by the DSL or numbered by llvmlite in emission
order, so the text is identical across processes and hash seeds.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import llvmlite.ir as ir
import llvmlite.ir.values as irv

from . import types as T
from ..arch.targets import DEFAULT_TARGET, TARGETS as ARCH_TARGETS, get_target
from .debuginfo import LocatingBuilder, located_text
from .emitter import LDS_ARENA_NAME, Emitter, Scope  # noqa: F401  (LDS_ARENA_NAME: re-exported)
from .errors import dsl_type_error, dsl_value_error, user_frame, user_location
from .values import Value

# The targets the DSL emits IR for (target facts live in rocke/arch/targets.py). The IR itself does
# not name the processor -- compile_ir's target does -- so a gfx942 kernel's IR is unchanged; what
# differs per target is checked where it is emitted (MFMA atoms, fp8 conversions, the LDS budget).
TARGETS = tuple(ARCH_TARGETS)
TRIPLE = "amdgcn-amd-amdhsa"
# The AMDGPU data layout of LLVM 22 (what the gfx942 and gfx950 target machines report).
DATA_LAYOUT = ("e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32"
               "-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128"
               "-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9")
CODE_OBJECT_VERSION = 500
WAVE_SIZE = DEFAULT_TARGET.wave_size
LDS_BYTES = DEFAULT_TARGET.max_lds_per_workgroup
KERNARG_PRELOAD_SGPRS = 14

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_I32 = ir.IntType(32)
_AXES = {0: "x", 1: "y", 2: "z", "x": "x", "y": "y", "z": "z"}


class _KernelFunctionAttributes(irv.FunctionAttributes):
    """llvmlite only knows keyword attributes; AMDGPU needs ``"key"="value"`` ones too."""

    def add(self, name):
        if name.startswith('"'):
            set.add(self, name)
        else:
            super().add(name)


class _KernelFunction(ir.Function):
    """llvmlite joins function metadata attachments with commas; LLVM wants spaces."""

    def _stringify_metadata(self, leading_comma=False):
        return " ".join(f"!{k} {v.get_reference()}" for k, v in self.metadata.items())


class _PointerArgumentAttributes(irv.ArgumentAttributes):
    _known = dict(irv.ArgumentAttributes._known, readonly=False, writeonly=False)


class SchedMask(enum.IntFlag):
    """Instruction classes for sched_barrier / sched_group_barrier (LLVM's AMDGPU encoding)."""

    NONE = 0x0
    ALU = 0x1
    VALU = 0x2
    SALU = 0x4
    MFMA = 0x8
    VMEM = 0x10
    VMEM_READ = 0x20
    VMEM_WRITE = 0x40
    DS = 0x80
    DS_READ = 0x100
    DS_WRITE = 0x200
    TRANS = 0x400


@dataclass(frozen=True)
class ArgInfo:
    """One kernel argument as the runtime packs it into the kernarg segment."""

    name: str
    kind: str          # "global_ptr" | "scalar"
    dtype: str         # element dtype of a pointer, or the scalar's dtype
    size: int          # bytes in the kernarg segment
    offset: int        # byte offset in the kernarg segment
    readonly: bool = False
    strided: bool = False   # a pointer whose tensor may be a strided view (the kernel takes its strides)


class Kernel(Emitter):
    """A GPU kernel under construction. See the package docstring for an example. The emission
    API other DSL modules use (``builder``, ``ir_of``, ``wrap``, scopes, LDS) is ``Emitter``'s."""

    def __init__(self, name: str, *, target: str = DEFAULT_TARGET.name, workgroup_size: int = 256,
                 waves_per_eu: int | None = None, kernarg_preload: bool = False):
        if not isinstance(name, str) or not _IDENT.match(name):
            raise ValueError(f"name: kernel name must be an identifier, got {name!r}")
        if target not in TARGETS:
            raise ValueError(f"target: unsupported target {target!r}; supported: {', '.join(TARGETS)}")
        if not isinstance(workgroup_size, int) or not 1 <= workgroup_size <= 1024:
            raise ValueError(f"workgroup_size: must be an int in [1, 1024], got {workgroup_size!r}")
        if waves_per_eu is not None and (not isinstance(waves_per_eu, int) or not 1 <= waves_per_eu <= 8):
            raise ValueError(f"waves_per_eu: must be an int in [1, 8] or None, got {waves_per_eu!r}")
        if not isinstance(kernarg_preload, bool):
            raise ValueError(f"kernarg_preload: must be a bool, got {kernarg_preload!r}")
        self.name = name
        self.target = target
        self.kernarg_preload = kernarg_preload
        self.workgroup_size = workgroup_size
        self.waves_per_eu = waves_per_eu
        self.module = ir.Module(name=name)
        self.module.triple = TRIPLE
        self.module.data_layout = DATA_LAYOUT
        self.args: list[ArgInfo] = []
        self._arg_values: list[tuple[ArgInfo, Value, bool]] = []
        self._function = None
        self._builder = None
        self._prologue_builder = None
        self._root = Scope("kernel", None, user_location())
        self._scope = self._root
        self._pending_branch = None
        self._special_values: dict[str, Value] = {}
        self._lds_regions: dict[str, object] = {}
        self._lds_arena = None
        self._ir_text = None
        self._located_ir = None
        self._locations: dict = {}            # id(instruction) -> (instruction, (file, line))
        self._opened_at = user_frame()

    @property
    def wave_size(self) -> int:
        return get_target(self.target).wave_size

    @property
    def lds_limit(self) -> int:
        """Bytes of LDS one workgroup may use on this kernel's target."""
        return get_target(self.target).max_lds_per_workgroup

    @property
    def num_waves(self) -> int:
        return -(-self.workgroup_size // self.wave_size)

    # ---- arguments ------------------------------------------------------------------------
    def _declare_arg(self, name: str, dtype: T.DType, kind: str, readonly: bool,
                     noalias: bool = False, strided: bool = False) -> Value:
        if self._function is not None:
            raise dsl_value_error(f"argument {name!r} declared after code was emitted; "
                                  "declare every kernel argument first")
        if not isinstance(name, str) or not _IDENT.match(name):
            raise dsl_value_error(f"argument name must be an identifier, got {name!r}")
        if any(a.name == name for a in self.args):
            raise dsl_value_error(f"duplicate kernel argument name {name!r}")
        size = 8 if kind == "global_ptr" else dtype.nbytes
        end = self.args[-1].offset + self.args[-1].size if self.args else 0
        info = ArgInfo(name, kind, dtype.name, size, -(-end // size) * size, readonly, strided)
        value = Value(self, None, T.ptr_global if kind == "global_ptr" else dtype, 1, self._root)
        self.args.append(info)
        self._arg_values.append((info, value, noalias))
        return value

    def arg_ptr(self, name: str, dtype, *, readonly: bool = False, noalias: bool = True,
                strided: bool = False):
        """A global-memory pointer argument (``ptr addrspace(1)``) to elements of ``dtype``.

        A launch passes it a contiguous tensor: the kernel reads memory as laid out, so
        ``rocke.runtime.launch`` refuses a non-contiguous view (``big[..., :64]``, a transpose,
        an ``expand``). ``strided=True`` declares that the kernel takes the tensor's strides as
        other arguments and indexes with them, so any view is accepted; it is recorded in the
        code object (``.type_name`` ``"strided f16*"``)."""
        from .memory import GlobalPtr
        if not isinstance(strided, bool):
            raise dsl_value_error(f"arg_ptr {name!r}: strided must be a bool, got {strided!r}")
        dt = T.dtype(dtype)
        value = self._declare_arg(name, dt, "global_ptr", readonly, noalias, strided)
        return GlobalPtr(value, dt, name=name, readonly=readonly)

    def arg(self, name: str, dtype) -> Value:
        """A scalar argument (i32, i64, u32, f32, ...): a wave-uniform value."""
        dt = T.dtype(dtype)
        if dt.kind in ("bool", "fp8") or dt.bits < 16:
            raise dsl_type_error(f"scalar argument {name!r} cannot have dtype {dt.name}")
        return self._declare_arg(name, dt, "scalar", False)

    def arg_i32(self, name: str) -> Value:
        return self.arg(name, T.i32)

    def arg_f32(self, name: str) -> Value:
        return self.arg(name, T.f32)

    # ---- emission machinery ----------------------------------------------------------------
    def _open_function(self):
        self._seal()

    def _seal(self):
        """Create the function once the argument list is final."""
        fn_type = ir.FunctionType(ir.VoidType(), [v.dtype.ir_type for _, v, _ in self._arg_values])
        fn = _KernelFunction(self.module, fn_type, self.name)
        fn.calling_convention = "amdgpu_kernel"
        fn.attributes = _KernelFunctionAttributes()
        preloaded = self._preloaded_arg_count()
        for position, ((info, value, noalias), ir_arg) in enumerate(zip(self._arg_values, fn.args)):
            ir_arg.name = info.name
            if info.kind == "global_ptr":
                ir_arg.attributes = _PointerArgumentAttributes()
                if noalias:
                    ir_arg.attributes.add("noalias")
                if info.readonly:
                    ir_arg.attributes.add("readonly")
            if position < preloaded:
                ir_arg.attributes.add("inreg")
            value.ir = ir_arg
        prologue = fn.append_basic_block("prologue")
        entry = fn.append_basic_block("entry")
        self._prologue_builder = LocatingBuilder(prologue, self._locations)
        self._prologue_builder.position_before(self._prologue_builder.branch(entry))
        self._builder = LocatingBuilder(entry, self._locations)
        self._function = fn

    def _preloaded_arg_count(self) -> int:
        """How many leading arguments go to user SGPRs (``inreg``): whole dwords only, within
        the 16 user SGPRs less the 2 of the kernarg segment pointer."""
        if not self.kernarg_preload:
            return 0
        budget, count = KERNARG_PRELOAD_SGPRS, 0
        for info in self.args:
            dwords = info.size // 4
            if info.size % 4 or info.offset % 4 or dwords > budget:
                break
            budget -= dwords
            count += 1
        return count

    def _special(self, key: str, make) -> Value:
        """A value computed once in the prologue (ids), visible everywhere in the kernel."""
        if key not in self._special_values:
            self.builder  # make sure the prologue exists
            self._special_values[key] = Value(self, make(self._prologue_builder), T.i32, 1, None)
        return self._special_values[key]

    # ---- ids ------------------------------------------------------------------------------
    def thread_id(self, axis=0) -> Value:
        """Work-item id within the workgroup along ``axis`` (0/1/2 or "x"/"y"/"z")."""
        a = _axis(axis)
        return self._special(f"tid.{a}", lambda b: self.call(f"llvm.amdgcn.workitem.id.{a}", _I32, [], b))

    def block_id(self, axis=0) -> Value:
        """Workgroup id along ``axis``."""
        a = _axis(axis)
        return self._special(f"wgid.{a}", lambda b: self.call(f"llvm.amdgcn.workgroup.id.{a}", _I32, [], b))

    def lane_id(self) -> Value:
        """Lane within the wave (0..63), via mbcnt_lo/hi."""
        def make(b):
            ones = ir.Constant(_I32, -1)
            low = self.call("llvm.amdgcn.mbcnt.lo", _I32, [ones, ir.Constant(_I32, 0)], b)
            return self.call("llvm.amdgcn.mbcnt.hi", _I32, [ones, low], b)
        return self._special("lane", make)

    def wave_id(self) -> Value:
        """Wave index within the workgroup (x-linear), made wave-uniform with readfirstlane."""
        tid = self.thread_id(0)

        def make(b):
            wave = b.lshr(tid.ir, ir.Constant(_I32, self.wave_size.bit_length() - 1))
            return self.call("llvm.amdgcn.readfirstlane.i32", _I32, [wave], b)
        return self._special("wave", make)

    # ---- synchronisation and scheduling ---------------------------------------------------
    def barrier(self):
        """Workgroup barrier that also orders LDS: release fence, s_barrier, acquire fence."""
        b = self.builder
        b.fence("release", "workgroup")
        self.call("llvm.amdgcn.s.barrier", ir.VoidType(), [])
        b.fence("acquire", "workgroup")

    def fence(self, ordering: str, scope: str = "agent"):
        """A memory fence: ``ordering`` "release" (this wave's earlier stores are visible at
        ``scope`` before its later ones), "acquire" (its later loads see what was released
        there) or "acq_rel"; ``scope`` "workgroup" or "agent" (the whole GPU: other workgroups,
        with a global atomic as the flag -- LLVM's gfx942 memory model emits the L2 writeback /
        invalidate)."""
        if ordering not in ("acquire", "release", "acq_rel"):
            raise dsl_value_error(f"fence ordering must be 'acquire', 'release' or 'acq_rel', got {ordering!r}")
        if scope not in ("workgroup", "agent"):
            raise dsl_value_error(f"fence scope must be 'workgroup' or 'agent', got {scope!r}")
        self.builder.fence(ordering, scope)

    def waitcnt(self, *, vmcnt: int = 63, expcnt: int = 7, lgkmcnt: int = 15):
        """``s_waitcnt`` with the gfx9 encoding; counters left at their maximum do not wait."""
        for field, value, top in (("vmcnt", vmcnt, 63), ("expcnt", expcnt, 7), ("lgkmcnt", lgkmcnt, 15)):
            if not isinstance(value, int) or not 0 <= value <= top:
                raise dsl_value_error(f"{field} must be an int in [0, {top}], got {value!r}")
        imm = (vmcnt & 0xF) | (expcnt << 4) | (lgkmcnt << 8) | ((vmcnt >> 4) << 14)
        self.call("llvm.amdgcn.s.waitcnt", ir.VoidType(), [ir.Constant(_I32, imm)])

    def wait_vmcnt(self, n: int = 0):
        """Wait until at most ``n`` vector-memory operations (incl. LDS DMA) are outstanding."""
        self.waitcnt(vmcnt=n)

    def wait_lgkmcnt(self, n: int = 0):
        """Wait until at most ``n`` LDS/scalar-memory operations are outstanding."""
        self.waitcnt(lgkmcnt=n)

    def sched_barrier(self, mask: int = 0):
        """``llvm.amdgcn.sched.barrier``: which instruction classes may cross (SchedMask)."""
        self.call("llvm.amdgcn.sched.barrier", ir.VoidType(), [ir.Constant(_I32, _u32(mask, "mask"))])

    def sched_group_barrier(self, mask: int, size: int, sync_id: int):
        """Ask the scheduler for a group of ``size`` instructions of class ``mask`` here."""
        args = [ir.Constant(_I32, _u32(v, n)) for v, n in ((mask, "mask"), (size, "size"), (sync_id, "sync_id"))]
        self.call("llvm.amdgcn.sched.group.barrier", ir.VoidType(), args)

    def iglp_opt(self, strategy: int):
        """``llvm.amdgcn.iglp.opt``: one of the backend's built-in interleaving strategies."""
        self.call("llvm.amdgcn.iglp.opt", ir.VoidType(), [ir.Constant(_I32, _u32(strategy, "strategy"))])

    def s_setprio(self, priority: int):
        """``s_setprio``: wave issue priority 0..3."""
        if not isinstance(priority, int) or not 0 <= priority <= 3:
            raise dsl_value_error(f"s_setprio priority must be in [0, 3], got {priority!r}")
        self.call("llvm.amdgcn.s.setprio", ir.VoidType(), [ir.Constant(ir.IntType(16), priority)])

    # ---- control flow and memory (implemented in control.py / memory.py) ------------------
    def for_range(self, lo, hi, step=1, *, carry=()):
        """Runtime loop ``for i in range(lo, hi, step)`` (step > 0) with loop-carried values:
        a list/tuple of items, or one structure (dict, dataclass, tile); items may be Values,
        register tiles or nested dicts/dataclasses/lists of them (see ``rocke.dsl.control``)."""
        from .control import ForRange
        return ForRange(self, lo, hi, step, carry)

    def if_(self, cond: Value, *, carry=()):
        """Runtime ``if cond:``; ``carry`` (as for ``for_range``) flows through unchanged when
        cond is false."""
        from .control import IfThen
        return IfThen(self, cond, carry)

    def if_else(self, cond: Value):
        """Runtime if/else whose arms may yield values (``results``)."""
        from .control import IfElse
        return IfElse(self, cond)

    def mfma(self, atom, dtype, *, b_dtype=None):
        """The fragment-level MFMA (``fragment.Mfma``) for ``atom`` (a shape like "32x32x8" or a
        catalog key) on ``dtype`` operands (``b_dtype`` for B when it differs, e.g. fp8 x bf8)."""
        from .fragment import Mfma
        return Mfma(self, atom, dtype, b_dtype=b_dtype)

    def lds(self, name: str, shape, dtype, *, pad: int = 0, offset: int | None = None,
            align: int = 16, alias: bool = False):
        """Allocate a named region of the kernel's LDS arena (see memory.LdsTensor)."""
        from .memory import allocate_lds
        return allocate_lds(self, name, shape, dtype, pad=pad, offset=offset, align=align, alias=alias)

    @property
    def lds_bytes(self) -> int:
        """Bytes of LDS the arena uses so far."""
        return max((r.byte_offset + r.size_bytes for r in self._lds_regions.values()), default=0)

    # ---- output ---------------------------------------------------------------------------
    def ir(self) -> str:
        """The module's LLVM IR text. Finishes the kernel (no more emission afterwards)."""
        if self._ir_text is not None:
            return self._ir_text
        if self._scope is not self._root:
            raise dsl_value_error(f"ir() called inside the {self._scope.kind} opened at "
                                  f"{self._scope.opened_at}; close it first")
        builder = self.builder
        if not builder.block.is_terminated:
            end = builder.ret_void()    # the kernel's end: located at its Kernel(...) line
            self._locations[id(end)] = (end, self._opened_at)
        if self._lds_arena is not None:
            if self.lds_bytes > self.lds_limit:
                from .memory import lds_breakdown
                raise dsl_value_error(f"kernel {self.name!r} uses {self.lds_bytes} bytes of LDS; {self.target} "
                                      f"has {self.lds_limit} per workgroup. Regions:\n"
                                      + lds_breakdown(self._lds_regions.values()))
            self._lds_arena.value_type = ir.ArrayType(ir.IntType(8), self.lds_bytes)
        attrs = self._function.attributes
        attrs.add(f'"amdgpu-flat-work-group-size"="{self.workgroup_size},{self.workgroup_size}"')
        if self.waves_per_eu is not None:
            attrs.add(f'"amdgpu-waves-per-eu"="{self.waves_per_eu}"')
        self._record_signature()
        self.module.add_named_metadata(
            "llvm.module.flags",
            [ir.Constant(_I32, 1), "amdhsa_code_object_version", ir.Constant(_I32, CODE_OBJECT_VERSION)])
        self._ir_text = str(self.module)
        return self._ir_text

    def located_ir(self) -> str:
        """``ir()`` plus each instruction's builder line as a debug location, which the
        assembly carries as ``.loc`` directives and the emulator's findings name (see
        ``rocke.dsl.debuginfo``). Compile it instead of ``ir()`` -- or pass the Kernel itself
        to ``compile_ir`` -- to debug; ``ir()`` itself (what the golden table hashes) is
        unchanged and holds no paths."""
        self.ir()
        if self._located_ir is None:
            self._located_ir = located_text(self.module, self._function, self._locations, self._opened_at)
        return self._located_ir

    def _record_signature(self):
        """The argument signature and workgroup shape as function metadata, which LLVM emits as
        ``.name`` / ``.type_name`` (rocke dtype, ``*`` for a pointer, a ``strided `` prefix for
        a pointer that accepts strided views) and ``.reqd_workgroup_size`` in the code object,
        so launches check against the compiled kernel itself. The shape is
        only pinned to (workgroup_size, 1, 1) when the kernel never reads a y/z work-item id."""
        m, fn = self.module, self._function
        types = [("strided " if a.strided else "") + a.dtype + ("*" if a.kind == "global_ptr" else "")
                 for a in self.args]
        fn.set_metadata("kernel_arg_name", m.add_metadata([a.name for a in self.args]))
        fn.set_metadata("kernel_arg_type", m.add_metadata(types))
        if "tid.y" not in self._special_values and "tid.z" not in self._special_values:
            shape = [ir.Constant(_I32, d) for d in (self.workgroup_size, 1, 1)]
            fn.set_metadata("reqd_work_group_size", m.add_metadata(shape))


def _axis(axis) -> str:
    if axis not in _AXES:
        raise dsl_value_error(f"axis must be 0, 1, 2 or 'x', 'y', 'z', got {axis!r}")
    return _AXES[axis]


def _u32(value, what: str) -> int:
    if not isinstance(value, int) or not 0 <= value < 2 ** 32:
        raise dsl_value_error(f"{what} must be a non-negative 32-bit int, got {value!r}")
    return int(value)
