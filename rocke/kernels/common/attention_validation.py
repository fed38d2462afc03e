"""Every input of a unified-attention call validated once, on the host, before anything is built
or launched (``describe_problem``, parse, don't validate): metadata always, the metadata's
contents only for host tensors (a GPU call reads nothing back, so it can be captured)."""
from __future__ import annotations

import math

from rocke.kernels.common.attention_device import launch_device_kind
from rocke.kernels.common.attention_problem import (CAUSAL_FLAG_BYTES, DTYPES, HEAD_COLS_MULTIPLE,
                                                   KV_QUANT_MODES,
                                                   OUT_FP8_DTYPES, TOKEN_SCALE_MODES,
                                                   UnifiedAttentionProblem, attention_target,
                                                   cache_row_lengths, codes_per_element,
                                                   is_tensor)
from rocke.kernels.common.checks import check_paged_cache_strides

# vLLM's unified_attention arguments, names and order (the first 19)
ARG_NAMES = ("q", "k", "v", "out", "cu_seqlens_q", "max_seqlen_q", "seqused_k", "max_seqlen_k",
             "softmax_scale", "causal", "window_size", "block_table", "softcap", "q_descale",
             "k_descale", "v_descale", "alibi_slopes", "qq_bias", "sinks")
ARG_INDEX = {name: i for i, name in enumerate(ARG_NAMES)}

# ---- input validation ------------------------------------------------------------------------

Q_DIMS = "[total_q, num_q_heads, head_size]"
CACHE_DIMS = "[num_blocks, block_size, num_kv_heads, head_size]"

def _need_tensor(name: str, t, dims: int, dim_names: str):
    if not is_tensor(t):
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


def byte_range(t) -> tuple[int, int]:
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


def descale_tensor(name: str, t):
    """A descale as a tensor (a Python number becomes a 0-dim fp32 tensor, as vLLM's scalar)."""
    import torch
    if t is None or is_tensor(t):
        return t
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        return torch.tensor(float(t), dtype=torch.float32)
    raise ValueError(f"{name}: must be None or an fp32 tensor, got {type(t).__name__}")


