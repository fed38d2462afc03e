"""IR text -> verified module -> optimized module -> gfx942 asm + object -> linked code object."""
from __future__ import annotations

import faulthandler
import os
import pickle
import re
import signal
import sys
import tempfile
import time

import llvmlite.binding as llvm

from ..arch import DEFAULT_TARGET as ARCH_DEFAULT_TARGET
from .. import env
from . import linker as linkers, prebuilt
from .cache import CompileCache, cache_key
from .compiled import CompiledKernel
from .elf import ET_DYN, InvalidCodeObject, validate_code_object
from .metadata import KernelInfo, kernel_info, requested_waves_per_eu
from .toolchain import ToolchainError, linker_fingerprint, target_machine, toolchain_fingerprint

DEFAULT_TARGET = ARCH_DEFAULT_TARGET.target_id


class CompileError(RuntimeError):
    """LLVM rejected a kernel variant's IR; the message names the variant."""


def _optimize(mod, tm, opt: int) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def _codegen(mod, tm, opt: int, emit_object: bool = True) -> tuple[str, bytes | None]:
    _optimize(mod, tm, opt)
    # codegen rewrites the module in place (structurizer intrinsics), so each emit gets a fresh
    # copy -- both of them: a clone and the original schedule some kernels differently (9 of
    # the 164 shipped variants), and the listing must be the code object's kernel
    asm = tm.emit_assembly(mod.clone())
    return asm, tm.emit_object(mod.clone()) if emit_object else None


def _codegen_isolated(mod, tm, opt: int, variant: str,
                      emit_object: bool = True) -> tuple[str, bytes | None]:
    """`_codegen` in a forked child: LLVM reports some errors (e.g. "Cannot select" for an
    intrinsic the target lacks) by aborting the process, which here kills only the child and
    becomes a CompileError carrying LLVM's message. fork shares the parsed module and the
    target machine copy-on-write. Always, not only for suspect modules: LLVM offers no way to
    prove a module selectable, and only cold builds pay (benchmarks/compile.py, 'fork' column:
    tens of ms on builds of a few hundred ms; a cache hit never gets here)."""
    if not hasattr(os, "fork"):
        return _codegen(mod, tm, opt, emit_object)
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile(prefix="rocke-llvm-stderr-") as err:
        pid = os.fork()
        if pid == 0:                                     # child: never returns
            status = 1
            try:
                os.close(read_fd)
                os.dup2(err.fileno(), 2)
                faulthandler.disable()     # an LLVM abort here is expected, not a Python crash
                try:
                    payload = ("ok", _codegen(mod, tm, opt, emit_object))
                except BaseException as e:           # an LLVM error llvmlite raises normally
                    payload = ("error", f"{type(e).__name__}: {e}")
                with os.fdopen(write_fd, "wb") as out:
                    out.write(pickle.dumps(payload))
                status = 0
            finally:
                os._exit(status)
        os.close(write_fd)
        try:
            with os.fdopen(read_fd, "rb") as inp:
                data = inp.read()
        except BaseException:                            # e.g. Ctrl-C: do not leave the child
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
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
    if llvm_says:                 # warnings LLVM printed in the child still reach the user
        print(llvm_says, file=sys.stderr)
    return result


def _served(hit: dict, name: str, target: str, workgroup_size: int | None,
            wanted: int | None) -> KernelInfo | None:
    """The KernelInfo of a cache entry whose code object and metadata check out, else None."""
    try:
        validate_code_object(hit["code_object"], name, e_type=ET_DYN)
        return kernel_info(hit["asm"], name, target, workgroup_size, requested_waves_per_eu=wanted)
    except Exception:            # any wrong-shaped entry is rebuilt, never an error
        return None


def codegen_unlinked(ir: str, name: str, target: str = DEFAULT_TARGET, opt: int = 3) -> tuple[str, bytes]:
    """The listing and the relocatable object LLVM emits for IR text defining kernel ``name``,
    as compile_ir makes them, before any link (no ld.lld needed)."""
    return _codegen_isolated(_parsed_module(ir, name, name), target_machine(target, opt), opt,
                             "unlinked")


def _parsed_module(source: str, name: str, variant: str):
    """The verified LLVM module of ``source``, which must define function ``name``."""
    try:
        mod = llvm.parse_assembly(source)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(f"LLVM rejected the IR of kernel variant {variant!r}: {e}") from None
    kernels = [f.name for f in mod.functions if not f.is_declaration]
    if name not in kernels:
        raise CompileError(f"the IR of kernel variant {variant!r} defines no function {name!r}; "
                           f"it defines {kernels or 'none'}")
    return mod


def _check_kernel_descriptor(asm: str, name: str, variant: str) -> None:
    if not re.search(rf"^\s*\.amdhsa_kernel\s+{re.escape(name)}\s*$", asm, re.M):
        raise CompileError(f"function {name!r} of kernel variant {variant!r} is not an "
                           "amdgpu_kernel (no kernel descriptor was emitted)")


