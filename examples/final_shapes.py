"""The shape set of ``final_shapes_check.py``: uniform batches so each shape also
has a dense torch SDPA twin to time against. Every shape is causal (bottom-right); decode rows
(query_len 1) see every key.

- ``decode``: query_len 1 over 1-8 Ki keys (the dispatcher's split-KV 3D path and graph replay).
- ``prefill``: short prefill, max_seqlen_q <= 768 (graphed by the dispatcher's rule).
- ``long_prefill``: prefill up to S8192 plus a chunked (non-square) case (not graphed).
- ``dense_kernel``: the dense prefill kernel (``rocke.dense_attention``, gfx942's dense family)
  on the dense twin itself, against the same SDPA; small, so the emulator runs it in seconds.
- ``d256_disabled``: head_size 256 (the tiled narrow d256 path, ALGORITHM.md §11.2). It runs
  like every other group now; the historical name is kept so existing ``--groups d256_disabled``
  command lines still work, and ``d256`` is an alias of the same shapes.
"""
from __future__ import annotations

from attention_harness import decode, dense

GROUPS = {
    "decode": [
        decode("f16", 32, 8, 1, 1024, 128, "decode, fp16 d128, GQA 4", name="decode_d128_q1k1024"),
        decode("f16", 32, 8, 8, 4096, 128, "decode, batch 8, 4 Ki keys"),
        decode("bf16", 16, 16, 4, 2048, 64, "decode, bf16 d64, MHA"),
        decode("f16", 40, 8, 16, 8192, 128, "decode, GQA 5, batch 16, 8 Ki keys"),
    ],
    "prefill": [
        dense("f16", 32, 8, 1, 512, 512, 128, "short prefill, fp16 d128 flash"),
        dense("bf16", 32, 8, 1, 512, 512, 128, "short prefill, bf16 d128 narrow"),
        dense("f16", 16, 16, 4, 256, 256, 64, "short prefill, fp16 d64, batch 4"),
        dense("bf16", 12, 4, 2, 768, 768, 64, "short prefill at the graph limit (768), GQA 3"),
    ],
    "long_prefill": [
        dense("f16", 32, 8, 1, 2048, 2048, 128, "long prefill, fp16 d128 flash"),
        dense("f16", 32, 8, 1, 4096, 4096, 128, "long prefill, fp16 d128 flash"),
        dense("f16", 32, 8, 1, 8192, 8192, 128, "long prefill, S8192"),
        dense("bf16", 32, 8, 1, 4096, 4096, 128, "long prefill, bf16 d128"),
        dense("f16", 16, 16, 1, 4096, 4096, 64, "long prefill, fp16 d64, MHA"),
        dense("f16", 32, 8, 1, 1024, 4096, 128, "chunked prefill (non-square: torch 'default')"),
    ],
    "dense_kernel": [
        dense("bf16", 8, 2, 1, 512, 512, 128, "rocke.dense_attention, bf16 d128 GQA 4, causal",
              kernel="dense"),
    ],
    "d256_disabled": [
        dense("f16", 8, 8, 1, 2048, 2048, 256, "d256 prefill"),
        decode("bf16", 16, 4, 4, 4096, 256, "d256 decode"),
    ],
}

GROUPS["d256"] = GROUPS["d256_disabled"]      # alias (the selection drops duplicate shapes)

#: groups left out unless named explicitly (none: d256 runs since the tiled d256 path exists)
DISABLED: tuple[str, ...] = ()
