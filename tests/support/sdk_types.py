"""A strict check of a JSON value against an official SDK's request param type (a ``TypedDict``
of ``openai`` or ``anthropic``), walked from its type hints.

Neither pydantic nor typeguard is enough for this: pydantic validates ``Iterable[...]`` lazily
and lets extra keys through nested ``TypedDict``s, typeguard does not descend into iterables.
Here every key of every object must be a field the SDK declares (under its wire name: the
``PropertyInfo(alias=...)`` of an ``Annotated`` field), every required field must be there,
and every element of every list is checked. A mismatch names its JSON path and what the SDK
expected there; for a union, the branch that came closest.

Only ``typing`` is imported here, so the module also runs with an older SDK first on the path
(``python -m support.sdk_types`` reads the bodies as JSON on standard input and writes the
mismatches of each, and the versions it checked against: see :func:`main`).
"""

from __future__ import annotations

import collections.abc
import functools
import importlib
import json
import os
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any

import typing_extensions

_QUALIFIERS = {
    typing.Required,
    typing.NotRequired,
    typing_extensions.Required,
    typing_extensions.NotRequired,
    typing_extensions.ReadOnly,
}
_LISTS = {list, collections.abc.Iterable, collections.abc.Sequence, collections.abc.Collection}
_MAPPINGS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}
_LITERALS = {typing.Literal, typing_extensions.Literal}
_UNIONS = {typing.Union, types.UnionType}
_ANY = (Any, object, typing_extensions.Any)


@dataclass(frozen=True)
class Mismatch:
    """Where a value differs from its SDK type, and how."""

    path: str
    problem: str
    wrong_kind: bool = False
    """A field whose type is a ``Literal`` (``type``, ``role``) differs: the value is another
    kind of object than this one, not a faulty one of this kind."""
    allowed: tuple[object, ...] = ()
    """The values a ``Literal`` allows, when that is the mismatch."""

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


class SdkTypeError(AssertionError):
    """A value that is not what the SDK's type says, with every mismatch on its own line."""


def check(value: object, param_type: object, what: str = "the body") -> None:
    """Raise :class:`SdkTypeError` unless ``value`` is exactly of ``param_type``."""
    found = mismatches(value, param_type)
    if found:
        lines = "\n".join(f"  {m}" for m in found)
        raise SdkTypeError(f"{what} is not a {describe(param_type)}:\n{lines}")


def mismatches(value: object, param_type: object, path: str = "$") -> list[Mismatch]:
    """Every way ``value`` (parsed JSON) differs from ``param_type``; empty when it matches."""
    tp = _plain(param_type)
    if tp in _ANY:
        return []
    if typing_extensions.is_typeddict(tp):
        return _typed_dict(value, tp, path)
    origin = typing.get_origin(tp)
    if origin in _UNIONS:
        return _union(value, typing.get_args(tp), path)
    if origin in _LITERALS:
        allowed = typing.get_args(tp)
        if any(value == a and type(value) is type(a) for a in allowed):
            return []
        return [
            Mismatch(path, f"expected one of {_choices(allowed)}, got {value!r}", False, allowed)
        ]
    if origin in _LISTS:
        return _list(value, tp, path)
    if origin in _MAPPINGS:
        return _mapping(value, tp, path)
    if isinstance(tp, type) and tp in (str, int, float, bool, type(None)):
        return _scalar(value, tp, path)
    if _python_only(tp):
        return [Mismatch(path, f"{describe(tp)} is a Python object the SDK takes, not JSON")]
    raise TypeError(f"{path}: the validator does not know the type {tp!r}: teach it")


def describe(param_type: object) -> str:
    """A type as a reader names it: ``CompletionCreateParamsNonStreaming``, ``str``,
    ``list of X``, ``'a' | 'b'``."""
    tp = _plain(param_type)
    origin = typing.get_origin(tp)
    if origin in _LITERALS:
        return _choices(typing.get_args(tp))
    if origin in _UNIONS:
        return " | ".join(describe(a) for a in typing.get_args(tp))
    if origin in _LISTS:
        return f"list of {describe(typing.get_args(tp)[0])}"
    if origin in _MAPPINGS:
        return "object"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", repr(tp))


def unknown_types(param_type: object) -> set[str]:
    """The types reachable from ``param_type`` that :func:`mismatches` does not know (empty
    when it can check every value the type describes)."""
    unknown: set[str] = set()
    _walk(param_type, set(), unknown)
    return unknown


