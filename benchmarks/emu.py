"""Emulator throughput on fixed workloads built from the committed Triton fixtures.

Prints (never asserts) the host machine, then for each workload the median over --repeats of
the emulator's wall time and its lane-instructions per second. These are EMULATOR wall times
on this CPU: they say nothing about how fast the kernels run on an MI300X. The first launch of
each workload also pays the emulator's one-off parse/decode (later launches hit its cache),
which the median mostly hides. Workloads: axpy (1024 waves), matmul (bf16, 256 waves),
flash_attention (512 waves), matmul_f16 (256 waves), softmax (1024 waves).

Each workload also reports the scheduler's batch count (deterministic: fewer = wider batches),
the process CPU time (less disturbed than wall time by other load on the host; with
ROCKE_EMU_WORKERS > 1 it adds the CPU time of the launch's forked worker processes), how many
processes ran the launch (`report.workers`), and the cost of
the launch's safety features: the shadow copies that make a failed launch leave its arguments
untouched (`shadow_copy_s`, measured inside every launch) and, with --safety-ab, the same
workload with the shadow copies and the watchdog switched off (an A/B of process CPU time).

Array backends (rocke/emu/backend.py): `--backend numpy torch` runs each workload on each
backend in turn (ROCKE_EMU_BACKEND), `--device cuda` puts the torch backend's arrays on a CUDA
GPU (ROCKE_EMU_DEVICE); every backend after the first also reports whether its output is bit for
bit the first backend's; on CUDA the workload's tensors are CUDA tensors (the emulator's global
memory stays on the GPU). Even on a GPU these are emulator wall times, not the kernel's GPU time.

A same-day A/B (`--against REV [--rounds R]`): this host's speed drifts between days (the
same code measures differently; docs/benchmarks.md), so a speed-up is only a ratio against an
older revision measured now. The
revision's own benchmarks/emu.py runs from a temporary git worktree (same interpreter and
packages), alternating with this tree's, each in a fresh process, R rounds; the tables give each
side's median and the ratio, of wall time and of process CPU time (workers included).

`--torch-profile N` adds, per torch-backend workload, one launch under torch's profiler: the
top N of the emulator's own array kernels by GPU time (on a CPU: its torch operations by CPU
time) and the host's CUDA calls -- where the emulator's time goes, still not gfx942 time.

Run:  .venv/bin/python benchmarks/emu.py [--repeats 3] [--workloads NAME ...] [--safety-ab]
      [--backend numpy torch] [--device cpu|cuda] [--torch-profile N]
      (ROCKE_EMU_WORKERS unset: a large launch spreads its workgroups over the usable cores;
      =1 for the serial emulator)
"""

import argparse
import contextlib
import json
import os
import platform
import resource
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy
import torch

from compile import cpu_name  # sibling benchmark: one reading of the CPU name

import rocke.emu
import rocke.emu.machine
from rocke.emu import launch as _launch_function

_LAUNCH_MODULE = sys.modules[_launch_function.__module__]

FIXTURE_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "triton"
WAVE_SIZE = 64


def cdiv(a, b):
    return -(-a // b)


def axpy_workload():
    """fp32 a*x+y over 256 Ki elements: 256 workgroups of 4 waves = 1024 waves."""
    n = 256 * 1024
    rng = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, generator=rng), torch.randn(n, generator=rng)
    args = dict(x_ptr=x, y_ptr=y, out_ptr=torch.empty(n), alpha=0.5, n_elements=n)
    return "axpy_f32", (cdiv(n, 1024), 1, 1), args, "out_ptr", lambda: 0.5 * x + y


def matmul_workload():
    """bf16 GEMM 512x512x256 with 16x16 MFMA: 64 workgroups of 4 waves = 256 waves."""
    m = n = 512
    k = 256
    rng = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=rng).bfloat16()
    b = torch.randn(k, n, generator=rng).bfloat16()
    args = dict(a_ptr=a, b_ptr=b, c_ptr=torch.empty(m, n, dtype=torch.bfloat16), M=m, N=n, K=k,
                stride_am=k, stride_bk=n, stride_cm=n)
    return ("matmul_bf16_mfma16", (cdiv(m, 64), cdiv(n, 64), 1), args, "c_ptr",
            lambda: a.float() @ b.float())


