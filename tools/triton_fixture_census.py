"""Which gfx942 opcodes the committed fixtures exercise, against the opcodes LLVM defines.

Run:  .venv/bin/python tools/triton_fixture_census.py [--counts] [--hip] [--list-missing]
          [--xml amdgpu_isa_cdna3.xml] [--target gfx950] [FIXTURE_DIR]

--target gfx950 counts tests/fixtures/triton_gfx950 against tests/fixtures/gfx950_opcodes.txt
(AMD's LLVM's gfx950 list, tools/gfx950_opcodes.py).

Only kernel bodies are scanned (from each kernel's label to its .Lfunc_end label), so the
kernel descriptor, metadata YAML and comments are ignored; encoding suffixes (_e32, _e64, _sdwa,
_dpp) are stripped. The reference opcode list, tests/fixtures/gfx942_opcodes.txt, is what
llvm-mc-19 decodes for gfx942 (tools/gfx942_opcodes.py); coverage is reported per family.
--hip adds the clang-compiled HIP fixtures (tests/fixtures/hip/kernels.s). Needs no Triton.
--xml takes the reference list from AMD's machine-readable ISA specification instead (the CDNA3
XML from gpuopen.com, not committed): families are its encodings, LLVM's names for the few
renamed opcodes are mapped to the XML's, and the opcodes on one list only are printed.
"""

import argparse
import collections
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "tests" / "fixtures" / "triton"
OPCODES = ROOT / "tests" / "fixtures" / "gfx942_opcodes.txt"
HIP_ASM = ROOT / "tests" / "fixtures" / "hip" / "kernels.s"
_SUFFIX = re.compile(r"_(e32|e64|sdwa|dpp)$")


def kernel_body_mnemonics(asm: str, symbol: str) -> list[str]:
    lines = asm.splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"{symbol}:"))) + 1
    mnemonics = []
    for line in lines[start:]:
        text = line.split(";", 1)[0].strip()
        if text.startswith(".Lfunc_end"):
            break
        if not text or text.startswith(".") or text.endswith(":"):
            continue
        mnemonics.append(text.split()[0])
    return mnemonics


def all_code_mnemonics(asm: str) -> list[str]:
    """Every instruction line of an assembly file (kernels and device functions)."""
    out = []
    in_metadata = False
    for line in asm.splitlines():
        text = line.split(";", 1)[0].strip()
        if text.startswith(".amdgpu_metadata") or text.startswith(".amdhsa_kernel"):
            in_metadata = True
        if in_metadata:
            if text.startswith((".end_amdgpu_metadata", ".end_amdhsa_kernel")):
                in_metadata = False
            continue
        if text and not text.startswith(".") and not text.endswith(":") and re.match(r"^[a-z]", text):
            out.append(text.split()[0])
    return out


def census(fixture_dir: Path, hip: bool = False) -> dict[str, collections.Counter]:
    """Mnemonic -> Counter of fixture names using it."""
    usage: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    sidecars = sorted(fixture_dir.glob("*.json"))
    if not sidecars:
        raise ValueError(f"no fixture sidecars (*.json) in {fixture_dir}")
    for sidecar in sidecars:
        info = json.loads(sidecar.read_text())
        asm = sidecar.with_suffix(".s").read_text()
        for mnemonic in kernel_body_mnemonics(asm, info["kernel_symbol"]):
            usage[mnemonic][info["name"]] += 1
    if hip:
        for mnemonic in all_code_mnemonics(HIP_ASM.read_text()):
            usage[mnemonic]["hip:kernels"] += 1
    return usage


def llvm_opcodes(path: Path = OPCODES) -> dict[str, str]:
    """mnemonic -> family, from the committed LLVM opcode list."""
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            family, name = line.split("\t")[:2]
            out[name] = family
    return out


# LLVM gfx942 mnemonic -> the CDNA3 XML's name for the same opcode
XML_ALIASES = {"v_accvgpr_read_b32": "v_accvgpr_read", "v_accvgpr_write_b32": "v_accvgpr_write",
               "v_fma_mix_f32": "v_mad_mix_f32", "v_fma_mixlo_f16": "v_mad_mixlo_f16",
               "v_fma_mixhi_f16": "v_mad_mixhi_f16"}


