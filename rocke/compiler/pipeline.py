"""IR text -> verified module -> optimized module -> gfx942 asm + object -> linked code object."""
from __future__ import annotations

import hashlib
import os
import pickle
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import llvmlite.binding as llvm

from .cache import CompileCache, cache_key
from .metadata import KernelInfo, kernel_info
from .toolchain import ToolchainError, find_linker, target_machine, toolchain_fingerprint

DEFAULT_TARGET = "gfx942:sramecc+:xnack-"


class CompileError(RuntimeError):
    """LLVM rejected a kernel variant's IR; the message names the variant."""


@dataclass(frozen=True)
class CompiledKernel:
    name: str                 # kernel symbol
    variant: str              # human label of the spec variant (for errors and reports)
    target: str
    ir: str
    asm: str
    object: bytes = field(repr=False)
    code_object: bytes = field(repr=False)
    info: KernelInfo = field(repr=False)
    cache_hit: bool = False
    build_seconds: float = 0.0

    @property
    def ir_hash(self) -> str:
        return hashlib.sha256(self.ir.encode()).hexdigest()


def _optimize(mod, tm, opt: int) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def _codegen(mod, tm, opt: int) -> tuple[str, bytes]:
    _optimize(mod, tm, opt)
    # codegen rewrites the module in place (structurizer intrinsics), so each emit gets a fresh copy
    asm = tm.emit_assembly(mod.clone())
    return asm, tm.emit_object(mod)


def _codegen_isolated(mod, tm, opt: int, variant: str) -> tuple[str, bytes]:
    """`_codegen` in a forked child: LLVM reports some errors (e.g. "Cannot select" for an
    intrinsic the target lacks) by aborting the process, which here kills only the child and
    becomes a CompileError carrying LLVM's message. fork shares the parsed module and the
    target machine copy-on-write; its cost (a few ms) is measured by benchmarks/compile.py."""
    if not hasattr(os, "fork"):
        return _codegen(mod, tm, opt)
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile(prefix="rocke-llvm-stderr-") as err:
        pid = os.fork()
        if pid == 0:                                     # child: never returns
            status = 1
            try:
                os.close(read_fd)
                os.dup2(err.fileno(), 2)
                try:
                    payload = ("ok", _codegen(mod, tm, opt))
                except BaseException as e:           # an LLVM error llvmlite raises normally
                    payload = ("error", f"{type(e).__name__}: {e}")
                with os.fdopen(write_fd, "wb") as out:
                    out.write(pickle.dumps(payload))
                status = 0
            finally:
                os._exit(status)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as inp:
            data = inp.read()
        _, wait_status = os.waitpid(pid, 0)
        err.seek(0)
        llvm_says = err.read().decode(errors="replace").strip()
    if os.WIFSIGNALED(wait_status) or not data:
        sig = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None
        how = f"killed by {signal.Signals(sig).name}" if sig else f"exited {os.WEXITSTATUS(wait_status)}"
        raise CompileError(f"LLVM aborted compiling kernel variant {variant!r} ({how}): "
                           f"{llvm_says or 'no message'}")
    kind, result = pickle.loads(data)
    if kind == "error":
        raise CompileError(f"LLVM failed compiling kernel variant {variant!r}: {result}"
                           + (f"\n{llvm_says}" if llvm_says else ""))
    return result


def link_code_object(obj: bytes, name: str) -> bytes:
    """Link a relocatable AMDGPU object into a shared-object code object (hipModuleLoadData input)."""
    ld = find_linker()
    with tempfile.TemporaryDirectory(prefix="rocke-ld-") as tmp:
        src, dst = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.hsaco")
        with open(src, "wb") as f:
            f.write(obj)
        proc = subprocess.run([ld, "-shared", "--no-undefined", "-o", dst, src],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise ToolchainError(f"{ld} failed linking {name}: {proc.stderr.strip()}")
        with open(dst, "rb") as f:
            return f.read()


def compile_ir(ir: str, *, name: str, target: str = DEFAULT_TARGET, variant: str | None = None,
               opt: int = 3, workgroup_size: int | None = None,
               cache: CompileCache | None | bool = True) -> CompiledKernel:
    """Compile AMDGPU LLVM IR text for `target`. `cache=True` uses the default on-disk cache,
    `False` disables it, or pass a CompileCache."""
    variant = variant or name
    t0 = time.perf_counter()
    options = {"opt": opt}
    store = CompileCache() if cache is True else (cache or None)
    key = cache_key(ir, target, toolchain_fingerprint(), options)
    if store is not None:
        hit = store.load(key)
        if hit is not None:
            info = kernel_info(hit["asm"], name, target, workgroup_size)
            return CompiledKernel(name, variant, target, ir, hit["asm"], hit["object"],
                                  hit["code_object"], info, cache_hit=True,
                                  build_seconds=time.perf_counter() - t0)
    tm = target_machine(target, opt)
    try:
        mod = llvm.parse_assembly(ir)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(f"LLVM rejected the IR of kernel variant {variant!r}: {e}") from None
    asm, obj = _codegen_isolated(mod, tm, opt, variant)
    code_object = link_code_object(obj, name)
    info = kernel_info(asm, name, target, workgroup_size)
    if store is not None:
        store.store(key, asm, obj, code_object, {"name": name, "target": target})
    return CompiledKernel(name, variant, target, ir, asm, obj, code_object, info,
                          build_seconds=time.perf_counter() - t0)