def matmul_f16_workload():
    """f16 GEMM 512x512x512 with 32x32 MFMA: 64 workgroups of 4 waves = 256 waves."""
    m = n = k = 512
    rng = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=rng).half()
    b = torch.randn(k, n, generator=rng).half()
    args = dict(a_ptr=a, b_ptr=b, c_ptr=torch.empty(m, n, dtype=torch.float16), M=m, N=n, K=k,
                stride_am=k, stride_bk=n, stride_cm=n)
    return ("matmul_f16_mfma32", (cdiv(m, 64), cdiv(n, 64), 1), args, "c_ptr",
            lambda: a.float() @ b.float())


def softmax_workload():
    """fp32 row softmax, 256 rows of 256: 256 workgroups of 4 waves = 1024 waves (VALU and
    cross-lane / LDS reductions)."""
    rows, cols = 256, 256
    rng = torch.Generator().manual_seed(0)
    x = 4 * torch.randn(rows, cols, generator=rng)
    args = dict(in_ptr=x, out_ptr=torch.empty(rows, cols), in_row_stride=cols,
                out_row_stride=cols, n_cols=cols)
    return "softmax_rows_f32", (rows, 1, 1), args, "out_ptr", lambda: torch.softmax(x, dim=1)


FLASH_BATCH_HEADS = 8   # --flash-batch-heads: wider launches for the GPU backend
# A figure of a wrong output is no figure: each output is held to max |output - fp32 reference|
# <= SANITY_RELATIVE_ERROR * max |reference|, far above the workloads' rounding (fp16 / bf16
# outputs: 2**-11 / 2**-8 relative) and far below what a wrong mask, lane or layout does.
SANITY_RELATIVE_ERROR = 2 ** -6
CHECK = True            # --no-check: launches without the LDS race checker (check=False)
TORCH_PROFILE = 0       # --torch-profile N: one more launch per torch workload, top N kernels


def flash_attention_workload():
    """Causal flash attention, fp16, B*H = 8, S = 1024, D = 128: 128 workgroups = 512 waves
    (B*H = --flash-batch-heads: 64 waves per unit)."""
    batch_heads, seq_len, head_dim = FLASH_BATCH_HEADS, 1024, 128
    rng = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch_heads, seq_len, head_dim, generator=rng).half()
               for _ in range(3))
    args = dict(q_ptr=q, k_ptr=k, v_ptr=v, out_ptr=torch.empty_like(q),
                stride_bh=seq_len * head_dim, stride_seq=head_dim, seq_len=seq_len,
                sm_scale=head_dim ** -0.5)

    def reference():
        scores = (q.float() @ k.float().transpose(-1, -2)) * head_dim ** -0.5
        future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(diagonal=1)
        return torch.softmax(scores.masked_fill(future, -float("inf")), dim=-1) @ v.float()

    return ("flash_attn_fwd_d128_causal", (cdiv(seq_len, 64), batch_heads, 1), args, "out_ptr",
            reference)


# name -> () -> (fixture, grid, runtime args by name, output arg name, fp32 reference thunk)
WORKLOADS = {
    "axpy": axpy_workload,
    "matmul": matmul_workload,
    "flash_attention": flash_attention_workload,
    "matmul_f16": matmul_f16_workload,
    "softmax": softmax_workload,
}


def host_description():
    cpu = cpu_name()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"platform : {platform.platform()}",
        f"cpu      : {cpu}",
        f"cores    : {os.cpu_count()} logical, {usable} usable by this process",
        f"python   : {platform.python_version()}, numpy {numpy.__version__}, "
        f"torch {torch.__version__}",
    ]


