"""Compile a DSL kernel for gfx942 and run it in rocke's emulator on CPU torch tensors."""

from rocke.compiler import compile_ir
from rocke.runtime import launch


def run(kernel, grid, args, block=None):
    """Launch ``kernel`` over ``grid`` workgroups; tensors in ``args`` are updated in place."""
    block = block or (kernel.workgroup_size, 1, 1)
    return launch(compile_ir(kernel.ir(), name=kernel.name, cache=False), grid, block, list(args))
