"""vLLM's current `unified_attention` contract on rocke's kernels: swapping the import is the whole
integration.

    from rocke.vllm import unified_attention          # instead of vLLM's
    unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
                      softmax_scale, causal, window_size, block_table, softcap, q_descale,
                      k_descale, v_descale, seq_threshold_3D, num_par_softmax_segments,
                      softmax_segm_output, softmax_segm_max, softmax_segm_expsum, ...)

The parameter list, names, order and defaults are those of `unified_attention` in vLLM 0.33's
vllm/v1/attention/ops/triton_unified_attention.py (35 parameters; the snapshot is
tests/fixtures/vllm_contract_0.33.json, and `python tools/vllm_contract.py PATH --check` says
what a newer vLLM changed), with vLLM 0.33's 3D rule (`uses_3d`): the
split-KV path runs only when the caller passes `seq_threshold_3D`, `num_par_softmax_segments` and
the three softmax workspaces; `max_seqlen_q` is 1, or at most `MAX_3D_QUERY_LEN` (8: speculative
decoding's verify step) with a plain causal bool and no `mm_prefix_range`; the batch's q blocks
as vLLM counts them, `num_seqs * ceil(max_seqlen_q / BLOCK_Q)`, are at most `seq_threshold_3D`;
and `softmax_segm_max` has a row per query token (q's rows). It then uses the caller's workspaces
and segment count as given. Otherwise the 2D kernel runs (too few workspace rows fall back to 2D,
as in vLLM); with vLLM's `VLLM_BATCH_INVARIANT=1` (or `ROCKE_BATCH_INVARIANT=1`) 3D never runs,
as in vLLM. Arguments rocke's kernels do not implement yet are refused before anything is
launched, naming the argument; `out` is then untouched. vLLM 0.33's Triton backend passes R-SWA
(`rswa_prefix_lens`, `rswa_window`), chunked attention (`chunk_lookback`), `use_td` and
`mm_prefix_clamp_sliding_window` on every call: R-SWA (ALGORITHM.md §12.10), chunked attention
(§12.9) and the clamp (Gemma 4's ranges clamped by the sliding window, §12.8) run; `use_td`, an
XPU hint, is accepted and ignored.

`torch.ops.rocke.unified_attention` is the same call as a torch custom op (it mutates `out`, has a
fake implementation; it takes `kv_quant_mode` by member name, a str, and `causal` as a bool), so
`torch.compile(fullgraph=True)` traces a model that calls it without a graph break. rocke's own,
richer entry point (dispatcher, `backend=`, graph replay) stays
`rocke.kernels.common.attention_unified.run_unified_attention_torch`.
"""
import enum
import inspect
from typing import Optional

import torch
from torch import Tensor      # at module scope: torch.library reads the op's annotations

from . import env
from .kernels.common import attention_unified as au
from .kernels.common.attention_calls import call_key, keyed_descales, lookup


class KVQuantMode(enum.IntEnum):
    """vLLM 0.33's `KVQuantMode` (vllm/v1/kv_cache_interface.py): its member names and values,
    `CUSTOM` an alias of 12 as there. vLLM's own enum is accepted too: rocke reads a mode by its
    member name (a plain int by this numbering), since vLLM's numbering has changed between
    releases. rocke's kernels implement `SUPPORTED_KV_QUANT_MODES`; any other mode is refused by
    its name before anything is launched."""
    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2
    FP8_PER_TOKEN_HEAD = 3
    INT4_PER_TOKEN_HEAD = 4
    NVFP4 = 5
    TURBOQUANT_K8V4 = 6
    TURBOQUANT_4BIT_NC = 7
    TURBOQUANT_K3V4_NC = 8
    TURBOQUANT_3BIT_NC = 9
    NVFP4_DS_MLA = 10
    ULTRAQUANT_4BIT = 11
    OCTAVE_K3V4 = 12
    OCTAVE_K3V3 = 13
    OCTAVE_K3V3_COMPACT = 14
    CUSTOM = 12         # an alias: KVQuantMode.CUSTOM is KVQuantMode.OCTAVE_K3V4, as in vLLM


