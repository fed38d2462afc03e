"""The vLLM 0.33 peer: vLLM's own Triton unified-attention kernels (``kernel_unified_attention``,
2D or 3D by its IS_3D flag, and ``reduce_segments``), compiled by Triton for gfx942 on the CPU and
run in rocke's emulator on rocke's inputs, with exact counters (rocke.perf turns them into
*modelled* MI300X time; nothing here is GPU time).

vLLM's source is not part of this repository. It is read at run time from a vLLM 0.33 wheel, an
unpacked wheel, or an installed vllm (an optional benchmark dependency), in this order:
  1. the ``source`` argument (``benchmarks/profile.py --vllm-wheel PATH``), else
  2. ``ROCKE_VLLM_WHEEL`` (rocke/env.py), else
  3. an installed ``vllm`` package (found with importlib, not imported), else
  4. ``/tmp/vllm/vllm-0.33*.whl`` or ``/tmp/vllm/vllm/`` (where issue 41's
     ``pip download vllm==0.33.0 --no-deps -d /tmp/vllm`` puts it).
A path may be a ``.whl`` file, a directory holding the ``vllm`` package (an unpacked wheel or
site-packages), or the ``vllm`` package directory itself. Only two files are read:
``vllm/v1/attention/ops/triton_unified_attention.py`` (the kernels and the host function
``unified_attention``) and ``vllm/v1/attention/ops/triton_attention_helpers.py`` (its
``@triton.jit`` helpers). They are written to ``.rocke-cache/vllm_peer/`` (gitignored; Triton
reads a jit function's source from its file) and executed with small stand-ins for their
vllm-internal imports (``vllm.envs``, ``vllm.logger``, ``vllm.platforms``, ``vllm.triton_utils``,
``vllm.v1.kv_cache_interface``), so neither the vllm package nor its dependencies are needed.
The stand-ins answer as vLLM does on an MI300X: fp8 is ``float8_e4m3fnuz`` (gfx94x), no device
capability family 100 (the B200-only ``tuned_large_head`` path is off), batch invariance off.

The host side is ours: ``launch_plan`` computes what vLLM 0.33's ``unified_attention``
(vllm/v1/attention/ops/triton_unified_attention.py) and its caller, the Triton backend
(vllm/v1/attention/backends/triton_attn.py: ``TritonAttentionMetadataBuilder.__init__`` and
``TritonAttentionImpl.forward``), choose for these inputs -- BLOCK_M, BLOCK_Q, the tile size, the
grid, the 2D vs 3D rule and the segment count -- and ``run_vllm_peer`` calls vLLM's kernels with
the arguments ``unified_attention`` passes them. Each call is specialized the way Triton's own
JIT launcher would specialize it on an MI300X (Triton's binder: 16-byte divisibility, integers
equal to 1, pointers within 2 GiB for buffer ops), then compiled with Triton's HIP defaults
(4 warps, 2 stages): the code object vLLM would run. Compiled assembly is cached in
``.rocke-cache/vllm_peer/`` keyed by the two files' sha256, the specialization, the options and
the Triton version.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.triton_peer import Compiled  # the compiled-kernel record both peers cache
from rocke.fileio import write_output

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".rocke-cache" / "vllm_peer"
KERNEL_FILE = "v1/attention/ops/triton_unified_attention.py"
HELPERS_FILE = "v1/attention/ops/triton_attention_helpers.py"
VLLM_SERIES = "0.33"        # the release whose host-side launch logic launch_plan mirrors
DOWNLOAD_DIR = Path("/tmp/vllm")

# vLLM 0.33's Triton backend (vllm/v1/attention/backends/triton_attn.py) constants
MIN_LAUNCH_GRID_SIZE_2D = 128       # seq_threshold_3D = MIN_LAUNCH_GRID_SIZE_2D // num_kv_heads
NUM_PAR_SOFTMAX_SEGMENTS = 16       # the 3D kernel's segments (64 only on SM120)
MAX_3D_QUERY_LEN = 8                # triton_unified_attention.MAX_3D_QUERY_LEN
# scheduler defaults: max_num_seqs >= 128 in every usage context of vllm/engine/arg_utils.py,
# so min(seq_threshold_3D, max_num_seqs) is seq_threshold_3D for any KV head count
MAX_NUM_SEQS = 256


def cudagraph_capture_sizes(max_size: int = 512) -> list[int]:
    """vLLM 0.33's default CUDA-graph capture sizes (vllm/config/vllm.py): 1, 2, 4, multiples of
    8 below 256, then multiples of 16 up to the largest graph size (512 by default)."""
    return [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_size + 1, 16))


class VllmNotFound(RuntimeError):
    """No vLLM 0.33 wheel, unpacked wheel or installed vllm to read the kernels from."""


@dataclass(frozen=True)
class VllmSource:
    version: str
    origin: str             # where the files came from (for reports)
    kernel: str             # triton_unified_attention.py's text
    helpers: str            # triton_attention_helpers.py's text

    @property
    def digest(self) -> str:
        return hashlib.sha256((self.kernel + "\0" + self.helpers).encode()).hexdigest()[:20]


def _version_of(text: str) -> str | None:
    m = re.search(r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*"""
                  r"""(?:version\s*=\s*)?['"]([^'"]+)['"]""", text, re.M)
    return m.group(1) if m else None


