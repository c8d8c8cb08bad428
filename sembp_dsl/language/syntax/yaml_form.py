"""YAML source -> IR. The YAML form says the same things as .sbp and lowers to the same IR.

PyYAML's safe composer gives every value its position, so schema errors and all
later checks point at the YAML line and column, and write-back can replace a
prompt's scalar in place.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from importlib import resources

import yaml

from ...errors import SbpcError
from .. import ir
from ..diagnostics import (
    Diagnostic,
    Note,
    PipelineError,
    diagnostic,
    point,
    string_problem,
    suggestion,
    suggestion_or_list,
)

TYPE = re.compile(r"\s*(text|number|json|choice)\s*(?:\((.*)\))?\s*\Z", re.S)
LIST = re.compile(r"\s*list\s*\[(.*)\]\s*\Z", re.S)
CONDITION = re.compile(r"\s*(\w+)(?:\.(\w+))?\s*(==|!=)\s*(.*?)\s*\Z", re.S)  # `triage == "Yes"`
EACH = re.compile(r"\s*(\w+)\s+in\s+(\w+)\s*\Z")  # `passage in passages`
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def schema_text(strategies: Sequence[str] = ()) -> str:
    """The JSON Schema of the YAML form, as text (what `sbpc schema` prints), with `strategies` as the names the
    `strategies` setting takes. Reading a file holds them to no list: the checker does (E136, with did you mean),
    for both forms, from the one STRATEGIES a strategy's line adds its name to."""
    shown = json.loads(json.dumps(schema()))  # a copy: the cached schema stays as shipped
    if strategies:
        shown["$defs"]["optimize"]["properties"]["strategies"]["items"] = {"enum": list(strategies)}
    return json.dumps(shown, indent=2, ensure_ascii=False) + "\n"


@cache
def schema() -> dict:
    """The shipped JSON Schema of the YAML form."""
    return json.loads(
        resources.files("sembp_dsl.language.syntax").joinpath("schema/pipeline.schema.json").read_text(encoding="utf-8")
    )


def _span(file: str, node: yaml.Node) -> ir.Span:
    start, end = node.start_mark, node.end_mark
    return ir.Span(file, start.line + 1, start.column + 1, end.line + 1, end.column + 1, start.index, end.index)


MAX_DEPTH = 64  # mappings and lists inside each other; a pipeline needs four
UNQUOTED_CHOICE = re.compile(r"\s*choice\s*\([^)]*\Z")
WRITTEN_CHOICE = re.compile(r"[^\n)]*\)?")  # the unquoted value as the file has it, to quote in the hint
WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "number": "a number",
    "integer": "a whole number",
    "boolean": "true or false",
    "null": "nothing",
}


