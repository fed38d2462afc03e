"""Unified paged attention, target-free: the problem, its validation and the torch entry point.

``run_unified_attention_torch`` takes vLLM's ``unified_attention`` arguments (same names, same
order) and runs them on a target's kernels. The steps, in order:

1. the ``HIPDNN_GFX942_*`` levers are read and validated (``knobs.read_knobs``);
2. every input is validated once on the host (``describe_problem``) into a
   ``UnifiedAttentionProblem`` that everything downstream trusts; nothing is launched and ``out``
   is untouched when anything is wrong;
3. the target's dispatcher (``rocke/kernels/<target>/attention_dispatch.py``, found by name, so
   this module imports no target) plans the call: path, geometry and kernel specs, each from a
   small table of rules with the reason beside each (ALGORITHM.md §10), and packs the launches;
4. the kernel specs are compiled once per process (``rocke.runtime.kernel_cache``) and launched,
   eagerly or as the replay of a captured graph.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
import math
import operator
import threading
from collections import OrderedDict
from dataclasses import dataclass

from rocke.kernels.common import knobs as knobs_mod
from rocke.kernels.common.checks import fits_one_buffer
from rocke.kernels.common.knobs import AttentionKnobs
from rocke import env
from rocke.runtime import device_generation
from rocke.runtime.kernel_cache import CompiledSpecCache, GraphCache

DTYPES = {"float16": "f16", "bfloat16": "bf16"}
BACKENDS = ("auto", "2d", "3d")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class UnifiedAttentionProblem:
    """One call, as the dispatcher sees it. The score features (ALGORITHM.md §12) are fields:
    ``softcap`` (0 = off), ``alibi`` / ``qq_bias`` / ``sinks`` (whether the tensor is passed),
    ``window_left`` (vLLM's ``window_size[0]``, -1 = no sliding window); ``features`` names the
    ones that are on. An fp8 KV cache is ``kv_dtype`` (ALGORITHM.md §11.1)."""
    dtype: str
    head_size: int
    num_q_heads: int
    num_kv_heads: int
    block_size: int
    num_seqs: int
    total_q: int
    max_seqlen_q: int
    max_seqlen_k: int
    causal: bool = True
    num_blocks: int = 1
    kv_cache_bytes: int = 0     # bytes one cache's pages span: num_blocks * block stride
    softcap: float = 0.0
    alibi: bool = False
    qq_bias: bool = False
    window_left: int = -1
    sinks: bool = False
    kv_dtype: str | None = None  # None: the caches hold `dtype`; "fp8_e4m3fnuz": fp8 with descales
    # ALGORITHM.md §13: square-root ALiBi, an fp8 output, per-token-head KV scales (kv_dtype
    # "i8" or "fp8_e4m3fnuz" read with [num_blocks, block_size, Hk] fp32 scale caches)
    alibi_sqrt: bool = False
    out_dtype: str | None = None
    kv_token_scales: bool = False
    mm_ranges: int = 0           # vLLM's mm_prefix_range: ranges per sequence (0 = not passed)
    batch_invariant: bool = False  # plan so a sequence's bits do not depend on the batch (§10.4)

    def __post_init__(self):
        if self.dtype not in DTYPES.values():
            raise ValueError(f"dtype: must be one of {', '.join(DTYPES.values())}, got {self.dtype!r}")
        for name in ("head_size", "block_size", "num_q_heads", "num_kv_heads", "max_seqlen_q",
                     "max_seqlen_k", "num_blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: must be a positive int, got {value!r}")
        if not isinstance(self.total_q, int) or self.total_q < 0:
            raise ValueError(f"total_q: must be a non-negative int, got {self.total_q!r}")
        if not isinstance(self.num_seqs, int) or isinstance(self.num_seqs, bool) or self.num_seqs < 0:
            raise ValueError(f"num_seqs: must be a non-negative int, got {self.num_seqs!r}")
        if self.num_seqs == 0 and self.total_q:
            raise ValueError(f"total_q: an empty batch (num_seqs 0) has no query tokens, got "
                             f"{self.total_q}")
        if self.num_q_heads % self.num_kv_heads:
            raise ValueError(f"num_q_heads: {self.num_q_heads} is not a multiple of num_kv_heads "
                             f"{self.num_kv_heads} (GQA needs whole groups)")
        if not isinstance(self.causal, bool):
            raise ValueError(f"causal: must be a bool, got {self.causal!r}")
        if self.kv_dtype is not None and not isinstance(self.kv_dtype, str):
            raise ValueError(f"kv_dtype: must be None (the caches hold q's dtype) or a cache "
                             f"encoding's name, got {self.kv_dtype!r}")
        if isinstance(self.softcap, bool) or not isinstance(self.softcap, (int, float)) or \
                not math.isfinite(self.softcap) or self.softcap < 0:
            raise ValueError(f"softcap: must be a finite float >= 0 (0 = off), got {self.softcap!r}")
        for name in ("alibi", "qq_bias", "sinks"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be a bool, got {getattr(self, name)!r}")
        if isinstance(self.window_left, bool) or not isinstance(self.window_left, int) or \
                not -1 <= self.window_left < 2 ** 31:
            raise ValueError(f"window_left: must be -1 (no window) or an int in [0, 2**31), got "
                             f"{self.window_left!r}")
        _check_quant_fields(self)
        _check_mm_and_invariance_fields(self)
        if self.window_left >= 0 and not self.causal and self.max_seqlen_q > 1:
            raise ValueError("window_left: the sliding window is bottom-right aligned like the "
                             "causal mask (ALGORITHM.md §12.6); it needs causal=True for prefill")

    @property
    def features(self) -> frozenset:
        """Names of the score features this call applies (the kernel spec's feature fields)."""
        return frozenset(name for name, on in self.spec_features().items() if on)

    def spec_features(self) -> dict[str, bool]:
        """The kernel spec's feature fields for this problem."""
        out = dict(softcap=self.softcap > 0, alibi=self.alibi, qq_bias=self.qq_bias,
                   sliding_window=self.window_left >= 0, sinks=self.sinks)
        if self.mm_ranges:       # only when passed: the other kernels' specs stay as they were
            out["mm_prefix_ranges"] = 1 << (self.mm_ranges - 1).bit_length()   # capacity
        out.update(self.quant_spec_fields())
        return out

    def quant_spec_fields(self) -> dict:
        """The §13 spec fields that are set (none: the dict is empty, every spec as before)."""
        out = {}
        if self.alibi_sqrt:
            out["alibi_sqrt"] = True
        if self.out_dtype is not None:
            out["out_dtype"] = self.out_dtype
        if self.kv_token_scales:
            out["kv_token_scales"] = True
        return out

    @property
    def num_queries_per_kv(self) -> int:
        return self.num_q_heads // self.num_kv_heads

    @property
    def kv_addr_64(self) -> bool:
        """Page bases need 64-bit math when one buffer resource cannot span the cache with
        32-bit offsets (``checks.fits_one_buffer``, the rule the kernel's own check applies)."""
        return not fits_one_buffer(self.kv_cache_bytes)

    @property
    def is_decode(self) -> bool:
        return self.max_seqlen_q == 1


def _check_mm_and_invariance_fields(p) -> None:
    """The problem's mm_prefix_range and batch-invariance fields."""
    if isinstance(p.mm_ranges, bool) or not isinstance(p.mm_ranges, int) or p.mm_ranges < 0:
        raise ValueError(f"mm_ranges: must be an int >= 0 (0 = no mm_prefix_range), got "
                         f"{p.mm_ranges!r}")
    if p.mm_ranges and not p.causal:
        raise ValueError("mm_prefix_range: bidirectional ranges widen a causal mask; they need "
                         "causal=True")
    if not isinstance(p.batch_invariant, bool):
        raise ValueError(f"batch_invariant: must be a bool, got {p.batch_invariant!r}")


@dataclass(frozen=True)
class AttentionCapabilities:
    """What a target's attention kernels run (its dispatcher's ``CAPABILITIES``)."""
    head_sizes: tuple[int, ...]
    block_sizes: tuple[int, ...]
    max_group: int                  # the largest GQA group (query heads per KV head) run
    kv_dtypes: tuple[str, ...]      # cache encodings besides q's dtype
    token_scale_kv_dtypes: tuple[str, ...] = ()   # caches read with per-token-head scales
    out_dtypes: tuple[str, ...] = ()              # output encodings besides q's dtype

    def check(self, p: UnifiedAttentionProblem) -> None:
        """Refuse a problem the target has no kernel for, naming the field."""
        if p.head_size not in self.head_sizes:
            raise ValueError(f"head_size: must be one of {self.head_sizes}, got {p.head_size!r}")
        if p.block_size not in self.block_sizes:
            raise ValueError(f"block_size: must be one of {self.block_sizes}, got {p.block_size!r}")
        if p.num_queries_per_kv > self.max_group:
            raise ValueError(f"num_q_heads: a GQA group of {p.num_queries_per_kv} query heads per "
                             f"KV head exceeds the kernels' {self.max_group}")
        if p.kv_token_scales:
            if p.kv_dtype not in self.token_scale_kv_dtypes:
                raise ValueError(f"kv_dtype: per-token-head scales read caches of "
                                 f"{self.token_scale_kv_dtypes}, got {p.kv_dtype!r}")
        elif p.kv_dtype is not None and p.kv_dtype not in self.kv_dtypes:
            raise ValueError(f"kv_dtype: must be None (the caches hold q's dtype) or one of "
                             f"{self.kv_dtypes}, got {p.kv_dtype!r}")
        if p.out_dtype is not None and p.out_dtype not in self.out_dtypes:
            raise ValueError(f"out_dtype: must be None (q's dtype) or one of {self.out_dtypes}, "
                             f"got {p.out_dtype!r}")


@functools.cache
def attention_target(name: str | None = None):
    """The attention dispatcher of target ``name`` (default: rocke.arch's default target):
    ``rocke.kernels.<name>.attention_dispatch``, found by name so that this module imports no
    target. It provides CAPABILITIES, plan(problem, backend, knobs), launches(...), num_sms()."""
    if name is None:
        from rocke.arch import DEFAULT_TARGET
        name = DEFAULT_TARGET.name
    try:
        return importlib.import_module(f"rocke.kernels.{name}.attention_dispatch")
    except ModuleNotFoundError:
        raise ValueError(f"target: rocke has no attention kernels for {name!r}") from None


def plan(problem: UnifiedAttentionProblem, backend: str = "auto", knobs: AttentionKnobs | None = None,
         *, with_specs: bool = True, target: str | None = None):
    """The target's plan of ``problem``: path, geometry, kernel specs (``attention_dispatch.plan``)."""
    return attention_target(target).plan(problem, backend, knobs, with_specs=with_specs)


def num_sms(target: str | None = None) -> int:
    """Compute units the target's dispatcher fills (a visible device's, else the target's)."""
    return attention_target(target).num_sms()



# ---- input validation ------------------------------------------------------------------------

Q_DIMS = "[total_q, num_q_heads, head_size]"
CACHE_DIMS = "[num_blocks, block_size, num_kv_heads, head_size]"

def _is_tensor(x) -> bool:
    import torch
    return isinstance(x, torch.Tensor)


def launch_device_kind(q) -> str:
    """Where a call on ``q``'s device runs: "emu" (rocke's emulator) for CPU tensors, "hip" for a
    ROCm torch GPU's (torch's ``cuda`` device type with ``torch.version.hip`` set);
    ``ROCKE_DEVICE`` overrides. Anything else is refused naming what is supported."""
    import torch
    from rocke import env
    kind = q.device.type
    if kind == "cpu":
        found = "emu"
    elif kind == "cuda" and getattr(torch.version, "hip", None):
        found = "hip"
    elif kind == "cuda" and emulated_on_cuda():
        found = "emu"
    else:
        why = ("this torch is an NVIDIA CUDA build (torch.version.hip is None); rocke's kernels "
               "are AMD gfx942 code") if kind == "cuda" else f"rocke cannot run on {kind} tensors"
        raise ValueError(f"q: on {q.device}: {why}. Supported: CPU tensors (rocke's emulator) "
                         "or GPU tensors of a ROCm torch (HIP)")
    override = env.device()
    if override == "emu" and found == "hip":
        raise ValueError(f"ROCKE_DEVICE=emu, but q is on {q.device}: the emulator runs on CPU "
                         "tensors")
    return override or found


def emulated_on_cuda() -> bool:
    """Whether NVIDIA CUDA tensors run on the emulator, on the GPU (ROCKE_EMU_BACKEND=torch
    ROCKE_EMU_DEVICE=cuda): the tensors are its global memory; the metadata is checked on the
    host, as for CPU tensors."""
    from rocke import env
    return env.emu_backend() == "torch" and env.emu_device() == "cuda"


def launch_target(q) -> str | None:
    """The processor whose kernels a call on ``q`` takes: its device's (the emulator's target,
    ``ROCKE_DEVICE=emu:gfx950`` -> gfx950; a HIP GPU's architecture). None (the default target)
    where ``q`` is not yet a usable tensor: ``describe_problem`` names what is wrong with it."""
    if not _is_tensor(q):
        return None
    try:
        kind = launch_device_kind(q)
    except ValueError:
        return None
    from rocke.runtime import get_device
    return get_device(kind).arch.split(":", 1)[0]


def _need_tensor(name: str, t, dims: int, dim_names: str):
    if not _is_tensor(t):
        raise ValueError(f"{name}: must be a torch tensor {dim_names}, got {type(t).__name__}")
    if t.dim() != dims:
        raise ValueError(f"{name}: must be {dims}-D {dim_names}, got shape {list(t.shape)}")


def _check_row_major(name: str, t, dims: str):
    """Row-major ``dims`` layout: unit innermost stride and each outer stride covering the
    dimensions inside it (padding allowed, e.g. a q view of a wider qkv tensor). A transposed or
    permuted tensor is not row-major, whether or not its elements overlap."""
    if t.stride(-1) != 1:
        raise ValueError(f"{name}: the last (head_size) dimension must have stride 1, "
                         f"got strides {t.stride()}")
    for i in range(t.dim() - 1):
        inner = 1 + sum((n - 1) * st for n, st in zip(t.shape[i + 1:], t.stride()[i + 1:]))
        if t.shape[i] > 1 and t.stride(i) < inner:
            raise ValueError(f"{name}: not row-major: shape {list(t.shape)} has strides "
                             f"{t.stride()}, but the kernels read a row-major {dims} layout (each "
                             f"stride at least the span of the dimensions inside it; padding "
                             f"allowed); pass {name}.contiguous() or allocate it in that layout")


def _byte_range(t) -> tuple[int, int]:
    if t.numel() == 0:
        return (t.data_ptr(), t.data_ptr())
    span = sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1
    return t.data_ptr(), t.data_ptr() + span * t.element_size()


# The cache encodings the kernels read (ALGORITHM.md §11.1): 16-bit caches in q's dtype, or
# gfx942's fp8 e4m3fnuz (bias 8, code 0x80 = NaN, max 240), decoded by v_cvt_f32_fp8.
# gfx950's fp8 is OCP e4m3fn (bias 7, NaN 0x7f/0xff, max 448): a target's CAPABILITIES say which
# of these it reads.
FP8_CACHE_DTYPES = {"float8_e4m3fnuz": "fp8_e4m3fnuz"}
OCP_FP8_DTYPES = {"float8_e4m3fn": "fp8_e4m3fn"}


def _target_fp8(dtype: str, accepted: tuple[str, ...]) -> str | None:
    """The kv/out dtype of torch dtype name ``dtype`` when the target reads it, else None."""
    name = {**FP8_CACHE_DTYPES, **OCP_FP8_DTYPES}.get(dtype)
    return name if name in accepted else None


def _cache_kv_dtype(name: str, t, q_dtype, caps=None) -> str | None:
    """The cache's kv_dtype (None: q's dtype), or a clear error for an encoding the kernels do
    not read. No cache is ever reinterpreted or converted."""
    import torch
    dtype = str(t.dtype).removeprefix("torch.")
    if caps is not None and "fp8_e4m3fn" in caps.kv_dtypes:      # gfx950: OCP fp8
        if _target_fp8(dtype, caps.kv_dtypes):
            return _target_fp8(dtype, caps.kv_dtypes)
        if "float8" in dtype or t.dtype == torch.uint8:
            raise ValueError(f"{name}: fp8 cache dtype {t.dtype} is not read by this target's "
                             "kernels, whose fp8 is OCP e4m3fn (bias 7, NaN 0x7f/0xff, max 448): "
                             "pass torch.float8_e4m3fn caches; nothing is converted silently")
    elif dtype in FP8_CACHE_DTYPES:
        return FP8_CACHE_DTYPES[dtype]
    if t.dtype == torch.float8_e4m3fn:
        raise ValueError(
            f"{name}: a torch.float8_e4m3fn cache (OCP e4m3: bias 7, NaN 0x7f/0xff) is not read by "
            "the gfx942 kernels, which decode fp8 with the hardware's e4m3fnuz conversion (bias 8, "
            "NaN 0x80): the same bits would mean half the value. Store the cache as "
            "torch.float8_e4m3fnuz (gfx942's fp8, what vLLM uses on MI300); nothing is converted "
            "silently")
    if "float8" in dtype:
        raise ValueError(f"{name}: fp8 cache dtype {t.dtype} is not supported; the kernels read "
                         "torch.float8_e4m3fnuz caches (or q's fp16/bf16)")
    if t.dtype == torch.uint8:
        raise ValueError(f"{name}: a uint8 cache does not say its fp8 encoding; pass "
                         "k.view(torch.float8_e4m3fnuz) if it holds gfx942 e4m3fnuz codes")
    if t.dtype != q_dtype:
        raise ValueError(f"{name}: dtype {t.dtype} differs from q's {q_dtype} (a cache is q's dtype "
                         "or torch.float8_e4m3fnuz)")
    return None


def _descale_tensor(name: str, t):
    """A descale as a tensor (a Python number becomes a 0-dim fp32 tensor, as vLLM's scalar)."""
    import torch
    if t is None or _is_tensor(t):
        return t
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return torch.tensor(float(t), dtype=torch.float32)
    raise ValueError(f"{name}: must be None or an fp32 tensor, got {type(t).__name__}")


def _check_descale(name: str, t, num_seqs: int, num_kv_heads: int, *, fp8: bool, device=None,
                   cache: str = "KV cache"):
    """vLLM passes k/v descales on every call (a 0-dim fp32 expanded to [num_seqs, num_kv_heads]
    with zero strides), or per KV head. An fp8 cache needs one (finite, > 0, on q's device: the
    kernel reads it); without an fp8 cache the only meaningful scale is 1."""
    t = _descale_tensor(name, t)
    if t is None:
        if fp8:
            raise ValueError(f"{name}: the fp8 {cache} needs its dequantization scale (fp32, [1] or "
                             "[num_kv_heads] or [num_seqs, num_kv_heads]); got None")
        return
    import torch
    if t.dtype != torch.float32:
        raise ValueError(f"{name}: dtype must be torch.float32, got {t.dtype}")
    if list(t.shape) not in ([], [1], [num_kv_heads], [num_seqs, num_kv_heads]):
        raise ValueError(f"{name}: shape must be [], [1], [num_kv_heads] or [num_seqs, "
                         f"num_kv_heads] = [{num_seqs}, {num_kv_heads}], got {list(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name}: on {t.device}, but q is on {device}; the kernel reads the "
                         "descale from q's device")
    if t.device.type != "cpu":
        return          # a GPU's values are not read on the host (no synchronisation per call)
    off = t.detach().cpu()
    if not fp8:
        if t.numel() and not bool((off == 1).all()):
            bad = off[off != 1].reshape(-1)[0].item()
            why = ("rocke's queries are fp16/bf16, there is no fp8 query to dequantize"
                   if name == "q_descale" else "a non-fp8 KV cache takes no dequantization scale")
            raise ValueError(f"{name}: {why}; every entry must be 1, got {bad!r}")
        return
    if t.numel() == 0:
        raise ValueError(f"{name}: empty descale for the fp8 {cache}")
    bad = ~torch.isfinite(off) | (off <= 0)
    if bool(bad.any()):
        raise ValueError(f"{name}: fp8 dequantization scales must be finite and > 0, got "
                         f"{off[bad].reshape(-1)[0].item()!r}")


def describe_problem(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
                     softmax_scale, causal, window_size, block_table, softcap, q_descale,
                     k_descale, v_descale, alibi_slopes=None, qq_bias=None,
                     sinks=None, *, target: str | None = None, output_scale=None,
                     use_alibi_sqrt: bool = False, kv_quant_mode=None, k_scale_cache=None,
                     v_scale_cache=None) -> UnifiedAttentionProblem:
    """Validate every input on the host (nothing is launched) and describe the call.

    Raises ``NotImplementedError`` for what no kernel does (non-causal prefill), ``ValueError``
    for everything else; each message starts with the argument's name. ``target``'s capabilities
    (default: the default target's) bound head size, block size, group and cache encoding."""
    import torch
    caps = attention_target(target).CAPABILITIES

    _need_tensor("q", q, 3, Q_DIMS)
    _need_tensor("k", k, 4, CACHE_DIMS)
    _need_tensor("v", v, 4, CACHE_DIMS)
    _need_tensor("out", out, 3, Q_DIMS)
    _need_tensor("cu_seqlens_q", cu_seqlens_q, 1, "[num_seqs + 1]")
    _need_tensor("seqused_k", seqused_k, 1, "[num_seqs]")
    _need_tensor("block_table", block_table, 2, "[num_seqs, max_blocks_per_seq]")

    named = {"q": q, "k": k, "v": v, "out": out, "cu_seqlens_q": cu_seqlens_q,
             "seqused_k": seqused_k, "block_table": block_table}
    for name, t in named.items():
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, but q is on {q.device}; every tensor must be "
                             "on one device")
    # CPU (or CUDA, emulated there) -> emulator, ROCm GPU -> HIP, anything else refused
    host_readable = launch_device_kind(q) == "emu" or q.device.type == "cpu"   # checked on the host

    if str(q.dtype).removeprefix("torch.") not in DTYPES:
        raise ValueError(f"q: dtype must be torch.float16 or torch.bfloat16, got {q.dtype}")
    dtype = DTYPES[str(q.dtype).removeprefix("torch.")]
    token_scales = _token_scale_mode(kv_quant_mode, k, v, k_scale_cache, v_scale_cache, caps)
    if token_scales:
        kv_dtype = token_scales
    else:
        kv_dtype = _cache_kv_dtype("k", k, q.dtype, caps)
        if _cache_kv_dtype("v", v, q.dtype, caps) != kv_dtype or v.dtype != k.dtype:
            raise ValueError(f"v: dtype {v.dtype} differs from k's {k.dtype}; both caches share one "
                             "encoding")
    out_dtype = _check_output_scale(output_scale, out, q, caps)
    if out_dtype is None and out.dtype != q.dtype:
        raise ValueError(f"out: dtype {out.dtype} differs from q's {q.dtype}")
    for name in ("cu_seqlens_q", "seqused_k", "block_table"):
        if named[name].dtype != torch.int32:
            raise ValueError(f"{name}: dtype must be torch.int32, got {named[name].dtype}")

    total_q, num_q_heads, head_size = q.shape
    num_blocks, block_size, num_kv_heads, kv_head_size = k.shape
    if list(out.shape) != list(q.shape):
        raise ValueError(f"out: shape {list(out.shape)} differs from q's {list(q.shape)}")
    if list(v.shape) != list(k.shape):
        raise ValueError(f"v: shape {list(v.shape)} differs from k's {list(k.shape)}")
    if kv_head_size != head_size:
        raise ValueError(f"k: head_size {kv_head_size} differs from q's {head_size}")
    if head_size not in caps.head_sizes:
        raise ValueError(f"q: head_size must be one of {caps.head_sizes}, got {head_size}")
    if block_size not in caps.block_sizes:
        raise ValueError(f"k: block_size must be one of {caps.block_sizes}, got {block_size}")
    if num_kv_heads < 1 or num_q_heads % num_kv_heads:
        raise ValueError(f"q: num_q_heads {num_q_heads} is not a multiple of the caches' "
                         f"num_kv_heads {num_kv_heads} (GQA needs whole groups)")
    if num_q_heads // num_kv_heads > caps.max_group:
        raise ValueError(f"q: a GQA group of {num_q_heads // num_kv_heads} query heads per KV head "
                         f"exceeds the kernels' {caps.max_group}")
    if num_blocks < 1:
        raise ValueError("k: the cache has no blocks")
    for name, dims in (("q", Q_DIMS), ("k", CACHE_DIMS), ("v", CACHE_DIMS), ("out", Q_DIMS)):
        _check_row_major(name, named[name], dims)
    for name in ("cu_seqlens_q", "seqused_k"):
        if named[name].stride(0) != 1:
            raise ValueError(f"{name}: must be contiguous, got stride {named[name].stride()}")
    if block_table.stride(1) != 1:
        raise ValueError(f"block_table: columns must have stride 1, got strides {block_table.stride()}")
    lo, hi = _byte_range(out)
    for name, t in named.items():
        if name != "out" and t.numel() and out.numel():
            a, b = _byte_range(t)
            if a < hi and lo < b:
                raise ValueError(f"out: overlaps {name} in memory; out must be its own buffer")

    if not isinstance(causal, bool):
        raise ValueError(f"causal: must be a bool, got {causal!r}")
    num_seqs = seqused_k.shape[0]       # 0: an empty batch, checked like any other, runs nothing
    if cu_seqlens_q.shape[0] != num_seqs + 1:
        raise ValueError(f"cu_seqlens_q: must have num_seqs + 1 = {num_seqs + 1} entries "
                         f"(seqused_k has {num_seqs}), got {cu_seqlens_q.shape[0]}")
    if block_table.shape[0] != num_seqs:
        raise ValueError(f"block_table: must have num_seqs = {num_seqs} rows, got {block_table.shape[0]}")
    for name, given in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not isinstance(given, int) or isinstance(given, bool):
            raise ValueError(f"{name}: must be an int, got {given!r}")
    if host_readable:
        true_max_q = _check_contents(cu_seqlens_q.cpu(), seqused_k.cpu(), block_table.cpu(),
                                     total_q, num_blocks, block_size, causal, max_seqlen_q,
                                     max_seqlen_k)
    else:
        # a GPU's metadata is not read on the host (that would synchronise and break graph
        # capture): what is derivable from the numbers the caller passed is checked here
        if not causal and max_seqlen_q > 1:
            raise NotImplementedError(NON_CAUSAL_PREFILL)
        true_max_q = max_seqlen_q
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)) or \
            not math.isfinite(softmax_scale) or softmax_scale <= 0:
        raise ValueError(f"softmax_scale: must be a finite positive float, got {softmax_scale!r}")
    fp8 = kv_dtype is not None and not token_scales
    _check_descale("k_descale", k_descale, num_seqs, num_kv_heads, fp8=fp8, device=q.device,
                   cache="K cache")
    _check_descale("v_descale", v_descale, num_seqs, num_kv_heads, fp8=fp8, device=q.device,
                   cache="V cache")
    # q_descale dequantizes an fp8 query (vLLM's Triton unified path passes None). rocke's
    # queries are fp16/bf16, so it may only be None or 1 (ALGORITHM.md §11.1).
    q_descale = _descale_tensor("q_descale", q_descale)
    if q_descale is not None:
        _check_descale("q_descale", q_descale, num_seqs, num_kv_heads, fp8=False, device=q.device)

    window_left = _check_window(window_size)
    softcap = _check_softcap(softcap)
    if not isinstance(use_alibi_sqrt, bool):
        raise ValueError(f"use_alibi_sqrt: must be a bool, got {use_alibi_sqrt!r}")
    if use_alibi_sqrt and alibi_slopes is None:
        raise ValueError("use_alibi_sqrt: square-root ALiBi scales alibi_slopes, which is None")
    if token_scales:
        for name, t in (("k_scale_cache", k_scale_cache), ("v_scale_cache", v_scale_cache)):
            _check_scale_cache(name, t, q, out, (num_blocks, block_size, num_kv_heads))
            if host_readable and t.device.type == "cpu":
                _check_read_scales(name, t, seqused_k.cpu(), block_table.cpu(), block_size)
    if alibi_slopes is not None:
        _check_feature_tensor("alibi_slopes", alibi_slopes, q, [num_q_heads], "[num_q_heads]")
    if sinks is not None:       # -inf: a head without a sink (its column weighs exp(-inf) = 0)
        _check_feature_tensor("sinks", sinks, q, [num_q_heads], "[num_q_heads]", allow=(-math.inf,))
    if qq_bias is not None:
        _check_feature_tensor("qq_bias", qq_bias, q, None, "[max_q, max_q]")
        if qq_bias.dim() != 2 or min(qq_bias.shape) < true_max_q:
            raise ValueError(f"qq_bias: must be 2-D [max_q, max_q] covering the longest query "
                             f"({true_max_q} tokens), got shape {list(qq_bias.shape)}")

    cache_bytes = max(k.stride(0) * num_blocks * k.element_size(),
                      v.stride(0) * num_blocks * v.element_size())
    problem = UnifiedAttentionProblem(
        dtype=dtype, head_size=head_size, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
        block_size=block_size, num_seqs=num_seqs, total_q=total_q,
        max_seqlen_q=max(1, max_seqlen_q), max_seqlen_k=max(1, max_seqlen_k), causal=causal,
        num_blocks=num_blocks, kv_cache_bytes=cache_bytes, softcap=softcap,
        alibi=alibi_slopes is not None, qq_bias=qq_bias is not None, window_left=window_left,
        sinks=sinks is not None, kv_dtype=kv_dtype, alibi_sqrt=use_alibi_sqrt,
        out_dtype=out_dtype, kv_token_scales=bool(token_scales))
    caps.check(problem)
    return problem


