"""tools/vllm_contract.py: vLLM's `unified_attention` contract read with `ast` from a wheel or a
source tree, rocke.vllm equal to vLLM 0.33's snapshot, and `--check` naming each change."""
from __future__ import annotations

import copy
import inspect
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT_PATH = ROOT / "tests" / "fixtures" / "vllm_contract_0.33.json"
SNAPSHOT = json.loads(SNAPSHOT_PATH.read_text())


def _tool():
    return load_script("tools/vllm_contract.py")


def test_rocke_vllm_equals_the_vllm_033_snapshot():
    from rocke.vllm import KVQuantMode, unified_attention
    params = list(inspect.signature(unified_attention).parameters.values())
    names = [p["name"] for p in SNAPSHOT["unified_attention"]["parameters"]]
    assert [p.name for p in params] == names
    assert len(params) == 35
    assert {n: int(m) for n, m in KVQuantMode.__members__.items()} == \
        SNAPSHOT["KVQuantMode"]["members"]
    assert _tool().differences(SNAPSHOT, _tool().rocke_contract()) == []     # defaults, kinds too


ATTENTION = '''
import torch
from vllm.v1.kv_cache_interface import KVQuantMode

def helper(x, y=3):
    return x

def unified_attention(q, k, out, causal, scale=None, flag: bool = False,
                      mode: KVQuantMode = KVQuantMode.NONE, lookback=-1, *, extra=(1, 2),
                      **rest):
    def unified_attention(inner):      # nested: not the contract
        pass
'''
MODES = '''
from enum import IntEnum

class KVQuantMode(IntEnum):
    """doc"""
    NONE = 0
    FP8 = 1  # comment
    PACKED: int = 2
    ALIAS = 1
    _private = 9

    @property
    def is_fp8(self) -> bool:
        return self == KVQuantMode.FP8
'''
EXPECTED_PARAMS = [
    {"name": "q", "kind": "positional_or_keyword", "default": None},
    {"name": "k", "kind": "positional_or_keyword", "default": None},
    {"name": "out", "kind": "positional_or_keyword", "default": None},
    {"name": "causal", "kind": "positional_or_keyword", "default": None},
    {"name": "scale", "kind": "positional_or_keyword", "default": "None"},
    {"name": "flag", "kind": "positional_or_keyword", "default": "False"},
    {"name": "mode", "kind": "positional_or_keyword", "default": "KVQuantMode.NONE"},
    {"name": "lookback", "kind": "positional_or_keyword", "default": "-1"},
    {"name": "extra", "kind": "keyword_only", "default": "(1, 2)"},
    {"name": "rest", "kind": "var_keyword", "default": None},
]
EXPECTED_MODES = {"NONE": 0, "FP8": 1, "PACKED": 2, "ALIAS": 1}


def _tree(root: Path, mode_file="vllm/v1/kv_cache_interface.py") -> Path:
    files = {"vllm/__init__.py": "import this_would_fail_if_imported\n",
             "vllm/_version.py": "__version__ = version = '9.1.0'\n",
             "vllm/v1/attention/ops/triton_unified_attention.py": ATTENTION,
             mode_file: MODES}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def test_the_extractor_reads_a_synthetic_source_tree_and_wheel(tmp_path):
    tool = _tool()
    root = _tree(tmp_path / "src")
    got = tool.extract(root)
    assert got["vllm_version"] == "9.1.0"
    assert got["unified_attention"] == {
        "file": "vllm/v1/attention/ops/triton_unified_attention.py", "parameters": EXPECTED_PARAMS}
    assert got["KVQuantMode"] == {"file": "vllm/v1/kv_cache_interface.py",
                                  "members": EXPECTED_MODES}
    assert tool.extract(root / "vllm") == got               # the package directory itself
    wheel = tmp_path / "vllm-9.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for p in sorted((root / "vllm").rglob("*.py")):
            z.write(p, p.relative_to(root).as_posix())
    assert tool.extract(wheel) == got
    written = tmp_path / "contract.json"                     # a written contract reads back
    assert tool.main([str(wheel), "-o", str(written)]) == 0
    assert tool.extract(written) == got


def test_a_moved_enum_is_found(tmp_path):
    got = _tool().extract(_tree(tmp_path, mode_file="vllm/config/cache_modes.py"))
    assert got["KVQuantMode"] == {"file": "vllm/config/cache_modes.py", "members": EXPECTED_MODES}


def test_check_names_every_change(tmp_path, capsys):
    tool = _tool()
    assert tool.main([str(SNAPSHOT_PATH), "--check"]) == 0
    assert "rocke.vllm matches vLLM 0.33.0's contract" in capsys.readouterr().out
    moved = copy.deepcopy(SNAPSHOT)
    moved["vllm_version"] = "0.34.0"
    params = moved["unified_attention"]["parameters"]
    params.insert(10, {"name": "new_flag", "kind": "positional_or_keyword", "default": "False"})
    next(p for p in params if p["name"] == "chunk_lookback")["default"] = "0"
    params[:] = [p for p in params if p["name"] != "use_td"]
    moved["KVQuantMode"]["members"]["NEW_MODE"] = 15
    moved["KVQuantMode"]["members"]["NVFP4"] = 16
    path = tmp_path / "moved.json"
    path.write_text(json.dumps(moved))
    assert tool.main([str(path), "--check"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "unified_attention: vLLM has parameter 11 'new_flag' (default False), rocke has not",
        "unified_attention: rocke has parameter 34 'use_td', vLLM has not",
        "unified_attention: chunk_lookback's default: vLLM 0, rocke -1",
        "KVQuantMode.NVFP4: vLLM 16, rocke 5",
        "KVQuantMode: vLLM has NEW_MODE = 15, rocke has not",
        "rocke.vllm differs from vLLM 0.34.0's contract in 5 place(s)",
    ]


def test_check_names_a_reordering(tmp_path, capsys):
    swapped = copy.deepcopy(SNAPSHOT)
    params = swapped["unified_attention"]["parameters"]
    params[26], params[27] = params[27], params[26]
    path = tmp_path / "swapped.json"
    path.write_text(json.dumps(swapped))
    assert _tool().main([str(path), "--check"]) == 1
    assert "unified_attention: order differs" in capsys.readouterr().out


def test_the_documented_command_runs(tmp_path):
    """`python tools/vllm_contract.py PATH --check`, as the module docstring says, as a script."""
    assert "python tools/vllm_contract.py PATH --check" in _tool().__doc__
    done = subprocess.run([sys.executable, "tools/vllm_contract.py", str(SNAPSHOT_PATH), "--check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = subprocess.run([sys.executable, "tools/vllm_contract.py", str(tmp_path), "--check"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "no vllm/ package" in bad.stderr
