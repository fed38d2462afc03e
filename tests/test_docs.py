"""Every ```python block of README.md and docs/*.md runs as written: the blocks of one file in
order, in one fresh namespace per file (a block may use what an earlier block of its file
defined). A block that is not meant to run is fenced as ```text, ```bash, ```diff, ... instead,
so "every python block runs" holds without exceptions. Beside that: specific checks of what
some blocks compute (docs/writing-kernels.md §8's LayerNorm backward against torch autograd),
every link and `docs/*.md` mention resolves, and the lever tables list every lever."""
import functools
import os
import re
from pathlib import Path

import pytest
import torch

from rocke import env
from rocke.compiler import compile_ir
from rocke.kernels import registry
from rocke.kernels.common import knobs

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)")
# info strings a reader's renderer shows as Python: a block so fenced is one that runs, so
# only ```python is allowed (``py`` and friends would slip past the rule)
PYTHON_ALIASES = {"py", "python3", "py3", "pycon", "ipython"}


def documents() -> list[str]:
    return ["README.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))


def fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line of the block's first code line, info string, code) of every fenced block."""
    blocks, lines, i = [], text.splitlines(keepends=True), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, marker, info = m.group(1), m.group(2), m.group(3).lower()
        close = re.compile(rf"^\s*{re.escape(marker[0])}{{{len(marker)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        assert j < len(lines), f"unclosed fence at line {i + 1}"
        code = "".join(l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j])
        blocks.append((i + 2, info, code))
        i = j + 1
    return blocks


def python_blocks(path: Path) -> list[tuple[int, str]]:
    return [(line, code) for line, info, code in fenced_blocks(path.read_text()) if info == "python"]


def run_blocks(path: Path, name: str) -> dict:
    """Run ``path``'s python blocks in order in one fresh namespace; a failing block fails
    with the file, the block's number and its line. Families a block registers and environment
    variables it sets are undone afterwards."""
    scope: dict = {"__name__": f"doc_{Path(name).stem}"}
    families, environ = set(registry.families()), dict(os.environ)
    try:
        for number, (line, code) in enumerate(python_blocks(path), 1):
            # padded so that tracebacks point at the Markdown file's own lines
            source = "\n" * (line - 1) + code
            try:
                exec(compile(source, str(path), "exec"), scope)
            except Exception as error:
                raise AssertionError(f"{name}: python block {number} (line {line}) failed: "
                                     f"{type(error).__name__}: {error}") from error
    finally:
        for variable in set(os.environ) - set(environ):
            del os.environ[variable]
        os.environ.update({k: v for k, v in environ.items() if os.environ.get(k) != v})
        for family in set(registry.families()) - families:
            registry.unregister_family(family)
        registry.forget_loaded_families()
    return scope


@functools.cache
def run_document(name: str) -> dict:
    return run_blocks(ROOT / name, name)


WITH_PYTHON = [name for name in documents() if python_blocks(ROOT / name)]


@pytest.mark.parametrize("name", WITH_PYTHON)
def test_every_python_block_runs(name):
    run_document(name)


def test_the_blocks_are_found():
    assert {"README.md", "docs/writing-kernels.md"} <= set(WITH_PYTHON)
    assert len(python_blocks(ROOT / "docs/writing-kernels.md")) >= 2


@pytest.mark.parametrize("name", documents())
def test_python_blocks_are_fenced_as_python_only(name):
    """A block meant to run is ```python; one that is not is ```text (or bash, diff, ...)."""
    odd = [f"{name}:{line}: ```{info}" for line, info, _ in fenced_blocks((ROOT / name).read_text())
           if info in PYTHON_ALIASES]
    assert not odd, "fence these as ```python (it runs) or ```text:\n" + "\n".join(odd)


def test_a_failing_block_names_the_file_and_the_block(tmp_path):
    doc = tmp_path / "guide.md"
    doc.write_text("# Guide\n\n```python\na = 1\n```\n\n```bash\nnot python\n```\n\n"
                   "```python\nb = a + 1\nraise RuntimeError('broken on purpose')\n```\n")
    with pytest.raises(AssertionError, match=r"guide\.md: python block 2 \(line 12\) failed: "
                                             r"RuntimeError: broken on purpose") as caught:
        run_blocks(doc, "guide.md")
    assert caught.value.__cause__.__traceback__.tb_next.tb_lineno == 13   # the .md file's line


def test_layernorm_backward_section_runs_and_matches_autograd():
    """docs/writing-kernels.md §8 (atomics and a workgroup reduction) computes LayerNorm's
    backward pass like torch autograd, with no-return hardware float atomics."""
    scope = run_document("docs/writing-kernels.md")
    x, dy, gamma = scope["x"], scope["dy"], scope["gamma"]
    xr = x.clone().requires_grad_(True)
    g = gamma.clone().requires_grad_(True)
    b = torch.zeros_like(gamma, requires_grad=True)
    torch.nn.functional.layer_norm(xr, (x.shape[1],), g, b, eps=1e-5).backward(dy)
    torch.testing.assert_close(scope["dx"], xr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(scope["dgamma"], g.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(scope["dbeta"], b.grad, rtol=1e-4, atol=1e-4)
    # as the section says: hardware float atomics, in their no-return form (no sc0)
    adds = [l for l in compile_ir(scope["kern"]).asm.splitlines() if "global_atomic_add_f32" in l]
    assert len(adds) == 2 and not any("sc0" in l for l in adds)


# ---- links: the chapters moved out of the README; nothing may point at where they were ----

LINK = re.compile(r"\]\(([^)\s]+)\)")
DOC_MENTION = re.compile(r"\b(docs/[\w.-]+\.md)\b")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file."""
    out = set()
    for _, line in _prose_lines(path):
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def _prose_lines(path: Path):
    fence = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fence = not fence
        elif not fence:
            yield n, line


@pytest.mark.parametrize("name", documents() + ["ALGORITHM.md", "examples/README.md"])
def test_every_relative_link_resolves(name):
    path, bad = ROOT / name, []
    for n, line in _prose_lines(path):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                bad.append(f"{name}:{n}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{name}:{n}: {target} (no such heading)")
    assert not bad, "\n".join(bad)


def test_every_docs_page_mentioned_anywhere_exists():
    files = [ROOT / "README.md", ROOT / "ALGORITHM.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("rocke", "examples", "benchmarks", "tools", "tests", "scripts"):
        files += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md", ".sh"))
    bad = [f"{p.relative_to(ROOT)}:{n}: {m}"
           for p in files for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
           for m in DOC_MENTION.findall(line) if not (ROOT / m).is_file()]
    assert not bad, "\n".join(bad)


def test_the_readme_lists_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    listed = set(re.findall(r"\]\((docs/[\w.-]+\.md)\)", readme.split("## Where to read next", 1)[1]))
    assert listed == {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}


# ---- the lever tables ----

def test_the_options_table_lists_every_rocke_lever():
    """docs/environment.md's table has one row per rocke.env.LEVERS entry, and no other."""
    text = (ROOT / "docs/environment.md").read_text()
    rows = set(re.findall(r"^\| `(ROCKE_\w+)` \|", text, re.M))
    assert rows == set(env.LEVERS), (sorted(set(env.LEVERS) - rows), sorted(rows - set(env.LEVERS)))


def test_the_attention_page_names_every_hipdnn_lever():
    text = (ROOT / "docs/attention.md").read_text()
    levers = text.split("## Levers", 1)[1]
    missing = [name for name in knobs.LEVERS if f"`{name}`" not in levers]
    assert not missing, missing


def test_worked_examples_section_matches_torch():
    """docs/writing-kernels.md §10 (issue 40, item 7): the GEMM, int8 GEMM, fp8 GEMM and MoE
    examples' results, checked again here against torch, and the hand-built fragment's branch taken."""
    scope = run_document("docs/writing-kernels.md")
    torch.testing.assert_close(scope["gc"].float(), scope["ga"].float() @ scope["gb"].float(),
                               rtol=2e-3, atol=2e-3)
    exact = (scope["qa"].long() @ scope["qb"].long()).double()
    scaled = exact * scope["row_s"].double()[:, None] * scope["col_s"].double()[None, :]
    torch.testing.assert_close(scope["qc"].double(), scaled, rtol=2 ** -7, atol=0)
    w, e = scope["router_w"].double(), scope["router_e"]
    dense = torch.zeros(24, 8, dtype=torch.float64)
    dense.scatter_(1, e, w)                    # the router as a dense [tokens, experts] matrix
    ref = torch.einsum("te,tk,ekn->tn", dense, scope["tokens"].double(), scope["experts_w"].double())
    torch.testing.assert_close(scope["moe_out"].double(), ref, rtol=2 ** -6, atol=2e-2)
    assert scope["demo_flag"] == 1 and scope["demo_out"].max() <= 1.0
    f8 = scope["f8a"].double() @ scope["f8b"].double() * 0.125      # fp8 codes, exact products
    torch.testing.assert_close(scope["f8c"].double(), f8, rtol=1e-6, atol=1e-3)