# ---- ALGORITHM.md §13: fp8 output, per-token-head KV scales, square-root ALiBi ------------------

OUT_FP8_DTYPES = {"float8_e4m3fnuz": "fp8_e4m3fnuz"}
# rocke's names of vLLM's KVQuantMode members (rocke.vllm maps the enum onto them)
KV_QUANT_MODES = ("none", "fp8_per_tensor", "int8_per_token_head", "fp8_per_token_head")
TOKEN_SCALE_MODES = {"int8_per_token_head": ("int8", "i8"),
                     "fp8_per_token_head": ("float8_e4m3fnuz", "fp8_e4m3fnuz")}


def _check_quant_fields(p) -> None:
    if not isinstance(p.alibi_sqrt, bool) or not isinstance(p.kv_token_scales, bool):
        raise ValueError("alibi_sqrt / kv_token_scales: must be bools")
    if p.alibi_sqrt and not p.alibi:
        raise ValueError("alibi_sqrt: square-root ALiBi needs ALiBi slopes (alibi=True)")
    if p.kv_token_scales and p.kv_dtype is None:
        raise ValueError("kv_token_scales: per-token-head scales need an int8 or fp8 cache (kv_dtype)")
    if p.out_dtype is not None and not isinstance(p.out_dtype, str):
        raise ValueError(f"out_dtype: must be None or an encoding's name, got {p.out_dtype!r}")