class Loader(yaml.SafeLoader):
    """Safe loading minus what a stranger's file can abuse: aliases (a few lines can ask for gigabytes,
    and an aliased prompt cannot be written back) and nesting deep enough to exhaust Python's stack."""

    def __init__(self, text: str):
        super().__init__(text)
        self.depth = 0
        self.refused: set[str] = set()
        self.problems: list[tuple[yaml.Mark, str]] = []

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent) and self.peek_event().anchor not in self.refused:
            event = self.peek_event()
            self.refused.add(event.anchor)  # one error per anchor, however often it is used
            self.problems.append(
                (event.start_mark, f"YAML alias '*{event.anchor}' is not supported here: write the value out")
            )
        if self.depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark
            )
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _kind(value) -> str:
    """How a YAML value reads in words: `the number 3`, `a list`, `'texts'`."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()} (quote it to make it a string)"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return repr(value)
    return {dict: "a mapping", list: "a list", type(None): "nothing"}.get(type(value), type(value).__name__)


def specific(err):
    """For a value matching none of several forms: the error inside the form it has the shape of."""
    while err.validator == "oneOf":
        branches = [
            e for e in err.context if _matches_type(err.schema["oneOf"][e.relative_schema_path[0]], err.instance)
        ]
        if not branches:
            break
        err = max(branches, key=lambda e: len(e.absolute_path))
    return err


def explain(err) -> tuple[str, str]:
    """A jsonschema error in words, as a YAML user would put it (never a regex), and a help line."""
    schema, value = err.schema, err.instance
    if err.validator == "oneOf":
        return f"expected {schema.get('description', 'a different value')}, not {_kind(value)}", ""
    if err.validator == "type":
        expected = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return f"expected {' or '.join(WORDS[t] for t in expected)}, not {_kind(value)}", ""
    if err.validator == "pattern":
        return (
            f"{_kind(value)} is not {schema.get('description', 'valid here')}",
            suggestion(str(value), schema.get("examples", [])),
        )
    if err.validator == "enum":
        return f"{_kind(value)} is not allowed here", suggestion_or_list(str(value), schema["enum"])
    if err.validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        word = {
            "minimum": "at least",
            "exclusiveMinimum": "more than",
            "maximum": "at most",
            "exclusiveMaximum": "less than",
        }
        return f"must be {word[err.validator]} {err.validator_value}, not {value}", ""
    if err.validator == "required":
        return err.message.replace("is a required property", "is required"), ""
    if err.validator == "minProperties":
        return "must not be empty", ""
    return err.message, ""


def _matches_type(branch: dict, value) -> bool:
    target = branch.get("type") or schema()["$defs"].get(branch.get("$ref", "").rsplit("/", 1)[-1], {}).get("type")
    kinds = {"object": dict, "array": list, "string": str}
    return isinstance(value, kinds[target]) if target in kinds else False


class BadScalar(SbpcError, ValueError):
    def __init__(self, message: str, code: str = "E064"):
        super().__init__(message)
        self.code = code


class Lowering:
    def __init__(self, text: str, file: str):
        self.text, self.file = text, file
        self.errors: list[Diagnostic] = []
        self.reported: set[tuple] = set()  # paths already explained: schema errors inside them would repeat the cause
        self.constructor = yaml.constructor.SafeConstructor()  # one per load: it keeps state while it builds

    def span(self, node: yaml.Node) -> ir.Span:
        return _span(self.file, node)

    def scalar(self, node: yaml.Node):
        """A scalar's value with YAML's safe typing (so `0` is a number and `true` a boolean), a list of names as a
        tuple; BadScalar for a value its tag cannot hold (`!!int abc`), a date, or a number that is not finite."""
        if isinstance(node, yaml.SequenceNode):  # a list of names, `tools: [lookup, calc]`
            return tuple(str(item.value) for item in node.value if isinstance(item, yaml.ScalarNode))
        if not isinstance(node, yaml.ScalarNode):
            return None
        if node.tag == "tag:yaml.org,2002:str":
            return node.value
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        try:
            value = self.constructor.construct_object(node)
        except Exception:  # PyYAML's constructors raise ValueError, KeyError, AttributeError...: all bad input
            raise BadScalar(f"'{node.value}' is not a valid {tag}") from None
        finally:
            self.constructor.constructed_objects.clear()  # it would keep every node it ever saw
        if isinstance(value, float) and not math.isfinite(value):
            raise BadScalar(f"{node.value} is not a finite number")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise BadScalar(
                f"YAML reads '{node.value}' as {tag}, which a pipeline cannot use; quote it to make it a string"
            )
        return value

    def plain(self, node: yaml.Node, where: dict, path: tuple = ()):
        """Python data for the schema, remembering the YAML node at every path."""
        where[path] = node
        if isinstance(node, yaml.MappingNode):
            out = {}
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    self.errors.append(diagnostic("E066", self.span(key), "keys must be plain names"))
                    continue
                if key.value in out:
                    first = Note(self.span(where[path + (key.value, "<key>")]), "first declared here")
                    self.errors.append(
                        diagnostic("E067", self.span(key), f"duplicate key '{key.value}'", notes=[first])
                    )
                else:
                    where[path + (key.value, "<key>")] = key
                out[key.value] = self.plain(value, where, path + (key.value,))
                if (
                    (key.value == "type" or path[-1:] == ("type",))  # a node's type, or a field's in a record
                    and isinstance(value, yaml.ScalarNode)
                    and value.style is None
                    and UNQUOTED_CHOICE.match(value.value)
                ):
                    written = WRITTEN_CHOICE.match(self.text, value.start_mark.index)
                    self.errors.append(
                        diagnostic(
                            "E065",
                            self.span(value),
                            "a choice type must be quoted in YAML, or its commas"
                            f' end the value: write {key.value}: "{written[0] if written else ""}"',
                        )
                    )
                    self.reported.add(path if key.value == "type" else path[:-1])
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.plain(v, where, path + (i,)) for i, v in enumerate(node.value)]
        try:
            problem = string_problem(node.value)
            if problem:
                raise BadScalar(problem[1], problem[0])
            return self.scalar(node)
        except BadScalar as exc:
            self.errors.append(diagnostic(exc.code, self.span(node), str(exc)))
            self.reported.add(path)
            return node.value

    def validate(self, data, where: dict) -> None:
        from jsonschema import Draft202012Validator  # ~60 ms to import (measured): only a YAML file pays it

        found = []
        for err in Draft202012Validator(schema()).iter_errors(data):
            err = specific(err)
            path = tuple(err.absolute_path)
            if any(path[: len(done)] == done for done in self.reported):
                continue
            node = where.get(path) or where[()]
            help = ""
            if err.validator == "additionalProperties" and isinstance(err.instance, dict):
                known = err.schema.get("properties", {})
                extra = [k for k in err.instance if k not in known]
                node = where.get(path + (extra[0], "<key>"), node) if extra else node
                message = f"unknown key '{extra[0]}'" if extra else err.message
                help = suggestion_or_list(extra[0], known) if extra else ""
            elif "propertyNames" in err.relative_schema_path:  # a bad key: point at the key itself
                node = where.get(path + (err.instance, "<key>"), node)
                if err.validator == "pattern":
                    message = f"'{err.instance}' is not a valid name"
                else:
                    message = f"unknown key '{err.instance}'"
                    help = suggestion_or_list(err.instance, err.validator_value)
            else:
                message, help = explain(err)
            where_ = ".".join(map(str, path))
            found.append(diagnostic("E063", self.span(node), f"{where_}: {message}" if where_ else message, help=help))
        self.errors += sorted(found, key=lambda d: d.span.start if d.span else 0)  # in the order of the file

    def settings(self, mapping: yaml.MappingNode, skip: tuple[str, ...] = ()) -> tuple[ir.Setting, ...]:
        return tuple(
            ir.Setting(k.value, self.scalar(v), span=self.span(k), value_span=self.span(v))
            for k, v in mapping.value
            if k.value not in skip
        )

    def output_type(self, node: yaml.Node) -> ir.OutputType:
        """A type: a string such as `choice(Yes, No)`, or a record, a mapping of field names to such strings."""
        if isinstance(node, yaml.MappingNode):
            fields = tuple(
                ir.Field(key.value, self.output_type(value), span=self.span(key)) for key, value in node.value
            )
            return ir.OutputType("record", (), fields, span=self.span(node))
        return self.type_text(node.value, node)

    def type_text(self, text: str, node: yaml.Node) -> ir.OutputType:
        """A type written as a string: `choice(Yes, No)`, `list[text]`."""
        listed = LIST.match(text)
        if listed is not None:
            return ir.OutputType("list", item=self.type_text(listed.group(1), node), span=self.span(node))
        match = TYPE.match(text)
        if match is None:
            self.errors.append(diagnostic("E048", self.span(node), f"'{text}' is not a type"))
            return ir.OutputType("text", span=self.span(node))
        choices = tuple(c.strip().strip("\"'") for c in match.group(2).split(",")) if match.group(2) is not None else ()
        if match.group(1) == "choice" and (not choices or not all(choices)):
            self.errors.append(
                diagnostic("E048", self.span(node), "a choice needs options separated by commas, e.g. choice(Yes, No)")
            )
        return ir.OutputType(match.group(1), choices, span=self.span(node))

    def demos(self, key: yaml.Node, value: yaml.MappingNode, fields: dict, frozen: bool) -> ir.Param:
        """`shots: {demos: [{question: ..., answer: ...}], max: 3}`: a demos param, its examples located."""
        listed = fields["demos"]
        examples = tuple(
            ir.Example(
                tuple(ir.Setting(k.value, v.value, span=self.span(k), value_span=self.span(v)) for k, v in item.value),
                span=self.span(item),
            )
            for item in listed.value
        )
        limit = next(((k, v) for k, v in value.value if k.value == "max"), None)
        most = None
        if limit is not None:
            most = ir.Setting("max", self.scalar(limit[1]), span=self.span(limit[0]), value_span=self.span(limit[1]))
        return ir.Param(key.value, "", frozen, examples, most, span=self.span(key), literal=self.span(listed))

    def edges(self, node: yaml.ScalarNode) -> list[ir.Edge]:
        """`a, b -> c` in a YAML string, each name located inside the scalar when it is plain."""
        text, _, condition = node.value.partition(" when ")
        base = node.start_mark.index + (1 if node.style in ("'", '"') else 0)
        exact = node.style in (None, "'", '"') and "\n" not in text and text == self.text[base : base + len(text)]
        groups, offset = [], 0
        for part in text.split("->"):
            names = []
            for name in re.finditer(r"[^,\s]+", part):
                at = base + offset + name.start()
                span = point(self.file, self.text, at, len(name.group())) if exact else self.span(node)
                if not NAME.fullmatch(name.group()):
                    self.errors.append(diagnostic("E068", span, f"'{name.group()}' is not a valid name"))
                names.append(ir.Ref(name.group(), span=span))
            if not names:
                self.errors.append(diagnostic("E068", self.span(node), "an edge needs names on both sides of '->'"))
            groups.append(names)
            offset += len(part) + 2
        edges = [ir.Edge(tuple(a), tuple(b)) for a, b in zip(groups, groups[1:])]
        if condition and edges:  # the condition is on the step it ends, as in .sbp
            edges[-1] = ir.Edge(edges[-1].sources, edges[-1].targets, self.condition(condition, node))
        return edges

    def condition(self, text: str, node: yaml.ScalarNode) -> ir.Condition | None:
        """`triage == "Yes"`, `review.decision != send`, located at its edge string."""
        match = CONDITION.match(text)
        if match is None:
            self.errors.append(diagnostic("E068", self.span(node), f"'{text}' is not a condition such as `t == Yes`"))
            return None
        subject, field, compare, option = match.groups()
        span = self.span(node)
        return ir.Condition(
            ir.Ref(subject, span=span),
            ir.Ref(field, span=span) if field else None,
            compare == "!=",
            option.strip("\"'"),
            span=span,
        )

    def output(self, node: yaml.ScalarNode, field: str | None) -> ir.Output:
        """`output: judge`, `output: judge.verdict` or `output: easy | hard`, each name located inside the scalar
        when it is plain (the alternatives at the scalar)."""
        first, *others = node.value.split("|")
        alternatives = tuple(ir.Ref(other.strip(), span=self.span(node)) for other in others)
        name, _, part = first.strip().partition(".")
        if not part:
            return ir.Output(ir.Ref(name, span=self.span(node)), field, None, alternatives, span=self.span(node))
        base = node.start_mark.index + (1 if node.style in ("'", '"') else 0)
        exact = node.style in (None, "'", '"') and self.text[base : base + len(node.value)] == node.value
        ref = ir.Ref(name, span=point(self.file, self.text, base, len(name)) if exact else self.span(node))
        at = base + len(name) + 1
        record_field = ir.Ref(part, span=point(self.file, self.text, at, len(part)) if exact else self.span(node))
        return ir.Output(ref, field, record_field, alternatives, span=ref.span)

    def lower(self, root: yaml.MappingNode) -> ir.Pipeline:
        """The validated document as IR, section by section in the order of the file's meaning (each section's
        errors after the ones before it)."""
        section = {k.value: v for k, v in root.value}
        inputs = [self.input(key, value) for key, value in _entries(section, "inputs")]
        params = [self.param(key, value) for key, value in _entries(section, "params")]
        templates = [
            ir.Template(k.value, v.value, span=self.span(k), literal=self.span(v))
            for k, v in _entries(section, "templates")
        ]
        functions = [self.function(k, v) for k, v in _entries(section, "functions")]
        nodes = [self.node(key, value) for key, value in _entries(section, "nodes")]
        edges = [e for node in (section["edges"].value if "edges" in section else []) for e in self.edges(node)]
        outputs = [self.output_section(section["output"])] if "output" in section else []
        metrics = [ir.Ref(section["metric"].value, span=self.span(section["metric"]))] if "metric" in section else []
        metric_defs = [self.metric_def(key, value) for key, value in _entries(section, "metrics")]
        name = section["pipeline"]
        return ir.Pipeline(
            name=name.value,
            description=section["description"].value if "description" in section else "",
            inputs=tuple(inputs),
            params=tuple(params),
            templates=tuple(templates),
            nodes=tuple(nodes),
            edges=tuple(edges),
            outputs=tuple(outputs),
            metrics=tuple(metrics),
            blocks=self.blocks(root, section),
            metric_defs=tuple(metric_defs),
            functions=tuple(functions),
            span=self.span(name),
            path=self.file,
            text=self.text,
        )

    def input(self, key: yaml.Node, value: yaml.Node) -> ir.Input:
        """`claim: text`, or `claim: {type: text, from: statement}`."""
        if isinstance(value, yaml.MappingNode):
            fields = {k.value: v for k, v in value.value}
            field = fields["from"].value if "from" in fields else None
            return ir.Input(key.value, self.output_type(fields["type"]), field, span=self.span(key))
        return ir.Input(key.value, self.output_type(value), None, span=self.span(key))

    def param(self, key: yaml.Node, value: yaml.Node) -> ir.Param:
        """`ask: text`, `ask: {text: ..., frozen: true}`, or a demos param."""
        if not isinstance(value, yaml.MappingNode):
            return ir.Param(key.value, value.value, False, span=self.span(key), literal=self.span(value))
        fields = {k.value: v for k, v in value.value}
        frozen = "frozen" in fields and self.scalar(fields["frozen"]) is True
        if "demos" in fields:
            return self.demos(key, value, fields, frozen)
        text = fields["text"]
        return ir.Param(key.value, text.value, frozen, span=self.span(key), literal=self.span(text))

    def function(self, key: yaml.Node, value: yaml.Node) -> ir.Function:
        """`search: tools:search`, or `lookup: {target: tools:lookup, description: lookup_doc, timeout: 5}`."""
        if not isinstance(value, yaml.MappingNode):
            return ir.Function(key.value, value.value, span=self.span(key), literal=self.span(value))
        target = next(v for k, v in value.value if k.value == "target")
        settings = self.settings(value, skip=("target",))
        return ir.Function(key.value, target.value, settings, span=self.span(key), literal=self.span(target))

    def node(self, key: yaml.Node, value: yaml.MappingNode) -> ir.Node:
        fields = {k.value: v for k, v in value.value}
        each = None
        if "each" in fields:  # `each: passage in passages`, as the schema admits it
            item, over = EACH.match(fields["each"].value).groups()  # type: ignore[union-attr]
            span = self.span(fields["each"])
            each = ir.Each(ir.Ref(item, span=span), ir.Ref(over, span=span))
        settings = self.settings(value, skip=("type", "each"))
        return ir.Node(key.value, self.output_type(fields["type"]), settings, each, span=self.span(key))

    def output_section(self, node: yaml.Node) -> ir.Output:
        """`output: judge`, or `output: {node: judge, from: label}`."""
        fields = {k.value: v for k, v in node.value} if isinstance(node, yaml.MappingNode) else {"node": node}
        field = fields["from"].value if "from" in fields else None
        return self.output(fields["node"], field)

    def metric_def(self, key: yaml.Node, value: yaml.Node) -> ir.MetricDef:
        """A metric a function computes (`name: module:function`), or a judge (a mapping of its settings)."""
        if isinstance(value, yaml.ScalarNode):
            return ir.MetricDef(key.value, value.value, (), span=self.span(key), value_span=self.span(value))
        return ir.MetricDef(key.value, None, self.settings(value), span=self.span(key))

    def blocks(self, root: yaml.MappingNode, section: dict[str, yaml.Node]) -> tuple[ir.Block, ...]:
        """The model blocks (`default` is the unnamed one), then the optimize block, then the data block."""
        blocks = [
            ir.Block("model", None if k.value == "default" else k.value, self.settings(v), span=self.span(k))
            for k, v in _entries(section, "models")
        ]
        for kind in ("optimize", "data"):
            if kind in section:
                key = next(k for k, _ in root.value if k.value == kind)
                blocks.append(ir.Block(kind, None, self.settings(section[kind]), span=self.span(key)))
        blocks += [self.server(k, v) for k, v in _entries(section, "mcp")]
        return tuple(blocks)

    def server(self, key: yaml.Node, value: yaml.MappingNode) -> ir.Block:
        """`docs: {command: ..., tools: {search: {description: search_doc}}}`: the .sbp's `mcp docs { ... }`, each
        tool's settings as `search.description`."""
        settings = list(self.settings(value, skip=("tools",)))
        tools = next((v for k, v in value.value if k.value == "tools"), None)
        for tool, own in tools.value if isinstance(tools, yaml.MappingNode) else ():
            settings += [replace(s, key=f"{tool.value}.{s.key}") for s in self.settings(own)]
        return ir.Block("mcp", key.value, tuple(settings), span=self.span(key))


