"""gfx942 / gfx950 machine-code emulator: runs the assembly text LLVM prints for AMD CDNA3 (and,
with ``target="gfx950"``, CDNA4) kernels, or a linked code object (disassembled with LLVM's tools).

File map (the data flow of one launch, top to bottom):

- ``launch.py``   public entry ``launch()``: argument checks, kernarg/dispatch packets, pools of
                  workgroups, the launch report. Text or code object -> ``_program()``.
- ``codeobject.py`` a code object (ELF or clang offload bundle) -> assembly text: llvm-objdump
                  disassembly with branch labels and byte addresses, descriptors, metadata note.
- ``asm.py``      assembly text -> ``Program`` (instructions, labels, ``.amdhsa_kernel``
                  descriptors incl. ``.set`` symbol expressions, the metadata YAML).
- ``operands.py`` operand syntax: registers, inline constants/literals, source modifiers.
- ``program.py``  decodes a kernel once into closures ``run(P, sel, n)``; tracks MODE
                  (``s_setreg``/``s_getreg``) in program order; call relocations; code addresses.
- ``valu.py``     VOP1/2/3/3P, VOPC, DPP, SDWA operand plumbing around ``semantics`` entries;
                  clamp, omod, directed rounding and FP16_OVFL variants.
- ``salu.py``     SALU/SOPC/SOPK plumbing, saveexec, v_readlane/v_writelane/readfirstlane.
- ``control.py``  branches, calls (s_call/s_swappc/s_setpc/s_getpc), s_memtime.
- ``smem.py``     scalar memory loads.
- ``semantics.py`` the per-opcode VALU/SALU numerics (``VALU_OPS``, ``SALU_OPS``, clamp,
                  rounding-mode and FP16_OVFL forms); pure numpy, no register file.
- ``mfma.py``     MFMA arithmetic and operand layouts (f16/bf16/fp8, f32, i8, f64 families);
  ``mfma_decode.py`` the v_mfma_* instruction closures around it.
- ``numerics.py`` bit-exact format conversions (fp8/bf8 fnuz and OCP, f16, bf16, denormal flushing).
- ``gfx950.py``   the gfx950 target: its opcode gate, table layers and new instructions.
- ``mxcvt.py``    gfx950's scaled (OCP MX) conversions v_cvt_scalef32_* (fp8/bf8/fp6/bf6/fp4).
- ``memops.py``   VMEM (global/flat/buffer, LDS DMA, atomics) and DS instruction closures.
- ``access.py``   vectorized register-file readers/writers shared by the decoders.
- ``machine.py``  pool state (SGPR/VGPR files, EXEC, LDS), the fair scheduler (forward progress),
                  the watchdog, checkers.
- ``memory.py``   the launch's global memory map (host buffers by real address).
- ``parallel.py`` a launch's workgroup pools in forked worker processes (ROCKE_EMU_WORKERS).
- ``lru.py``      the bounded most-recently-used map behind the per-process caches (parsed
                  programs, decoded kernels, disassemblies).
- ``errors.py``   the exception types.

Closure protocol: every decoded instruction is ``run(P, sel, n) -> lanes`` over a batch ``sel``
of ``n`` waves of pool ``P`` (control flow: ``run(P, sel, n, pc)``, setting ``P.pc``); decoding
never touches machine state, so one decoded kernel serves every launch.
"""
from .errors import EmulatorError, LaunchTimeout, LdsFault, LdsRace, LdsUninitialised, MemoryFault
from .launch import MEMCHECK_SCOPES, LaunchReport, launch, relax_garbage_collection

__all__ = ["launch", "relax_garbage_collection", "LaunchReport", "MEMCHECK_SCOPES", "EmulatorError", "MemoryFault", "LdsFault", "LdsRace", "LdsUninitialised", "LaunchTimeout"]
