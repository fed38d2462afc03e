"""Dense forward attention: ``rocke.dense_attention(q, k, v, causal=...)`` and the torch op
``torch.ops.rocke.dense_attention``.

O = softmax(Q K^T * scale [+ causal mask]) V for q ``[B, S, H, D]`` and k / v ``[B, S, H_kv, D]``
(``layout="bhsd"``: ``[B, H, S, D]`` and ``[B, H_kv, S, D]``), bf16 or f16, D = 128, any GQA group
(H a multiple of H_kv). ``seq_lens`` (int32 ``[B]``, default all S) makes a ragged batch: rows past a
sequence's length are neither read into a result nor written. Causal is bottom-right aligned
(key <= query). ``rounding`` rounds P and O to the element type: "rne" (to nearest even),
"rna" (to nearest, ties away from zero; bf16) or "rtz" (toward zero) -- the three modes of AMD
AITER's fwd v3 kernels.

The kernel is gfx942's dense prefill family (``rocke.kernels.gfx942.dense_prefill.tuned_spec``):
one kernel per (dtype, S, H, H_kv, causal, rounding, layout), compiled on first use and kept for
the process. It runs on the device rocke.runtime picks (the emulator by default). Every argument
is checked before anything is launched; the output is a new tensor (or ``out``, written in place).
A launch whose last round is split over its keys (ALGORITHM.md §15) also allocates its f32
workspace per call (``family.split_workspace``; on a GPU through torch's caching allocator, plus
a fill of its int32 ticket counters).
Not covered: queries and keys of different lengths (cross-attention) and packed varlen
(cu_seqlens) batches -- pad to S and pass ``seq_lens``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import torch
from torch import Tensor      # at module scope: torch.library reads the op's annotations

from rocke.kernels.common.dense_prefill import LAYOUTS, ROUNDINGS
from rocke.kernels.gfx942 import dense_prefill as family

DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
HEAD_DIM = 128


def _problem(q, k, v, layout: str):
    """(B, S, H, H_kv, dtype) of the call, or a ValueError naming what is wrong."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout: one of {', '.join(LAYOUTS)}, got {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: must be a torch tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: must be 4-D ({layout}), got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise ValueError(f"{name}: dtype must be bfloat16 or float16, got {t.dtype}")
        if t.dtype != q.dtype:
            raise ValueError(f"{name}: dtype {t.dtype} differs from q's {q.dtype}")
        if not t.is_contiguous():
            raise ValueError(f"{name}: must be contiguous ({layout})")
    seq_axis, head_axis = (1, 2) if layout == "bshd" else (2, 1)
    B, S, H, D = q.shape[0], q.shape[seq_axis], q.shape[head_axis], q.shape[3]
    if D != HEAD_DIM:
        raise ValueError(f"q: head size {D}; the dense kernel takes {HEAD_DIM}")
    if k.shape != v.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} differs from k's {tuple(k.shape)}")
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k: shape {tuple(k.shape)} does not match q's batch {B} and head size {D}")
    if k.shape[seq_axis] != S:
        raise ValueError(f"k: {k.shape[seq_axis]} keys for {S} queries; dense_attention takes "
                         "equal lengths: for cross-attention use dense_attention_varlen")
    HKV = k.shape[head_axis]
    if HKV < 1 or H % HKV:
        raise ValueError(f"k: {HKV} KV heads for {H} query heads; H must be a multiple of H_kv")
    return B, S, H, HKV, DTYPES[q.dtype]


def _check_options(causal, rounding) -> None:
    if not isinstance(causal, bool):
        raise ValueError(f"causal: must be a bool, got {causal!r}")
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding: one of {', '.join(ROUNDINGS)}, got {rounding!r}")


def _output(out, q) -> Tensor:
    """``out`` checked against q (a new tensor like q when None)."""
    if out is None:
        return torch.empty_like(q)
    if not isinstance(out, torch.Tensor) or out.shape != q.shape or out.dtype != q.dtype:
        raise ValueError(f"out: must be a {q.dtype} tensor of q's shape {tuple(q.shape)}, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} "
                         f"{tuple(getattr(out, 'shape', ()))}")
    return out      # its strides and device: kernel_args


@lru_cache(maxsize=64)
def compiled_kernel(spec):
    """The compiled kernel of ``spec`` (dense_spec's), built once a process."""
    from rocke.compiler import compile_ir
    return compile_ir(family.build(spec), target=family.TARGET)


def dense_spec(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, layout: str = "bshd",
               rounding: str = "rne"):
    """The kernel spec ``dense_attention`` runs for these tensors (its name: the kernel): the
    tuned spec, with the tail split when this batch's grid splits (``family.launch_plan``)."""
    return _launch_plan(q, k, v, causal, layout, rounding)[0]


def _launch_plan(q, k, v, causal, layout, rounding):
    """(spec, tail split plan or None) of the call: the tuned spec through launch_plan."""
    _check_options(causal, rounding)
    B, S, H, HKV, dtype = _problem(q, k, v, layout)
    tuned = family.tuned_spec(dtype, S, H, HKV, causal, rounding=rounding, layout=layout)
    return family.launch_plan(tuned, B)