def compile_ir(ir, *, name: str | None = None, target: str = DEFAULT_TARGET, variant: str | None = None,
               opt: int = 3, workgroup_size: int | None = None,
               cache: CompileCache | None | bool = True,
               isolate_codegen: bool = True) -> CompiledKernel:
    """Compile AMDGPU LLVM IR text for `target`. `cache=True` uses the prebuilt bundle (see
    compiler/prebuilt.py: no link, no ld.lld) and the default on-disk cache, `False` disables
    both, or pass a CompileCache (then only it is used).

    `ir` may also be a `rocke.dsl.Kernel`: its name and workgroup size are the defaults, and
    what LLVM compiles is `kernel.located_ir()`, so the assembly carries each instruction's
    builder line (`.loc`) and the emulator's findings name it; the code is the same as from
    `kernel.ir()`, which is what `CompiledKernel.ir` (and `ir_hash`) hold.

    `isolate_codegen=False` runs LLVM's codegen in this process instead of a forked child: the
    same code, but an LLVM abort then kills the caller (benchmarks/compile.py measures what the
    isolation costs)."""
    source = ir
    if hasattr(ir, "located_ir") and hasattr(ir, "ir"):
        name = ir.name if name is None else name
        workgroup_size = getattr(ir, "workgroup_size", None) if workgroup_size is None else workgroup_size
        source, ir = ir.located_ir(), ir.ir()
    if not isinstance(ir, str):
        raise TypeError(f"ir must be LLVM IR text (str) or a rocke.dsl.Kernel, got {type(ir).__name__}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be the kernel's symbol name, got {name!r}")
    if isinstance(opt, bool) or not isinstance(opt, int) or opt not in (0, 1, 2, 3):
        raise ValueError(f"opt must be 0, 1, 2 or 3, got {opt!r}")
    if not isinstance(isolate_codegen, bool):
        raise ValueError(f"isolate_codegen must be True or False, got {isolate_codegen!r}")
    variant = variant or name
    t0 = time.perf_counter()
    linker = env.linker()
    if cache is True and linker == "ld.lld":
        served = prebuilt.lookup_ir(ir, name, target, opt, workgroup_size, variant)
        if served is not None:
            return served
    options = {"opt": opt, "name": name, "linker": linker}
    store = CompileCache() if cache is True else (cache or None)
    if store is not None:
        # the linker-free alias is over the path-free IR: located IR names the builder files'
        # absolute paths, which differ between machines (the code does not)
        any_ld = cache_key(ir, target, f"{toolchain_fingerprint()}|ld:any", options)
        try:
            linked_by = f"ld:{linker_fingerprint()}" if linker == "ld.lld" else "comgr"
            key = cache_key(source, target, f"{toolchain_fingerprint()}|{linked_by}", options)
        except ToolchainError:     # no ld.lld here: what one elsewhere built, else the error
            key = store.alias(any_ld)
            if key is None:
                raise
        hit = store.load(key)
        if hit is not None:
            served = _served(hit, name, target, workgroup_size, requested_waves_per_eu(ir, name))
            if served is not None:
                if linker == "ld.lld" and store.alias(any_ld) != key:   # entries from before
                    store.alias(any_ld, key)
                return CompiledKernel(name, variant, target, ir, hit["asm"], hit["object"],
                                      hit["code_object"], served, cache_hit=True,
                                      build_seconds=time.perf_counter() - t0, linker=linker)
            store.drop(key)
    tm = target_machine(target, opt)
    mod = _parsed_module(source, name, variant)
    asm, obj = _codegen_isolated(mod, tm, opt, variant) if isolate_codegen else _codegen(mod, tm, opt)
    _check_kernel_descriptor(asm, name, variant)
    code_object, linker = linkers.link(obj, name, target, linker)
    if linker != "ld.lld":      # ld.lld's output is validated inside link_code_object
        try:
            validate_code_object(code_object, name, e_type=ET_DYN)
        except InvalidCodeObject as e:
            raise ToolchainError(f"{linker} linked {name} but its output is not a valid code "
                                 f"object: {e}") from None
    info = kernel_info(asm, name, target, workgroup_size,
                       requested_waves_per_eu=requested_waves_per_eu(ir, name))
    if store is not None:
        store.store(key, asm, obj, code_object, {"name": name, "target": target, "linker": linker})
        if linker == "ld.lld":
            store.alias(any_ld, key)
    return CompiledKernel(name, variant, target, ir, asm, obj, code_object, info,
                          build_seconds=time.perf_counter() - t0, linker=linker)


def assemble_ir(ir: str, *, name: str, target: str = DEFAULT_TARGET, variant: str | None = None,
                opt: int = 3, workgroup_size: int | None = None,
                cache: CompileCache | None | bool = True) -> tuple[str, KernelInfo]:
    """(assembly, KernelInfo) of AMDGPU LLVM IR text, without an object or a link: the same
    listing ``compile_ir`` reads its KernelInfo from (registers, LDS, spills come from the
    metadata LLVM emits), for machines without ld.lld and for counting resources in bulk
    (``rocke report --reachable``). ``cache``: as ``compile_ir``'s (its own entries, keyed
    without a linker; no prebuilt bundle)."""
    if not isinstance(ir, str):
        raise TypeError(f"ir must be LLVM IR text (str), got {type(ir).__name__}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be the kernel's symbol name, got {name!r}")
    if isinstance(opt, bool) or not isinstance(opt, int) or opt not in (0, 1, 2, 3):
        raise ValueError(f"opt must be 0, 1, 2 or 3, got {opt!r}")
    variant = variant or name
    wanted = requested_waves_per_eu(ir, name)
    store = CompileCache() if cache is True else (cache or None)
    if store is not None:
        key = cache_key(ir, target, f"{toolchain_fingerprint()}|asm-only",
                        {"opt": opt, "name": name, "asm_only": True})
        hit = store.load(key)
        if hit is not None:
            try:
                return hit["asm"], kernel_info(hit["asm"], name, target, workgroup_size,
                                               requested_waves_per_eu=wanted)
            except Exception:    # a wrong-shaped entry is rebuilt, never an error
                store.drop(key)
    mod = _parsed_module(ir, name, variant)
    asm, _ = _codegen_isolated(mod, target_machine(target, opt), opt, variant, emit_object=False)
    _check_kernel_descriptor(asm, name, variant)
    info = kernel_info(asm, name, target, workgroup_size, requested_waves_per_eu=wanted)
    if store is not None:
        store.store(key, asm, b"", b"", {"name": name, "target": target, "linker": None})
    return asm, info
