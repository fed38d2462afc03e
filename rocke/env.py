"""Every ROCKE_* environment lever, read in this one module (a leaf: it imports only the stdlib,
so the emulator may use it too). The attention family's HIPDNN_GFX942_* levers are read in
``rocke/kernels/common/knobs.py``.

One table, ``LEVERS``, declares every lever: its default, its meaning, what a value may be and
the check of a value. Any lever read first checks every set lever against its row
(``check_all``; the two readers on the emulator's per-instruction paths check their own row, inside
a launch that checked all at its start), and a bad value raises ``ValueError`` naming the
variable, the value and what it accepts: a typo in a lever is an error even where the run never
uses that lever, never a silently ignored default.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Lever:
    """One ROCKE_* lever: its default and meaning (docs/environment.md's options table lists the same),
    what a value may be (``accepts``, quoted by its errors) and ``check``: given the variable's
    name and its set, non-empty value, None when the value is accepted, else the one-line error
    naming the variable, the value and ``accepts``. A path lever's check refuses what can name
    no path it means; what the path holds is checked where it is used (a missing ld.lld is a
    ``ToolchainError`` when a link needs it, a missing libLLVM a ``NoLibraryError``)."""
    default: str
    meaning: str
    accepts: str
    check: Callable[[str, str], str | None]


def _one_of(*choices: str, accepts: str):
    def check(name: str, value: str) -> str | None:
        return None if value in choices else f"{name} must be {accepts}, got {value!r}"
    return check


def _flag(name: str, value: str) -> str | None:
    return None if value in ("0", "1") else f"{name} must be 0 or 1, got {value!r}"


def _positive_seconds(name: str, value: str) -> str | None:
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if seconds > 0 and seconds != float("inf"):
        return None
    return f"{name} must be a positive number of seconds, got {value!r}"


def _workers(name: str, value: str) -> str | None:
    if value == "auto":
        return None
    try:
        if int(value) >= 1:
            return None
    except ValueError:
        pass
    return f"{name} must be 'auto' or a positive integer, got {value!r}"


def _families(name: str, value: str) -> str | None:
    for entry in value.split(","):
        entry = entry.strip()
        if not entry:
            continue
        family, sep, module = (part.strip() for part in entry.partition("="))
        if not sep or not family.isidentifier() or not all(p.isidentifier()
                                                           for p in module.split(".")):
            where = "" if entry == value else f" (in {name}={value!r})"
            return f"{name} entries must be name=python.module, got {entry!r}{where}"
    return None


# words a path lever never means (someone took it for a switch), unless such a path exists here
_SWITCH_WORDS = frozenset({"0", "1", "true", "false", "yes", "no", "on", "off", "none", "null",
                           "auto", "default", "enable", "enabled", "disable", "disabled"})


def _path(accepts: str, *, off: bool = False, directory: bool = False):
    """A path lever's check; ``off``: the word off is accepted too; ``directory``: an existing
    file that is not a directory is refused."""
    def check(name: str, value: str) -> str | None:
        if off and value == "off":
            return None
        why = None
        if value != value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value):
            why = "blanks around it or control characters in it"
        elif value.startswith("~"):
            why = "'~' is not expanded here: write the home directory out"
        elif value.lower() in _SWITCH_WORDS and not os.path.lexists(value):
            why = "a switch word, not a path" + (": to turn it off, write off" if off else "")
        elif directory and os.path.exists(value) and not os.path.isdir(value):
            why = "a file"
        return None if why is None else f"{name} must be {accepts}, got {value!r} ({why})"
    return check


EMU_TARGETS = ("gfx942", "gfx950")
EMU_BACKENDS = ("numpy", "torch")
EMU_DEVICES = ("cpu", "cuda")
CHECK_METADATA_MODES = ("device", "sync", "off")

#: every ROCKE_* lever: name -> Lever. A value is checked against its row whenever any lever is
#: read (``check_all``), so a bad value is an error even where the run never uses that lever.
LEVERS: dict[str, Lever] = {
    "ROCKE_CACHE_DIR": Lever(
        "$XDG_CACHE_HOME/rocke or ~/.cache/rocke", "compile cache directory",
        "a directory path (absolute, or relative to the working directory)",
        _path("a directory path (absolute, or relative to the working directory)")),
    "ROCKE_LD_LLD": Lever(
        "discovered", "the ld.lld to link code objects with", "the path of an ld.lld executable",
        _path("the path of an ld.lld executable")),
    "ROCKE_LIBLLVM": Lever(
        "discovered", "the shared LLVM library (libLLVM, LLVM 20 or newer with the AMDGPU "
        "target) that disassembles gfx950 code objects when no llvm-objdump here knows gfx950",
        "the path of a libLLVM shared library", _path("the path of a libLLVM shared library")),
    "ROCKE_LINKER": Lever(
        "ld.lld", "what links code objects: ld.lld | comgr (needs hip-python's comgr bindings "
        "and ROCm's libamd_comgr)", "'ld.lld' or 'comgr'",
        _one_of("ld.lld", "comgr", accepts="'ld.lld' or 'comgr'")),
    "ROCKE_DEVICE": Lever(
        "hip if a gfx942 or gfx950 GPU is found, else emu", "launch device: emu | hip | "
        "emu:gfx942 | emu:gfx950 (the emulator running that target; emu = gfx942)",
        "'emu' or 'hip' (or emu:gfx942 / emu:gfx950)",
        _one_of("emu", "hip", *(f"emu:{t}" for t in EMU_TARGETS),
                accepts="'emu' or 'hip' (or emu:gfx942 / emu:gfx950)")),
    "ROCKE_EMU_TIMEOUT_S": Lever(
        "600", "wall-time budget of one emulator launch, seconds", "a positive number of seconds",
        _positive_seconds),
    "ROCKE_EMU_WORKERS": Lever(
        "auto = usable cores, at most 16; 1 under pytest-xdist or without os.fork",
        "processes one emulator launch may run its workgroups in (1 = serial; results are the "
        "serial run's whatever the count)", "'auto' or a positive integer", _workers),
    "ROCKE_EMU_BACKEND": Lever(
        "numpy", "array library the emulator computes with: numpy | torch (bit-identical "
        "results; torch ports a subset of the ISA and names any instruction it has not ported)",
        "'numpy' or 'torch'", _one_of(*EMU_BACKENDS, accepts="'numpy' or 'torch'")),
    "ROCKE_EMU_DEVICE": Lever(
        "cpu", "where the torch backend's arrays live: cpu | cuda (needs ROCKE_EMU_BACKEND=torch "
        "and a CUDA build of torch with a GPU)", "'cpu' or 'cuda'",
        _one_of(*EMU_DEVICES, accepts="'cpu' or 'cuda'")),
    "ROCKE_EMU_RACE_CHECK": Lever(
        "1", "0: every emulator launch runs without the LDS race checker, whatever it asks "
        "(faster, above all on CUDA, where LDS addresses then stay on the device; races go "
        "unreported, out-of-bounds accesses still fault)", "0 or 1", _flag),
    "ROCKE_EMU_INIT_CHECK": Lever(
        "1", "0: the LDS race checker's launches skip its initialisation check (a DS read of "
        "LDS bytes no write of the workgroup set stops the launch, naming the line; the "
        "hardware would read stale data); off wherever the race checker is", "0 or 1", _flag),
    "ROCKE_EMU_STRETCHES": Lever(
        "1", "torch backend with its own device arrays (CUDA): run straight-line stretches of "
        "scalar and vector instructions as one unit, replayed as a CUDA graph on a GPU (0 = "
        "instruction by instruction; results are the same either way)", "0 or 1", _flag),
    "ROCKE_EMU_CUDA_KERNELS": Lever(
        "1", "torch backend on CUDA: the hottest float ops (v_exp_f32, fma, f32 add/sub/mul, "
        "min/max) as one jiterator kernel each, and the dense MFMAs and LDS reads/writes as one "
        "fused Triton kernel each, instead of many torch operations (0 = torch operations, as "
        "where jiterator or Triton is missing, e.g. ROCm builds; the bits are the same)",
        "0 or 1", _flag),
    "ROCKE_FAMILIES": Lever(
        "none", "extra kernel families: comma-separated name=python.module entries",
        "name=python.module", _families),
    "ROCKE_CHECK_METADATA": Lever(
        "off", "the attention entry point's content checks of GPU metadata: off (the default: "
        "no guard launch; the kernels still never read outside the cache) | device (a guard "
        "kernel records the first violation; reported by rocke.runtime.check_errors() or the "
        "next synchronize) | sync (also check right after each call: a synchronisation per "
        "call, for debugging)", "one of device, sync, off",
        _one_of(*CHECK_METADATA_MODES, accepts="one of device, sync, off")),
    "ROCKE_BATCH_INVARIANT": Lever(
        "0", "1: unified attention's output bits for a sequence do not depend on the rest of "
        "the batch (the 2D path only, no split-KV); rocke.vllm also honours vLLM's "
        "VLLM_BATCH_INVARIANT", "0 or 1", _flag),
    "ROCKE_NATIVE_KEY": Lever(
        "auto", "the call cache reads a call's tensors with rocke's native helper where it is "
        "built (`python -m rocke.runtime.tensor_key --build`, run by set-up): auto | off (torch's "
        "Python getters; the same key, slower); read at the first keyed call",
        "auto or off", _one_of("auto", "off", accepts="auto or off")),
    "ROCKE_PREBUILT": Lever(
        "rocke/prebuilt/<processor> in the package", "bundle of prebuilt code objects (`rocke "
        "aot build`): a directory, or off", "a directory or 'off'",
        _path("a directory or 'off'", off=True, directory=True)),
    "ROCKE_RESULTS_DIR": Lever(
        "$ROCKE_CACHE_DIR/results", "the content-addressed result store (spill counts, resources "
        "of `rocke report --reachable`, keyed by the IR's sha256 and the toolchain): a directory "
        "(put it on a shared filesystem so machines share it), or off",
        "a directory or 'off'", _path("a directory or 'off'", off=True, directory=True)),
    "ROCKE_RAY_TIMEOUT_S": Lever(
        "30", "seconds to reach a Ray cluster's address (`--ray ADDRESS` / RAY_ADDRESS) before "
        "giving up with an error", "a positive number of seconds", _positive_seconds),
    "ROCKE_WRITE_PEER_FIXTURES": Lever(
        "0", "tools: 1 also writes each Triton peer kernel benchmarks/triton_peer.py compiles "
        "into tests/fixtures/triton_peer (to refresh them)", "0 or 1", _flag),
    "ROCKE_VLLM_WHEEL": Lever(
        "an installed vllm, else /tmp/vllm", "benchmarks: where benchmarks/vllm_peer.py reads "
        "vLLM 0.33's Triton unified-attention kernels: a vllm-0.33 wheel (.whl), an unpacked "
        "one, or a vllm package directory", "the path of a vLLM wheel or directory",
        _path("the path of a vLLM wheel or directory")),
}

#: the levers a task's results depend on: a task run elsewhere (a forked process, a Ray worker
#: on another machine, which has its own environment) runs with the driver's values of these
#: (examples/attention_harness.py's tasks do). Paths -- caches, toolchain, bundles -- stay each
#: machine's own.
RESULT_LEVERS = ("ROCKE_DEVICE", "ROCKE_EMU_BACKEND", "ROCKE_EMU_DEVICE", "ROCKE_EMU_RACE_CHECK",
                 "ROCKE_EMU_INIT_CHECK", "ROCKE_EMU_STRETCHES", "ROCKE_EMU_CUDA_KERNELS",
                 "ROCKE_EMU_TIMEOUT_S", "ROCKE_EMU_WORKERS", "ROCKE_CHECK_METADATA",
                 "ROCKE_BATCH_INVARIANT")


def problems() -> list[str]:
    """The error of every set ROCKE_* lever whose value its row of LEVERS refuses ([] when all
    are accepted)."""
    out = []
    for name, lever in LEVERS.items():
        value = get(name)
        if value:
            error = lever.check(name, value)
            if error:
                out.append(error)
    return out


_levers_state = None        # state_reader(tuple(LEVERS)), made at first use
_checked_state: list = [None]   # the last state check_all accepted


def check_all() -> None:
    """Raise ``ValueError`` naming every set ROCKE_* lever with a value its row refuses (the
    variable, the value and what it accepts). Run by every lever read; checked again only when
    the environment changes."""
    global _levers_state
    if _levers_state is None:
        _levers_state = state_reader(tuple(LEVERS))
    now = _levers_state()
    if now == _checked_state[0]:
        return
    errors = problems()
    if errors:
        raise ValueError("; ".join(errors))
    warn_unknown()
    _checked_state[0] = now


_warned_unknown: set = set()


def unknown_names() -> list[str]:
    """Set ROCKE_* variables that name no lever (a typo, or a lever of another rocke version)."""
    return sorted(n for n in os.environ if n.startswith("ROCKE_") and n not in LEVERS)


def warn_unknown() -> None:
    """A RuntimeWarning, once a process, for each set ROCKE_* variable that is not a lever, with
    the closest lever's name: it changes nothing, and a misspelt lever must not pass unseen."""
    import difflib
    import warnings
    for name in unknown_names():
        if name in _warned_unknown:
            continue
        _warned_unknown.add(name)
        close = difflib.get_close_matches(name, list(LEVERS), n=1)
        warnings.warn(f"{name} is set but is not a rocke lever, so it changes nothing"
                      + (f"; did you mean {close[0]}?" if close else "")
                      + " (docs/environment.md lists the levers)", RuntimeWarning, stacklevel=3)


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
    """The variable's value, or None when unset or empty; first every set lever is checked
    against its row of LEVERS (``check_all``), so any lever read refuses any bad lever."""
    if name not in LEVERS:
        raise KeyError(f"{name} is not a rocke lever (see rocke.env.LEVERS)")
    check_all()
    value = get(name)
    return value if value else None


def cache_dir() -> Path:
    env = raw("ROCKE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rocke"


def results_dir() -> Path | None:
    """``ROCKE_RESULTS_DIR``: the result store's directory (default ``cache_dir()/results``), or
    None when it is ``off``."""
    value = raw("ROCKE_RESULTS_DIR")              # checked by its row of LEVERS
    if value == "off":
        return None
    return Path(value) if value else cache_dir() / "results"


def ray_timeout_s() -> float:
    """``ROCKE_RAY_TIMEOUT_S``: how long to wait for a Ray cluster's address to answer."""
    value = raw("ROCKE_RAY_TIMEOUT_S")            # checked by its row of LEVERS
    return float(value) if value else 30.0


def ray_address() -> str | None:
    """Ray's own ``RAY_ADDRESS`` (not a rocke lever: Ray defines it), or None when unset or
    empty: the cluster ``--ray`` with no address connects to; unset, a local cluster."""
    value = get("RAY_ADDRESS")
    return value.strip() if value and value.strip() else None


def linker_override() -> str | None:
    return raw("ROCKE_LD_LLD")


def linker() -> str:
    return raw("ROCKE_LINKER") or "ld.lld"        # checked by its row of LEVERS


def device() -> str | None:
    """'emu', 'hip' or None (unset); `emu:<target>` reads as 'emu' (see `emu_target`)."""
    value = raw("ROCKE_DEVICE")                   # checked by its row of LEVERS
    return None if value is None else value.partition(":")[0]


def emu_target() -> str:
    """The target the emulator runs as when a launch names none: ROCKE_DEVICE=emu:<target>,
    else gfx942."""
    value = raw("ROCKE_DEVICE") or ""
    return value.partition(":")[2] or "gfx942"


def emu_timeout_s() -> float:
    value = raw("ROCKE_EMU_TIMEOUT_S")            # checked by its row of LEVERS
    return 600.0 if value is None else float(value)


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
    workers = int(value)                          # checked by its row of LEVERS
    if workers > 1 and not can_fork:
        raise ValueError(f"ROCKE_EMU_WORKERS={value}: parallel emulation forks worker "
                         "processes, and this platform has no os.fork")
    return workers


def emu_backend() -> str:
    """``ROCKE_EMU_BACKEND``: the emulator's array library (default numpy)."""
    return raw("ROCKE_EMU_BACKEND") or "numpy"    # checked by its row of LEVERS


def emu_device() -> str:
    """``ROCKE_EMU_DEVICE``: where the torch backend's arrays live (default cpu); a device other
    than cpu with the numpy backend is an error rather than a silently ignored setting."""
    value = raw("ROCKE_EMU_DEVICE") or "cpu"      # checked by its row of LEVERS
    if value != "cpu" and emu_backend() != "torch":
        raise ValueError(f"ROCKE_EMU_DEVICE={value} needs ROCKE_EMU_BACKEND=torch (the numpy "
                         "backend runs on the CPU only)")
    return value


def emu_race_check() -> bool:
    """``ROCKE_EMU_RACE_CHECK``: whether emulator launches may run the LDS race checker."""
    return _on("ROCKE_EMU_RACE_CHECK", "1")


def emu_init_check() -> bool:
    """``ROCKE_EMU_INIT_CHECK``: whether the LDS race checker, where it runs, also stops a DS
    read of LDS bytes its workgroup never wrote (default 1)."""
    return _on("ROCKE_EMU_INIT_CHECK", "1")


def emu_stretches() -> bool:
    """``ROCKE_EMU_STRETCHES``: whether the torch backend's device copies run straight-line
    stretches as one unit (default 1)."""
    return (_own("ROCKE_EMU_STRETCHES") or "1") == "1"     # per pool, inside a launch


def emu_cuda_kernels() -> bool:
    """``ROCKE_EMU_CUDA_KERNELS``: whether the torch backend on CUDA runs its hottest float ops
    as one compiled kernel each (default 1)."""
    return (_own("ROCKE_EMU_CUDA_KERNELS") or "1") == "1"  # per CUDA op, inside a launch


def families() -> list[tuple[str, str]]:
    """``ROCKE_FAMILIES`` as (family name, module path) pairs, in the order given."""
    value = raw("ROCKE_FAMILIES")                 # checked by its row of LEVERS
    if value is None:
        return []
    entries = (entry.strip() for entry in value.split(","))
    return [tuple(part.strip() for part in entry.split("=", 1)) for entry in entries if entry]


def prebuilt_dir() -> str | None:
    """``ROCKE_PREBUILT``: a bundle directory, "off", or None (the package's own bundle)."""
    return raw("ROCKE_PREBUILT")                  # checked by its row of LEVERS (a file: refused)


def native_key() -> str:
    """``ROCKE_NATIVE_KEY``: "auto" (default) or "off"."""
    return raw("ROCKE_NATIVE_KEY") or "auto"        # checked by its row of LEVERS


def check_metadata() -> str:
    """``ROCKE_CHECK_METADATA``: "off" (default), "device" or "sync"."""
    return raw("ROCKE_CHECK_METADATA") or "off"     # checked by its row of LEVERS


# vLLM's own switch for reproducible serving (vllm/envs.py), honoured by rocke.vllm only
VLLM_BATCH_INVARIANT = "VLLM_BATCH_INVARIANT"


def _on(name: str, default: str) -> bool:
    """A 0-or-1 lever (checked by its row of LEVERS) read as a bool."""
    return (raw(name) or default) == "1"


def _own(name: str) -> str | None:
    """Like ``raw``, but the value is checked against its own row only: for the readers on the
    emulator's per-instruction paths (a CUDA op, a stretch), which run inside a launch that
    checked every lever at its start (``check_all`` costs ~1 us a call)."""
    value = get(name)
    if not value:
        return None
    error = LEVERS[name].check(name, value)
    if error:
        raise ValueError(error)
    return value


def batch_invariant() -> bool:
    """``ROCKE_BATCH_INVARIANT=1``: unified attention plans each call so that a sequence's output
    bits do not depend on the other sequences of the batch (ALGORITHM.md §10.4)."""
    return _on("ROCKE_BATCH_INVARIANT", "0")


def write_peer_fixtures() -> bool:
    """``ROCKE_WRITE_PEER_FIXTURES=1`` (tools): benchmarks/triton_peer.py also writes what it
    compiles into tests/fixtures/triton_peer."""
    return _on("ROCKE_WRITE_PEER_FIXTURES", "0")


def vllm_wheel() -> str | None:
    """``ROCKE_VLLM_WHEEL`` (benchmarks): the vLLM 0.33 wheel, unpacked wheel or package
    directory benchmarks/vllm_peer.py reads vLLM's Triton kernels from; None when unset."""
    return raw("ROCKE_VLLM_WHEEL")


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
