"""Where the golden IR table lives and its pinned hashes, read once per process (a leaf of
``rocke.kernels``: the registry and the entry points use it to serve prebuilt kernels by spec
without building their IR; ``golden.py`` computes and compares the table)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

# The one place the table's location is written (package data: the bundle and `rocke golden` use it).
GOLDEN_PATH = Path(__file__).resolve().parents[1] / "golden_ir_hashes.json"


@functools.lru_cache(maxsize=4)
def _read(path: str, mtime_ns: int) -> dict:
    return json.loads(Path(path).read_text())


def pinned(path: Path = GOLDEN_PATH) -> dict[str, str]:
    """Variant -> pinned IR hash; empty when the table is absent or unreadable (an installed
    package without the table then builds each kernel's IR and serves by IR hash instead)."""
    try:
        return _read(str(path), path.stat().st_mtime_ns)
    except (OSError, ValueError):
        return {}


def prebuilt_for_spec(spec, workgroup_size=None):
    """The prebuilt bundle's kernel for ``spec`` when the golden table still pins the IR it was
    built from (``rocke.compiler.prebuilt.lookup_spec``): no IR build, no link; else None."""
    from rocke.compiler import DEFAULT_TARGET, prebuilt
    table = pinned()
    if not table:
        return None
    return prebuilt.lookup_spec(spec, table, DEFAULT_TARGET, workgroup_size)