def launch(fixture_name, grid, runtime_args):
    info = json.loads((FIXTURE_DIR / f"{fixture_name}.json").read_text())
    asm = (FIXTURE_DIR / f"{fixture_name}.s").read_text()
    ordered = [runtime_args[arg["name"]] for arg in info["runtime_args"]]
    ordered += [None] * info["extra_trailing_pointer_args"]
    start = time.perf_counter()
    cpu = time.process_time() + _children_cpu_s()
    report = rocke.emu.launch(asm, info["kernel_symbol"], grid, tuple(info["block"]), ordered,
                              shared_mem=info["shared_mem_bytes"], check=CHECK)
    if any(getattr(a, "is_cuda", False) for a in ordered):
        torch.cuda.synchronize()     # the launch's last stores may still be queued on the GPU
    report.process_cpu_s = time.process_time() + _children_cpu_s() - cpu
    return time.perf_counter() - start, report, info


def _children_cpu_s():
    """CPU time of this process's reaped children: the launch's worker processes."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class _NoShadow:
    def __init__(self, ranges):
        pass

    def restore(self):
        pass

    def release(self):
        pass


@contextlib.contextmanager
def safety_off():
    """Shadow copies and watchdog disabled (for the A/B only; never do this for real)."""
    shadow, tick = _LAUNCH_MODULE._Shadow, rocke.emu.machine.Pool.watchdog_tick
    _LAUNCH_MODULE._Shadow = _NoShadow
    rocke.emu.machine.Pool.watchdog_tick = lambda self: None
    try:
        yield
    finally:
        _LAUNCH_MODULE._Shadow = shadow
        rocke.emu.machine.Pool.watchdog_tick = tick


def safety_ab(fixture_name, grid, runtime_args, repeats):
    """Median process CPU time with the safety features off and on, interleaved."""
    on, off = [], []
    for _ in range(repeats):
        with safety_off():
            off.append(launch(fixture_name, grid, runtime_args)[1].process_cpu_s)
        on.append(launch(fixture_name, grid, runtime_args)[1].process_cpu_s)
    return statistics.median(off), statistics.median(on)


@contextlib.contextmanager
def array_backend(name, device):
    """ROCKE_EMU_BACKEND / ROCKE_EMU_DEVICE set for the block (the numpy backend runs on the CPU)."""
    saved = {k: os.environ.get(k) for k in ("ROCKE_EMU_BACKEND", "ROCKE_EMU_DEVICE")}
    os.environ["ROCKE_EMU_BACKEND"] = name
    os.environ["ROCKE_EMU_DEVICE"] = device if name == "torch" else "cpu"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def torch_profile(fixture_name, grid, runtime_args, rows, device):
    """One more launch under torch's profiler: where the emulator's own torch work went (its
    array kernels on a GPU, its torch operations on a CPU), the top `rows`, and on a GPU the
    host's CUDA calls. Never gfx942 time: the emulator's work while it emulates gfx942."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        launch(fixture_name, grid, runtime_args)
    events = prof.key_averages()
    if device == "cuda":
        what = "GPU kernel time of the emulator's array kernels"
        rows_of = [(e.key, e.device_time_total, e.count) for e in events
                   if e.device_time_total > 0 and not e.key.startswith(("aten::", "cuda"))]
    else:
        what = "CPU time of the emulator's torch operations (self)"
        rows_of = [(e.key, e.self_cpu_time_total, e.count) for e in events
                   if e.key.startswith("aten::") and e.self_cpu_time_total > 0]
    rows_of.sort(key=lambda r: -r[1])
    total = sum(r[1] for r in rows_of)
    count = sum(r[2] for r in rows_of)
    print(f"  torch profile of one more launch ({device}; not gfx942 time): {what} "
          f"{total / 1e3:,.1f} ms in {count:,} calls; top {min(rows, len(rows_of))}:")
    for key, micros, calls in rows_of[:rows]:
        print(f"    {micros / 1e3:9.1f} ms {calls:8,}  {key[:110]}")
    if device == "cuda":
        host = sorted(((e.key, e.cpu_time_total, e.count) for e in events
                       if e.key.startswith("cuda")), key=lambda r: -r[1])[:6]
        print("    host CUDA calls: " + ", ".join(f"{k} {t / 1e3:.1f} ms ({c:,})"
                                                for k, t, c in host))