def _token_scale_mode(kv_quant_mode, k, v, k_scale_cache, v_scale_cache, caps=None) -> str | None:
    """The cache's kv_dtype for a per-token-head ``kv_quant_mode`` (None for the other modes),
    after checking the mode, the caches' dtype and that scale caches come exactly with it."""
    mode = "none" if kv_quant_mode is None else kv_quant_mode
    if mode not in KV_QUANT_MODES:
        raise ValueError(f"kv_quant_mode: must be None or one of {KV_QUANT_MODES}, got "
                         f"{kv_quant_mode!r}")
    if mode not in TOKEN_SCALE_MODES:
        for name, t in (("k_scale_cache", k_scale_cache), ("v_scale_cache", v_scale_cache)):
            if t is not None:
                raise ValueError(f"{name}: scale caches are read only by the per-token-head modes "
                                 f"({', '.join(TOKEN_SCALE_MODES)}); kv_quant_mode is {mode!r}")
        return None
    torch_name, kv_dtype = TOKEN_SCALE_MODES[mode]
    if caps is not None and kv_dtype not in caps.token_scale_kv_dtypes:     # gfx950: OCP fp8
        torch_name, kv_dtype = next(((t, n) for t, n in OCP_FP8_DTYPES.items()
                                     if n in caps.token_scale_kv_dtypes), (torch_name, kv_dtype))
    for name, t in (("k", k), ("v", v)):
        if str(t.dtype).removeprefix("torch.") != torch_name:
            raise ValueError(f"{name}: kv_quant_mode {mode} needs torch.{torch_name} caches, got "
                             f"{t.dtype}")
    for name, t in (("k_scale_cache", k_scale_cache), ("v_scale_cache", v_scale_cache)):
        if t is None:
            raise ValueError(f"{name}: kv_quant_mode {mode} needs its per-token-head scales "
                             "(float32 [num_blocks, block_size, num_kv_heads]); got None")
    return kv_dtype


