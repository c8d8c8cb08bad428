"""Output types: what sbpc does with a value of each, one `OutputKind` per type, registered by name in
ir.OUTPUT_TYPES (the parser and the YAML form take the names there).

A type says the shape of a model's reply of it (shapes.py states it as a grammar and a JSON Schema), reads the typed
output out of a reply, states itself as a list item or a record field, describes itself in words to a model no
JSON Schema reaches, reads a JSON value as itself, and gives its Python value. A choice keeps the paper's form, the
option first and then a reason; a number comes last, after the reasoning, where the parser looks for it. A record
(`{verdict: choice(Yes, No), reason: text}`) is one JSON object, its fields in order; a model held to no constraint
is told its fields in words (`describe`), and whatever the reply, `read_record` checks it field by field. A list
(`list[number]`) is a JSON array of its item type: its JSON Schema names the items, its grammar is an array of
them, a model held to neither is told the item type in words, and `read_list` reads each item as that type, the
first that does not fit by its place.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import ClassVar

from .. import ir
from ..ir import OUTPUT_TYPES
from .shapes import (
    Field,
    Items,
    Part,
    RecordShape,
    Shape,
    array_rule,
    first_json,
    first_object,
    json_value,
    literal,
    number_text,
    object_schema,
    parse_number,
)
from .templates import Record


def record_shape(type_: ir.OutputType) -> RecordShape:
    parts: list[Part] = []
    for index, f in enumerate(type_.fields):
        parts += [
            ("{" if index == 0 else ", ") + json.dumps(f.name, ensure_ascii=False) + ": ",
            output_kind(f.type).value_field(f.name, f.type),
        ]
    return RecordShape(str(type_), (*parts, "}"))


NUMBER_TEXT = re.compile(r"\s*-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*\Z")


def read_record(type_: ir.OutputType, text: str) -> tuple[str | None, str | None]:
    """A record reply as compact JSON of its fields, in declared order, or (None, why it does not fit)."""
    found = first_object(text)
    if found is None:
        return None, "no JSON object in the reply"
    record, problem = record_fields(type_, found)
    if problem is not None:
        return None, f"the reply {problem}" if problem.startswith("has ") else problem
    return json.dumps(record, ensure_ascii=False), None


def read_list(type_: ir.OutputType, text: str) -> tuple[str | None, str | None]:
    """A list reply as compact JSON of its items, each read as the item type reads it, or (None, why it does
    not fit: the first item that does not, by its place from 1)."""
    found = first_json(text)
    if not isinstance(found, list):
        return None, "no JSON array in the reply"
    # an object's keys sorted, as a json output's (and a function's list) are; a record's then put in its order
    items, problem = read_field(type_, json.loads(json.dumps(found, sort_keys=True)))
    return (None, problem) if problem is not None else (json.dumps(items, ensure_ascii=False), None)


def record_fields(type_: ir.OutputType, found: dict) -> tuple[dict, str | None]:
    """A JSON object's fields of a record, in declared order (others dropped), or (what, what is wrong)."""
    record: dict = {}
    for f in type_.fields:
        if f.name not in found:
            return record, f"has no field '{f.name}'"
        value, problem = read_field(f.type, found[f.name])
        if problem is not None:
            return record, located(f"field '{f.name}'", problem)
        record[f.name] = value
    return record, None


def located(where: str, problem: str) -> str:
    """A problem of a part of a value, said of that part ("item 2 is not a number", "item 2, field 'x' is ...")."""
    return f"{where}{' ' if problem.startswith(('is ', 'has ')) else ', '}{problem}"


def list_items(item: ir.OutputType, value, shown: str) -> tuple[list | None, str | None]:
    """A list's items, each as `item` reads it, or (None, what is wrong with the first that does not fit)."""
    if not isinstance(value, list):
        return None, f"is not a JSON array: {shown}"
    items = []
    for index, each in enumerate(value, start=1):
        read, problem = read_field(item, each)
        if problem is not None:
            return None, located(f"item {index}", problem)
        items.append(read)
    return items, None


