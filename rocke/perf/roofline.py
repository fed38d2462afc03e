"""A roofline picture of modelled kernels against MI300X's limits ("modelled MI300X").

Each kernel is a point at (FLOPs per DRAM byte, FLOP/s at its modelled time), and a hollow
marker at (FLOPs per LDS byte, the same FLOP/s); the roofs are the peak MFMA f16/bf16 rate,
the achievable HBM bandwidth and the LDS bandwidth, all from rocke.arch.costs. The FLOPs are
the matrix-core work the exact counters saw (MFMA issues x the atom's FLOPs): attention's
softmax VALU work is not counted, as is usual for attention TFLOPS.
`roofline_data` is the plotted content (tests check it); `plot` draws it with matplotlib.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocke.arch.costs import MI300X, Costs
from rocke.arch.mfma import MFMA_CATALOG

TITLE = "modelled MI300X roofline"


@dataclass(frozen=True)
class KernelPoint:
    label: str
    flops: float            # MFMA FLOPs of the launch(es)
    dram_bytes: float       # DRAM footprint (unique bytes read + written)
    lds_bytes: float
    modelled_us: float      # modelled MI300X time

    @property
    def flops_per_s(self) -> float:
        return self.flops / (self.modelled_us * 1e-6)

    @property
    def dram_intensity(self) -> float:
        return self.flops / self.dram_bytes if self.dram_bytes else float("inf")

    @property
    def lds_intensity(self) -> float | None:
        return self.flops / self.lds_bytes if self.lds_bytes else None


def mfma_flops(mfma_by_atom: dict[str, int]) -> int:
    """FLOPs of the MFMA issues counted per mnemonic (rocke.emu.profile `mfma_by_atom`)."""
    by_mnemonic = {a.mnemonic: a.flops for a in MFMA_CATALOG.values()}
    unknown = sorted(set(mfma_by_atom) - set(by_mnemonic))
    if unknown:
        raise ValueError(f"MFMA mnemonics without a FLOP count in rocke.arch.mfma: {unknown}")
    return sum(by_mnemonic[m] * n for m, n in mfma_by_atom.items())


def roofs(costs: Costs = MI300X) -> dict[str, float]:
    """The limits drawn: peak f16/bf16 MFMA FLOP/s (32x32x8: FLOPs per pipe cycle on every
    SIMD at the peak clock), achievable HBM and LDS bytes/s."""
    atom = MFMA_CATALOG["32x32x8_f16"]
    peak = atom.flops / costs.mfma_cycles(atom.mnemonic) * costs.simds * costs.clock_hz
    return {"mfma_f16_flops_s": peak, "hbm_bytes_s": costs.hbm_achievable_bytes_s,
            "lds_bytes_s": costs.lds_bytes_per_clock_cu * costs.target.cu_count * costs.clock_hz}


def roofline_data(points: list[KernelPoint], costs: Costs = MI300X) -> dict:
    """What the picture shows: the roofs and one entry per kernel (those without MFMA work
    have no FLOP rate and are listed under `skipped`)."""
    shown = [p for p in points if p.flops > 0 and p.modelled_us > 0]
    return {"title": TITLE, "roofs": roofs(costs),
            "points": [{"label": p.label, "dram_intensity": p.dram_intensity,
                        "lds_intensity": p.lds_intensity, "flops_per_s": p.flops_per_s}
                       for p in shown],
            "skipped": [p.label for p in points if p not in shown]}


def plot(points: list[KernelPoint], path: str | Path, costs: Costs = MI300X) -> dict:
    """Write the picture to `path` (PNG by its suffix) and return `roofline_data`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data = roofline_data(points, costs)
    if not data["points"]:
        raise ValueError("no kernel with MFMA work and a modelled time to plot")
    r = data["roofs"]
    xs = [p["dram_intensity"] for p in data["points"]]
    xs += [p["lds_intensity"] for p in data["points"] if p["lds_intensity"]]
    x = np.logspace(np.log10(min(xs) / 4), np.log10(max(xs) * 4), 200)
    fig, ax = plt.subplots(figsize=(12, 6))
    tf = 1e-12
    ax.loglog(x, np.full_like(x, r["mfma_f16_flops_s"] * tf), "k-",
              label=f"peak MFMA f16/bf16 {r['mfma_f16_flops_s'] * tf:.0f} TFLOP/s")
    ax.loglog(x, np.minimum(x * r["hbm_bytes_s"], r["mfma_f16_flops_s"]) * tf, "b--",
              label=f"HBM achievable {r['hbm_bytes_s'] / 1e12:.2f} TB/s (x = FLOP/DRAM byte)")
    ax.loglog(x, np.minimum(x * r["lds_bytes_s"], r["mfma_f16_flops_s"]) * tf, "g:",
              label=f"LDS {r['lds_bytes_s'] / 1e12:.1f} TB/s (x = FLOP/LDS byte)")
    for i, p in enumerate(data["points"]):
        # shapes and sizes vary so rows at the same point (a dispatcher choice and the path it
        # chose) stay visible
        colour, marker, size = f"C{i % 10}", "osD^v"[i % 5], 11 - 2 * (i % 4)
        ax.loglog(p["dram_intensity"], p["flops_per_s"] * tf, marker, color=colour, ms=size,
                  label=p["label"])
        if p["lds_intensity"]:
            ax.loglog(p["lds_intensity"], p["flops_per_s"] * tf, marker, mfc="none", ms=size,
                      color=colour)
    ax.set_xlabel("arithmetic intensity (FLOP per byte; filled: DRAM, hollow: LDS)")
    ax.set_ylabel("modelled MI300X TFLOP/s")
    ax.set_title(f"{TITLE} (modelled, not measured)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the axes
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return data
