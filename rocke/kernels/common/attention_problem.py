"""Unified paged attention, target-free: the problem a call poses (``UnifiedAttentionProblem``),
what a target's kernels run (``AttentionCapabilities``) and the target's dispatcher, found by name
(``attention_target``), so that nothing in ``kernels/common`` imports a target."""
from __future__ import annotations

import functools
import importlib
import math
from dataclasses import dataclass

from rocke.kernels.common.checks import fits_one_buffer
from rocke.kernels.common.knobs import AttentionKnobs

DTYPES = {"float16": "f16", "bfloat16": "bf16"}
# vLLM 0.33's per-sequence causal flags the kernels read: torch dtype name -> a flag's bytes
CAUSAL_FLAG_BYTES = {"bool": 1, "int8": 1, "uint8": 1, "int32": 4}
# rocke's kv_dtype of vLLM's INT4_PER_TOKEN_HEAD caches (two 4-bit codes a byte, rotated rows)
INT4_KV = "int4"
# a head size the kernels do not have runs padded to the next one when it is a multiple of this
# (the copies' 16-byte vectors of 16-bit elements stay whole: a lane is in the row or past it)
HEAD_COLS_MULTIPLE = 8
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
    q_fp8: bool = False          # q in the fp8 cache's encoding, with a per-tensor q_descale
    mm_ranges: int = 0           # vLLM's mm_prefix_range: ranges per sequence (0 = not passed)
    # vLLM's mm_prefix_clamp_sliding_window with ranges and a window (else inert: False): the
    # ranges widen the window to the right only (ALGORITHM.md §12.8)
    mm_clamp_window: bool = False
    # vLLM's chunked attention (ALGORITHM.md §12.9): -1 off, else the chunks before a query's own
    # it sees; chunk_size = (window_left + 1) // (chunk_lookback + 1), vLLM's rule
    chunk_lookback: int = -1
    # vLLM's R-SWA (ALGORITHM.md §12.10): keys before the sequence's prefix length visible besides
    # the window, which is then R-SWA's (window_left = rswa_window - 1)
    rswa: bool = False
    batch_invariant: bool = False  # plan so a sequence's bits do not depend on the batch (§10.4)
    # vLLM 0.33's per-sequence causal tensor (ALGORITHM.md §12.12): its flags' bytes (1: bool /
    # int8 / uint8, 4: int32), 0 = the bool `causal` holds for every sequence
    causal_flags: int = 0
    # the tensors' head size when it is not a kernel's (ALGORITHM.md §11.3): ``head_size`` is then
    # the kernels' padded size, the next one up, and head_cols the columns q, the caches and out
    # hold (0 = head_size)
    head_cols: int = 0

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
        if self.head_cols.__class__ is not int or not (
                self.head_cols == 0 or 0 < self.head_cols < self.head_size
                and self.head_cols % HEAD_COLS_MULTIPLE == 0):
            raise ValueError(f"head_cols: must be 0 (head_size) or a multiple of "
                             f"{HEAD_COLS_MULTIPLE} below head_size {self.head_size}, got "
                             f"{self.head_cols!r}")
        if self.causal_flags.__class__ is not int or self.causal_flags not in (0, 1, 4):
            raise ValueError(f"causal_flags: must be 0 (none), 1 or 4 (a flag's bytes), got "
                             f"{self.causal_flags!r}")
        if self.causal_flags and not self.causal:
            raise ValueError("causal_flags: per-sequence flags decide causality; causal must be "
                             "True with them")
        if self.causal_flags and self.max_seqlen_q > 1 and (self.mm_ranges or self.rswa or
                                                            self.chunk_lookback >= 0):
            raise NotImplementedError(
                "causal: per-sequence causal flags with mm_prefix_range, R-SWA or chunked "
                "attention are not implemented by rocke yet")
        if not self.causal and self.max_seqlen_q > 1 and (self.mm_ranges or self.rswa or
                                                          self.chunk_lookback >= 0):
            raise ValueError("causal: mm ranges, R-SWA and chunked attention widen or narrow the "
                             "causal mask; non-causal prefill takes none of them")

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
        if self.mm_clamp_window:
            out["mm_clamp_window"] = True
        if self.chunk_lookback >= 0:
            out["chunked"] = True
        if self.rswa:
            out["rswa_prefix"] = True
        if not self.causal and self.max_seqlen_q > 1:    # a decode row is the same either way
            out["non_causal"] = True
        if self.causal_flags and self.max_seqlen_q > 1:
            out["per_seq_causal"] = self.causal_flags
        if self.head_cols:
            out["head_cols"] = self.head_cols
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
        if self.q_fp8:
            out["q_fp8"] = True
        return out

    @property
    def chunk_size(self) -> int:
        """Chunked attention's chunk (vLLM's rule: the window's keys split into
        chunk_lookback + 1 chunks), 0 when off or without a window."""
        if self.chunk_lookback < 0 or self.window_left < 0:
            return 0
        return (self.window_left + 1) // (self.chunk_lookback + 1)

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
    if not isinstance(p.mm_clamp_window, bool):
        raise ValueError(f"mm_clamp_window: must be a bool, got {p.mm_clamp_window!r}")
    if isinstance(p.chunk_lookback, bool) or not isinstance(p.chunk_lookback, int) or \
            p.chunk_lookback < -1:
        raise ValueError(f"chunk_lookback: must be -1 (off) or an int >= 0, got "
                         f"{p.chunk_lookback!r}")
    if p.chunk_lookback >= 0 and p.chunk_size < 1:
        raise ValueError(f"chunk_lookback: {p.chunk_lookback} needs a sliding window of at least "
                         f"chunk_lookback + 1 = {p.chunk_lookback + 1} keys (window_left + 1), got "
                         f"{p.window_left + 1}")
    if not isinstance(p.rswa, bool):
        raise ValueError(f"rswa: must be a bool, got {p.rswa!r}")
    if p.rswa and (p.window_left < 0 or p.chunk_lookback >= 0 or p.mm_clamp_window):
        raise ValueError("rswa: R-SWA's window is the problem's window_left, without chunked "
                         "attention or clamped mm ranges")
    if p.mm_clamp_window and not (p.mm_ranges and p.window_left >= 0):
        raise ValueError("mm_clamp_window: clamps mm_prefix_range's ranges by the sliding "
                         "window; it needs both (else it changes nothing: leave it False)")


