"""gfx950's shipped 3D attention variants, a kernel family (rocke.kernels.registry):
attention_shipped says which."""
from rocke.kernels.gfx950.attention import build
from rocke.kernels.gfx950.attention_shipped import shipped

VARIANTS = shipped()["3d"]
GOLDEN_PERTURBATION = ("kv_cache_policy", {"normal": "stream", "stream": "normal"})     # see rocke.kernels.registry

__all__ = ["build", "VARIANTS", "GOLDEN_PERTURBATION"]
