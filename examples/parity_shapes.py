"""The inline shape set of ``parity_unified_attention.py``: three groups, every shape causal
(bottom-right), cache block size 64.

- ``default``: core production shapes — decode and prefill, fp16/bf16, d64/d128, MHA + GQA,
  varied batch sizes.
- ``fmha``: integration-test net shapes — GQA ratios (non-powers of two too), asymmetric
  lengths, tiny sequences, cross-attention, large-batch decode, select d256 shapes.
- ``features``: small shapes exercising vLLM's score features (softcap, ALiBi, QQ-bias,
  sliding window, sinks) and ALGORITHM.md §13's fp8 output, per-token-head KV scales and
  square-root ALiBi (``FEATURE_ARGS`` names each shape's), alone and combined.
- ``creative``: exploratory sweep — long-KV decode (up to 64 Ki keys), chunked prefill,
  non-standard GQA ratios, d64/d256 bf16, large-batch variants, a mixed decode+prefill batch.

d256 shapes run like the others (the tiled narrow d256 path, ALGORITHM.md §11.2).
"""
from __future__ import annotations

from attention_harness import decode, dense, varlen

DEFAULT = [
    decode("f16", 32, 8, 1, 1024, 128, "decode, fp16 d128, GQA 4", name="decode_d128_q1k1024"),
    decode("bf16", 16, 16, 4, 2048, 64, "decode, bf16 d64, MHA, batch 4"),
    decode("f16", 8, 1, 2, 3000, 128, "decode, GQA 8, KV not a multiple of the block"),
    dense("f16", 32, 8, 1, 2048, 2048, 128, "prefill, fp16 d128 flash regime (wide4/L4/wide2)"),
    dense("f16", 16, 16, 2, 512, 512, 64, "prefill, fp16 d64, MHA"),
    dense("bf16", 32, 8, 1, 1024, 1024, 128, "prefill, bf16 d128 (narrow: no bf16 x8 flash)"),
    dense("bf16", 16, 4, 4, 256, 256, 64, "prefill, bf16 d64, GQA 4, batch 4"),
    dense("f16", 8, 8, 8, 128, 128, 128, "prefill, fp16 d128, MHA, batch 8"),
]

FMHA = [
    dense("f16", 12, 4, 2, 512, 512, 64, "GQA 3 (non-power-of-two)"),
    dense("f16", 40, 8, 1, 384, 384, 128, "GQA 5 (non-power-of-two)"),
    dense("bf16", 28, 4, 2, 256, 256, 128, "GQA 7 (non-power-of-two)"),
    dense("f16", 16, 2, 2, 512, 512, 128, "GQA 8"),
    dense("f16", 8, 8, 2, 128, 1024, 128, "asymmetric: query 128 against 1024 keys"),
    varlen("bf16_h16kv2_varlen_s64x320_s200x999_d64", "bf16", 16, 2, 64,
           [(64, 320), (200, 999)], "asymmetric varlen, KV not a multiple of the block"),
    dense("f16", 8, 2, 4, 3, 3, 128, "tiny sequences (3 tokens)"),
    varlen("bf16_h4kv1_varlen_tiny_d64", "bf16", 4, 1, 64,
           [(1, 1), (2, 2), (7, 7), (1, 5), (17, 17)], "tiny sequences, 1..17 tokens, GQA 4"),
    dense("f16", 16, 16, 2, 77, 1024, 64, "cross-attention shape: 77 queries over 1024 keys "
          "(bottom-right causal: the queries sit at the end of the keys)"),
    decode("f16", 32, 8, 128, 512, 128, "large-batch decode (128 sequences)"),
    decode("bf16", 8, 8, 64, 256, 64, "large-batch decode, bf16 d64, MHA"),
    dense("f16", 8, 8, 1, 512, 512, 256, "d256 prefill"),
    decode("bf16", 16, 4, 4, 2048, 256, "d256 decode"),
]

CREATIVE = [
    decode("f16", 32, 8, 1, 16384, 128, "long-KV decode (16 Ki)"),
    decode("f16", 8, 1, 1, 65536, 128, "long-KV decode (64 Ki), GQA 8"),
    decode("bf16", 16, 16, 2, 32768, 64, "long-KV decode (32 Ki), bf16 d64"),
    dense("f16", 32, 8, 2, 256, 4096, 128, "chunked prefill: 256-token chunk, 4 Ki context"),
    dense("bf16", 16, 2, 1, 512, 8192, 64, "chunked prefill: 512-token chunk, 8 Ki context"),
    dense("f16", 24, 8, 1, 512, 512, 128, "GQA 3, fp16 d128 flash"),
    dense("bf16", 20, 4, 2, 300, 300, 64, "GQA 5, bf16 d64, length not a multiple of the block"),
    dense("f16", 48, 8, 1, 256, 256, 64, "GQA 6"),
    dense("bf16", 14, 2, 1, 640, 640, 128, "GQA 7, bf16 d128"),
    dense("bf16", 16, 16, 2, 1024, 1024, 64, "bf16 d64 prefill"),
    dense("bf16", 8, 8, 1, 1024, 1024, 256, "bf16 d256 prefill"),
    dense("f16", 32, 8, 32, 128, 128, 128, "large-batch prefill (32 sequences)"),
    decode("bf16", 32, 8, 256, 1024, 64, "large-batch decode (256 sequences), bf16 d64"),
    varlen("fp16_h32kv8_mixed_d128", "f16", 32, 8, 128,
           [(1, 1000), (37, 517), (256, 256), (1, 77), (129, 2048)],
           "mixed batch: decode rows and prefill chunks in one launch"),
]

