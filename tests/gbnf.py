"""A small GBNF matcher for tests: does a text belong to the language of a grammar?

It reads the grammar text sbpc sends to llama.cpp (rules, string literals, character classes with ranges,
negation and \\x \\u escapes, groups, alternatives, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`) and matches a whole
text against `root`, by the sets of positions each part can end at (memoised, so recursive rules such as
JSON's work, and ambiguity costs nothing). It is not llama.cpp's parser: the embedded tests run the same
grammars through llama.cpp itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "/": "/", "-": "-"}


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    negated: bool
    ranges: tuple[tuple[str, str], ...]

    def has(self, char: str) -> bool:
        inside = any(low <= char <= high for low, high in self.ranges)
        return inside != self.negated


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple


@dataclass(frozen=True)
class Alt:
    options: tuple


@dataclass(frozen=True)
class Rep:
    item: object
    least: int
    most: int | None


class Reader:
    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def space(self, newlines: bool) -> None:
        pattern = r"(?:[ \t\n]|#[^\n]*)*" if newlines else r"(?:[ \t]|#[^\n]*)*"
        self.pos = re.compile(pattern).match(self.text, self.pos).end()

    def char(self) -> str:
        c = self.text[self.pos]
        self.pos += 1
        if c != "\\":
            return c
        e = self.text[self.pos]
        self.pos += 1
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width:
            value = chr(int(self.text[self.pos : self.pos + width], 16))
            self.pos += width
            return value
        return ESCAPES[e]

    def alternatives(self, nested: bool):
        options = [self.sequence(nested)]
        while self.peek("|"):
            self.pos += 1
            options.append(self.sequence(nested))
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def peek(self, c: str) -> bool:
        return self.pos < len(self.text) and self.text[self.pos] == c

    def sequence(self, nested: bool):
        items = []
        while True:
            self.space(nested)
            if self.pos >= len(self.text) or self.text[self.pos] in "|)\n":
                break
            if re.compile(r"[a-zA-Z0-9-]+\s*::=").match(self.text, self.pos):
                break  # the next rule
            items.append(self.postfix(self.atom()))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def atom(self):
        c = self.text[self.pos]
        if c == '"':
            self.pos += 1
            out = []
            while not self.peek('"'):
                out.append(self.char())
            self.pos += 1
            return Lit("".join(out))
        if c == "[":
            self.pos += 1
            negated = self.peek("^")
            self.pos += negated
            ranges = []
            while not self.peek("]"):
                low = self.char()
                high = low
                if self.peek("-") and self.text[self.pos + 1] != "]":
                    self.pos += 1
                    high = self.char()
                ranges.append((low, high))
            self.pos += 1
            return Cls(negated, tuple(ranges))
        if c == "(":
            self.pos += 1
            inner = self.alternatives(True)
            self.space(True)
            assert self.peek(")"), self.text[self.pos :]
            self.pos += 1
            return inner
        name = re.compile(r"[a-zA-Z0-9-]+").match(self.text, self.pos)
        assert name, f"unexpected {self.text[self.pos : self.pos + 20]!r}"
        self.pos = name.end()
        return Ref(name.group())

    def postfix(self, item):
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in "*+?":
                self.pos += 1
                item = Rep(item, 1 if c == "+" else 0, 1 if c == "?" else None)
            elif c == "{":
                m = re.compile(r"\{(\d+)(,(\d*))?\}").match(self.text, self.pos)
                self.pos = m.end()
                least = int(m.group(1))
                most = least if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                item = Rep(item, least, most)
            else:
                break
        return item


def parse(grammar: str) -> dict:
    """The rules of a GBNF grammar by name."""
    reader, rules = Reader(grammar), {}
    while True:
        reader.space(True)
        if reader.pos >= len(grammar):
            return rules
        head = re.compile(r"([a-zA-Z0-9-]+)\s*::=").match(grammar, reader.pos)
        assert head, f"no rule at {grammar[reader.pos : reader.pos + 30]!r}"
        reader.pos = head.end()
        rules[head.group(1)] = reader.alternatives(False)


def matches(grammar: str, text: str) -> bool:
    """Whether the whole text is in the language of the grammar's `root`."""
    rules = parse(grammar)

    @cache
    def ends(node, pos: int) -> frozenset[int]:
        if isinstance(node, Lit):
            return frozenset([pos + len(node.text)]) if text.startswith(node.text, pos) else frozenset()
        if isinstance(node, Cls):
            return frozenset([pos + 1]) if pos < len(text) and node.has(text[pos]) else frozenset()
        if isinstance(node, Ref):
            return ends(rules[node.name], pos)
        if isinstance(node, Alt):
            return frozenset().union(*(ends(o, pos) for o in node.options))
        if isinstance(node, Seq):
            here = frozenset([pos])
            for item in node.items:
                here = frozenset().union(*(ends(item, p) for p in here))
            return here
        assert isinstance(node, Rep)
        found = {pos} if node.least == 0 else set()
        here, seen, count = frozenset([pos]), {pos}, 0
        while here and (node.most is None or count < node.most):
            here = frozenset().union(*(ends(node.item, p) for p in here))
            count += 1
            if node.most is None and count >= node.least:
                here = here - seen  # past the minimum, a position reached before adds nothing
                seen |= here
            if count >= node.least:
                found |= here
        return frozenset(found)

    return len(text) in ends(rules["root"], 0)
