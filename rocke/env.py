"""Every ROCKE_* environment lever, read in this one module (a leaf: it imports only the stdlib,
so the emulator may use it too). The attention family's HIPDNN_GFX942_* levers are read in
``rocke/kernels/common/knobs.py``.

Each reader validates its variable and raises ``ValueError`` naming it, so a typo in a lever is
an error rather than a silently ignored default.
"""
from __future__ import annotations

import os
from pathlib import Path

#: name -> (default, meaning); the README's options table lists the same.
LEVERS: dict[str, tuple[str, str]] = {
    "ROCKE_CACHE_DIR": ("$XDG_CACHE_HOME/rocke or ~/.cache/rocke", "compile cache directory"),
    "ROCKE_LD_LLD": ("discovered", "the ld.lld to link code objects with"),
    "ROCKE_LIBLLVM": ("discovered", "the shared LLVM library (libLLVM, LLVM 20 or newer with the "
                      "AMDGPU target) that disassembles gfx950 code objects when no llvm-objdump "
                      "here knows gfx950"),
    "ROCKE_LINKER": ("ld.lld", "what links code objects: ld.lld | comgr (needs hip-python's "
                     "comgr bindings and ROCm's libamd_comgr)"),
    "ROCKE_DEVICE": ("hip if a gfx942 or gfx950 GPU is found, else emu", "launch device: emu | hip | "
                     "emu:gfx942 | emu:gfx950 (the emulator running that target; emu = gfx942)"),
    "ROCKE_EMU_TIMEOUT_S": ("600", "wall-time budget of one emulator launch, seconds"),
    "ROCKE_EMU_WORKERS": ("auto = usable cores, at most 16; 1 under pytest-xdist or without "
                          "os.fork", "processes one emulator launch may run its workgroups in "
                          "(1 = serial; results are the serial run's whatever the count)"),
    "ROCKE_EMU_BACKEND": ("numpy", "array library the emulator computes with: numpy | torch "
                          "(bit-identical results; torch ports a subset of the ISA and names "
                          "any instruction it has not ported)"),
    "ROCKE_EMU_DEVICE": ("cpu", "where the torch backend's arrays live: cpu | cuda (needs "
                         "ROCKE_EMU_BACKEND=torch and a CUDA build of torch with a GPU)"),
    "ROCKE_EMU_RACE_CHECK": ("1", "0: every emulator launch runs without the LDS race checker, "
                             "whatever it asks (faster, above all on CUDA, where LDS addresses "
                             "then stay on the device; races go unreported, out-of-bounds "
                             "accesses still fault)"),
    "ROCKE_EMU_STRETCHES": ("1", "torch backend with its own device arrays (CUDA): run "
                            "straight-line stretches of scalar and vector instructions as one "
                            "unit, replayed as a CUDA graph on a GPU (0 = instruction by "
                            "instruction; results are the same either way)"),
    "ROCKE_EMU_CUDA_KERNELS": ("1", "torch backend on CUDA: the hottest float ops (v_exp_f32, "
                               "fma, f32 add/sub/mul, min/max) as one jiterator kernel each, "
                               "and the dense MFMAs and LDS reads/writes as one fused Triton "
                               "kernel each, instead of many torch operations (0 = torch "
                               "operations, as where jiterator or Triton is missing, e.g. ROCm "
                               "builds; the bits are the same)"),
    "ROCKE_FAMILIES": ("none", "extra kernel families: comma-separated name=python.module entries"),
    "ROCKE_CHECK_METADATA": ("device", "the attention entry point's content checks of GPU "
                             "metadata: device (a guard kernel records the first violation; "
                             "reported by rocke.runtime.check_errors() or the next synchronize) "
                             "| sync (also check right after each call: a synchronisation per "
                             "call, for debugging) | off (no guard launch; the kernels still never "
                             "read outside the cache)"),
    "ROCKE_BATCH_INVARIANT": ("0", "1: unified attention's output bits for a sequence do not "
                              "depend on the rest of the batch (the 2D path only, no split-KV); "
                              "rocke.vllm also honours vLLM's VLLM_BATCH_INVARIANT"),
    "ROCKE_PREBUILT": ("rocke/prebuilt/<processor> in the package", "bundle of prebuilt code "
                       "objects (`rocke aot build`): a directory, or off"),
}


_ENCODED_NAMES: dict[tuple, tuple] = {}


def lookup(names: tuple[str, ...]) -> tuple:
    """Each named variable's current value (None when unset), for change detection on a hot
    path (a cache key): the values os.environ.get would give, read from os.environ's own
    mapping (CPython, POSIX: bytes values) without the KeyError that Mapping.get raises and
    catches per unset name (~1-3 us each, most of an attention call's host cost)."""
    data = getattr(os.environ, "_data", None)
    if os.name != "posix" or type(data) is not dict:
        return tuple(map(os.environ.get, names))
    keys = _ENCODED_NAMES.get(names)
    if keys is None:
        keys = _ENCODED_NAMES[names] = tuple(map(os.environ.encodekey, names))
    return tuple(map(data.get, keys))


