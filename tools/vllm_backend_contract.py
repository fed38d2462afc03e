"""vLLM's attention-backend interface, read from a vLLM wheel or source tree, and whether
rocke/vllm_backend.py still fits it.

    python tools/vllm_backend_contract.py PATH --check

PATH is what tools/vllm_contract.py takes (a vLLM wheel, an unpacked wheel or source checkout,
or a JSON this tool wrote). Both sides are read with Python's ``ast``: neither vLLM nor
rocke/vllm_backend.py (which imports vLLM) is imported. What is read, for each class rocke's
backend subclasses and the vLLM classes above it (``CHAINS``): every method defined in the
class body (static, class, property or plain; abstract or not) with its parameters (name, kind,
default as source text), and the names the class body assigns.

``--check`` says, a line each, where rocke/vllm_backend.py no longer fits (exit 1; 0 and one line
when it fits):

* a rocke class not subclassing the vLLM class it should;
* a method rocke defines that none of its vLLM ancestors defines (a misspelled ``supports_*``
  would otherwise be silently ignored by vLLM), or whose kind or parameters differ from the
  nearest vLLM definition;
* a class attribute rocke sets that no vLLM ancestor has;
* an abstract method of vLLM's interface that neither the Triton class nor rocke defines.

tests/fixtures/vllm_backend_contract_0.33.json is vLLM 0.33.0's, written by

    python tools/vllm_backend_contract.py vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl \\
        -o tests/fixtures/vllm_backend_contract_0.33.json
"""
from __future__ import annotations

import ast
import importlib.util
import json
import pathlib
import sys


