"""What the two attention harnesses share: the shape record, scaling a shape down for a CPU,
the dense -> paged input mapping (``make_inputs``), the cost estimate, progress bars, timing
reduction, the JSON report, and running the shape grid through rocke.tasks (``--jobs N``,
``--ray [ADDRESS]``: one task per shape, serial by default; ``run_shapes``).

Nothing here computes attention: kernels, the dispatcher, the knobs and the fp32 reference all
live in ``rocke.kernels``. This module only feeds them and prints what they did.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:      # run the rocke of the checkout this script sits in
    sys.path.insert(0, str(REPO_ROOT))

from rocke import env  # noqa: E402
from rocke.kernels.common.attention_unified import attention_target  # noqa: E402

SUPPORTED_HEAD_SIZES = attention_target().CAPABILITIES.head_sizes

BLOCK_SIZE = 64                 # cache block (page) size of every harness shape
INPUT_RANGE = 0.1               # inputs ~ uniform(-0.1, 0.1): small, well-conditioned scores
TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
NAME_DTYPES = {"f16": "fp16", "bf16": "bf16"}
#: why a shape whose head size the dispatcher does not take is SKIP, not run (d256 is taken
#: since the tiled d256 path; the old name D256_SKIP_REASON stays an alias for callers)
UNSUPPORTED_HEAD_SIZE_REASON = f"head_size not taken by the dispatcher ({SUPPORTED_HEAD_SIZES})"
D256_SKIP_REASON = UNSUPPORTED_HEAD_SIZE_REASON
#: --quick caps every KV length at this (same shape names, scaled lengths).
QUICK_MAX_KV = 1024
#: Emulated attention FLOPs (``kernel_flops``) per second of emulator wall time: measured on the
#: 2-core development host, shared with other jobs, over ``parity_unified_attention.py --quick
#: --scenario default`` (58 GFLOP in 186 s of emulator time over the three tables; the 2D
#: kernels run ~0.6, the forced 3D path on prefill ~0.2). Only a first guess: each run
#: refines it from its own launches.
EMU_FLOPS_PER_S_GUESS = 0.32e9
#: The same with the emulator's torch backend on a CUDA GPU (ROCKE_EMU_BACKEND=torch
#: ROCKE_EMU_DEVICE=cuda): measured on a lent NVIDIA H200, race checker off, over
#: ``final_shapes_check.py``'s 16 unscaled shapes (20.8 GFLOP/s on 2026-12-02, in 207 s, with
#: the hot float ops as one CUDA kernel each; 16.4 before, 12.7 before compares stayed on the
#: device inside stretches).
EMU_CUDA_FLOPS_PER_S_GUESS = 20.8e9
#: Emulator wall time of a launch that does next to no work (decode, a handful of workgroups),
#: measured on the same host; added per launch so tiny shapes are not estimated at zero.
EMU_LAUNCH_OVERHEAD_S = 0.1
LONG_RUN_WARNING_S = 600.0
#: exit status for bad input (an unknown shape, lever or device, an unwritable --report),
#: refused before any work -- argparse's own status for a bad flag; 1 stays "a FAIL or ERROR"
EXIT_USAGE = 2


class UsageError(SystemExit):
    """Bad input: its one line was printed on stderr; the process exits ``EXIT_USAGE``."""

    def __init__(self, message: str):
        super().__init__(EXIT_USAGE)
        self.message = message

    def __str__(self) -> str:
        return f"error: {self.message}"


def refuse(message: str) -> UsageError:
    """Print ``error: message`` on stderr and return the exception to raise (exit 2)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    return UsageError(message)


# ---------------------------------------------------------------------------------------------
# shapes

