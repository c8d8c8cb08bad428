"""Replies in the shape asked: every reply sbpc parses, as a constraint a decoder can hold a model to.

sbpc knows the shape of each reply it reads: a node's output type (`choice(Yes, No)`, `number`, `json`,
a record of fields, and `parse = tag`), the backward model's `Hint k:` lines (one per predecessor) and the
optimizer's `<prompt>` block. A `Shape` states one of them once, as a sequence of parts: fixed text and typed
fields. From that one statement it gives

- a GBNF grammar (llama.cpp) of the text itself, exactly as the parsers read it;
- a JSON Schema (`response_format` of hosted providers): an object with one property per field, in order,
  which `Shape.text` reads back into that same text, so every parser reads one form.

A constraint must never make a reply impossible: a grammar's free fields share CHARS_PER_TOKEN x
max_tokens characters, and the call may take a token per character (models/constraints.py), so a
constrained reply always ends closed, however dense its tokens. A field the grammar closed at its bound was
cut there (`Shape.ran_out`).
A choice keeps the paper's form, the option first and then a reason; a number comes last, after the
reasoning, where the parser looks for it. A record (`{verdict: choice(Yes, No), reason: text}`) is one JSON
object, its fields in order; a model held to no constraint is told its fields in words (`describe`), and
whatever the reply, `read_record` checks it field by field. A list (`list[number]`) is a JSON array of its
item type: its JSON Schema names the items, its grammar is an array of them, a model held to neither is told
the item type in words, and `read_list` reads each item as that type, the first that does not fit by its place.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from .. import ir
from .templates import Record

#: Characters a reply may take per token of max_tokens. English prose runs at 4 to 6 characters a token
#: (SmolLM2's tokenizer), so a prose reply of that length still fits in max_tokens; math runs at about 2
#: and digits at 1, which is why the call itself may take a token per character.
CHARS_PER_TOKEN = 3
NUMBER_WIDTH = 23  # "-", 15 digits, ".", 6 decimals
# Characters of a line: no control character, nothing Python's splitlines breaks at, and no `<`, so a line
# inside <output>...</output> cannot close the tag early. Its first one is visible and no markdown emphasis,
# which the hint parser strips: a line that reads as empty is no line.
LINE_CHAR = r"[^\x00-\x1F\x7F\x85\u2028\u2029<]"
LINE_START = r"[^\x00-\x20\x7F\x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000<*_]"
# A sentence of a text held to sentences: a visible first character, no `<`, and it closes at its first end.
SENTENCE_START = r"[^\x00-\x20<.!?]"
SENTENCE_CHAR = r"[^<.!?]"
SENTENCE_END = "[.!?]"
SENTENCE_BREAK = r"[ \n]{1,2}"
SENTENCE = re.compile(r"[^\x00-\x20<.!?][^<.!?]*[.!?]")


@dataclass(frozen=True)
class Field:
    """A typed part of a reply.

    kind: `option` (one of `options`), `line` (one line of text, not blank), `text` (any lines without
    `<`, which keeps a closing tag after it unambiguous; may be empty), `number` (a decimal number),
    `json` (a JSON object or array), `list` (a JSON array, each item of the type `item`). `cap`: the most
    characters of a line or text, whatever the budget.
    `sentences`: a text that is at most this many sentences, each closed by `.`, `!` or `?`, so it can end
    only where a sentence ends (a small model otherwise runs on until its bound cuts it off).
    """

    name: str
    kind: str
    options: tuple[str, ...] = ()
    cap: int | None = None
    sentences: int | None = None
    item: ir.OutputType | None = None

    @property
    def free(self) -> bool:
        """Whether its length is the model's to choose, within a share of the budget."""
        return self.kind in ("line", "text")

    def schema(self) -> dict | None:
        """Its JSON Schema; None for `json`, which a strict schema cannot state (any value)."""
        if self.kind == "option":
            return {"type": "string", "enum": list(self.options)}
        if self.kind == "number":
            return {"type": "number"}
        if self.kind == "list":
            return array_schema(self.item)
        return None if self.kind == "json" else {"type": "string"}

    def sentence_limit(self, limit: int | None) -> int | None:
        """The most characters one of its sentences may take so that all of them, and the breaks between
        them, fit in `limit`."""
        if self.sentences is None or limit is None:
            return None
        return max(2, (limit - 2 * (self.sentences - 1)) // self.sentences)

    def ran_out(self, value: str, limit: int | None) -> bool:
        """Whether a value the grammar bounded by `limit` reached the bound (of the whole, or of a sentence; a
        list's: its items)."""
        if limit is None:
            return False
        if self.kind == "list":
            found = first_json(value)
            return isinstance(found, list) and len(found) >= limit
        each = self.sentence_limit(limit)
        if each is None:
            return len(value) >= limit
        return any(len(sentence) >= each for sentence in SENTENCE.findall(value))


Part = str | Field


@dataclass(frozen=True)
class Shape:
    """One reply's shape: fixed text and fields, in order. `name` says what it is, for people."""

    name: str
    parts: tuple[Part, ...]

    @property
    def fields(self) -> tuple[Field, ...]:
        return tuple(p for p in self.parts if isinstance(p, Field))

    def limits(self, max_tokens: int | None) -> dict[str, int | None]:
        """The most characters each free field may take so that the whole reply fits in max_tokens
        (None: no limit). The free fields share what the fixed text and the other fields leave."""
        free = [f for f in self.fields if f.free]
        if max_tokens is None:
            return {f.name: f.cap for f in free}
        fixed = sum(len(p) for p in self.parts if isinstance(p, str))
        fixed += sum(
            max(map(len, f.options)) if f.kind == "option" else NUMBER_WIDTH for f in self.fields if not f.free
        )
        share = max(1, (CHARS_PER_TOKEN * max_tokens - fixed) // max(1, len(free)))
        return {f.name: share if f.cap is None else min(f.cap, share) for f in free}

    def values(self, text: str) -> dict[str, str]:
        """Each field's text in a reply written in this shape ({} when the reply is not in it): a field runs to the
        first occurrence of the fixed text after it, or to the end. One pass, so a long reply costs linear time."""
        found: dict[str, str] = {}
        at = 0
        for part, after in zip(self.parts, (*self.parts[1:], None)):
            if isinstance(part, str):
                if not text.startswith(part, at):
                    return {}
                at += len(part)
                continue
            end = text.find(after, at) if isinstance(after, str) else len(text)
            if end < 0:
                return {}
            found[part.name], at = text[at:end], end
        return found if at == len(text) else {}

    def ran_out(self, text: str, max_tokens: int | None) -> bool:
        """Whether a reply decoded under `grammar(max_tokens)` filled a free field to its limit. The grammar
        closes the field there, so the reply is cut off, however closed it looks."""
        values, limits, most = self.values(text), self.limits(max_tokens), most_items(max_tokens)
        bounded = (f for f in self.fields if f.free or f.kind == "list")
        return any(f.ran_out(values.get(f.name, ""), limits.get(f.name, most)) for f in bounded)

    def grammar(self, max_tokens: int | None) -> str:
        """The GBNF grammar of the reply's text (llama.cpp), bounded to fit in max_tokens."""
        limits = self.limits(max_tokens)
        root = " ".join(literal(p) if isinstance(p, str) else rule_name(p.name) for p in self.parts)
        rules = [f"root ::= {root}"]
        most = most_items(max_tokens)
        rules += [f"{rule_name(f.name)} ::= {field_grammar(f, limits.get(f.name, most))}" for f in self.fields]
        if any(f.kind in ("json", "list") for f in self.fields):
            rules.append(JSON_RULES)
        return "\n".join(rules) + "\n"

    def schema(self) -> dict | None:
        """The JSON Schema of the reply as an object with a property per field, in order; None when a field
        has none (then no JSON Schema is sent)."""
        return object_schema({f.name: f.schema() for f in self.fields})

    def text(self, reply: str) -> str:
        """A reply given as the JSON object of `schema`, written out as the text the parsers read; any other
        reply (not JSON, a field missing or of the wrong kind) as it came, for the parser to judge."""
        value = first_object(reply)
        if value is None or any(f.name not in value for f in self.fields):
            return reply
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            item = value[part.name]
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                out.append(number_text(item))
            else:
                out.append(
                    item if isinstance(item, str) and part.kind != "json" else json.dumps(item, ensure_ascii=False)
                )
        return "".join(out)


def object_schema(properties: dict[str, dict | None]) -> dict | None:
    """The JSON Schema of an object with exactly these properties, in order; None when one has none."""
    if any(value is None for value in properties.values()):
        return None
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def array_schema(item: ir.OutputType | None) -> dict | None:
    """The JSON Schema of a list of `item`s; None when the item's type has none (`json`)."""
    items = type_schema(item) if item is not None else None
    return None if items is None else {"type": "array", "items": items}


def type_schema(type_: ir.OutputType) -> dict | None:
    """The JSON Schema of a value of an output type, as a list item or a record field."""
    if type_.kind == "record":
        return object_schema({f.name: type_schema(f.type) for f in type_.fields})
    return value_field("", type_).schema()


def number_text(value: int | float) -> str:
    """A number as the parser reads it: no exponent (`1e+20` would read as 20), no `.0` on a whole number."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) if isinstance(value, int) else format(Decimal(repr(value)), "f")


#: The deepest JSON value read out of a reply: deeper ones are never a pipeline's values, and each attempt at one
#: would cost its whole span again for every level.
MAX_JSON_DEPTH = 100
_JSON_MARKS = re.compile(r'[\[\]{}"\\]')
_OPENER = {"}": "{", "]": "["}


def bracketed(text: str) -> list[tuple[int, int, int]]:
    """(start, end, depth) of each `{...}` and `[...]` span of a text whose brackets match, in the order they
    start, found in one pass: inside brackets a string is read as JSON's (a bracket in quotes is text, `\\"` is
    a quote in it); outside any, a quote is prose's. A closer that matches no open bracket is prose's too."""
    spans: list[tuple[int, int, int]] = []
    stack: list[list] = []  # [opener, start, depth] of each bracket open here, outermost first
    open_count = {"{": 0, "[": 0}
    in_string, escaped = False, -1
    for match in _JSON_MARKS.finditer(text):
        mark, at = match.group(), match.start()
        if in_string:
            if at != escaped:
                escaped, in_string = (at + 1, True) if mark == "\\" else (escaped, mark != '"')
        elif mark == '"':
            in_string = bool(stack)
        elif mark in open_count:
            stack.append([mark, at, 1])
            open_count[mark] += 1
        elif mark in _OPENER and open_count[_OPENER[mark]]:
            while stack[-1][0] != _OPENER[mark]:  # brackets left open inside this one: none of them is JSON
                open_count[stack.pop()[0]] -= 1
            opener, begun, depth = stack.pop()
            open_count[opener] -= 1
            spans.append((begun, at + 1, depth))
            if stack:
                stack[-1][2] = max(stack[-1][2], depth + 1)
    return sorted(spans)


def json_values(text: str, openers: str = "{["):
    """Each JSON object or array in a text (models wrap JSON in prose and code fences), in the order they start:
    a parse of each balanced span up to MAX_JSON_DEPTH deep, so a reply of a million braces costs a pass, not a
    parse (and an error message counting lines up to it) at every brace."""
    for start, end, depth in bracketed(text):
        if text[start] in openers and depth <= MAX_JSON_DEPTH:
            try:
                yield json.loads(text[start:end])
            except (ValueError, RecursionError):
                continue


def nesting(value: object) -> int:
    """How deep a JSON value nests (a scalar 0, `[]` 1), counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def first_json(text: str):
    """The first JSON object or array in a text."""
    return next(json_values(text), None)


def first_object(text: str) -> dict | None:
    """The first JSON object in a text (a provider may wrap it in a code fence)."""
    return next(json_values(text, "{"), None)


def value_field(name: str, type_: ir.OutputType, line: bool = False) -> Field:
    """The field that holds a value of an output type (text as one line, or as free text)."""
    kind = {"choice": "option", "number": "number", "json": "json", "list": "list"}.get(
        type_.kind, "line" if line else "text"
    )
    return Field(name, kind, type_.choices, item=type_.item)


@lru_cache(maxsize=256)
def node_shape(type_: ir.OutputType, parse: str = "reply") -> Shape | None:
    """A node's reply, as forward.parse_reply reads it; None for plain text, where any reply is one.

    - `choice`: the option first, then a reason on the next line (the paper's form);
    - `number`: reasoning, then `Answer: ` and the number last (the parser takes the last number);
    - `json`: a JSON object or array; a list: a JSON array of its items;
    - a record: one JSON object with its fields, in order (`record_shape`);
    - `parse = tag`: reasoning, then the value alone inside `<output>...</output>`.
    """
    if type_.kind == "record":
        if parse == "tag":
            return Shape(
                f"{type_} in <output>", (Field("reasoning", "text"), "\n<output>", Field("output", "json"), "</output>")
            )
        return record_shape(type_)
    if parse == "tag":
        return Shape(
            f"{type_} in <output>",
            (Field("reasoning", "text"), "\n<output>", value_field("output", type_, line=True), "</output>"),
        )
    if type_.kind == "choice":
        return Shape(str(type_), (value_field("answer", type_), "\n", Field("reason", "line")))
    if type_.kind == "number":
        return Shape("number", (Field("reasoning", "text"), "\nAnswer: ", value_field("answer", type_)))
    if type_.kind in ("json", "list"):
        return Shape(str(type_), (value_field("value", type_),))
    return None


@dataclass(frozen=True)
class RecordShape(Shape):
    """A record output's reply: one JSON object, its parts the object's text (`{"verdict": `, a field, ...).
    Its JSON Schema is the base one (a property per field); its grammar writes each value as JSON; and the
    reply is already the text the record parser reads."""

    def grammar(self, max_tokens: int | None) -> str:
        limits = self.limits(max_tokens)
        root = " ".join(literal(p) if isinstance(p, str) else f"field-{rule_name(p.name)}" for p in self.parts)
        rules = [f"root ::= {root}"]
        most = most_items(max_tokens)
        rules += [f"field-{rule_name(f.name)} ::= {json_value(f, limits.get(f.name, most))}" for f in self.fields]
        rules += [JSON_CHAR, JSON_RULES]
        return "\n".join(rules) + "\n"

    def text(self, reply: str) -> str:
        return reply

    def values(self, text: str) -> dict[str, str]:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested past Python's stack: not in this shape
            return {}
        return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}


