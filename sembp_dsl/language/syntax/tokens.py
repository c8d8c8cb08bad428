""".sbp text as written: its statements, their tokens and the comments between them.

The compiler needs none of this (parser.py builds the IR directly, dropping comments and punctuation);
tools that rewrite or read the text do: the formatter (fmt.py) and the editor support (editor.py). The
statements come from the same grammar, parsed into a tree that keeps every token, so a new kind of
statement needs no change here.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import cache

from lark import Lark, Token, Tree

from .parser import grammar

COMMENT = re.compile(r"#[^\n]*")
STRINGS = ("STRING", "BLOCK_STRING")


@dataclass(frozen=True)
class Comment:
    text: str  # from '#' to the end of its line, trailing blanks dropped
    start: int
    end: int
    own_line: bool  # nothing but blanks before it on its line
    blank_before: bool  # an empty line between it and what comes before


@dataclass(frozen=True)
class Tok:
    """A token as written: its grammar terminal (NAME, STRING, LBRACE, ...), text and place."""

    type: str
    value: str
    start: int  # offsets into the text
    end: int
    line: int  # 1-based, as Lark counts
    column: int
    end_line: int
    end_column: int

    @staticmethod
    def of(token: Token) -> Tok:
        return Tok(
            token.type,
            token.value,
            token.start_pos or 0,
            token.end_pos or 0,
            token.line or 1,
            token.column or 1,
            token.end_line or 1,
            token.end_column or 1,
        )


@dataclass(frozen=True)
class Block:
    """The `{ ... }` of a statement: its braces and each setting's tokens."""

    open: Tok
    settings: tuple[tuple[Tok, ...], ...]
    close: Tok


@dataclass(frozen=True)
class Statement:
    """One statement: every token in order, split at its `{ ... }` block when it has one."""

    kind: str  # the grammar rule: pipeline, param_decl, node_decl, block, edge_chain, ...
    tokens: tuple[Tok, ...]
    head: tuple[Tok, ...]  # the tokens before "{", or all of them when there is no block
    block: Block | None
    equals: Tok | None  # the statement's own "=" (`param p = ...`), not one inside a setting

    @property
    def start(self) -> int:
        return self.tokens[0].start

    @property
    def end(self) -> int:
        return self.tokens[-1].end


@dataclass(frozen=True)
class Source:
    text: str
    statements: tuple[Statement, ...]
    comments: tuple[Comment, ...]
    leading: dict[int, tuple[Comment, ...]]  # token start -> the own-line comments just before it
    trailing: dict[int, Comment]  # token start -> the comment after it on its line
    blank_before: frozenset[int]  # starts of tokens with an empty line before them (or their comments)
    closing: tuple[Comment, ...]  # comments after the last token


_BUILDING = threading.Lock()


@cache
def _tree_parser() -> Lark:
    with _BUILDING:
        return Lark(
            grammar(), parser="lalr", lexer="contextual", keep_all_tokens=True, cache=True
        )  # no propagate_positions: every place is read from the tokens, and the trees' own cost a third of a read


def is_punct(token: Tok, *values: str) -> bool:
    """A token that is one of the language's symbols ("{", "=", "->", ...), never a string or name."""
    return token.type not in STRINGS and token.type != "NAME" and token.value in values


def tokens_of(tree: Tree | Token) -> list[Tok]:
    if isinstance(tree, Token):
        return [Tok.of(tree)]
    return [token for child in tree.children for token in tokens_of(child)]


def _statement(tree: Tree) -> Statement:
    children = [tokens_of(child) for child in tree.children]  # each token made a Tok once
    tokens = tuple(t for child in children for t in child)
    direct = [(i, c[0]) for i, (c, child) in enumerate(zip(children, tree.children)) if isinstance(child, Token)]
    equals = next((t for _, t in direct if is_punct(t, "=")), None)
    brace = next((i for i, t in direct if is_punct(t, "{")), None)
    if brace is None:
        return Statement(str(tree.data), tokens, tokens, None, equals)
    head = tuple(t for child in children[:brace] for t in child)
    settings = tuple(tuple(child) for child in children[brace + 1 : -1])
    block = Block(children[brace][0], settings, children[-1][0])
    return Statement(str(tree.data), tokens, head, block, equals)


def read(text: str) -> Source:
    """The statements and comments of .sbp text that parses (parser.parse says so first; this raises
    lark's errors otherwise). Offsets are into `text`."""
    tree = _tree_parser().parse(text)
    statements = tuple(_statement(child) for child in tree.children if isinstance(child, Tree))
    tokens = [token for statement in statements for token in statement.tokens]
    comments: list[Comment] = []
    leading: dict[int, tuple[Comment, ...]] = {}
    trailing: dict[int, Comment] = {}
    blank: set[int] = set()
    pending: list[Comment] = []
    previous_end = 0
    for token in [*tokens, None]:
        gap_end = token.start if token is not None else len(text)
        cursor = previous_end
        for match in COMMENT.finditer(text, previous_end, gap_end):
            own_line = cursor == 0 or "\n" in text[cursor : match.start()]
            blank_before = text.count("\n", cursor, match.start()) >= 2
            comment = Comment(match.group().rstrip(), match.start(), match.end(), own_line, blank_before)
            comments.append(comment)
            if own_line:
                pending.append(comment)
            else:  # after a token on the same line
                trailing[_token_before(tokens, match.start())] = comment
            cursor = match.end()
        if token is not None:
            if text.count("\n", cursor, token.start) >= 2:
                blank.add(token.start)
            if pending:
                leading[token.start] = tuple(pending)
                pending = []
            previous_end = token.end
    return Source(text, statements, tuple(comments), leading, trailing, frozenset(blank), tuple(pending))


def _token_before(tokens: list[Tok], offset: int) -> int:
    """The start of the last token ending at or before `offset` (tokens are in order)."""
    low, high = 0, len(tokens)
    while low < high:
        middle = (low + high) // 2
        if tokens[middle].end <= offset:
            low = middle + 1
        else:
            high = middle
    return tokens[low - 1].start
