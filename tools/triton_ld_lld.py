#!/usr/bin/env python3
"""An ld.lld for a machine that has Triton but no LLVM linker: links through the lld that
Triton's AMD backend carries (``triton._C.libtriton.amd.link_hsaco``, the call Triton makes for
its own gfx942 kernels). Point rocke at it with ``ROCKE_LD_LLD=$PWD/tools/triton_ld_lld.py``.

It takes the one command line rocke's linker step gives (rocke/compiler/linker.py:
``-shared --no-undefined -o OUT IN``) and ``--version`` (the compile cache keys code objects by
the linker's answer, so these never mix with ld.lld's). Anything else is refused, exit 2.
A dev tool for re-modelling on lent machines (docs/cli.md), not a supported toolchain: rocke's
own set-up installs a real ld.lld.
"""
import sys


def main(argv: list[str]) -> int:
    flags = {"-shared", "--no-undefined"}
    rest = [a for a in argv if a not in flags]
    link = len(rest) == 3 and rest[0] == "-o" and not rest[2].startswith("-")
    if argv != ["--version"] and not link:
        print(f"triton_ld_lld: expected -shared --no-undefined -o OUT IN, or --version; got {argv}",
              file=sys.stderr)
        return 2
    try:
        import triton
        from triton._C.libtriton import amd
    except ImportError as e:
        print(f"triton_ld_lld: Triton's AMD backend is not importable here ({e})", file=sys.stderr)
        return 2
    if not link:
        print(f"LLD inside Triton {triton.__version__} (amd.link_hsaco; tools/triton_ld_lld.py)")
        return 0
    amd.link_hsaco(rest[2], rest[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