def record_shape(type_: ir.OutputType) -> RecordShape:
    parts: list[Part] = []
    for index, f in enumerate(type_.fields):
        parts += [
            ("{" if index == 0 else ", ") + json.dumps(f.name, ensure_ascii=False) + ": ",
            value_field(f.name, f.type),
        ]
    return RecordShape(str(type_), (*parts, "}"))


@lru_cache(maxsize=256)
def hints_shape(count: int) -> Shape:
    """A backward reply: exactly one `Hint k: ...` line per predecessor, in order (backward.hint_lines)."""
    parts: list[Part] = []
    for k in range(1, count + 1):
        parts += ["\n" * (k > 1) + f"Hint {k}: ", Field(f"hint_{k}", "line")]
    return Shape(f"{count} hint line{'s' * (count != 1)}", tuple(parts))


@lru_cache(maxsize=256)
def prompt_shape(max_chars: int | None, max_sentences: int | None = None) -> Shape:
    """An optimizer reply: one closed `<prompt>...</prompt>` block (descent.extract), at most `max_chars`
    long and at most `max_sentences` closed sentences, each when the optimizer prompt states that limit."""
    field = Field("prompt", "text", cap=max_chars, sentences=max_sentences)
    return Shape("<prompt> block", ("<prompt>", field, "</prompt>"))