def _entries(section: dict[str, yaml.Node], key: str) -> list[tuple[yaml.Node, yaml.Node]]:
    """The (key, value) pairs of a top-level mapping, none when the file lacks it."""
    node = section.get(key)
    return node.value if isinstance(node, yaml.MappingNode) else []


def in_words(exc: yaml.MarkedYAMLError, text: str) -> tuple[int, str]:
    """Where, and PyYAML's complaint in words a person can act on: a line indented wrong is pointed at
    where it starts, with the line it should line up with; others as PyYAML says them."""
    mark = exc.problem_mark or exc.context_mark
    offset, message = (mark.index if mark else 0), _indentation(exc, text)
    if message == "mapping values are not allowed here":  # a colon and a space inside a plain value
        return offset, "': ' inside a value: put the value in quotes (prompt: \"Answer: Yes or No\")"
    if message != (exc.problem or exc.context) and exc.problem_mark is not None:
        line_start = text.rfind("\n", 0, exc.problem_mark.index) + 1
        skip = " " if message.startswith("a tab") else " \t"  # the tab itself, or the key the line starts with
        offset = line_start + len(text[line_start:]) - len(text[line_start:].lstrip(skip))
    return offset, message or "not valid YAML"


def _indentation(exc: yaml.MarkedYAMLError, text: str) -> str:
    problem = exc.problem or exc.context or "not valid YAML"
    mark = exc.problem_mark
    if mark is None:
        return problem
    lines = text.split("\n")
    here = lines[mark.line] if mark.line < len(lines) else ""
    indent = len(here) - len(here.lstrip(" "))
    above = next(
        (
            (n, line)
            for n, line in reversed(list(enumerate(lines[: mark.line])))
            if line.strip() and not line.lstrip().startswith("#")
        ),
        None,
    )
    if "'\\t'" in problem or "\t" in here[: len(here) - len(here.lstrip())]:
        return "a tab in the indentation: YAML indents with spaces only"
    if above is None:
        return problem
    number, line = above
    above_indent = len(line) - len(line.lstrip(" "))
    spaces = lambda n: f"{n} space{'s' if n != 1 else ''}"  # noqa: E731
    if problem.startswith("expected <block end>") and indent < above_indent:
        return (
            f"this line is indented {spaces(indent)}, which lines up with no key above it (line {number + 1} "
            f"has {spaces(above_indent)}): indent it as far as the keys it belongs with"
        )
    has_value = re.search(r":[ \t]+[^\s#]", line) is not None  # `key: value`, not `key:` opening a mapping
    if problem == "mapping values are not allowed here" and indent > above_indent and has_value:
        return (
            f"this key is indented more than line {number + 1} ({spaces(indent)} after {spaces(above_indent)}), "
            f"which already has a value, so it cannot start a key there: indent it like the line above"
        )
    return problem