def _from_wheel(path: Path) -> VllmSource:
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        try:
            kernel = z.read("vllm/" + KERNEL_FILE).decode()
            helpers = z.read("vllm/" + HELPERS_FILE).decode()
        except KeyError as e:
            raise VllmNotFound(f"{path}: not a vLLM wheel with the unified-attention kernels "
                               f"({e})") from None
        version = None
        meta = [n for n in names if n.endswith(".dist-info/METADATA")]
        if meta:
            m = re.search(r"^Version:\s*(\S+)", z.read(meta[0]).decode(), re.M)
            version = m.group(1) if m else None
        if version is None and "vllm/_version.py" in names:
            version = _version_of(z.read("vllm/_version.py").decode())
    return VllmSource(version or "unknown", str(path), kernel, helpers)


def _from_package_dir(pkg: Path, version: str | None = None) -> VllmSource:
    kernel, helpers = pkg / KERNEL_FILE, pkg / HELPERS_FILE
    if not kernel.is_file() or not helpers.is_file():
        raise VllmNotFound(f"{pkg}: no {KERNEL_FILE} / {HELPERS_FILE} (not a vLLM package)")
    if version is None and (pkg / "_version.py").is_file():
        version = _version_of((pkg / "_version.py").read_text())
    return VllmSource(version or "unknown", str(pkg), kernel.read_text(), helpers.read_text())


def _from_path(path: Path) -> VllmSource:
    if path.is_file() and path.suffix == ".whl":
        return _from_wheel(path)
    if path.is_dir():
        if (path / "vllm" / KERNEL_FILE).is_file():
            return _from_package_dir(path / "vllm")
        return _from_package_dir(path)
    raise VllmNotFound(f"{path}: neither a vLLM wheel (.whl) nor a directory holding vllm")


def _installed() -> VllmSource | None:
    import importlib.util
    spec = importlib.util.find_spec("vllm")    # a top-level find_spec imports nothing
    if spec is None or not spec.origin or not spec.submodule_search_locations:
        return None         # none, or a namespace package (a directory named vllm on sys.path)
    version = None
    with contextlib.suppress(Exception):
        from importlib.metadata import version as dist_version
        version = dist_version("vllm")
    return _from_package_dir(Path(list(spec.submodule_search_locations)[0]), version)


def find_vllm(source: str | os.PathLike | None = None) -> VllmSource:
    """vLLM's two unified-attention files (see the module docstring for where they are looked
    for). Raises VllmNotFound when there are none, ValueError when the release is not 0.33."""
    from rocke import env
    if source is None:
        source = env.vllm_wheel()
    if source:
        found = _from_path(Path(source))
    else:
        found = _installed()
        if found is None:
            wheels = sorted(DOWNLOAD_DIR.glob(f"vllm-{VLLM_SERIES}*.whl"))
            if wheels:
                found = _from_wheel(wheels[-1])
            elif (DOWNLOAD_DIR / "vllm" / KERNEL_FILE).is_file():
                found = _from_package_dir(DOWNLOAD_DIR / "vllm")
            else:
                raise VllmNotFound(
                    "no vLLM 0.33 to read the peer's kernels from: pass --vllm-wheel PATH, set "
                    "ROCKE_VLLM_WHEEL, install vllm, or `pip download vllm==0.33.0 --no-deps -d "
                    f"{DOWNLOAD_DIR}`")
    if found.version.split(".")[:2] != VLLM_SERIES.split("."):
        raise ValueError(f"{found.origin} is vLLM {found.version}; the peer mirrors vLLM "
                         f"{VLLM_SERIES}'s launch logic (use a vllm-{VLLM_SERIES}.* wheel)")
    return found


