"""Prebuilt code objects: the shipped variants compiled ahead of time (`rocke aot build`, run by
scripts/setup.sh) into a bundle inside the package, so a shipped variant's first use needs no
link and no ld.lld -- and, looked up by its spec, no IR build either.

A bundle is a directory: `index.json` plus, per variant, its linked code object, relocatable
object and assembly listing. The index records for each entry the variant, the kernel symbol, the
target, the LLVM version that generated it, the SHA-256 of the IR it was built from (checked
against the golden IR table when the bundle was built) and of each file. An entry is served
only when all of that still holds: its files hash to the recorded digests and the code object
validates; the current LLVM and compile pipeline are the ones that built it; looked up by IR, the IR is the recorded
one; looked up by spec, the golden IR table (the caller's) still pins the recorded IR hash.
Anything else is not served -- the caller builds as usual -- and never an error.

Where: ROCKE_PREBUILT (a directory, or `off`), else `rocke/prebuilt/<processor>` in the package.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from .. import env

FORMAT_VERSION = 1
INDEX = "index.json"
_FILES = {"code_object": ".hsaco", "object": ".o", "asm": ".s"}


def default_dir(target: str) -> Path:
    return Path(__file__).resolve().parents[1] / "prebuilt" / target.split(":", 1)[0]


def bundle_dir(target: str) -> Path | None:
    """The bundle directory for `target`, or None when ROCKE_PREBUILT is `off`."""
    chosen = env.prebuilt_dir()
    if chosen == "off":
        return None
    return Path(chosen) if chosen else default_dir(target)


def spec_key(spec, target: str) -> str:
    """A variant's key without building anything: the spec's class and its field values (a spec
    is a frozen dataclass, its repr lists every field) for `target`."""
    kind = type(spec)
    text = f"{kind.__module__}.{kind.__qualname__}|{spec!r}|{target}"
    return hashlib.sha256(text.encode()).hexdigest()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=8)
def _index(root: str, mtime_ns: int) -> tuple[dict, dict]:
    """(entries by spec key, entries by IR hash) of the bundle at `root` (re-read when its
    index changes)."""
    try:
        index = json.loads((Path(root) / INDEX).read_text())
    except (OSError, ValueError):
        return {}, {}
    entries = index.get("entries") if isinstance(index, dict) and \
        index.get("format") == FORMAT_VERSION else None
    if not isinstance(entries, dict):
        return {}, {}
    by_ir = {}
    for entry in entries.values():
        if isinstance(entry, dict):
            by_ir.setdefault(entry.get("ir_sha256"), []).append(entry)
    return entries, by_ir


def _entries(target: str) -> tuple[Path, dict, dict] | None:
    root = bundle_dir(target)
    if root is None:
        return None
    try:
        mtime = (root / INDEX).stat().st_mtime_ns
    except OSError:
        return None
    return (root, *_index(str(root), mtime))


def _serve(root: Path, entry: dict, ir: str, workgroup_size, t0: float, variant=None):
    """A CompiledKernel of `entry`, or None when anything about it does not check out."""
    from .elf import ET_DYN, validate_code_object
    from .metadata import kernel_info
    from .compiled import CompiledKernel
    from .cache import FORMAT_VERSION as CODEGEN
    from .toolchain import llvm_version
    try:
        if entry.get("llvm") != llvm_version() or entry.get("codegen") != CODEGEN:
            return None
        blobs = {}
        for field, suffix in _FILES.items():
            data = (root / (entry["file"] + suffix)).read_bytes()
            if _sha(data) != entry[field + "_sha256"]:
                return None
            blobs[field] = data
        name, target = entry["name"], entry["target"]
        validate_code_object(blobs["code_object"], name, e_type=ET_DYN)
        asm = blobs["asm"].decode()
        info = kernel_info(asm, name, target, workgroup_size or entry.get("workgroup_size"))
    except Exception:        # a missing, damaged or wrong-shaped entry is built instead
        return None
    return CompiledKernel(name, variant or entry["variant"], target, ir, asm, blobs["object"],
                          blobs["code_object"], info, cache_hit=True,
                          build_seconds=time.perf_counter() - t0, linker=entry["linker"],
                          source_ir_sha256=entry["ir_sha256"], prebuilt=True)


def lookup_ir(ir: str, name: str, target: str, opt: int, workgroup_size=None, variant=None):
    """The bundle's kernel for exactly this IR (any variant built from it), else None."""
    t0 = time.perf_counter()
    found = _entries(target)
    if found is None:
        return None
    root, _, by_ir = found
    for entry in by_ir.get(_sha(ir.encode()), ()):
        if entry.get("name") == name and entry.get("target") == target and \
                entry.get("opt") == opt:
            return _serve(root, entry, ir, workgroup_size, t0, variant)
    return None


def lookup_spec(spec, golden: dict, target: str, workgroup_size=None):
    """The bundle's kernel for `spec` without building its IR, when the golden IR table `golden`
    (variant -> IR hash) still pins the IR the entry was built from; else None."""
    t0 = time.perf_counter()
    found = _entries(target)
    if found is None:
        return None
    root, entries, _ = found
    entry = entries.get(spec_key(spec, target))
    if not isinstance(entry, dict) or golden.get(entry.get("variant")) != entry.get("ir_sha256"):
        return None
    return _serve(root, entry, "", workgroup_size, t0)


def write_bundle(root: Path, items, *, progress=None) -> dict:
    """Write a bundle of `items` -- (variant name, spec, CompiledKernel, workgroup_size) -- to
    `root`, replacing
    what is there only once the new one is complete. Returns the index written."""
    from .cache import FORMAT_VERSION as CODEGEN
    from .toolchain import llvm_version
    root = Path(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}-tmp-"))
    try:
        tmp.chmod(0o755)          # a package directory: readable by everyone, like the rest
        entries = {}
        for variant, spec, ck, workgroup_size in items:
            stem = variant.replace("/", "__")
            blobs = {"code_object": ck.code_object, "object": ck.object, "asm": ck.asm.encode()}
            for field, suffix in _FILES.items():
                (tmp / (stem + suffix)).write_bytes(blobs[field])
            entries[spec_key(spec, ck.target)] = dict(
                variant=variant, name=ck.name, target=ck.target, opt=3, file=stem,
                ir_sha256=ck.ir_hash, llvm=llvm_version(), codegen=CODEGEN, linker=ck.linker,
                workgroup_size=workgroup_size,
                **{field + "_sha256": _sha(data) for field, data in blobs.items()})
            if progress is not None:
                progress(variant)
        index = {"format": FORMAT_VERSION, "entries": entries}
        (tmp / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        old = None
        if root.exists():
            old = root.with_name(f".{root.name}-old-{os.getpid()}")
            os.rename(root, old)
        os.rename(tmp, root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return index
