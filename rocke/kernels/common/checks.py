"""Validation helpers for kernel specs (``__post_init__``) and launch inputs.

Each helper raises ``ValueError`` whose message starts with ``"<field>: "`` and states the rule
that was broken, so a spec or launch error reads the same in every kernel family. torch is
imported only by the tensor check, so specs and builders stay importable without it.
"""

from __future__ import annotations

import functools

from rocke import dsl

# Kernel arguments (sizes, indices) are i32, grid dimensions are 32-bit counts, and buffer
# resources address 32-bit byte offsets; rocke keeps all of them below 2**31 so signed and
# unsigned readings agree.
I32_LIMIT = 2 ** 31
BUFFER_RANGE_BYTES = 2 ** 31
MAX_ACCESS_BYTES = 16           # widest single global/buffer load or store (dwordx4)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(choice) -> str:
    return choice if isinstance(choice, str) else repr(choice)


def check_choice(field: str, value, choices) -> None:
    """``value`` must be one of ``choices``, with the same type (so ``True`` is not ``1``,
    nor ``4.0`` a ``4``)."""
    if not any(type(value) is type(c) and value == c for c in choices):
        raise ValueError(f"{field}: must be one of {', '.join(_show(c) for c in choices)}, got {value!r}")


def check_bool(field: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{field}: must be a bool, got {value!r}")


def check_positive_int(field: str, value, *, allow_zero: bool = False) -> None:
    """An int (not a bool) > 0, or >= 0 with ``allow_zero``."""
    if not _is_int(value) or value < 0 or (value == 0 and not allow_zero):
        rule = "a non-negative int" if allow_zero else "a positive int"
        raise ValueError(f"{field}: must be {rule}, got {value!r}")


def check_int_range(field: str, value, low: int, high: int) -> None:
    """An int (not a bool) in the closed range [low, high]."""
    if not _is_int(value) or not low <= value <= high:
        raise ValueError(f"{field}: must be an int in [{low}, {high}], got {value!r}")


def check_multiple(field: str, value: int, factor: int, *, of: str | None = None,
                   because: str | None = None) -> None:
    """``value`` must divide by ``factor``. ``of`` says where the factor comes from (e.g.
    "warps_m (2) x the atom's M (32)"); ``because`` says why the rule exists."""
    if value % factor:
        reason = f", because {because}" if because else ""
        raise ValueError(f"{field}: {value} must be a multiple of {of or factor}{reason}")


def check_vector_access(field: str, width: int, dtype: str) -> None:
    """``width`` elements of ``dtype`` must fit one global/buffer access."""
    if width * dsl.dtype(dtype).nbytes > MAX_ACCESS_BYTES:
        raise ValueError(f"{field}: {width} x {dtype} exceeds the {MAX_ACCESS_BYTES}-byte maximum "
                         "of one buffer access")


def check_register_budget(field: str, registers: int, what: str, target: str = "gfx942") -> None:
    """Registers per lane that ``what`` holds for a whole loop (fp32 accumulators) must fit the
    target's VGPR + AGPR file; beyond it the kernel cannot be built (and the builder would
    unroll an absurd number of fragments first)."""
    from rocke.arch import get_target
    t = get_target(target)
    limit = t.max_arch_vgprs + t.max_agprs
    if registers > limit:
        raise ValueError(f"{field}: {what} need {registers} registers per lane, {target} has "
                         f"{limit} (VGPR + AGPR)")


def check_lds_budget(field: str, nbytes: int, what: str) -> None:
    """The workgroup's LDS allocation (``what``, sized by ``field``) must fit gfx942's LDS."""
    if nbytes > dsl.LDS_BYTES:
        raise ValueError(f"{field}: {what} need {nbytes} bytes of LDS, gfx942 has {dsl.LDS_BYTES}")


def check_extent(name: str, value) -> None:
    """A launch-time size the kernel takes as an i32 argument: an int in [1, 2**31)."""
    if not _is_int(value) or not 0 < value < I32_LIMIT:
        raise ValueError(f"{name}: must be an int in [1, 2**31), got {value!r}")


def check_index_extent(name: str, count: int) -> None:
    """A count of elements the kernel indexes with i32 arithmetic (e.g. ``rows * cols``)."""
    if count >= I32_LIMIT:
        raise ValueError(f"{name}: {count} elements exceed the kernel's 32-bit indexing (< 2**31)")


def check_grid_extent(name: str, workgroups: int, axis: str) -> None:
    """The grid's ``axis`` ("x", "y" or "z") dimension, in workgroups."""
    if workgroups >= I32_LIMIT:
        raise ValueError(f"{name}: {workgroups} workgroups exceed the grid's {axis} range (< 2**31)")


def fits_one_buffer(nbytes: int) -> bool:
    """Whether ``nbytes`` of memory can be reached through one buffer resource with 32-bit byte
    offsets: every byte offset, and the out-of-range offset the masked lanes are sent to
    (``dsl.memory.OUT_OF_RANGE_BYTE``), stays below 2**31. The one rule for "fits 32-bit
    addressing": the attention dispatcher picks 64-bit page bases exactly when it is False."""
    return nbytes < BUFFER_RANGE_BYTES


def check_buffer_bytes(name: str, nbytes: int, what: str) -> None:
    """Memory the kernel reaches through one buffer resource (``fits_one_buffer``)."""
    if not fits_one_buffer(nbytes):
        raise ValueError(f"{name}: {what} spans {nbytes} bytes, beyond the 2 GiB range of one "
                         "buffer resource")


NUM_RECORDS_LIMIT = 2 ** 32     # a buffer resource's extent (num_records) is a 32-bit byte count


def check_i32_value(name: str, value: int, what: str) -> None:
    """A value the kernel computes in i32 arithmetic (an element index, a row offset, a loop
    bound): it must stay <= 2**31 - 1, or it wraps negative and addresses the wrong element."""
    if value >= I32_LIMIT:
        raise ValueError(f"{name}: the kernel computes {what} = {value} in 32-bit (i32) "
                         "arithmetic, which holds at most 2**31 - 1")


def check_num_records(name: str, nbytes: int, what: str) -> None:
    """Bytes covered by one buffer resource: its num_records field is 32 bits wide."""
    if nbytes >= NUM_RECORDS_LIMIT:
        raise ValueError(f"{name}: {what} spans {nbytes} bytes; a buffer resource's extent "
                         "(num_records) is 32-bit, so it must stay below 2**32")


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def check_device(tensors: dict) -> None:
    """All tensors on one real device (CPU for the emulator, a GPU for HIP)."""
    devices = {name: t.device for name, t in tensors.items()}
    for name, device in devices.items():
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name}: tensor must be on the CPU (emulator) or a GPU (HIP), "
                             f"got device {device}")
    if len({(d.type, d.index) for d in devices.values()}) > 1:
        listing = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"tensors must share one device, got {listing}")


