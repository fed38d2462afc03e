"""How many of the gfx942 (or gfx950) opcodes LLVM defines the emulator can decode, per family.

    python tools/emu_opcode_support.py [--target gfx950] [--list-missing]

gfx950 reads tests/fixtures/gfx950_opcodes.txt (tools/gfx950_opcodes.py) and decodes as gfx950;
an opcode whose sample is '?' (no operand form LLVM accepted) counts as missing.

Each opcode's sample instruction (tests/fixtures/gfx942_opcodes.txt, as llvm-mc-19 disassembled
it) is put alone into a kernel and run through rocke.emu's decoder. An opcode counts as supported
when its instruction decodes; a sample whose operand form the decoder refuses counts as missing
even if other forms of that opcode work, so the figure is a lower bound. Decoding is not
execution: semantics are tested by tests/emu."""
from __future__ import annotations

import argparse
import collections
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # this checkout's rocke

from rocke.emu.asm import parse_program   # noqa: E402
from rocke.emu.errors import EmulatorError   # noqa: E402
from rocke.emu.program import decode_kernel   # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures"
OPCODES = FIXTURES / "gfx942_opcodes.txt"
KERNEL = """
  .text
  .globl probe
  .p2align 8
  .type probe,@function
probe:
  {instruction}
  s_endpgm
.Lfunc_end_probe:
.amdhsa_kernel probe
  .amdhsa_next_free_vgpr 512
  .amdhsa_next_free_sgpr 102
  .amdhsa_accum_offset 256
.end_amdhsa_kernel
  .amdgpu_metadata
---
amdhsa.kernels:
  - .name: probe
    .symbol: probe.kd
    .agpr_count: 256
    .args: []
    .kernarg_segment_size: 0
    .max_flat_workgroup_size: 64
    .wavefront_size: 64
amdhsa.target: amdgcn-amd-amdhsa--gfx942
amdhsa.version: [1, 2]
  .end_amdgpu_metadata
"""


def decodes(instruction: str, target: str = "gfx942") -> str | None:
    """None when the instruction decodes for `target`, else the decoder's reason."""
    if instruction == "?":
        return "no sample instruction LLVM accepts"
    words = instruction.split()
    if words[0].startswith(("s_branch", "s_cbranch_")) and len(words) == 2 and words[1].isdigit():
        instruction = f"{words[0]} .Lfunc_end_probe"   # disassembly prints raw branch offsets
    try:
        program = parse_program(KERNEL.format(instruction=instruction))
        decode_kernel(program, program.kernels["probe"], target)
    except (EmulatorError, ValueError, KeyError, IndexError) as err:
        return str(err).split(": ", 2)[-1][:120]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list-missing", action="store_true")
    parser.add_argument("--target", choices=("gfx942", "gfx950"), default="gfx942")
    args = parser.parse_args()
    opcodes = FIXTURES / f"{args.target}_opcodes.txt"
    totals = collections.defaultdict(lambda: [0, 0])
    missing = collections.defaultdict(list)
    for line in opcodes.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        family, name, sample = line.split("\t")
        reason = decodes(sample, args.target)
        totals[family][1] += 1
        if reason is None:
            totals[family][0] += 1
        else:
            missing[family].append(f"{name} ({reason})")
    print(f"{'family':<22} {'decodes':>7} {'LLVM':>5}")
    for family in sorted(totals):
        ok, total = totals[family]
        print(f"{family:<22} {ok:>7} {total:>5}  {100 * ok / total:5.1f}%")
    ok = sum(v[0] for v in totals.values())
    total = sum(v[1] for v in totals.values())
    print(f"{'all':<22} {ok:>7} {total:>5}  {100 * ok / total:5.1f}%  ({args.target})")
    if args.list_missing:
        for family in sorted(missing):
            print(f"\n{family}:\n  " + "\n  ".join(missing[family]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