def _check_scale_cache(name: str, t, q, out, shape) -> None:
    # contents: only the slots a call reads (_check_read_scales); vLLM's unused slots hold garbage
    _check_feature_tensor(name, t, q, list(shape), "[num_blocks, block_size, num_kv_heads]",
                          contents=False)
    _check_row_major(name, t, "[num_blocks, block_size, num_kv_heads]")
    if t.numel() and out.numel():
        a, b = _byte_range(t)
        lo, hi = _byte_range(out)
        if a < hi and lo < b:
            raise ValueError(f"out: overlaps {name} in memory; out must be its own buffer")


def _check_read_scales(name: str, t, seqused_k, block_table, block_size: int) -> None:
    """Every scale a call reads (token ``< seqused_k`` of each sequence, through its block
    table; the metadata already checked) is finite; slots past a sequence are never read."""
    import torch
    lens = seqused_k.to(torch.int64)
    if not lens.numel() or int(lens.max()) <= 0:
        return
    pos = torch.arange(int(lens.max()))
    seq, tok = torch.nonzero(pos[None, :] < lens[:, None], as_tuple=True)
    pages = block_table.to(torch.int64)[seq, tok // block_size]
    read = t[pages, tok % block_size]                     # [tokens read, num_kv_heads]
    bad = ~torch.isfinite(read)
    if bool(bad.any()):
        i, h = (int(x) for x in torch.nonzero(bad)[0])
        raise ValueError(f"{name}: entries a call reads must be finite; sequence {int(seq[i])} "
                         f"token {int(tok[i])} (page {int(pages[i])}, row "
                         f"{int(tok[i]) % block_size}, KV head {h}) holds {read[i, h].item()!r}")


def _check_output_scale(output_scale, out, q, caps=None) -> str | None:
    """The output's encoding: None (q's dtype) without ``output_scale``, else fp8 after checking
    ``out``'s dtype and the scale (a one-element fp32 tensor, finite and > 0 on the host)."""
    import torch
    out_name = str(out.dtype).removeprefix("torch.")
    out_fp8 = OUT_FP8_DTYPES
    if caps is not None and "fp8_e4m3fn" in caps.out_dtypes:           # gfx950: OCP fp8
        out_fp8 = {t: n for t, n in OCP_FP8_DTYPES.items() if n in caps.out_dtypes}
    if output_scale is None:
        if out_name in out_fp8:
            raise ValueError(f"out: an {out.dtype} output needs output_scale (its quantization "
                             "scale); got None")
        return None
    if not _is_tensor(output_scale) or output_scale.dtype != torch.float32 or \
            output_scale.numel() != 1:
        raise ValueError(f"output_scale: must be a one-element torch.float32 tensor, got "
                         f"{getattr(output_scale, 'dtype', type(output_scale).__name__)} "
                         f"{list(getattr(output_scale, 'shape', []))}")
    if output_scale.device != q.device:
        raise ValueError(f"output_scale: on {output_scale.device}, but q is on {q.device}")
    if out_name not in out_fp8:
        want = ", ".join(f"torch.{t}" for t in out_fp8)
        raise ValueError(f"out: with output_scale the output is fp8: out must be "
                         f"{want} (the target's fp8), got {out.dtype}")
    if output_scale.device.type == "cpu":
        value = float(output_scale.reshape(-1)[0])
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"output_scale: must be finite and > 0, got {value!r}")
    return out_fp8[out_name]


