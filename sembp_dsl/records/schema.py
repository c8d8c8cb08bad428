"""run.schema.json as Python checks, built once: `sbpc runs` reads every record in a folder, and jsonschema's
general validator takes about 150 µs a sample of an evaluation (3 s for 20,000 samples), where these take 17
(bench/record_check.py).

The schema uses a handful of keywords (`KEYWORDS`); building the checks fails on any other, so the schema cannot
grow a rule that is silently not checked. tests/test_record.py holds these checks to jsonschema's verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

Where = tuple[str | int, ...]  # a place in a JSON value: keys and indexes


class Problem(NamedTuple):
    """The first place a value breaks the schema: where, the keyword it breaks, what that keyword asks, and the
    value found there."""

    path: Where
    keyword: str
    asked: Any
    found: Any


Check = Callable[[Any, Where], Problem | None]

IGNORED = frozenset({"$schema", "$id", "$defs", "title", "description"})  # words for people, or where things are


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # 2.0 is a number, not an integer, as in Python


TYPES: Mapping[str, Callable[[object], bool]] = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "integer": _is_integer,
    "number": lambda value: isinstance(value, float) or _is_integer(value),
}


def _same(a: object, b: object) -> bool:
    """JSON's equality: true is not 1."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def compile_schema(schema: Mapping[str, Any]) -> Check:
    """A function that gives the first Problem of a value against `schema`, or None when it holds."""
    defs: dict[str, Check | None] = dict.fromkeys(schema.get("$defs", {}))  # each built once all are named

    def build(node: Mapping[str, Any]) -> Check:
        checks = [KEYWORDS[key](value, node, build, defs) for key, value in node.items() if key not in IGNORED]

        def check(value: Any, path: Where) -> Problem | None:
            for one in checks:
                if problem := one(value, path):
                    return problem
            return None

        return check

    unknown = _unknown_keywords(schema)
    if unknown:
        raise ValueError(f"run.schema.json uses {', '.join(sorted(unknown))}, which records/schema.py does not check")
    for name, node in schema.get("$defs", {}).items():
        defs[name] = build(node)
    return build(schema)


def _unknown_keywords(node: object, naming: bool = False) -> set[str]:
    """The keywords of `node` and below that neither KEYWORDS nor IGNORED hold (`naming`: node maps names to
    schemas, as properties and $defs do, so its keys are no keywords)."""
    if isinstance(node, list):
        return set().union(*(_unknown_keywords(item) for item in node))
    if not isinstance(node, dict):
        return set()
    own = set() if naming else set(node) - KEYWORDS.keys() - IGNORED
    below = [_unknown_keywords(value, key in ("properties", "$defs") and not naming) for key, value in node.items()]
    return own.union(*below)


# --- one function per keyword: (its value, the schema holding it, build, $defs) -> its check ----------------


def _type(kinds: str | Sequence[str], node: Mapping, build: Any, defs: Mapping) -> Check:
    tests = [TYPES[kind] for kind in ([kinds] if isinstance(kinds, str) else kinds)]
    return lambda value, path: None if any(test(value) for test in tests) else Problem(path, "type", kinds, value)


def _enum(options: Sequence, node: Mapping, build: Any, defs: Mapping) -> Check:
    return lambda value, path: (
        None if any(_same(value, option) for option in options) else Problem(path, "enum", options, value)
    )


def _const(wanted: object, node: Mapping, build: Any, defs: Mapping) -> Check:
    return lambda value, path: None if _same(value, wanted) else Problem(path, "const", wanted, value)


def _required(keys: Sequence[str], node: Mapping, build: Any, defs: Mapping) -> Check:
    def check(value: Any, path: Where) -> Problem | None:
        if isinstance(value, dict):
            for key in keys:
                if key not in value:
                    return Problem(path, "required", key, value)
        return None

    return check


def _properties(schemas: Mapping[str, Mapping], node: Mapping, build: Any, defs: Mapping) -> Check:
    checks = [(key, build(schema)) for key, schema in schemas.items()]

    def check(value: Any, path: Where) -> Problem | None:
        if isinstance(value, dict):
            for key, one in checks:
                if key in value and (problem := one(value[key], (*path, key))):
                    return problem
        return None

    return check


def _additional(schema: bool | Mapping, node: Mapping, build: Any, defs: Mapping) -> Check:
    if schema is True:
        return lambda value, path: None
    named = set(node.get("properties", ()))
    refused: Check = lambda item, where: Problem(where, "additionalProperties", False, item)  # noqa: E731
    one = refused if schema is False else build(schema)

    def check(value: Any, path: Where) -> Problem | None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key not in named and (problem := one(item, (*path, key))):
                    return problem
        return None

    return check


def _items(schema: Mapping, node: Mapping, build: Any, defs: Mapping) -> Check:
    one, start = build(schema), len(node.get("prefixItems", ()))

    def check(value: Any, path: Where) -> Problem | None:
        if isinstance(value, list):
            for index in range(start, len(value)):
                if problem := one(value[index], (*path, index)):
                    return problem
        return None

    return check


def _prefix(schemas: Sequence[Mapping], node: Mapping, build: Any, defs: Mapping) -> Check:
    checks = [build(schema) for schema in schemas]

    def check(value: Any, path: Where) -> Problem | None:
        if isinstance(value, list):
            for index, (item, one) in enumerate(zip(value, checks)):
                if problem := one(item, (*path, index)):
                    return problem
        return None

    return check


def _ref(target: str, node: Mapping, build: Any, defs: Mapping[str, Check | None]) -> Check:
    name = target.removeprefix("#/$defs/")
    if name == target or name not in defs:
        raise ValueError(f"run.schema.json refers to {target}, which is not one of its $defs")

    def check(value: Any, path: Where) -> Problem | None:  # looked up when called: $defs may refer to each other
        one = defs[name]
        assert one is not None
        return one(value, path)

    return check


KEYWORDS: Mapping[str, Callable[..., Check]] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "required": _required,
    "properties": _properties,
    "additionalProperties": _additional,
    "items": _items,
    "prefixItems": _prefix,
    "$ref": _ref,
}
