"""Problems to profile a shipped variant on: inputs, launch geometry and DRAM footprint per
family, for `rocke profile` and the calibration script.

A problem is built from `key=value` shape settings over a family's defaults (small, so the
emulator finishes in seconds). `sample_rows` limits the emulated grid to its first rows (all
of grid x, the first rows of y): the model repeats their costs over the full grid, and the full
problem's footprint comes from its tensor sizes (every input byte read once, every output byte
written once). A shape whose tensors would take more than MAX_HOST_BYTES is refused, naming the
bytes, before anything is allocated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i8": torch.int8,
                "i32": torch.int32}


@dataclass
class Problem:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: list
    read_bytes: int         # the full problem's input bytes
    write_bytes: int        # the full problem's output bytes
    flops: int = 0          # useful math of the full problem (matrix multiply-adds x 2)
    shape: dict | None = None

    @property
    def footprint(self) -> int:
        return self.read_bytes + self.write_bytes


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _vector_add(mod, spec, n=65536):
    dt = TORCH_DTYPES[spec.dtype]
    a, b, c = torch.randn(n).to(dt), torch.randn(n).to(dt), torch.zeros(n, dtype=dt)
    grid, block = mod.launch_geometry(spec, n=n)
    return Problem(grid, block, mod.kernel_args(spec, a, b, c), _nbytes(a, b), _nbytes(c))


def _gemm(mod, spec, M=256, N=256, K=256, bias=False):
    inner = getattr(spec, "gemm", spec)
    dt = TORCH_DTYPES[inner.dtype]
    a, b = torch.randn(M, K).to(dt), torch.randn(K, N).to(dt)
    c = torch.zeros(M, N, dtype=dt)
    grid, block = mod.launch_geometry(spec, M, N, K)
    if bias:
        vec = torch.randn(N).to(dt)
        return Problem(grid, block, mod.kernel_args(spec, a, b, vec, c), _nbytes(a, b, vec),
                       _nbytes(c), 2 * M * N * K)
    return Problem(grid, block, mod.kernel_args(spec, a, b, c), _nbytes(a, b), _nbytes(c),
                   2 * M * N * K)


def _flash(mod, spec, B=1, H=2, S=256):
    dt = TORCH_DTYPES[spec.dtype]
    q, k, v = (torch.randn(B, H, S, spec.head_dim).to(dt) for _ in range(3))
    o = torch.zeros_like(q)
    grid, block = mod.launch_geometry(spec, B, H, S)
    pairs = S * (S + 1) // 2 if spec.causal else S * S
    return Problem(grid, block, mod.kernel_args(spec, q, k, v, o), _nbytes(q, k, v), _nbytes(o),
                   4 * B * H * pairs * spec.head_dim)


def _softmax(mod, spec, rows=64, cols=1024):
    dt = TORCH_DTYPES[spec.dtype]
    x, y = torch.randn(rows, cols).to(dt), torch.zeros(rows, cols, dtype=dt)
    grid, block = mod.launch_geometry(spec, rows=rows, cols=cols)
    return Problem(grid, block, mod.kernel_args(spec, x, y), _nbytes(x), _nbytes(y))


def _rmsnorm(mod, spec, rows=64, cols=1024):
    dt = TORCH_DTYPES[spec.dtype]
    x, res, y = (torch.randn(rows, cols).to(dt) for _ in range(3))
    w = torch.randn(cols).to(dt)
    grid, block = mod.launch_geometry(spec, rows=rows, cols=cols)
    return Problem(grid, block, mod.kernel_args(spec, x, res, w, y), _nbytes(x, res, w),
                   _nbytes(res, y))


# family -> (builder, its shape keys)
BUILDERS = {
    "vector_add": (_vector_add, ("n",)),
    "gemm": (_gemm, ("M", "N", "K")),
    "gemm_bias_gelu": (lambda m, s, **kw: _gemm(m, s, bias=True, **kw), ("M", "N", "K")),
    "flash_attention": (_flash, ("B", "H", "S")),
    "softmax": (_softmax, ("rows", "cols")),
    "rmsnorm_residual": (_rmsnorm, ("rows", "cols")),
}


# The host memory a problem's tensors may take: the emulator runs on the host, and a problem
# beyond this would not finish in it anyway (the defaults take well under 1 MiB).
MAX_HOST_BYTES = 4 << 30


# family -> the element count of each tensor its builder allocates, by the builder's defaults
# (checked against the builders by tests/reliability/test_refused_before_work.py), and the
# spec's dtype
def _vector_add_tensors(spec, n=65536):
    return spec.dtype, {"a": n, "b": n, "c": n}


def _gemm_tensors(spec, M=256, N=256, K=256, bias=False):
    sizes = {"a": M * K, "b": K * N, "c": M * N}
    return getattr(spec, "gemm", spec).dtype, {**sizes, **({"bias": N} if bias else {})}


def _flash_tensors(spec, B=1, H=2, S=256):
    each = B * H * S * spec.head_dim
    return spec.dtype, {"q": each, "k": each, "v": each, "o": each}


def _softmax_tensors(spec, rows=64, cols=1024):
    return spec.dtype, {"x": rows * cols, "y": rows * cols}


def _rmsnorm_tensors(spec, rows=64, cols=1024):
    return spec.dtype, {"x": rows * cols, "residual": rows * cols, "weight": cols,
                        "y": rows * cols}


TENSORS = {
    "vector_add": _vector_add_tensors,
    "gemm": _gemm_tensors,
    "gemm_bias_gelu": lambda s, **kw: _gemm_tensors(s, bias=True, **kw),
    "flash_attention": _flash_tensors,
    "softmax": _softmax_tensors,
    "rmsnorm_residual": _rmsnorm_tensors,
}


def _family_module(variant):
    import importlib
    from ..kernels.registry import families
    return importlib.import_module(families()[variant.family][0])


def _declared(variant):
    """(problem builder, tensors function, shape keys) a family module declares for `rocke
    profile`: ``profile_problem(spec, **shape) -> Problem`` and ``profile_tensors(spec,
    **shape) -> (dtype, {tensor name: elements or (elements, dtype)})`` (what the builder will
    allocate, so a shape is checked before anything is; a tensor of another dtype than the
    family's names its own), the shape keys being profile_problem's keyword parameters;
    None when the module declares neither."""
    import inspect
    mod = _family_module(variant)
    problem, tensors = getattr(mod, "profile_problem", None), getattr(mod, "profile_tensors", None)
    if problem is None and tensors is None:
        return None
    if problem is None or tensors is None:
        missing = "profile_problem" if problem is None else "profile_tensors"
        raise ValueError(f"family {variant.family!r} ({mod.__name__}) declares only one of "
                         f"profile_problem and profile_tensors; define {missing} too (the "
                         f"tensors function lets a shape be checked before anything is allocated)")
    keys = tuple(name for name, p in list(inspect.signature(problem).parameters.items())[1:]
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return problem, tensors, keys


def host_bytes(variant, shape: dict[str, int]) -> tuple[int, dict[str, int]]:
    """(total, bytes per tensor) of the tensors `build_problem(variant, shape)` allocates,
    computed without allocating anything."""
    tensors = TENSORS.get(variant.family) or _declared(variant)[1]
    dtype, sizes = tensors(variant.spec, **shape)
    per = {}
    for name, numel in sizes.items():
        numel, elem = numel if isinstance(numel, tuple) else (numel, dtype)
        if elem not in TORCH_DTYPES:
            raise ValueError(f"family {variant.family!r}: tensor {name!r} has dtype {elem!r}; "
                             f"profile tensors are {', '.join(TORCH_DTYPES)}")
        per[name] = numel * torch.empty((), dtype=TORCH_DTYPES[elem]).element_size()
    return sum(per.values()), per


def parse_shape(text: str | None) -> dict[str, int]:
    """'M=512,N=256' -> {'M': 512, 'N': 256}; a clear error for anything else (a key given
    twice included)."""
    out: dict[str, int] = {}
    if not text:
        return out
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"--shape: expected key=value pairs separated by commas, got {item!r}")
        try:
            number = int(value.strip())
        except ValueError:
            raise ValueError(f"--shape: {key} must be an integer, got {value.strip()!r}") from None
        if number < 1:
            raise ValueError(f"--shape: {key} must be >= 1, got {number}")
        if key in out:
            raise ValueError(f"--shape: {key} is given twice ({key}={out[key]} and "
                             f"{key}={number}); give each key once")
        out[key] = number
    return out


def build_problem(variant, shape: dict[str, int]) -> Problem:
    """The problem for `variant` (a rocke.kernels.registry.Variant) at `shape` over its family's
    defaults; ValueError names what is wrong before anything runs."""
    declared = None if variant.family in BUILDERS else _declared(variant)
    if variant.family not in BUILDERS and declared is None:
        raise ValueError(f"rocke profile has no problem builder for family {variant.family!r} "
                         f"(it has {', '.join(BUILDERS)}; a family declares its own with "
                         "profile_problem and profile_tensors in its module, "
                         "docs/writing-kernels.md); profile the unified attention kernels "
                         "through benchmarks/profile.py")
    if declared is not None:
        builder, keys = (lambda mod, spec, **kw: declared[0](spec, **kw)), declared[2]
    else:
        builder, keys = BUILDERS[variant.family]
    unknown = sorted(set(shape) - set(keys))
    if unknown:
        raise ValueError(f"--shape: {variant.family} takes {', '.join(keys)}; unknown "
                         f"{', '.join(unknown)}")
    need, per = host_bytes(variant, shape)
    if need > MAX_HOST_BYTES:
        given = ",".join(f"{k}={v}" for k, v in shape.items())
        raise ValueError(f"--shape {given}: {variant.name}'s tensors would need {need:,} bytes "
                         f"of host memory (" + ", ".join(f"{n} {b:,}" for n, b in per.items())
                         + f"), over rocke profile's limit of {MAX_HOST_BYTES:,} bytes "
                         f"({MAX_HOST_BYTES >> 30} GiB); profile a smaller shape")
    problem = builder(_family_module(variant), variant.spec, **shape)
    if not isinstance(problem, Problem):
        raise ValueError(f"family {variant.family!r}: its problem builder returned "
                         f"{type(problem).__name__}, not a rocke.perf.problems.Problem")
    problem.shape = shape
    return problem


def sample_grid(grid: tuple[int, int, int], sample_rows: int | None) -> tuple[int, int, int]:
    """The emulated grid: all of x and the first `sample_rows` rows of y (z = 1), or the grid."""
    if sample_rows is None or grid[1] * grid[2] <= sample_rows:
        return grid
    return (grid[0], sample_rows, 1)


def workgroups(grid) -> int:
    return math.prod(grid)
