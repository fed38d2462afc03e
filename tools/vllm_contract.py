"""vLLM's `unified_attention` contract, read from a vLLM wheel or source tree, and rocke's match.

When vLLM moves again, one command says what changed:

    python tools/vllm_contract.py PATH --check

PATH is a vLLM wheel (``vllm-*.whl``), an unpacked wheel or source checkout (the directory
holding ``vllm/``, or ``vllm/`` itself), or a contract JSON this tool wrote. ``--check`` compares
that contract with ``rocke.vllm``'s (``inspect.signature(rocke.vllm.unified_attention)`` and
``rocke.vllm.KVQuantMode``), prints each difference and exits 1 on any; 0 and one line when
they match. Without ``--check`` the contract is printed as JSON (``-o FILE`` writes it there);
tests/fixtures/vllm_contract_0.33.json is vLLM 0.33.0's, written by

    python tools/vllm_contract.py vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl \\
        -o tests/fixtures/vllm_contract_0.33.json

The contract is read with Python's ``ast``; vLLM is never imported (nor needs to be
installable here). What is read:

* ``unified_attention`` of ``vllm/v1/attention/ops/triton_unified_attention.py``: every
  parameter's name, in order, its kind, and its default as source text (``ast.unparse``);
* ``class KVQuantMode`` (``vllm/v1/kv_cache_interface.py`` in vLLM 0.33): every member, name ->
  value, aliases included (``CUSTOM = 12``).

If a file has moved, every ``.py`` file of the package is searched for the definition (the
``unified_attention`` in a file named ``triton_unified_attention.py`` first).
"""
from __future__ import annotations

import argparse
import ast
import enum
import inspect
import json
import pathlib
import re
import sys
import zipfile

ATTENTION_FILE = "vllm/v1/attention/ops/triton_unified_attention.py"
MODE_FILE = "vllm/v1/kv_cache_interface.py"
FUNCTION = "unified_attention"
ENUM = "KVQuantMode"

_KINDS = {"posonlyargs": "positional_only", "args": "positional_or_keyword",
          "kwonlyargs": "keyword_only"}


class ContractError(Exception):
    """The source holds no readable contract (a definition missing or not literal)."""


# ---- the sources: a wheel, a directory, by package-relative path -------------------------------

class _Sources:
    """The ``vllm/...`` .py files of a wheel or a directory, by their path under the package's
    parent (``vllm/v1/...``)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        if path.is_file() and zipfile.is_zipfile(path):
            self._zip = zipfile.ZipFile(path)
            self._files = {n: n for n in self._zip.namelist()
                           if n.startswith("vllm/") and n.endswith(".py")}
        elif path.is_dir():
            self._zip = None
            root = path if (path / "vllm").is_dir() else path.parent
            if not (root / "vllm").is_dir():
                raise ContractError(f"{path}: no vllm/ package in it (nor is it vllm/)")
            self._files = {p.relative_to(root).as_posix(): p
                           for p in sorted((root / "vllm").rglob("*.py"))}
        else:
            raise ContractError(f"{path}: not a wheel, a directory or a contract JSON")

    def read(self, name: str) -> str:
        where = self._files[name]
        if self._zip is not None:
            return self._zip.read(where).decode("utf-8")
        return where.read_text(encoding="utf-8")

    def names(self):
        return self._files.keys()

    def find(self, usual: str, needle: str, prefer=lambda name: True):
        """(name, parsed module) of ``usual`` if it holds ``needle``, else of the first file
        that does (those ``prefer`` picks first)."""
        order = ([usual] if usual in self._files else []) + \
            sorted((n for n in self.names() if n != usual), key=lambda n: not prefer(n))
        for name in order:
            text = self.read(name)
            if needle in text:
                return name, ast.parse(text, filename=name)
        raise ContractError(f"{self.path}: no file holds {needle!r}")

    def version(self) -> str | None:
        for name in self.names():
            if name.endswith("_version.py") and name.count("/") == 1:
                match = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""",
                                  self.read(name))
                if match:
                    return match.group(1)
        if self._zip is not None:
            for name in self._zip.namelist():
                if name.endswith(".dist-info/METADATA"):
                    match = re.search(r"^Version: (\S+)$",
                                      self._zip.read(name).decode("utf-8", "replace"), re.M)
                    if match:
                        return match.group(1)
        return None