def state_reader(names: tuple[str, ...]):
    """A function of no arguments returning ``(number of environment variables,)``, followed
    by ``lookup(names)`` when any of the names is set: what a cache keyed by levers compares
    per call (the names encoded once here and looked up in one C-level pass; the count changes
    whenever a variable is set or unset, so an unknown lever appearing is seen by a re-parse).
    Two reads are equal exactly when the count and every named variable's value are."""
    keys = tuple(map(os.environ.encodekey, names)) if os.name == "posix" else None
    key_set = frozenset(keys or ())

    def read() -> tuple:
        data = getattr(os.environ, "_data", None)
        if keys is None or type(data) is not dict:
            return (len(os.environ),) + tuple(map(os.environ.get, names))
        if data.keys().isdisjoint(key_set):     # none set (levers mostly are not): no values
            return (len(data),)
        return (len(data),) + tuple(map(data.get, keys))
    return read


def get(name: str) -> str | None:
    """``os.environ.get(name)``, read through ``lookup``: an unset name costs no KeyError (vLLM's
    adapter reads two levers per call)."""
    value = lookup((name,))[0]
    return os.environ.decodevalue(value) if type(value) is bytes else value


def raw(name: str) -> str | None:
    """The variable's value, or None when unset or empty."""
    if name not in LEVERS:
        raise KeyError(f"{name} is not a rocke lever (see rocke.env.LEVERS)")
    value = get(name)
    return value if value else None


def cache_dir() -> Path:
    env = raw("ROCKE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rocke"


def linker_override() -> str | None:
    return raw("ROCKE_LD_LLD")


def linker() -> str:
    value = raw("ROCKE_LINKER") or "ld.lld"
    if value not in ("ld.lld", "comgr"):
        raise ValueError(f"ROCKE_LINKER must be 'ld.lld' or 'comgr', got {value!r}")
    return value


EMU_TARGETS = ("gfx942", "gfx950")


def device() -> str | None:
    """'emu', 'hip' or None (unset); `emu:<target>` reads as 'emu' (see `emu_target`)."""
    value = raw("ROCKE_DEVICE")
    if value is None:
        return None
    kind, _, target = value.partition(":")
    if kind not in ("emu", "hip") or (value not in ("emu", "hip")
                                      and (kind != "emu" or target not in EMU_TARGETS)):
        raise ValueError(f"ROCKE_DEVICE must be 'emu' or 'hip' (or emu:gfx942 / emu:gfx950), "
                         f"got {value!r}")
    return kind


def emu_target() -> str:
    """The target the emulator runs as when a launch names none: ROCKE_DEVICE=emu:<target>,
    else gfx942."""
    device()   # validates
    value = raw("ROCKE_DEVICE") or ""
    return value.partition(":")[2] or "gfx942"


def emu_timeout_s() -> float:
    value = raw("ROCKE_EMU_TIMEOUT_S")
    if value is None:
        return 600.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"ROCKE_EMU_TIMEOUT_S must be a positive number of seconds, got {value!r}")
    return seconds


EMU_WORKERS_CAP = 16   # the auto default's ceiling: each worker holds a pool's register files


def emu_workers() -> int:
    """Processes one emulator launch may use (rocke/emu/parallel.py: the bytes, counters and
    errors do not depend on it). Unset or auto: the cores this process may run on (at most
    EMU_WORKERS_CAP), but 1 inside a pytest-xdist worker (the suite is already spread over the
    cores) and where os.fork is missing (the workers are forked). An explicit value above 1
    without os.fork is an error."""
    value = raw("ROCKE_EMU_WORKERS") or "auto"
    can_fork = hasattr(os, "fork")
    if value == "auto":
        if not can_fork or os.environ.get("PYTEST_XDIST_WORKER"):
            return 1
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
        return max(1, min(usable, EMU_WORKERS_CAP))
    try:
        workers = int(value)
    except ValueError:
        workers = 0
    if workers < 1:
        raise ValueError(f"ROCKE_EMU_WORKERS must be 'auto' or a positive integer, got {value!r}")
    if workers > 1 and not can_fork:
        raise ValueError(f"ROCKE_EMU_WORKERS={value}: parallel emulation forks worker "
                         "processes, and this platform has no os.fork")
    return workers


EMU_BACKENDS = ("numpy", "torch")
EMU_DEVICES = ("cpu", "cuda")