# -- GBNF ------------------------------------------------------------------------------------------------

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """A GBNF string literal."""
    return '"' + "".join(_ESCAPES.get(c, f"\\x{ord(c):02X}" if ord(c) < 32 else c) for c in text) + '"'


def rule_name(name: str) -> str:
    return name.replace("_", "-")


def repeat(item: str, limit: int | None, least: int = 0) -> str:
    return f"{item}*" if limit is None else f"{item}{{{least},{max(least, limit)}}}"


def json_value(field: Field, limit: int | None) -> str:
    """A field's value written as JSON: an option or text as a string, a number, a list, or any JSON value."""
    if field.kind == "list":
        return array_grammar(field.item, limit)
    if field.kind == "option":
        return " | ".join(
            literal(json.dumps(o, ensure_ascii=False)) for o in sorted(field.options, key=len, reverse=True)
        )
    if field.kind == "number":
        return "json-number"
    if field.kind == "json":
        return "json-value"
    return '"\\"" ' + repeat("json-char", limit) + ' "\\""'


def field_grammar(field: Field, limit: int | None) -> str:
    """A field's text. `limit`: a free field's most characters, a list's most items."""
    if field.kind == "option":  # longest first: an option that is a prefix of another must not cut it short
        return " | ".join(literal(o) for o in sorted(field.options, key=len, reverse=True))
    if field.kind == "number":
        return '"-"? [0-9]{1,15} ("." [0-9]{1,6})?'
    if field.kind == "json":
        return "json-object | json-array"
    if field.kind == "list":
        return array_grammar(field.item, limit)
    if field.kind == "line":
        return LINE_START + ("" if limit == 1 else " " + repeat(LINE_CHAR, None if limit is None else limit - 1))
    if field.sentences is not None:
        return sentences_grammar(field.sentences, field.sentence_limit(limit))
    return repeat("[^<]", limit)