# ---- extraction -------------------------------------------------------------------------------

def _signature(fn: ast.FunctionDef) -> list[dict]:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = []
    for field, group in (("posonlyargs", a.posonlyargs), ("args", a.args)):
        for arg in group:
            default = defaults[positional.index(arg)]
            params.append(dict(name=arg.arg, kind=_KINDS[field],
                               default=None if default is None else ast.unparse(default)))
    if a.vararg is not None:
        params.append(dict(name=a.vararg.arg, kind="var_positional", default=None))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(dict(name=arg.arg, kind="keyword_only",
                           default=None if default is None else ast.unparse(default)))
    if a.kwarg is not None:
        params.append(dict(name=a.kwarg.arg, kind="var_keyword", default=None))
    return params


def _members(cls: ast.ClassDef) -> dict:
    members = {}
    for node in cls.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id.startswith("_"):
            continue
        try:
            members[target.id] = ast.literal_eval(value)
        except ValueError:
            raise ContractError(f"{ENUM}.{target.id}: value {ast.unparse(value)!r} is not a "
                                f"literal") from None
    return members


def _top_level(tree: ast.Module, kind, name: str):
    for node in tree.body:
        if isinstance(node, kind) and node.name == name:
            return node
    return None


def extract(path) -> dict:
    """The contract of the vLLM at ``path`` (see the module's docstring), as a JSON-able dict."""
    path = pathlib.Path(path)
    if path.is_file() and path.suffix == ".json":
        return json.loads(path.read_text())
    sources = _Sources(path)
    fn_file, tree = sources.find(
        ATTENTION_FILE, f"def {FUNCTION}(",
        prefer=lambda n: n.endswith("/" + ATTENTION_FILE.rsplit("/", 1)[1]))
    fn = _top_level(tree, (ast.FunctionDef, ast.AsyncFunctionDef), FUNCTION)
    if fn is None:
        raise ContractError(f"{fn_file}: no top-level def {FUNCTION}")
    enum_file, tree = sources.find(MODE_FILE, f"class {ENUM}(")
    cls = _top_level(tree, ast.ClassDef, ENUM)
    if cls is None:
        raise ContractError(f"{enum_file}: no top-level class {ENUM}")
    return {"vllm_version": sources.version(),
            FUNCTION: {"file": fn_file, "parameters": _signature(fn)},
            ENUM: {"file": enum_file, "members": _members(cls)}}


# ---- rocke's side and the comparison ----------------------------------------------------------

def _default_text(value) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def rocke_contract() -> dict:
    """rocke.vllm's contract in extract()'s form (the parameters' defaults as source text)."""
    checkout = str(pathlib.Path(__file__).resolve().parents[1])     # this checkout's rocke
    if checkout not in sys.path:
        sys.path.insert(0, checkout)
    from rocke import vllm
    params = [dict(name=p.name, kind=p.kind.name.lower(),
                   default=None if p.default is p.empty else _default_text(p.default))
              for p in inspect.signature(vllm.unified_attention).parameters.values()]
    return {FUNCTION: {"parameters": params},
            ENUM: {"members": {name: int(m) for name, m in vllm.KVQuantMode.__members__.items()}}}