def emu_backend() -> str:
    """``ROCKE_EMU_BACKEND``: the emulator's array library (default numpy)."""
    value = raw("ROCKE_EMU_BACKEND") or "numpy"
    if value not in EMU_BACKENDS:
        raise ValueError(f"ROCKE_EMU_BACKEND must be 'numpy' or 'torch', got {value!r}")
    return value


def emu_device() -> str:
    """``ROCKE_EMU_DEVICE``: where the torch backend's arrays live (default cpu); a device other
    than cpu with the numpy backend is an error rather than a silently ignored setting."""
    value = raw("ROCKE_EMU_DEVICE") or "cpu"
    if value not in EMU_DEVICES:
        raise ValueError(f"ROCKE_EMU_DEVICE must be 'cpu' or 'cuda', got {value!r}")
    if value != "cpu" and emu_backend() != "torch":
        raise ValueError(f"ROCKE_EMU_DEVICE={value} needs ROCKE_EMU_BACKEND=torch (the numpy "
                         "backend runs on the CPU only)")
    return value


def emu_race_check() -> bool:
    """``ROCKE_EMU_RACE_CHECK``: whether emulator launches may run the LDS race checker."""
    value = raw("ROCKE_EMU_RACE_CHECK") or "1"
    if value not in ("0", "1"):
        raise ValueError(f"ROCKE_EMU_RACE_CHECK must be 0 or 1, got {value!r}")
    return value == "1"


def emu_stretches() -> bool:
    """``ROCKE_EMU_STRETCHES``: whether the torch backend's device copies run straight-line
    stretches as one unit (default 1)."""
    value = raw("ROCKE_EMU_STRETCHES") or "1"
    if value not in ("0", "1"):
        raise ValueError(f"ROCKE_EMU_STRETCHES must be 0 or 1, got {value!r}")
    return value == "1"


def emu_cuda_kernels() -> bool:
    """``ROCKE_EMU_CUDA_KERNELS``: whether the torch backend on CUDA runs its hottest float ops
    as one compiled kernel each (default 1)."""
    value = raw("ROCKE_EMU_CUDA_KERNELS") or "1"
    if value not in ("0", "1"):
        raise ValueError(f"ROCKE_EMU_CUDA_KERNELS must be 0 or 1, got {value!r}")
    return value == "1"


def families() -> list[tuple[str, str]]:
    """``ROCKE_FAMILIES`` as (family name, module path) pairs, in the order given."""
    value = raw("ROCKE_FAMILIES")
    if value is None:
        return []
    out = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, module = (part.strip() for part in entry.partition("="))
        if not sep or not name.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
            raise ValueError(f"ROCKE_FAMILIES entries must be name=python.module, got {entry!r}")
        out.append((name, module))
    return out


def prebuilt_dir() -> str | None:
    """``ROCKE_PREBUILT``: a bundle directory, "off", or None (the package's own bundle)."""
    value = raw("ROCKE_PREBUILT")
    if value is None or value == "off":
        return value
    if os.path.exists(value) and not os.path.isdir(value):
        raise ValueError(f"ROCKE_PREBUILT must be a directory or 'off', got {value!r} (a file)")
    return value


CHECK_METADATA_MODES = ("device", "sync", "off")


def check_metadata() -> str:
    """``ROCKE_CHECK_METADATA``: "device" (default), "sync" or "off"."""
    value = raw("ROCKE_CHECK_METADATA") or "device"
    if value not in CHECK_METADATA_MODES:
        raise ValueError(f"ROCKE_CHECK_METADATA must be one of {', '.join(CHECK_METADATA_MODES)}, "
                         f"got {value!r}")
    return value


# vLLM's own switch for reproducible serving (vllm/envs.py), honoured by rocke.vllm only
VLLM_BATCH_INVARIANT = "VLLM_BATCH_INVARIANT"


def _flag(name: str, value: str | None) -> bool:
    if value is None or value == "0":
        return False
    if value == "1":
        return True
    raise ValueError(f"{name} must be 0 or 1, got {value!r}")


def batch_invariant() -> bool:
    """``ROCKE_BATCH_INVARIANT=1``: unified attention plans each call so that a sequence's output
    bits do not depend on the other sequences of the batch (ALGORITHM.md §10.4)."""
    return _flag("ROCKE_BATCH_INVARIANT", raw("ROCKE_BATCH_INVARIANT"))


def vllm_batch_invariant() -> bool:
    """vLLM's ``VLLM_BATCH_INVARIANT`` (read as vLLM does: an int, non-zero = on), honoured by
    ``rocke.vllm`` in addition to ``ROCKE_BATCH_INVARIANT``."""
    value = get(VLLM_BATCH_INVARIANT)
    if not value:
        return False
    try:
        return int(value) != 0
    except ValueError:
        raise ValueError(f"{VLLM_BATCH_INVARIANT} must be an integer (vLLM reads it with int()), "
                         f"got {value!r}") from None
