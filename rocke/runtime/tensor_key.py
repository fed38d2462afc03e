"""A call's tensors as one cache key, read in one C++ pass: ``native()`` is the built helper's
``tensors_key(tensors) -> (hash, bytes) | None`` (tensor_key.cpp), or None where it is not
built or ``ROCKE_NATIVE_KEY=off``; callers then read the same facts with torch's Python getters.

Why: a cached attention call's host cost is mostly reading its tensors -- six getter calls per
tensor, about 0.4 us each tensor on a 2-core EPYC, 4 us for vLLM's ten -- where one C++ pass over
the TensorImpls takes about 0.25 us for all ten.

The helper is built against the torch it runs with (``--build``: the system C++ compiler, torch's
headers, ``scripts/setup.sh`` runs it) into ``_native/<tag>/`` beside this file, the tag naming
torch's version, the Python ABI and the source's hash: another torch, Python or source finds no
helper (never a stale one) and the Python reads serve until it is built again.

    python -m rocke.runtime.tensor_key --build     # build (prints where); --check: is it loaded?
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

from rocke import env

SOURCE = Path(__file__).with_suffix(".cpp")
NATIVE_DIR = Path(__file__).parent / "_native"
MODULE_NAME = "rocke_tensor_key"

_lock = threading.Lock()
_loaded: list = []          # [tensors_key or None], once resolved


def build_tag() -> str:
    """What the helper is built against: torch's version, the Python ABI, the source's hash."""
    import torch
    source = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return f"torch-{torch.__version__}-{sys.implementation.cache_tag}-{source}"


def built_path() -> Path:
    return NATIVE_DIR / build_tag() / (MODULE_NAME + sysconfig.get_config_var("EXT_SUFFIX"))


def native(reload: bool = False):
    """The helper's ``tensors_key``, or None (not built for this torch, Python and source, or
    ``ROCKE_NATIVE_KEY=off``). Resolved once per process, at the first keyed call; ``reload``
    resolves it again (after the lever changed, or a build)."""
    if _loaded and not reload:
        return _loaded[0]
    with _lock:
        if reload or not _loaded:
            _loaded[:] = [_load()]
    return _loaded[0]


def _load():
    if env.native_key() == "off":
        return None
    path = built_path()
    if not path.is_file():
        return None
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module.tensors_key


def compile_command(out: Path) -> list[str]:
    """The compiler command that builds the helper into ``out`` (a shared object)."""
    import torch
    from torch.utils import cpp_extension
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    libraries = cpp_extension.library_paths()
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)      # torch's own C++ ABI flag
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    return [*cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-w",
            f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(f"-I{p}" for p in includes), str(SOURCE),
            "-o", str(out), *(f"-L{p}" for p in libraries),
            *(f"-Wl,-rpath,{p}" for p in libraries), "-lc10", "-ltorch", "-ltorch_cpu",
            "-ltorch_python"]


def build(quiet: bool = False) -> Path:
    """Compile the helper for this torch and Python (atomically: a half-written object is never
    loaded). Raises RuntimeError naming the compiler's complaint."""
    out = built_path()
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + f".{os.getpid()}.part")
    command = compile_command(partial)
    if not quiet:
        print(f"[tensor_key] building {out}", file=sys.stderr)
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise RuntimeError(f"tensor_key: no C++ compiler ({command[0]}): {e}") from None
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"tensor_key: {shlex.join(command)} failed:\n{done.stderr[-4000:]}")
    os.replace(partial, out)
    return out


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="store_true", help="build the helper for this torch")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless the helper is built and loads")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.build:
        try:
            path = build(quiet=a.quiet)
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 1
        if not a.quiet:
            print(path)
    if a.check or not a.build:
        loaded = native() is not None
        print(f"native tensor key: {'loaded from ' + str(built_path()) if loaded else 'not loaded'}"
              + ("" if loaded or env.native_key() != "off" else " (ROCKE_NATIVE_KEY=off)"))
        return 0 if loaded else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
