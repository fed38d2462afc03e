"""A repository script (tools/, benchmarks/) loaded as a module, for tests of its functions."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str | None = None):
    """The module of ``ROOT / relative`` (e.g. "tools/vllm_contract.py"), executed once per call."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
