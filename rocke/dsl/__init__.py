"""rocke.dsl -- a tile DSL for AMD CDNA3 (gfx942) kernels that emits AMDGPU LLVM IR via llvmlite.

A kernel is written by a Python builder against a ``Kernel``. Python control flow runs at build
time (it unrolls and specializes); runtime loops and branches are explicit (``for_range``,
``if_``, ``if_else``) with explicit loop-carried / yielded values. ``Kernel.ir()`` returns the
IR text, a pure function of the build (byte-identical across processes and hash seeds).

Example -- scale a vector in place, ragged tail handled by the buffer's range check::

    from rocke.dsl import Kernel, f32

    def build_scale(block: int = 256):
        k = Kernel("scale", workgroup_size=block, kernarg_preload=True)  # args arrive in SGPRs
        x = k.arg_ptr("x", f32)
        n = k.arg_i32("n")
        alpha = k.arg_f32("alpha")
        i = k.block_id(0) * block + k.thread_id(0)
        buf = x.buffer(n)                      # loads past n read 0, stores past n are dropped
        buf.store(i, buf.load(i) * alpha)
        return k

    ir_text = build_scale().ir()

Atomics are methods of ``GlobalPtr``, ``BufferResource`` and ``LdsTensor`` (``atomic_add``,
``atomic_max``, ..., ``atomic_cas``; see ``rocke.dsl.atomics``); workgroup reductions, argmax
and top-k are in ``rocke.dsl.reduce``.

A walk-through of a larger kernel (LDS views, paged copies, structured carries, the cross-wave
merge, math): docs/writing-kernels.md.
"""

from .control import ForRange, IfElse, IfThen
from .errors import user_location
from .kernel import (CODE_OBJECT_VERSION, DATA_LAYOUT, LDS_BYTES, TRIPLE, WAVE_SIZE, ArgInfo, Kernel,
                     SchedMask)
from .lanes import (DppCtrl, ballot, dpp, ds_bpermute, ds_swizzle, readfirstlane, shuffle_xor,
                    swizzle_bitmask, swizzle_quad_perm, wave_max, wave_min, wave_reduce, wave_sum)
from .magic import UnsignedMagic, sdiv_const, smod_const, udiv_const, umod_const, unsigned_magic
from .math import (abs_, ceil, erf, exp, exp2, floor, fma, gelu, log, log2, maximum, minimum, rcp, rsq,
                   sigmoid, sqrt, tanh)
from .memory import BUFFER_RSRC_FLAGS, BufferResource, GlobalPtr, LdsTensor, buffer_resource
from .reduce import (block_argmax, block_argmin, block_max, block_min, block_reduce, block_sum, block_topk,
                     wave_argmax, wave_argmin, wave_topk)
from .tree import CarryLayout
from .types import (DType, bf16, dtype, f16, f32, f64, fp8_e4m3fn, fp8_e4m3fnuz, fp8_e5m2, fp8_e5m2fnuz,
                    i1, i8, i16, i32, i64, u8, u16, u32, u64)
from .values import Value, concat, select, shuffle, splat, vector

__all__ = [
    "Kernel", "ArgInfo", "SchedMask", "Value", "DType", "dtype", "CarryLayout",
    "ForRange", "IfThen", "IfElse",
    "GlobalPtr", "BufferResource", "LdsTensor", "buffer_resource", "BUFFER_RSRC_FLAGS",
    "select", "splat", "shuffle", "vector", "concat",
    "exp", "log", "erf", "tanh", "sigmoid", "gelu",
    "exp2", "log2", "rcp", "rsq", "sqrt", "floor", "ceil", "fma", "maximum", "minimum", "abs_",
    "readfirstlane", "ballot", "ds_swizzle", "ds_bpermute", "dpp", "DppCtrl", "shuffle_xor",
    "swizzle_bitmask", "swizzle_quad_perm", "wave_reduce", "wave_sum", "wave_max", "wave_min",
    "block_reduce", "block_sum", "block_max", "block_min", "block_argmax", "block_argmin", "block_topk",
    "wave_argmax", "wave_argmin", "wave_topk",
    "udiv_const", "umod_const", "sdiv_const", "smod_const", "unsigned_magic", "UnsignedMagic",
    "i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64",
    "fp8_e4m3fnuz", "fp8_e5m2fnuz", "fp8_e4m3fn", "fp8_e5m2",
    "TRIPLE", "DATA_LAYOUT", "CODE_OBJECT_VERSION", "WAVE_SIZE", "LDS_BYTES", "user_location",
]
