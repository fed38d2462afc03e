"""rocke as a vLLM 0.33 attention backend: ``vllm serve MODEL --attention-backend ROCKE``.

vLLM finds it through the ``vllm.general_plugins`` entry point ``rocke`` (pyproject.toml), which
calls `register`: the name ``ROCKE`` is added to vLLM's ``AttentionBackendEnum`` with this
module's `RockeAttentionBackend` as its class, so ``--attention-backend ROCKE`` parses and vLLM's
own selector (``validate_configuration``) decides whether rocke can serve a layer. vLLM calls
the plugin in each of its processes; `register` may run any number of times.

The classes reuse vLLM's Triton backend (vllm/v1/attention/backends/triton_attn.py) and change
only what differs:

* `RockeAttentionImpl.forward` calls `rocke.vllm.unified_attention` (vLLM 0.33's 35 parameters,
  the same call as vLLM's Triton op) instead of vLLM's Triton kernel. The KV cache write
  (``do_kv_cache_update``, vLLM's reshape-and-cache kernel), fused fp8 output quantization and
  everything else are the Triton backend's.
* `RockeAttentionMetadataBuilder` is the Triton builder: the same metadata, the same split-KV
  workspaces (``softmax_segm_output/_max/_expsum``, 16 segments) and the same 3D threshold,
  which rocke.vllm uses as given, so a captured decode step allocates nothing.
* `RockeAttentionBackend` declares what rocke's kernels run (``CAPABILITIES`` of
  rocke/kernels/<target>/attention_dispatch.py, and `rocke.vllm`), so that vLLM refuses every
  other configuration when it selects a backend, not at the first forward.

Importing this module imports vLLM (it is imported by vLLM's plugin loader, or by a test that
has vLLM); the rest of rocke never imports it.
"""
from __future__ import annotations

from typing import ClassVar

import torch
from vllm.config.cache import CacheDType
from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backend import AttentionCGSupport, AttentionType, MultipleOf
from vllm.v1.attention.backends.triton_attn import (TritonAttentionBackend,
                                                    TritonAttentionImpl,
                                                    TritonAttentionMetadata,
                                                    TritonAttentionMetadataBuilder)
from vllm.v1.kv_cache_interface import is_quantized_kv_cache
from vllm.v1.kv_cache_layout import KVCacheLayout

from rocke import vllm as rocke_vllm
from rocke.kernels.common.attention_problem import attention_target

NAME = "ROCKE"

# vLLM's DeviceCapability of each AMD processor rocke has attention kernels for (vLLM reads
# (major, minor) off the gfx name: gfx942 -> (9, 4), gfx950 -> (9, 5)), with rocke's target
TARGETS = {(9, 4): "gfx942", (9, 5): "gfx950"}


def _common(field: str) -> list[int]:
    """A capability every target of TARGETS has (its dispatcher's CAPABILITIES), in order."""
    sets = [set(getattr(attention_target(t).CAPABILITIES, field)) for t in TARGETS.values()]
    return sorted(set.intersection(*sets))


HEAD_SIZES = _common("head_sizes")            # 64, 128, 256, 512: the kernels' own
# and every head size they run padded to the next of those (ALGORITHM.md §11.3)
SERVED_HEAD_SIZES = [h for h in range(1, max(HEAD_SIZES) + 1)
                     if all(attention_target(t).CAPABILITIES.padded_head_size(h)
                            for t in TARGETS.values())]
KERNEL_BLOCK_SIZES = _common("block_sizes")   # 16, 32, 64: vLLM splits larger blocks into these
MAX_GROUP = min(attention_target(t).CAPABILITIES.max_group for t in TARGETS.values())

# vLLM's --kv-cache-dtype values rocke reads: q's dtype ("auto", or float16/bfloat16 when that is
# the model's dtype: supports_combination), fp8 with a per-tensor scale, the platform's fp8
# (gfx942: e4m3fnuz, gfx950: e4m3fn; vLLM views the cache as current_platform.fp8_dtype()), and
# the INT8 / FP8 / INT4 per-token-head modes in vLLM 0.33's layout (each scale inline after its
# head's row; the Triton backend's customize_spec sizes the cache for it; INT4's rows rotated,
# ALGORITHM.md §13.4). Not: fp8_e5m2 (rocke's kernels decode e4m3 only); the other packed modes
# (not in rocke.vllm.SUPPORTED_KV_QUANT_MODES).
KV_CACHE_DTYPES: list[CacheDType] = ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3",
                                     "int8_per_token_head", "fp8_per_token_head",
                                     "int4_per_token_head"]
