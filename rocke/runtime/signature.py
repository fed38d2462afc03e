"""Launch arguments checked against the compiled kernel's declared signature.

The DSL records each argument's rocke dtype in the code object (`.type_name`: ``"f16*"`` for a
pointer to f16, ``"i32"`` for an i32 by value) and the exact workgroup shape
(`.reqd_workgroup_size`); see ``rocke.dsl.kernel.Kernel._record_signature``. A launch is checked
against that before any work starts, and by-value arguments come back as plain Python numbers
whose value the declared type holds exactly (a bf16 as its 16-bit pattern, an int), so the
size-based packing of ``rocke.arch.abi`` writes exactly the bits the kernel reads.

Rules: a tensor's dtype must be the pointer's element type; an integer argument takes an int (or
numpy integer) in the type's range, never a float or a bool; a float argument takes a float, or
an int / numpy scalar whose value the type holds exactly; the block must be the kernel's
workgroup shape. A typed pointer takes a contiguous tensor -- the kernel reads memory as laid
out, so a non-contiguous view (``big[..., :64]``, a transpose, an ``expand``) is refused with the
argument's name, shape and strides -- unless its `.type_name` says ``strided`` (``"strided
f16*"``: declared ``arg_ptr(..., strided=True)``, the kernel takes the strides as arguments).
Arguments without a `.type_name` (foreign code objects) are checked by size.
"""
from __future__ import annotations

import functools
import math
import struct
from typing import Any, Sequence

import numpy as np

from ..arch.abi import KernArg

MAX_GRID_WORKITEMS = 2 ** 32     # the dispatch packet's grid size per axis is a u32 of work-items

_INT_BITS = {"i8": (8, True), "i16": (16, True), "i32": (32, True), "i64": (64, True),
             "u8": (8, False), "u16": (16, False), "u32": (32, False), "u64": (64, False)}
_FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "bf16": None}
# names OpenCL/HIP front ends write in `.type_name`, for foreign code objects
_C_NAMES = {"char": "i8", "uchar": "u8", "short": "i16", "ushort": "u16", "int": "i32",
            "uint": "u32", "unsigned int": "u32", "long": "i64", "ulong": "u64",
            "half": "f16", "__half": "f16", "_Float16": "f16", "float": "f32", "double": "f64",
            "__bf16": "bf16", "bfloat16": "bf16"}
_TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
                 "i8": "int8", "u8": "uint8", "i16": "int16", "u16": "uint16", "i32": "int32",
                 "u32": "uint32", "i64": "int64", "u64": "uint64",
                 "fp8_e4m3fnuz": "float8_e4m3fnuz", "fp8_e5m2fnuz": "float8_e5m2fnuz",
                 "fp8_e4m3fn": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


_F32_MAX = 3.4028235677973366e38      # float32's largest finite value, rounded up to a double
STRIDED = "strided "     # `.type_name` prefix of a pointer that accepts strided views (arg_ptr strided=True)


class LaunchArgumentError(ValueError):
    """A launch's grid, block or arguments do not fit the kernel's declared signature."""


def declared_type(arg: KernArg) -> tuple[str | None, bool]:
    """(rocke dtype or None when unknown, is_pointer) from an argument's `.type_name`."""
    name = (arg.type_name or "").strip()
    pointer = name.endswith("*")
    base = name.rstrip("*").strip()
    for qualifier in ("const ", "__global ", "volatile ", STRIDED):
        base = base.replace(qualifier, "")
    base = _C_NAMES.get(base, base)
    known = base in _INT_BITS or base in _FLOATS or base in _TORCH_DTYPES
    return (base if known else None), pointer


def contiguous_only(arg: KernArg) -> bool:
    """Whether a pointer argument takes only contiguous tensors: it has a declared pointer type
    (`.type_name`) without the ``strided`` prefix. Foreign arguments without one are unchecked."""
    name = (arg.type_name or "").strip()
    return name.endswith("*") and not name.startswith(STRIDED)


_PLANS: dict[int, tuple] = {}


def _argument_plan(info) -> tuple:
    """(KernArg, declared dtype, message label, contiguous only) of each explicit argument,
    computed once per KernelInfo: this runs on every launch (benchmarks/launch.py)."""
    cached = _PLANS.get(id(info))
    if cached is not None and cached[0] is info:
        return cached[1]
    plan = tuple((a, declared_type(a)[0],
                  f"argument {a.index} ({a.name or 'unnamed'}: {a.type_name or a.value_kind})",
                  a.value_kind == "global_buffer" and contiguous_only(a))
                 for a in info.args if not a.hidden)
    if len(_PLANS) > 1024:
        _PLANS.clear()
    _PLANS[id(info)] = (info, plan)      # holding `info` keeps its id from being reused
    return plan


def _info(info_or_compiled):
    info = getattr(info_or_compiled, "info", info_or_compiled)
    if not hasattr(info, "args") or not hasattr(info, "max_workgroup_size"):
        raise TypeError(f"expected a CompiledKernel or KernelInfo, got {type(info_or_compiled).__name__}")
    return info


