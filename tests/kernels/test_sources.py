"""The kernel sources stand alone: they cite facts, ALGORITHM.md or public sources (vLLM, CK Tile,
the CDNA3 ISA guide), never documents that are not in the repository."""
import re
from pathlib import Path

import rocke.kernels

KERNELS = Path(rocke.kernels.__file__).parent
# "seeds/000", "seed 004 §6", "seeds 000 §6-7", a contract file that does not exist
ABSENT = re.compile(r"\bseeds?\s*(/|\d{3})|ATTENTION_CONTRACT|imported on use")


def test_kernel_sources_cite_nothing_outside_the_repository():
    hits = [f"{p.relative_to(KERNELS)}:{n}: {line.strip()}"
            for p in sorted(KERNELS.rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if ABSENT.search(line)]
    assert not hits, "\n".join(hits)


def test_the_pattern_finds_each_form():
    for line in ("(seeds/000 §10)", "seed 004 §6", "seeds 000 §6-7", "(ATTENTION_CONTRACT.md)"):
        assert ABSENT.search(line), line
    assert not ABSENT.search("make_inputs(seed=3)")