def run_workload(name, repeats, ab=False, backend="numpy", device="cpu", baseline=None):
    """Returns the workload's output tensor (to compare backends bit for bit) and what was
    wrong with it (an empty list when nothing)."""
    with array_backend(backend, device):
        return _run_workload(name, repeats, ab, backend, device, baseline)


def _run_workload(name, repeats, ab, backend, device, baseline):
    fixture_name, grid, runtime_args, output_name, reference = WORKLOADS[name]()
    if device == "cuda" and backend == "torch":   # the GPU's tensors are the global memory
        runtime_args = {k: v.cuda() if isinstance(v, torch.Tensor) else v
                        for k, v in runtime_args.items()}
    wall_times, cpu_times, shadow_times, report, info = [], [], [], None, None
    for _ in range(repeats):
        seconds, report, info = launch(fixture_name, grid, runtime_args)
        wall_times.append(seconds)
        cpu_times.append(report.process_cpu_s)
        shadow_times.append(report.shadow_copy_s)
    median = statistics.median(wall_times)
    waves = grid[0] * grid[1] * grid[2] * info["block"][0] // WAVE_SIZE
    lane_instructions = report.lane_instructions
    print(f"\n[{name}] fixture {fixture_name}, grid {grid}, block {tuple(info['block'])}, "
          f"{waves} waves; backend {report.backend}")
    print(f"  emulator wall time (median of {repeats}): {median:.3f} s  "
          f"(min {min(wall_times):.3f} s, max {max(wall_times):.3f} s)")
    print(f"  lane-instructions: {lane_instructions:,}  ->  "
          f"{lane_instructions / median:,.0f} lane-instructions/s of emulator wall time")
    want = reference()
    error = (runtime_args[output_name].cpu().float() - want).abs().max().item()
    bound = SANITY_RELATIVE_ERROR * want.abs().max().item()
    wrong = [] if error <= bound else [f"{name}: max |output - reference| = {error:.3g} > "
                                       f"{bound:.3g} on {report.backend}"]
    print(f"  sanity: max |output - torch fp32 reference| = {error:.3g} (bound {bound:.3g}: "
          f"{'WRONG' if wrong else 'ok'})")
    print(f"  emulator report: {report.waves} waves, {report.total_instructions:,} wave-"
          f"instructions, emulator-internal wall time {report.emulator_wall_time_s:.3f} s")
    print("  wave-instructions by class: "
          + ", ".join(f"{cls} {count:,}" for cls, count in report.instructions.items() if count))
    print(f"  scheduler batches: {report.batches:,}; processes: {report.workers}; process CPU "
          f"time incl. workers (median): {statistics.median(cpu_times):.3f} s  ->  "
          f"{lane_instructions / statistics.median(cpu_times):,.0f} lane-instructions/CPU-s")
    if report.share_cpu_s:
        busiest = max(report.share_cpu_s)
        print("  CPU per process (last launch): "
              + ", ".join(f"{s:.3f}" for s in report.share_cpu_s)
              + f" s; busiest {busiest:.3f} s  ->  {lane_instructions / busiest:,.0f} "
              "lane-instructions per busiest-process CPU-s (the wall rate on idle cores, "
              "less forking and result transfer)")
    shadow = statistics.median(shadow_times)
    print(f"  rollback shadow copies: {report.shadow_bytes / 2 ** 20:.2f} MiB in {shadow * 1e3:.2f} ms "
          f"= {100 * shadow / median:.2f} % of the emulator wall time")
    if report.fallbacks:
        print(f"  instructions left to numpy closures on this backend: {len(report.fallbacks)} "
              f"(first: {report.fallbacks[0]})")
    output = runtime_args[output_name].cpu().clone()
    if baseline is not None:
        bits = {2: torch.int16, 4: torch.int32}[output.element_size()]
        same = torch.equal(output.view(bits), baseline.view(bits))
        print(f"  bit-identical to the first backend's output: {'yes' if same else 'NO'}")
        if not same:
            wrong.append(f"{name}: {report.backend} differs from the first backend's bits")
    if TORCH_PROFILE and backend == "torch":
        torch_profile(fixture_name, grid, runtime_args, TORCH_PROFILE, device)
    if ab:
        off, on = safety_ab(fixture_name, grid, runtime_args, repeats)
        print(f"  safety A/B (process CPU, median of {repeats}): shadow copies + watchdog off "
              f"{off:.3f} s, on {on:.3f} s ({100 * (on - off) / off:+.1f} %)")
    return output, wrong

