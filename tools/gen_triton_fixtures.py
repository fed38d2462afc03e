"""Regenerate the Triton-compiled gfx942 fixtures that referee rocke's emulator.

Every kernel below is our own Triton code. Triton compiles it for gfx942 (no GPU needed) and
this script writes, per variant, into tests/fixtures/triton/:

    NAME.s     the gfx942 assembly text exactly as Triton's LLVM prints it
    NAME.json  a sidecar: kernel symbol, block size, LDS bytes, signature, constexprs,
               divisibility hints the caller must honour, option values, Triton version,
               and how many arguments the code object's metadata lists.

Run:  .venv/bin/python tools/gen_triton_fixtures.py [--out DIR] [--only NAME ...]

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
TARGET = GPUTarget("hip", "gfx942", 64)
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


# ----------------------------------------------------------------------------------------------
# Variants
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# Compilation and output
# ----------------------------------------------------------------------------------------------


def code_object_metadata(asm: str) -> dict:
    """The YAML between .amdgpu_metadata and .end_amdgpu_metadata, parsed."""
    start = asm.index(".amdgpu_metadata") + len(".amdgpu_metadata")
    end = asm.index(".end_amdgpu_metadata")
    return yaml.safe_load(asm[start:end].strip().removeprefix("---").removesuffix("..."))


def compile_variant(variant):
    fn = variant["kernel"]
    attrs = {(fn.arg_names.index(arg),): [["tt.divisibility", 16]]
             for arg in variant["divisible_by_16"]}
    # Fusion is pinned explicitly (Triton's default for it is changing between releases).
    options = {"enable_fp_fusion": True, **variant["options"]}
    source = triton.compiler.ASTSource(fn=fn, signature=variant["signature"],
                                       constexprs=variant["constexprs"], attrs=attrs)
    compiled = triton.compile(source, target=TARGET, options=options)
    return compiled, options


def sidecar(variant, compiled, options, asm):
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
        "target": "gfx942",
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
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT_DIR,
                        help="output directory (default: tests/fixtures/triton)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="regenerate only these variants")
    args = parser.parse_args(argv)

    known = {v["name"] for v in VARIANTS}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; known: {sorted(known)}")
    selected = [v for v in VARIANTS if not args.only or v["name"] in args.only]

    args.out.mkdir(parents=True, exist_ok=True)
    for variant in selected:
        compiled, options = compile_variant(variant)
        asm = compiled.asm["amdgcn"]
        info = sidecar(variant, compiled, options, asm)
        (args.out / f"{variant['name']}.s").write_text(asm)
        (args.out / f"{variant['name']}.json").write_text(json.dumps(info, indent=2) + "\n")
        print(f"{variant['name']:<28} symbol={info['kernel_symbol']:<28} "
              f"block={info['block'][0]:<4} lds={info['shared_mem_bytes']:<6} "
              f"args={info['metadata_explicit_arg_count']}")
    print(f"wrote {len(selected)} fixture(s) to {args.out} (Triton {triton.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
