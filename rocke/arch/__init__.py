"""Target facts as data: limits, the MFMA catalog, occupancy, the kernarg ABI.

Names are resolved lazily so that `rocke.emu` can use `rocke.arch.abi` without loading the MFMA
layout tables: the emulator derives MFMA semantics from the ISA on its own (a test checks this).
"""
import importlib

_EXPORTS = {
    "GFX942": "targets", "GFX950": "targets", "TARGETS": "targets", "Target": "targets",
    "get_target": "targets", "DEFAULT_TARGET": "targets",
    "MFMA_CATALOG": "mfma", "MfmaAtom": "mfma", "get_atom": "mfma", "atom_for": "mfma",
    "Occupancy": "occupancy_rules", "occupancy": "occupancy_rules", "unified_vgpr_count": "occupancy_rules",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rocke.arch' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