_MODEL_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


class RockeAttentionMetadataBuilder(TritonAttentionMetadataBuilder):
    """The Triton backend's builder, unchanged: its split-KV workspaces and 3D threshold are
    what rocke.vllm takes. CUDA graphs (HIP graphs on ROCm): captured for any batch, mixed
    prefill and decode too, as the Triton backend's are -- rocke.vllm reads no metadata on the
    host, launches on torch's current stream and never captures on its own while the caller is
    capturing; the 2D grid follows the token and sequence counts, the 3D one the caller's segment
    count, and every length is read on the device."""
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.ALWAYS


class RockeAttentionImpl(TritonAttentionImpl):
    """vLLM's Triton implementation with rocke's kernels in its forward."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        alibi_slopes: list[float] | None,
        sliding_window: int | None,
        kv_cache_dtype: str,
        logits_soft_cap: float | None = None,
        attn_type: AttentionType = AttentionType.DECODER,
        kv_sharing_target_layer_name: int | None = None,
        sinks: torch.Tensor | None = None,
        use_alibi_sqrt: bool = False,
        chunk_lookback: int = -1,
    ) -> None:
        super().__init__(num_heads, head_size, scale, num_kv_heads, alibi_slopes,
                         sliding_window, kv_cache_dtype, logits_soft_cap, attn_type,
                         kv_sharing_target_layer_name, sinks, use_alibi_sqrt, chunk_lookback)
        # the one limit vLLM's selector cannot see (it is not told the head counts)
        if num_heads // num_kv_heads > MAX_GROUP:
            raise NotImplementedError(
                f"{NAME}: a GQA group of {num_heads // num_kv_heads} query heads per KV head "
                f"exceeds rocke's kernels' {MAX_GROUP}")
        # rocke's kernels take fp16/bf16 queries: vLLM must not quantize them to fp8 first
        # (the Triton backend asks for that on gfx942/gfx950)
        self.supports_quant_query_input = False

    def forward(
        self,
        layer: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: TritonAttentionMetadata,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention of the batch's queries over the paged cache (already written by
        ``do_kv_cache_update``) into ``output``, by `rocke.vllm.unified_attention`.

        ``kv_cache`` is vLLM's logical [num_blocks, num_kv_heads, block_size, 2 * head_size]
        view; K and V are its two halves as [num_blocks, block_size, num_kv_heads, head_size]
        views (no copy), retyped to the platform's fp8 for an fp8 cache, whose per-tensor
        scales (``layer._k_scale``/``_v_scale``) go as [num_seqs, num_kv_heads] descales. A
        per-token-head cache's halves are head_size plus the inline fp32 scale long, and the
        scales go as the Triton backend's strided scale-cache views."""
        if output_block_scale is not None:
            raise NotImplementedError(f"{NAME}: fused block-scaled output quantization is not "
                                      f"implemented by rocke")
        if attn_metadata is None:           # vLLM's profiling run: no metadata, no attention
            return output.fill_(0)
        tokens = attn_metadata.num_actual_tokens
        descales = (attn_metadata.query_start_loc.shape[0] - 1, kv_cache.shape[1])
        k_scale_cache = v_scale_cache = None
        if self._is_per_token_head_quant:
            # the Triton backend's views: rows of head_size + the inline scale, the scale caches
            # strided fp32 views of those bytes (vLLM passes no descales with them)
            key_cache, value_cache = self._pth_key_value_caches(kv_cache)
            k_scale_cache, v_scale_cache = self._k_scale_cache, self._v_scale_cache
            k_descale = v_descale = None
        else:
            key_cache, value_cache = kv_cache.transpose(1, 2).split(self.head_size, dim=-1)
            if is_quantized_kv_cache(self.kv_cache_dtype) and key_cache.dtype != self.fp8_dtype:
                key_cache = key_cache.view(self.fp8_dtype)   # vLLM allocates fp8 caches as bytes
                value_cache = value_cache.view(self.fp8_dtype)
            k_descale = layer._k_scale.expand(descales)
            v_descale = layer._v_scale.expand(descales)
        rocke_vllm.unified_attention(
            q=query[:tokens], k=key_cache, v=value_cache, out=output[:tokens],
            cu_seqlens_q=attn_metadata.query_start_loc,
            max_seqlen_q=attn_metadata.max_query_len,
            seqused_k=attn_metadata.seq_lens, max_seqlen_k=attn_metadata.max_seq_len,
            softmax_scale=self.scale, causal=attn_metadata.causal,
            window_size=self.sliding_window, block_table=attn_metadata.block_table,
            softcap=self.logits_soft_cap, q_descale=None,
            k_descale=k_descale, v_descale=v_descale,
            seq_threshold_3D=attn_metadata.seq_threshold_3D,
            num_par_softmax_segments=attn_metadata.num_par_softmax_segments,
            softmax_segm_output=attn_metadata.softmax_segm_output,
            softmax_segm_max=attn_metadata.softmax_segm_max,
            softmax_segm_expsum=attn_metadata.softmax_segm_expsum,
            alibi_slopes=self.alibi_slopes, output_scale=output_scale, sinks=self.sinks,
            mm_prefix_range=attn_metadata.mm_prefix_range_tensor,
            rswa_prefix_lens=attn_metadata.rswa_prefix_lens,
            rswa_window=attn_metadata.rswa_window, use_alibi_sqrt=self.use_alibi_sqrt,
            kv_quant_mode=self._kv_quant_mode, k_scale_cache=k_scale_cache,
            v_scale_cache=v_scale_cache, chunk_lookback=self.chunk_lookback,
            use_td=self.use_td,
            mm_prefix_clamp_sliding_window=getattr(layer, "mm_prefix_clamp_sliding_window",
                                                   False))
        return output


