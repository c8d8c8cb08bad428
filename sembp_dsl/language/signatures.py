"""A tool's JSON Schema, read from its Python source without importing it.

A tool-calling node offers the model its tools: each one's name, description and the JSON Schema of its
arguments. They come from the function's signature (type hints, defaults) and docstring, read with `ast`
from the module's file, so `check`, `compile`, `fmt` and the language server still run no code of the
pipeline's. A signature that has no JSON form (`*args`, `**kwargs`, a parameter only by position, a type
such as `socket`) is a problem to report, never a guess.

    spec = read_tool(source_text, "lookup")   # ToolSpec, or a str saying why there is none
    spec.schema()                              # {"type": "object", "properties": {...}, "required": [...]}
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

#: Python type names and the JSON Schema each becomes.
SCALARS = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "Any": {},
    "object": {},
}
LISTS = ("list", "List", "Sequence", "tuple", "Tuple", "Iterable", "set", "frozenset")
MAPS = ("dict", "Dict", "Mapping")
# `Args:` (Google style) or `Parameters` (numpy style), then one `name: what` or `name (type): what` per line
ARGS_HEADER = re.compile(r"^\s*(?:Args|Arguments|Parameters|Params)\s*:?\s*$")
ARG_LINE = re.compile(r"^\s*\**([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
SECTION = re.compile(r"^\s*(?:Returns?|Raises|Yields|Examples?|Notes?)\s*:?\s*$")
#: Syntax nodes the aliases in one hint may stand for, all told: an alias naming the next fifty times, eight
#: deep, stood for 50**8 names.
MAX_HINT_NODES = 100_000


@dataclass(frozen=True)
class ToolParam:
    name: str
    schema: dict = field(hash=False)  # this argument's JSON Schema
    required: bool
    description: str = ""


@dataclass(frozen=True)
class ToolSpec:
    """What a model is told of one tool: its name, what it does, and its arguments."""

    name: str
    description: str
    params: tuple[ToolParam, ...]
    input_schema: dict | None = field(default=None, hash=False)  # a server's tool: its schema, as it gave it

    def schema(self) -> dict:
        """The JSON Schema of its arguments: an object, no property but its own (a server's tool: its own)."""
        if self.input_schema is not None:
            return self.input_schema
        properties = {}
        for p in self.params:
            properties[p.name] = {**p.schema, **({"description": p.description} if p.description else {})}
        return {
            "type": "object",
            "properties": properties,
            "required": [p.name for p in self.params if p.required],
            "additionalProperties": False,
        }

    def to_openai(self, description: str | None = None) -> dict:
        """The tool as OpenAI's `tools=` takes it (litellm passes it on to every provider that calls tools)."""
        text = self.description if description is None else description
        return {"type": "function", "function": {"name": self.name, "description": text, "parameters": self.schema()}}


class Module(NamedTuple):
    """A module's source as its tools are read from it: its functions and type aliases, by name."""

    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    aliases: dict[str, ast.expr]


@lru_cache(maxsize=32)
def parsed(source: str | bytes) -> Module | str:
    """A module's source parsed once however many tools it defines (each tool parsing it made `check` of a
    module of 600 tools take 31 s), or why it does not parse. Bytes are read as Python reads a file: a UTF-8
    BOM or a `coding:` line is honoured."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"the module does not parse: {exc.msg} (line {exc.lineno})"
    except RecursionError:  # `Kind = int | str | ...` of thousands of terms
        return "the module is nested too deeply to read (an expression of thousands of terms?)"
    except (ValueError, MemoryError) as exc:  # a null byte; too big
        return f"the module does not parse: {type(exc).__name__}"
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return Module(functions, aliases(tree))


def defined_async(path: str, name: str) -> bool:
    """Whether the module file `path` defines `name` as an `async def` (read, never imported)."""
    try:
        with open(path, "rb") as file:
            module = parsed(file.read())
    except OSError:
        return False
    return not isinstance(module, str) and isinstance(module.functions.get(name), ast.AsyncFunctionDef)


def read_tool(source: str | bytes, name: str, shown_as: str | None = None) -> ToolSpec | str:
    """The tool `name` of a module's source (a file's bytes, or text), or (a str) why it cannot be one.
    `shown_as`: the name the model sees (the pipeline's declared name), by default the function's own."""
    module = parsed(source)
    if isinstance(module, str):
        return module
    function = module.functions.get(name)
    if function is None:
        return f"the module defines no function '{name}' (a tool must be a function defined in it)"
    params = parameters(function, module.aliases)
    if isinstance(params, str):
        return params
    doc = ast.get_docstring(function) or ""
    described = argument_descriptions(doc)
    return ToolSpec(
        shown_as or name,
        summary(doc),
        tuple(ToolParam(p.name, p.schema, p.required, described.get(p.name, "")) for p in params),
    )


def module_functions(source: str | bytes) -> list[str]:
    """The functions a module's source defines at its top level, by name (none when it does not parse)."""
    module = parsed(source)
    return [] if isinstance(module, str) else list(module.functions)


def aliases(tree: ast.Module) -> dict[str, ast.expr]:
    """The module's type aliases, `Fact = Literal["kind", "area"]` (or `type Fact = ...`), by name: a hint that
    names one means what it stands for."""
    found: dict[str, ast.expr] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        elif type(statement).__name__ == "TypeAlias":  # `type X = ...` (Python 3.12)
            target, value = statement.name, statement.value  # type: ignore[attr-defined]
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, (ast.Subscript, ast.Name, ast.Attribute, ast.BinOp)):
            found[target.id] = value
    return found


