"""LLVM IR -> optimized module -> gfx942 asm / object -> linked code object; metadata; cache."""
from .cache import CompileCache, cache_key, default_cache_dir
from .elf import InvalidCodeObject, validate_code_object
from .metadata import KernelInfo, kernel_info, parse_metadata
from .linker import link_code_object
from .pipeline import DEFAULT_TARGET, CompiledKernel, CompileError, assemble_ir, compile_ir
from .toolchain import ToolchainError, find_linker, linker_fingerprint, llvm_version, toolchain_fingerprint

__all__ = ["CompileCache", "cache_key", "default_cache_dir", "KernelInfo",
           "kernel_info", "parse_metadata", "DEFAULT_TARGET", "CompiledKernel", "CompileError",
           "compile_ir", "assemble_ir", "link_code_object", "ToolchainError", "find_linker", "llvm_version",
           "toolchain_fingerprint", "linker_fingerprint", "InvalidCodeObject", "validate_code_object"]