RATE_LINE = re.compile(r"->\s+([\d,]+) lane-instructions/s of emulator wall time")
HEADER_LINE = re.compile(r"^\[(\w+)\]")


def wall_rates(output: str) -> dict:
    """workload -> lane-instructions/s of emulator wall time, read from one run's printout
    (the first backend's figure when a run has several)."""
    rates, current = {}, None
    for line in output.splitlines():
        header = HEADER_LINE.match(line)
        if header:
            current = header.group(1)
            continue
        rate = RATE_LINE.search(line)
        if rate and current is not None and current not in rates:
            rates[current] = int(rate.group(1).replace(",", ""))
    return rates


LANES_LINE = re.compile(r"lane-instructions: ([\d,]+)")
CPU_LINE = re.compile(r"process CPU time[^:]*: ([\d.]+) s")


def cpu_rates(output: str) -> dict:
    """workload -> lane-instructions per second of process CPU time (median launch, workers
    included where the run counts them), read from one run's printout (first backend)."""
    rates, current, lanes = {}, None, None
    for line in output.splitlines():
        header = HEADER_LINE.match(line)
        if header:
            current, lanes = header.group(1), None
            continue
        count, cpu = LANES_LINE.search(line), CPU_LINE.search(line)
        if count and lanes is None:
            lanes = int(count.group(1).replace(",", ""))
        if cpu and current is not None and lanes and current not in rates \
                and float(cpu.group(1)) > 0:
            rates[current] = lanes / float(cpu.group(1))
    return rates


def run_benchmark_script(root: Path, workloads, repeats) -> tuple[dict, dict]:
    """The benchmark of the tree at ``root`` in a fresh process (its own rocke on
    PYTHONPATH); its wall rates and process-CPU rates, or a RuntimeError with the end of its
    output."""
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "emu.py"), "--repeats",
                           str(repeats), "--workloads", *workloads], cwd=root, env=env,
                          capture_output=True, text=True)
    rates, cpu = wall_rates(done.stdout), cpu_rates(done.stdout)
    missing = [w for w in workloads if w not in rates or w not in cpu]
    if done.returncode or missing:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise RuntimeError(f"the benchmark of {root} gave no figure for {missing or workloads} "
                           f"(exit {done.returncode}): " + " | ".join(tail))
    return rates, cpu


