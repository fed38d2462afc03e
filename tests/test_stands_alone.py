"""The product stands alone: its code and documents cite only what a reader can open — files in
the repository or public sources — never planning documents outside it or temporary paths."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"\bseeds?\s*(/|\d{3})|\.\./shared/|/tmp/contract|ATTENTION_CONTRACT|imported on use")
SCANNED = ("README.md", "ALGORITHM.md", "docs", "examples", "rocke", "scripts", "tools",
           "benchmarks", "tests")


def _files():
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for p in candidates:
            rel = p.relative_to(ROOT).as_posix()
            if p.is_file() and p.suffix in (".py", ".md", ".sh", ".txt", ".toml") \
                    and rel != "tests/test_stands_alone.py":    # this file spells the forms out
                yield rel, p


def test_no_citation_points_outside_the_repository():
    offenders = [f"{rel}:{n}: {line.strip()}"
                 for rel, p in _files()
                 for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
                 if OUTSIDE.search(line)]
    assert not offenders, "\n".join(offenders)


def test_the_scan_sees_the_documents():
    scanned = {rel for rel, _ in _files()}
    assert {"README.md", "ALGORITHM.md", "rocke/emu/semantics.py",
            "examples/attention_harness.py", "rocke/kernels/gfx942/attention_tiled_2d.py",
            "tests/kernels/test_attention_2d.py"} <= scanned


def test_the_pattern_finds_each_form():
    for line in ("(seeds/000 §10)", "seed 004 §6", "seeds 000 §6-7", "(ATTENTION_CONTRACT.md)",
                 "see ../shared/design/X.md", "/tmp/contract.md"):
        assert OUTSIDE.search(line), line
    assert not OUTSIDE.search("make_inputs(seed=3)")