# What rocke's kernels read: a cache in q's dtype, gfx942 fp8 with per-tensor descales, and int8
# or fp8 caches with per-token-head scale caches (ALGORITHM.md §13.2).
SUPPORTED_KV_QUANT_MODES = ("NONE", "FP8_PER_TENSOR", "INT8_PER_TOKEN_HEAD", "FP8_PER_TOKEN_HEAD",
                            "INT4_PER_TOKEN_HEAD")
PER_TOKEN_HEAD_MODES = ("INT8_PER_TOKEN_HEAD", "FP8_PER_TOKEN_HEAD", "INT4_PER_TOKEN_HEAD")


# _mode_name's answers by (class, member): a mode is an enum member or an int (immutable), so a
# call passing the same one again skips the look-up (vLLM passes the same member every step)
_MODE_NAMES: dict = {}


def _mode_name(kv_quant_mode) -> str:
    try:
        return _MODE_NAMES[kv_quant_mode.__class__, kv_quant_mode]
    except (KeyError, TypeError):       # not seen yet, or unhashable (refused below)
        pass
    name = _looked_up_mode_name(kv_quant_mode)
    if isinstance(kv_quant_mode, enum.Enum) or type(kv_quant_mode) is int:
        _MODE_NAMES[kv_quant_mode.__class__, kv_quant_mode] = name
    if name == "NONE" and isinstance(kv_quant_mode, enum.Enum):
        _NONE_MODES[id(kv_quant_mode)] = kv_quant_mode      # vLLM's own member, once seen
    return name


# the KVQuantMode members (rocke's, vLLM's once seen) meaning no quantisation, by id: a cached
# call's check of its mode is one look-up (the member itself is held: its id is never reused)
_NONE_MODES = {id(KVQuantMode.NONE): KVQuantMode.NONE}
# what the adapter's call keys say they are (never equal to the entry point's own keys)
_KEY_TAG = "rocke.vllm"


def _looked_up_mode_name(kv_quant_mode) -> str:
    name = getattr(kv_quant_mode, "name", None)
    if isinstance(name, str) and isinstance(kv_quant_mode, enum.Enum):
        return name         # a name rocke does not implement is refused by _refuse_unimplemented
    if isinstance(kv_quant_mode, int) and not isinstance(kv_quant_mode, bool):
        try:
            return KVQuantMode(kv_quant_mode).name
        except ValueError:
            pass
    raise ValueError(f"kv_quant_mode: must be a KVQuantMode (rocke.vllm's or vLLM's), got "
                     f"{kv_quant_mode!r}")


def unimplemented_mode(name: str) -> NotImplementedError:
    """The refusal of the `KVQuantMode` member named ``name``, by vLLM's member name."""
    known = "" if name in KVQuantMode.__members__ else " (nor is it one of vLLM 0.33's modes)"
    return NotImplementedError(
        f"kv_quant_mode: KVQuantMode.{name} is not implemented by rocke yet{known}: rocke's "
        f"kernels read {', '.join(SUPPORTED_KV_QUANT_MODES)}")


