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
Which shape a node's reply takes is its output type's to say (outputs.py); the JSON read out of replies
(`first_json`, `first_object`) is here, for every parser.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

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
class Items:
    """A list field's items, as their output type states them (outputs.py): their JSON Schema, as JSON text so a
    Field stays hashable (None: a strict schema cannot state them), and the GBNF of one written as JSON."""

    schema: str | None
    rule: str

    def array_schema(self) -> dict:
        return {"type": "array", "items": json.loads(self.schema or "null")}


@dataclass(frozen=True)
class Field:
    """A typed part of a reply.

    kind: `option` (one of `options`), `line` (one line of text, not blank), `text` (any lines without
    `<`, which keeps a closing tag after it unambiguous; may be empty), `number` (a decimal number),
    `json` (a JSON object or array), `list` (a JSON array of `items`). `cap`: the most
    characters of a line or text, whatever the budget.
    `sentences`: a text that is at most this many sentences, each closed by `.`, `!` or `?`, so it can end
    only where a sentence ends (a small model otherwise runs on until its bound cuts it off).
    """

    name: str
    kind: str
    options: tuple[str, ...] = ()
    cap: int | None = None
    sentences: int | None = None
    items: Items | None = None

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
            return None if self.items is None or self.items.schema is None else self.items.array_schema()
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


NUMBER_IN_TEXT = re.compile(
    r"(?:(?<![\w.])(?P<sign>[-\u2212]))?\$?"
    r"(?<![\d.])(?P<body>\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
)


def parse_number(text: str) -> float | None:
    """The last number in `text` ("1,000" -> 1000.0, "$18.00" -> 18.0), or None.

    The last one, because model outputs usually reason first and answer at the end.
    """
    matches = list(NUMBER_IN_TEXT.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    value = float(last["body"].replace(",", ""))
    return -value if last["sign"] else value


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
        return array_rule(None if field.items is None else field.items.rule, limit)
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
        return array_rule(None if field.items is None else field.items.rule, limit)
    if field.kind == "line":
        return LINE_START + ("" if limit == 1 else " " + repeat(LINE_CHAR, None if limit is None else limit - 1))
    if field.sentences is not None:
        return sentences_grammar(field.sentences, field.sentence_limit(limit))
    return repeat("[^<]", limit)


def most_items(max_tokens: int | None) -> int | None:
    """The most items a list reply's grammar takes (None: no limit): a number's width of the budget each, so a
    model that would list on and on closes its array within max_tokens."""
    return None if max_tokens is None else max(2, CHARS_PER_TOKEN * max_tokens // NUMBER_WIDTH)


def array_rule(item: str | None, most: int | None = None) -> str:
    """A JSON array of at most `most` items, each a JSON value the GBNF `item` states (any JSON value when None)."""
    value = "json-value" if item is None else f"({item})"
    more = repeat(f'("," json-ws {value})', None if most is None else most - 1)
    return f'"[" json-ws ({value} {more})? "]" json-ws'


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
