"""Structured values for control flow: flatten a carry (Values, DSL objects, and dicts /
dataclasses / lists / tuples of them, nested) to its runtime Values and rebuild it.

A DSL object takes part by implementing the carry protocol (``Fragment`` and ``AxisVector`` do):

- ``carry_flatten(self) -> (values, layout)``: its runtime Values and a ``CarryLayout``;
- ``CarryLayout.rebuild(values)``: the same kind of object holding ``values``;
- ``CarryLayout.same_as(other)``: whether another object's layout is interchangeable (a
  yield must match what was carried); ``CarryLayout.describe()`` names it in errors.

So ``control`` never needs to know any tile type. ``None`` leaves are static (carry nothing).
"""

from __future__ import annotations

import dataclasses

from .values import Value


class CarryLayout:
    """How one DSL object travels through a loop or branch (see the module docstring)."""

    def rebuild(self, values: list):
        """The object holding ``values`` (as many as ``carry_flatten`` returned)."""
        raise NotImplementedError

    def same_as(self, other: "CarryLayout") -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


class _Spec:
    """The shape of a flattened tree: ``kind`` plus what is needed to rebuild and compare it."""

    __slots__ = ("kind", "data", "children")

    def __init__(self, kind, data=None, children=()):
        self.kind = kind            # "value" | "object" | "none" | "seq" | "dict" | "dataclass"
        self.data = data
        self.children = tuple(children)

    def describe(self) -> str:
        if self.kind == "value":
            return "a Value"
        if self.kind == "object":
            return self.data[0].describe()
        if self.kind == "none":
            return "None"
        if self.kind == "dict":
            return f"a dict with keys {list(self.data)}"
        if self.kind == "dataclass":
            return f"a {self.data[0].__name__}"
        return f"a {self.data.__name__} of {len(self.children)}"


def is_iterable_items(x) -> bool:
    """Whether ``x`` is a plain iterable of items (a generator, map, ...) rather than a leaf or
    a structure: Values iterate over their lanes and dicts over keys, so they are excluded."""
    if isinstance(x, (Value, dict, list, tuple, str)) or x is None or _is_carry_object(x):
        return False
    if dataclasses.is_dataclass(x):
        return False
    return hasattr(x, "__iter__")


def _is_carry_object(x) -> bool:
    return callable(getattr(type(x), "carry_flatten", None))


def flatten(tree) -> tuple[list, _Spec]:
    """(leaves, spec): the runtime Values of ``tree`` in order, and its structure. Leaves that
    are not Values (numbers) are kept so that callers can report them."""
    if isinstance(tree, Value):
        return [tree], _Spec("value")
    if tree is None:
        return [], _Spec("none")
    if _is_carry_object(tree):
        values, layout = tree.carry_flatten()
        return list(values), _Spec("object", (layout, len(values)))
    if isinstance(tree, dict):
        leaves, children = [], []
        for key in tree:
            sub, spec = flatten(tree[key])
            leaves += sub
            children.append(spec)
        return leaves, _Spec("dict", tuple(tree), children)
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        names = tuple(f.name for f in dataclasses.fields(tree) if f.init)
        leaves, children = [], []
        for name in names:
            sub, spec = flatten(getattr(tree, name))
            leaves += sub
            children.append(spec)
        return leaves, _Spec("dataclass", (type(tree), names, tree), children)
    if isinstance(tree, (list, tuple)):
        leaves, children = [], []
        for item in tree:
            sub, spec = flatten(item)
            leaves += sub
            children.append(spec)
        return leaves, _Spec("seq", type(tree), children)
    # a Python number (or anything else) stands for one value; the caller coerces or rejects it
    return [tree], _Spec("value")


def _path(path: str, step: str) -> str:
    return f"{path}{step}"


def match(spec: _Spec, tree, path: str) -> list:
    """The leaves of ``tree`` flattened along ``spec``; raises ValueError naming ``path`` where
    the structure (or a DSL object's layout) differs."""
    from .errors import dsl_value_error

    def mismatch(got: str):
        return dsl_value_error(f"{path} is {got} but the carried item is {spec.describe()}")

    if spec.kind == "value":
        if isinstance(tree, (dict, list, tuple)) or tree is None or _is_carry_object(tree) or (
                dataclasses.is_dataclass(tree) and not isinstance(tree, type)):
            raise mismatch(_describe(tree))
        return [tree]
    if spec.kind == "none":
        if tree is not None:
            raise mismatch(_describe(tree))
        return []
    if spec.kind == "object":
        if not _is_carry_object(tree):
            raise mismatch(_describe(tree))
        values, layout = tree.carry_flatten()
        if not spec.data[0].same_as(layout) or len(values) != spec.data[1]:
            raise mismatch(layout.describe())
        return list(values)
    if spec.kind == "dict":
        if not isinstance(tree, dict) or tuple(tree) != spec.data:
            raise mismatch(_describe(tree))
        return [leaf for key, child in zip(spec.data, spec.children)
                for leaf in match(child, tree[key], _path(path, f"[{key!r}]"))]
    if spec.kind == "dataclass":
        cls, names, _ = spec.data
        if type(tree) is not cls:
            raise mismatch(_describe(tree))
        return [leaf for name, child in zip(names, spec.children)
                for leaf in match(child, getattr(tree, name), _path(path, f".{name}"))]
    if not isinstance(tree, (list, tuple)) or len(tree) != len(spec.children):
        raise mismatch(_describe(tree))
    return [leaf for i, (child, item) in enumerate(zip(spec.children, tree))
            for leaf in match(child, item, _path(path, f"[{i}]"))]


def _describe(x) -> str:
    if isinstance(x, Value):
        return "a Value"
    if _is_carry_object(x):
        return x.carry_flatten()[1].describe()
    if x is None:
        return "None"
    if isinstance(x, dict):
        return f"a dict with keys {list(x)}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of {len(x)}"
    return type(x).__name__


def unflatten(spec: _Spec, values):
    """Rebuild the structure of ``spec`` from an iterator of Values."""
    if spec.kind == "value":
        return next(values)
    if spec.kind == "none":
        return None
    if spec.kind == "object":
        layout, count = spec.data
        return layout.rebuild([next(values) for _ in range(count)])
    if spec.kind == "dict":
        return {key: unflatten(child, values) for key, child in zip(spec.data, spec.children)}
    if spec.kind == "dataclass":
        cls, names, template = spec.data
        return dataclasses.replace(template, **{n: unflatten(c, values) for n, c in zip(names, spec.children)})
    items = [unflatten(child, values) for child in spec.children]
    seq_type = spec.data
    if seq_type in (list, tuple):
        return seq_type(items)
    return seq_type(*items)            # a namedtuple