class RockeAttentionBackend(TritonAttentionBackend):
    """vLLM's Triton backend, declaring what rocke's kernels run. Kept from the Triton backend:
    sinks, ALiBi (square-root too), sliding windows, soft-capping, mm_prefix ranges, batch
    invariance (``VLLM_BATCH_INVARIANT=1``), fp8 output fusion, the KV cache write (forward does
    not include it) and its spec. Narrowed here: the names below."""
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[CacheDType]] = KV_CACHE_DTYPES

    @staticmethod
    def get_name() -> str:
        return NAME

    @staticmethod
    def get_impl_cls() -> type["RockeAttentionImpl"]:
        return RockeAttentionImpl

    @staticmethod
    def get_builder_cls() -> type["RockeAttentionMetadataBuilder"]:
        return RockeAttentionMetadataBuilder

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(SERVED_HEAD_SIZES)

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return head_size in SERVED_HEAD_SIZES

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list[int | MultipleOf]:
        # exact sizes: a cache block of any multiple of 16 tokens is accepted (the Triton
        # backend's supports_block_size) and vLLM hands the kernels the largest of these that
        # divides it, splitting each block in the NHD layout
        return list(KERNEL_BLOCK_SIZES)

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...] | None:
        # NHD with the layer outermost: the only layout in which vLLM's split of a block into
        # kernel blocks gives rocke's kernels what they read (a block stride covering each
        # block's rows); an HND block split that way puts a block's heads a whole cache block
        # apart, and layouts with the block outermost are never split (blocks above 64 tokens)
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_non_causal(cls) -> bool:
        return True             # non-causal decoder prefill, ALGORITHM.md §12.11

    @classmethod
    def supports_rswa(cls) -> bool:
        return True             # ALGORITHM.md §12.10 (R-SWA with chunks or clamped ranges: refused)

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        # decoder self-attention only: the Triton backend's encoder path is vLLM's own prefill
        # kernel, and cross-attention is non-causal
        return attn_type == AttentionType.DECODER

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return (capability.major, capability.minor) in TARGETS

    @classmethod
    def supports_combination(
        cls,
        head_size: int,
        dtype: torch.dtype,
        kv_cache_dtype: "CacheDType | None",
        block_size: int | None,
        use_mla: bool,
        has_sink: bool,
        use_sparse: bool,
        use_mm_prefix: bool,
        device_capability: DeviceCapability,
    ) -> str | None:
        wanted = _MODEL_DTYPES.get(str(kv_cache_dtype))
        if wanted is not None and wanted != dtype:
            return (f"kv_cache_dtype {kv_cache_dtype} differs from the model's {dtype}: rocke "
                    f"reads 16-bit caches in the queries' dtype")
        return None


def register() -> None:
    """vLLM's ``vllm.general_plugins`` hook: ``ROCKE`` names `RockeAttentionBackend` in vLLM's
    registry (``AttentionBackendEnum.ROCKE``). Idempotent."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    path = f"{__name__}.{RockeAttentionBackend.__qualname__}"
    if NAME in AttentionBackendEnum.__members__:
        register_backend(AttentionBackendEnum[NAME], path)
    else:
        register_backend(NAME, path)


__all__ = ["NAME", "RockeAttentionBackend", "RockeAttentionImpl",
           "RockeAttentionMetadataBuilder", "register"]