def _walk(param_type: object, seen: set[int], unknown: set[str]) -> None:
    tp = _plain(param_type)
    if id(tp) in seen:
        return
    seen.add(id(tp))
    if typing_extensions.is_typeddict(tp):
        for field in typing.get_type_hints(tp, include_extras=True).values():
            _walk(field, seen, unknown)
        return
    origin = typing.get_origin(tp)
    if origin in _UNIONS or origin in _LISTS or origin in _MAPPINGS:
        for arg in typing.get_args(tp):
            _walk(arg, seen, unknown)
    elif origin in _LITERALS or tp in (*_ANY, str, int, float, bool, type(None)):
        return
    elif not _python_only(tp):
        unknown.add(repr(tp))


# -- the kinds of type ------------------------------------------------------------------------


def _typed_dict(value: object, tp: Any, path: str) -> list[Mismatch]:
    if not isinstance(value, dict):
        return [Mismatch(path, f"expected an object ({tp.__name__}), got {_kind(value)}")]
    fields = _fields(tp)
    tags = [
        Mismatch(m.path, m.problem, wrong_kind=True, allowed=m.allowed)
        for wire, (field_type, _) in fields.items()
        if wire in value and typing.get_origin(_plain(field_type)) in _LITERALS
        for m in mismatches(value[wire], field_type, f"{path}.{wire}")
    ]
    if tags:
        return tags
    found = [
        Mismatch(f"{path}.{key}", f"unexpected key: {tp.__name__} has no such field")
        for key in value
        if key not in fields
    ]
    for wire, (field_type, required) in fields.items():
        if wire in value:
            found += mismatches(value[wire], field_type, f"{path}.{wire}")
        elif required:
            found.append(Mismatch(f"{path}.{wire}", f"missing: {tp.__name__} requires it"))
    return found


@functools.cache
def _fields(tp: Any) -> dict[str, tuple[object, bool]]:
    """A ``TypedDict``'s fields by wire name (the alias when there is one): type and whether
    it is required."""
    hints = typing.get_type_hints(tp, include_extras=True)
    return {_alias(name, hint): (hint, _required(tp, name, hint)) for name, hint in hints.items()}


def _required(tp: Any, name: str, hint: object) -> bool:
    """``Required``/``NotRequired`` on the field, else the totality of the class that declares
    it. (``__required_keys__`` alone cannot be trusted: under ``from __future__ import
    annotations``, as the SDKs are written, Python 3.11 sees no qualifier in the strings and
    goes by totality alone.)"""
    for qualified in _qualifiers(hint):
        if qualified in (typing.Required, typing_extensions.Required):
            return True
        if qualified in (typing.NotRequired, typing_extensions.NotRequired):
            return False
    return name in tp.__required_keys__


def _qualifiers(hint: object) -> list[object]:
    found = []
    while typing.get_origin(hint) in _QUALIFIERS or typing.get_origin(hint) is typing.Annotated:
        if typing.get_origin(hint) is typing.Annotated:
            hint = hint.__origin__  # type: ignore[attr-defined]
        else:
            found.append(typing.get_origin(hint))
            hint = typing.get_args(hint)[0]
    return found


def _alias(name: str, hint: object) -> str:
    """The key a field has in JSON: its ``PropertyInfo(alias=...)``, else its own name."""
    while True:
        origin = typing.get_origin(hint)
        if origin in _QUALIFIERS:
            hint = typing.get_args(hint)[0]
        elif origin is typing.Annotated:
            for meta in hint.__metadata__:  # type: ignore[attr-defined]
                alias = getattr(meta, "alias", None)
                if isinstance(alias, str):
                    return alias
            hint = hint.__origin__  # type: ignore[attr-defined]
        else:
            return name


def _union(value: object, branches: tuple[object, ...], path: str) -> list[Mismatch]:
    """A match of any branch; else the mismatches of the closest: a branch of the value's
    kind (its ``type`` or ``role`` matched), then the one whose mismatches go deepest in the
    value (it got furthest), then the one with fewest."""
    tried = []
    for branch in branches:
        found = mismatches(value, branch, path)
        if not found:
            return []
        tried.append((found, branch))
    merged = _merged_literals(tried)
    if merged is not None:
        return [merged]
    found, branch = min(tried, key=_distance)
    if all(m.path == path for m in found):
        expected = _short(" | ".join(describe(b) for b in branches))
        return [Mismatch(path, f"expected {expected}, got {_shown(value)}")]
    if not typing_extensions.is_typeddict(_plain(branch)):
        return found
    closest = f" (closest: {describe(branch)})"
    return [_noted(m, closest) for m in found]


def _noted(mismatch: Mismatch, closest: str) -> Mismatch:
    """A nested union's closest branch is the more precise: it stays."""
    if "(closest: " in mismatch.problem:
        return mismatch
    return Mismatch(mismatch.path, mismatch.problem + closest, mismatch.wrong_kind)