@dataclass(frozen=True)
class Shape:
    """One attention problem: a batch of sequences, each ``(query_len, kv_len)``, causal
    (bottom-right aligned; a query_len 1 row sees every key)."""
    name: str
    dtype: str                  # "f16" | "bf16"
    num_heads: int
    num_kv_heads: int
    head_size: int
    seqlens: tuple[tuple[int, int], ...]
    covers: str = ""            # what the shape is in the set for
    scaled_from: tuple[tuple[int, int], ...] | None = None
    # rocke's side of the row: "unified" (the paged dispatcher) or "dense" (rocke.dense_attention
    # on the dense [B, S, H, D] twin: uniform square causal batches, head size 128)
    kernel: str = "unified"

    def __post_init__(self):
        if self.dtype not in TORCH_DTYPES:
            raise ValueError(f"{self.name}: dtype must be one of {sorted(TORCH_DTYPES)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.name}: num_heads {self.num_heads} is not a multiple of "
                             f"num_kv_heads {self.num_kv_heads}")
        for q, k in self.seqlens:
            if not 1 <= q <= k:
                raise ValueError(f"{self.name}: causal needs 1 <= query_len <= kv_len, got {q}x{k}")
        if self.kernel not in ("unified", "dense"):
            raise ValueError(f"{self.name}: kernel must be 'unified' or 'dense', got {self.kernel!r}")
        if self.kernel == "dense" and (len(set(self.seqlens)) != 1 or self.seqlens[0][0] != self.seqlens[0][1]
                                       or self.head_size != 128):
            raise ValueError(f"{self.name}: the dense kernel takes a uniform square batch at head "
                             f"size 128, got {self.seqlens[0]} x{self.batch}, d{self.head_size}")

    @property
    def batch(self) -> int:
        return len(self.seqlens)

    @property
    def group(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def max_q(self) -> int:
        return max(q for q, _ in self.seqlens)

    @property
    def max_k(self) -> int:
        return max(k for _, k in self.seqlens)

    @property
    def total_q(self) -> int:
        return sum(q for q, _ in self.seqlens)

    @property
    def uniform(self) -> bool:
        return len(set(self.seqlens)) == 1

    @property
    def kind(self) -> str:
        if self.max_q == 1:
            return "decode"
        if all(q == k for q, k in self.seqlens):
            return "prefill"
        if any(q == 1 for q, _ in self.seqlens):
            return "mixed"
        return "chunked"

    @property
    def supported(self) -> bool:
        return self.head_size in SUPPORTED_HEAD_SIZES

    def describe(self) -> str:
        lens = (f"{self.batch}x {self.seqlens[0][0]}x{self.seqlens[0][1]}" if self.uniform
                else " ".join(f"{q}x{k}" for q, k in self.seqlens))
        text = (f"{NAME_DTYPES[self.dtype]} h{self.num_heads}/kv{self.num_kv_heads} "
                f"d{self.head_size} q x kv: {lens}")
        if self.scaled_from is not None:
            text += f" (scaled from max kv {max(k for _, k in self.scaled_from)})"
        return text


def dense(dtype, heads, kv_heads, batch, seqlen_q, seqlen_k, head_size, covers="", name=None,
          kernel="unified"):
    """A uniform batch, named ``<dtype>_h<heads>kv<kv_heads>_b<batch>_s<q>x<k>_d<head_size>``,
    e.g. ``fp16_h32kv8_b1_s2048x2048_d128`` (``kernel="dense"``: prefixed ``dense_``)."""
    name = name or (f"{'dense_' if kernel == 'dense' else ''}{NAME_DTYPES[dtype]}_h{heads}"
                    f"kv{kv_heads}_b{batch}_s{seqlen_q}x{seqlen_k}_d{head_size}")
    return Shape(name, dtype, heads, kv_heads, head_size, ((seqlen_q, seqlen_k),) * batch, covers,
                 kernel=kernel)


def decode(dtype, heads, kv_heads, batch, seqlen_k, head_size, covers="", name=None):
    """A decode batch (query_len 1), named ``decode_fp16_h32kv8_b4_q1k1024_d128``."""
    name = name or (f"decode_{NAME_DTYPES[dtype]}_h{heads}kv{kv_heads}_b{batch}_q1k{seqlen_k}"
                    f"_d{head_size}")
    return Shape(name, dtype, heads, kv_heads, head_size, ((1, seqlen_k),) * batch, covers)


def varlen(name, dtype, heads, kv_heads, head_size, seqlens, covers=""):
    return Shape(name, dtype, heads, kv_heads, head_size, tuple(map(tuple, seqlens)), covers)


def scale_shape(shape: Shape, max_kv: int | None) -> Shape:
    """The same shape (same name, heads, dtype, batch) with every KV length scaled by one
    factor so the longest is ``max_kv``; query lengths scale with it, decode rows stay 1 and a
    chunk (query_len < kv_len) stays a chunk. Shapes already within ``max_kv`` are unchanged."""
    if max_kv is None or shape.max_k <= max_kv:
        return shape
    factor = max_kv / shape.max_k
    scaled = []
    for q, k in shape.seqlens:
        k2 = max(1, round(k * factor))
        q2 = 1 if q == 1 else min(k2, max(1, round(q * factor)))
        if q < k and q2 >= k2 and k2 > 1:
            q2 = k2 - 1
        scaled.append((q2, k2))
    return replace(shape, seqlens=tuple(scaled), scaled_from=shape.seqlens)


def select(groups: dict[str, list[Shape]], selectors: list[str],
           all_word: str | None) -> list[Shape]:
    """Shapes named by ``selectors`` (group names, ``all_word`` for every group, or exact
    shape names), in set order, without duplicates. Unknown names are an error listing what
    exists, raised before any work."""
    by_name = {s.name: s for shapes in groups.values() for s in shapes}
    chosen: dict[str, Shape] = {}
    for sel in selectors:
        if all_word is not None and sel == all_word:
            picked = [s for shapes in groups.values() for s in shapes]
        elif sel in groups:
            picked = groups[sel]
        elif sel in by_name:
            picked = [by_name[sel]]
        else:
            words = sorted(groups) + ([all_word] if all_word else [])
            raise refuse(f"unknown group or shape {sel!r}; groups: {', '.join(words)}; "
                         f"shapes: {', '.join(by_name)}")
        for s in picked:
            chosen.setdefault(s.name, s)
    return list(chosen.values())


def problem_key(shape: Shape) -> tuple:
    """Shapes with equal keys are the same problem (e.g. S2048 and S4096 both scaled to 1024)."""
    return (shape.dtype, shape.num_heads, shape.num_kv_heads, shape.head_size, shape.seqlens)


def first_of_each_problem(shapes: list[Shape]) -> dict[str, str]:
    """shape name -> name of the first shape with the same problem (itself if first)."""
    first: dict[tuple, str] = {}
    return {s.name: first.setdefault(problem_key(s), s.name) for s in shapes}


def run_shapes(shapes, groups, task, settings, report_path=None, report=None, engine=None,
               rate=None) -> list[dict]:
    """Run every shape of the grid as one task of rocke.tasks on ``engine`` (None: serially,
    here): ``task((shape, settings))`` -- a module-level function, its argument plain data --
    returns ``in_task``'s answer. ``settings`` gains the run's levers (``task_environ``) and
    ``serial`` (side by side, a task draws no progress bar and uses one CPU). A shape that is
    the same problem as an earlier one after scaling is run once and reuses that shape's rows.

    One progress line per shape as its task finishes, with the seconds it took (compiles
    included) and its place in the grid (with --jobs / --ray tasks finish in any order); a
    reused shape's line once every shape before it has one. What a task printed comes just
    before its line. After every line the report of the rows so far (in the grid's order),
    ``report(rows)``, is rewritten at ``report_path`` (if given). Returns the rows in the
    grid's order, whatever the engine: the tables and the report are the serial run's.
    ``rate`` (an EmuRate) is refined from every task's launches."""
    from rocke import tasks
    engine = engine or tasks.Engine("serial", 1)
    first = first_of_each_problem(shapes)
    runs = [i for i, s in enumerate(shapes) if first[s.name] == s.name]
    index_of = {s.name: i for i, s in enumerate(shapes)}
    settings = dict(settings, environ=task_environ(engine), serial=engine.kind == "serial")
    if engine.kind == "ray":
        ship_by_value()
    found: dict[int, list[dict]] = {}           # grid index -> its rows, once known
    start = time.perf_counter()

    def finished(index: int, rows: list[dict], line: str) -> None:
        found[index] = rows
        print(f"[{index + 1}/{len(shapes)}] {shapes[index].name}: {line}   "
              f"({shapes[index].describe()})", flush=True)
        if report_path:
            write_partial_report(report_path, report(so_far()), len(found), len(shapes))

    def so_far() -> list[dict]:
        return [r for i in sorted(found) for r in found[i]]

    def reused_in_turn() -> None:
        """The reused shapes whose every predecessor in the grid has its line."""
        for i, shape in enumerate(shapes):
            if i not in found and first[shape.name] != shape.name and \
                    all(j in found for j in range(i)):
                source = found[index_of[first[shape.name]]]
                finished(i, [reuse_row(r, shape, groups_of(groups, shape.name)) for r in source],
                         f"same problem as {first[shape.name]} after scaling, result reused")

    answers = tasks.run(task, [(shapes[i], settings) for i in runs], engine)
    try:
        for k, answer in answers:
            i = runs[k]
            if answer["printed"]:
                sys.stdout.write(answer["printed"])
            if rate is not None:
                rate.merge(answer["flops"], answer["emulated_s"])
            took = format_seconds(answer["seconds"])
            finished(i, answer["rows"], f"{answer['status']} in {took}")
            reused_in_turn()
    except tasks.TaskFailed as exc:
        raise failed(f"{exc}; the shapes finished are in the report"
                     if report_path else str(exc)) from None
    finally:
        answers.close()
    if engine.kind != "serial":
        print(f"{len(runs)} shapes run as tasks on {engine.describe()}, "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return so_far()




def task_environ(engine) -> dict[str, str | None]:
    """The levers each task runs with: rocke.env.RESULT_LEVERS and every HIPDNN_GFX942_* variable as this
    process has them (None: unset). Shapes run side by side (--jobs, --ray) emulate in one
    process each -- ROCKE_EMU_WORKERS=1 unless it is set -- as each task holds one CPU."""
    from rocke.kernels.common.knobs import PREFIX
    environ = {name: os.environ.get(name) for name in env.RESULT_LEVERS}
    environ.update((name, value) for name, value in os.environ.items() if name.startswith(PREFIX))
    if engine.kind != "serial" and environ["ROCKE_EMU_WORKERS"] is None:
        environ["ROCKE_EMU_WORKERS"] = "1"
    return environ


@contextlib.contextmanager
def applied_environ(environ: dict[str, str | None]):
    """``environ`` (``task_environ``'s) in os.environ for the block -- a HIPDNN_GFX942_* lever
    it does not name is unset -- and the old values back afterwards."""
    from rocke.kernels.common.knobs import PREFIX
    names = set(environ) | {n for n in os.environ if n.startswith(PREFIX)}
    old = {name: os.environ.get(name) for name in names}

    def put(values):
        for name in names:
            value = values.get(name)
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    put(environ)
    try:
        yield
    finally:
        put(old)


def in_task(settings: dict, body) -> dict:
    """A task's answer, plain data for rocke.tasks to carry back: ``body()`` -- ``(rows, status
    text, EmuRate of its launches)`` -- run with the run's levers (``settings["environ"]``),
    what it printed kept (printed by the driver before the shape's line), its wall seconds."""
    printed = io.StringIO()
    start = time.perf_counter()
    threads = torch.get_num_threads()
    if not settings["serial"]:          # side by side: one CPU a task, torch's threads too
        torch.set_num_threads(1)
    try:
        with applied_environ(settings["environ"]), contextlib.redirect_stdout(printed):
            rows, status, rate = body()
    finally:
        torch.set_num_threads(threads)
    return dict(rows=rows, status=status, flops=rate.flops, emulated_s=rate.seconds,
                printed=printed.getvalue(), seconds=time.perf_counter() - start)


def ship_by_value() -> None:
    """Ray workers cannot import the harness modules (examples/ is no package; a worker's path
    is not the script's): cloudpickle sends them, the task function with them, by value."""
    from ray import cloudpickle
    here = Path(__file__).resolve().parent
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and module.__name__ != "__main__" and Path(path).resolve().parent == here:
            cloudpickle.register_pickle_by_value(module)


def failed(message: str) -> SystemExit:
    """Print ``error: message`` on stderr and return the exception to raise (exit 1: the run
    did not finish)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    return SystemExit(1)


def reuse_row(row: dict, shape: Shape, groups: list[str]) -> dict:
    """``row`` (measured for an identical earlier problem) relabelled for ``shape``: a scaled
    run measures each distinct problem once and says which rows share a result."""
    out = dict(row, **shape_record(shape, groups))
    out["reused_from"] = row["shape"]
    return out


def groups_of(groups: dict[str, list[Shape]], name: str) -> list[str]:
    return [g for g, shapes in groups.items() if any(s.name == name for s in shapes)]


# ---------------------------------------------------------------------------------------------
# inputs

def make_inputs(shape: Shape, device: str, seed: int = 0) -> dict:
    """The paged problem of ``shape``: packed q/out ``[total_q, Hq, D]``, caches ``[num_blocks,
    64, Hk, D]`` where each sequence owns a contiguous, non-overlapping run of blocks, the
    block table, ``cu_seqlens_q`` and ``seqused_k``. Values ~ uniform(-0.1, 0.1)."""
    gen = torch.Generator().manual_seed(seed)
    dt = TORCH_DTYPES[shape.dtype]
    d, hq, hk = shape.head_size, shape.num_heads, shape.num_kv_heads
    blocks = [-(-k // BLOCK_SIZE) for _, k in shape.seqlens]
    num_blocks, width = sum(blocks), max(blocks)

    def uniform(*size):
        return ((torch.rand(*size, generator=gen) * 2 - 1) * INPUT_RANGE).to(dt)

    q = uniform(shape.total_q, hq, d)
    k_cache = uniform(num_blocks, BLOCK_SIZE, hk, d)
    v_cache = uniform(num_blocks, BLOCK_SIZE, hk, d)
    table = torch.zeros(shape.batch, width, dtype=torch.int32)
    first = 0
    for s, n in enumerate(blocks):
        table[s, :n] = torch.arange(first, first + n, dtype=torch.int32)
        first += n
    cu = [0]
    for qlen, _ in shape.seqlens:
        cu.append(cu[-1] + qlen)
    tensors = dict(
        q=q, k=k_cache, v=v_cache, out=torch.empty_like(q),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        seqused_k=torch.tensor([k for _, k in shape.seqlens], dtype=torch.int32),
        block_table=table)
    tensors = {key: t.to(device) for key, t in tensors.items()}
    tensors.update(max_seqlen_q=shape.max_q, max_seqlen_k=shape.max_k,
                   softmax_scale=1.0 / math.sqrt(d))
    return tensors


#: Above this many bytes of fp32 scores (one sequence, all heads) the reference runs one KV
#: head's query group at a time: S8192 x 32 heads would otherwise need ~26 GB.
REFERENCE_CHUNK_BYTES = 1 << 30


def reference(shape: Shape, inputs: dict) -> torch.Tensor:
    """The fp32 paged reference (``ref_paged_attn``) on the CPU; per KV-head group for big
    shapes (the groups are independent problems: query heads [h*G, (h+1)*G) see KV head h)."""
    from rocke.kernels.common.attention_reference import ref_paged_attn
    t = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    common = (t["cu_seqlens_q"], t["seqused_k"], t["block_table"], t["softmax_scale"])
    scores = 4 * shape.num_heads * max(q * k for q, k in shape.seqlens)
    if scores <= REFERENCE_CHUNK_BYTES:
        return ref_paged_attn(t["q"], t["k"], t["v"], *common, causal=True)
    g = shape.group
    out = torch.empty(shape.total_q, shape.num_heads, shape.head_size, dtype=torch.float32)
    for h in range(shape.num_kv_heads):
        out[:, h * g:(h + 1) * g] = ref_paged_attn(
            t["q"][:, h * g:(h + 1) * g], t["k"][:, :, h:h + 1], t["v"][:, :, h:h + 1], *common,
            causal=True)
    return out


def tolerance(shape: Shape, override: float | None) -> float:
    from rocke.kernels.common.tolerances import attention_atol
    return override if override is not None else attention_atol(shape.dtype)


def max_abs_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref|; NaN/inf anywhere (e.g. a row the kernel never wrote) is +inf."""
    diff = (out.detach().float().cpu() - ref).abs()
    if not torch.isfinite(diff).all():
        return math.inf
    return float(diff.max()) if diff.numel() else 0.0


def print_worst_mismatches(shape: Shape, out: torch.Tensor, ref: torch.Tensor, count: int,
                           cu_seqlens_q: torch.Tensor) -> None:
    """The ``count`` largest |out - ref| elements with their (sequence, token, head, dim)."""
    diff = (out.detach().float().cpu() - ref).abs().nan_to_num(nan=math.inf)
    flat = diff.flatten()
    top = torch.topk(flat, min(count, flat.numel()))
    cu = cu_seqlens_q.cpu().tolist()
    _, hq, d = ref.shape
    print(f"    worst {len(top.indices)} mismatches of {shape.name}:")
    print(f"    {'seq':>4} {'token':>6} {'head':>5} {'dim':>4} {'kernel':>12} {'ref':>12} "
          f"{'|err|':>10}")
    for idx in top.indices.tolist():
        token, rest = divmod(idx, hq * d)
        head, dim = divmod(rest, d)
        seq = max(s for s in range(len(cu) - 1) if cu[s] <= token)
        got = float(out.reshape(-1)[idx].float())
        print(f"    {seq:>4} {token:>6} {head:>5} {dim:>4} {got:>12.5g} "
              f"{float(ref.reshape(-1)[idx]):>12.5g} {float(flat[idx]):>10.3g}")


def inject_error(out: torch.Tensor, amount: float = 1.0) -> None:
    """Test-only (hidden ``--inject-error`` flag): corrupt one output element after the kernel
    ran, so the tests can prove the correctness gate fails a wrong result (``amount`` in the
    tensor's own units; through f32, which every output dtype, fp8 included, converts to)."""
    flat = out.view(-1)
    i = out.numel() // 2
    flat[i] = (flat[i].float() + amount).to(out.dtype)


# ---------------------------------------------------------------------------------------------
# device, levers

#: the processors the harnesses' kernels are built for (``--target``): on the emulator
#: (ROCKE_DEVICE=emu:gfx950), or on a HIP GPU of that processor
TARGETS = ("gfx942", "gfx950")


def add_target_flag(parser) -> None:
    parser.add_argument("--target", choices=TARGETS, default=None,
                        help="processor the kernels are built for (default: ROCKE_DEVICE's "
                             "emulator target, else gfx942; with --device hip, the GPU's)")


def add_compile_only_flag(parser) -> None:
    parser.add_argument("--compile-only", action="store_true",
                        help="plan every selected shape as the run would and build its kernels "
                             "into the compile cache (ROCKE_CACHE_DIR), launching nothing: run "
                             "on a machine with LLVM's tools for one without (a CUDA GPU "
                             "emulating)")


def add_engine_flags(parser) -> None:
    """``--jobs N`` and ``--ray [ADDRESS]``: how the shape grid runs (``choose_engine``)."""
    from rocke import tasks
    tasks.add_arguments(parser, "shape")


def choose_engine(args, device: str):
    """The rocke.tasks engine of ``--jobs`` / ``--ray`` (serial without them), or one line and
    exit 2 before any work: --jobs below 1, --ray without Ray installed or with a bad address,
    either with --compile-only (which builds serially) or on a GPU (hip, or the emulator on
    CUDA: shapes side by side would share it, and skew its timings)."""
    from rocke import tasks
    side_by_side = args.ray is not None or (args.jobs or 1) > 1
    if side_by_side and getattr(args, "compile_only", False):
        raise refuse("--jobs / --ray run the shapes' launches; --compile-only builds serially: "
                     "drop one")
    if side_by_side and torch_device(device) == "cuda":
        where = "the HIP GPU" if device == "hip" else "the CUDA GPU the emulator runs on"
        raise refuse(f"--jobs / --ray run shapes side by side, which would share {where} and "
                     "skew its timings: drop them (a GPU runs the shapes serially)")
    try:
        return tasks.from_arguments(args.jobs, args.ray)
    except tasks.EngineError as exc:
        raise refuse(str(exc)) from None


def compile_shapes(shapes: list[Shape], first: dict[str, str], build) -> int:
    """--compile-only: ``build(shape)`` plans and builds a problem's kernels on CPU tensors (a
    plan is the target's alone: the same on a CUDA GPU's tensors) and says what it built; once
    per problem after scaling. Returns 1 if any raised."""
    failed = 0
    for shape in shapes:
        if not shape.supported or first[shape.name] != shape.name:
            continue
        try:
            text = build(shape)
        except Exception as exc:
            failed += 1
            text = f"ERROR: {type(exc).__name__}: {exc}"
        print(f"  {shape.name:<42} {text}")
    print(f"compiled: {f'FAILED {failed}' if failed else 'every shape'}; kernels in the compile "
          "cache (ROCKE_CACHE_DIR) unless the prebuilt bundle serves them (ROCKE_PREBUILT=off "
          "builds those too)")
    return 1 if failed else 0


def current_target() -> str:
    """The processor this run's kernels are built for (after ``resolve_device``): the HIP GPU's,
    else the emulator's."""
    from rocke import env, runtime
    if env.device() == "hip":
        return runtime.get_device("hip").arch.split(":", 1)[0]
    return env.emu_target()


def relax_gc_when_emulating(device: str) -> None:
    """On the emulator this process decodes and keeps many kernels: collect cycles less often
    (rocke.emu.relax_garbage_collection says why). A harness owns its process, so it may."""
    if device == "emu":
        from rocke.emu import relax_garbage_collection
        relax_garbage_collection()


def resolve_device(requested: str | None, target: str | None = None) -> str:
    """``--device`` else ``ROCKE_DEVICE`` else rocke.runtime's default (hip when hip-python
    finds a gfx942 / gfx950 GPU, else emu). Checked before any work: a hip run also needs a ROCm torch
    that sees the GPU, since the harness allocates its tensors with torch. ``target``
    (``--target``, else ROCKE_DEVICE's emulator target, else the HIP GPU's processor): on hip it
    must be the GPU's."""
    from rocke import env, runtime
    devices = tuple(runtime.DEVICES)
    try:
        env.check_all()               # every ROCKE_* lever, whichever this run reads
        device = requested or env.device() or runtime.default_device_kind()
    except ValueError as exc:         # ROCKE_DEVICE=garbage: the message names the allowed values
        raise refuse(str(exc)) from None
    if device not in devices:
        raise refuse(f"--device {device}: rocke.runtime offers {devices}")
    if target is None and device == "emu":
        target = env.emu_target()
    if device == "emu":
        try:
            on_cuda = env.emu_device() == "cuda"     # checks the backend/device pair too
        except ValueError as exc:     # ROCKE_EMU_BACKEND / ROCKE_EMU_DEVICE=garbage
            raise refuse(str(exc)) from None
        if on_cuda and not torch.cuda.is_available():
            raise refuse("ROCKE_EMU_DEVICE=cuda runs the emulator on a CUDA GPU, but torch sees "
                         "none here (torch.cuda.is_available() is False); use "
                         "ROCKE_EMU_DEVICE=cpu or leave it unset")
    if device == "hip" and not torch.cuda.is_available():
        raise refuse("--device hip needs a ROCm torch that sees a GPU "
                     "(torch.cuda.is_available() is False here)")
    if device == "hip":
        target = hip_target(runtime, target)
    # the dispatcher's launches follow the harness (emu:gfx950: gfx950 kernels on the emulator;
    # on hip the GPU's processor decides)
    os.environ["ROCKE_DEVICE"] = device if device == "hip" or target == TARGETS[0] \
        else f"{device}:{target}"
    return device


def hip_target(runtime, requested: str | None) -> str:
    """The processor of the HIP GPU the run uses, which ``--target`` (when given) must name: a
    code object for one processor does not load on another."""
    try:
        gpu = runtime.get_device("hip")
    except Exception as exc:      # no hip-python, no runtime, no device: the message says which
        raise refuse(f"--device hip: {exc}") from None
    processor = gpu.arch.split(":", 1)[0]
    if processor not in TARGETS:
        raise refuse(f"--device hip: HIP device {gpu.index} is a {gpu.arch}; rocke builds for "
                     f"{', '.join(TARGETS)}")
    if requested is not None and requested != processor:
        raise refuse(f"--target {requested}: HIP device {gpu.index} is a {gpu.arch}, which runs "
                     f"{processor} code objects only (use --target {processor}, or --device emu)")
    return processor


def torch_device(device: str) -> str:
    """Where the run's tensors live: the GPU for hip, and for the emulator when it runs on
    CUDA (ROCKE_EMU_BACKEND=torch ROCKE_EMU_DEVICE=cuda: the tensors are its global memory)."""
    if device == "hip":
        return "cuda"
    from rocke import env
    on_cuda = env.emu_backend() == "torch" and env.emu_device() == "cuda"
    return "cuda" if device == "emu" and on_cuda else "cpu"


def time_label(device: str) -> str:
    return "emulator wall time" if device == "emu" else "GPU wall time (hip)"


def emulator_site(device: str) -> str:
    """Where emulator wall time was spent, for a header: the host CPU, or the CUDA GPU the torch
    backend runs on -- either way it is never gfx942 GPU time."""
    if device != "emu":
        return ""
    if torch_device(device) == "cuda":
        return (f" on {torch.cuda.get_device_name()} (the emulator's torch backend on CUDA), "
                "NOT gfx942 GPU time")
    return " on this CPU, NOT GPU time"


def echo_levers(printer=None):
    """Print every HIPDNN_GFX942_* lever as rocke reads it (rocke/kernels/common/knobs.py);
    returns ``(knobs, values for the report)``. A bad lever value stops the run here, before
    any work. (``printer`` None: print -- looked up at the call: this module travels to Ray
    workers by value, and Ray's driver may have replaced builtins.print by then.)"""
    from rocke.kernels.common import knobs
    printer = printer or print
    try:
        read = knobs.read_knobs(os.environ)
    except ValueError as exc:
        raise refuse(str(exc)) from None
    for line in knobs.describe(read, os.environ).splitlines():
        printer(line)
    return read, asdict(read)


# ---------------------------------------------------------------------------------------------
# cost estimate and progress

def kernel_flops(shape: Shape) -> float:
    """FLOPs a tiled kernel spends on ``shape``: 2 matmuls of 2*D per (row, visited key), rows
    padded to the 16-row MFMA tile per (sequence, KV head) since a GQA group shares the tile,
    keys cut by the causal early exit (a query at position p sees p + 1 keys)."""
    total = 0.0
    for q, k in shape.seqlens:
        rows = -(-q * shape.group // 16) * 16
        visited = k - q + (q + 1) / 2            # mean keys per query row under causal
        total += 4.0 * shape.head_size * shape.num_kv_heads * rows * visited
    return total


class EmuRate:
    """Emulator wall time of a launch ~ EMU_LAUNCH_OVERHEAD_S + FLOPs / rate, the rate a first
    guess refined by every launch the run measures (running totals, so one odd launch does not
    dominate). The default guess is for where the emulator runs (`device`): this CPU, or the
    CUDA GPU of the torch backend."""

    def __init__(self, guess: float | None = None, device: str = "emu"):
        if guess is None:
            guess = EMU_CUDA_FLOPS_PER_S_GUESS if torch_device(device) == "cuda" \
                else EMU_FLOPS_PER_S_GUESS
        self.guess = guess
        self.flops = 0.0
        self.seconds = 0.0

    def record(self, flops: float, seconds: float) -> None:
        work = seconds - EMU_LAUNCH_OVERHEAD_S
        if work > 0:
            self.flops += flops
            self.seconds += work

    def merge(self, flops: float, seconds: float) -> None:
        """Add the totals another EmuRate recorded (a task's launches, in another process)."""
        self.flops += flops
        self.seconds += seconds

    @property
    def rate(self) -> float:
        return self.flops / self.seconds if self.seconds > 0.5 else self.guess

    def seconds_for(self, flops: float, launches: int = 1) -> float:
        return launches * EMU_LAUNCH_OVERHEAD_S + flops / self.rate


def print_estimate(plan: list[tuple[Shape, int]], device: str, rate: EmuRate) -> float:
    """Before the run: per-shape launches and the estimated emulator wall time, and a warning
    when the total is long. Returns the estimate in seconds (0 on hip)."""
    if device != "emu":
        return 0.0
    total = sum(rate.seconds_for(kernel_flops(s) * n, n) for s, n in plan)
    print(f"estimate: {len(plan)} shapes, {sum(n for _, n in plan)} emulated launches, "
          f"~{format_seconds(total)} of emulator wall time (at {rate.rate / 1e9:.2f} emulated "
          f"GFLOP/s + {EMU_LAUNCH_OVERHEAD_S} s a launch, excluding compiles; refined as the "
          "run goes)")
    heavy = sorted(plan, key=lambda p: -kernel_flops(p[0]) * p[1])[:3]
    if total > LONG_RUN_WARNING_S:
        print("  WARNING: long run on the emulator. Heaviest shapes: "
              + ", ".join(f"{s.name} ~{format_seconds(rate.seconds_for(kernel_flops(s) * n, n))}"
                          for s, n in heavy)
              + ". Scale down with --quick or a smaller --max-kv N (same shapes, shorter KV), "
              "or pick fewer shapes" + ("" if torch_device(device) == "cuda" else
              ", or emulate on a CUDA GPU (ROCKE_EMU_BACKEND=torch ROCKE_EMU_DEVICE=cuda "
              f"ROCKE_EMU_RACE_CHECK=0; an H200 ran at {EMU_CUDA_FLOPS_PER_S_GUESS / 1e9:.1f} "
              "emulated GFLOP/s)") + ".")
    return total


def print_plan(shapes: list[Shape], first: dict[str, str], rate: EmuRate, device: str,
               plan: list[tuple[Shape, int]]) -> None:
    """--dry-run: every selected shape, its problem and (on the emulator) its estimate."""
    launches = {s.name: n for s, n in plan}
    for shape in shapes:
        if not shape.supported:
            note = f"SKIP: {UNSUPPORTED_HEAD_SIZE_REASON}"
        elif first[shape.name] != shape.name:
            note = f"= {first[shape.name]} after scaling"
        elif device == "emu":
            n = launches[shape.name]
            note = (f"{n} launches, {kernel_flops(shape) * n / 1e9:.2f} GFLOP, "
                    f"~{format_seconds(rate.seconds_for(kernel_flops(shape) * n, n))}")
        else:
            note = ""
        print(f"  {shape.name:<42} {shape.describe():<58} {note}")
        if shape.covers:
            print(f"  {'':<42} covers: {shape.covers}")


def format_seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def progress(shape: Shape, launches: int, device: str, rate: EmuRate, shown: bool = True):
    """A per-shape progress bar over its launches (stderr; silent when stderr is not a
    terminal, so logs and tests stay clean, and when not ``shown``: shapes run side by side
    would draw over each other's bars)."""
    from tqdm import tqdm
    eta = f" ~{format_seconds(rate.seconds_for(kernel_flops(shape) * launches, launches))}" \
        if device == "emu" else ""
    return tqdm(total=launches, desc=f"{shape.name}{eta}", unit="launch", leave=False,
                file=sys.stderr, disable=None if shown else True)


# ---------------------------------------------------------------------------------------------
# timing

def synchronize(device: str) -> None:
    if torch_device(device) == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    """Wall seconds of ``fn()``, the device drained before and after."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def reduce_times(samples: list[float], how: str, trim: float) -> float:
    if how == "median":
        return statistics.median(samples)
    if how == "mean":
        return statistics.fmean(samples)
    if how == "trimmed":
        cut = int(len(samples) * trim)
        kept = sorted(samples)[cut:len(samples) - cut] or sorted(samples)
        return statistics.fmean(kept)
    raise ValueError(f"reduce: unknown method {how!r}")


def spread(samples: list[float]) -> float | None:
    """(max - min) / median of the measurements; None with fewer than two."""
    if len(samples) < 2:
        return None
    mid = statistics.median(samples)
    return (max(samples) - min(samples)) / mid if mid > 0 else None


# ---------------------------------------------------------------------------------------------
# report

REPORT_SCHEMA_VERSION = 1
STATUSES = ("PASS", "FAIL", "SKIP", "ERROR")


def shape_record(shape: Shape, groups: list[str]) -> dict:
    return dict(shape=shape.name, groups=groups, dtype=shape.dtype, num_heads=shape.num_heads,
                num_kv_heads=shape.num_kv_heads, head_size=shape.head_size,
                seqlens=[list(p) for p in shape.seqlens],
                scaled_from=None if shape.scaled_from is None
                else [list(p) for p in shape.scaled_from],
                kind=shape.kind, kernel=shape.kernel, reused_from=None)


def check_report_path(parser, path: str | None) -> None:
    """``--report PATH``, checked with the flags, before any work: a directory, a missing or
    unwritable directory is a usage error (exit 2) rather than a finished run without its
    report."""
    from rocke.fileio import check_writable
    if path is None:
        return
    try:
        check_writable(path)
    except OSError as exc:
        parser.error(f"--report {path}: cannot write: {exc.strerror or exc}")


_PARTIAL_WRITE_WARNED: set = set()


def write_partial_report(path: str | None, payload: dict, done: int, planned: int) -> None:
    """The report of the shapes run so far, rewritten after each one (``complete: false``), so
    a run that is stopped or dies keeps what it measured. Atomic as the final write; a failed
    write is said once on stderr and the run goes on (the final write has the fallbacks)."""
    from rocke.fileio import write_output
    if not path:
        return
    payload = dict(payload, complete=False, shapes_done=done, shapes_planned=planned)
    try:
        write_output(path, (json.dumps(payload, indent=2, sort_keys=False) + "\n").encode())
    except OSError as exc:
        if path not in _PARTIAL_WRITE_WARNED:
            _PARTIAL_WRITE_WARNED.add(path)
            print(f"warning: cannot write the partial report to {path} "
                  f"({exc.strerror or exc}); the run goes on", file=sys.stderr, flush=True)


def write_report(path: str | None, payload: dict) -> bool:
    """Write the finished JSON report (``complete: true``) to ``path`` with
    ``rocke.fileio.write_output`` (a failed write leaves no half-written file). If that still
    fails at the end of a run (the directory went away, the disk filled), the results are not
    lost: they go to a fallback file in the temporary directory, or failing that onto stderr,
    and both say where. Returns whether ``path`` was written (True when no report was asked
    for)."""
    from rocke.fileio import write_output
    if not path:
        return True
    payload = dict(payload, complete=True)
    text = json.dumps(payload, indent=2, sort_keys=False) + "\n"
    try:
        write_output(path, text.encode())
    except OSError as exc:
        reason = exc.strerror or str(exc)
    else:
        print(f"report written to {path}")
        return True
    try:
        fd, fallback = tempfile.mkstemp(prefix=f"{payload.get('harness', 'report')}-",
                                        suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(text)
    except OSError as exc:
        print(f"error: cannot write the report to {path} ({reason}), nor a fallback file "
              f"({exc.strerror or exc}); the report follows on stderr", file=sys.stderr)
        sys.stderr.write(text)
    else:
        print(f"error: cannot write the report to {path} ({reason}); the results are in "
              f"{fallback} instead", file=sys.stderr)
    sys.stderr.flush()
    return False


def run_exit_code(counts: dict) -> int:
    """1 when a row FAILed or raised (ERROR), else 0 (``counts``: ``summary``'s)."""
    return 1 if counts["FAIL"] + counts["ERROR"] else 0


def final_exit_code(exit_code: int, report_written: bool) -> int:
    """1 for a FAIL or ERROR; else ``EXIT_USAGE`` when the report could not go where asked."""
    return exit_code if exit_code or report_written else EXIT_USAGE


def summary(rows: list[dict]) -> dict:
    return {status: sum(1 for r in rows if r["status"] == status) for status in STATUSES}


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  " + "  ".join("-" * w for w in widths))
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))
