"""Host memory over many attention calls in one process, each with fresh KV caches (vLLM's test
grid run in one process: every case allocates its own caches). Prints figures; asserts nothing.

Each call allocates new K and V caches (``--cache-gib`` together, every page written, so they are
resident), runs one decode step through ``rocke.vllm.unified_attention`` on the emulator, then
drops its tensors. If any cache of rocke's (call cache, graph cache, compiled kernels, the
emulator's pools) kept a caller's tensor, the resident set would grow by the caches' size per
call. Reported: the resident set after the first call (one call's peak, its caches included),
the largest after any call, and their ratio (the issue's bound: 1.5).

    python benchmarks/memory.py                      # 50 calls, 1 GiB of caches each
    python benchmarks/memory.py --calls 10 --cache-gib 0.25
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

HQ, HK, D, BS = 8, 2, 128, 16


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one_call(cache_bytes: int, seed: int) -> int:
    from rocke.vllm import unified_attention
    pages = max(64, cache_bytes // 2 // (BS * HK * D * 2))
    g = torch.Generator().manual_seed(seed)
    k = torch.full((pages, BS, HK, D), 0.25, dtype=torch.float16)      # every page resident
    v = torch.full((pages, BS, HK, D), -0.25, dtype=torch.float16)
    seqs = 2
    table = torch.randperm(pages, generator=g)[:seqs * 16].to(torch.int32).reshape(seqs, 16)
    q = (torch.rand(seqs, HQ, D, generator=g) - 0.5).to(torch.float16)
    out = torch.empty_like(q)
    unified_attention(q, k, v, out, torch.arange(seqs + 1, dtype=torch.int32), 1,
                      torch.tensor([200, 131], dtype=torch.int32), 200, 1 / math.sqrt(D), True,
                      (-1, -1), table, 0.0, None, None, None)
    assert torch.isfinite(out.float()).all()
    return rss()                          # while this call's caches are alive: its peak


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--cache-gib", type=float, default=1.0,
                        help="K and V caches together, per call (default 1)")
    args = parser.parse_args(argv)
    if args.calls < 1 or not args.cache_gib > 0:
        parser.error("--calls must be >= 1 and --cache-gib > 0")
    cache_bytes = int(args.cache_gib * (1 << 30))
    print(f"machine: {platform.node()} ({os.cpu_count()} CPUs), emulator, "
          f"{args.calls} calls with fresh {args.cache_gib:g} GiB caches each")
    start = rss()
    during, between = [], []
    for i in range(args.calls):
        during.append(one_call(cache_bytes, seed=i))
        gc.collect()
        between.append(rss())
        if i in (0, args.calls - 1) or (i + 1) % 10 == 0:
            print(f"  call {i + 1:3d}: resident {during[-1] / 2**30:.2f} GiB during, "
                  f"{between[-1] / 2**30:.2f} GiB after")
    first, peak = during[0], max(during)
    print(f"resident at start {start / 2**30:.2f} GiB; during the first call "
          f"{first / 2**30:.2f} GiB; largest during any call {peak / 2**30:.2f} GiB; "
          f"ratio {peak / first:.2f} (bound 1.5); after the last call "
          f"{between[-1] / 2**30:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