def _dims(what: str, value, limit: int) -> tuple[int, int, int]:
    if type(value) is tuple and len(value) == 3 and all(type(d) is int and 0 < d < limit
                                                         for d in value):
        return value             # the common case, per launch
    dims = (value,) if not isinstance(value, (tuple, list)) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise LaunchArgumentError(f"{what} must be an int or 1-3 ints, got {value!r}")
    for d in dims:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise LaunchArgumentError(f"{what} dimensions must be ints, got {value!r} "
                                      f"({type(d).__name__} {d!r})")
        if not 1 <= d < limit:
            raise LaunchArgumentError(f"{what} dimension {int(d)} is outside [1, {limit})")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def _is_tensor(value) -> bool:
    return hasattr(value, "data_ptr") and hasattr(value, "untyped_storage") and hasattr(value, "dtype")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_float(value) -> bool:
    return isinstance(value, (float, np.floating))


def _same_bits(dtype: str, tensor_dtype) -> bool:
    """Tensors that hold the pointer's elements bit for bit under another torch name: integer
    pointers take any torch integer type of the same width (torch has few unsigned types), fp8
    pointers take uint8 tensors of raw bytes."""
    import torch
    if dtype in _INT_BITS:
        return (not tensor_dtype.is_floating_point and not tensor_dtype.is_complex
                and tensor_dtype != torch.bool and tensor_dtype.itemsize * 8 == _INT_BITS[dtype][0])
    return dtype.startswith("fp8_") and tensor_dtype == torch.uint8


@functools.cache
def _tensor_class():
    import torch
    return torch.Tensor


@functools.cache
def _torch_dtype(dtype: str):
    """The torch dtype of rocke element type `dtype` (None where this torch lacks it)."""
    import torch
    return getattr(torch, _TORCH_DTYPES[dtype], None)


def _check_pointer(label: str, dtype: str | None, value, device: str, contiguous: bool = False,
                   kernel: str = ""):
    if value is None:
        return None
    if type(value) is not _tensor_class() and not _is_tensor(value):
        if device == "hip" and hasattr(value, "data_ptr") and hasattr(value, "untyped_storage"):
            return value        # untyped device memory (rocke.runtime.DeviceBuffer): no dtype to check
        raise LaunchArgumentError(f"{label} is a pointer: pass a torch tensor (or None), "
                                  f"got {type(value).__name__}")
    if dtype is not None and dtype in _TORCH_DTYPES:
        want = _torch_dtype(dtype)
        if want is not None and value.dtype != want and not _same_bits(dtype, value.dtype):
            raise LaunchArgumentError(f"{label} points to {dtype}: pass a {want} tensor, "
                                      f"got {value.dtype}")
    if contiguous and hasattr(value, "is_contiguous") and not value.is_contiguous():
        raise LaunchArgumentError(
            f"kernel {kernel}: {label} reads its tensor as laid out in memory (row-major, "
            f"contiguous), got a non-contiguous view of shape {list(value.shape)} with strides "
            f"{tuple(value.stride())}; pass a contiguous tensor (.contiguous(), copying an output "
            f"back after the launch), or declare the argument arg_ptr(..., strided=True) in a "
            f"kernel that takes its strides")
    if device == "emu" and value.device.type != "cpu" and not _emulated_on_cuda(value):
        raise LaunchArgumentError(f"{label}: the emulator reads CPU tensors (CUDA tensors with "
                                  f"ROCKE_EMU_BACKEND=torch ROCKE_EMU_DEVICE=cuda), got one on "
                                  f"{value.device}")
    return value


def _emulated_on_cuda(value) -> bool:
    """A CUDA tensor the emulator's torch backend reads in place on the GPU."""
    from .. import env
    return value.device.type == "cuda" and env.emu_backend() == "torch" and \
        env.emu_device() == "cuda"


def _convert_int(label: str, dtype: str, value):
    bits, signed = _INT_BITS[dtype]
    if not _is_int(value):
        kind = "a bool" if isinstance(value, (bool, np.bool_)) else f"{type(value).__name__} {value!r}"
        raise LaunchArgumentError(f"{label} is an integer ({dtype}): pass an int, got {kind}")
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
    v = int(value)
    if not lo <= v < hi:
        raise LaunchArgumentError(f"{label}: {v} is outside the {dtype} range [{lo}, {hi})")
    return v