NON_CAUSAL_PREFILL = ("causal: non-causal prefill (causal=False with a query longer than 1 token) "
                      "is not supported; the kernels apply the bottom-right causal mask "
                      "(ALGORITHM.md §3)")


def _check_contents(cu_seqlens_q, seqused_k, block_table, total_q: int, num_blocks: int,
                    block_size: int, causal: bool, max_seqlen_q: int, max_seqlen_k: int) -> int:
    """The checks that read the metadata's contents (host tensors only; numpy views, no copies);
    returns the longest query length."""
    plainly_valid = _contents_plainly_valid(cu_seqlens_q, seqused_k, block_table, total_q,
                                            num_blocks, block_size, causal, max_seqlen_q,
                                            max_seqlen_k)
    if plainly_valid is not None:
        return plainly_valid
    import numpy as np
    cu = cu_seqlens_q.numpy().astype(np.int64)
    lens_k = seqused_k.numpy().astype(np.int64)
    num_seqs = lens_k.shape[0]
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens_q: must start at 0, got {int(cu[0])}")
    q_lens = cu[1:] - cu[:-1]
    if num_seqs and q_lens.min() < 0:
        s = int(np.flatnonzero(q_lens < 0)[0])
        raise ValueError(f"cu_seqlens_q: not monotone: entry {s + 1} ({int(cu[s + 1])}) is below "
                         f"entry {s} ({int(cu[s])})")
    if cu[-1] != total_q:
        raise ValueError(f"cu_seqlens_q: must end at total_q = {total_q} (q's rows), got {int(cu[-1])}")
    true_max_q = int(q_lens.max()) if num_seqs else 0
    true_max_k = int(lens_k.max()) if num_seqs else 0
    if num_seqs and lens_k.min() < 0:
        raise ValueError(f"seqused_k: KV lengths must be >= 0, got {int(lens_k.min())}")
    capacity = block_table.shape[1] * block_size
    if true_max_k > capacity:
        s = int(np.flatnonzero(lens_k > capacity)[0])
        raise ValueError(f"seqused_k: sequence {s} has {int(lens_k[s])} KV tokens, beyond its block "
                         f"table's capacity {block_table.shape[1]} blocks x {block_size} = {capacity}")
    if not causal and true_max_q > 1:
        # decode rows are the same either way; the kernels always apply the causal mask
        raise NotImplementedError(NON_CAUSAL_PREFILL)
    if causal and num_seqs and (q_lens > lens_k).any():
        s = int(np.flatnonzero(q_lens > lens_k)[0])
        raise ValueError(f"seqused_k: causal attention needs query_len <= kv_len, but sequence {s} "
                         f"has query_len {int(q_lens[s])} > kv_len {int(lens_k[s])}")
    if num_seqs:
        used_blocks = (lens_k + block_size - 1) // block_size
        table = block_table.numpy()
        used = np.arange(table.shape[1])[None, :] < used_blocks[:, None]
        bad = used & ((table < 0) | (table >= num_blocks))
        if bad.any():
            s, j = (int(x) for x in np.argwhere(bad)[0])
            raise ValueError(f"block_table: sequence {s} uses block index {int(table[s, j])} at "
                             f"column {j}, outside the cache's [0, {num_blocks}) pages")
    for name, given, actual in (("max_seqlen_q", max_seqlen_q, true_max_q),
                                ("max_seqlen_k", max_seqlen_k, true_max_k)):
        if given < actual:
            raise ValueError(f"{name}: {given} is below the batch's longest length {actual}")
    return true_max_q


FAST_CHECK_MAX_SEQS = 64      # batches up to this size are checked in plain Python first


def _contents_plainly_valid(cu_seqlens_q, seqused_k, block_table, total_q: int, num_blocks: int,
                            block_size: int, causal: bool, max_seqlen_q: int,
                            max_seqlen_k: int) -> int | None:
    """The longest query length when a small batch passes every check of ``_check_contents``
    (a few us: Python ints, and the whole block table -- used entries or not -- inside the
    cache); None when it may not, and the detailed check then decides and names what is wrong.
    Never looser than the detailed check: each condition here implies the one there."""
    longest_q = _lengths_plainly_valid(cu_seqlens_q, seqused_k, block_table, total_q, block_size,
                                       causal, max_seqlen_q, max_seqlen_k)
    if longest_q is None or not _table_plainly_valid(block_table, num_blocks):
        return None
    return longest_q


def _lengths_plainly_valid(cu_seqlens_q, seqused_k, block_table, total_q: int, block_size: int,
                           causal: bool, max_seqlen_q: int, max_seqlen_k: int) -> int | None:
    """``_contents_plainly_valid`` but for the block table's contents."""
    num_seqs = seqused_k.shape[0]
    if not 0 < num_seqs <= FAST_CHECK_MAX_SEQS or block_table.numel() == 0:
        return None
    cu, lens_k = cu_seqlens_q.tolist(), seqused_k.tolist()
    if cu[0] != 0 or cu[-1] != total_q:
        return None
    kv_limit = min(block_table.shape[1] * block_size, max_seqlen_k)
    longest_q = 0
    for s in range(num_seqs):
        q_len, kv_len = cu[s + 1] - cu[s], lens_k[s]
        if q_len < 0 or not 0 <= kv_len <= kv_limit or (causal and q_len > kv_len):
            return None
        longest_q = max(longest_q, q_len)
    if longest_q > max_seqlen_q or (not causal and longest_q > 1):
        return None
    return longest_q


def _table_plainly_valid(block_table, num_blocks: int) -> bool:
    """Whether every entry of a (non-empty) block table, used or not, lies inside the cache."""
    import torch
    lowest, highest = (x.item() for x in torch.aminmax(block_table))
    return 0 <= lowest and highest < num_blocks


def _check_window(window_size) -> int:
    """vLLM's ``window_size``: ``(-1, -1)`` (or None) = no window; ``(left, 0)`` with ``left >= 0``
    = keys at most ``left`` positions before the query (vLLM passes ``(sliding_window - 1, 0)``;
    ``(left, -1)`` means the same under the causal mask). Returns ``left`` (-1 = off)."""
    if window_size is None:
        return -1
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2 or any(
            isinstance(x, bool) or not isinstance(x, int) for x in window_size):
        raise ValueError(f"window_size: must be a pair of ints (left, right) as vLLM passes it, "
                         f"got {window_size!r}")
    left, right = window_size
    if (left, right) == (-1, -1):
        return -1
    if left < 0 or right not in (0, -1) or left >= 2 ** 31:
        raise ValueError(f"window_size: must be (-1, -1) (no window) or (left, 0) / (left, -1) with "
                         f"0 <= left < 2**31 (causal: no key after the query), got {tuple(window_size)}")
    return left


def _check_softcap(softcap) -> float:
    if softcap is None:
        return 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or \
            not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"softcap: must be a finite float >= 0 (0 = off), got {softcap!r}")
    return float(softcap)