def _merged_literals(tried: list[tuple[list[Mismatch], object]]) -> Mismatch | None:
    """When every branch differs only in one ``Literal`` field at one path (``role``), that
    field's mismatch, with the values all the branches allow."""
    if any(len(found) != 1 or not found[0].allowed for found, _ in tried):
        return None
    paths = {found[0].path for found, _ in tried}
    if len(paths) != 1:
        return None
    allowed = tuple(a for found, _ in tried for a in found[0].allowed)
    got = tried[0][0][0].problem.rsplit(", got ", 1)[-1]
    problem = f"expected one of {_choices(allowed)}, got {got}"
    return Mismatch(paths.pop(), problem, all(f[0].wrong_kind for f, _ in tried), allowed)


def _distance(tried: tuple[list[Mismatch], object]) -> tuple[bool, int, int]:
    found = tried[0]
    other_kind = all(m.wrong_kind for m in found)
    return other_kind, -max(_depth(m.path) for m in found), len(found)


def _list(value: object, tp: object, path: str) -> list[Mismatch]:
    if not isinstance(value, list):
        return [Mismatch(path, f"expected a list ({describe(tp)}), got {_kind(value)}")]
    (item,) = typing.get_args(tp) or (Any,)
    return [m for i, v in enumerate(value) for m in mismatches(v, item, f"{path}[{i}]")]


def _mapping(value: object, tp: object, path: str) -> list[Mismatch]:
    if not isinstance(value, dict):
        return [Mismatch(path, f"expected an object, got {_kind(value)}")]
    key_type, value_type = typing.get_args(tp) or (str, Any)
    found = [m for k in value for m in mismatches(k, key_type, f"{path}.{k}(key)")]
    return found + [m for k, v in value.items() for m in mismatches(v, value_type, f"{path}.{k}")]


def _scalar(value: object, tp: type, path: str) -> list[Mismatch]:
    """JSON's scalars: a bool is no number, an integer is a float."""
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)
    return [] if ok else [Mismatch(path, f"expected {describe(tp)}, got {_shown(value)}")]


# -- helpers ----------------------------------------------------------------------------------


def _plain(tp: object) -> object:
    """``tp`` without what does not constrain a value: ``Required``, ``NotRequired``,
    ``ReadOnly``, ``Annotated`` metadata, a ``TypeAliasType``'s name."""
    while True:
        origin = typing.get_origin(tp)
        if origin in _QUALIFIERS:
            tp = typing.get_args(tp)[0]
        elif origin is typing.Annotated:
            tp = tp.__origin__  # type: ignore[attr-defined]
        elif isinstance(tp, typing_extensions.TypeAliasType):
            tp = tp.__value__
        else:
            return tp


def _python_only(tp: object) -> bool:
    """What a union of the SDK's also takes as a Python object, and no JSON value is: a
    response model (a pydantic class: the SDK serializes it itself), a file, bytes."""
    if typing.get_origin(tp) is typing.IO:
        return True
    return isinstance(tp, type) and (
        hasattr(tp, "model_fields") or issubclass(tp, bytes | os.PathLike)
    )


def _depth(path: str) -> int:
    return path.count(".") + path.count("[")


def _choices(allowed: tuple[object, ...]) -> str:
    return " | ".join(repr(a) for a in allowed)


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), _shown(value))


def _short(text: str) -> str:
    return text if len(text) <= 100 else f"{text[:97]}..."


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


# -- the check in another interpreter, with an older SDK first on the path ----------------------


def type_named(dotted: str) -> object:
    """``openai.types.chat.completion_create_params.CompletionCreateParamsNonStreaming``."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def main() -> None:
    """Reads ``{"cases": [{"name", "type", "body"}], "modules": [...]}``; writes
    ``{"versions", "locations", "imported", "unknown", "mismatches"}``: the SDKs' versions and
    where they were imported from, the modules given that import, the types the validator
    does not know, and each body's mismatches by name."""
    given = json.load(sys.stdin)
    report: dict[str, Any] = {"versions": {}, "locations": {}, "unknown": {}, "mismatches": {}}
    for sdk in ("openai", "anthropic"):
        module = importlib.import_module(sdk)
        report["versions"][sdk] = module.__version__
        report["locations"][sdk] = module.__file__
    report["imported"] = [importlib.import_module(m).__name__ for m in given["modules"]]
    cases = given["cases"]
    for dotted in sorted({case["type"] for case in cases}):
        report["unknown"][dotted] = sorted(unknown_types(type_named(dotted)))
    for case in cases:
        found = mismatches(case["body"], type_named(case["type"]))
        report["mismatches"][case["name"]] = [str(m) for m in found]
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
