"""YAML source -> IR. The YAML form says the same things as .sbp and lowers to the same IR.

PyYAML's safe composer gives every value its position, so schema errors and all
later checks point at the YAML line and column, and write-back can replace a
prompt's scalar in place.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources

import yaml

from . import ir
from .diagnostics import Diagnostic, PipelineError, error, point

TYPE = re.compile(r"\s*(text|number|json|choice)\s*(?:\((.*)\))?\s*\Z", re.S)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=None)
def schema() -> dict:
    return json.loads(resources.files("sembp_dsl").joinpath("schema", "pipeline.schema.json").read_text(encoding="utf-8"))


def _span(file: str, node: yaml.Node) -> ir.Span:
    start, end = node.start_mark, node.end_mark
    return ir.Span(file, start.line + 1, start.column + 1, end.line + 1, end.column + 1, start.index, end.index)


class Lowering:
    def __init__(self, text: str, file: str):
        self.text, self.file = text, file
        self.errors: list[Diagnostic] = []
        self.seen: set[int] = set()

    def span(self, node: yaml.Node) -> ir.Span:
        return _span(self.file, node)

    def plain(self, node: yaml.Node, where: dict, path: tuple = ()):
        """Python data for the schema, remembering the YAML node at every path.

        A collection reached twice is an alias (`*name`): refused, because expanding
        aliases is how a few lines of YAML ask for gigabytes ("billion laughs").
        """
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            if id(node) in self.seen:
                self.errors.append(error(self.span(node), "YAML aliases of mappings or lists are not supported here"))
                return None
            self.seen.add(id(node))
        where[path] = node
        if isinstance(node, yaml.MappingNode):
            out = {}
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    self.errors.append(error(self.span(key), "keys must be plain names"))
                    continue
                if key.value in out:
                    self.errors.append(error(self.span(key), f"duplicate key '{key.value}'"))
                where[path + (key.value, "<key>")] = key
                out[key.value] = self.plain(value, where, path + (key.value,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.plain(v, where, path + (i,)) for i, v in enumerate(node.value)]
        return _scalar(node)

    def validate(self, data, where: dict) -> None:
        from jsonschema import Draft202012Validator

        for err in sorted(Draft202012Validator(schema()).iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
            path = tuple(err.absolute_path)
            node = where.get(path) or where[()]
            if err.validator == "additionalProperties" and isinstance(err.instance, dict):
                extra = [k for k in err.instance if k not in err.schema.get("properties", {})]
                node = where.get(path + (extra[0], "<key>"), node) if extra else node
                message = f"unknown key '{extra[0]}'" if extra else err.message
            elif "propertyNames" in err.relative_schema_path:  # a bad key: point at the key itself
                node = where.get(path + (err.instance, "<key>"), node)
                message = (f"'{err.instance}' is not a valid name" if err.validator == "pattern"
                           else f"unknown key '{err.instance}'; expected one of {', '.join(err.validator_value)}")
            elif err.validator == "required":
                message = err.message.replace("is a required property", "is required")
            elif err.validator == "oneOf":
                message = f"{json.dumps(err.instance)[:60]} is not valid here"
            else:
                message = err.message
            where_ = ".".join(map(str, path))
            self.errors.append(error(self.span(node), f"{where_}: {message}" if where_ else message))

    def settings(self, mapping: yaml.MappingNode, skip: tuple[str, ...] = ()) -> tuple[ir.Setting, ...]:
        return tuple(
            ir.Setting(k.value, _scalar(v), span=self.span(k), value_span=self.span(v))
            for k, v in mapping.value if k.value not in skip
        )

    def output_type(self, node: yaml.ScalarNode) -> ir.OutputType:
        match = TYPE.match(node.value)
        choices = tuple(c.strip().strip("\"'") for c in match.group(2).split(",")) if match.group(2) is not None else ()
        if match.group(1) == "choice" and (not choices or not all(choices)):
            self.errors.append(error(self.span(node), "a choice needs options separated by commas, e.g. choice(Yes, No)"))
        return ir.OutputType(match.group(1), choices, span=self.span(node))

    def edges(self, node: yaml.ScalarNode) -> list[ir.Edge]:
        """`a, b -> c` in a YAML string, each name located inside the scalar when it is plain."""
        text = node.value
        base = node.start_mark.index + (1 if node.style in ("'", '"') else 0)
        exact = node.style in (None, "'", '"') and "\n" not in text and text == self.text[base:base + len(text)]
        groups, offset = [], 0
        for part in text.split("->"):
            names = []
            for name in re.finditer(r"[^,\s]+", part):
                at = base + offset + name.start()
                span = point(self.file, self.text, at, len(name.group())) if exact else self.span(node)
                if not NAME.fullmatch(name.group()):
                    self.errors.append(error(span, f"'{name.group()}' is not a valid name"))
                names.append(ir.Ref(name.group(), span=span))
            if not names:
                self.errors.append(error(self.span(node), "an edge needs names on both sides of '->'"))
            groups.append(names)
            offset += len(part) + 2
        return [ir.Edge(s, t) for a, b in zip(groups, groups[1:]) for t in b for s in a]

    def lower(self, root: yaml.MappingNode) -> ir.Pipeline:
        section = {k.value: v for k, v in root.value}

        def items(key):
            node = section.get(key)
            return node.value if isinstance(node, yaml.MappingNode) else []

        inputs = []
        for key, value in items("inputs"):
            if isinstance(value, yaml.MappingNode):
                fields = {k.value: v for k, v in value.value}
                field = fields["from"].value if "from" in fields else None
                inputs.append(ir.Input(key.value, self.output_type(fields["type"]), field, span=self.span(key)))
            else:
                inputs.append(ir.Input(key.value, self.output_type(value), None, span=self.span(key)))
        params = []
        for key, value in items("params"):
            fields = {k.value: v for k, v in value.value} if isinstance(value, yaml.MappingNode) else {"text": value}
            frozen = "frozen" in fields and _scalar(fields["frozen"]) is True
            text = fields["text"]
            params.append(ir.Param(key.value, text.value, frozen, span=self.span(key), literal=self.span(text)))
        templates = [ir.Template(k.value, v.value, span=self.span(k), literal=self.span(v)) for k, v in items("templates")]
        nodes = []
        for key, value in items("nodes"):
            fields = {k.value: v for k, v in value.value}
            nodes.append(ir.Node(key.value, self.output_type(fields["type"]), self.settings(value, skip=("type",)), span=self.span(key)))
        edges = [e for node in (section["edges"].value if "edges" in section else []) for e in self.edges(node)]
        outputs = []
        if "output" in section:
            node = section["output"]
            fields = {k.value: v for k, v in node.value} if isinstance(node, yaml.MappingNode) else {"node": node}
            field = fields["from"].value if "from" in fields else None
            outputs.append(ir.Output(ir.Ref(fields["node"].value, span=self.span(fields["node"])), field, span=self.span(fields["node"])))
        metrics = [ir.Ref(section["metric"].value, span=self.span(section["metric"]))] if "metric" in section else []
        blocks = [
            ir.Block("model", None if k.value == "default" else k.value, self.settings(v), span=self.span(k))
            for k, v in items("models")
        ]
        if "optimize" in section:
            key = next(k for k, _ in root.value if k.value == "optimize")
            blocks.append(ir.Block("optimize", None, self.settings(section["optimize"]), span=self.span(key)))
        name = section["pipeline"]
        return ir.Pipeline(
            name=name.value,
            description=section["description"].value if "description" in section else "",
            inputs=tuple(inputs), params=tuple(params), templates=tuple(templates), nodes=tuple(nodes),
            edges=tuple(edges), outputs=tuple(outputs), metrics=tuple(metrics), blocks=tuple(blocks),
            span=self.span(name), path=self.file, text=self.text,
        )


_CONSTRUCTOR = yaml.SafeLoader("")


def _scalar(node: yaml.Node):
    """A scalar's value with YAML's safe typing (so `0` is a number and `true` a boolean)."""
    if not isinstance(node, yaml.ScalarNode):
        return None
    if node.tag == "tag:yaml.org,2002:str":
        return node.value
    try:
        return _CONSTRUCTOR.construct_object(node)
    except yaml.YAMLError:
        return node.value


def parse_yaml(text: str, file: str = "<string>") -> ir.Pipeline:
    """Parse and validate the YAML form; raise PipelineError with every problem found."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        span = ir.Span(file, mark.line + 1, mark.column + 1, mark.line + 1, mark.column + 2, mark.index, mark.index + 1)
        raise PipelineError([error(span, f"YAML: {exc.problem or exc.context}")], text)
    except yaml.YAMLError as exc:
        raise PipelineError([error(None, f"YAML: {exc}", file)], text)
    lowering = Lowering(text, file)
    if not isinstance(root, yaml.MappingNode):
        where = _span(file, root) if root is not None else None
        raise PipelineError([error(where, "a YAML pipeline must be a mapping with keys pipeline, nodes, output, ...", file)], text)
    where: dict = {}
    data = lowering.plain(root, where)
    if not lowering.errors:
        lowering.validate(data, where)
    if lowering.errors:
        raise PipelineError(lowering.errors, text)
    pipeline = lowering.lower(root)
    if lowering.errors:
        raise PipelineError(lowering.errors, text)
    return pipeline
