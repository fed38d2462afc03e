"""Regenerate the Triton-compiled gfx942 (and gfx950) fixtures that referee rocke's emulator.

Every kernel below is our own Triton code. Triton compiles it for gfx942 (no GPU needed) and
this script writes, per variant, into tests/fixtures/triton/:

    NAME.s     the gfx942 assembly text exactly as Triton's LLVM prints it
    NAME.json  a sidecar: kernel symbol, block size, LDS bytes, signature, constexprs,
               divisibility hints the caller must honour, option values, Triton version,
               and how many arguments the code object's metadata lists.

Run:  .venv/bin/python tools/gen_triton_fixtures.py [--target gfx950] [--out DIR] [--only NAME ...]

`--target gfx950` compiles the GFX950_VARIANTS (wide-K MFMA GEMMs, OCP fp8 GEMM, a block-scaled
fp8 product, block-scaled fp4 products, flash attention) for MI350-class GPUs into
tests/fixtures/triton_gfx950/.

Output is deterministic: line info is disabled (no file paths in the asm) and a fresh
throw-away Triton cache is used on every run.
"""

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

# Must be set before Triton is imported: no source paths in the asm, no stale cache.
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="rocke-triton-cache-")
atexit.register(shutil.rmtree, os.environ["TRITON_CACHE_DIR"], ignore_errors=True)

try:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
except ImportError:
    print(
        "error: Triton is not installed in this Python environment; "
        "install it (e.g. `.venv/bin/pip install triton`) to regenerate the fixtures.",
        file=sys.stderr,
    )
    sys.exit(2)

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "tests" / "fixtures" / "triton"
DEFAULT_OUT_DIRS = {"gfx942": DEFAULT_OUT_DIR, "gfx950": REPO_ROOT / "tests" / "fixtures" / "triton_gfx950"}
TARGETS = {arch: GPUTarget("hip", arch, 64) for arch in DEFAULT_OUT_DIRS}
TARGET = TARGETS["gfx942"]
WAVE_SIZE = 64
LOG2_E = 1.4426950408889634


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n_elements, BLOCK: tl.constexpr):
    """out = alpha * x + y over a ragged 1-D range; math in fp32, stored in out's dtype."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=in_bounds, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=in_bounds, other=0.0).to(tl.float32)
    tl.store(out_ptr + offsets, (alpha * x + y).to(out_ptr.dtype.element_ty), mask=in_bounds)


@triton.jit
def silu_mul_kernel(gate_ptr, up_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """out = silu(gate) * up (the SwiGLU epilogue); exercises exp and reciprocal."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offsets < n_elements
    gate = tl.load(gate_ptr + offsets, mask=in_bounds, other=0.0).to(tl.float32)
    up = tl.load(up_ptr + offsets, mask=in_bounds, other=0.0).to(tl.float32)
    silu = gate / (1.0 + tl.exp(-gate))
    tl.store(out_ptr + offsets, (silu * up).to(out_ptr.dtype.element_ty), mask=in_bounds)