def dense_attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                    sm_scale: Optional[float] = None, seq_lens: Optional[Tensor] = None,
                    layout: str = "bshd", rounding: str = "rne", out: Optional[Tensor] = None,
                    device=None) -> Tensor:
    """Dense forward attention (see the module doc); returns the output (``out`` if given)."""
    spec, plan = _launch_plan(q, k, v, causal, layout, rounding)
    B, S = q.shape[0], spec.seq_len
    if seq_lens is None:
        seq_lens = torch.full((B,), S, dtype=torch.int32, device=q.device)
    out = _output(out, q)
    family.check_problem(spec, B=B)      # an empty batch (B = 0) is refused by name
    # the grid's last, fractional round split over its keys when that pays (ALGORITHM.md §15):
    # the split kernel and its plan (launch_plan), a fresh workspace (tickets zero)
    split = {} if plan is None else dict(
        plan=plan, partials=family.split_workspace(spec, plan, device=q.device))
    # checks seq_lens and sm_scale too
    args = family.kernel_args(spec, q, k, v, out, seq_lens, sm_scale, **split)
    grid, block = family.launch_geometry(spec, B, plan=plan)
    from rocke.runtime import launch
    launch(compiled_kernel(spec), grid, block, args, device=device)
    return out


def dense_attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                           cu_seqlens_k: Tensor, max_seqlen_q: int, *, causal: bool = False,
                           sm_scale: Optional[float] = None, rounding: str = "rne",
                           out: Optional[Tensor] = None, device=None) -> Tensor:
    """Packed variable-length batches (and cross-attention: query and key lengths may differ):
    q ``[T_q, H, 128]``, k / v ``[T_k, H_kv, 128]``, sequence b's rows ``cu_seqlens_*[b] ..
    cu_seqlens_*[b + 1]`` (int32 ``[B + 1]``), ``max_seqlen_q`` at least its longest query count.
    Causal is bottom-right: query i of a sequence sees keys <= i + (L_k - L_q), so each causal
    sequence needs L_k >= L_q. One kernel serves every max_seqlen_q up to the next multiple of
    its 256-query block (the grid's extent). The cu_seqlens contents are checked on the host
    (on a GPU: a device-to-host copy per call, not graph-capturable)."""
    _check_options(causal, rounding)
    if isinstance(max_seqlen_q, bool) or not isinstance(max_seqlen_q, int) or max_seqlen_q < 1:
        raise ValueError(f"max_seqlen_q: must be a positive int, got {max_seqlen_q!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"{name}: must be a 3-D tensor [tokens, heads, {HEAD_DIM}] (packed), got "
                             f"{tuple(getattr(t, 'shape', ())) or type(t).__name__}")
        if t.dtype not in DTYPES or t.dtype != q.dtype:
            raise ValueError(f"{name}: dtype must be q's, bfloat16 or float16, got {t.dtype}")
        if not t.is_contiguous():
            raise ValueError(f"{name}: must be contiguous")
    if q.shape[2] != HEAD_DIM:
        raise ValueError(f"q: head size {q.shape[2]}; the dense kernel takes {HEAD_DIM}")
    H, HKV = q.shape[1], k.shape[1]
    if HKV < 1 or H % HKV:
        raise ValueError(f"k: {HKV} KV heads for {H} query heads; H must be a multiple of H_kv")
    seq_len = -(-max_seqlen_q // family.BLOCK_M) * family.BLOCK_M
    spec = family.tuned_spec(DTYPES[q.dtype], seq_len, H, HKV, causal, rounding=rounding,
                             layout="thd")
    out = _output(out, q)
    # checks cu_seqlens (at least one sequence) and sm_scale
    args = family.kernel_args(spec, q, k, v, out, (cu_seqlens_q, cu_seqlens_k), sm_scale)
    grid, block_size = family.launch_geometry(spec, cu_seqlens_q.numel() - 1)
    if q.shape[0]:          # every sequence empty: nothing to compute
        from rocke.runtime import launch
        launch(compiled_kernel(spec), grid, block_size, args, device=device)
    return out


def _register_torch_op():
    def call(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
             sm_scale: Optional[float] = None, seq_lens: Optional[Tensor] = None,
             layout: str = "bshd", rounding: str = "rne") -> Tensor:
        return dense_attention(q, k, v, causal=causal, sm_scale=sm_scale, seq_lens=seq_lens,
                               layout=layout, rounding=rounding)

    op = torch.library.custom_op("rocke::dense_attention", mutates_args=())(call)

    @op.register_fake
    def _(q, k, v, causal=False, sm_scale=None, seq_lens=None, layout="bshd", rounding="rne"):
        _problem(q, k, v, layout)           # what the real op refuses by shape is refused here too
        return torch.empty_like(q)

    return op


dense_attention_op = _register_torch_op()

__all__ = ["dense_attention", "dense_attention_op", "dense_attention_varlen", "dense_spec",
           "compiled_kernel"]
