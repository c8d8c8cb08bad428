"""What to complete at a cursor of a .sbp text that is being typed: a keyword, a declared name, a setting, the
words a setting takes, a type, or inside `{{` the variables a template may read."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import ir
from ..check.context import MODEL_ROLES
from ..check.settings import BLOCKS, NODE_SETTINGS
from ..nodes.metrics import JUDGE_SETTINGS, METRICS
from ..nodes.outputs import OUTPUT_TYPES
from ..nodes.templates import BUILTIN
from .hover import setting_help

# A node setting whose value names something declared elsewhere: the namespaces it may name.
REFERENCES = {
    "prompt": ("param",),
    "template": ("template",),
    "model": ("model",),
    "system": ("param", "template"),
    "function": ("function",),
    "demos": ("param",),
    "tools": ("function",),
}

KEYWORDS = (
    "input",
    "param",
    "frozen param",
    "demos",
    "frozen demos",
    "template",
    "function",
    "node",
    "output",
    "metric",
    "model",
    "optimize",
)

BLOCK_SETTINGS: dict[str, dict[str, tuple]] = {
    "node": NODE_SETTINGS,
    "metric": JUDGE_SETTINGS,
    **BLOCKS,
}

CONTEXT_CHARS = 300  # of a line before the cursor, all completion looks at (a hostile line may be megabytes)


@dataclass(frozen=True)
class Completion:
    label: str
    kind: str  # keyword, param, template, node, input, setting, value, type, metric, variable
    detail: str = ""
    insert: str = ""  # text to insert, when not the label


def complete(source: str, offset: int, pipeline: ir.Pipeline | None) -> list[Completion]:
    """What may be typed at `offset` of a .sbp text, `pipeline` being what of it parsed."""
    context = scan(source, offset)
    line_start = max(source.rfind("\n", 0, offset) + 1, offset - CONTEXT_CHARS)
    line = source[line_start:offset]  # what completion needs of a line is its end
    names = names_by_namespace(pipeline)
    if context.in_string:
        return jinja_completions(names) if context.in_jinja else []
    if context.block == "record":  # `node judge: {verdict: |`: a field's type
        return type_completions() if re.search(r":\s*\w*$", line) else []
    if context.block is not None:
        return setting_completions(context.block, line, names)
    return statement_completions(line, names, pipeline)


def jinja_completions(names: dict[str, list[tuple[str, str]]]) -> list[Completion]:
    """Inside `{{` of a string: the variables a node's template may read."""
    nodes = [Completion(n, k) for n, k in names["node"]]
    params = [Completion(n, k) for n, k in names["param"]]
    return nodes + params + [Completion("prompt", "variable", "the node's prompt param")]


def setting_completions(block: str, line: str, names: dict[str, list[tuple[str, str]]]) -> list[Completion]:
    """In a settings block: a setting's name, or after `key =` the names or words it accepts."""
    settings = BLOCK_SETTINGS.get(block, {})
    value = re.search(r"(\w+)\s*=\s*\w*$", line)
    if value:
        key = value.group(1)
        if block in ("node", "metric") and key in REFERENCES:
            return [Completion(n, kind) for space in REFERENCES[key] for n, kind in names[space]]
        accepted = settings.get(key, ())
        if accepted and isinstance(accepted[0], str):
            return [Completion(word, "value") for word in accepted]
        return []
    if re.search(r"(^|[\s{;])\w*$", line):
        return [Completion(key, "setting", setting_help(key) or "", f"{key} = ") for key in settings]
    return []