def most_items(max_tokens: int | None) -> int | None:
    """The most items a list reply's grammar takes (None: no limit): a number's width of the budget each, so a
    model that would list on and on closes its array within max_tokens."""
    return None if max_tokens is None else max(2, CHARS_PER_TOKEN * max_tokens // NUMBER_WIDTH)


def array_grammar(item: ir.OutputType | None, most: int | None = None) -> str:
    """A JSON array of at most `most` items, each a JSON value of the type `item` (any JSON value when None)."""
    value = "json-value" if item is None else f"({typed_json(item)})"
    more = repeat(f'("," json-ws {value})', None if most is None else most - 1)
    return f'"[" json-ws ({value} {more})? "]" json-ws'


def typed_json(type_: ir.OutputType) -> str:
    """A JSON value of an output type, as list items and record fields are written: an option as one of its
    strings, a record as an object of exactly its fields in order, a list as an array of its items."""
    if type_.kind == "list":
        return array_grammar(type_.item)
    if type_.kind == "record":
        fields = ' "," json-ws '.join(
            f"{literal(json.dumps(f.name, ensure_ascii=False) + ':')} json-ws {typed_json(f.type)}"
            for f in type_.fields
        )
        return f'"{{" json-ws {fields} "}}" json-ws'
    if type_.kind == "choice":
        return f"({json_value(value_field('', type_), None)}) json-ws"
    return {"number": "json-number", "json": "json-value"}.get(type_.kind, "json-string")


def sentences_grammar(count: int, each: int | None) -> str:
    """One to `count` sentences, each a visible first character, then no `<` and no sentence end, then its
    end; so the text closes only where a sentence does."""
    sentence = f"{SENTENCE_START} {repeat(SENTENCE_CHAR, None if each is None else each - 2)} {SENTENCE_END}"
    return f"({sentence}) ({SENTENCE_BREAK} {sentence}){{0,{count - 1}}}"


# one character of a JSON string, as json-string takes it
JSON_CHAR = r"""json-char ::= [^"\\\x00-\x1F<] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})"""

# llama.cpp's grammars/json.gbnf, rule names prefixed; whitespace bounded so a reply cannot pad forever, and
# `<` only escaped (\u003c) in strings, so a value inside <output>...</output> cannot close the tag
JSON_RULES = r"""json-value ::= json-object | json-array | json-string | json-number | ("true" | "false" | "null") json-ws
json-object ::= "{" json-ws ( json-string ":" json-ws json-value ("," json-ws json-string ":" json-ws json-value)* )? "}" json-ws
json-array ::= "[" json-ws ( json-value ("," json-ws json-value)* )? "]" json-ws
json-string ::= "\"" ( [^"\\\x00-\x1F<] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" json-ws
json-number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? json-ws
json-ws ::= | " " | "\n" [ \t]{0,20}"""


# -- records: described in words, read back field by field ------------------------------------------------

NUMBER_TEXT = re.compile(r"\s*-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*\Z")


def describe(type_: ir.OutputType) -> str:
    """A record's fields, or a list's item type, in words, for a model its JSON Schema does not reach: appended to
    its prompt."""
    if type_.kind == "list":
        return f"Reply with {words(type_)}."
    lines = ["Reply with a JSON object with exactly these fields:"]
    lines += [f'- "{f.name}": {words(f.type)}' for f in type_.fields]
    return "\n".join(lines)


def words(type_: ir.OutputType) -> str:
    """What a value of a type is, in words ("a JSON array, each item a number")."""
    if type_.kind == "choice":
        return "one of " + ", ".join(json.dumps(c, ensure_ascii=False) for c in type_.choices)
    if type_.kind == "list" and type_.item is not None:
        return f"a JSON array, each item {words(type_.item)}"
    if type_.kind == "record":
        fields = ", ".join(f"{json.dumps(f.name, ensure_ascii=False)} ({words(f.type)})" for f in type_.fields)
        return f"a JSON object with exactly the fields {fields}"
    return {"text": "text", "number": "a number", "json": "any JSON value", "list": "a JSON array"}[type_.kind]


def answer_format(type_: ir.OutputType) -> str | None:
    """How a reply that no JSON Schema holds (a tool loop's answer) must answer, in words that the parsers read: a
    record's fields, a choice's options first, a number last, a JSON array or value. None for text: any reply is."""
    if type_.kind == "record":
        return describe(type_)
    if type_.kind == "list":
        return f"Answer with {words(type_)}."
    return {
        "choice": f"Begin the answer with one of: {', '.join(type_.choices)}.",
        "number": "End the answer with the number.",
        "json": "Answer with a JSON value.",
    }.get(type_.kind)


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


def read_field(type_: ir.OutputType, value) -> tuple[object, str | None]:
    """One field's value (or a list item's) as its type reads it, or (None, what is wrong with it)."""
    shown = json.dumps(value, ensure_ascii=False)[:80]
    if type_.kind == "json":
        return value, None
    if type_.kind == "list" and type_.item is not None:
        return list_items(type_.item, value, shown)
    if type_.kind == "record":
        if not isinstance(value, dict):
            return None, f"is not {words(type_)}: {shown}"
        record, problem = record_fields(type_, value)
        return (None, problem) if problem is not None else (record, None)
    return read_scalar(type_, value, shown)


def read_scalar(type_: ir.OutputType, value, shown: str) -> tuple[object, str | None]:
    """A number, a choice's option or text as its type reads it, or (None, what is wrong with it)."""
    if type_.kind == "number":
        if isinstance(value, str) and NUMBER_TEXT.match(value):
            value = float(value)
        finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
        if isinstance(value, bool) or not finite:
            return None, f"is not a number: {shown}"
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)  # 3.0 reads as 3, as a number output does
        return value, None
    if isinstance(value, (dict, list)) or value is None:
        return None, f"is not {'text' if type_.kind == 'text' else 'one of ' + ', '.join(type_.choices)}: {shown}"
    text = value if isinstance(value, str) else json.dumps(value)
    if type_.kind == "text":
        return text, None
    wanted = text.strip().casefold()
    option = next((c for c in type_.choices if c.casefold() == wanted), None)
    if option is None:
        return None, f"is {shown}, not one of {', '.join(type_.choices)}"
    return option, None