def xml_opcodes(path: Path) -> dict[str, str]:
    """mnemonic -> family (its first encoding, e.g. VOP3P) from an AMD ISA specification XML."""
    import xml.etree.ElementTree as ET
    out = {}
    for _, element in ET.iterparse(path):
        if element.tag != "Instruction":
            continue
        name = element.findtext("InstructionName")
        encoding = element.findtext("InstructionEncodings/InstructionEncoding/EncodingName") or "?"
        if name:
            out[name.strip().lower()] = encoding.strip().removeprefix("ENC_")
        element.clear()
    if not out:
        raise ValueError(f"{path}: no <Instruction> elements with an <InstructionName>")
    return out


def to_xml_names(usage):
    """`usage` with LLVM's mnemonics renamed to the XML's where they differ."""
    renamed = collections.defaultdict(collections.Counter)
    for mnemonic, fixtures in usage.items():
        base = _SUFFIX.sub("", mnemonic)
        renamed[XML_ALIASES.get(base, base)].update(fixtures)
    return renamed


def coverage(usage, opcodes: dict[str, str]):
    """(per-family rows [(family, used, total)], used total, total, mnemonics not in LLVM's list)."""
    used = {_SUFFIX.sub("", m) for m in usage}
    families = collections.defaultdict(lambda: [0, 0])
    for name, family in opcodes.items():
        families[family][1] += 1
        families[family][0] += name in used
    rows = sorted((f, u, t) for f, (u, t) in families.items())
    unknown = sorted(used - set(opcodes))
    return rows, sum(u for _, u, _ in rows), len(opcodes), unknown


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture_dir", nargs="?", type=Path, default=None)
    parser.add_argument("--target", choices=("gfx942", "gfx950"), default="gfx942")
    parser.add_argument("--counts", action="store_true",
                        help="also print static occurrence count and number of fixtures")
    parser.add_argument("--hip", action="store_true", help="include the HIP fixtures")
    parser.add_argument("--list-missing", action="store_true",
                        help="list LLVM opcodes no fixture uses, per family")
    parser.add_argument("--xml", type=Path,
                        help="AMD ISA specification XML (amdgpu_isa_cdna3.xml) as the reference")
    args = parser.parse_args()
    if args.fixture_dir is None:
        args.fixture_dir = DEFAULT_DIR if args.target == "gfx942" else ROOT / "tests" / "fixtures" / "triton_gfx950"
    usage = census(args.fixture_dir, args.hip)
    if args.counts:
        for mnemonic in sorted(usage):
            per_fixture = usage[mnemonic]
            print(f"{mnemonic:<36} {sum(per_fixture.values()):>5} {len(per_fixture):>3}")
    printed = len(usage)
    opcodes = llvm_opcodes(OPCODES if args.target == "gfx942"
                           else ROOT / "tests" / "fixtures" / "gfx950_opcodes.txt")
    reference = "LLVM"
    if args.xml:
        llvm_names = {XML_ALIASES.get(name, name) for name in opcodes}
        opcodes = xml_opcodes(args.xml)
        usage = to_xml_names(usage)
        reference = "XML"
        print(f"# XML only ({len(set(opcodes) - llvm_names)}): "
              f"{' '.join(sorted(set(opcodes) - llvm_names))}")
        print(f"# LLVM only ({len(llvm_names - set(opcodes))}): "
              f"{' '.join(sorted(llvm_names - set(opcodes)))}")
    rows, used, total, unknown = coverage(usage, opcodes)
    print(f"{'family':<22} {'used':>5} {reference:>5}  coverage")
    for family, u, t in rows:
        print(f"{family:<22} {u:>5} {t:>5}  {100 * u / t:5.1f}%")
    print(f"{'all':<22} {used:>5} {total:>5}  {100 * used / total:5.1f}%")
    print(f"# {printed} distinct mnemonics as printed; "
          f"{len({_SUFFIX.sub('', m) for m in usage})} opcodes")
    if unknown:
        print(f"# not in the {reference} list: {' '.join(unknown)}")
    if args.list_missing:
        used_set = {_SUFFIX.sub("", m) for m in usage}
        by_family = collections.defaultdict(list)
        for name, family in opcodes.items():
            if name not in used_set:
                by_family[family].append(name)
        for family in sorted(by_family):
            print(f"{family}: {' '.join(sorted(by_family[family]))}")


if __name__ == "__main__":
    main()
