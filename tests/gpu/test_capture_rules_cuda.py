"""The attention entry point under CUDA's real capture rules (HIP's are the same): vLLM's calling
patterns through ``rocke.vllm`` with the launches recorded as trivial kernels on an NVIDIA GPU
(tests/gpu/recorder.py). Shown: no capture error, no synchronisation (torch's sync debug mode
raises on one; the profiler counts CUDA's synchronising calls), no allocation inside a capture
or per call after warm-up, a capture of rocke's own only for a call that repeats, no module
readied inside a capture, and memory flat over 1,000 calls.

Needs an NVIDIA CUDA GPU (the device tool's H200) and, without LLVM's tools there, a compile
cache filled on a machine that has them (``python -m tests.gpu.scenarios --prepare DIR``, then
ROCKE_CACHE_DIR=DIR). CI has no GPU: these tests skip there."""
from __future__ import annotations

import contextlib
import os

import pytest
import torch

from tests.gpu import recorder, scenarios

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or getattr(torch.version, "hip", None) is not None,
    reason="needs an NVIDIA CUDA GPU (CUDA's capture rules); CI has none")

SYNCHRONISING = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                 "cudaMemcpy", "cudaMalloc")


@pytest.fixture
def gpu(monkeypatch):
    from rocke.kernels.common import attention_calls
    attention_calls.forget_calls()
    attention_calls.WORKSPACES.clear()
    monkeypatch.delenv("HIPDNN_GFX942_2D_GRAPH", raising=False)
    monkeypatch.delenv("HIPDNN_GFX942_3D_GRAPH", raising=False)
    monkeypatch.delenv("ROCKE_CHECK_METADATA", raising=False)
    dev = recorder.RecorderDevice(torch.cuda.current_device())
    recorder.install(monkeypatch, dev)
    model = scenarios.Model("cuda")
    torch.cuda.synchronize()
    yield dev, model
    attention_calls.forget_calls()
    attention_calls.WORKSPACES.clear()


@contextlib.contextmanager
def no_sync_no_alloc():
    """torch raises on a synchronising call inside; no block is allocated inside."""
    before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")
    after = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
    assert after == before, f"{after - before} allocations"


def _attend(args):
    from rocke.vllm import unified_attention
    unified_attention(**args)


def test_decode_graphs_captured_by_the_caller_at_every_batch_size(gpu):
    dev, model = gpu
    graphs = {}
    for b in scenarios.BATCH_SIZES:
        args = model.decode_args(b)
        _attend(args)                                     # vLLM's warm-up run, eager
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        ran = dev.executed
        with torch.cuda.graph(g):                         # the caller's capture
            with no_sync_no_alloc():
                _attend(args)
        assert dev.executed > ran                         # launched into the caller's graph
        graphs[b] = g
    assert dev.captures == 0 and dev.readied_while_capturing == 0   # the caller's graphs only
    scratch = dev.scratch.item()
    for step in range(5):                                 # new contents, replayed
        model.seqused.add_(1)
        model.q.mul_(-1)
        for b, g in graphs.items():
            g.replay()
    torch.cuda.synchronize()
    assert dev.scratch.item() > scratch                   # the recorded launches ran


def test_eager_prefill_with_fresh_tensors_never_captures_or_synchronises(gpu):
    dev, model = gpu
    _attend(model.prefill_args(*scenarios.PREFILL, fresh_seed=0))       # warm-up
    torch.cuda.synchronize()
    kept = []           # every step's q and out stay alive: new addresses each step (a
    for step in range(20):   # tensor at a freed one's address with the same layout is a repeat)
        args = model.prefill_args(*scenarios.PREFILL, fresh_seed=step + 1)   # the caller's allocs
        kept.append(args)
        with no_sync_no_alloc():
            _attend(args)
    assert dev.captures == 0
    # the profiler allocates buffers of its own: allocations are counted above, without it;
    # the caller's tensors are made before it (their uploads synchronise: the caller's)
    steps = [model.prefill_args(*scenarios.PREFILL, fresh_seed=step + 100) for step in range(20)]
    kept += steps
    torch.cuda.synchronize()

    def synchronising(calls) -> list:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for args in calls:
                _attend(args)
        names = [e.name for e in prof.events()]
        print(f"profiled {len(calls)} fresh-tensor prefill calls: {len(names)} events, CUDA "
              f"runtime calls {sorted({n for n in names if n.startswith('cuda')})}")
        return [n for n in names if any(n.startswith(s) for s in SYNCHRONISING)]
    baseline = synchronising([])          # the profiler's own (it flushes the device)
    syncs = synchronising(steps)
    print(f"synchronising calls: {syncs} with the calls, {baseline} with none")
    assert dev.captures == 0
    assert syncs == baseline, (syncs, baseline)


def test_a_repeated_chunked_prefill_mix_is_captured_once_by_rocke(gpu):
    from rocke.kernels.common.attention_calls import CAPTURE_AFTER
    dev, model = gpu
    args = model.prefill_args(*scenarios.MIX)
    _attend(args)                  # the first call of a shape may allocate (torch's own caches)
    torch.cuda.synchronize()
    for _ in range(CAPTURE_AFTER + 4):       # the capture (third call) and replays after it
        with no_sync_no_alloc():
            _attend(args)
    torch.cuda.synchronize()
    assert dev.captures == 1 and dev.readied_while_capturing == 0


def test_memory_stays_flat_over_a_thousand_calls(gpu):
    dev, model = gpu

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    marks = {}
    for i in range(1000):
        if i % 4 == 3:
            _attend(model.prefill_args(*scenarios.PREFILL, fresh_seed=i))
        else:
            _attend(model.decode_args(scenarios.BATCH_SIZES[i % len(scenarios.BATCH_SIZES)]))
        if i in (99, 999):
            torch.cuda.synchronize()
            marks[i] = (rss(), torch.cuda.memory_allocated())
    (rss0, gpu0), (rss1, gpu1) = marks[99], marks[999]
    print(f"RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB, GPU {gpu0 / 2**20:.1f} -> "
          f"{gpu1 / 2**20:.1f} MiB over calls 100..1000")
    assert gpu1 <= gpu0
    assert rss1 - rss0 < 32 << 20