class Unaliased(ast.NodeTransformer):
    """A hint with each alias it names replaced by what it stands for (an alias of an alias too, a few deep), up
    to MAX_HINT_NODES nodes in all (`spent`, shared by the nested transformers; past it, `too_big`)."""

    def __init__(self, aliases: dict[str, ast.expr], depth: int = 0, spent: list[int] | None = None):
        self.aliases, self.depth = aliases, depth
        self.spent = spent if spent is not None else [0]

    @property
    def too_big(self) -> bool:
        return self.spent[0] > MAX_HINT_NODES

    def visit_Name(self, node: ast.Name) -> ast.expr:
        value = self.aliases.get(node.id)
        if value is None or self.depth > 8 or self.too_big:
            return node
        self.spent[0] += sum(1 for _ in ast.walk(value))
        if self.too_big:
            return node
        return Unaliased(self.aliases, self.depth + 1, self.spent).visit(copy.deepcopy(value))


def parameters(
    function: ast.FunctionDef | ast.AsyncFunctionDef, aliases: dict[str, ast.expr] | None = None
) -> tuple[ToolParam, ...] | str:
    """Each parameter a model may pass by name, with its schema; or why the signature has no JSON form.
    `aliases`: the module's type aliases, by name."""
    args = function.args
    if args.vararg is not None:
        return f"*{args.vararg.arg} takes any number of arguments by position: a tool's arguments are named"
    if args.kwarg is not None:
        return f"**{args.kwarg.arg} takes any keyword: a tool's schema must name every argument"
    if args.posonlyargs:
        return f"'{args.posonlyargs[0].arg}' is positional-only: a tool's arguments are passed by name"
    named = [*args.args, *args.kwonlyargs]
    defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults) + list(args.kw_defaults)
    params = []
    for arg, default in zip(named, defaults):
        try:
            schema = hint_schema(arg.annotation, aliases)
        except RecursionError:  # `Kind = int | str | ...` of thousands of terms
            schema = "the type hint is nested too deeply"
        if isinstance(schema, str):
            return f"parameter '{arg.arg}': {schema}"
        if default is not None:
            value = literal(default)
            if value is not NO_VALUE:
                schema = {**schema, "default": value}
        params.append(ToolParam(arg.arg, schema, default is None))
    return tuple(params)


def hint_schema(hint: ast.expr | None, aliases: dict[str, ast.expr] | None) -> dict | str:
    """The JSON Schema of one parameter's hint, the aliases it names replaced by what they stand for."""
    if hint is not None and aliases:
        unaliased = Unaliased(aliases)
        hint = unaliased.visit(copy.deepcopy(hint))
        if unaliased.too_big:
            return f"the type hint is too big (its aliases stand for more than {MAX_HINT_NODES:,} names)"
    return json_type(hint)


NO_VALUE = object()