def as_record(type_: ir.OutputType, text: str) -> Record:
    """A record output as templates read it; a reply that could not be read is, in every field, that reply
    (successors read the raw reply of a node whose reply did not fit, as for every type)."""
    read, _ = read_record(type_, text)
    if read is None:
        return Record({f.name: text for f in type_.fields}, text)
    return Record(json.loads(read), read)


# "**Final answer:** ", "Answer is ", "# Verdict - ": a label before the answer, with its markdown.
LEADING_LABEL = re.compile(
    r"^[\s*_#>`]*(?:(?:the\s+)?(?:final\s+)?(?:answer|output|label|verdict)\s*(?:is)?\s*[:\-]?[\s*_`]*)?", re.I
)
WRAPPERS = re.compile(r"^[\s\"'`*_\u201c\u2018]+")  # quotes and emphasis around an answer carry no meaning
OUTER_PUNCTUATION = re.compile(r"^[\W_]+|[\W_]+$")
NEGATIVE = re.compile(r"-\s*\d")
# What may not follow an option for the reply to start with it: a letter or digit ("Yesterday" is not
# "Yes"), or a decimal part ("1.5" is not the option 1, though "1." ends a sentence).
NOT_AN_END = r"(?:\w|[.,]\d)"

Read = tuple[object, str | None]  # a value as its type reads it, or (None, what is wrong with it)


class OutputKind:
    """What sbpc does with values of one output type, asked of it and of no one else: the shape of a model's reply
    (`node_shape`), the typed output read from one (`parse`), its JSON Schema and grammar as a list item or a record
    field, its description in words (`words`, and `describe`/`answer_format` for a model no JSON Schema holds), a
    JSON value read as it (`read`), its Python value and the text of a Python value (a function node's). The
    defaults are those of text; a type overrides what differs. To add one: a subclass and one line in OUTPUT_TYPES."""

    name: ClassVar[str]
    field: ClassVar[str] = "text"  # the kind of the Shape field that holds a value of it (Field's kinds)
    json_rule: ClassVar[str] = "json-string"  # the GBNF rule of a value of it written as JSON
    said: ClassVar[str] = "text"  # a value of it in words
    told: ClassVar[str | None] = None  # how a reply no JSON Schema holds must answer; None: any reply is one
    described: ClassVar[bool] = False  # whether a prompt tells its shape in words to a model no JSON Schema reaches
    scalar: ClassVar[bool] = True  # whether a template reads a value of it as one string, with no fields
    verbatim: ClassVar[bool] = True  # whether a data set's expected answer, as written, can be an output of it
    input_json: ClassVar[dict] = {"type": "string"}  # the JSON Schema an MCP client sends an input of it by

    def labels(self, type_: ir.OutputType) -> tuple[str, ...]:
        """The options a value of it is one of (a branch's conditions, the exact metric's answers); () for any."""
        return ()

    def fields(self, type_: ir.OutputType) -> tuple[ir.Field, ...]:
        """Its fields, which templates, conditions and `output a.field` read one by one; () for a value read whole."""
        return ()

    def item(self, type_: ir.OutputType) -> ir.OutputType | None:
        """The type of each item of a value of it (what a map runs once per); None for a value that is no list."""
        return None

    def input_schema(self, type_: ir.OutputType) -> dict:
        """The JSON Schema an MCP client sends an input of it by: its JSON type, without a strict schema's detail."""
        return dict(self.input_json)

    def completion(self) -> str | None:
        """How the editor offers it where a type is typed (`choice()`); None where no word spells it."""
        return self.name

    def value_field(self, name: str, type_: ir.OutputType, line: bool = False) -> Field:
        """The field that holds a value of it (text as one line, or as free text)."""
        kind = ("line" if line else "text") if self.field == "text" else self.field
        return Field(name, kind, type_.choices, items=items_of(type_.item))

    def node_shape(self, type_: ir.OutputType, parse: str) -> Shape | None:
        """A node's reply, as `parse` reads it; with `parse = tag`, reasoning, then the value alone inside
        `<output>...</output>`."""
        if parse == "tag":
            return Shape(
                f"{type_} in <output>",
                (Field("reasoning", "text"), "\n<output>", self.value_field("output", type_, line=True), "</output>"),
            )
        return self.reply_shape(type_)

    def reply_shape(self, type_: ir.OutputType) -> Shape | None:
        """Its reply's shape; None for plain text, where any reply is one."""
        return None

    def parse(self, type_: ir.OutputType, text: str) -> tuple[str | None, str | None]:
        """The typed output in a reply's text (its `<output>` tag's, when parsed so), or (None, why not)."""
        return text, None

    def schema(self, type_: ir.OutputType) -> dict | None:
        """Its JSON Schema as a list item or a record field; None when a strict schema cannot state it."""
        return self.value_field("", type_).schema()

    def grammar(self, type_: ir.OutputType) -> str:
        """A JSON value of it, as list items and record fields are written (GBNF)."""
        return self.json_rule

    def words(self, type_: ir.OutputType) -> str:
        return self.said

    def describe(self, type_: ir.OutputType) -> str:
        """Its shape in words, appended to the prompt of a model no JSON Schema reaches (when `described`)."""
        return f"Reply with {self.words(type_)}."

    def answer_format(self, type_: ir.OutputType) -> str | None:
        return self.told

    def read(self, type_: ir.OutputType, value: object, shown: str) -> Read:
        """A JSON value (a record's field, a list's item, what a function returned) as it reads one."""
        if isinstance(value, (dict, list)) or value is None:
            return None, f"is not {self.said}: {shown}"
        return value if isinstance(value, str) else json.dumps(value), None

    def python_value(self, type_: ir.OutputType, text: str) -> object:
        return text

    def output_text(self, type_: ir.OutputType, value: object, as_json: str) -> tuple[str | None, str | None]:
        """A Python value (`as_json` its JSON) as the output text of it, or (None, what is wrong with it)."""
        read, problem = self.read(type_, value, json.dumps(value, ensure_ascii=False)[:80])
        return (None, problem) if problem is not None else (str(read), None)