def parse_yaml(text: str, file: str = "<string>") -> ir.Pipeline:
    """Parse and validate the YAML form; raise PipelineError with every problem found."""
    text = re.sub(r"\r(?!\n)", "\n", text)  # old Mac line ends, so lines count the same everywhere
    loader = None
    try:
        loader = Loader(text)
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        offset, message = in_words(exc, text)
        raise PipelineError([diagnostic("E060", point(file, text, offset), f"YAML: {message}")], text)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, such as NUL
        raise PipelineError(
            [
                diagnostic(
                    "E060",
                    point(file, text, exc.position),
                    f"YAML: character {ascii(chr(exc.character))} is not allowed in YAML",
                )
            ],
            text,
        )
    finally:
        if loader is not None:
            loader.dispose()
    if loader.problems:
        raise PipelineError(
            [diagnostic("E061", point(file, text, mark.index), message) for mark, message in loader.problems], text
        )
    lowering = Lowering(text, file)
    if not isinstance(root, yaml.MappingNode):
        start = _span(file, root) if root is not None else point(file, text, 0)
        raise PipelineError(
            [
                diagnostic(
                    "E062", start, "a YAML pipeline must be a mapping with keys pipeline, nodes, output, ...", file=file
                )
            ],
            text,
        )
    where: dict = {}
    data = lowering.plain(root, where)
    lowering.validate(data, where)
    if lowering.errors:
        raise PipelineError(lowering.errors, text)
    pipeline = lowering.lower(root)
    if lowering.errors:
        raise PipelineError(lowering.errors, text)
    return pipeline
