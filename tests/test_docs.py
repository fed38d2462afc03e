"""docs/writing-kernels.md §8 (atomics and a workgroup reduction) runs as written and computes
LayerNorm's backward pass like torch autograd."""
import re
from pathlib import Path

import torch

from rocke.compiler import compile_ir


def _section_code(title: str) -> str:
    text = (Path(__file__).resolve().parents[1] / "docs" / "writing-kernels.md").read_text()
    section = text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_layernorm_backward_section_runs_and_matches_autograd():
    scope: dict = {}
    code = _section_code("8. Atomics and workgroup reductions: a LayerNorm backward")
    exec(compile(code, "writing-kernels.md", "exec"), scope)
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