@triton.jit
def softmax_rows_kernel(in_ptr, out_ptr, in_row_stride, out_row_stride, n_cols,
                        BLOCK_N: tl.constexpr):
    """One program per row; the row (n_cols <= BLOCK_N, ragged) is reduced in registers."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    in_bounds = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=in_bounds, other=-float("inf"))
    x = x.to(tl.float32)
    shifted = x - tl.max(x, axis=0)
    numerator = tl.exp(shifted)
    denominator = tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, numerator / denominator, mask=in_bounds)


@triton.jit
def layernorm_rows_kernel(x_ptr, weight_ptr, bias_ptr, y_ptr, row_stride, n_cols, eps,
                          BLOCK_N: tl.constexpr):
    """One program per row; rows longer than BLOCK_N are walked in chunks (two passes)."""
    row = tl.program_id(0)
    x_row = x_ptr + row * row_stride
    y_row = y_ptr + row * row_stride
    partial_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    partial_sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        partial_sum += x
        partial_sq += x * x
    mean = tl.sum(partial_sum, axis=0) / n_cols
    variance = tl.sum(partial_sq, axis=0) / n_cols - mean * mean
    inv_std = tl.rsqrt(variance + eps)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        in_bounds = cols < n_cols
        x = tl.load(x_row + cols, mask=in_bounds, other=0.0).to(tl.float32)
        w = tl.load(weight_ptr + cols, mask=in_bounds, other=0.0).to(tl.float32)
        b = tl.load(bias_ptr + cols, mask=in_bounds, other=0.0).to(tl.float32)
        y = (x - mean) * inv_std * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=in_bounds)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C[M,N] = A[M,K] @ B[K,N], row-major with leading dimensions given; ragged M/N/K masked.

    Grid is (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)); the accumulator is fp32.
    """
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        ks = k_start + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :],
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + offs_n[None, :],
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], c,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def flash_attention_fwd_kernel(q_ptr, k_ptr, v_ptr, out_ptr, stride_bh, stride_seq, seq_len,
                               sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Single-pass attention with an online softmax over BLOCK_N-wide K/V tiles.

    Q, K, V, Out are [batch*heads, seq_len, HEAD_DIM] with the head dim contiguous.
    Grid is (cdiv(seq_len, BLOCK_M), batch*heads). Causal masks key j > query i
    (queries and keys have equal length, so top-left and bottom-right alignment agree).
    """
    q_block = tl.program_id(0)
    head_offset = tl.program_id(1) * stride_bh
    offs_m = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + head_offset + offs_m[:, None] * stride_seq + offs_d[None, :],
                mask=offs_m[:, None] < seq_len, other=0.0)
    # Scores are kept in log2 units so the exponentials are exp2.
    qk_scale = sm_scale * 1.4426950408889634
    row_max = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        kv_end = tl.minimum((q_block + 1) * BLOCK_M, seq_len)
    else:
        kv_end = seq_len
    for kv_start in range(0, kv_end, BLOCK_N):
        cols = kv_start + offs_n
        k_t = tl.load(k_ptr + head_offset + cols[None, :] * stride_seq + offs_d[:, None],
                      mask=cols[None, :] < seq_len, other=0.0)
        scores = tl.dot(q, k_t) * qk_scale
        valid = cols[None, :] < seq_len
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        scores = tl.where(valid, scores, -float("inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        p = tl.math.exp2(scores - new_max[:, None])
        rescale = tl.math.exp2(row_max - new_max)
        row_sum = row_sum * rescale + tl.sum(p, axis=1)
        v = tl.load(v_ptr + head_offset + cols[:, None] * stride_seq + offs_d[None, :],
                    mask=cols[:, None] < seq_len, other=0.0)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        row_max = new_max
    out = acc / row_sum[:, None]
    tl.store(out_ptr + head_offset + offs_m[:, None] * stride_seq + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)


@triton.jit
def column_sum_atomic_kernel(x_ptr, out_ptr, n_rows, n_cols, row_stride,
                             ROWS_PER_PROGRAM: tl.constexpr, BLOCK_N: tl.constexpr):
    """Each program sums a band of rows and atomically adds its partial column sums to out."""
    rows = tl.program_id(0) * ROWS_PER_PROGRAM + tl.arange(0, ROWS_PER_PROGRAM)
    cols = tl.arange(0, BLOCK_N)
    in_bounds = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * row_stride + cols[None, :], mask=in_bounds, other=0.0)
    tl.atomic_add(out_ptr + cols, tl.sum(x, axis=0), mask=cols < n_cols)


@triton.jit
def histogram_atomic_kernel(values_ptr, hist_ptr, n_values, BLOCK: tl.constexpr):
    """hist[values[i]] += 1; many lanes of one wave hit the same bin in one instruction."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offsets < n_values
    bins = tl.load(values_ptr + offsets, mask=in_bounds, other=0)
    tl.atomic_add(hist_ptr + bins, 1, mask=in_bounds, sem="relaxed")


# ---- issue 11: ISA coverage beyond attention and GEMM -----------------------------------------

try:
    from triton.language.extra import libdevice
except ImportError:   # older Triton: the f64 math variants are then not generated
    libdevice = None


@triton.jit
def int_bits_kernel(x_ptr, d_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Integer division/modulo by a runtime divisor (signed and unsigned), bit tricks and i64
    arithmetic; out has 12 int32 columns per element."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1)
    d = tl.load(d_ptr + offs, mask=m, other=1)
    ux = x.to(tl.uint32, bitcast=True)
    ud = d.to(tl.uint32, bitcast=True)
    wide = x.to(tl.int64) * d.to(tl.int64) + (x.to(tl.int64) << 20)
    cols = [x // d, x % d, (ux // ud).to(tl.int32, bitcast=True),
            (ux % ud).to(tl.int32, bitcast=True), libdevice.popc(x), libdevice.clz(x),
            tl.where(x > d, x - d, d - x), tl.umulhi(ux, ud).to(tl.int32, bitcast=True),
            tl.minimum(x, d) ^ tl.maximum(x, d), tl.abs(x) >> 3,
            (wide >> 17).to(tl.int32), (wide & 0xFFFFFFFF).to(tl.int32)]
    for c in tl.static_range(12):
        tl.store(out_ptr + offs * 12 + c, cols[c], mask=m)


@triton.jit
def f64_math_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """f64 arithmetic and device-library math: 8 f64 results per element."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    cols = [x / y, tl.sqrt(tl.abs(x)), libdevice.exp(y), libdevice.log(tl.abs(x)),
            libdevice.sin(x), libdevice.cos(y), libdevice.pow(tl.abs(x), y), libdevice.tanh(x)]
    for c in tl.static_range(8):
        tl.store(out_ptr + offs * 8 + c, cols[c], mask=m)


@triton.jit
def rounding_modes_kernel(x_ptr, w_ptr, bf_ptr, h_ptr, f_ptr, n, BLOCK: tl.constexpr):
    """Round-toward-zero down-casts f32 -> bf16 and f32 -> f16 (the compiler may switch
    MODE.FP_ROUND around them), and a nearest-even f64 -> f32 cast."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    w = tl.load(w_ptr + offs, mask=m, other=1.0)
    tl.store(bf_ptr + offs, x.to(tl.bfloat16, fp_downcast_rounding="rtz"), mask=m)
    tl.store(h_ptr + offs, x.to(tl.float16, fp_downcast_rounding="rtz"), mask=m)
    tl.store(f_ptr + offs, w.to(tl.float32), mask=m)


@triton.jit
def fp8_convert_kernel(x_ptr, e4_ptr, e5_ptr, e4nv_ptr, e5nv_ptr, back_ptr, n,
                       BLOCK: tl.constexpr):
    """f32 -> fp8 in both gfx942 (fnuz) and OCP encodings, and each back to f32."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    e4 = x.to(tl.float8e4b8)
    e5 = x.to(tl.float8e5b16)
    e4nv = x.to(tl.float8e4nv)
    e5nv = x.to(tl.float8e5)
    tl.store(e4_ptr + offs, e4, mask=m)
    tl.store(e5_ptr + offs, e5, mask=m)
    tl.store(e4nv_ptr + offs, e4nv, mask=m)
    tl.store(e5nv_ptr + offs, e5nv, mask=m)
    tl.store(back_ptr + offs * 4 + 0, e4.to(tl.float32), mask=m)
    tl.store(back_ptr + offs * 4 + 1, e5.to(tl.float32), mask=m)
    tl.store(back_ptr + offs * 4 + 2, e4nv.to(tl.float32), mask=m)
    tl.store(back_ptr + offs * 4 + 3, e5nv.to(tl.float32), mask=m)


@triton.jit
def scan_sort_kernel(x_ptr, cumsum_ptr, sorted_ptr, argmax_ptr, N: tl.constexpr):
    """One program per row of N values: inclusive prefix sum, ascending sort, argmax."""
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + row * N + cols)
    tl.store(cumsum_ptr + row * N + cols, tl.cumsum(x, axis=0))
    tl.store(sorted_ptr + row * N + cols, tl.sort(x))
    tl.store(argmax_ptr + row, tl.argmax(x, axis=0))


@triton.jit
def atomics_mix_kernel(x_ptr, imax_ptr, imin_ptr, fmax_ptr, bits_ptr, swap_ptr, cas_ptr, n,
                       BLOCK: tl.constexpr):
    """Integer/float atomic max/min, and/or/xor, exchange and compare-and-swap."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    slot = offs % 8
    tl.atomic_max(imax_ptr + slot, x, mask=m)
    tl.atomic_min(imin_ptr + slot, x, mask=m)
    tl.atomic_max(fmax_ptr + slot, x.to(tl.float32) * 0.5, mask=m)
    zero = tl.zeros_like(offs)
    tl.atomic_or(bits_ptr + zero, 1 << (offs % 32), mask=m)
    tl.atomic_and(bits_ptr + zero + 1, ~(1 << (offs % 31)), mask=m)
    tl.atomic_xor(bits_ptr + zero + 2, x, mask=m)
    tl.atomic_xchg(swap_ptr + offs, x + 1, mask=m)
    tl.atomic_cas(cas_ptr + offs, offs, x, sem="relaxed")


@triton.jit
def spin_lock_kernel(lock_ptr, counter_ptr, log_ptr, ITEMS: tl.constexpr):
    """Each program takes a global spin lock (atomic_cas), bumps a counter ITEMS times inside
    the critical section with plain loads/stores, records its ticket, and releases."""
    pid = tl.program_id(0)
    while tl.atomic_cas(lock_ptr, 0, 1, sem="acquire") == 1:
        pass
    ticket = tl.load(counter_ptr, volatile=True)
    for i in range(ITEMS):
        tl.store(counter_ptr, tl.load(counter_ptr, volatile=True) + 1)
    tl.store(log_ptr + pid, ticket)
    tl.atomic_xchg(lock_ptr, 0, sem="release")


@triton.jit
def gather_kernel(table_ptr, idx_ptr, out_ptr, gathered_ptr, n_idx, D: tl.constexpr,
                  BLOCK: tl.constexpr):
    """Embedding-style row gather by index, and tl.gather along a row."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = rows < n_idx
    idx = tl.load(idx_ptr + rows, mask=m, other=0)
    cols = tl.arange(0, D)
    vals = tl.load(table_ptr + idx[:, None] * D + cols[None, :], mask=m[:, None], other=0.0)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], vals, mask=m[:, None])
    perm = (cols * 5 + 3) % D
    picked = tl.gather(vals, tl.broadcast_to(perm[None, :], (BLOCK, D)), axis=1)
    tl.store(gathered_ptr + rows[:, None] * D + cols[None, :], picked, mask=m[:, None])


@triton.jit
def matmul_typed_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        ACC_TYPE: tl.constexpr, PRECISION: tl.constexpr):
    """matmul_kernel with a chosen accumulator type (int32 for i8, fp64 for fp64) and dot
    input precision ("ieee" keeps f32 inputs exact)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k_start in range(0, K, BLOCK_K):
        ks = k_start + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :],
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + offs_n[None, :],
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=ACC_TYPE)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def compare_matrix_kernel(h_ptr, f_ptr, d_ptr, s16_ptr, u16_ptr, i32_ptr, u32_ptr, i64_ptr,
                          u64_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Six comparisons (<, <=, >, >=, ==, !=) of neighbouring elements for nine element
    types; the 54 results are packed as bits of two int32 words per element."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    lo = tl.zeros([BLOCK], dtype=tl.int32)
    hi = tl.zeros([BLOCK], dtype=tl.int32)
    ptrs = [h_ptr, f_ptr, d_ptr, s16_ptr, u16_ptr, i32_ptr, u32_ptr, i64_ptr, u64_ptr]
    for t in tl.static_range(9):
        a = tl.load(ptrs[t] + offs, mask=m)
        b = tl.load(ptrs[t] + offs + 1, mask=m)
        bits = ((a < b).to(tl.int32) | ((a <= b).to(tl.int32) << 1) | ((a > b).to(tl.int32) << 2)
                | ((a >= b).to(tl.int32) << 3) | ((a == b).to(tl.int32) << 4)
                | ((a != b).to(tl.int32) << 5))
        if t < 5:
            lo = lo | (bits << (6 * t))
        else:
            hi = hi | (bits << (6 * (t - 5)))
    tl.store(out_ptr + offs * 2, lo, mask=m)
    tl.store(out_ptr + offs * 2 + 1, hi, mask=m)


@triton.jit
def small_types_kernel(i8_ptr, u8_ptr, i16_ptr, h_ptr, bf_ptr, d_ptr, i8_out, u8_out, i16_out,
                       h_out, bf_out, d_out, f_out, n, BLOCK: tl.constexpr):
    """8/16-bit integer, f16, bf16 and f64 element-wise arithmetic and conversions."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a8 = tl.load(i8_ptr + offs, mask=m, other=0)
    u8 = tl.load(u8_ptr + offs, mask=m, other=0)
    a16 = tl.load(i16_ptr + offs, mask=m, other=0)
    h = tl.load(h_ptr + offs, mask=m, other=0.0)
    bf = tl.load(bf_ptr + offs, mask=m, other=0.0)
    d = tl.load(d_ptr + offs, mask=m, other=0.0)
    tl.store(i8_out + offs, (a8 * 3 + (a8 >> 2)) ^ 0x55, mask=m)
    tl.store(u8_out + offs, tl.maximum(u8, 100) - (u8 >> 3), mask=m)
    tl.store(i16_out + offs, tl.minimum(a16 * a16, a16 << 4) + tl.abs(a16) // 3, mask=m)
    h2 = h * h + h
    tl.store(h_out + offs * 4 + 0, h2, mask=m)
    tl.store(h_out + offs * 4 + 1, tl.maximum(h, -h * 0.5), mask=m)
    tl.store(h_out + offs * 4 + 2, a16.to(tl.float16), mask=m)
    tl.store(h_out + offs * 4 + 3, u8.to(tl.float16) * 0.25, mask=m)
    tl.store(bf_out + offs * 2, bf * 2.0 + 1.0, mask=m)
    tl.store(bf_out + offs * 2 + 1, a8.to(tl.bfloat16), mask=m)
    tl.store(d_out + offs * 6 + 0, tl.floor(d), mask=m)
    tl.store(d_out + offs * 6 + 1, tl.ceil(d), mask=m)
    tl.store(d_out + offs * 6 + 2, tl.minimum(d, -d), mask=m)
    tl.store(d_out + offs * 6 + 3, tl.maximum(d, 0.5), mask=m)
    tl.store(d_out + offs * 6 + 4, (d * 1000.0).to(tl.int64).to(tl.float64), mask=m)
    tl.store(d_out + offs * 6 + 5, tl.abs(d) + a16.to(tl.float64), mask=m)
    tl.store(f_out + offs * 3 + 0, h.to(tl.float32) + bf.to(tl.float32), mask=m)
    tl.store(f_out + offs * 3 + 1, d.to(tl.float32), mask=m)
    tl.store(f_out + offs * 3 + 2, u8.to(tl.float32) + a8.to(tl.float32), mask=m)


@triton.jit
def atomics_wide_kernel(x_ptr, f64_sum, i64_sum, u32_max, u32_min, i64_max, f32_swap, n,
                        BLOCK: tl.constexpr):
    """64-bit and unsigned atomics: f64/i64 add, unsigned max/min, i64 max, f32 exchange."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    slot = offs % 4
    tl.atomic_add(f64_sum + slot, x.to(tl.float64) * 0.5, mask=m)
    tl.atomic_add(i64_sum + slot, x.to(tl.int64) << 20, mask=m)
    tl.atomic_max(u32_max + slot, x.to(tl.uint32, bitcast=True), mask=m)
    tl.atomic_min(u32_min + slot, x.to(tl.uint32, bitcast=True), mask=m)
    tl.atomic_max(i64_max + slot, x.to(tl.int64) * 3, mask=m)
    tl.atomic_xchg(f32_swap + offs, x.to(tl.float32), mask=m)


@triton.jit
def f32_f16_math_kernel(x_ptr, y_ptr, h_ptr, g_ptr, out_ptr, hout_ptr, iout_ptr, n,
                        BLOCK: tl.constexpr):
    """f32 rounding/transcendental/min-max-median math and packed f16 / i16 arithmetic
    (several elements per lane, so the compiler packs them): out[n, 12], hout[n, 6], iout[n, 4]."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    h = tl.load(h_ptr + offs, mask=m, other=1.0)
    g = tl.load(g_ptr + offs, mask=m, other=1.0)
    cols = [tl.floor(x), tl.ceil(x), libdevice.trunc(x), libdevice.rint(x), tl.sin(x), tl.cos(y),
            tl.exp2(y), tl.log2(tl.abs(x) + 1.0), tl.sqrt_rn(tl.abs(y)), tl.rsqrt(tl.abs(x) + 0.5),
            tl.minimum(tl.minimum(x, y), 0.25), tl.maximum(tl.minimum(x, y), tl.minimum(tl.maximum(x, y), 0.5))]
    for c in tl.static_range(12):
        tl.store(out_ptr + offs * 12 + c, cols[c], mask=m)
    hcols = [h * g + h, tl.maximum(h, g), tl.minimum(h, g), h + g, h - g, h * g]
    for c in tl.static_range(6):
        tl.store(hout_ptr + offs * 6 + c, hcols[c], mask=m)
    i = (x * 100.0).to(tl.int16)
    j = (y * 100.0).to(tl.int16)
    icols = [i + j, i - j, tl.maximum(i, j), i * j]
    for c in tl.static_range(4):
        tl.store(iout_ptr + offs * 4 + c, icols[c].to(tl.int32), mask=m)


@triton.jit
def row_sum_wide_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """One program sums a long row with many warps (cross-wave reduction through LDS)."""
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


# ----------------------------------------------------------------------------------------------
# Variants
# ----------------------------------------------------------------------------------------------


@triton.jit
def scaled_dot_kernel(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr,
                      K: tl.constexpr):
    """One M x N tile of the block-scaled (MX) product: e4m3 A [M, K] and B [K, N], one E8M0
    scale byte per 32 K values of each A row (sa [M, K/32]) and B column (sb [N, K/32])."""
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    rs = tl.arange(0, K // 32)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    sa = tl.load(sa_ptr + rm[:, None] * (K // 32) + rs[None, :])
    sb = tl.load(sb_ptr + rn[:, None] * (K // 32) + rs[None, :])
    c = tl.dot_scaled(a, sa, "e4m3", b, sb, "e4m3")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


@triton.jit
def scaled_dot_mx_kernel(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr,
                         K: tl.constexpr, A_FMT: tl.constexpr, B_FMT: tl.constexpr):
    """scaled_dot_kernel with each operand's MX format a parameter: an "e2m1" operand holds two
    fp4 codes per byte along K (low nibble first), so A is [M, K/2] and B is [K/2, N] bytes."""
    KA: tl.constexpr = K // 2 if A_FMT == "e2m1" else K
    KB: tl.constexpr = K // 2 if B_FMT == "e2m1" else K
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rka = tl.arange(0, KA)
    rkb = tl.arange(0, KB)
    rs = tl.arange(0, K // 32)
    a = tl.load(a_ptr + rm[:, None] * KA + rka[None, :])
    b = tl.load(b_ptr + rkb[:, None] * N + rn[None, :])
    sa = tl.load(sa_ptr + rm[:, None] * (K // 32) + rs[None, :])
    sb = tl.load(sb_ptr + rn[:, None] * (K // 32) + rs[None, :])
    c = tl.dot_scaled(a, sa, A_FMT, b, sb, B_FMT)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


@triton.jit
def scaled_dot_fp4_upcast_kernel(a_ptr, b_ptr, sa_ptr, c_ptr, M: tl.constexpr,
                                 N: tl.constexpr, K: tl.constexpr, B_FMT: tl.constexpr):
    """An E2M1 A [M, K/2 bytes] with E8M0 scales (sa [M, K/32]) times an unscaled 16-bit B
    [K, N] (B_FMT "bf16" / "fp16"): Triton upcasts A with the scaled fp4 conversions."""
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rka = tl.arange(0, K // 2)
    rk = tl.arange(0, K)
    rs = tl.arange(0, K // 32)
    a = tl.load(a_ptr + rm[:, None] * (K // 2) + rka[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    sa = tl.load(sa_ptr + rm[:, None] * (K // 32) + rs[None, :])
    c = tl.dot_scaled(a, sa, "e2m1", b, None, B_FMT)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


def _variant(name, kernel, signature, constexprs, options, divisible_by_16=(), notes=""):
    return {
        "name": name,
        "kernel": kernel,
        "signature": signature,
        "constexprs": constexprs,
        "options": options,
        "divisible_by_16": list(divisible_by_16),
        "notes": notes,
    }


def _matmul_variant(name, in_type, out_type, nonkdim, block_k, aligned_nk):
    """aligned_nk: N and K are promised multiples of 16, which lets Triton vectorize the
    loads and stores while the M/N/K tails stay masked; otherwise every element is masked
    separately and the loads are scalar."""
    signature = {
        "a_ptr": f"*{in_type}", "b_ptr": f"*{in_type}", "c_ptr": f"*{out_type}",
        "M": "i32", "N": "i32", "K": "i32",
        "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32",
        "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr",
    }
    return _variant(
        name, matmul_kernel, signature,
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": block_k},
        {"num_warps": 4, "num_stages": 2, "matrix_instr_nonkdim": nonkdim},
        divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "stride_am", "stride_bk", "stride_cm")
        + (("N", "K") if aligned_nk else ()),
        notes=f"C = A @ B with {in_type} inputs, fp32 accumulate, {out_type} output; "
              f"grid (cdiv(M,64), cdiv(N,64)); "
              + ("N and K multiples of 16." if aligned_nk else "M, N, K arbitrary."),
    )


def _flash_variant(name, head_dim, causal, nonkdim):
    signature = {
        "q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "out_ptr": "*fp16",
        "stride_bh": "i32", "stride_seq": "i32", "seq_len": "i32", "sm_scale": "fp32",
        "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
        "CAUSAL": "constexpr",
    }
    return _variant(
        name, flash_attention_fwd_kernel, signature,
        {"HEAD_DIM": head_dim, "BLOCK_M": 64, "BLOCK_N": 64 if head_dim <= 64 else 32,
         "CAUSAL": causal},
        {"num_warps": 4, "num_stages": 1, "matrix_instr_nonkdim": nonkdim},
        divisible_by_16=("q_ptr", "k_ptr", "v_ptr", "out_ptr", "stride_bh", "stride_seq"),
        notes="Q,K,V,Out are [B*H, seq_len, HEAD_DIM] fp16; grid (cdiv(seq_len,64), B*H); "
              "shapes and strides are runtime so one fixture serves tests and benchmarks.",
    )


VARIANTS = [
    _variant("axpy_f32", axpy_kernel,
             {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "alpha": "fp32",
              "n_elements": "i32", "BLOCK": "constexpr"},
             {"BLOCK": 1024}, {"num_warps": 4, "num_stages": 1},
             divisible_by_16=("x_ptr", "y_ptr", "out_ptr"),
             notes="grid (cdiv(n,1024),); 4 fp32 elements per lane."),
    _variant("axpy_f16", axpy_kernel,
             {"x_ptr": "*fp16", "y_ptr": "*fp16", "out_ptr": "*fp16", "alpha": "fp32",
              "n_elements": "i32", "BLOCK": "constexpr"},
             {"BLOCK": 512}, {"num_warps": 2, "num_stages": 1},
             divisible_by_16=("x_ptr", "y_ptr", "out_ptr"),
             notes="grid (cdiv(n,512),); fp16 in/out, fp32 math."),
    _variant("silu_mul_f16", silu_mul_kernel,
             {"gate_ptr": "*fp16", "up_ptr": "*fp16", "out_ptr": "*fp16", "n_elements": "i32",
              "BLOCK": "constexpr"},
             {"BLOCK": 256}, {"num_warps": 1, "num_stages": 1},
             notes="grid (cdiv(n,256),); no divisibility hints, so loads are scalar."),
    _variant("softmax_rows_f32", softmax_rows_kernel,
             {"in_ptr": "*fp32", "out_ptr": "*fp32", "in_row_stride": "i32",
              "out_row_stride": "i32", "n_cols": "i32", "BLOCK_N": "constexpr"},
             {"BLOCK_N": 256}, {"num_warps": 4, "num_stages": 1},
             divisible_by_16=("in_ptr", "out_ptr"),
             notes="grid (n_rows,); n_cols <= 256; cross-wave reduction through LDS."),
    _variant("layernorm_rows_f16", layernorm_rows_kernel,
             {"x_ptr": "*fp16", "weight_ptr": "*fp16", "bias_ptr": "*fp16", "y_ptr": "*fp16",
              "row_stride": "i32", "n_cols": "i32", "eps": "fp32", "BLOCK_N": "constexpr"},
             {"BLOCK_N": 128}, {"num_warps": 2, "num_stages": 1},
             divisible_by_16=("x_ptr", "weight_ptr", "bias_ptr", "y_ptr", "row_stride"),
             notes="grid (n_rows,); any n_cols (walked in 128-wide chunks); x and y share "
                   "row_stride."),
    _matmul_variant("matmul_f16_mfma16", "fp16", "fp16", 16, 32, aligned_nk=False),
    _matmul_variant("matmul_f16_mfma32", "fp16", "fp16", 32, 32, aligned_nk=False),
    _matmul_variant("matmul_bf16_mfma16", "bf16", "bf16", 16, 32, aligned_nk=True),
    _matmul_variant("matmul_bf16_mfma32", "bf16", "bf16", 32, 32, aligned_nk=True),
    _matmul_variant("matmul_fp8e4b8_mfma16", "fp8e4b8", "fp32", 16, 64, aligned_nk=True),
    _matmul_variant("matmul_fp8e4b8_mfma32", "fp8e4b8", "fp32", 32, 64, aligned_nk=True),
    _flash_variant("flash_attn_fwd_d64", 64, False, 16),
    _flash_variant("flash_attn_fwd_d64_causal", 64, True, 16),
    _flash_variant("flash_attn_fwd_d128", 128, False, 32),
    _flash_variant("flash_attn_fwd_d128_causal", 128, True, 32),
    _variant("column_sum_atomic_f32", column_sum_atomic_kernel,
             {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32",
              "row_stride": "i32", "ROWS_PER_PROGRAM": "constexpr", "BLOCK_N": "constexpr"},
             {"ROWS_PER_PROGRAM": 16, "BLOCK_N": 64}, {"num_warps": 2, "num_stages": 1},
             divisible_by_16=("x_ptr", "out_ptr"),
             notes="grid (cdiv(n_rows,16),); n_cols <= 64; out must be zeroed by the caller; "
                   "fp32 atomic add (acq_rel, gpu scope)."),
    _variant("histogram_atomic_i32", histogram_atomic_kernel,
             {"values_ptr": "*i32", "hist_ptr": "*i32", "n_values": "i32",
              "BLOCK": "constexpr"},
             {"BLOCK": 256}, {"num_warps": 4, "num_stages": 1},
             divisible_by_16=("values_ptr", "hist_ptr"),
             notes="grid (cdiv(n,256),); values must be valid bin indices; hist zeroed by "
                   "the caller; relaxed i32 atomic add."),
]


def _elementwise(name, kernel, signature, block, warps=4, notes="", stages=1, **options):
    return _variant(name, kernel, signature, {"BLOCK": block},
                    {"num_warps": warps, "num_stages": stages, **options},
                    divisible_by_16=tuple(k for k, v in signature.items() if v.startswith("*")),
                    notes=notes)


VARIANTS += [
    _elementwise("int_bits_i32", int_bits_kernel,
                 {"x_ptr": "*i32", "d_ptr": "*i32", "out_ptr": "*i32", "n": "i32",
                  "BLOCK": "constexpr"}, 128, warps=2,
                 notes="grid (cdiv(n,128),); d != 0; out[n, 12] int32."),
    _elementwise("f64_math", f64_math_kernel,
                 {"x_ptr": "*fp64", "y_ptr": "*fp64", "out_ptr": "*fp64", "n": "i32",
                  "BLOCK": "constexpr"}, 64, warps=1, enable_fp_fusion=False,
                 notes="grid (cdiv(n,64),); out[n, 8] f64: x/y sqrt|x| exp(y) log|x| sin(x) "
                       "cos(y) |x|^y tanh(x). FP fusion off: contracting the device library's "
                       "error-free transformations into FMAs breaks its double-double steps."),
    _elementwise("rounding_modes_f32", rounding_modes_kernel,
                 {"x_ptr": "*fp32", "w_ptr": "*fp64", "bf_ptr": "*bf16", "h_ptr": "*fp16",
                  "f_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, 64, warps=1,
                 notes="grid (cdiv(n,64),); bf16/f16 from x toward zero, f32 from w to nearest."),
    _elementwise("fp8_convert", fp8_convert_kernel,
                 {"x_ptr": "*fp32", "e4_ptr": "*fp8e4b8", "e5_ptr": "*fp8e5b16",
                  "e4nv_ptr": "*fp8e4nv", "e5nv_ptr": "*fp8e5", "back_ptr": "*fp32", "n": "i32",
                  "BLOCK": "constexpr"}, 128, warps=2,
                 notes="grid (cdiv(n,128),); back[n, 4] = each fp8 value decoded."),
    _variant("scan_sort_f32", scan_sort_kernel,
             {"x_ptr": "*fp32", "cumsum_ptr": "*fp32", "sorted_ptr": "*fp32", "argmax_ptr": "*i32",
              "N": "constexpr"}, {"N": 128}, {"num_warps": 2, "num_stages": 1},
             divisible_by_16=("x_ptr", "cumsum_ptr", "sorted_ptr", "argmax_ptr"),
             notes="grid (rows,); rows of 128 contiguous floats."),
    _elementwise("atomics_mix_i32", atomics_mix_kernel,
                 {"x_ptr": "*i32", "imax_ptr": "*i32", "imin_ptr": "*i32", "fmax_ptr": "*fp32",
                  "bits_ptr": "*i32", "swap_ptr": "*i32", "cas_ptr": "*i32", "n": "i32",
                  "BLOCK": "constexpr"}, 128, warps=2,
                 notes="grid (cdiv(n,128),); 8 max/min slots; bits[3]; swap/cas per element."),
    _variant("spin_lock", spin_lock_kernel,
             {"lock_ptr": "*i32", "counter_ptr": "*i32", "log_ptr": "*i32", "ITEMS": "constexpr"},
             {"ITEMS": 3}, {"num_warps": 1, "num_stages": 1},
             notes="grid (programs,); lock and counter zeroed by the caller."),
    _variant("gather_rows_f32", gather_kernel,
             {"table_ptr": "*fp32", "idx_ptr": "*i32", "out_ptr": "*fp32",
              "gathered_ptr": "*fp32", "n_idx": "i32", "D": "constexpr", "BLOCK": "constexpr"},
             {"D": 32, "BLOCK": 16}, {"num_warps": 2, "num_stages": 1},
             divisible_by_16=("table_ptr", "idx_ptr", "out_ptr", "gathered_ptr"),
             notes="grid (cdiv(n_idx,16),); table[rows, 32]."),
    _variant("row_sum_w16", row_sum_wide_kernel,
             {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_cols": "i32", "BLOCK": "constexpr"},
             {"BLOCK": 2048}, {"num_warps": 16, "num_stages": 1},
             divisible_by_16=("x_ptr", "out_ptr"),
             notes="grid (rows,); 16 waves per program."),
    _variant("row_sum_w8", row_sum_wide_kernel,
             {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_cols": "i32", "BLOCK": "constexpr"},
             {"BLOCK": 1024}, {"num_warps": 8, "num_stages": 1},
             divisible_by_16=("x_ptr", "out_ptr"),
             notes="grid (rows,); 8 waves per program."),
]


VARIANTS += [
    _elementwise("compare_matrix", compare_matrix_kernel,
                 {"h_ptr": "*fp16", "f_ptr": "*fp32", "d_ptr": "*fp64", "s16_ptr": "*i16",
                  "u16_ptr": "*u16", "i32_ptr": "*i32", "u32_ptr": "*u32", "i64_ptr": "*i64",
                  "u64_ptr": "*u64", "out_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"}, 64,
                 warps=1, notes="grid (cdiv(n,64),); inputs have n + 1 elements; out[n, 2]."),
    _elementwise("small_types", small_types_kernel,
                 {"i8_ptr": "*i8", "u8_ptr": "*u8", "i16_ptr": "*i16", "h_ptr": "*fp16",
                  "bf_ptr": "*bf16", "d_ptr": "*fp64", "i8_out": "*i8", "u8_out": "*u8",
                  "i16_out": "*i16", "h_out": "*fp16", "bf_out": "*bf16", "d_out": "*fp64",
                  "f_out": "*fp32", "n": "i32", "BLOCK": "constexpr"}, 64, warps=1,
                 notes="grid (cdiv(n,64),); h_out[n,4] bf_out[n,2] d_out[n,6] f_out[n,3]."),
    _elementwise("f32_f16_math", f32_f16_math_kernel,
                 {"x_ptr": "*fp32", "y_ptr": "*fp32", "h_ptr": "*fp16", "g_ptr": "*fp16",
                  "out_ptr": "*fp32", "hout_ptr": "*fp16", "iout_ptr": "*i32", "n": "i32",
                  "BLOCK": "constexpr"}, 256, warps=1, enable_fp_fusion=False,
                 notes="grid (cdiv(n,256),); 4 elements per lane."),
    _elementwise("atomics_wide", atomics_wide_kernel,
                 {"x_ptr": "*i32", "f64_sum": "*fp64", "i64_sum": "*i64", "u32_max": "*u32",
                  "u32_min": "*u32", "i64_max": "*i64", "f32_swap": "*fp32", "n": "i32",
                  "BLOCK": "constexpr"}, 128, warps=2,
                 notes="grid (cdiv(n,128),); 4 slots per reduction target."),
]


def _matmul_extra(name, in_type, out_type, block_k, warps=4, stages=2, **options):
    variant = _matmul_variant(name, in_type, out_type, options.pop("nonkdim", 16), block_k,
                              aligned_nk=True)
    variant["options"].update({"num_warps": warps, "num_stages": stages, **options})
    variant["notes"] += f" num_warps={warps} num_stages={stages} {options or ''}"
    return variant


def _matmul_typed(name, in_type, out_type, acc, precision, block_k, nonkdim, **options):
    variant = _matmul_variant(name, in_type, out_type, nonkdim, block_k, aligned_nk=True)
    variant["kernel"] = matmul_typed_kernel
    variant["signature"].update({"ACC_TYPE": "constexpr", "PRECISION": "constexpr"})
    variant["constexprs"].update({"ACC_TYPE": acc, "PRECISION": precision})
    variant["options"].update(options)
    variant["notes"] += f" accumulator {acc}, input precision {precision}."
    return variant


VARIANTS += [
    _matmul_typed("matmul_f32_ieee_mfma16", "fp32", "fp32", tl.float32, "ieee", 16, 16),
    _matmul_typed("matmul_f32_ieee_mfma32", "fp32", "fp32", tl.float32, "ieee", 16, 32),
    _matmul_typed("matmul_i8_mfma16", "i8", "i32", tl.int32, "ieee", 64, 16),
    _matmul_typed("matmul_i8_mfma32", "i8", "i32", tl.int32, "ieee", 64, 32),
    _matmul_typed("matmul_f64_mfma16", "fp64", "fp64", tl.float64, "ieee", 16, 16),
    _matmul_extra("matmul_f16_kpack2_w8_s3", "fp16", "fp16", 64, warps=8, stages=3, kpack=2),
    _matmul_extra("matmul_bf16_mfma32_s3", "bf16", "fp32", 32, stages=3, nonkdim=32),
]


# gfx950 (CDNA4): BLOCK_K = 64 lets Triton pick the wide-K atoms (16x16x32 / 32x32x16 for
# f16/bf16), its transposed LDS reads and LDS DMA; fp8 is the OCP e4m3 format there.
GFX950_VARIANTS = [
    _matmul_variant("matmul_f16_k32_mfma16", "fp16", "fp16", 16, 64, aligned_nk=False),
    _matmul_variant("matmul_f16_k16_mfma32", "fp16", "fp16", 32, 64, aligned_nk=True),
    _matmul_variant("matmul_bf16_k32_mfma16", "bf16", "bf16", 16, 64, aligned_nk=True),
    _matmul_variant("matmul_bf16_k16_mfma32", "bf16", "fp32", 32, 64, aligned_nk=False),
    _matmul_variant("matmul_fp8e4nv_mfma16", "fp8e4nv", "fp32", 16, 128, aligned_nk=True),
    _matmul_variant("matmul_fp8e4nv_mfma32", "fp8e4nv", "fp32", 32, 64, aligned_nk=True),
    _flash_variant("flash_attn_fwd_d64", 64, False, 16),
    _flash_variant("flash_attn_fwd_d64_causal", 64, True, 32),
]
# gfx942 corpus kernels whose gfx950 code differs in kind: the scaled OCP fp8 conversions
# (v_cvt_scalef32_*) and the doubled-K i8 atoms.
GFX950_VARIANTS += [v for v in VARIANTS
                    if v["name"] in ("fp8_convert", "matmul_i8_mfma16", "matmul_i8_mfma32")]
# the block-scaled MFMA (v_mfma_scale_f32_32x32x64_f8f6f4): Triton's native tl.dot_scaled
GFX950_VARIANTS += [_variant(
    "scaled_dot_e4m3_64x64x256", scaled_dot_kernel,
    {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "sa_ptr": "*u8", "sb_ptr": "*u8", "c_ptr": "*fp32",
     "M": "constexpr", "N": "constexpr", "K": "constexpr"},
    {"M": 64, "N": 64, "K": 256}, {"num_warps": 4},
    notes="one 64x64 tile, K = 256: e4m3 operands with E8M0 scales per 32 K values")]


def _scaled_mx_variant(name, a_fmt, b_fmt, m, k, warps=4):
    pointer = {"e2m1": "*u8", "e4m3": "*fp8e4nv"}
    return _variant(
        name, scaled_dot_mx_kernel,
        {"a_ptr": pointer[a_fmt], "b_ptr": pointer[b_fmt], "sa_ptr": "*u8", "sb_ptr": "*u8",
         "c_ptr": "*fp32", "M": "constexpr", "N": "constexpr", "K": "constexpr",
         "A_FMT": "constexpr", "B_FMT": "constexpr"},
        {"M": m, "N": m, "K": k, "A_FMT": a_fmt, "B_FMT": b_fmt}, {"num_warps": warps},
        notes=f"one {m}x{m} tile, K = {k}: {a_fmt} A, {b_fmt} B (e2m1: two codes a byte along "
              "K, low nibble first) with E8M0 scales per 32 K values")


# the block-scaled MFMA on fp4 (E2M1) operands: CBSZ / BLGP = 4, 4 registers a lane
GFX950_VARIANTS += [
    _scaled_mx_variant("scaled_dot_e2m1_64x64x256", "e2m1", "e2m1", 64, 256),
    _scaled_mx_variant("scaled_dot_e2m1_16x16x256", "e2m1", "e2m1", 16, 256),
    _scaled_mx_variant("scaled_dot_e4m3_e2m1_64x64x128", "e4m3", "e2m1", 64, 128),
    _scaled_mx_variant("scaled_dot_e2m1_e4m3_64x64x128", "e2m1", "e4m3", 64, 128),
]
# fp4 times a 16-bit operand: the fp4 side is upcast by v_cvt_scalef32_pk_{bf16,f16}_fp4
GFX950_VARIANTS += [_variant(
    f"scaled_dot_e2m1_{b_fmt}_64x64x128", scaled_dot_fp4_upcast_kernel,
    {"a_ptr": "*u8", "b_ptr": f"*{b_fmt}", "sa_ptr": "*u8", "c_ptr": "*fp32", "M": "constexpr",
     "N": "constexpr", "K": "constexpr", "B_FMT": "constexpr"},
    {"M": 64, "N": 64, "K": 128, "B_FMT": b_fmt}, {"num_warps": 4},
    notes=f"one 64x64 tile, K = 128: e2m1 A with E8M0 scales per 32 K values, {b_fmt} B "
          "without scales") for b_fmt in ("bf16", "fp16")]


# ----------------------------------------------------------------------------------------------
# Compilation and output
# ----------------------------------------------------------------------------------------------


def code_object_metadata(asm: str) -> dict:
    """The YAML between .amdgpu_metadata and .end_amdgpu_metadata, parsed."""
    start = asm.index(".amdgpu_metadata") + len(".amdgpu_metadata")
    end = asm.index(".end_amdgpu_metadata")
    return yaml.safe_load(asm[start:end].strip().removeprefix("---").removesuffix("..."))


def compile_variant(variant, target=None):
    fn = variant["kernel"]
    attrs = {(fn.arg_names.index(arg),): [["tt.divisibility", 16]]
             for arg in variant["divisible_by_16"]}
    # Fusion is pinned explicitly (Triton's default for it is changing between releases).
    options = {"enable_fp_fusion": True, **variant["options"]}
    source = triton.compiler.ASTSource(fn=fn, signature=variant["signature"],
                                       constexprs=variant["constexprs"], attrs=attrs)
    compiled = triton.compile(source, target=target or TARGET, options=options)
    return compiled, options


def sidecar(variant, compiled, options, asm, arch="gfx942"):
    metadata = compiled.metadata
    (kernel_meta,) = code_object_metadata(asm)["amdhsa.kernels"]
    explicit_meta_args = [a for a in kernel_meta[".args"]
                          if not a[".value_kind"].startswith("hidden_")]
    runtime_args = [{"name": name, "type": ty} for name, ty in variant["signature"].items()
                    if ty != "constexpr"]
    extra_args = len(explicit_meta_args) - len(runtime_args)
    if extra_args < 0:
        raise RuntimeError(f"{variant['name']}: metadata lists fewer args than the signature")
    return {
        "name": variant["name"],
        "kernel_symbol": metadata.name,
        "triton_kernel": variant["kernel"].__name__,
        "target": arch,
        "num_warps": metadata.num_warps,
        "block": [WAVE_SIZE * metadata.num_warps, 1, 1],
        "shared_mem_bytes": metadata.shared,
        "shared_mem_note": "Triton's LDS is all dynamic (the asm's group_segment_fixed_size "
                           "is 0); pass shared_mem_bytes as the launch's shared_mem.",
        "signature": variant["signature"],
        "constexprs": variant["constexprs"],
        "divisible_by_16": variant["divisible_by_16"],
        "runtime_args": runtime_args,
        "metadata_explicit_arg_count": len(explicit_meta_args),
        "extra_trailing_pointer_args": extra_args,
        "extra_args_note": "Triton appends global/profile scratch pointers; pass None for them.",
        "global_scratch_size": metadata.global_scratch_size,
        "profile_scratch_size": metadata.profile_scratch_size,
        "options": options,
        "triton_version": triton.__version__,
        "notes": variant["notes"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=sorted(TARGETS), default="gfx942",
                        help="GPU to compile for (default gfx942; gfx950 builds GFX950_VARIANTS)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: tests/fixtures/triton[_gfx950])")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="regenerate only these variants")
    args = parser.parse_args(argv)

    variants = GFX950_VARIANTS if args.target == "gfx950" else VARIANTS
    args.out = args.out or DEFAULT_OUT_DIRS[args.target]
    known = {v["name"] for v in variants}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; known: {sorted(known)}")
    selected = [v for v in variants if not args.only or v["name"] in args.only]

    args.out.mkdir(parents=True, exist_ok=True)
    for variant in selected:
        compiled, options = compile_variant(variant, TARGETS[args.target])
        asm = compiled.asm["amdgcn"]
        info = sidecar(variant, compiled, options, asm, args.target)
        (args.out / f"{variant['name']}.s").write_text(asm)
        (args.out / f"{variant['name']}.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
        print(f"{variant['name']:<28} symbol={info['kernel_symbol']:<28} "
              f"block={info['block'][0]:<4} lds={info['shared_mem_bytes']:<6} "
              f"args={info['metadata_explicit_arg_count']}")
    print(f"wrote {len(selected)} fixture(s) to {args.out} (Triton {triton.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