def _check_descale(name: str, t, num_seqs: int, num_kv_heads: int, *, fp8: bool, device=None,
                   cache: str = "KV cache"):
    """vLLM passes k/v descales on every call (a 0-dim fp32 expanded to [num_seqs, num_kv_heads]
    with zero strides), or per KV head. An fp8 cache needs one (finite, > 0, on q's device: the
    kernel reads it); without an fp8 cache the only meaningful scale is 1."""
    t = descale_tensor(name, t)
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
            why = ("the query is fp16/bf16, there is no fp8 query to dequantize"
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

    Raises ``NotImplementedError`` for what no kernel does yet (a per-head ``q_descale``),
    ``ValueError`` for everything else; each message starts with the argument's name. ``target``'s capabilities
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

    # an fp8 query (vLLM quantises q with an fp8 cache): computed in out's 16-bit dtype, or with
    # an fp8 out (vLLM's fused output quantization) in f16: every fp8 value is an f16 value, and
    # f16 keeps three more bits of P than bf16 within fp8's range (ALGORITHM.md §11.1)
    q_fp8 = "float8" in str(q.dtype)
    compute = (torch.float16 if "float8" in str(out.dtype) else out.dtype) if q_fp8 else q.dtype
    if str(compute).removeprefix("torch.") not in DTYPES:
        raise ValueError(f"q: dtype must be torch.float16 or torch.bfloat16 (or the fp8 cache's "
                         f"encoding, with q_descale and a 16-bit or fp8 out), got {q.dtype}" + (
                             f" with out {out.dtype}" if q_fp8 else ""))
    dtype = DTYPES[str(compute).removeprefix("torch.")]
    token_scales = _token_scale_mode(kv_quant_mode, k, v, k_scale_cache, v_scale_cache, caps)
    if token_scales:
        kv_dtype = token_scales
    else:
        kv_dtype = _cache_kv_dtype("k", k, compute, caps)
        if _cache_kv_dtype("v", v, compute, caps) != kv_dtype or v.dtype != k.dtype:
            raise ValueError(f"v: dtype {v.dtype} differs from k's {k.dtype}; both caches share one "
                             "encoding")
    if q_fp8 and (kv_dtype is None or token_scales or q.dtype != k.dtype):
        raise ValueError(f"q: an fp8 query ({q.dtype}) is read with an fp8 KV cache of the same "
                         f"encoding and its per-tensor descales (vLLM's FP8_PER_TENSOR); the "
                         f"caches are {k.dtype}" + (" with per-token-head scales"
                                                    if token_scales else ""))
    out_dtype = _check_output_scale(output_scale, out, q, caps)
    if out_dtype is None and out.dtype != compute:
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
    rows = cache_row_lengths(head_size, bool(token_scales), k.element_size(),
                             codes_per_element(kv_dtype))
    if kv_head_size not in rows:
        raise ValueError(f"k: head_size {kv_head_size} differs from q's {head_size}" + (
            f" (rows of {rows[0]}: two int4 codes a byte)" if rows[0] != head_size else "") + (
            f" (with per-token-head scales stored inline after each row: {rows[1]})"
            if len(rows) > 1 else ""))
    padded_head = caps.padded_head_size(head_size)
    if padded_head is None:
        raise ValueError(f"q: head_size must be one of {caps.head_sizes}, or a multiple of "
                         f"{HEAD_COLS_MULTIPLE} below {max(caps.head_sizes)} (run padded to the "
                         f"next), got {head_size}")
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
    for name in ("q", "out"):
        _check_row_major(name, named[name], Q_DIMS)
    for name in ("k", "v"):     # the kernels take the caches' strides: NHD, or vLLM's HND view
        check_paged_cache_strides(name, named[name].shape, named[name].stride())
    for name in ("cu_seqlens_q", "seqused_k"):
        if named[name].stride(0) != 1:
            raise ValueError(f"{name}: must be contiguous, got stride {named[name].stride()}")
    if block_table.stride(1) != 1:
        raise ValueError(f"block_table: columns must have stride 1, got strides {block_table.stride()}")
    lo, hi = byte_range(out)
    for name, t in named.items():
        if name != "out" and t.numel() and out.numel():
            a, b = byte_range(t)
            if a < hi and lo < b:
                raise ValueError(f"out: overlaps {name} in memory; out must be its own buffer")

    num_seqs = seqused_k.shape[0]       # 0: an empty batch, checked like any other, runs nothing
    causal_flags = 0
    if isinstance(causal, torch.Tensor):        # vLLM 0.33's per-sequence flags (§12.12)
        causal_flags = check_causal_flags(causal, q, num_seqs)
        causal = True
    elif not isinstance(causal, bool):
        raise ValueError(f"causal: must be a bool or a per-sequence flag tensor [num_seqs], got "
                         f"{causal!r}")
    if cu_seqlens_q.shape[0] != num_seqs + 1:
        raise ValueError(f"cu_seqlens_q: must have num_seqs + 1 = {num_seqs + 1} entries "
                         f"(seqused_k has {num_seqs}), got {cu_seqlens_q.shape[0]}")
    if block_table.shape[0] != num_seqs:
        raise ValueError(f"block_table: must have num_seqs = {num_seqs} rows, got {block_table.shape[0]}")
    for name, given in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not isinstance(given, int) or isinstance(given, bool):
            raise ValueError(f"{name}: must be an int, got {given!r}")
    if host_readable:
        true_max_q = check_contents(cu_seqlens_q.cpu(), seqused_k.cpu(), block_table.cpu(),
                                     total_q, num_blocks, block_size, causal, max_seqlen_q,
                                     max_seqlen_k)
    else:
        # a GPU's metadata is not read on the host (that would synchronise and break graph
        # capture): what is derivable from the numbers the caller passed is checked here
        true_max_q = max_seqlen_q
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)) or \
            not math.isfinite(softmax_scale) or softmax_scale <= 0:
        raise ValueError(f"softmax_scale: must be a finite positive float, got {softmax_scale!r}")
    fp8 = kv_dtype is not None and not token_scales
    _check_descale("k_descale", k_descale, num_seqs, num_kv_heads, fp8=fp8, device=q.device,
                   cache="K cache")
    _check_descale("v_descale", v_descale, num_seqs, num_kv_heads, fp8=fp8, device=q.device,
                   cache="V cache")
    # q_descale dequantizes an fp8 query (ALGORITHM.md §11.1): one fp32 value, as vLLM's
    # per-tensor q scale; with a 16-bit query it may only be None or 1.
    q_descale = descale_tensor("q_descale", q_descale)
    if q_fp8:
        _check_descale("q_descale", q_descale, num_seqs, num_kv_heads, fp8=True, device=q.device,
                       cache="query")
        if q_descale.numel() != 1:
            raise NotImplementedError(
                f"q_descale: a per-head query scale (shape {list(q_descale.shape)}) is not "
                "implemented by rocke yet; pass the per-tensor scale (shape [] or [1])")
    elif q_descale is not None:
        _check_descale("q_descale", q_descale, num_seqs, num_kv_heads, fp8=False, device=q.device)

    # per-sequence flags: a causal window, or vLLM's symmetric one (its non-causal sequences')
    window_left = _check_window(window_size, causal and not (
        causal_flags and isinstance(window_size, (tuple, list)) and len(window_size) == 2
        and window_size[0] == window_size[1]))
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
        dtype=dtype, head_size=padded_head, head_cols=0 if padded_head == head_size else head_size,
        num_q_heads=num_q_heads, num_kv_heads=num_kv_heads,
        block_size=block_size, num_seqs=num_seqs, total_q=total_q,
        max_seqlen_q=max(1, max_seqlen_q), max_seqlen_k=max(1, max_seqlen_k), causal=causal,
        num_blocks=num_blocks, kv_cache_bytes=cache_bytes, softcap=softcap,
        alibi=alibi_slopes is not None, qq_bias=qq_bias is not None, window_left=window_left,
        sinks=sinks is not None, kv_dtype=kv_dtype, alibi_sqrt=use_alibi_sqrt,
        out_dtype=out_dtype, kv_token_scales=bool(token_scales), q_fp8=q_fp8,
        causal_flags=causal_flags)
    caps.check(problem)
    return problem


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
                          contents=False, unit_stride=False)
    # any order of the three dimensions (vLLM 0.33's inline scales are strided views into the
    # caches' rows); no two entries overlap (a one-element row of a paged cache)
    check_paged_cache_strides(name, (*t.shape, 1), (*t.stride(), 1))
    if t.numel() and out.numel():
        a, b = byte_range(t)
        lo, hi = byte_range(out)
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
    if not is_tensor(output_scale) or output_scale.dtype != torch.float32 or \
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


