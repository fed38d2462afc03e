"""The gfx950 (MI350X/MI355X) dense prefill family: the kernel of rocke.kernels.common.dense_prefill
built for gfx950 (32x32x16 atom), its shipped variants and golden perturbation."""

from __future__ import annotations

from rocke.kernels.common.dense_prefill import (ARGS, DTYPES, DensePrefillSpec, build,  # noqa: F401
                                                check_problem, kernel_args, launch_geometry,
                                                persistent_workgroups)

TARGET = "gfx950"


def _variants() -> dict[str, DensePrefillSpec]:
    out = {}
    # (heads, kv heads, head dim): Llama-3-8B (32/8), 40/8 and 28/4 GQA, a d64 MHA model
    models = (("h32kv8", 32, 8, 128), ("h40kv8", 40, 8, 128), ("h28kv4", 28, 4, 128), ("h16kv16", 16, 16, 64))
    for dtype in DTYPES:
        for tag, h, hkv, d in models:
            for causal in (True, False):
                spec = DensePrefillSpec(dtype, d, 4096, h, hkv, causal, target=TARGET)
                out[f"{dtype}_d{d}_{tag}_{'causal' if causal else 'full'}"] = spec
    return out


VARIANTS: dict[str, DensePrefillSpec] = _variants()
GOLDEN_PERTURBATION = ("causal", {True: False, False: True})     # see rocke.kernels.registry