class Text(OutputKind):
    name = "text"

    def output_text(self, type_: ir.OutputType, value: object, as_json: str) -> tuple[str | None, str | None]:
        if not isinstance(value, str):
            return None, f"is a {type(value).__name__}, not text (a str)"
        return value, None


class Number(OutputKind):
    """Reasoning, then `Answer: ` and the number last (the parser takes the last number)."""

    name = "number"
    field = "number"
    json_rule = "json-number"
    said = "a number"
    told = "End the answer with the number."
    verbatim = False
    input_json = {"type": "number"}

    def reply_shape(self, type_: ir.OutputType) -> Shape | None:
        return Shape("number", (Field("reasoning", "text"), "\nAnswer: ", self.value_field("answer", type_)))

    def parse(self, type_: ir.OutputType, text: str) -> tuple[str | None, str | None]:
        number = parse_number(text)
        if number is None:
            return None, "no number in the reply"
        return (str(int(number)) if number == int(number) else repr(number)), None

    def read(self, type_: ir.OutputType, value: object, shown: str) -> Read:
        if isinstance(value, str) and NUMBER_TEXT.match(value):
            value = float(value)
        finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
        if isinstance(value, bool) or not finite:
            return None, f"is not a number: {shown}"
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)  # 3.0 reads as 3, as a number output does
        return value, None

    def python_value(self, type_: ir.OutputType, text: str) -> object:
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() else number

    def output_text(self, type_: ir.OutputType, value: object, as_json: str) -> tuple[str | None, str | None]:
        read, problem = self.read(type_, value, json.dumps(value, ensure_ascii=False)[:80])
        return (None, problem) if problem is not None else (number_text(read), None)  # type: ignore[arg-type]


