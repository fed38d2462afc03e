"""Compile DSL IR to gfx942 assembly through rocke.compiler (no cache: tests see fresh builds)."""

import re

from rocke.compiler import compile_ir

_NAME = re.compile(r'define\s+amdgpu_kernel\s+void\s+@"?([\w.$]+)"?')


def compile_to_asm(ir_text: str) -> str:
    return compile_ir(ir_text, name=_NAME.search(ir_text).group(1), cache=False).asm


def directive(asm: str, name: str) -> int:
    """The integer value of an ``.amdhsa_*`` kernel-descriptor directive."""
    return int(re.search(rf"\.{name}\s+(\d+)", asm).group(1))