def _refuse_unimplemented(output_scale, use_alibi_sqrt, kv_quant_mode,
                          k_scale_cache, v_scale_cache, k) -> str:
    """NotImplementedError naming the first argument rocke's kernels do not implement yet;
    returns the mode's member name."""
    if not isinstance(use_alibi_sqrt, bool):
        raise ValueError(f"use_alibi_sqrt: must be a bool, got {use_alibi_sqrt!r}")
    mode = _mode_name(kv_quant_mode)
    if mode not in SUPPORTED_KV_QUANT_MODES:
        raise unimplemented_mode(mode)
    if mode not in PER_TOKEN_HEAD_MODES:
        for name, t in (("k_scale_cache", k_scale_cache), ("v_scale_cache", v_scale_cache)):
            if t is not None:
                raise ValueError(f"{name}: scale caches belong to the per-token-head modes "
                                 f"({' and '.join(PER_TOKEN_HEAD_MODES)}); kv_quant_mode is {mode}")
    if mode == "FP8_PER_TENSOR" and "float8" not in str(getattr(k, "dtype", "")):
        raise ValueError(f"kv_quant_mode: FP8_PER_TENSOR needs fp8 caches "
                         f"(torch.float8_e4m3fnuz), but k is {getattr(k, 'dtype', type(k))}")
    return mode


# the entry point's name of each mode vLLM's adapter passes on
_ENTRY_MODES = {name: name.lower() for name in SUPPORTED_KV_QUANT_MODES}
_NO_QUANT: dict = {}


def _described(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)} on {value.device}"
    return repr(value)


def _check_feature_parameters(chunk_lookback, use_td, mm_prefix_clamp_sliding_window) -> None:
    """The types of the vLLM 0.33 feature parameters the entry point does not check itself:
    ``use_td`` a bool (ignored), ``chunk_lookback`` an int, the clamp a bool. R-SWA's two are
    the entry point's (``rswa_prefix_lens``, ``rswa_window``)."""
    if chunk_lookback.__class__ is int and mm_prefix_clamp_sliding_window.__class__ is bool \
            and use_td.__class__ is bool:
        return      # the common case
    if not isinstance(use_td, bool):
        raise ValueError(f"use_td: must be a bool (vLLM's tensor-descriptor hint, ignored by "
                         f"rocke), got {use_td!r}")
    if isinstance(chunk_lookback, bool) or not isinstance(chunk_lookback, int):
        raise ValueError(f"chunk_lookback: must be an int (-1: off), got {chunk_lookback!r}")
    if not isinstance(mm_prefix_clamp_sliding_window, bool):
        raise ValueError(f"mm_prefix_clamp_sliding_window: must be a bool, got "
                         f"{mm_prefix_clamp_sliding_window!r}")


def _host_causal(causal, num_seqs: int):
    """``causal`` as rocke's kernels read it: a bool passes as it is; vLLM 0.33's per-sequence
    causal tensor on the host with every entry nonzero is causal=True, every entry 0
    causal=False (non-causal prefill, ALGORITHM.md §12.11), so the batch runs the plain kernel;
    a tensor mixing the two, or one on a GPU (never read on the host: that would synchronise),
    passes on as it is and the kernel reads each sequence's flag (§12.12)."""
    if not isinstance(causal, torch.Tensor) or causal.device.type != "cpu" or \
            causal.dim() != 1 or causal.shape[0] != num_seqs or causal.is_floating_point() \
            or causal.is_complex():
        return causal           # a bool, flags the kernel reads, or refused by the entry point
    if causal.numel() and bool((causal == 0).all()):
        return False
    if bool((causal != 0).all()):       # vLLM reads a nonzero flag as causal
        return True
    return causal


def _check_3d_numbers(seq_threshold_3D, num_par_softmax_segments) -> None:
    """``seq_threshold_3D`` a non-negative int (0: the 2D kernel always, as vLLM's own tests
    pass it, with 0-row workspaces), ``num_par_softmax_segments`` a positive int; either None."""
    if (seq_threshold_3D is None or seq_threshold_3D.__class__ is int and seq_threshold_3D >= 0) \
            and (num_par_softmax_segments is None or num_par_softmax_segments.__class__ is int
                 and num_par_softmax_segments >= 1):
        return      # the common case, decided without the loop below
    for name, value, least, what in (
            ("seq_threshold_3D", seq_threshold_3D, 0, "a non-negative int"),
            ("num_par_softmax_segments", num_par_softmax_segments, 1, "a positive int")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < least):
            raise ValueError(f"{name}: must be None or {what}, got {value!r}")