class Json(OutputKind):
    """Any JSON object or array in the reply; as a field, any JSON value."""

    name = "json"
    field = "json"
    json_rule = "json-value"
    said = "any JSON value"
    told = "Answer with a JSON value."
    scalar = False
    verbatim = False
    input_json = {}  # any JSON value

    def reply_shape(self, type_: ir.OutputType) -> Shape | None:
        return Shape(str(type_), (self.value_field("value", type_),))

    def parse(self, type_: ir.OutputType, text: str) -> tuple[str | None, str | None]:
        value = first_json(text)
        if value is None:
            return None, "no JSON value in the reply"
        return json.dumps(value, ensure_ascii=False, sort_keys=True), None

    def read(self, type_: ir.OutputType, value: object, shown: str) -> Read:
        return value, None

    def python_value(self, type_: ir.OutputType, text: str) -> object:
        return json_or_text(text)

    def output_text(self, type_: ir.OutputType, value: object, as_json: str) -> tuple[str | None, str | None]:
        return as_json, None


class Choice(OutputKind):
    """The option first, then a reason on the next line (the paper's form)."""

    name = "choice"
    field = "option"

    def labels(self, type_: ir.OutputType) -> tuple[str, ...]:
        return type_.choices

    def completion(self) -> str | None:
        return "choice()"

    def input_schema(self, type_: ir.OutputType) -> dict:
        return {"enum": list(type_.choices)}

    def reply_shape(self, type_: ir.OutputType) -> Shape | None:
        return Shape(str(type_), (self.value_field("answer", type_), "\n", Field("reason", "line")))

    def parse(self, type_: ir.OutputType, text: str) -> tuple[str | None, str | None]:
        choice = match_choice(type_.choices, text)
        if choice is None:
            return None, f"the reply does not start with one of {', '.join(type_.choices)}"
        return choice, None

    def grammar(self, type_: ir.OutputType) -> str:
        return f"({json_value(self.value_field('', type_), None)}) json-ws"

    def words(self, type_: ir.OutputType) -> str:
        return "one of " + ", ".join(json.dumps(c, ensure_ascii=False) for c in type_.choices)

    def answer_format(self, type_: ir.OutputType) -> str | None:
        return f"Begin the answer with one of: {', '.join(type_.choices)}."

    def read(self, type_: ir.OutputType, value: object, shown: str) -> Read:
        if isinstance(value, (dict, list)) or value is None:
            return None, f"is not one of {', '.join(type_.choices)}: {shown}"
        wanted = (value if isinstance(value, str) else json.dumps(value)).strip().casefold()
        option = next((c for c in type_.choices if c.casefold() == wanted), None)
        if option is None:
            return None, f"is {shown}, not one of {', '.join(type_.choices)}"
        return option, None


class ListOf(OutputKind):
    """A JSON array of its item type: its JSON Schema names the items, its grammar is an array of them, and each
    item is read as that type, the first that does not fit named by its place."""

    name = "list"
    field = "list"
    said = "a JSON array"
    described = True
    scalar = False
    verbatim = False
    input_json = {"type": "array"}

    def item(self, type_: ir.OutputType) -> ir.OutputType | None:
        return type_.item or ir.OutputType("json", span=type_.span)  # a bare `list`: any JSON value

    def completion(self) -> str | None:
        return "list[]"

    def reply_shape(self, type_: ir.OutputType) -> Shape | None:
        return Shape(str(type_), (self.value_field("value", type_),))

    def parse(self, type_: ir.OutputType, text: str) -> tuple[str | None, str | None]:
        return read_list(type_, text)

    def grammar(self, type_: ir.OutputType) -> str:
        return array_rule(None if type_.item is None else typed_json(type_.item))

    def words(self, type_: ir.OutputType) -> str:
        return self.said if type_.item is None else f"a JSON array, each item {words(type_.item)}"

    def answer_format(self, type_: ir.OutputType) -> str | None:
        return f"Answer with {self.words(type_)}."

    def read(self, type_: ir.OutputType, value: object, shown: str) -> Read:
        return (value, None) if type_.item is None else list_items(type_.item, value, shown)

    def python_value(self, type_: ir.OutputType, text: str) -> object:
        return json_or_text(text)

    def output_text(self, type_: ir.OutputType, value: object, as_json: str) -> tuple[str | None, str | None]:
        if not isinstance(value, list):
            return None, f"is a {type(value).__name__}, not a list"
        items, problem = read_field(type_, json.loads(as_json))
        if problem is not None:
            return None, f"is a list whose {problem}"
        return json.dumps(items, ensure_ascii=False), None