def check_contents(cu_seqlens_q, seqused_k, block_table, total_q: int, num_blocks: int,
                    block_size: int, causal: bool, max_seqlen_q: int, max_seqlen_k: int) -> int:
    """The checks that read the metadata's contents (host tensors only; numpy views, no copies);
    returns the longest query length."""
    plainly_valid = contents_plainly_valid(cu_seqlens_q, seqused_k, block_table, total_q,
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
    if num_seqs and (q_lens > lens_k).any():
        # a query's position is ctx + i with ctx = kv_len - query_len >= 0 (non-causal too: its
        # window is centred there, and vLLM's encoder layers pass query_len == kv_len)
        s = int(np.flatnonzero(q_lens > lens_k)[0])
        raise ValueError(f"seqused_k: attention needs query_len <= kv_len, but sequence {s} "
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


def contents_plainly_valid(cu_seqlens_q, seqused_k, block_table, total_q: int, num_blocks: int,
                            block_size: int, causal: bool, max_seqlen_q: int,
                            max_seqlen_k: int) -> int | None:
    """The longest query length when a small batch passes every check of ``check_contents``
    (a few us: Python ints, and the whole block table -- used entries or not -- inside the
    cache); None when it may not, and the detailed check then decides and names what is wrong.
    Never looser than the detailed check: each condition here implies the one there."""
    longest_q = lengths_plainly_valid(cu_seqlens_q, seqused_k, block_table, total_q, block_size,
                                       causal, max_seqlen_q, max_seqlen_k)
    if longest_q is None or not table_plainly_valid(block_table, num_blocks):
        return None
    return longest_q


def lengths_plainly_valid(cu_seqlens_q, seqused_k, block_table, total_q: int, block_size: int,
                           causal: bool, max_seqlen_q: int, max_seqlen_k: int) -> int | None:
    """``contents_plainly_valid`` but for the block table's contents."""
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


def table_plainly_valid(block_table, num_blocks: int) -> bool:
    """Whether every entry of a (non-empty) block table, used or not, lies inside the cache."""
    import torch
    lowest, highest = (x.item() for x in torch.aminmax(block_table))
    return 0 <= lowest and highest < num_blocks


def check_causal_flags(flags, q, num_seqs: int) -> int:
    """vLLM 0.33's per-sequence ``causal`` tensor: contiguous ``[num_seqs]`` flags on q's
    device, nonzero = causal (read by the kernel, never on the host: a GPU's stays unread, so
    the call can be captured). Returns a flag's bytes."""
    if flags.dim() != 1 or flags.shape[0] != num_seqs or \
            str(flags.dtype).removeprefix("torch.") not in CAUSAL_FLAG_BYTES:
        raise ValueError(f"causal: a per-sequence causal tensor must be [num_seqs = {num_seqs}] "
                         f"of {' / '.join(CAUSAL_FLAG_BYTES)}, got {flags.dtype} "
                         f"{list(flags.shape)}")
    if flags.device != q.device:
        raise ValueError(f"causal: on {flags.device}, but q is on {q.device}")
    if num_seqs and flags.stride(0) != 1:
        raise ValueError(f"causal: must be contiguous, got stride {flags.stride()}")
    return flags.element_size()


def _check_window(window_size, causal: bool = True) -> int:
    """vLLM's ``window_size``: ``(-1, -1)`` (or None) = no window; ``(left, 0)`` with ``left >= 0``
    = keys at most ``left`` positions before the query (vLLM passes ``(sliding_window - 1, 0)``;
    ``(left, -1)`` means the same under the causal mask). Non-causal, the window is symmetric
    (vLLM's kernel reads ``left`` for both sides; its encoder layers pass ``(sw - 1, sw - 1)``):
    ``(left, left)``. Returns ``left`` (-1 = off)."""
    if window_size is None:
        return -1
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2 or any(
            isinstance(x, bool) or not isinstance(x, int) for x in window_size):
        raise ValueError(f"window_size: must be a pair of ints (left, right) as vLLM passes it, "
                         f"got {window_size!r}")
    left, right = window_size
    if (left, right) == (-1, -1):
        return -1
    if not causal:
        if left < 0 or right != left or left >= 2 ** 31:
            raise ValueError(f"window_size: non-causal, the window is symmetric: must be (-1, -1) "
                             f"or (left, left) with 0 <= left < 2**31 (vLLM's (sliding_window - "
                             f"1, sliding_window - 1)), got {tuple(window_size)}")
        return left
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
                          allow: tuple = (), unit_stride: bool = True):
    """An fp32 feature tensor on q's device; with ``contents``, a host tensor's entries are
    finite or one of ``allow`` (e.g. -inf for sinks); ``unit_stride``: its last dimension
    has stride 1 (the caller checks the strides itself otherwise)."""
    import torch
    if not is_tensor(t):
        raise ValueError(f"{name}: must be a torch.float32 tensor {dims}, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise ValueError(f"{name}: dtype must be torch.float32, got {t.dtype}")
    if t.device != q.device:
        raise ValueError(f"{name}: on {t.device}, but q is on {q.device}; every tensor must be on "
                         "one device")
    if shape is not None and list(t.shape) != shape:
        raise ValueError(f"{name}: shape must be {dims} = {shape}, got {list(t.shape)}")
    if unit_stride and t.dim() and t.stride(-1) != 1:
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


def check_rswa(prefix_lens, window, q, num_seqs: int, chunk_lookback: int,
               mm_clamp_window: bool) -> int | None:
    """vLLM's R-SWA arguments: both None (returns None), or ``prefix_lens`` an int32
    ``[num_seqs]`` tensor on q's device (on the host: each >= 0) with ``window`` an int >= 1;
    returns the kernels' window_left, ``window - 1`` (R-SWA's window replaces the sliding
    window's, as in vLLM). With chunked attention or clamped mm ranges it is not implemented."""
    if prefix_lens is None and window is None:
        return None
    import torch
    if prefix_lens is None or window is None:
        raise ValueError("rswa_prefix_lens / rswa_window: R-SWA takes both (vLLM passes them "
                         f"together), got rswa_prefix_lens={'a tensor' if prefix_lens is not None else None}, "
                         f"rswa_window={window!r}")
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window < 2 ** 31:
        raise ValueError(f"rswa_window: must be an int in [1, 2**31), got {window!r}")
    if not is_tensor(prefix_lens) or prefix_lens.dtype != torch.int32 or \
            list(prefix_lens.shape) != [num_seqs] or prefix_lens.stride(0) != 1:
        raise ValueError(f"rswa_prefix_lens: must be a contiguous int32 tensor [num_seqs] = "
                         f"[{num_seqs}], got {getattr(prefix_lens, 'dtype', type(prefix_lens).__name__)} "
                         f"{list(getattr(prefix_lens, 'shape', []))}")
    if prefix_lens.device != q.device:
        raise ValueError(f"rswa_prefix_lens: on {prefix_lens.device}, but q is on {q.device}")
    if prefix_lens.device.type == "cpu" and num_seqs and int(prefix_lens.min()) < 0:
        raise ValueError(f"rswa_prefix_lens: prefix lengths must be >= 0, got "
                         f"{int(prefix_lens.min())}")
    if chunk_lookback >= 0 or mm_clamp_window:
        raise NotImplementedError("rswa_prefix_lens: R-SWA with chunked attention or clamped "
                                  "mm ranges is not implemented by rocke yet")
    return window - 1


def check_mm_prefix_range(t, q, num_seqs: int, causal: bool) -> int:
    """vLLM's ``mm_prefix_range``: None, or an int32 ``[num_seqs, max_ranges, 2]`` tensor of
    inclusive ``[start, end]`` key/query positions per sequence (a range with ``start >= end``
    is unused). Returns ``max_ranges`` (0 = none)."""
    if t is None:
        return 0
    import torch
    dims = "[num_seqs, max_ranges, 2]"
    if not is_tensor(t):
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
