"""The gfx942 opcode list, taken from LLVM itself: every opcode value of every gfx9 encoding
format is disassembled by `llvm-mc-19 --disassemble -mcpu=gfx942`, and the mnemonics that
decode (encoding suffixes _e32/_e64/_sdwa/_dpp stripped) are the target's instruction set.

    python tools/gfx942_opcodes.py [--llvm-mc llvm-mc-19] [--out tests/fixtures/gfx942_opcodes.txt]

The output file (one `FAMILY<TAB>OPCODE<TAB>SAMPLE INSTRUCTION` per line) is committed so the census needs no LLVM.
Encodings (AMD CDNA3 ISA, "Microcode Formats"): SOP2/SOPK/SOP1/SOPC/SOPP, SMEM, VOP2/VOP1/VOPC,
VOP3 (10-bit opcode), VOP3P (incl. MAI), DS, FLAT/GLOBAL/SCRATCH, MUBUF, MTBUF. A few operand
variants are tried per opcode so that opcodes needing aligned or special operands decode too.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gfx942_opcodes.txt"


def _words() -> list[list[int]]:
    """Instruction words (one or two dwords) covering every opcode field value."""
    out = []
    for op in range(128):
        for operands in (0x000201, 0x040200):
            out.append([0x80000000 | (op << 23) | operands])                       # SOP2
    for op in range(32):
        out.append([0xB0000000 | (op << 23) | 0x10])                               # SOPK
    for op in range(256):
        out.append([0xBE800000 | (op << 8) | 2, ])                                  # SOP1
        out.append([0xBE820000 | (op << 8) | 4])
    for op in range(128):
        out.append([0xBF000000 | (op << 16) | 0x0201])                              # SOPC
        out.append([0xBF800000 | (op << 16) | 0x0001])                              # SOPP
        out.append([0xBF800000 | (op << 16)])
    for op in range(256):
        for sdata in (0, 4, 8, 16):
            out.append([0xC0000000 | (op << 18) | (1 << 17) | (sdata << 6) | 2, 0])  # SMEM imm
    for op in range(64):
        out.append([(op << 25) | (2 << 17) | (4 << 9) | 0x100])                     # VOP2
        out.append([(op << 25) | (2 << 17) | (4 << 9) | 0x106])
    for op in range(256):
        out.append([0x7E000000 | (2 << 17) | (op << 9) | 0x104])                    # VOP1
        out.append([0x7E000000 | (4 << 17) | (op << 9) | 0x106])
        out.append([0x7C000000 | (op << 17) | (4 << 9) | 0x102])                    # VOPC
    for op in range(1024):
        for src in ((0x100 | 4) | ((0x100 | 6) << 9) | ((0x100 | 8) << 18),
                    (0x100 | 0) | ((0x100 | 2) << 9) | ((0x100 | 2) << 18), 2 | (4 << 9) | (6 << 18),
                    (0x100 | 4) | ((0x100 | 6) << 9), 0x100 | 4):
            out.append([0xD0000000 | (op << 16) | 2, src])                           # VOP3
            out.append([0xD0000000 | (op << 16) | (106 << 8) | 4, src])             # VOP3b (sdst vcc)
    for op in range(128):
        for acc in (0, 1 << 15):
            for src in ((0x100 | 4) | ((0x100 | 8) << 9) | ((0x100 | 16) << 18) | (3 << 27),
                        (0x100 | 4) | ((0x100 | 8) << 9) | ((0x100 | 0) << 18) | (3 << 27),
                        (0x100 | 4) | ((0x100 | 8) << 9) | (3 << 27)):
                out.append([0xD3800000 | (op << 16) | acc | 0x4000 | 0, src])       # VOP3P / MAI
                out.append([0xD3800000 | (op << 16) | acc | 0x4000 | 32, src])
    for op in range(256):
        for data in (0x02040600, 0x00000400, 0x04000000, 0x04000400, 0x04040200):
            out.append([0xD8000000 | (op << 17), data | 0x08])                      # DS
    for seg in range(3):
        for op in range(128):
            for second in (0x007F0004 | (2 << 24), 0x00000004 | (2 << 24), 0x00000002 | (4 << 24)):
                out.append([0xDC000000 | (op << 18) | (seg << 14), second])           # FLAT/SCRATCH/GLOBAL
    for op in range(128):
        out.append([0xE0000000 | (op << 18) | 0x1000, 0x00000200 | (4 << 8) | 0])   # MUBUF offen
        out.append([0xE0000000 | (op << 18), 0x00010200 | (4 << 8)])
    for op in range(16):
        out.append([0xE8000000 | (op << 15) | 0x1000 | (1 << 19), 0x00000200 | (4 << 8)])   # MTBUF
    # operand-less forms (v_nop, v_clrexcp, s_memtime, s_dcache_*, ds_nop, ds_append, GDS ops)
    # decode only with zero or GDS operand fields
    for op in range(256):
        out.append([0x7E000000 | (op << 9)])                                         # VOP1, no operands
        out.append([0xC0000000 | (op << 18), 0])                                      # SMEM, no operands
        for data in (0, 0x01000000, 0x00000100, 0x00000200):
            for gds in (0, 1 << 16):
                out.append([0xD8000000 | (op << 17) | gds, data])                     # DS, GDS
    return out


_SUFFIX = re.compile(r"_(e32|e64|sdwa|dpp)$")


def family(mnemonic: str) -> str:
    """Instruction family of a mnemonic (census rows)."""
    if mnemonic.startswith(("s_load", "s_store", "s_buffer", "s_scratch", "s_atomic",
                            "s_buffer_atomic", "s_dcache", "s_memtime", "s_memrealtime",
                            "s_atc_probe")):
        return "SMEM"
    if mnemonic.startswith(("s_branch", "s_cbranch", "s_waitcnt", "s_barrier", "s_endpgm",
                            "s_nop", "s_sleep", "s_sendmsg", "s_trap", "s_setprio", "s_icache",
                            "s_set_gpr_idx", "s_incperflevel", "s_decperflevel", "s_ttrace",
                            "s_setkill", "s_sethalt", "s_cbranch", "s_endpgm")):
        return "SOPP (control)"
    if mnemonic.startswith("s_"):
        return "SALU"
    if mnemonic.startswith(("v_mfma", "v_smfmac")):
        return "MFMA"
    if mnemonic.startswith(("v_cmp_", "v_cmpx_")):
        return "VOPC (compare)"
    if mnemonic.startswith(("v_pk_", "v_dot", "v_fma_mix", "v_mad_mix")):
        return "VOP3P (packed/dot)"
    if mnemonic.startswith(("v_cvt", "v_pack")):
        return "VALU conversion"
    if mnemonic.startswith("v_"):
        return "VALU arithmetic"
    if mnemonic.startswith("ds_"):
        return "DS (LDS)"
    if mnemonic.startswith("global_"):
        return "GLOBAL"
    if mnemonic.startswith("flat_"):
        return "FLAT"
    if mnemonic.startswith("scratch_"):
        return "SCRATCH"
    if mnemonic.startswith("buffer_"):
        return "MUBUF"
    if mnemonic.startswith("tbuffer_"):
        return "MTBUF"
    return "other"


def normalize(mnemonic: str) -> str:
    return _SUFFIX.sub("", mnemonic)


def llvm_opcodes(llvm_mc: str) -> dict[str, str]:
    lines = []
    for words in _words():
        lines.append(" ".join(f"0x{b:02x}" for w in words for b in w.to_bytes(4, "little")))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(lines) + "\n")
        path = handle.name
    result = subprocess.run([llvm_mc, "--disassemble", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942",
                             path], capture_output=True, text=True)
    Path(path).unlink()
    names: dict[str, str] = {}   # opcode -> one disassembled instruction using it
    for line in result.stdout.splitlines():
        text = line.split("//")[0].strip()
        if text and not text.startswith((".", ";")):
            names.setdefault(normalize(text.split()[0]), text)
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llvm-mc", default=shutil.which("llvm-mc-19") or "llvm-mc-19")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if not shutil.which(args.llvm_mc):
        print(f"{args.llvm_mc} not found: install Debian's llvm-19", file=sys.stderr)
        return 1
    names = llvm_opcodes(args.llvm_mc)
    rows = sorted((family(n), n, names[n]) for n in names)
    args.out.write_text("# gfx942 opcodes decoded by LLVM 19 (tools/gfx942_opcodes.py): "
                        "family, opcode, one instruction\n"
                        + "".join(f"{f}\t{n}\t{t}\n" for f, n, t in rows))
    print(f"{len(names)} opcodes -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