def _reader():
    """tools/vllm_contract.py, whose wheel/tree reader and signature reader this tool shares."""
    if "vllm_contract" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "vllm_contract", pathlib.Path(__file__).resolve().with_name("vllm_contract.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["vllm_contract"] = module
    return sys.modules["vllm_contract"]


ContractError, _signature, _Sources = (getattr(_reader(), n)
                                       for n in ("ContractError", "_signature", "_Sources"))

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROCKE_FILE = ROOT / "rocke" / "vllm_backend.py"
BACKEND_FILE = "vllm/v1/attention/backend.py"
TRITON_FILE = "vllm/v1/attention/backends/triton_attn.py"

# rocke's class -> the vLLM classes it inherits from, nearest first (the first one is its base)
CHAINS = {
    "RockeAttentionBackend": [("TritonAttentionBackend", TRITON_FILE),
                              ("AttentionBackend", BACKEND_FILE)],
    "RockeAttentionImpl": [("TritonAttentionImpl", TRITON_FILE),
                           ("AttentionImpl", BACKEND_FILE),
                           ("AttentionImplBase", BACKEND_FILE)],
    "RockeAttentionMetadataBuilder": [("TritonAttentionMetadataBuilder", TRITON_FILE),
                                      ("AttentionMetadataBuilder", BACKEND_FILE)],
}
_KIND_DECORATORS = ("staticmethod", "classmethod", "property")


def _decorator_names(fn) -> list[str]:
    names = []
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        names.append(target.attr if isinstance(target, ast.Attribute) else
                     getattr(target, "id", ast.unparse(target)))
    return names


def describe_class(cls: ast.ClassDef, file: str | None = None) -> dict:
    """A class body's bases (source text), methods and assigned names."""
    methods, attributes = {}, []
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = _decorator_names(node)
            kind = next((k for k in _KIND_DECORATORS if k in decorators), "method")
            methods[node.name] = dict(kind=kind, abstract="abstractmethod" in decorators,
                                      parameters=_signature(node))
        elif isinstance(node, ast.Assign):
            attributes += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            attributes.append(node.target.id)
    out = dict(bases=[ast.unparse(b) for b in cls.bases], methods=methods,
               attributes=sorted(set(attributes)))
    return out if file is None else dict(file=file, **out)


def _top_level_classes(tree: ast.Module) -> dict:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def extract(path) -> dict:
    """vLLM's side: every class of CHAINS, from the vLLM at ``path``."""
    path = pathlib.Path(path)
    if path.is_file() and path.suffix == ".json":
        return json.loads(path.read_text())
    sources = _Sources(path)
    classes = {}
    for chain in CHAINS.values():
        for name, usual in chain:
            if name in classes:
                continue
            file, tree = sources.find(usual, f"class {name}(")
            node = _top_level_classes(tree).get(name)
            if node is None:
                raise ContractError(f"{file}: no top-level class {name}")
            classes[name] = describe_class(node, file)
    return {"vllm_version": sources.version(), "classes": classes}


def rocke_side(path=ROCKE_FILE) -> dict:
    """rocke's side: the classes of CHAINS' keys in rocke/vllm_backend.py."""
    found = _top_level_classes(ast.parse(pathlib.Path(path).read_text(), filename=str(path)))
    return {name: describe_class(found[name]) for name in CHAINS if name in found}


def _params(p: list[dict]) -> str:
    return ", ".join(f"{x['name']}={x['default']}" if x["default"] is not None else x["name"]
                     for x in p)


def differences(vllm_side: dict, rocke: dict) -> list[str]:
    """Where rocke's classes do not fit ``vllm_side``: one line each, empty when they fit."""
    out, theirs = [], vllm_side["classes"]
    for mine, chain in CHAINS.items():
        names = [name for name, _ in chain]
        absent = [n for n in names if n not in theirs]
        if absent:
            out.append(f"{mine}: vLLM's side has no class {', '.join(absent)}")
            continue
        if mine not in rocke:
            out.append(f"{mine}: rocke/vllm_backend.py defines no such class")
            continue
        r = rocke[mine]
        if names[0] not in r["bases"]:
            out.append(f"{mine}: subclasses {', '.join(r['bases']) or 'nothing'}, not vLLM's "
                       f"{names[0]}")
        for method, spec in r["methods"].items():
            owner = next((n for n in names if method in theirs[n]["methods"]), None)
            if owner is None:
                out.append(f"{mine}.{method}: no vLLM class it inherits from ({', '.join(names)}) "
                           f"defines {method}, so vLLM never calls it")
                continue
            ref = theirs[owner]["methods"][method]
            if spec["kind"] != ref["kind"]:
                out.append(f"{mine}.{method}: a {spec['kind']}, but {owner}.{method} is a "
                           f"{ref['kind']}")
            strip = lambda ps: [dict(name=p["name"], kind=p["kind"], default=p["default"])
                                for p in ps]
            if strip(spec["parameters"]) != strip(ref["parameters"]):
                out.append(f"{mine}.{method}({_params(spec['parameters'])}) differs from "
                           f"{owner}.{method}({_params(ref['parameters'])})")
        for attribute in r["attributes"]:
            if not any(attribute in theirs[n]["attributes"] for n in names):
                out.append(f"{mine}.{attribute}: no vLLM class it inherits from "
                           f"({', '.join(names)}) has this attribute")
        for i, name in enumerate(names):
            for method, spec in theirs[name]["methods"].items():
                if not spec["abstract"]:
                    continue
                nearer = [n for n in names[:i] if method in theirs[n]["methods"]
                          and not theirs[n]["methods"][method]["abstract"]]
                if not nearer and method not in r["methods"]:
                    out.append(f"{mine}: {name}.{method} is abstract and neither {names[0]} nor "
                               f"rocke defines it")
    return out


def dumps(contract: dict) -> str:
    """``contract`` as JSON, a method to a line (readable diffs of a snapshot)."""
    classes = []
    for name, c in contract["classes"].items():
        methods = ",\n".join(f"    {json.dumps(m)}: {json.dumps(spec)}"
                             for m, spec in c["methods"].items())
        classes.append(f'  {json.dumps(name)}: {{\n   "file": {json.dumps(c.get("file"))},\n'
                       f'   "bases": {json.dumps(c["bases"])},\n'
                       f'   "attributes": {json.dumps(c["attributes"])},\n'
                       f'   "methods": {{\n{methods}\n   }}\n  }}')
    return (f'{{\n "vllm_version": {json.dumps(contract.get("vllm_version"))},\n'
            f' "classes": {{\n' + ",\n".join(classes) + "\n }\n}\n")


def main(argv=None) -> int:
    return _reader().run_cli(
        argv, prog="vllm_backend_contract", rocke_name="rocke/vllm_backend.py", extract=extract,
        dumps=dumps, differences=differences, rocke_side=rocke_side,
        matches=lambda contract, version: (f"rocke/vllm_backend.py fits vLLM {version}'s "
                                           f"backend interface: {', '.join(CHAINS)}"))


if __name__ == "__main__":
    sys.exit(main())
