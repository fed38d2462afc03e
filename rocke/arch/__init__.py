"""Target facts as data: limits, the MFMA catalog, occupancy. Plain data and small pure functions."""
from .mfma import MFMA_CATALOG, MfmaAtom, atom_for, get_atom
from .occupancy import Occupancy, occupancy, unified_vgpr_count
from .targets import GFX942, GFX950, TARGETS, Target, get_target

__all__ = ["GFX942", "GFX950", "TARGETS", "Target", "get_target", "MFMA_CATALOG", "MfmaAtom",
           "get_atom", "atom_for", "Occupancy", "occupancy", "unified_vgpr_count"]