def python_value(type_: ir.OutputType, text: str):
    """A value of a type, as Python reads it: a number as int or float, JSON (and a record) as read from JSON,
    text and choices as they are. Text that does not read as its type (a reply that did not parse) stays text."""
    try:
        if type_.kind == "number":
            number = float(text)
            return int(number) if number.is_integer() else number
        if type_.kind in ("json", "record", "list"):
            return json.loads(text)
    except (ValueError, RecursionError):
        return text
    return text


def output_text(type_: ir.OutputType, value) -> tuple[str | None, str | None]:
    """A Python value (what a function node returned) as the output text of its type, or (None, what is wrong
    with it): the text a model's reply of that type would be parsed into."""
    try:
        as_json = json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return None, f"is a {type(value).__name__}, which is not JSON ({exc})"
    if type_.kind == "json":
        return as_json, None
    if type_.kind == "list":
        if not isinstance(value, list):
            return None, f"is a {type(value).__name__}, not a list"
        items, problem = read_field(type_, json.loads(as_json))
        if problem is not None:
            return None, f"is a list whose {problem}"
        return json.dumps(items, ensure_ascii=False), None
    if type_.kind == "record":
        if not isinstance(value, dict):
            fields = ", ".join(f.name for f in type_.fields)
            return None, f"is a {type(value).__name__}, not a dict with the fields {fields}"
        return read_record(type_, json.dumps(value, ensure_ascii=False))
    if type_.kind == "text" and not isinstance(value, str):
        return None, f"is a {type(value).__name__}, not text (a str)"
    read, problem = read_field(type_, value)
    if problem is not None:
        return None, problem
    return (number_text(read) if type_.kind == "number" else str(read)), None  # type: ignore[arg-type]


def as_record(type_: ir.OutputType, text: str) -> Record:
    """A record output as templates read it; a reply that could not be read is, in every field, that reply
    (successors read the raw reply of a node whose reply did not fit, as for every type)."""
    read, _ = read_record(type_, text)
    if read is None:
        return Record({f.name: text for f in type_.fields}, text)
    return Record(json.loads(read), read)