def _convert_float(label: str, dtype: str, value):
    if type(value) is float and dtype == "f32" and math.isfinite(value):    # the common case
        rounded = struct.unpack("<f", struct.pack("<f", value))[0] if abs(value) < _F32_MAX else math.inf
        if not math.isfinite(rounded):
            raise LaunchArgumentError(f"{label}: {value!r} overflows {dtype}")
        return rounded
    if isinstance(value, (bool, np.bool_)) or not (_is_int(value) or _is_float(value)):
        raise LaunchArgumentError(f"{label} is a float ({dtype}): pass a float, "
                                  f"got {type(value).__name__} {value!r}")
    # ints and numpy scalars (np.float64 included, a float subclass) carry an exact value
    exact_required = _is_int(value) or isinstance(value, np.generic)
    if _is_int(value):
        v = int(value)
        as_float = float(v) if abs(v) < 2 ** 1024 else math.inf
        if as_float != v:
            raise LaunchArgumentError(f"{label}: int {v} has no exact {dtype} value")
    else:
        as_float = float(value)
    with np.errstate(over="ignore"):
        return _round_float(label, dtype, value, as_float, exact_required)


def _round_float(label: str, dtype: str, value, as_float: float, exact_required: bool):
    if dtype == "bf16":
        f32_bits = int(np.array(as_float, np.float32).view(np.uint32))
        if math.isnan(as_float):
            bits = 0x7FC0
        elif exact_required:             # truncation; an inexact value is refused below
            bits = f32_bits >> 16
        else:                            # a Python float rounds to nearest even (via f32)
            bits = ((f32_bits + 0x7FFF + ((f32_bits >> 16) & 1)) >> 16) & 0xFFFF
        rounded = float(np.array(bits << 16, np.uint32).view(np.float32))
        converted = bits                 # abi packs a 2-byte int as these bits; a float would become f16
    else:
        rounded = float(_FLOATS[dtype](as_float))
        converted = rounded
    if math.isfinite(as_float) and not math.isfinite(rounded):
        raise LaunchArgumentError(f"{label}: {value!r} overflows {dtype}")
    if exact_required and not (rounded == as_float or (math.isnan(rounded) and math.isnan(as_float))):
        raise LaunchArgumentError(f"{label}: {type(value).__name__} {value!r} has no exact {dtype} "
                                  f"value (it would become {rounded!r}); pass a Python float to round")
    return converted


def _check_by_value(label: str, arg: KernArg, dtype: str | None, value):
    if value is None or _is_tensor(value):
        raise LaunchArgumentError(f"{label} is passed by value: pass a number, "
                                  f"got {type(value).__name__}")
    if dtype in _INT_BITS:
        return _convert_int(label, dtype, value)
    if dtype in _FLOATS:
        return _convert_float(label, dtype, value)
    # no declared type (a foreign code object): numbers that fit the argument's size
    if isinstance(value, (bool, np.bool_)) or not (_is_int(value) or _is_float(value)):
        raise LaunchArgumentError(f"{label}: pass an int or a float, got {type(value).__name__}")
    if _is_int(value) and not -(1 << (8 * arg.size - 1)) <= int(value) < (1 << (8 * arg.size)):
        raise LaunchArgumentError(f"{label}: {int(value)} does not fit in {arg.size} bytes")
    return value


def check_launch_args(info_or_compiled, grid, block, args: Sequence[Any], *,
                      device: str = "emu") -> list:
    """Check a launch against the kernel's signature; returns the arguments to pack (by-value
    ones converted to Python numbers exact in the declared type). Raises LaunchArgumentError naming
    the first argument that does not fit; nothing is modified."""
    info = _info(info_or_compiled)
    grid3 = _dims("grid", grid, MAX_GRID_WORKITEMS)
    block3 = _dims("block", block, 1025)
    threads = block3[0] * block3[1] * block3[2]
    if info.reqd_workgroup_size is not None and block3 != tuple(info.reqd_workgroup_size):
        raise LaunchArgumentError(f"block {block3} does not match kernel {info.name}'s workgroup "
                                  f"size {tuple(info.reqd_workgroup_size)}")
    if info.max_workgroup_size and threads > info.max_workgroup_size:
        raise LaunchArgumentError(f"block {block3} has {threads} work-items, beyond kernel "
                                  f"{info.name}'s maximum of {info.max_workgroup_size}")
    for axis, (g, b) in enumerate(zip(grid3, block3)):
        if g * b >= MAX_GRID_WORKITEMS:
            raise LaunchArgumentError(f"grid {grid3} x block {block3} has {g * b} work-items along "
                                      f"axis {'xyz'[axis]}, beyond the dispatch limit 2**32 - 1")
    if not isinstance(args, (list, tuple)):
        raise LaunchArgumentError(f"args must be a list or tuple, got {type(args).__name__}")
    plan = _argument_plan(info)
    if len(args) != len(plan):
        names = ", ".join(a.name or f"#{a.index}" for a, _, _, _ in plan)
        raise LaunchArgumentError(f"kernel {info.name} takes {len(plan)} arguments ({names}), "
                                  f"got {len(args)}")
    out = []
    for (arg, dtype, label, contiguous), value in zip(plan, args):
        if arg.value_kind == "global_buffer":
            out.append(_check_pointer(label, dtype, value, device, contiguous, info.name))
        elif arg.value_kind == "by_value":
            out.append(_check_by_value(label, arg, dtype, value))
        else:
            raise LaunchArgumentError(f"{label}: value kind {arg.value_kind!r} cannot be launched")
    return out
