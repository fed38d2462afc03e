"""The README's Python example runs as written and computes what it says."""
import re
from pathlib import Path

import torch


def test_readme_example_runs_and_scales():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"## Writing and running a kernel\s+```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    assert torch.equal(scope["x"], 2.0 * torch.arange(1000, dtype=torch.float32))
    assert scope["report"].waves == 16