@dataclass(frozen=True)
class AttentionCapabilities:
    """What a target's attention kernels run (its dispatcher's ``CAPABILITIES``)."""
    head_sizes: tuple[int, ...]
    block_sizes: tuple[int, ...]
    max_group: int                  # the largest GQA group (query heads per KV head) run
    kv_dtypes: tuple[str, ...]      # cache encodings besides q's dtype
    token_scale_kv_dtypes: tuple[str, ...] = ()   # caches read with per-token-head scales
    out_dtypes: tuple[str, ...] = ()              # output encodings besides q's dtype

    def padded_head_size(self, head_size: int) -> int | None:
        """The kernels' head size a tensor head size runs at: itself, or the next one up for a
        multiple of HEAD_COLS_MULTIPLE (ALGORITHM.md §11.3); None when none fits."""
        if head_size in self.head_sizes:
            return head_size
        if head_size % HEAD_COLS_MULTIPLE:
            return None
        return min((h for h in self.head_sizes if h > head_size), default=None)

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




# ---- ALGORITHM.md §13: fp8 output, per-token-head KV scales, square-root ALiBi ------------------

OUT_FP8_DTYPES = {"float8_e4m3fnuz": "fp8_e4m3fnuz"}
# rocke's names of vLLM's KVQuantMode members (rocke.vllm maps the enum onto them)
KV_QUANT_MODES = ("none", "fp8_per_tensor", "int8_per_token_head", "fp8_per_token_head",
                  "int4_per_token_head")
# mode -> (the caches' torch dtype, rocke's kv_dtype); int4: packed codes with zero points, the
# query and output rotated (ALGORITHM.md §13.4)
TOKEN_SCALE_MODES = {"int4_per_token_head": ("uint8", INT4_KV),
                     "int8_per_token_head": ("int8", "i8"),
                     "fp8_per_token_head": ("float8_e4m3fnuz", "fp8_e4m3fnuz")}


# vLLM 0.33's per-token-head caches keep each (token, head)'s fp32 scale inline, right after
# its row (vllm/v1/attention/backends/triton_attn.py, customize_spec): the k/v views' rows are
# that much longer than head_size, and the scale caches are strided fp32 views of those bytes
INLINE_SCALE_BYTES = 4


def codes_per_element(kv_dtype: str | None) -> int:
    """Cache codes one stored element holds: two for int4 (a byte, low nibble first), else 1."""
    return 2 if kv_dtype == INT4_KV else 1


def cache_row_lengths(head_size: int, token_scales: bool, element_size: int,
                      codes: int = 1) -> tuple[int, ...]:
    """The row lengths (elements) a cache may have whose first ``head_size / codes`` the
    kernels read (``codes``: codes per element): that, and with per-token-head scales also
    vLLM 0.33's inline layout's, one fp32's elements longer."""
    row = head_size // codes
    if not token_scales:
        return (row,)
    return (row, row + INLINE_SCALE_BYTES // element_size)


def _check_quant_fields(p) -> None:
    if not isinstance(p.alibi_sqrt, bool) or not isinstance(p.kv_token_scales, bool):
        raise ValueError("alibi_sqrt / kv_token_scales: must be bools")
    if p.alibi_sqrt and not p.alibi:
        raise ValueError("alibi_sqrt: square-root ALiBi needs ALiBi slopes (alibi=True)")
    if p.kv_token_scales and p.kv_dtype is None:
        raise ValueError("kv_token_scales: per-token-head scales need an int8 or fp8 cache (kv_dtype)")
    if p.out_dtype is not None and not isinstance(p.out_dtype, str):
        raise ValueError(f"out_dtype: must be None or an encoding's name, got {p.out_dtype!r}")
    if p.kv_dtype == INT4_KV and (not p.kv_token_scales or p.out_dtype is not None):
        raise NotImplementedError(
            "kv_dtype: int4 caches are read with their per-token-head scales, and the output is "
            "rotated back after the kernels (ALGORITHM.md §13.4), so an fp8 output "
            "(output_scale) from them is not implemented by rocke")
    if not isinstance(p.q_fp8, bool):
        raise ValueError(f"q_fp8: must be a bool, got {p.q_fp8!r}")
    if p.q_fp8 and (p.kv_dtype is None or p.kv_token_scales):
        raise ValueError("q_fp8: an fp8 query goes with an fp8 cache's per-tensor descales "
                         "(vLLM's FP8_PER_TENSOR)")


def is_tensor(x) -> bool:
    import torch
    return isinstance(x, torch.Tensor)