def _check_feature_tensor(name: str, t, q, shape, dims: str, *, contents: bool = True,
                          allow: tuple = ()):
    """An fp32 feature tensor on q's device; with ``contents``, a host tensor's entries are
    finite or one of ``allow`` (e.g. -inf for sinks)."""
    import torch
    if not _is_tensor(t):
        raise ValueError(f"{name}: must be a torch.float32 tensor {dims}, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise ValueError(f"{name}: dtype must be torch.float32, got {t.dtype}")
    if t.device != q.device:
        raise ValueError(f"{name}: on {t.device}, but q is on {q.device}; every tensor must be on "
                         "one device")
    if shape is not None and list(t.shape) != shape:
        raise ValueError(f"{name}: shape must be {dims} = {shape}, got {list(t.shape)}")
    if t.dim() and t.stride(-1) != 1:
        raise ValueError(f"{name}: the last dimension must have stride 1, got strides {t.stride()}")
    if contents and t.device.type == "cpu":           # host tensors only
        bad = ~torch.isfinite(t)
        for value in allow:
            bad &= t != value
        if bool(bad.any()):
            what = "finite" + "".join(f" or {v}" for v in allow)
            raise ValueError(f"{name}: entries must be {what}, got {t[bad].reshape(-1)[0].item()!r}")


# ranges per sequence the kernels take: each is unrolled once per query row before the tile
# loop (a runtime loop there costs ~40 SGPRs and spills, ALGORITHM.md §12.8)
MAX_MM_RANGES = 16
MM_POSITION_LIMIT = 2 ** 30     # |start|, |end|: their differences must not overflow int32


def check_mm_prefix_range(t, q, num_seqs: int, causal: bool) -> int:
    """vLLM's ``mm_prefix_range``: None, or an int32 ``[num_seqs, max_ranges, 2]`` tensor of
    inclusive ``[start, end]`` key/query positions per sequence (a range with ``start >= end``
    is unused). Returns ``max_ranges`` (0 = none)."""
    if t is None:
        return 0
    import torch
    dims = "[num_seqs, max_ranges, 2]"
    if not _is_tensor(t):
        raise ValueError(f"mm_prefix_range: must be None or an int32 tensor {dims}, got "
                         f"{type(t).__name__}")
    if t.dtype != torch.int32:
        raise ValueError(f"mm_prefix_range: dtype must be torch.int32, got {t.dtype}")
    if t.device != q.device:
        raise ValueError(f"mm_prefix_range: on {t.device}, but q is on {q.device}; every tensor "
                         "must be on one device")
    if t.dim() != 3 or t.shape[0] != num_seqs or t.shape[2] != 2 or t.shape[1] < 1:
        raise ValueError(f"mm_prefix_range: shape must be {dims} with num_seqs = {num_seqs} and "
                         f"max_ranges >= 1, got {list(t.shape)}")
    if t.shape[1] > MAX_MM_RANGES:
        raise ValueError(f"mm_prefix_range: {t.shape[1]} ranges per sequence exceed the kernels' "
                         f"{MAX_MM_RANGES} (each is unrolled once per query row)")
    if t.stride(2) != 1 or t.stride(1) != 2:
        raise ValueError(f"mm_prefix_range: each sequence's [start, end] pairs must be packed "
                         f"(strides (*, 2, 1)), got strides {t.stride()}")
    if not causal:
        raise ValueError("mm_prefix_range: bidirectional ranges widen a causal mask; they need "
                         "causal=True")
    if t.device.type == "cpu" and t.numel():
        widest = int(t.to(torch.int64).abs().max())      # int32's abs(-2**31) overflows
        if widest >= MM_POSITION_LIMIT:
            raise ValueError(f"mm_prefix_range: positions must lie within +-2**30 (the kernels' "
                             f"range arithmetic), got {widest}")
    return int(t.shape[1])


def resolve_batch_invariant(value) -> bool:
    """An explicit ``batch_invariant`` (a bool), else ``ROCKE_BATCH_INVARIANT``."""
    from rocke import env
    if value is None:
        return env.batch_invariant()
    if not isinstance(value, bool):
        raise ValueError(f"batch_invariant: must be None or a bool, got {value!r}")
    return value


# ---- kernels: specs, the compiled-variant cache, launch ----------------------------------------

def _build_and_compile(spec):
    import importlib
    from rocke.compiler import compile_ir
    from rocke.kernels.common.golden_table import prebuilt_for_spec
    served = prebuilt_for_spec(spec)         # a shipped variant: no IR build, no link
    if served is not None:
        return served
    from rocke.arch import get_target
    kern = importlib.import_module(type(spec).__module__).build(spec)
    return compile_ir(kern.ir(), name=kern.name, workgroup_size=kern.workgroup_size,
                      target=get_target(kern.target).target_id)


COMPILED = CompiledSpecCache(_build_and_compile)


def compiled(spec):
    """The compiled kernel of ``spec``: built once per process, on top of the on-disk cache."""
    return COMPILED.get(spec)


def kernel_spills(kernel) -> tuple[int, int]:
    """(VGPR, SGPR) spills of a compiled kernel, from its metadata; (0, 0) for one without
    resource metadata (a test's stand-in)."""
    info = getattr(kernel, "info", None)
    return (0, 0) if info is None else (info.vgpr_spills, info.sgpr_spills)


def spill_checked(target, the_plan) -> tuple:
    """(plan, its compiled kernels) of a call, every build before any launch: the target's
    spill-aware choice (``spill_free_plan``: a planned kernel whose code spills is replaced by
    a spill-free geometry of the same problem, recorded in ``plan.spill_fallback``), or the
    plan itself for a target without one."""
    built = {spec: compiled(spec) for spec in the_plan.specs}
    choose = getattr(target, "spill_free_plan", None)
    if choose is not None:
        the_plan = choose(the_plan, lambda spec: kernel_spills(
            built[spec] if spec in built else compiled(spec)))
    return the_plan, [built[spec] if spec in built else compiled(spec)
                      for spec in the_plan.specs]


def compiled_cache_stats() -> CompiledSpecCache:
    return COMPILED


@dataclass
class RunRecord:
    plan: object              # the target dispatcher's Plan
    reports: list               # one launch report per kernel launched
    replayed: bool = False      # the launches ran as a replay of a cached graph
    kernels: tuple = ()         # compile_only: the names of the kernels built for the call


# Graphs the entry point captured, by the identity of everything their launches read (see
# _graph_key); each holds its own 3D workspace. Bounded: the oldest is released first.
GRAPH_CACHE_SIZE = 8
GRAPHS = GraphCache(GRAPH_CACHE_SIZE)


def _graph_key(device_kind, plan, launches, workspace) -> tuple:
    """What a captured graph's launches depend on: the device, the plan, and per launch its grid
    and every argument -- a tensor by its address, shape, strides, dtype and device (its
    contents may change: a replay reads them anew), a number by its value. A 3D workspace the
    entry point allocated is the graph's own, so only its shape counts; the caller's workspaces
    are caller tensors like any other."""
    def identity(a):
        if any(a is w for w in workspace):
            return ("workspace", tuple(a.shape))
        if hasattr(a, "data_ptr") and not hasattr(a, "shape"):   # the guard's error record
            return ("buffer", a.data_ptr())
        if hasattr(a, "data_ptr"):
            return ("tensor", a.data_ptr(), tuple(a.shape), tuple(a.stride()), str(a.dtype),
                    str(a.device))
        return (type(a).__name__, a)
    return (device_kind, plan.specs, plan.geometry) + tuple(
        (compiled.name, grid, block, tuple(identity(a) for a in args))
        for compiled, grid, block, args in launches)


def _guard_launches(device_kind, problem, args) -> list:
    """On a GPU, the metadata guard first: the content checks the host does on the emulator,
    done on the device (``metadata_guard.py``; ``ROCKE_CHECK_METADATA=off`` leaves it out)."""
    if args[0].device.type == "cpu" or device_kind == "emu" or env.check_metadata() == "off":
        return []
    from rocke.kernels.common import metadata_guard as guard
    from rocke.runtime import get_device
    cu, used, table, max_q, max_k = (args[ARG_INDEX[n]] for n in (
        "cu_seqlens_q", "seqused_k", "block_table", "max_seqlen_q", "max_seqlen_k"))
    device = get_device(device_kind)
    record = device.error_record()
    spec = guard.spec_for(device.arch)      # the GPU's processor: gfx942 or gfx950
    grid, block = guard.launch_geometry(spec, problem.num_seqs)
    return [(compiled(spec), grid, block, guard.kernel_args(
        cu, used, table, record, total_q=problem.total_q, num_blocks=problem.num_blocks,
        block_size=problem.block_size, causal=problem.causal, max_seqlen_q=max_q,
        max_seqlen_k=max_k))]


def _check_after(q) -> bool:
    return q.device.type != "cpu" and env.check_metadata() == "sync"


def _check_device_now(device) -> None:
    """ROCKE_CHECK_METADATA=sync: report the guard's finding right after the call (a
    synchronisation), except inside a capture, where nothing has run yet."""
    if not device.is_capturing():
        device.check_errors()


def _run_launches(device_kind, plan, launches, workspace) -> RunRecord:
    """Launch eagerly on ``device_kind``, or -- where the dispatcher recommends graph replay --
    replay a graph of the same launches, capturing it on first use."""
    from rocke.runtime import Graph, launch
    if not plan.graph_replay:
        return RunRecord(plan, [launch(c, g, b, a, device=device_kind) for c, g, b, a in launches])
    key = _graph_key(device_kind, plan, launches, workspace)

    def capture():
        graph = Graph(device=device_kind)
        with graph.capture():
            for c, g, b, a in launches:
                launch(c, g, b, a, device=device_kind)
        return graph
    reports, _ = GRAPHS.replay(key, capture)
    return RunRecord(plan, reports, replayed=True)


def _meta(t):
    """A tensor's identity for the kernels: address, shape, strides, dtype, device."""
    return (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)


# Per-call derived data (problem, plan, kernels, packed launches) by the call's metadata: a call
# whose tensors have the same addresses, shapes, strides, dtypes and devices and whose numbers
# and levers are the same launches the same bytes, so it is validated, planned and packed once.
CALL_CACHE_SIZE = 64
_CALLS: "OrderedDict[tuple, _CallPlan]" = OrderedDict()
# the same entries by their key's addresses: addresses -> ((rest of the key, entry), ...)
_BY_ADDRESSES: dict = {}
_CALLS_LOCK = threading.Lock()
_CALL_SERIAL = itertools.count()


@dataclass
class _CallPlan:
    plan: object
    device: object                  # the rocke.runtime Device the launches run on
    prepared: tuple                 # PreparedLaunch per kernel, in order
    workspace: tuple                # the 3D workspace the entry point allocated, if any
    would_replay: bool              # graph replay, unless the caller is capturing
    graph_key: tuple | None
    capture: object                 # () -> Graph of the launches
    check_contents: object          # (cu_seqlens_q, seqused_k, block_table) -> None: host
                                    # content checks (emulator, _HostContents), or None
    check_after: bool = False       # ROCKE_CHECK_METADATA=sync: read the guard's record now

    def run(self) -> RunRecord:
        if self.would_replay and not self.device.is_capturing():
            return RunRecord(self.plan, GRAPHS.replay(self.graph_key, self.capture)[0], True)
        return RunRecord(self.plan, [self.device.execute(p) for p in self.prepared])


# the levers a call's plan depends on, read raw per call (one read each, plus the number of
# environment variables); a changed value misses the cache, and the miss parses them
_KEY_LEVERS = tuple(knobs_mod.PREFIX + lever for lever in knobs_mod.LEVERS) + (
    "ROCKE_DEVICE", "ROCKE_CHECK_METADATA", "ROCKE_BATCH_INVARIANT")
_levers_now = env.state_reader(_KEY_LEVERS)
# what a tensor's key reads, each in one C-level pass over the call's tensors: its class, shape,
# dtype and device, then its address and strides by torch's own methods (a class that overrides
# either is never cached: _cacheable)
_LAYOUT = operator.attrgetter("__class__", "shape", "dtype", "device")
# number types a key may hold: immutable, so equal keys mean equal values (a tensor or other
# mutable object as a number is validated on every call, never cached)
_KEYABLE_VALUES = frozenset((int, float, bool, type(None), tuple))


def _tensor_methods():
    import torch
    _TENSOR_METHODS[:] = torch.Tensor.data_ptr, torch.Tensor.stride
    return _TENSOR_METHODS


_TENSOR_METHODS: list = []      # torch.Tensor's data_ptr and stride, once torch is imported
_NO_DESCALES = (None, None, None)


def _call_key(tensors: tuple, values: tuple, descales: tuple, segm_workspaces, backend,
              num_segments, batch_invariant) -> tuple | None:
    """The cache key of a call, as (addresses, the rest): each tensor's address, and its class,
    shape, dtype, device and strides; each number with its type (and a window's items' types:
    ``(-1.0, -1)`` is not ``(-1, -1)``; ``batch_invariant=0`` is not ``False``); the levers' raw
    values; the devices' generation. None
    when the call cannot be keyed (host descales: their contents are checked on every call; an
    argument not what it should be: the full validation names it)."""
    data_ptr, stride = _TENSOR_METHODS or _tensor_methods()
    try:
        window = values[-1]     # a window tuple's items' types follow the numbers' (one pass)
        rest = (tuple(map(_LAYOUT, tensors)), tuple(map(stride, tensors)), values,
                tuple(map(type, values if window is None else values + tuple(window))),
                _levers_now(), device_generation(), backend, num_segments,
                batch_invariant, num_segments.__class__, batch_invariant.__class__)
        if descales is not _NO_DESCALES and descales != _NO_DESCALES:
            if any(t is not None and t.device.type == "cpu" for t in descales):
                return None
            rest += (tuple(None if t is None else _meta(t) for t in descales),)
        if segm_workspaces is not None:     # what _meta reads, and the class, per C-level pass
            rest += (tuple(map(_LAYOUT, segm_workspaces)), tuple(map(stride, segm_workspaces)),
                     tuple(map(data_ptr, segm_workspaces)))
        return tuple(map(data_ptr, tensors)), rest
    except (AttributeError, TypeError, RuntimeError):     # not a plain tensor
        return None


def _cacheable(tensors: tuple, values: tuple) -> bool:
    """Whether a call may be cached (checked once, when it is recorded): its numbers immutable,
    and its tensors' address and strides what torch's own methods (the key's) say."""
    data_ptr, stride = _TENSOR_METHODS or _tensor_methods()
    window = values[-1]
    return all(type(v) in _KEYABLE_VALUES for v in values) and (
        window is None or all(type(x) is int for x in window)) and all(
        type(t).data_ptr is data_ptr and type(t).stride is stride for t in tensors)


class _HostContents:
    """The emulator's content checks of one cached call (``_check_contents``), skipped while the
    bytes they read are, byte for byte, the bytes they last passed: the checks are a pure
    function of those bytes and of what the call key holds (shapes, lengths, causal). A decode
    step's new lengths over an unchanged block table take ``_contents_plainly_valid`` without
    its table scan (the table's bytes are those it last found inside the cache).

    The bytes are read at the addresses the key holds: only on a key hit, when the call's own
    cu_seqlens_q, seqused_k and block_table have exactly those addresses, shapes and strides."""

    def __init__(self, tensors, problem, max_seqlen_q: int, max_seqlen_k: int):
        import ctypes
        self._views = tuple((ctypes.c_char * (hi - lo)).from_address(lo)
                            for lo, hi in map(_byte_range, tensors))
        self._numbers = (problem.total_q, problem.num_blocks, problem.block_size, problem.causal,
                         max_seqlen_q, max_seqlen_k)
        self._passed = None             # the bytes of all three the checks last passed
        self._table_inside = None       # the table's bytes last found wholly inside the cache

    def _bytes(self) -> tuple:
        return tuple(map(_RAW, self._views))

    def __call__(self, cu_seqlens_q, seqused_k, block_table) -> None:
        now = self._bytes()
        if now == self._passed:
            return
        self._passed = None
        total_q, num_blocks, block_size, causal, max_q, max_k = self._numbers
        if now[2] != self._table_inside:
            self._table_inside = now[2] if block_table.numel() and _table_plainly_valid(
                block_table, num_blocks) else None
        if self._table_inside is None or _lengths_plainly_valid(
                cu_seqlens_q, seqused_k, block_table, total_q, block_size, causal, max_q,
                max_k) is None:
            _check_contents(cu_seqlens_q, seqused_k, block_table, total_q, num_blocks,
                            block_size, causal, max_q, max_k)   # decides, names what is wrong
        if self._bytes() == now:        # what was checked is what was read
            self._passed = now
        else:
            self._table_inside = None


_RAW = operator.attrgetter("raw")


ARG_NAMES = ("q", "k", "v", "out", "cu_seqlens_q", "max_seqlen_q", "seqused_k", "max_seqlen_k",
             "softmax_scale", "causal", "window_size", "block_table", "softcap", "q_descale",
             "k_descale", "v_descale", "alibi_slopes", "qq_bias", "sinks")
ARG_INDEX = {name: i for i, name in enumerate(ARG_NAMES)}


def run_unified_attention_torch(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
                                softmax_scale, causal, window_size, block_table, softcap,
                                q_descale, k_descale, v_descale, alibi_slopes=None, qq_bias=None,
                                sinks=None, *, backend: str = "auto", segm_workspaces=None,
                                num_segments: int | None = None, output_scale=None,
                                use_alibi_sqrt: bool = False, kv_quant_mode=None,
                                k_scale_cache=None, v_scale_cache=None, mm_prefix_range=None,
                                batch_invariant: bool | None = None,
                                compile_only: bool = False) -> RunRecord | None:
    """vLLM's ``unified_attention`` on rocke's kernels; ``out`` is written in place.

    The device follows the tensors (``launch_device_kind``): CPU tensors run on the emulator,
    a ROCm torch GPU's through HIP on torch's current stream. On a GPU nothing is read back to
    the host: only metadata (dtypes, shapes, strides, devices) is checked, so the call can be
    captured in a graph.

    ``backend``: "auto" (the dispatcher), "2d" or "3d" (forced, for A/B tables).
    ``segm_workspaces=(output, max, expsum)`` and ``num_segments``: the caller's 3D workspaces
    and segment count (vLLM's ``softmax_segm_*`` and ``num_par_softmax_segments``), used as
    given, so a captured decode step allocates nothing. ``output_scale`` (fp8 ``out``),
    ``use_alibi_sqrt`` and ``kv_quant_mode`` ("none", "fp8_per_tensor", "int8_per_token_head",
    "fp8_per_token_head") with ``k_scale_cache`` / ``v_scale_cache``: vLLM's, ALGORITHM.md §13.
    ``mm_prefix_range``: vLLM's bidirectional multimodal ranges, int32
    ``[num_seqs, max_ranges, 2]`` (ALGORITHM.md §12.8). ``batch_invariant``: a sequence's output
    bits independent of the batch (ALGORITHM.md §10.4); None reads ``ROCKE_BATCH_INVARIANT``.
    ``compile_only``: every check, the plan and every kernel build of the call (into the compile
    cache, ``ROCKE_CACHE_DIR``), no launch and no write to ``out``: a machine with LLVM's tools
    prepares the kernels for one without (the emulator on a CUDA GPU); the record's ``kernels``
    name them.
    Returns what was launched (vLLM ignores the return value), or None for an empty batch."""
    # A call seen before (same key: _call_key) runs its cached entry: no validation, planning
    # or packing; on the emulator, its content checks run unless its metadata bytes are those
    # they last passed. Feature tensors' values are checked on every call (no key). vLLM's
    # adapter passes kv_quant_mode "none", which the validation reads exactly as None.
    key = entry = None
    if not compile_only and alibi_slopes is None and qq_bias is None and sinks is None and \
            mm_prefix_range is None and output_scale is None and use_alibi_sqrt is False and \
            (kv_quant_mode is None or kv_quant_mode.__class__ is str and kv_quant_mode == "none") \
            and k_scale_cache is None and v_scale_cache is None:
        key = _call_key((q, k, v, out, cu_seqlens_q, seqused_k, block_table),
                        (max_seqlen_q, max_seqlen_k, softmax_scale, causal, softcap, window_size),
                        _NO_DESCALES if q_descale is None and k_descale is None and
                        v_descale is None else (q_descale, k_descale, v_descale),
                        segm_workspaces, backend,
                        num_segments, batch_invariant)
        if key is not None:     # by the addresses (a hash of a few ints), then the rest
            for rest, cached in _BY_ADDRESSES.get(key[0], ()):
                if rest == key[1]:
                    entry = cached
                    break
    if entry is not None:
        if entry.check_contents is not None:
            entry.check_contents(cu_seqlens_q, seqused_k, block_table)
        record = entry.run()
        if entry.check_after:
            _check_device_now(entry.device)
        return record
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if segm_workspaces is not None and num_segments is None:
        raise ValueError("num_segments: the caller's segm_workspaces need their segment count")
    knobs = knobs_mod.current_knobs()
    args = (q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
            causal, window_size, block_table, softcap, q_descale, k_descale, v_descale,
            alibi_slopes, qq_bias, sinks)
    if key is not None and not _cacheable(
            (q, k, v, out, cu_seqlens_q, seqused_k, block_table) + (
                () if segm_workspaces is None else tuple(segm_workspaces)),
            (max_seqlen_q, max_seqlen_k, softmax_scale, causal, softcap, window_size)):
        key = None
    invariant = resolve_batch_invariant(batch_invariant)
    quant = dict(output_scale=output_scale, use_alibi_sqrt=use_alibi_sqrt,
                 kv_quant_mode=kv_quant_mode, k_scale_cache=k_scale_cache,
                 v_scale_cache=v_scale_cache)
    target_name = launch_target(q)
    problem = describe_problem(*args, target=target_name, **quant)
    mm_ranges = check_mm_prefix_range(mm_prefix_range, q, problem.num_seqs, problem.causal)
    if mm_ranges or invariant:
        problem = dataclasses.replace(problem, mm_ranges=mm_ranges, batch_invariant=invariant)
    if problem.total_q == 0:
        return None
    device_kind = launch_device_kind(q)
    target = attention_target(target_name)
    the_plan, kernels = spill_checked(target, target.plan(problem, backend, knobs,
                                                          num_segments=num_segments))
    if compile_only:
        return RunRecord(the_plan, [], kernels=tuple(k.name for k in kernels))
    descales = ((_descale_tensor("k_descale", k_descale), _descale_tensor("v_descale", v_descale))
                if problem.kv_dtype is not None and not problem.kv_token_scales else ())
    features = dict(softcap=problem.softcap, alibi_slopes=alibi_slopes, qq_bias=qq_bias,
                    window_left=problem.window_left, sinks=sinks)
    if problem.kv_token_scales:
        features.update(k_scale_cache=k_scale_cache, v_scale_cache=v_scale_cache)
    if problem.out_dtype is not None:
        features["output_scale"] = output_scale
    if mm_prefix_range is not None:
        features["mm_prefix_range"] = mm_prefix_range
    launches, workspace = target.launches(the_plan, kernels, q, k, v, out, cu_seqlens_q, seqused_k,
                                          block_table, float(softmax_scale), descales, features,
                                          workspaces=segm_workspaces)
    launches = _guard_launches(device_kind, problem, args) + list(launches)
    if key is None:
        record = _run_launches(device_kind, the_plan, launches, workspace)
    else:       # the cached call runs the first call too: its graph is captured once, under its key
        # (an own 3D workspace becomes the cached call's, and its graph's)
        record = _remember(key, device_kind, the_plan, launches, workspace, problem, target,
                           knobs, args).run()
    if _check_after(q):
        from rocke.runtime import get_device
        _check_device_now(get_device(device_kind))
    return record


def _remember(key, device_kind, the_plan, launches, workspace, problem, target, knobs,
              args) -> _CallPlan:
    import dataclasses
    from rocke.runtime import Graph, get_device, prepare_launch
    device = get_device(device_kind)
    prepared = tuple(prepare_launch(c, g, b, a, device_kind=device.kind)
                     for c, g, b, a in launches)
    if device.kind != "emu":
        # a GPU launch is its kernarg bytes: holding the caller's tensors would keep torch's
        # allocator from handing the next step the same addresses (the key's hit)
        prepared = tuple(dataclasses.replace(p, args=tuple(None if hasattr(a, "data_ptr") else a
                                                           for a in p.args)) for p in prepared)
    check = None
    if args[0].device.type == "cpu":
        check = _HostContents([args[ARG_INDEX[n]] for n in ("cu_seqlens_q", "seqused_k",
                                                            "block_table")], problem,
                              args[ARG_INDEX["max_seqlen_q"]], args[ARG_INDEX["max_seqlen_k"]])
    elif device.kind == "emu":      # GPU tensors emulated: checked on the host from a copy

        def check(cu_seqlens_q, seqused_k, block_table):
            _check_contents(cu_seqlens_q.cpu(), seqused_k.cpu(), block_table.cpu(),
                            problem.total_q, problem.num_blocks, problem.block_size,
                            problem.causal, args[ARG_INDEX["max_seqlen_q"]],
                            args[ARG_INDEX["max_seqlen_k"]])

    def capture():
        graph = Graph(device=device)
        with graph.capture():
            for p in prepared:
                device.execute(p)
        graph.keep_alive = (prepared, workspace)     # an own workspace outlives the graph
        return graph
    would_replay = target.recommend_graph_replay(problem, knobs, path=the_plan.path,
                                                 capturing=False)
    # the cached call's graph by a serial number: hashing the launches' identity per call
    # would cost more than the replay (the call key already names everything they read)
    entry = _CallPlan(the_plan, device, prepared, workspace, would_replay,
                      ("call", next(_CALL_SERIAL)), capture, check, _check_after(args[0]))
    with _CALLS_LOCK:
        try:
            _CALLS[key] = entry
        except TypeError:           # an unhashable argument (a list): validated on every call
            return entry
        _BY_ADDRESSES[key[0]] = tuple(item for item in _BY_ADDRESSES.get(key[0], ())
                                      if item[0] != key[1]) + ((key[1], entry),)
        while len(_CALLS) > CALL_CACHE_SIZE:
            (addresses, rest), _ = _CALLS.popitem(last=False)
            kept = tuple(item for item in _BY_ADDRESSES[addresses] if item[0] != rest)
            if kept:
                _BY_ADDRESSES[addresses] = kept
            else:
                del _BY_ADDRESSES[addresses]
    return entry