class RecordOf(OutputKind):
    """One JSON object with its fields, in order (`record_shape`); a model held to no constraint is told its fields
    in words, and whatever the reply, `read_record` checks it field by field."""

    name = "record"
    described = True
    scalar = False
    verbatim = False
    input_json = {"type": "object"}

    def fields(self, type_: ir.OutputType) -> tuple[ir.Field, ...]:
        return type_.fields

    def completion(self) -> str | None:
        return None  # written as its fields in braces

    def node_shape(self, type_: ir.OutputType, parse: str) -> Shape | None:
        if parse == "tag":
            return Shape(
                f"{type_} in <output>", (Field("reasoning", "text"), "\n<output>", Field("output", "json"), "</output>")
            )
        return record_shape(type_)

    def parse(self, type_: ir.OutputType, text: str) -> tuple[str | None, str | None]:
        return read_record(type_, text)

    def schema(self, type_: ir.OutputType) -> dict | None:
        return object_schema({f.name: type_schema(f.type) for f in type_.fields})

    def grammar(self, type_: ir.OutputType) -> str:
        fields = ' "," json-ws '.join(
            f"{literal(json.dumps(f.name, ensure_ascii=False) + ':')} json-ws {typed_json(f.type)}"
            for f in type_.fields
        )
        return f'"{{" json-ws {fields} "}}" json-ws'

    def words(self, type_: ir.OutputType) -> str:
        fields = ", ".join(f"{json.dumps(f.name, ensure_ascii=False)} ({words(f.type)})" for f in type_.fields)
        return f"a JSON object with exactly the fields {fields}"

    def describe(self, type_: ir.OutputType) -> str:
        lines = ["Reply with a JSON object with exactly these fields:"]
        lines += [f'- "{f.name}": {words(f.type)}' for f in type_.fields]
        return "\n".join(lines)

    def answer_format(self, type_: ir.OutputType) -> str | None:
        return self.describe(type_)

    def read(self, type_: ir.OutputType, value: object, shown: str) -> Read:
        if not isinstance(value, dict):
            return None, f"is not {self.words(type_)}: {shown}"
        record, problem = record_fields(type_, value)
        return (None, problem) if problem is not None else (record, None)

    def python_value(self, type_: ir.OutputType, text: str) -> object:
        return json_or_text(text)

    def output_text(self, type_: ir.OutputType, value: object, as_json: str) -> tuple[str | None, str | None]:
        if not isinstance(value, dict):
            fields = ", ".join(f.name for f in type_.fields)
            return None, f"is a {type(value).__name__}, not a dict with the fields {fields}"
        return read_record(type_, json.dumps(value, ensure_ascii=False))


OUTPUT_TYPES.update(  # one line per output type, by the name a file writes it with (the registry is the IR's)
    {
        Text.name: Text(),
        Number.name: Number(),
        Json.name: Json(),
        Choice.name: Choice(),
        ListOf.name: ListOf(),
        RecordOf.name: RecordOf(),
    }
)


def output_kind(type_: ir.OutputType) -> OutputKind:
    kind: OutputKind = OUTPUT_TYPES[type_.kind]
    return kind


@lru_cache(maxsize=256)
def node_shape(type_: ir.OutputType, parse: str = "reply") -> Shape | None:
    """A node's reply, as its type parses it (`OutputKind.parse`); None for plain text, where any reply is one."""
    return output_kind(type_).node_shape(type_, parse)


def labels_of(type_: ir.OutputType) -> tuple[str, ...]:
    """The options a value of a type is one of (a choice's); () for any value."""
    return output_kind(type_).labels(type_)


def fields_of(type_: ir.OutputType) -> tuple[ir.Field, ...]:
    """A type's fields (a record's), read one by one; () for a value read whole."""
    return output_kind(type_).fields(type_)


def field_of(type_: ir.OutputType, name: str) -> ir.Field | None:
    """A type's field by name, or None (a type with no fields has none)."""
    return next((f for f in fields_of(type_) if f.name == name), None)


