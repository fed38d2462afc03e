"""Record what vLLM 0.33's Triton attention backend passes to `unified_attention` from its
`forward`, by running it: decode, prefill, chunked prefill, speculative decoding (verify) and
encoder layers (encoder-only self-attention and encoder-decoder cross-attention).

    python3 -m venv /tmp/vllmenv
    /tmp/vllmenv/bin/pip install torch vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl
    /tmp/vllmenv/bin/python tools/record_vllm_forward.py \\
        -o tests/fixtures/vllm_forward_calls_0.33.json

(vLLM is not a dependency of rocke: run this in a scratch environment holding vLLM 0.33 and
whatever its imports need; no GPU is used.) The script builds a `TritonAttentionMetadataBuilder`
and `TritonAttentionImpl` from stand-in configs (a small GQA model: 8 query heads, 2 KV heads,
head size 128, 16-token pages, bf16, CUDA graphs FULL_AND_PIECEWISE), builds each step's
metadata with vLLM's own `build`, calls vLLM's own `forward` on CPU tensors, and records the
call vLLM makes: every keyword in the order passed, tensors as shape / dtype / strides / storage
offset (with their values where they are metadata: integer tensors and descales), other values
as they are. `unified_attention` itself and the encoder path's `context_attention_fwd` are
replaced by recorders (the Triton kernels cannot run here); nothing else of vLLM is changed.
The batches' lengths and page tables are this script's choice; everything vLLM derives from
them (workspaces, thresholds, views, descales, flags) is vLLM's.
"""
from __future__ import annotations

import argparse
import enum
import json
import sys
from types import SimpleNamespace

import torch

HQ, HK, D, BLOCK = 8, 2, 128, 16
DTYPE = torch.bfloat16
NUM_BLOCKS = 64
MAX_NUM_SEQS = 8
CAPTURE_SIZES = [1, 2, 4, 8, 16, 32, 64, 128]

# (name, [(query_len, kv_len), ...], what it stands for)
SCENARIOS = [
    ("decode", [(1, 40), (1, 23), (1, 77)], "three sequences decoding one token each"),
    ("prefill", [(17, 17), (5, 5)], "two prompts prefilled from the start"),
    ("chunked_prefill", [(1, 40), (5, 18), (17, 58)],
     "a decode batched with two prompt chunks that follow cached context"),
    ("spec_decode", [(4, 44), (4, 27)],
     "the verify step of speculative decoding: 1 + 3 draft tokens per sequence"),
    ("cross_attention", [(1, 30), (1, 12)],
     "an encoder-decoder layer's cross-attention: decoder tokens over the encoder's cache"),
    ("encoder", [(12, 12), (7, 7)], "an encoder-only layer's self-attention (no KV cache)"),
]


def _describe(value):
    if isinstance(value, torch.Tensor):
        d = {"tensor": {"shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", ""),
                        "stride": list(value.stride()), "storage_offset": value.storage_offset(),
                        "device": value.device.type}}
        small = value.numel() <= 4096
        if small and (not value.is_floating_point() or value.numel() <= 64):
            d["tensor"]["values"] = value.tolist()
        return d
    if isinstance(value, enum.Enum):
        return {"enum": f"{type(value).__name__}.{value.name}"}
    if isinstance(value, tuple):
        return {"tuple": [_describe(v) for v in value]}
    return value


def _configs(spec_tokens: int):
    from vllm.config import CUDAGraphMode
    model = SimpleNamespace(get_num_attention_heads=lambda _p: HQ,
                            get_num_kv_heads=lambda _p: HK, get_head_size=lambda: D,
                            rswa_window=None)
    compilation = SimpleNamespace(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
                                  cudagraph_capture_sizes=CAPTURE_SIZES,
                                  static_forward_context={})
    spec = None if not spec_tokens else SimpleNamespace(num_speculative_tokens=spec_tokens,
                                                        parallel_drafting=False)
    return SimpleNamespace(model_config=model, parallel_config=SimpleNamespace(),
                           compilation_config=compilation, speculative_config=spec,
                           scheduler_config=SimpleNamespace(max_num_seqs=MAX_NUM_SEQS))


