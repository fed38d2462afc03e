"""gfx942 (CDNA3, MI300X) kernels: the unified paged attention family (2D tiled, 3D split-KV,
and the reduce_segments merge of the 3D partials)."""
