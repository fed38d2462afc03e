"""gfx950's shipped reduce_segments variants, a kernel family (rocke.kernels.registry):
``attention_shipped`` says which."""
from rocke.kernels.gfx950.attention import build
from rocke.kernels.gfx950.attention_shipped import shipped

VARIANTS = shipped()["reduce"]
GOLDEN_PERTURBATION = ("vector_width", {4: 2, 2: 4, 1: 2})     # see rocke.kernels.registry

__all__ = ["build", "VARIANTS", "GOLDEN_PERTURBATION"]
