"""rocke.dsl's modules import each other without cycles (function-level imports included), and
only the emitter and the kernel touch the emitter's private state: every other module uses its
public internal API (builder, ir_of, wrap, coerce, call, scopes, LDS)."""

import ast
import re
from pathlib import Path

import rocke.dsl

DSL = Path(rocke.dsl.__file__).parent
PRIVATE = re.compile(r"\bk{1,2}\.(_b|_use|_wrap|_coerce|_call|_intrinsic|_scope|_builder|_function|"
                     r"_pending_branch|_lds_regions|_lds_arena)\b")


def _dsl_imports(path: Path) -> set[str]:
    """The rocke.dsl modules ``path`` imports, anywhere in the file."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(alias.name for alias in node.names)
    return out


def test_dsl_import_graph_has_no_cycles():
    modules = {p.stem: _dsl_imports(p) for p in DSL.glob("*.py") if p.stem != "__init__"}
    assert "control" in modules["kernel"]          # function-level imports are seen
    state = {}

    def visit(m, stack):
        if state.get(m) == "done":
            return
        if state.get(m) == "open":
            raise AssertionError(f"import cycle: {' -> '.join(stack[stack.index(m):] + [m])}")
        state[m] = "open"
        for dep in sorted(modules.get(m, ())):
            visit(dep, stack + [m])
        state[m] = "done"

    for m in sorted(modules):
        visit(m, [])


def test_only_emitter_and_kernel_use_private_emitter_state():
    offenders = []
    for p in sorted(DSL.glob("*.py")):
        if p.stem in ("emitter", "kernel"):
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if PRIVATE.search(line):
                offenders.append(f"{p.name}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