# ``features``: vLLM's score features (ALGORITHM.md §12), each shape with the features named in
# FEATURE_ARGS (the harness builds the tensors; values chosen so each feature moves the output on
# the harness's +-0.1 inputs: their scores are ~0.003, so the cap is 0.002)
FEATURES = [
    varlen("features_softcap_fp16_h8kv2_d128", "f16", 8, 2, 128, [(1, 100), (5, 40)],
           "softcap alone, fp16 flash"),
    varlen("features_alibi_varlen_bf16_h10kv2_d64", "bf16", 10, 2, 64, [(6, 6), (1, 70), (9, 130)],
           "ALiBi + causal varlen, GQA 5"),
    varlen("features_qq_bias_fp16_h4kv1_d64", "f16", 4, 1, 64, [(7, 30), (1, 20)],
           "QQ-bias alone (runs narrow), GQA 4"),
    varlen("features_window_softcap_bf16_h16kv2_d128", "bf16", 16, 2, 128, [(1, 300), (12, 200)],
           "sliding window 32 + softcap, GQA 8"),
    varlen("features_sinks_window_fp16_h8kv8_d64", "f16", 8, 8, 64, [(1, 250), (4, 90)],
           "sinks + sliding window 64, MHA"),
    decode("bf16", 32, 8, 2, 700, 128, "sinks on long decode (auto: 3D, sink in segment 0)",
           name="features_sinks_decode_bf16_h32kv8_d128"),
    # ALGORITHM.md §13: fp8 output, per-token-head KV scales, square-root ALiBi
    varlen("features_out_fp8_fp16_h8kv2_d128", "f16", 8, 2, 128, [(1, 100), (5, 40)],
           "fp8 output (/ output_scale, saturating), GQA 4"),
    varlen("features_alibi_sqrt_bf16_h10kv2_d64", "bf16", 10, 2, 64, [(6, 6), (1, 70), (9, 130)],
           "square-root ALiBi + causal varlen, GQA 5"),
    varlen("features_int8_tok_fp16_h8kv1_d64", "f16", 8, 1, 64, [(1, 120), (4, 60)],
           "int8 cache with per-token-head scales, GQA 8"),
    decode("bf16", 16, 4, 2, 600, 128, "fp8 per-token-head cache + fp8 output + sinks on decode "
           "(auto: 3D, reduce_segments quantizes)", name="features_fp8_tok_out_fp8_bf16_h16kv4_d128"),
    varlen("features_mqa_g32_fp16_h32kv1_d64", "f16", 32, 1, 64, [(1, 90), (3, 40)],
           "MQA, a GQA group of 32: two q-head blocks of 16 per KV head"),
    varlen("features_mm_prefix_bf16_h8kv2_d64", "bf16", 8, 2, 64, [(24, 40), (9, 9), (1, 30)],
           "mm_prefix_range: bidirectional image ranges inside a causal prefill, GQA 4"),
]
FEATURE_ARGS = {
    "features_softcap_fp16_h8kv2_d128": dict(softcap=0.002),
    "features_alibi_varlen_bf16_h10kv2_d64": dict(alibi=True),
    "features_qq_bias_fp16_h4kv1_d64": dict(qq_bias=True),
    "features_window_softcap_bf16_h16kv2_d128": dict(window=(31, 0), softcap=0.002),
    "features_sinks_window_fp16_h8kv8_d64": dict(sinks=True, window=(63, 0)),
    "features_sinks_decode_bf16_h32kv8_d128": dict(sinks=True),
    "features_out_fp8_fp16_h8kv2_d128": dict(output_scale=0.005),
    "features_alibi_sqrt_bf16_h10kv2_d64": dict(alibi=True, alibi_sqrt=True),
    "features_int8_tok_fp16_h8kv1_d64": dict(kv_quant_mode="int8_per_token_head"),
    "features_fp8_tok_out_fp8_bf16_h16kv4_d128": dict(kv_quant_mode="fp8_per_token_head",
                                                      output_scale=0.005, sinks=True),
    "features_mqa_g32_fp16_h32kv1_d64": dict(),
    # per sequence, inclusive [start, end] absolute positions; start >= end = unused
    "features_mm_prefix_bf16_h8kv2_d64": dict(mm_prefix=[[[20, 33], [2, 6]], [[0, 8], [5, 5]],
                                                         [[3, 29], [0, 0]]]),
}

GROUPS = {"default": DEFAULT, "fmha": FMHA, "creative": CREATIVE, "features": FEATURES}