def literal(node: ast.expr) -> object:
    """A default's value when it is a plain literal (shown to the model), else NO_VALUE."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NO_VALUE


def json_type(annotation: ast.expr | None) -> dict | str:
    """The JSON Schema of a type hint as written (`int`, `list[str]`, `str | None`, `Literal["a", "b"]`), or why
    it has none. No hint: any JSON value."""
    if annotation is None:
        return {}
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a hint in quotes
        try:
            return json_type(ast.parse(annotation.value, mode="eval").body)
        except SyntaxError:
            return f"the type hint {annotation.value!r} does not parse"
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return {"type": "null"}
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return union([annotation.left, annotation.right])
    name = type_name(annotation)
    if isinstance(annotation, ast.Subscript):
        return generic(type_name(annotation.value), annotation.slice)
    if name in SCALARS:
        return dict(SCALARS[name])
    if name in LISTS:
        return {"type": "array"}
    if name in MAPS:
        return {"type": "object"}
    return f"the type '{ast.unparse(annotation)}' has no JSON form (use str, int, float, bool, list, dict or Literal)"


def generic(name: str, argument: ast.expr) -> dict | str:
    """`list[T]`, `dict[str, T]`, `Optional[T]`, `Union[A, B]`, `Literal[...]`."""
    items = list(argument.elts) if isinstance(argument, ast.Tuple) else [argument]
    if name == "Literal":
        values = [literal(item) for item in items]
        if any(v is NO_VALUE or not isinstance(v, (str, int, float, bool)) for v in values):
            return "a Literal of values other than strings, numbers and booleans has no JSON form"
        return {"enum": values}
    if name == "Optional":
        return union([items[0], ast.Constant(None)])
    if name == "Union":
        return union(items)
    if name in LISTS:
        return array(name, items)
    if name in MAPS:
        value = json_type(items[-1]) if len(items) == 2 else {}
        if isinstance(value, str):
            return value
        return {"type": "object", **({"additionalProperties": value} if value else {})}
    return f"the type '{name}[...]' has no JSON form (use list, dict, Optional, Union or Literal)"


def array(name: str, items: list[ast.expr]) -> dict | str:
    """`list[T]` and its kin: an array of T; a tuple other than `tuple[T, ...]`: an array of anything."""
    homogeneous = name not in ("tuple", "Tuple") or (len(items) == 2 and is_ellipsis(items[1]))
    item = json_type(items[0]) if items and homogeneous else {}
    if isinstance(item, str):
        return item
    return {"type": "array", **({"items": item} if item else {})}


def union(items: list[ast.expr]) -> dict | str:
    schemas: list[dict] = []
    for item in items:
        schema = json_type(item)
        if isinstance(schema, str):
            return schema
        schemas.extend(schema["anyOf"] if set(schema) == {"anyOf"} else [schema])
    return {"anyOf": schemas}


def is_ellipsis(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def type_name(node: ast.expr) -> str:
    """`typing.List` and `List` alike: the last part of a dotted name."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def summary(doc: str) -> str:
    """What a tool does: its docstring up to the argument list, paragraphs joined."""
    lines = []
    for line in doc.splitlines():
        if ARGS_HEADER.match(line) or SECTION.match(line):
            break
        lines.append(line.strip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def argument_descriptions(doc: str) -> dict[str, str]:
    """`name: what it is` lines of an `Args:` section, by name (an indented line goes on the one before)."""
    found: dict[str, str] = {}
    lines = iter(doc.splitlines())
    for line in lines:
        if ARGS_HEADER.match(line):
            break
    last = None
    for line in lines:
        if SECTION.match(line):
            break
        match = ARG_LINE.match(line)
        if match:
            last = match.group(1)
            found[last] = match.group(2).strip()
        elif last is not None and line.strip():
            found[last] = f"{found[last]} {line.strip()}".strip()
    return found


@dataclass(frozen=True)
class Accepted:
    """What a function node's callable takes by keyword, read from its signature: every name, the required
    ones, and whether `**kwargs` takes any other."""

    names: tuple[str, ...]
    required: tuple[str, ...]
    any_keyword: bool

    def __str__(self) -> str:
        return f"({', '.join([*self.names, *(['**kwargs'] if self.any_keyword else [])])})"


def read_accepted(source: str | bytes, name: str) -> Accepted | None:
    """The keywords function `name` of a module's source takes; None when the module has no such function to
    read (a name bound otherwise, a module that does not parse: other checks say so)."""
    module = parsed(source)
    function = None if isinstance(module, str) else module.functions.get(name)
    if function is None:
        return None
    args = function.args
    named = [*args.args, *args.kwonlyargs]
    optional = {a.arg for a in args.args[len(args.args) - len(args.defaults) :]}
    optional |= {a.arg for a, default in zip(args.kwonlyargs, args.kw_defaults) if default is not None}
    required = tuple(a.arg for a in named if a.arg not in optional)
    return Accepted(tuple(a.arg for a in named), required, args.kwarg is not None)