def differences(vllm_side: dict, rocke_side: dict) -> list[str]:
    """What rocke must change to match ``vllm_side``: one line each, empty when they match."""
    out = []
    theirs = vllm_side[FUNCTION]["parameters"]
    ours = rocke_side[FUNCTION]["parameters"]
    t_names, o_names = [p["name"] for p in theirs], [p["name"] for p in ours]
    for i, p in enumerate(theirs):
        if p["name"] not in o_names:
            out.append(f"{FUNCTION}: vLLM has parameter {i + 1} {p['name']!r} "
                       f"(default {p['default']}), rocke has not")
    for i, p in enumerate(ours):
        if p["name"] not in t_names:
            out.append(f"{FUNCTION}: rocke has parameter {i + 1} {p['name']!r}, vLLM has not")
    common_t = [n for n in t_names if n in o_names]
    common_o = [n for n in o_names if n in t_names]
    if common_t != common_o:
        out.append(f"{FUNCTION}: order differs: vLLM {', '.join(common_t)}; "
                   f"rocke {', '.join(common_o)}")
    if t_names != o_names and not out:
        out.append(f"{FUNCTION}: parameters differ: vLLM {t_names}; rocke {o_names}")
    by_name = {p["name"]: p for p in ours}
    for p in theirs:
        mine = by_name.get(p["name"])
        if mine is None:
            continue
        if mine["default"] != p["default"]:
            out.append(f"{FUNCTION}: {p['name']}'s default: vLLM {p['default']}, "
                       f"rocke {mine['default']}")
        if mine["kind"] != p["kind"]:
            out.append(f"{FUNCTION}: {p['name']}'s kind: vLLM {p['kind']}, rocke {mine['kind']}")
    theirs, ours = vllm_side[ENUM]["members"], rocke_side[ENUM]["members"]
    for name, value in theirs.items():
        if name not in ours:
            out.append(f"{ENUM}: vLLM has {name} = {value}, rocke has not")
        elif ours[name] != value:
            out.append(f"{ENUM}.{name}: vLLM {value}, rocke {ours[name]}")
    for name, value in ours.items():
        if name not in theirs:
            out.append(f"{ENUM}: rocke has {name} = {value}, vLLM has not")
    return out


def dumps(contract: dict) -> str:
    """``contract`` as JSON, a parameter or a member to a line (readable diffs of a snapshot)."""
    fn, modes = contract[FUNCTION], contract[ENUM]
    params = ",\n".join(f"   {json.dumps(p)}" for p in fn["parameters"])
    members = ",\n".join(f"   {json.dumps(name)}: {json.dumps(value)}"
                          for name, value in modes["members"].items())
    return (f'{{\n "vllm_version": {json.dumps(contract.get("vllm_version"))},\n'
            f' "{FUNCTION}": {{\n  "file": {json.dumps(fn.get("file"))},\n'
            f'  "parameters": [\n{params}\n  ]\n }},\n'
            f' "{ENUM}": {{\n  "file": {json.dumps(modes.get("file"))},\n'
            f'  "members": {{\n{members}\n  }}\n }}\n}}\n')


def run_cli(argv, *, prog: str, rocke_name: str, extract, dumps, differences, rocke_side,
            matches) -> int:
    """The command line both contract tools share: PATH (a vLLM wheel, tree or contract JSON),
    ``-o`` to write the extracted contract, ``--check`` to compare it with rocke's side (exit 1
    and print every difference). ``matches(contract)`` is the line printed when nothing
    differs."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("path", help="a vLLM wheel, source directory, or contract JSON")
    parser.add_argument("--check", action="store_true",
                        help=f"compare with {rocke_name}; exit 1 and print what differs")
    parser.add_argument("-o", "--output", help="write the contract JSON here")
    args = parser.parse_args(argv)
    try:
        contract = extract(args.path)
    except (ContractError, OSError, SyntaxError, zipfile.BadZipFile) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    if args.output:
        pathlib.Path(args.output).write_text(dumps(contract))
    if not args.check:
        if not args.output:
            print(dumps(contract), end="")
        return 0
    found = differences(contract, rocke_side())
    version = contract.get("vllm_version") or args.path
    for line in found:
        print(line)
    if found:
        print(f"{rocke_name} differs from vLLM {version}'s contract in {len(found)} place(s)")
        return 1
    print(matches(contract, version))
    return 0


def main(argv=None) -> int:
    return run_cli(argv, prog="vllm_contract", rocke_name="rocke.vllm", extract=extract,
                   dumps=dumps, differences=differences, rocke_side=rocke_contract,
                   matches=lambda contract, version: (
                       f"rocke.vllm matches vLLM {version}'s contract: {FUNCTION}'s "
                       f"{len(contract[FUNCTION]['parameters'])} parameters and {ENUM}'s "
                       f"{len(contract[ENUM]['members'])} members"))


if __name__ == "__main__":
    sys.exit(main())
