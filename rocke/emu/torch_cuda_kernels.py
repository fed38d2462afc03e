"""One CUDA kernel per hot float op of the torch backend on a GPU (ROCKE_EMU_CUDA_KERNELS).

Why: on a GPU the torch backend's time is the number of kernels it runs. An op made of torch
operations runs one kernel per operation: `v_exp_f32`'s float64 polynomial (backend.exp2_f32)
is ~70 of them, the correctly rounded fma ~60, `v_max3_f32`'s IEEE NaN rules ~40, a float add
with the NaN rule ~8. The flash attention fixture spends about a third of its kernels there.
Here each is one elementwise kernel, compiled at run time by torch's jiterator (NVRTC).

The bits are the torch operations' bits, which are numpy's: every float operation is an
explicitly rounded CUDA intrinsic (`__dmul_rn`, `__fadd_rn`, `__fmaf_rn`, ...), which the
compiler never contracts or reorders, in the order backend.py defines; the NaN rule is
backend.nan_rule_f32's, spelled out per op. An fma is the IEEE fused multiply-add, which the
float64 round-to-odd sum of torch_exec._fma_f32 computes too. The CUDA cases of
tests/emu/test_torch_cuda_kernels.py compare each kernel with the torch operations bit for bit
on random words of every kind (NaNs, infinities, subnormals).
"""
from __future__ import annotations

import functools

from . import backend as shared

_FUNCTIONS: dict = {}
# why the kernels cannot run in this process (None: not known yet, "": they can)
_UNAVAILABLE: list = [None]


def _hex(value: float) -> str:
    """An exact C++ literal of a float64."""
    return value.hex()


def _f32_nan_rule() -> str:
    quiet, default = shared.F32_QUIET_BIT, shared.F32_DEFAULT_NAN
    return f"""
template <typename T> T rocke_quiet(T x) {{ return __int_as_float(__float_as_int(x) | {quiet:#x}); }}
template <typename T> T rocke_default_nan(T x) {{ return __int_as_float((int){default:#x}u); }}
template <typename T> T rocke_nan2(T r, T a, T b) {{
  if (!isnan(r)) return r;
  if (isnan(a)) return rocke_quiet(a);
  if (isnan(b)) return rocke_quiet(b);
  return rocke_default_nan(r);
}}
"""


def _exp2_source() -> str:
    """backend.exp2_f32: exp2_f64's operations in its order, rounded to float32, a subnormal
    flushed to a signed zero, a NaN input made quiet."""
    terms = shared.EXP_TERMS
    steps = "\n".join(f"  poly = __dadd_rn(__dmul_rn(poly, t), {_hex(c)});"
                      for c in reversed(terms[:-1]))
    return _f32_nan_rule() + f"""
template <typename T> T rocke_exp2_f32(T x) {{
  if (isnan(x)) return rocke_quiet(x);
  double v = (double)x;
  v = v < -1000.0 ? -1000.0 : (v > 1000.0 ? 1000.0 : v);
  double k = rint(v);
  double t = __dmul_rn(__dsub_rn(v, k), {_hex(shared.LN2)});
  double poly = __dadd_rn(__dmul_rn(t, 0.0), {_hex(terms[-1])});
{steps}
  double half = rint(__dmul_rn(k, 0.5));
  double low = __longlong_as_double(((long long)__dadd_rn(half, 1023.0)) << 52);
  double high = __longlong_as_double(((long long)__dadd_rn(__dsub_rn(k, half), 1023.0)) << 52);
  int bits = __float_as_int(__double2float_rn(__dmul_rn(__dmul_rn(poly, low), high)));
  if ((bits & 0x7F800000) == 0 && (bits & 0x007FFFFF) != 0) bits &= (int)0x80000000u;
  return __int_as_float(bits);
}}
"""


def _fma_source() -> str:
    """torch_exec._fma_f32 without a scale: the fused multiply-add rounded once; a NaN result
    is a NaN operand's (a, then b, then c) made quiet, else the default NaN, and an invalid
    product (inf * 0) is the default NaN whatever c is."""
    return _f32_nan_rule() + """
template <typename T> T rocke_fma_f32(T a, T b, T c) {
  T r = __fmaf_rn(a, b, c);
  if (!isnan(r)) return r;
  if (!isnan(a) && !isnan(b) && ((isinf(a) && b == 0.0f) || (a == 0.0f && isinf(b))))
    return rocke_default_nan(r);
  if (isnan(a)) return rocke_quiet(a);
  if (isnan(b)) return rocke_quiet(b);
  if (isnan(c)) return rocke_quiet(c);
  return rocke_default_nan(r);
}
"""


