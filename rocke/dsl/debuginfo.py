"""Builder source lines carried through LLVM: ``Kernel.located_ir()``.

Every instruction the DSL emits is recorded with the line of the kernel author's code that
asked for it (``errors.user_frame``, the first frame outside ``rocke/dsl``). ``located_ir``
attaches those lines as LLVM debug locations (``!dbg``) under a compile unit of kind
``DebugDirectivesOnly``: the backend then prints ``.file`` / ``.loc`` directives in the
assembly and no DWARF sections, and the code is unchanged (debug locations never affect
codegen). rocke's emulator reads the directives, so its findings (LDS races, memory faults,
traps, timeouts) name ``builder.py:LINE`` beside the assembly line.

``Kernel.ir()`` -- the text the golden table hashes -- never carries locations: it is built
and cached before any debug metadata is added, so it stays a pure function of spec and target,
independent of where the checkout lives.
"""

from __future__ import annotations

import os

import llvmlite.ir as ir

from .errors import user_frame

_I32 = ir.IntType(32)


class LocatingBuilder(ir.IRBuilder):
    """An IRBuilder that records, for every instruction it inserts, the builder line behind it."""

    def __init__(self, block, locations: dict):
        super().__init__(block)
        self._locations = locations

    def _insert(self, instr):
        self._locations[id(instr)] = (instr, user_frame())
        super()._insert(instr)


def located_text(module: ir.Module, function, locations: dict, opened_at: tuple[str, int]) -> str:
    """The module's text with the debug-info nodes added and a ``!dbg`` on every recorded
    instruction. llvmlite caches each instruction's text once rendered (``ir()`` has rendered
    them), so the ``!dbg`` attachments are appended to those lines rather than set on the
    instructions: the plain text stays exactly what ``ir()`` returned."""
    files: dict[str, object] = {}

    def di_file(path: str):
        if path not in files:
            files[path] = module.add_debug_info("DIFile", {
                "filename": os.path.basename(path), "directory": os.path.dirname(path) or "."})
        return files[path]

    main_file = di_file(opened_at[0])
    unit = module.add_debug_info("DICompileUnit", {
        "language": ir.DIToken("DW_LANG_Python"), "file": main_file, "producer": "rocke",
        "isOptimized": True, "runtimeVersion": 0,
        "emissionKind": ir.DIToken("DebugDirectivesOnly")}, is_distinct=True)
    routine = module.add_debug_info("DISubroutineType", {"types": module.add_metadata([])})
    program = module.add_debug_info("DISubprogram", {
        "name": function.name, "file": main_file, "line": opened_at[1], "type": routine,
        "scopeLine": opened_at[1], "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized"),
        "unit": unit}, is_distinct=True)
    scopes = {opened_at[0]: program}
    attached = []
    for block in function.blocks:
        for instr in block.instructions:
            if id(instr) not in locations:
                continue
            path, line = locations[id(instr)][1]
            if path not in scopes:   # lines in another file (a helper module) need a scope there
                scopes[path] = module.add_debug_info("DILexicalBlockFile", {
                    "scope": program, "file": di_file(path), "discriminator": 0})
            attached.append((str(instr).rstrip("\n"), module.add_debug_info("DILocation", {
                "line": line, "column": 0, "scope": scopes[path]})))
    module.add_named_metadata("llvm.dbg.cu", unit)
    flags = module.add_named_metadata("llvm.module.flags")
    flags.add(module.add_metadata([_I32(2), "Debug Info Version", _I32(3)]))
    flags.add(module.add_metadata([_I32(7), "Dwarf Version", _I32(4)]))
    text = str(module)
    define = text.index(f'define amdgpu_kernel void @"{function.name}"')
    cursor = text.index("\n", define)
    pieces = [text[:cursor], f" !dbg {program.get_reference()}"]
    for line, location in attached:
        at = text.index(line, cursor)
        end = at + len(line)
        pieces += [text[cursor:end], f", !dbg {location.get_reference()}"]
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)
