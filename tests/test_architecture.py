"""The layering rules of docs/architecture.md, checked on the sources: no module imports another
module's private names, kernels/common names no target, and rocke's imports form no cycle."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROCKE = ROOT / "rocke"
EXAMPLES = ROOT / "examples"
SCRIPTS = (ROOT / "benchmarks", ROOT / "tools")      # use rocke as a user would


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROCKE.rglob("*.py")}
LOCAL_EXAMPLES = {p.stem for p in EXAMPLES.glob("*.py")}


def _imported_module(current: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = current.split(".") if path.name == "__init__.py" else current.split(".")[:-1]
    base = ".".join(package[:len(package) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _is_project(module: str) -> bool:
    return module.split(".")[0] == "rocke" or module.split(".")[0] in LOCAL_EXAMPLES


def _imports(path: Path, *, top_level_only: bool):
    """(node, imported module, names) of every import of ``path`` (function-level included
    unless ``top_level_only``)."""
    current = _module_name(path) if path.is_relative_to(ROOT) else path.stem
    tree = ast.parse(path.read_text())
    for node in (tree.body if top_level_only else ast.walk(tree)):
        if isinstance(node, ast.ImportFrom):
            yield node, _imported_module(current, path, node), [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, []


def _private_uses(path: Path, root: Path = ROOT) -> list[str]:
    """``from project.module import _name`` and ``module_alias._name`` for project modules."""
    out, aliases = [], set()
    for node, module, names in _imports(path, top_level_only=False):
        if not _is_project(module):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                out.append(f"{path.relative_to(root)}:{node.lineno}: imports {module}.{alias.name}")
            aliases.add(alias.asname or alias.name.split(".")[-1] if isinstance(node, ast.ImportFrom)
                        else alias.asname or alias.name.split(".")[0])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            out.append(f"{path.relative_to(root)}:{node.lineno}: uses {node.value.id}.{node.attr}")
    return out


def test_no_module_uses_another_modules_private_names():
    files = sorted(ROCKE.rglob("*.py")) + sorted(EXAMPLES.rglob("*.py"))
    files += [p for folder in SCRIPTS for p in sorted(folder.rglob("*.py"))]
    assert any(p.is_relative_to(ROOT / "benchmarks") for p in files) and \
        any(p.is_relative_to(ROOT / "tools") for p in files)
    offenders = [hit for p in files for hit in _private_uses(p)]
    assert not offenders, "\n".join(offenders)


def test_the_private_name_scan_sees_both_forms(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from rocke.dsl.fragment import _hidden\nimport rocke.kernels as kk\n"
                      "from rocke.kernels.gfx942 import attention_tiled_2d as a2\n"
                      "def f():\n    return a2._secret, kk._other\nimport os\nos._exit\n")
    hits = _private_uses(sample, root=tmp_path)
    assert [h.split(": ", 1)[1] for h in hits] == [
        "imports rocke.dsl.fragment._hidden", "uses a2._secret", "uses kk._other"], hits


def _dependencies(module: str, *, top_level_only: bool) -> set[str]:
    out = set()
    for _, imported, names in _imports(MODULES[module], top_level_only=top_level_only):
        if not imported.startswith("rocke"):
            continue
        for name in names or [""]:
            sub = f"{imported}.{name}" if name else imported
            out.add(sub if sub in MODULES else imported)
    return {d for d in out if d in MODULES and d != module}


def _cycles(top_level_only: bool) -> list[tuple[str, ...]]:
    graph = {m: _dependencies(m, top_level_only=top_level_only) for m in MODULES}
    state, found = {}, []

    def visit(m, stack):
        if state.get(m) == "done":
            return
        if state.get(m) == "open":
            found.append(tuple(stack[stack.index(m):] + [m]))
            return
        state[m] = "open"
        for dep in sorted(graph[m]):
            visit(dep, stack + [m])
        state[m] = "done"

    for m in sorted(graph):
        visit(m, [])
    return found


def test_no_import_cycle_at_module_load_anywhere_in_rocke():
    assert _cycles(top_level_only=True) == []


# Cycles closed only through imports inside functions (resolved at call time), left to their
# packages' owners: the runtime's device factory and its backends.


def test_no_import_cycle_through_function_level_imports_either():
    cycles = set(_cycles(top_level_only=False))
    assert not cycles, "\n".join(" -> ".join(c) for c in sorted(cycles))


@pytest.mark.parametrize("package", ["rocke.kernels", "rocke.dsl", "rocke.arch", "rocke.emu"])
def test_these_packages_have_no_cycle_at_all(package):
    inside = [c for c in _cycles(top_level_only=False) if c[0].startswith(package + ".")]
    assert not inside, "\n".join(" -> ".join(c) for c in inside)


TARGET_NEUTRAL = ("rocke.kernels.common",)


def test_kernels_common_imports_no_target_module():
    """kernels/common is target-free: no module of it imports rocke.kernels.<target> (function-
    level imports included); a target's dispatcher is found by name at run time."""
    offenders = []
    for module in MODULES:
        if not module.startswith(TARGET_NEUTRAL[0] + "."):
            continue
        for dep in _dependencies(module, top_level_only=False):
            parts = dep.split(".")
            if parts[:2] == ["rocke", "kernels"] and len(parts) > 2 and \
                    parts[2] not in ("common", "registry", "golden"):
                offenders.append(f"{module} imports {dep}")
    assert not offenders, "\n".join(offenders)


def test_importing_the_entry_point_loads_no_target_module():
    import subprocess
    import sys
    code = ("import sys, rocke.kernels.common.attention_unified, rocke.kernels.common.knobs; "
            "print([m for m in sys.modules if m.startswith('rocke.kernels.gfx942')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