# vLLM 0.33's longest query (1 + speculative tokens) its split-KV path takes
# (vllm/v1/attention/ops/triton_unified_attention.py, MAX_3D_QUERY_LEN)
MAX_3D_QUERY_LEN = 8


def query_block(num_queries_per_kv: int) -> int:
    """vLLM's BLOCK_Q, the query tokens of one q block: 16 query rows (the next power of two of
    a larger GQA group) over the group's heads."""
    rows = 16 if num_queries_per_kv <= 16 else 1 << (num_queries_per_kv - 1).bit_length()
    return rows // num_queries_per_kv


def uses_3d(max_seqlen_q, num_seqs: int, seq_threshold_3D, num_par_softmax_segments,
            softmax_segm_output, softmax_segm_max, softmax_segm_expsum,
            batch_invariant: bool = False, *, num_tokens: int, num_queries_per_kv: int,
            causal: bool = True, per_seq_causal: bool = False,
            mm_prefix: bool = False, int4: bool = False) -> bool:
    """vLLM 0.33's rule for the split-KV (3D) path: every 3D argument given; a batch whose
    longest query is one token, or at most MAX_3D_QUERY_LEN (speculative decoding's verify
    step) with plain causal masking (a bool, not vLLM's per-sequence tensor), no
    `mm_prefix_range` and no INT4 cache (``int4``: vLLM's INT4 launcher runs only one-token
    queries on 3D); no more q blocks than the threshold, counted as vLLM does (`num_seqs *
    ceil(max_seqlen_q / BLOCK_Q)`); not in batch-invariant mode; and `softmax_segm_max` with at
    least one row per query token (`num_tokens`, q's rows), else 2D. vLLM's large-head tuning
    that also sends a batch to 2D applies to compute capability 10.x only, never on ROCm."""
    if seq_threshold_3D is None or num_par_softmax_segments is None \
            or softmax_segm_output is None or softmax_segm_max is None \
            or softmax_segm_expsum is None or batch_invariant:
        return False
    if max_seqlen_q > 1 and (max_seqlen_q > MAX_3D_QUERY_LEN or not causal or per_seq_causal
                             or mm_prefix or int4):
        return False
    block_q = query_block(num_queries_per_kv)
    if num_seqs * -(-max_seqlen_q // block_q) > seq_threshold_3D:
        return False
    rows = getattr(softmax_segm_max, "shape", None)     # not a tensor: refused on the 3D path
    return not (rows is not None and len(rows) and rows[0] < num_tokens)


# the two levers' raw values (and the environment's size) -> the mode they parse to
_invariant_levers = env.state_reader(("ROCKE_BATCH_INVARIANT", env.VLLM_BATCH_INVARIANT))
_invariant_by_raw: dict = {}


def batch_invariant() -> bool:
    """Batch-invariant mode: ``ROCKE_BATCH_INVARIANT=1`` or vLLM's ``VLLM_BATCH_INVARIANT=1``.
    Parsed once per pair of raw values (read per call: a change is seen at once)."""
    raw = _invariant_levers()
    mode = _invariant_by_raw.get(raw)
    if mode is None:
        mode = env.batch_invariant() or env.vllm_batch_invariant()    # raises on a bad value
        if _invariant_levers() == raw:                  # what was parsed is what was read
            if len(_invariant_by_raw) >= 16:
                _invariant_by_raw.clear()
            _invariant_by_raw[raw] = mode
    return mode


def unified_attention(
        q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
        causal, window_size, block_table, softcap, q_descale, k_descale, v_descale,
        seq_threshold_3D=None, num_par_softmax_segments=None, softmax_segm_output=None,
        softmax_segm_max=None, softmax_segm_expsum=None, alibi_slopes=None, output_scale=None,
        qq_bias=None, sinks=None, mm_prefix_range=None, rswa_prefix_lens=None,
        rswa_window=None, use_alibi_sqrt=False, kv_quant_mode=KVQuantMode.NONE,
        k_scale_cache=None, v_scale_cache=None, chunk_lookback=-1, use_td=False,
        mm_prefix_clamp_sliding_window=False):
    """vLLM 0.33's `unified_attention` on rocke's gfx942 kernels; `out` is written in place.

    Every argument is checked before any launch; what rocke does not implement yet is refused
    naming the argument and the value: `kv_quant_mode`s other than `SUPPORTED_KV_QUANT_MODES`
    (by vLLM's member name); R-SWA with chunked attention or clamped mm ranges. R-SWA
    (`rswa_prefix_lens` with `rswa_window`), chunked attention (`chunk_lookback`) and
    `mm_prefix_clamp_sliding_window` run. `use_td` (vLLM's Intel XPU
    tensor-descriptor hint, a performance choice) is accepted and ignored. `causal` is a bool, or
    vLLM's per-sequence tensor (int32, bool, int8 or uint8 flags, nonzero = causal), on the host
    or the GPU, sequences of both kinds in one batch (ALGORITHM.md §12.12). `causal=False`
    runs: non-causal prefill, its window symmetric (ALGORITHM.md §12.11).
    `output_scale` (fp8 `out`), `use_alibi_sqrt`, the per-token-head modes with their scale
    caches (ALGORITHM.md §13) and `mm_prefix_range` (§12.8) run; in the per-token-head modes
    `k_descale`/`v_descale` are not read, as in vLLM's kernel. An fp8 `q` with its per-tensor
    `q_descale` (what vLLM passes with an FP8_PER_TENSOR cache on gfx942) runs, `out` fp16/bf16
    (ALGORITHM.md §11.1)."""
    # A call like one made before (same tensors' addresses and layouts, numbers, levers: its
    # key) runs that call's cached entry: no check here or in the entry point runs twice. Only
    # calls with every feature off are keyed (the key holds all this call's tensors and numbers).
    key = None
    if rswa_prefix_lens is None and rswa_window is None and chunk_lookback.__class__ is int \
            and mm_prefix_clamp_sliding_window is False \
            and use_td.__class__ is bool and causal.__class__ is bool and output_scale is None \
            and use_alibi_sqrt is False and k_scale_cache is None and v_scale_cache is None \
            and mm_prefix_range is None and alibi_slopes is None and qq_bias is None \
            and sinks is None and (_NONE_MODES.get(id(kv_quant_mode)) is kv_quant_mode or
                 _mode_name(kv_quant_mode) == "NONE"):      # a NONE member is known once read
        workspaces = None if softmax_segm_output is None and softmax_segm_max is None and \
            softmax_segm_expsum is None else (softmax_segm_output, softmax_segm_max,
                                              softmax_segm_expsum)
        descales = keyed_descales(q_descale, k_descale, v_descale)   # vLLM passes k's and v's
        key = None if descales is None else call_key(      # (key, the tensors it holds)
            (q, k, v, out, cu_seqlens_q, seqused_k, block_table, *descales),
            (max_seqlen_q, max_seqlen_k, softmax_scale, causal, softcap, seq_threshold_3D,
             num_par_softmax_segments, use_td, chunk_lookback, q_descale is None,
             k_descale is None, v_descale is None, _KEY_TAG), window_size, workspaces)
        entry = None if key is None else lookup(key[0])
        if entry is not None:
            entry.hit(cu_seqlens_q, seqused_k, block_table,
                      (q, k, v, out, cu_seqlens_q, seqused_k, block_table, softmax_scale,
                       k_descale, v_descale, workspaces if entry.plan.path == "3d" else None,
                       q_descale))
            return
    _check_feature_parameters(chunk_lookback, use_td, mm_prefix_clamp_sliding_window)
    mode = _refuse_unimplemented(output_scale, use_alibi_sqrt, kv_quant_mode,
                                 k_scale_cache, v_scale_cache, k)
    if mode in PER_TOKEN_HEAD_MODES:
        k_descale = v_descale = None        # vLLM's kernel reads the scale caches only
    _check_3d_numbers(seq_threshold_3D, num_par_softmax_segments)
    # the quantisation arguments passed on; none at all when none is in use (the entry point
    # reads kv_quant_mode None as "none"): fewer keywords to bind per call
    quant = _NO_QUANT if mode == "NONE" and output_scale is None and use_alibi_sqrt is False \
        and k_scale_cache is None and v_scale_cache is None and mm_prefix_range is None else dict(
            output_scale=output_scale, use_alibi_sqrt=use_alibi_sqrt,
            kv_quant_mode=_ENTRY_MODES[mode], k_scale_cache=k_scale_cache,
            v_scale_cache=v_scale_cache, mm_prefix_range=mm_prefix_range,
            mm_prefix_clamp_sliding_window=mm_prefix_clamp_sliding_window)
    if chunk_lookback != -1 or rswa_prefix_lens is not None or rswa_window is not None:
        quant = dict(quant, chunk_lookback=chunk_lookback, rswa_prefix_lens=rswa_prefix_lens,
                     rswa_window=rswa_window)
    shape = seqused_k.shape if isinstance(seqused_k, torch.Tensor) else ()
    num_seqs = shape[0] if len(shape) == 1 else 0     # describe_problem names what is wrong
    per_seq_causal = False
    if causal.__class__ is not bool:
        per_seq_causal = isinstance(causal, torch.Tensor)   # vLLM's rule reads the tensor as such
        causal = _host_causal(causal, num_seqs)
    if not isinstance(max_seqlen_q, int) or isinstance(max_seqlen_q, bool):
        raise ValueError(f"max_seqlen_q: must be an int, got {max_seqlen_q!r}")
    invariant = batch_invariant()
    # q's rows and GQA group as vLLM reads them; tensors not as they should be take 2D, whose
    # validation names what is wrong
    q_shape = getattr(q, "shape", ())
    k_shape = getattr(k, "shape", ())
    group = q_shape[1] // k_shape[2] if len(q_shape) == 3 and len(k_shape) == 4 and \
        k_shape[2] > 0 else 0
    if not group or not uses_3d(max_seqlen_q, num_seqs, seq_threshold_3D,
                                num_par_softmax_segments, softmax_segm_output, softmax_segm_max,
                                softmax_segm_expsum, invariant, num_tokens=q_shape[0],
                                num_queries_per_kv=group,
                                causal=causal if causal.__class__ is bool else True,
                                per_seq_causal=per_seq_causal,
                                mm_prefix=mm_prefix_range is not None,
                                int4=mode == "INT4_PER_TOKEN_HEAD"):
        au.run_unified_attention_torch(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k,
                                       max_seqlen_k, softmax_scale, causal, window_size,
                                       block_table, softcap, q_descale, k_descale, v_descale,
                                       alibi_slopes, qq_bias, sinks, backend="2d", **quant,
                                       batch_invariant=invariant, cache_key=key)
        return
    # vLLM's 3D contract: the caller's segment count and workspaces, as given (graph replay
    # keys them as the caller's tensors, so a captured decode step allocates nothing)
    au.run_unified_attention_torch(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k,
                                   max_seqlen_k, softmax_scale, causal, window_size, block_table,
                                   softcap, q_descale, k_descale, v_descale, alibi_slopes,
                                   qq_bias, sinks, backend="3d",
                                   segm_workspaces=(softmax_segm_output, softmax_segm_max,
                                                    softmax_segm_expsum),
                                   num_segments=num_par_softmax_segments, **quant,
                                   batch_invariant=invariant, cache_key=key)


# ---- torch.ops.rocke.unified_attention ---------------------------------------------------------

def _op_mode(kv_quant_mode: str) -> KVQuantMode:
    """The op's `kv_quant_mode`, a member name of vLLM's `KVQuantMode`, as rocke's member; a mode
    rocke does not implement is refused by the name given."""
    if kv_quant_mode not in SUPPORTED_KV_QUANT_MODES:
        if not isinstance(kv_quant_mode, str):
            raise ValueError(f"kv_quant_mode: the op takes a KVQuantMode member name (a str, "
                             f"e.g. \"NONE\"), got {kv_quant_mode!r}")
        raise unimplemented_mode(kv_quant_mode)
    return KVQuantMode[kv_quant_mode]


def _register_torch_op():
    # vLLM 0.33's parameter list, typed for torch's schema: `causal` is a bool (a schema has no
    # bool-or-tensor; vLLM's per-sequence tensor goes through `unified_attention`) and
    # `kv_quant_mode` a KVQuantMode member name, never a number (numbers differ between vLLM
    # releases: 6 is TURBOQUANT_K8V4 in vLLM 0.33)
    def call(q: Tensor, k: Tensor, v: Tensor, out: Tensor, cu_seqlens_q: Tensor,
             max_seqlen_q: int, seqused_k: Tensor, max_seqlen_k: int, softmax_scale: float,
             causal: bool, window_size: list[int], block_table: Tensor, softcap: float,
             q_descale: Optional[Tensor], k_descale: Optional[Tensor],
             v_descale: Optional[Tensor], seq_threshold_3D: Optional[int] = None,
             num_par_softmax_segments: Optional[int] = None,
             softmax_segm_output: Optional[Tensor] = None,
             softmax_segm_max: Optional[Tensor] = None,
             softmax_segm_expsum: Optional[Tensor] = None,
             alibi_slopes: Optional[Tensor] = None, output_scale: Optional[Tensor] = None,
             qq_bias: Optional[Tensor] = None, sinks: Optional[Tensor] = None,
             mm_prefix_range: Optional[Tensor] = None,
             rswa_prefix_lens: Optional[Tensor] = None, rswa_window: Optional[int] = None,
             use_alibi_sqrt: bool = False, kv_quant_mode: str = "NONE",
             k_scale_cache: Optional[Tensor] = None, v_scale_cache: Optional[Tensor] = None,
             chunk_lookback: int = -1, use_td: bool = False,
             mm_prefix_clamp_sliding_window: bool = False) -> None:
        unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
                          softmax_scale, causal, tuple(window_size), block_table, softcap,
                          q_descale, k_descale, v_descale, seq_threshold_3D,
                          num_par_softmax_segments, softmax_segm_output, softmax_segm_max,
                          softmax_segm_expsum, alibi_slopes, output_scale, qq_bias, sinks,
                          mm_prefix_range, rswa_prefix_lens, rswa_window, use_alibi_sqrt,
                          _op_mode(kv_quant_mode), k_scale_cache, v_scale_cache,
                          chunk_lookback, use_td, mm_prefix_clamp_sliding_window)

    op = torch.library.custom_op("rocke::unified_attention", mutates_args=("out",))(call)
    signature = inspect.signature(call)

    @op.register_fake
    def _(*args, **kwargs) -> None:      # writes `out` in place, returns nothing
        # what the real op refuses without reading a tensor is refused while tracing too
        given = signature.bind(*args, **kwargs)
        given.apply_defaults()
        a = given.arguments
        _check_feature_parameters(a["chunk_lookback"], a["use_td"],
                                  a["mm_prefix_clamp_sliding_window"])
        _op_mode(a["kv_quant_mode"])
        return None

    return op


unified_attention_op = _register_torch_op()

__all__ = ["unified_attention", "KVQuantMode", "SUPPORTED_KV_QUANT_MODES", "uses_3d",
           "MAX_3D_QUERY_LEN", "batch_invariant", "unified_attention_op"]
