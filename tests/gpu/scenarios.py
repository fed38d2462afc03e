"""vLLM's calling patterns for the attention entry point, through ``rocke.vllm.unified_attention``:
decode graphs captured by the caller at batch sizes 1-256 over persistent buffers (replayed with
new contents), eager prefill with fresh tensors each step, and a chunked-prefill mix repeated
over persistent buffers. Shared by tests/gpu/test_capture_rules_cuda.py (an NVIDIA GPU, the
recorder device) and ``python -m tests.gpu.scenarios --prepare DIR`` (this machine: the same
calls with CPU tensors, compile only, to fill the compile cache ``DIR`` that a GPU machine
without LLVM's tools takes through ROCKE_CACHE_DIR)."""
from __future__ import annotations

import math

import torch

HQ, HK, D, BS = 8, 2, 128, 16
NUM_BLOCKS = 4096
SEGMENTS = 16              # vLLM's num_par_softmax_segments
THRESHOLD_3D = 128         # vLLM's seq_threshold_3D: larger decode batches take 2D
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_PAGES = 64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


class Model:
    """One attention layer's persistent state on ``device``: KV cache, block table, decode
    buffers sized for the largest batch, 3D workspaces."""

    def __init__(self, device, dtype=torch.float16, seed=0):
        g = _gen(seed)
        self.device, self.dtype = device, dtype
        self.k = (torch.rand(NUM_BLOCKS, BS, HK, D, generator=g) - 0.5).to(dtype).to(device)
        self.v = (torch.rand(NUM_BLOCKS, BS, HK, D, generator=g) - 0.5).to(dtype).to(device)
        pages = torch.randperm(NUM_BLOCKS, generator=g)[:256 * 8].reshape(256, 8)
        table = torch.zeros(256, MAX_PAGES, dtype=torch.int32)
        table[:, :8] = pages.to(torch.int32)
        self.table = table.to(device)
        n = max(BATCH_SIZES)
        self.q = (torch.rand(n, HQ, D, generator=g) - 0.5).to(dtype).to(device)
        self.out = torch.zeros(n, HQ, D, dtype=dtype, device=device)
        self.cu = torch.arange(n + 1, dtype=torch.int32, device=device)
        self.seqused = torch.full((n,), 100, dtype=torch.int32, device=device)
        self.ws = (torch.empty(n, HQ, SEGMENTS, D, device=device),
                   torch.empty(n, HQ, SEGMENTS, device=device),
                   torch.empty(n, HQ, SEGMENTS, device=device))
        self.one = torch.ones((), device=device)

    def decode_args(self, b: int) -> dict:
        """vLLM's decode call for batch size ``b`` on the persistent buffers (views)."""
        return dict(q=self.q[:b], k=self.k, v=self.v, out=self.out[:b],
                    cu_seqlens_q=self.cu[:b + 1], max_seqlen_q=1, seqused_k=self.seqused[:b],
                    max_seqlen_k=8 * BS, softmax_scale=1 / math.sqrt(D), causal=True,
                    window_size=(-1, -1), block_table=self.table[:b], softcap=0.0,
                    q_descale=None, k_descale=self.one.expand(b, HK),
                    v_descale=self.one.expand(b, HK), seq_threshold_3D=THRESHOLD_3D,
                    num_par_softmax_segments=SEGMENTS, softmax_segm_output=self.ws[0],
                    softmax_segm_max=self.ws[1], softmax_segm_expsum=self.ws[2])

    def prefill_args(self, q_lens, kv_lens, fresh_seed: int | None = None) -> dict:
        """A prefill (or chunked-prefill mix) call; ``fresh_seed``: q and out are new tensors
        (vLLM's eager prefill allocates them each step), else views of the persistent ones."""
        total = sum(q_lens)
        cu = [0]
        for n in q_lens:
            cu.append(cu[-1] + n)
        if fresh_seed is None:
            q, out = self.q[:total], self.out[:total]
        else:
            g = _gen(fresh_seed)
            q = (torch.rand(total, HQ, D, generator=g) - 0.5).to(self.dtype).to(self.device)
            out = torch.empty(total, HQ, D, dtype=self.dtype, device=self.device)
        b = len(q_lens)
        return dict(q=q, k=self.k, v=self.v, out=out,
                    cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=self.device),
                    max_seqlen_q=max(q_lens),
                    seqused_k=torch.tensor(kv_lens, dtype=torch.int32, device=self.device),
                    max_seqlen_k=max(kv_lens), softmax_scale=1 / math.sqrt(D), causal=True,
                    window_size=(-1, -1), block_table=self.table[:b], softcap=0.0,
                    q_descale=None, k_descale=self.one.expand(b, HK),
                    v_descale=self.one.expand(b, HK), seq_threshold_3D=THRESHOLD_3D,
                    num_par_softmax_segments=SEGMENTS, softmax_segm_output=self.ws[0],
                    softmax_segm_max=self.ws[1], softmax_segm_expsum=self.ws[2])


PREFILL = ([96, 40], [96 + 20, 40 + 60])                 # two prompts with some context
MIX = ([1, 1, 1, 1, 1, 1, 48], [100, 77, 120, 64, 90, 101, 48 + 70])   # decodes + a chunk


def prepare(cache_dir: str) -> int:
    """Every call the CUDA test makes, on CPU tensors with compile_only: fills ``cache_dir``
    with the kernels it needs. Returns how many distinct kernels were built."""
    import os
    os.environ["ROCKE_CACHE_DIR"] = cache_dir
    from rocke.kernels.common import attention_unified as au
    from rocke import vllm
    built = set()
    real = au.run_unified_attention_torch

    def compile_only(*args, **kwargs):
        record = real(*args, **kwargs, compile_only=True)
        built.update(record.kernels if record is not None else ())
        return record
    au.run_unified_attention_torch = compile_only
    try:
        m = Model("cpu")
        for b in BATCH_SIZES:
            vllm.unified_attention(**m.decode_args(b))
        vllm.unified_attention(**m.prefill_args(*PREFILL, fresh_seed=1))
        vllm.unified_attention(**m.prefill_args(*MIX))
    finally:
        au.run_unified_attention_torch = real
    return len(built)


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prepare", metavar="DIR", required=True,
                        help="compile cache to fill (ROCKE_CACHE_DIR on the GPU machine)")
    print(f"{prepare(parser.parse_args().prepare)} kernels built")