def against(revision: str, workloads, repeats: int, rounds: int) -> int:
    """``--against REV``: REV's benchmark and this tree's, alternately, ``rounds`` times."""
    here = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--verify", "--quiet",
                                 f"{revision}^{{commit}}"], cwd=here, capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit(f"--against {revision}: not a commit of the git checkout at {here}")
    scratch = Path(tempfile.mkdtemp(prefix="rocke-emu-ab-"))
    tree = scratch / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), commit],
                   cwd=here, check=True)
    try:
        if not (tree / "benchmarks" / "emu.py").exists():
            raise SystemExit(f"--against {revision}: that revision has no benchmarks/emu.py")
        print("rocke gfx942 emulator benchmark, same-day A/B -- emulator wall time on this "
              "host, NOT GPU time")
        print("\n".join(host_description()))
        print(f"A: {revision} ({commit[:12]}), B: this tree; {rounds} rounds of A then B, "
              f"{repeats} launches a workload each (median)")
        runs, cpu_runs = {"A": [], "B": []}, {"A": [], "B": []}
        for r in range(rounds):
            for side, root in (("A", tree), ("B", here)):
                wall, cpu = run_benchmark_script(root, workloads, repeats)
                runs[side].append(wall)
                cpu_runs[side].append(cpu)
                print(f"  round {r + 1}/{rounds} {side}: " + ", ".join(
                    f"{w} {wall[w] / 1e6:.1f} (CPU {cpu[w] / 1e6:.1f})" for w in workloads),
                      flush=True)
        print(f"{'workload':<16} {'A M lane-instr/s':>17} {'B M lane-instr/s':>17} {'B/A':>6}")
        for w in workloads:
            a = statistics.median(run[w] for run in runs["A"])
            b = statistics.median(run[w] for run in runs["B"])
            print(f"{w:<16} {a / 1e6:>17.1f} {b / 1e6:>17.1f} {b / a:>6.2f}")
        # per process-CPU second (worker processes included): less disturbed by other load
        # on the host than wall time, but a parallel launch spends more CPU than a serial one
        print(f"{'workload':<16} {'A M/CPU-s':>17} {'B M/CPU-s':>17} {'B/A':>6}  "
              "(process CPU time)")
        for w in workloads:
            a = statistics.median(run[w] for run in cpu_runs["A"])
            b = statistics.median(run[w] for run in cpu_runs["B"])
            print(f"{w:<16} {a / 1e6:>17.1f} {b / 1e6:>17.1f} {b / a:>6.2f}  CPU")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=here,
                       capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="launches per workload (median)")
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS),
                        default=list(WORKLOADS), help="which workloads to run")
    parser.add_argument("--safety-ab", action="store_true",
                        help="also time each workload with shadow copies and watchdog off")
    parser.add_argument("--backend", nargs="+", choices=("numpy", "torch"), default=["numpy"],
                        help="array backends to run each workload on, in order")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the torch backend's arrays live")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch.set_num_threads for the run (on a host shared with other "
                             "work, 1 avoids thread oversubscription)")
    parser.add_argument("--no-check", action="store_true",
                        help="launch with check=False (no LDS race checker; bounds still checked)")
    parser.add_argument("--flash-batch-heads", type=int, default=FLASH_BATCH_HEADS,
                        help="B*H of the flash attention workload (64 waves each; default 8)")
    parser.add_argument("--torch-profile", type=int, default=0, metavar="N",
                        help="torch backend: one more launch per workload under torch's "
                             "profiler, printing the top N of the emulator's own kernels (GPU) "
                             "or torch operations (CPU) and the host's CUDA calls")
    parser.add_argument("--against", metavar="REV", default=None,
                        help="same-day A/B: the git revision REV's own benchmark against this "
                             "tree's, alternately (numpy backend, this host)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="with --against: rounds of A then B (median per side; the 0.1-s "
                             "workloads swing by 20 %% between rounds, so not fewer than 5)")
    args = parser.parse_args(argv)
    # bad input: one line and exit 2 (argparse's), before anything runs
    for flag, value in (("--rounds", args.rounds), ("--repeats", args.repeats),
                        ("--flash-batch-heads", args.flash_batch_heads),
                        ("--torch-threads", args.torch_threads)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    if args.torch_profile < 0:
        parser.error(f"--torch-profile must be >= 0 (0: off), got {args.torch_profile}")
    if args.torch_profile and "torch" not in args.backend:
        parser.error("--torch-profile profiles the torch backend: add --backend torch")
    if "torch" in args.backend and args.device == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda: torch {torch.__version__} sees no CUDA GPU here "
                     "(torch.cuda.is_available() is False)")
    if args.against is not None:
        return against(args.against, args.workloads, args.repeats, args.rounds)
    globals()["FLASH_BATCH_HEADS"] = args.flash_batch_heads
    globals()["CHECK"] = not args.no_check
    globals()["TORCH_PROFILE"] = args.torch_profile
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    print("rocke gfx942 emulator benchmark -- emulator wall time on this host, NOT GPU time")
    print("\n".join(host_description()))
    if "torch" in args.backend:
        gpu = torch.cuda.get_device_name() if args.device == "cuda" else "none used"
        print(f"torch    : device {args.device} ({gpu}), {torch.get_num_threads()} CPU threads")
    wrong = []
    for name in args.workloads:
        baseline = None
        for backend in args.backend:
            output, problems = run_workload(name, args.repeats, args.safety_ab, backend,
                                            args.device, baseline)
            baseline = output if baseline is None else baseline
            wrong += problems
    if wrong:   # every figure is printed; the exit status says some came from wrong outputs
        print("error: wrong output, its figures do not count: " + "; ".join(wrong),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
