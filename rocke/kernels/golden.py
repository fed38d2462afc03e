"""The golden IR table: every shipped variant -> SHA-256 of its IR text (GOLDEN_PATH, package data:
the prebuilt bundle and `rocke golden` read it from an installed rocke too)."""
from __future__ import annotations

import json
from pathlib import Path

from ..fileio import write_output
from .registry import all_variants, loadable_variants

# The table's location is written once, in common/golden_table.py (a leaf the registry can use).
from .common.golden_table import GOLDEN_PATH  # noqa: F401


def current_hashes(families=None) -> dict[str, str]:
    """Variant -> IR hash, for every family or only ``families`` (a user's own table)."""
    if not families:
        variants = all_variants()          # every family must load: a table must not omit one
    else:
        variants, broken = loadable_variants()      # a broken family not asked for is no matter
        for family in families:
            if family in broken:
                raise ValueError(broken[family])
        known = {v.family for v in variants.values()}
        unknown = sorted(set(families) - known)
        if unknown:
            raise ValueError(f"unknown kernel families {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return {name: v.ir_hash() for name, v in sorted(variants.items())
            if not families or v.family in families}


def load_golden(path: Path = GOLDEN_PATH) -> dict[str, str]:
    if not path.exists():
        raise FileNotFoundError(f"no golden table at {path}; create it with `rocke golden update`")
    return json.loads(path.read_text())


def diff_golden(golden: dict[str, str], current: dict[str, str]) -> dict[str, list[str]]:
    return {
        "changed": sorted(k for k in golden.keys() & current.keys() if golden[k] != current[k]),
        "missing": sorted(current.keys() - golden.keys()),   # shipped but not pinned
        "stale": sorted(golden.keys() - current.keys()),     # pinned but no longer shipped
    }


def write_golden(hashes: dict[str, str], path: Path = GOLDEN_PATH) -> None:
    """Atomically for a file (a failed update leaves the old table and no temporary), directly
    for a device or FIFO (``rocke.fileio``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_output(path, (json.dumps(dict(sorted(hashes.items())), indent=1) + "\n").encode())
