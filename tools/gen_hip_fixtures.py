"""Regenerate tests/fixtures/hip/: compile kernels.hip for gfx942 with Debian's clang-19 as
assembly text (`kernels.s`) and as a linked code object (`kernels.co`).

    python tools/gen_hip_fixtures.py [--clang clang-19]

Device-only HIP compilation with no ROCm installed: -nogpulib -nogpuinc and the fixtures' own
minimal header (rocke_hip.h)."""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hip"
FLAGS = ["-x", "hip", "--offload-arch=gfx942", "-nogpulib", "-nogpuinc", "--cuda-device-only",
         "-O2", "-fno-exceptions", "-I", str(FIXTURES)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clang", default=shutil.which("clang-19") or "clang-19")
    args = parser.parse_args()
    if not shutil.which(args.clang):
        print(f"{args.clang} not found: install Debian's clang-19", file=sys.stderr)
        return 1
    source = FIXTURES / "kernels.hip"
    for extra, output in ((["-S"], "kernels.s"), (["-c", "--no-gpu-bundle-output"], "kernels.co")):
        subprocess.run([args.clang, *FLAGS, *extra, str(source), "-o", str(FIXTURES / output)],
                       check=True)
        print(f"wrote {FIXTURES / output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
