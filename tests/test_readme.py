"""The README keeps what a newcomer needs: what rocke is, the two commands (CI and people run
them as written), one example that runs as written and computes what it says, and where to read
next. The chapters it used to hold live in docs/ (tests/test_docs.py runs their examples)."""
import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_example_runs_and_scales():
    block = re.search(r"## A first kernel\n.*?```python\n(.*?)```", README, re.S).group(1)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    assert torch.equal(scope["x"], 2.0 * torch.arange(1000, dtype=torch.float32))
    assert scope["report"].waves == 16


def test_the_two_commands_are_as_ci_runs_them():
    section = README.split("## The two commands\n", 1)[1].split("\n## ", 1)[0]
    commands = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    assert [line.split("#")[0].strip() for line in commands.splitlines()] == [
        "bash scripts/main.sh", "bash scripts/test.sh"]
    assert all((ROOT / script).is_file() for script in ("scripts/main.sh", "scripts/test.sh"))


def test_the_readme_stays_short_and_has_one_example():
    assert README.count("\n") <= 130
    assert README.count("```python") == 1
    assert [h for h in re.findall(r"^## (.+)$", README, re.M)] == [
        "The two commands", "A first kernel", "With vLLM", "On a Ray cluster", "Where to read next"]