def _common(seqs, causal):
    from vllm.v1.attention.backend import CommonAttentionMetadata
    q_lens = [q for q, _ in seqs]
    kv_lens = [k for _, k in seqs]
    cu = torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    pages = [-(-k // BLOCK) for k in kv_lens]
    table = torch.zeros(len(seqs), max(pages) + 1, dtype=torch.int32)
    perm = torch.randperm(NUM_BLOCKS, generator=torch.Generator().manual_seed(0))
    used = 0
    for s, n in enumerate(pages):
        table[s, :n] = perm[used:used + n].to(torch.int32)
        used += n
    seq_lens = torch.tensor(kv_lens, dtype=torch.int32)
    slots = []
    for s, (q, k) in enumerate(seqs):
        for pos in range(k - q, k):
            slots.append(int(table[s, pos // BLOCK]) * BLOCK + pos % BLOCK)
    return CommonAttentionMetadata(
        query_start_loc=cu, query_start_loc_cpu=cu.clone(), seq_lens=seq_lens,
        num_reqs=len(seqs), num_actual_tokens=sum(q_lens), max_query_len=max(q_lens),
        max_seq_len=max(kv_lens), block_table_tensor=table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64), causal=causal)


def record() -> dict:
    import vllm
    import vllm.v1.attention.backends.triton_attn as ta
    from vllm.v1.attention.backend import AttentionType
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    calls: list = []

    def recorder(op):
        def record_call(*args, **kwargs):
            assert not args, f"{op} called with positional arguments"
            calls.append({"op": op, "kwargs": [[k, _describe(v)] for k, v in kwargs.items()]})
        return record_call

    ta.unified_attention = recorder("unified_attention")
    ta.context_attention_fwd = recorder("context_attention_fwd")
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HK, head_size=D, dtype=DTYPE)
    out = {"source": "recorded by running vLLM's TritonAttentionImpl.forward "
                     "(vllm/v1/attention/backends/triton_attn.py) with "
                     "tools/record_vllm_forward.py",
           "vllm_version": vllm.__version__, "torch_version": torch.__version__,
           "platform": type(ta.current_platform).__name__,
           "model": {"num_heads": HQ, "num_kv_heads": HK, "head_size": D, "block_size": BLOCK,
                     "dtype": str(DTYPE).replace("torch.", ""), "num_blocks": NUM_BLOCKS},
           "scenarios": []}
    for name, seqs, what in SCENARIOS:
        attn_type = {"encoder": AttentionType.ENCODER_ONLY,
                     "cross_attention": AttentionType.ENCODER_DECODER}.get(
                         name, AttentionType.DECODER)
        causal = attn_type == AttentionType.DECODER
        builder = ta.TritonAttentionMetadataBuilder(
            spec, ["layer.0"], _configs(3 if name == "spec_decode" else 0), torch.device("cpu"))
        metadata = builder.build(0, _common(seqs, causal))
        impl = ta.TritonAttentionImpl(num_heads=HQ, head_size=D, scale=D ** -0.5,
                                      num_kv_heads=HK, alibi_slopes=None, sliding_window=None,
                                      kv_cache_dtype="auto", attn_type=attn_type)
        layer = SimpleNamespace(_q_scale=torch.tensor(1.0), _k_scale=torch.tensor(1.0),
                                _v_scale=torch.tensor(1.0))
        tokens = sum(q for q, _ in seqs)
        # the layer above forward splits one qkv projection into q, k, v views
        qkv = torch.randn(tokens, (HQ + 2 * HK) * D, dtype=DTYPE)
        q, k, v = qkv.split([HQ * D, HK * D, HK * D], dim=-1)
        query, key, value = q.view(-1, HQ, D), k.view(-1, HK, D), v.view(-1, HK, D)
        kv_cache = torch.zeros(NUM_BLOCKS, HK, BLOCK, 2 * D, dtype=DTYPE)   # logical HND
        output = torch.empty(tokens, HQ * D, dtype=DTYPE).view(-1, HQ, D)
        before = len(calls)
        impl.forward(layer, query, key, value, kv_cache, metadata, output=output)
        out["scenarios"].append({"name": name, "what": what, "seqs": seqs,
                                 "attn_type": attn_type.name if hasattr(attn_type, "name")
                                 else str(attn_type), "calls": calls[before:]})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    with open(args.output, "w") as f:
        json.dump(record(), f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
