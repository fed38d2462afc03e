"""LLVM command-line tools (llvm-objdump, llvm-readelf, ld.lld) that know the target.

A leaf (the stdlib and rocke.arch only), so both the compiler and the emulator use it. A tool is
taken only when its own `--version` reports an LLVM at least as new as the target needs
(`Target.min_llvm_major`); older ones are skipped, and when nothing fits the error names each one
skipped with its version. Many Debian machines carry LLVM 14 as a dependency of other packages,
and its llvm-objdump cannot disassemble gfx942 ("unable to get target") while its llvm-readelf
prints the metadata note in a form YAML cannot read.

Where tools are looked for, best first: `<name>-<N>` on PATH (highest N first), Debian's
/usr/lib/llvm-<N>/bin (highest N first), ROCm's llvm/bin (newest first), then plain `<name>` in
each PATH directory.

`python -m rocke.llvm_tools` prints the Debian packages still needed (scripts/setup.sh uses it).
"""
from __future__ import annotations

import functools
import glob
import os
import re
import subprocess
import sys

from rocke.arch.targets import GFX942

#: the Debian LLVM release scripts/setup.sh installs when no good tool is found
DEBIAN_LLVM = 19
#: tool -> the Debian package (of release DEBIAN_LLVM) that ships it
DEBIAN_PACKAGE = {"llvm-objdump": f"llvm-{DEBIAN_LLVM}", "llvm-readelf": f"llvm-{DEBIAN_LLVM}",
                  "ld.lld": f"lld-{DEBIAN_LLVM}"}
#: install trees searched after PATH's versioned names: Debian's (one per release), then ROCm's
INSTALL_DIR_PATTERNS = ("/usr/lib/llvm-*/bin", "$ROCM_PATH/llvm/bin", "/opt/rocm/llvm/bin",
                        "/opt/rocm-*/llvm/bin")
VERSION_TIMEOUT_S = 10.0

# "Debian LLVM version 19.1.7", "AMD LLVM version 17.0.0git", "Debian LLD 19.1.7 (compatible ...)"
_VERSION = re.compile(r"\bLL(?:VM version|D) (\d+)\.(\d+)")


class LLVMToolError(RuntimeError):
    """No tool of the needed LLVM version was found; the message names what was skipped and
    what to install."""


def _release_of_dir(path: str) -> tuple[int, ...]:
    """(19,) for /usr/lib/llvm-19/bin, (6, 2, 0) for /opt/rocm-6.2.0/llvm/bin, () otherwise."""
    m = re.search(r"(?:llvm|rocm)-(\d+(?:\.\d+)*)", path)
    return tuple(map(int, m.group(1).split("."))) if m else ()


def candidates(name: str) -> list[str]:
    """Every executable `name` in search order, duplicates (the same file) removed."""
    path_dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    versioned = []
    for d in path_dirs:
        for p in glob.glob(os.path.join(glob.escape(d), f"{glob.escape(name)}-*")):
            suffix = os.path.basename(p)[len(name) + 1:]
            if suffix.isdigit():
                versioned.append((int(suffix), p))
    found = [p for _, p in sorted(versioned, key=lambda vp: -vp[0])]
    for pattern in INSTALL_DIR_PATTERNS:
        if pattern.startswith("$ROCM_PATH"):
            root = os.environ.get("ROCM_PATH")
            if not root:
                continue
            pattern = root + pattern[len("$ROCM_PATH"):]
        dirs = sorted(glob.glob(pattern), key=_release_of_dir, reverse=True)
        found += [os.path.join(d, name) for d in dirs]
    found += [os.path.join(d, name) for d in path_dirs]    # every one on PATH, not just the first
    out, seen = [], set()
    for p in found:
        real = os.path.realpath(p)
        if real not in seen and os.path.isfile(p) and os.access(p, os.X_OK):
            seen.add(real)
            out.append(p)
    return out


class _NoAnswer(Exception):
    """A tool that could not be asked its version (not cached: a slow or busy moment passes)."""


def tool_version(path: str) -> tuple[int, int] | None:
    """(major, minor) of the LLVM a tool reports with `--version`, or None when it reports none."""
    try:
        return _asked_version(path)
    except _NoAnswer:
        return None


def _asked_version(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError as err:
        raise _NoAnswer(err.strerror or str(err)) from None
    return _tool_version(path, os.path.realpath(path), st.st_size, st.st_mtime_ns)


@functools.cache
def _tool_version(path: str, real: str, size: int, mtime_ns: int) -> tuple[int, int] | None:
    # run by the name given: lld's one binary behaves as ld.lld only when called so
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise _NoAnswer(f"no answer to --version within {VERSION_TIMEOUT_S:g} s") from None
    except (OSError, subprocess.SubprocessError) as err:
        raise _NoAnswer(f"--version failed: {err}") from None
    m = _VERSION.search(proc.stdout + proc.stderr)
    return (int(m.group(1)), int(m.group(2))) if m else None


def find(name: str, min_major: int = GFX942.min_llvm_major, target: str = GFX942.name) -> str:
    """Path of the first `name` (see the module docstring for the order) whose LLVM is at least
    `min_major`; LLVMToolError naming the skipped ones and the package to install otherwise."""
    skipped = []
    for path in candidates(name):
        try:
            version = _asked_version(path)
        except _NoAnswer as why:
            skipped.append(f"{path} ({why})")
            continue
        if version is not None and version[0] >= min_major:
            return path
        skipped.append(f"{path} (LLVM {version[0]}.{version[1]})" if version else
                       f"{path} (no LLVM version reported)")
    package = DEBIAN_PACKAGE.get(name, f"llvm-{DEBIAN_LLVM}")
    where = (f"skipped {', '.join(skipped)}" if skipped else f"none found as {name}-<N> or "
             f"{name} on PATH, in /usr/lib/llvm-<N>/bin or ROCm's llvm/bin")
    raise LLVMToolError(
        f"no {name} of LLVM {min_major} or newer, which {target} needs ({where}): install "
        f"Debian's {package} (`apt-get install {package}`, which scripts/setup.sh does)")


def missing_packages(names=tuple(DEBIAN_PACKAGE)) -> list[str]:
    """The Debian packages that would supply the tools among `names` that `find` cannot."""
    out = []
    for name in names:
        try:
            find(name)
        except LLVMToolError:
            package = DEBIAN_PACKAGE[name]
            if package not in out:
                out.append(package)
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--missing-packages"]:
        print(" ".join(missing_packages()))
    else:
        for tool in DEBIAN_PACKAGE:
            try:
                print(f"{tool}: {find(tool)}")
            except LLVMToolError as err:
                print(f"{tool}: {err}")