def item_of(type_: ir.OutputType) -> ir.OutputType | None:
    """The type of each item of a value of a type (a list's); None for a value that is no list."""
    return output_kind(type_).item(type_)


def answer_is_output(type_: ir.OutputType, answer: str) -> bool:
    """Whether a data set's expected answer, as written, is an output of a type (text, or one of a choice's
    options), which a demonstration may show as the output."""
    labels = labels_of(type_)
    return bool(answer) and output_kind(type_).verbatim and (not labels or answer in labels)


def type_schema(type_: ir.OutputType) -> dict | None:
    """The JSON Schema of a value of an output type, as a list item or a record field."""
    return output_kind(type_).schema(type_)


def typed_json(type_: ir.OutputType) -> str:
    """A JSON value of an output type, as list items and record fields are written."""
    return output_kind(type_).grammar(type_)


def words(type_: ir.OutputType) -> str:
    """What a value of a type is, in words ("a JSON array, each item a number")."""
    return output_kind(type_).words(type_)


def describe(type_: ir.OutputType) -> str:
    """A record's fields, or a list's item type, in words, for a model its JSON Schema does not reach: appended to
    its prompt."""
    return output_kind(type_).describe(type_)


def answer_format(type_: ir.OutputType) -> str | None:
    """How a reply that no JSON Schema holds (a tool loop's answer) must answer, in words that the parsers read: a
    record's fields, a choice's options first, a number last, a JSON array or value. None for text: any reply is."""
    return output_kind(type_).answer_format(type_)


def read_field(type_: ir.OutputType, value) -> Read:
    """One field's value (or a list item's) as its type reads it, or (None, what is wrong with it)."""
    return output_kind(type_).read(type_, value, json.dumps(value, ensure_ascii=False)[:80])


def json_or_text(text: str) -> object:
    """Text read as JSON; text that does not read (a reply that did not parse) stays text."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def python_value(type_: ir.OutputType, text: str):
    """A value of a type, as Python reads it: a number as int or float, JSON (and a record) as read from JSON,
    text and choices as they are. Text that does not read as its type (a reply that did not parse) stays text."""
    return output_kind(type_).python_value(type_, text)


def output_text(type_: ir.OutputType, value) -> tuple[str | None, str | None]:
    """A Python value (what a function node returned) as the output text of its type, or (None, what is wrong
    with it): the text a model's reply of that type would be parsed into."""
    try:
        as_json = json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return None, f"is a {type(value).__name__}, which is not JSON ({exc})"
    return output_kind(type_).output_text(type_, value, as_json)


def match_choice(choices: tuple[str, ...], reply: str) -> str | None:
    """The option a reply starts with, after a label such as "Answer:" or "The answer is".

    The paper's form is the option first, then a reason; a label before it is common and harmless, so it
    is skipped. A number with a decimal part is a different number: "1.5" is neither 1 nor 2.

    Options are matched as written first, longest first, so `(A)` matches "(A) because..." and
    `-1` is not read as `1`; only then without their outer punctuation, so "A" still counts for
    `(A)` and "Yes." for `Yes`.
    """
    head = WRAPPERS.sub("", LEADING_LABEL.sub("", reply, count=1)).casefold()
    for choice in sorted(choices, key=len, reverse=True):
        option = choice.casefold()
        if head.startswith(option) and not (option[-1:].isalnum() and re.match(NOT_AN_END, head[len(option) :])):
            return choice
    if NEGATIVE.match(head):  # a negative number is not its absolute value
        return None
    bare = OUTER_PUNCTUATION.sub("", head.split("\n", 1)[0])
    for choice in sorted(choices, key=len, reverse=True):
        option = OUTER_PUNCTUATION.sub("", choice.casefold())
        if option and choice[:1] not in "+-" and re.match(re.escape(option) + f"(?!{NOT_AN_END})", bare):
            return choice
    return None


def items_of(item: ir.OutputType | None) -> Items | None:
    """A list's items as a Field carries them (their JSON Schema and GBNF), or None for no list."""
    if item is None:
        return None
    schema = type_schema(item)
    return Items(None if schema is None else json.dumps(schema), typed_json(item))