# --- loading the two files with stand-ins for their vllm-internal imports -----------------------

class _Logger(logging.LoggerAdapter):
    def __init__(self, name):
        super().__init__(logging.getLogger(name), {})

    def debug_once(self, msg, *args, **kwargs):
        self.debug(msg, *args)

    info_once = warning_once = debug_once


class _MI300XPlatform:
    """What vLLM's current_platform answers on an MI300X (vllm/platforms/rocm.py), for the
    calls these two files make."""

    @staticmethod
    def fp8_dtype():
        return torch.float8_e4m3fnuz            # RocmPlatform.fp8_dtype on gfx94x

    @staticmethod
    def is_device_capability_family(*args, **kwargs):
        return False

    @staticmethod
    def is_rocm():
        return True

    @staticmethod
    def is_cuda():
        return False


def _stand_ins():
    import enum

    import triton
    import triton.language as tl
    mods = {}

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__path__ = []                      # a package, so submodules resolve under it
        m.__dict__.update(attrs)
        mods[name] = m
        return m

    module("vllm")
    module("vllm.envs", VLLM_BATCH_INVARIANT=False)
    module("vllm.logger", init_logger=_Logger)
    module("vllm.platforms", current_platform=_MI300XPlatform())
    module("vllm.triton_utils", triton=triton, tl=tl, HAS_TRITON=True)
    module("vllm.v1")
    module("vllm.v1.attention")
    module("vllm.v1.attention.ops")

    class KVQuantMode(enum.IntEnum):      # vllm/v1/kv_cache_interface.py (the values used here)
        NONE = 0
        FP8_PER_TENSOR = 1
        INT8_PER_TOKEN_HEAD = 2
        FP8_PER_TOKEN_HEAD = 3
        INT4_PER_TOKEN_HEAD = 4
    module("vllm.v1.kv_cache_interface", KVQuantMode=KVQuantMode)
    return mods


_LOADED: dict = {}


def load_kernels(src: VllmSource):
    """vLLM's kernel module (``kernel_unified_attention``, ``reduce_segments``, ...), executed
    from its own file with the stand-ins in sys.modules only while it loads."""
    if src.digest in _LOADED:
        return _LOADED[src.digest]
    import importlib.util
    os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")
    # Triton 3.9's default (fusion on), said explicitly to quiet its warning about 3.10
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    where = CACHE / f"src-{src.digest}" / "vllm"
    (where / "v1/attention/ops").mkdir(parents=True, exist_ok=True)
    files = {}
    for rel, text in ((HELPERS_FILE, src.helpers), (KERNEL_FILE, src.kernel)):
        f = where / rel
        if not f.exists() or f.read_text() != text:
            write_output(f, text.encode())     # atomic: side-by-side tasks (--jobs, --ray)
        files[rel] = f
    stand_ins = _stand_ins()
    saved = {n: sys.modules.get(n) for n in stand_ins}
    names = {HELPERS_FILE: "vllm.v1.attention.ops.triton_attention_helpers",
             KERNEL_FILE: "vllm.v1.attention.ops.triton_unified_attention"}
    for n in names.values():
        saved[n] = sys.modules.get(n)
    try:
        sys.modules.update(stand_ins)
        loaded = None
        for rel in (HELPERS_FILE, KERNEL_FILE):
            spec = importlib.util.spec_from_file_location(names[rel], files[rel])
            loaded = importlib.util.module_from_spec(spec)
            sys.modules[names[rel]] = loaded
            spec.loader.exec_module(loaded)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    _LOADED[src.digest] = loaded
    return loaded


# --- vLLM 0.33's host-side launch logic, our own code -----------------------------------------

def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _tile_size(head_size: int, sliding_window: int, element_size: int, is_prefill: bool) -> int:
    """triton_unified_attention._get_tile_size: 32 for Gemma3's (window 1024, d 128/256), else
    32 for prefill (2D), 16 for decode (3D) with 2-byte dtypes, 32 for fp8."""
    if sliding_window == 1024 and head_size in (128, 256):
        return 32
    if is_prefill:
        return 32
    return 16 if element_size >= 2 else 32