@functools.cache
def torch_dtype(dtype: str):
    """The torch dtype holding elements of rocke ``dtype`` ("f16", "bf16", "f32",
    "fp8_e4m3fnuz")."""
    import torch
    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
            "fp8_e4m3fnuz": torch.float8_e4m3fnuz, "fp8_e4m3fn": torch.float8_e4m3fn,
            "i8": torch.int8, "u8": torch.uint8, "i32": torch.int32}[dtype]


def check_tensor(name: str, t, *, dtype: str, dims: tuple[str, ...], contiguous: bool = True,
                 one_buffer: bool = True, paged_cache: bool = False) -> None:
    """A torch tensor with ``len(dims)`` dimensions (``dims`` names them for the message) of rocke
    ``dtype``. ``contiguous=False`` still requires a unit innermost stride and rows that do not
    overlap, but lets outer strides be padded (a leading dimension larger than the row).
    ``one_buffer``: the kernel reaches the whole tensor through one buffer resource, so its span
    must stay below 2 GiB. ``paged_cache``: a 4-D paged KV cache, whose layout rules are
    ``check_paged_cache_strides``'s instead of ``contiguous``'s."""
    import torch
    if not isinstance(t, torch.Tensor) or t.dim() != len(dims):
        got = f"{t.dim()}-D tensor" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name}: must be a {len(dims)}-D [{', '.join(dims)}] torch tensor, got {got}")
    want = torch_dtype(dtype)
    if t.dtype != want:
        raise ValueError(f"{name}: dtype must be {want}, got {t.dtype}")
    if paged_cache:
        check_paged_cache_strides(name, t.shape, t.stride())
    elif contiguous:
        if not t.is_contiguous():
            raise ValueError(f"{name}: must be contiguous, got strides {t.stride()}")
    elif t.stride(-1) != 1 or any(t.stride(i) < t.stride(i + 1) * t.shape[i + 1] for i in range(t.dim() - 1)):
        raise ValueError(f"{name}: must be row-major with unit column stride, got strides {t.stride()}")
    if one_buffer:
        span = t.stride(0) * t.shape[0] * t.element_size()
        check_buffer_bytes(name, span, f"the {list(t.shape)} tensor")


PAGED_CACHE_LAYOUTS = ("the block, token and head strides in any order, e.g. vLLM's NHD layout "
                       "or HND memory [num_blocks, num_kv_heads, block_size, head_size] viewed "
                       "as NHD; padding allowed")


def check_paged_cache_strides(name: str, shape, strides) -> None:
    """The strides of a paged KV cache ``[num_blocks, block_size, num_kv_heads, head_size]`` as
    the attention kernels address it: the block, token and head strides are kernel arguments
    (row ``(b, t, h)`` starts at ``b * s0 + t * s1 + h * s2``), so the token and head
    dimensions may come in either order in memory -- vLLM's NHD layout, or its HND memory viewed
    as NHD (strides ``(Hk*bs*D, D, bs*D, 1)``). Rules: the head_size stride is 1; no two
    (token, head) rows of a block overlap (each of the token and head strides, where its
    dimension is longer than 1, at least the span of the rows inside it), and the block stride
    covers a block's rows (a block's buffer, with 64-bit page bases, is one block stride long),
    so no two rows of the cache overlap; every stride is below 2**31 (the kernels' arguments are
    i32)."""
    nb, bs, hk, d = shape
    if d > 1 and strides[3] != 1:
        raise ValueError(f"{name}: the last (head_size) dimension must have stride 1, got strides "
                         f"{tuple(strides)}")
    for st in strides[:3]:
        if st >= I32_LIMIT:
            raise ValueError(f"{name}: stride {st} exceeds the kernel's 32-bit strides")
    span = d                    # elements from a block's first row's start to its last row's end
    for st, n in sorted(((strides[1], bs), (strides[2], hk))):
        if n > 1:
            if st < span:
                raise ValueError(f"{name}: rows overlap: shape {list(shape)} has strides "
                                 f"{tuple(strides)}, so two (token, head) rows of head_size "
                                 f"elements share memory; the kernels read each row from its "
                                 f"own memory ({PAGED_CACHE_LAYOUTS})")
            span += (n - 1) * st
    if strides[0] < span:
        raise ValueError(f"{name}: blocks overlap: shape {list(shape)} has block stride "
                         f"{strides[0]}, but a block's rows span {span} elements; the kernels "
                         f"read each block within its block stride ({PAGED_CACHE_LAYOUTS})")
