"""rocke: a Python DSL for AMD CDNA GPU kernels (gfx942), with a gfx942 emulator backend."""