@dataclass(frozen=True)
class LaunchPlan:
    use_3d: bool
    block_m: int
    block_q: int
    tile_size: int          # the attention kernel's TILE_SIZE
    tile_size_decode: int   # reduce_segments' TILE_SIZE (vLLM passes TILE_SIZE_DECODE)
    grid: tuple             # the attention kernel's grid
    num_segments: int       # NUM_SEGMENTS_PER_SEQ (1 for 2D)
    seq_threshold_3d: int
    scratch_rows: int       # rows of the backend's split-K scratch (query tokens it can hold)
    head_size_padded: int
    sliding_window: int     # SLIDING_WINDOW = 1 + window_size[0] (0: none)

    @property
    def path(self) -> str:
        return "3d" if self.use_3d else "2d"


def launch_plan(num_tokens: int, num_seqs: int, max_seqlen_q: int, num_q_heads: int,
                num_kv_heads: int, head_size: int, element_size: int, window_size,
                causal: bool = True, cudagraphs: bool = True,
                num_speculative_tokens: int = 0) -> LaunchPlan:
    """What vLLM 0.33 launches for these inputs (plain causal attention, no sinks / ALiBi /
    qq-bias / mm-prefix / R-SWA / quantised KV, tensor descriptors off as on ROCm).

    Mirrors, without copying:
      * vllm/v1/attention/backends/triton_attn.py, TritonAttentionMetadataBuilder.__init__:
        seq_threshold_3D = MIN_LAUNCH_GRID_SIZE_2D // num_kv_heads, snapped to the closest
        CUDA-graph capture size when decode graphs are on (vLLM's default); 16 segments (64 only
        on SM120); split-K scratch rows = min(seq_threshold_3D, max_num_seqs) x the longest
        3D query (1, or 1 + speculative tokens up to MAX_3D_QUERY_LEN);
      * vllm/v1/attention/ops/triton_unified_attention.py, unified_attention: BLOCK_M = 16 (or
        the next power of two of the GQA group), BLOCK_Q = BLOCK_M // group, the grid
        (q.shape[0] // BLOCK_Q + num_seqs, num_kv_heads[, segments]), TILE_SIZE from
        _get_tile_size (prefill tile for 2D, decode tile for 3D), and the 2D-vs-3D rule: 3D
        unless max_seqlen_q > 1 with (max_seqlen_q > MAX_3D_QUERY_LEN or non-causal), or
        num_seqs * cdiv(max_seqlen_q, BLOCK_Q) > seq_threshold_3D, or the scratch has fewer rows
        than query tokens."""
    group = num_q_heads // num_kv_heads
    block_m = 16 if group <= 16 else _next_power_of_2(group)
    block_q = block_m // group
    threshold = MIN_LAUNCH_GRID_SIZE_2D // num_kv_heads
    if cudagraphs:
        sizes = cudagraph_capture_sizes()
        threshold = min(sizes, key=lambda x: abs(x - threshold))
    max_query_len_3d = 1
    if num_speculative_tokens:
        max_query_len_3d = min(1 + num_speculative_tokens, MAX_3D_QUERY_LEN)
    rows = min(threshold, MAX_NUM_SEQS) * max_query_len_3d
    window = 1 + window_size[0] if window_size[0] >= 0 else 0
    use_3d = not (
        (max_seqlen_q > 1 and (max_seqlen_q > MAX_3D_QUERY_LEN or not causal))
        or num_seqs * -(-max_seqlen_q // block_q) > threshold)
    if use_3d and rows < num_tokens:
        use_3d = False
    total_q_blocks = num_tokens // block_q + num_seqs
    tile_prefill = _tile_size(head_size, window, element_size, True)
    tile_decode = _tile_size(head_size, window, element_size, False)
    segments = NUM_PAR_SOFTMAX_SEGMENTS if use_3d else 1
    grid = ((total_q_blocks, num_kv_heads, segments) if use_3d
            else (total_q_blocks, num_kv_heads))
    return LaunchPlan(use_3d, block_m, block_q, tile_decode if use_3d else tile_prefill,
                      tile_decode, grid, segments, threshold, rows,
                      _next_power_of_2(head_size), window)


# --- compiling the way Triton's JIT launcher would, and running in the emulator ---------------



def _target():
    from triton.backends.compiler import GPUTarget
    return GPUTarget("hip", "gfx942", 64)


def compile_call(fn, src: VllmSource, kwargs: dict) -> Compiled:
    """Compile vLLM's jit function `fn` for this call's arguments, specialized exactly as
    Triton's launcher (``fn[grid](**kwargs)``) would on an MI300X, for gfx942; cached on disk."""
    import triton
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature
    backend = make_backend(_target())
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    options_in = {"debug": False}
    bound, specialization, options = binder(**kwargs, **options_in)
    key_text = json.dumps([src.digest, fn.__name__, [list(map(str, s)) for s in specialization],
                           {k: str(v) for k, v in bound.items() if _is_constexpr(fn, k)},
                           sorted(options.items()), triton.__version__], sort_keys=True,
                          default=str)
    key = hashlib.sha256(key_text.encode()).hexdigest()[:24]
    path = CACHE / f"{fn.__name__}-{key}.json"
    if path.exists():
        d = json.loads(path.read_text())
        return Compiled.from_json(d)
    opts, signature, constexprs, attrs = fn._pack_args(backend, options_in, bound,
                                                       specialization, options)
    c = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=_target(),
                       options=opts.__dict__)
    asm = c.asm["amdgcn"]
    import yaml
    meta = asm[asm.index(".amdgpu_metadata") + len(".amdgpu_metadata"):
               asm.index(".end_amdgpu_metadata")]
    (kmeta,) = yaml.safe_load(
        meta.strip().removeprefix("---").removesuffix("..."))["amdhsa.kernels"]
    explicit = [a for a in kmeta[".args"] if not a[".value_kind"].startswith("hidden_")]
    runtime = tuple(n for n, t in signature.items() if t != "constexpr")
    compiled = Compiled(asm, c.metadata.name, (64 * c.metadata.num_warps, 1, 1),
                        c.metadata.shared, runtime, len(explicit) - len(runtime))
    CACHE.mkdir(parents=True, exist_ok=True)
    write_output(path, json.dumps(dict(compiled.__dict__, triton=triton.__version__,
                                       vllm=src.version)).encode())   # atomic, as above
    return compiled


def _is_constexpr(fn, name: str) -> bool:
    return any(p.name == name and p.is_constexpr for p in fn.params)


def _launch(c: Compiled, grid, kwargs, profile):
    from rocke.emu import launch
    grid = tuple(grid) + (1,) * (3 - len(grid))
    ordered = [kwargs[n] for n in c.runtime_args] + [None] * c.extra_pointers
    # allow_alias: vLLM passes seq_lens as rswa_prefix_lens too when R-SWA is off (read only)
    return launch(c.asm, c.symbol, grid, c.block, ordered, shared_mem=c.shared, check=False,
                  profile=profile, allow_alias=True)


@dataclass
class PeerRun:
    path: str               # "2d" | "3d"
    plan: LaunchPlan
    reports: list           # one emulator LaunchReport per launch (attention, then reduce)
    names: tuple            # the kernels launched, in order
    vllm: str               # the vLLM version the kernels came from


def run_vllm_peer(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
                  softmax_scale, causal, window_size, block_table, softcap, q_descale=None,
                  k_descale=None, v_descale=None, *, source=None, profile=True) -> PeerRun:
    """Attention into `out` with vLLM 0.33's kernels, given the arguments of rocke's
    run_unified_attention_torch (vLLM's own unified_attention names). Causal (or not), sliding
    window, softcap; no fp8 / quantised KV, sinks, ALiBi (ValueError)."""
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype:
        raise ValueError(f"the vLLM peer runs f16 / bf16 q and cache here, got {q.dtype} / "
                         f"{k.dtype}")
    if not isinstance(causal, bool):
        raise ValueError("the vLLM peer takes a bool causal here (no per-sequence flags)")
    if window_size[1] not in (-1, 0):
        # vLLM's unified_attention reads only window_size[0] (its backend passes right = 0 for
        # causal sliding windows); a right window it would silently ignore is refused here
        raise ValueError(f"the vLLM peer takes no right window, got {window_size}")
    src = find_vllm(source)
    mod = load_kernels(src)
    num_tokens, hq, d = q.shape
    hk = k.shape[2]
    num_seqs = len(seqused_k)
    plan = launch_plan(num_tokens, num_seqs, int(max_seqlen_q), hq, hk, d, q.element_size(),
                       window_size, causal=causal)
    one = torch.ones(1, dtype=torch.float32)
    k_descale = one.expand(num_seqs, hk) if k_descale is None else k_descale
    v_descale = one.expand(num_seqs, hk) if v_descale is None else v_descale
    softcap = softcap or 0      # vLLM's backend passes 0 (an int) for no softcap
    dp = plan.head_size_padded
    rows = plan.scratch_rows
    segm_out = segm_max = segm_sum = None
    if plan.use_3d:     # the backend's scratch (torch.empty, reused across calls in vLLM)
        segm_out = torch.empty(rows, hq, plan.num_segments, dp, dtype=torch.float32)
        segm_max = torch.empty(rows, hq, plan.num_segments, dtype=torch.float32)
        segm_sum = torch.empty(rows, hq, plan.num_segments, dtype=torch.float32)
    # the keyword arguments unified_attention passes kernel_unified_attention (KV_QUANT_MODE
    # NONE, no sinks / ALiBi / qq-bias / mm-prefix / R-SWA / fp8 output, USE_TD off)
    attn_args = dict(
        output_ptr=out, segm_output_ptr=segm_out, segm_max_ptr=segm_max,
        segm_expsum_ptr=segm_sum, query_ptr=q, key_cache_ptr=k, value_cache_ptr=v,
        sink_ptr=None, block_tables_ptr=block_table, seq_lens_ptr=seqused_k,
        alibi_slopes_ptr=None, qq_bias_ptr=None, k_scale_cache_ptr=None,
        v_scale_cache_ptr=None, scale=float(softmax_scale), q_scale=q_descale,
        k_scale=k_descale, v_scale=v_descale, out_scale=1.0, softcap=softcap,
        num_query_heads=hq, num_queries_per_kv=hq // hk,
        block_table_stride=block_table.stride(0), query_stride_0=q.stride(0),
        query_stride_1=q.stride(1), output_stride_0=out.stride(0),
        output_stride_1=out.stride(1), qq_bias_stride_0=0, BLOCK_SIZE=v.shape[1],
        TILE_SIZE=plan.tile_size, HEAD_SIZE=d, HEAD_SIZE_PADDED=dp, USE_ALIBI_SLOPES=False,
        USE_ALIBI_SQRT=False, USE_QQ_BIAS=False, USE_SOFTCAP=softcap > 0, USE_SINKS=False,
        SLIDING_WINDOW=1 + window_size[0], USE_CAUSAL=causal, USE_PER_SEQ_CAUSAL=False,
        per_seq_causal_ptr=None, USE_MM_PREFIX=False, MAX_MM_RANGES=0,
        mm_prefix_range_ptr=None, rswa_prefix_lens_ptr=seqused_k, R_SWA_WINDOW=0,
        USE_R_SWA=False,
        stride_k_cache_0=k.stride(0), stride_k_cache_1=k.stride(1),
        stride_k_cache_2=k.stride(2), stride_k_cache_3=k.stride(3),
        stride_v_cache_0=v.stride(0), stride_v_cache_1=v.stride(1),
        stride_v_cache_2=v.stride(2), stride_v_cache_3=v.stride(3),
        stride_ks_blk=None, stride_ks_slot=None, stride_ks_head=None, stride_vs_blk=None,
        stride_vs_slot=None, stride_vs_head=None, query_start_len_ptr=cu_seqlens_q,
        BLOCK_Q=plan.block_q, num_seqs=num_seqs, BLOCK_M=plan.block_m,
        NUM_SEGMENTS_PER_SEQ=plan.num_segments, USE_FP8=False, IS_3D=plan.use_3d,
        KV_QUANT_MODE=0, Q_IS_FP8=False, CHUNK_LOOKBACK=-1, CHUNK_SIZE=-1, USE_TD=False,
        USE_TD_QO=False, MM_PREFIX_CLAMP_SW=False)
    attn = compile_call(mod.kernel_unified_attention, src, attn_args)
    reports = [_launch(attn, plan.grid, attn_args, profile)]
    names = ("vllm_unified_attention_" + plan.path,)
    if plan.use_3d:
        red_args = dict(
            output_ptr=out, segm_output_ptr=segm_out, segm_max_ptr=segm_max,
            segm_expsum_ptr=segm_sum, seq_lens_ptr=seqused_k, num_seqs=num_seqs,
            num_query_heads=hq, out_scale_inv=1.0, output_stride_0=out.stride(0),
            output_stride_1=out.stride(1), block_table_stride=block_table.stride(0),
            TILE_SIZE=plan.tile_size_decode, HEAD_SIZE=d, HEAD_SIZE_PADDED=dp,
            query_start_len_ptr=cu_seqlens_q, BLOCK_Q=plan.block_q,
            NUM_SEGMENTS_PER_SEQ=plan.num_segments, USE_FP8=False)
        red = compile_call(mod.reduce_segments, src, red_args)
        reports.append(_launch(red, (num_tokens, hq), red_args, profile))
        names += ("vllm_reduce_segments",)
    return PeerRun(plan.path, plan, reports, names, src.version)