def _binary_source(name: str, intrinsic: str) -> str:
    """`a op b` rounded once, with the NaN rule over (a, b)."""
    return _f32_nan_rule() + f"""
template <typename T> T rocke_{name}_f32(T a, T b) {{ return rocke_nan2({intrinsic}(a, b), a, b); }}
"""


def _min_max_source() -> str:
    """backend.max_f32 / min_f32 (+0 > -0) with _ieee_min_max_f32's NaN rules: a signaling NaN
    operand gives that NaN made quiet (a before b), else a quiet NaN yields the other operand."""
    quiet = shared.F32_QUIET_BIT
    return f"""
template <typename T> T rocke_ieee_pick(T a, T b, T pick) {{
  int bits = __float_as_int(pick);
  int a_bits = __float_as_int(a), b_bits = __float_as_int(b);
  if (isnan(b)) bits = a_bits;
  if (isnan(a)) bits = b_bits;
  if (isnan(b) && (b_bits & {quiet:#x}) == 0) bits = b_bits | {quiet:#x};
  if (isnan(a) && (a_bits & {quiet:#x}) == 0) bits = a_bits | {quiet:#x};
  return __int_as_float(bits);
}}
template <typename T> T rocke_max(T a, T b) {{
  bool greater = a > b || (a == b && __float_as_int(a) >= 0);
  return rocke_ieee_pick(a, b, greater ? a : b);
}}
template <typename T> T rocke_min(T a, T b) {{
  bool less = a < b || (a == b && __float_as_int(a) < 0);
  return rocke_ieee_pick(a, b, less ? a : b);
}}
"""


_SOURCES = {
    "exp2_f32": _exp2_source,
    "fma_f32": _fma_source,
    "add_f32": lambda: _binary_source("add", "__fadd_rn"),
    "sub_f32": lambda: _binary_source("sub", "__fsub_rn"),
    "mul_f32": lambda: _binary_source("mul", "__fmul_rn"),
    "max_f32": lambda: _min_max_source() + "template <typename T> T rocke_max_f32(T a, T b) "
                                            "{ return rocke_max(a, b); }\n",
    "min_f32": lambda: _min_max_source() + "template <typename T> T rocke_min_f32(T a, T b) "
                                            "{ return rocke_min(a, b); }\n",
    "max3_f32": lambda: _min_max_source() + "template <typename T> T rocke_max3_f32(T a, T b, "
                                             "T c) { return rocke_max(rocke_max(a, b), c); }\n",
    "min3_f32": lambda: _min_max_source() + "template <typename T> T rocke_min3_f32(T a, T b, "
                                             "T c) { return rocke_min(rocke_min(a, b), c); }\n",
}
OPS = tuple(_SOURCES)


def source(op: str) -> str:
    """The CUDA source of `op` (its entry function is the last one)."""
    return _SOURCES[op]()


def enabled(x) -> bool:
    """Whether `x` (a torch tensor) is on a CUDA device, ROCKE_EMU_CUDA_KERNELS is on and the
    kernels can run here (`unavailable`)."""
    if x.device.type != "cuda":
        return False
    from rocke import env
    return env.emu_cuda_kernels() and not unavailable()


def unavailable() -> str:
    """Why the kernels cannot run in this process ("" when they can): torch's jiterator needs
    an NVIDIA CUDA build of torch (a ROCm build's "cuda" device has none) and NVRTC, found by
    compiling and running the smallest kernel once. The ops then run as torch operations."""
    if _UNAVAILABLE[0] is None:
        import torch
        if torch.version.hip is not None or torch.version.cuda is None:
            _UNAVAILABLE[0] = "torch is not an NVIDIA CUDA build (jiterator is CUDA-only)"
        else:
            try:
                run("add_f32", torch.zeros(1, device="cuda"), torch.zeros(1, device="cuda"))
                _UNAVAILABLE[0] = ""
            except RuntimeError as err:     # no NVRTC, or it refuses the source
                _UNAVAILABLE[0] = f"jiterator could not build a kernel: {err}"
    return _UNAVAILABLE[0]


def serves(op: str):
    """Decorator of a torch-operations function of float32 tensors: it runs as kernel `op`
    where `enabled` says so for its first operand, else as itself (same bits either way)."""
    def decorate(fn):
        @functools.wraps(fn)
        def one_kernel_where_possible(*operands):
            if enabled(operands[0]):
                return run(op, *operands)
            return fn(*operands)
        return one_kernel_where_possible
    return decorate


def run(op: str, *operands):
    """`op` on float32 CUDA tensors (broadcast together): a new float32 tensor."""
    function = _FUNCTIONS.get(op)
    if function is None:
        from torch.cuda import jiterator
        function = _FUNCTIONS[op] = jiterator._create_jit_fn(source(op))
    return function(*operands)