def statement_completions(
    line: str, names: dict[str, list[tuple[str, str]]], pipeline: ir.Pipeline | None
) -> list[Completion]:
    """Outside any block: a keyword, a node an edge names, what `output`, `metric` or `model` names, a type."""
    if re.fullmatch(r"\s*\w*", line):  # a statement starts: a keyword, or the name an edge starts with
        return [Completion(k, "keyword") for k in KEYWORDS] + [Completion(n, kind) for n, kind in names["node"]]
    declaration = re.match(r"\s*(node|input|param|demos|frozen|template|function|pipeline)\b", line)
    if re.search(r"(->|,)\s*\w*$", line) and not declaration:
        return [Completion(n, kind) for n, kind in names["node"]]
    if re.match(r"\s*output\s+\w*$", line):
        return [Completion(n, kind) for n, kind in names["node"] if kind == "node"]
    if re.match(r"\s*metric\s+\w*$", line):
        defined = [d.name for d in pipeline.metric_defs] if pipeline else []
        return [Completion(m, "metric") for m in (*METRICS, *defined)]
    if re.match(r"\s*model\s+\w*$", line):
        return [Completion(role, "model") for role in MODEL_ROLES]
    if re.match(r"\s*(node\s+\w+|input\s+[\w,\s]+):\s*\w*$", line):
        return type_completions()
    return []


def type_completions() -> list[Completion]:
    """The output types as registered (OUTPUT_TYPES), each as it is typed."""
    typed = (kind.completion() for kind in OUTPUT_TYPES.values())
    return [Completion(t, "type", insert=t) for t in typed if t is not None]


def names_by_namespace(p: ir.Pipeline | None) -> dict[str, list[tuple[str, str]]]:
    names: dict[str, list[tuple[str, str]]] = {
        "node": [],
        "param": [],
        "template": [],
        "model": [],
        "function": [],
        "mcp": [],
    }
    if p is None:
        return names
    names["node"] = [(i.name, "input") for i in p.inputs] + [(n.name, "node") for n in p.nodes]
    names["param"] = [(x.name, "param") for x in p.params]
    names["template"] = [(t.name, "template") for t in p.templates if t.name not in BUILTIN]
    names["function"] = [(f.name, "function") for f in p.functions]
    names["mcp"] = [(b.name, "MCP server") for b in p.blocks if b.kind == "mcp" and b.name]
    named = [b.name for b in p.blocks if b.kind == "model" and b.name and b.name not in MODEL_ROLES]
    names["model"] = [(r, "model") for r in dict.fromkeys([*MODEL_ROLES, *named])]
    return names


@dataclass(frozen=True)
class Context:
    """Where a cursor is: in which settings block (node, model, optimize), inside a string, inside `{{`."""

    block: str | None
    in_string: bool
    in_jinja: bool


_LEXEME = re.compile(r'"""|"(?:[^"\\\n]|\\.)*(?:"|$)|#[^\n]*|[{}]', re.M)


def scan(text: str, offset: int) -> Context:
    """Read up to the cursor as the lexer would, tolerating a file that is being typed."""
    stack: list[str] = []
    position = 0
    while True:
        match = _LEXEME.search(text, position, offset)
        if match is None:
            return Context(stack[-1] if stack else None, False, False)
        lexeme = match.group()
        if lexeme == '"""':
            close = text.find('"""', match.end(), offset)
            if close < 0:  # the cursor is inside this block string
                body = text[match.end() : offset]
                return Context(stack[-1] if stack else None, True, body.rfind("{{") > body.rfind("}}"))
            position = close + 3
            continue
        if lexeme.startswith('"'):
            if match.end() == offset and (len(lexeme) == 1 or not lexeme.endswith('"')):
                body = lexeme[1:]
                return Context(stack[-1] if stack else None, True, body.rfind("{{") > body.rfind("}}"))
        elif lexeme == "{":
            line_start = max(text.rfind("\n", 0, match.start()) + 1, match.start() - CONTEXT_CHARS)
            before = text[line_start : match.start()]
            head = before.split()
            if before.rstrip().endswith(":"):  # `node judge: {`: a record type, not the settings
                stack.append("record")
            else:
                stack.append("node" if head[:1] == ["node"] else head[0] if head else "")
        elif lexeme == "}" and stack:
            stack.pop()
        position = match.end()
