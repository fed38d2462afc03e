"""List the distinct gfx942 instruction mnemonics used by the committed Triton fixtures.

Run:  .venv/bin/python tools/triton_fixture_census.py [--counts] [FIXTURE_DIR]

Only the kernel body is scanned (from the kernel's label to its .Lfunc_end label), so the
kernel descriptor, metadata YAML and comments are ignored. Needs no Triton.
"""

import argparse
import collections
import json
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "triton"


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


def census(fixture_dir: Path) -> dict[str, collections.Counter]:
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
    return usage


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture_dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--counts", action="store_true",
                        help="also print static occurrence count and number of fixtures")
    args = parser.parse_args()
    usage = census(args.fixture_dir)
    for mnemonic in sorted(usage):
        if args.counts:
            per_fixture = usage[mnemonic]
            print(f"{mnemonic:<36} {sum(per_fixture.values()):>5} {len(per_fixture):>3}")
        else:
            print(mnemonic)
    print(f"# {len(usage)} distinct mnemonics")


if __name__ == "__main__":
    main()
