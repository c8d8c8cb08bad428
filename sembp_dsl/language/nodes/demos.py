"""Demonstrations: the examples a demos param holds, in each form they take.

The source writes them as a list of examples (`ir.Example`, each the node's inputs and output by name).
Everything after the compiler carries a param's value as text, so a demos param's value is its examples
as a JSON list of objects (`as_text`, `from_text`): the graph's prompts, a run record's iterations and
`Pipeline.with_prompts` hold that. A template reads them as `templates.Demos` (`shown`): `{{ shots }}` is every
example as `Label: value` lines, `{% for ex in shots %}{{ ex.question }}{% endfor %}` each one by field. `layout` is the
one way a demos list is laid out in a .sbp file, which the formatter and write-back share.

They are shown in the prompt the template renders, not as earlier chat turns: the examples stand where
the template puts them, every provider and the embedded model take them the same way, the backward and
optimizer models are shown the same prompt, and the response cache keys on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

from ...errors import SbpcError
from .. import ir
from .templates import Demos

DEFAULT_MAX = 4  # examples a trainable demos param may hold when the file sets no `max` (DSPy's default)
INDENT = "  "
WIDTH = 100  # an example stays on one line when it fits (the formatter's width)

Example = Mapping[str, str]


class DemosError(SbpcError, ValueError):
    """A demos value that is not a list of examples of text, or whose examples are not the node's."""


def examples(param: ir.Param) -> tuple[dict[str, str], ...]:
    """A demos param's examples as written, each field by name (the first of a repeated one)."""
    out = []
    for example in param.demos or ():
        fields: dict[str, str] = {}
        for field in example.fields:
            fields.setdefault(field.key, str(field.value))
        out.append(fields)
    return tuple(out)


def limit(param: ir.Param) -> int | None:
    """The most examples a demos param may hold: its `max`, or DEFAULT_MAX for a trainable one without; None
    when it has no limit (frozen, without `max`) or its `max` is not a whole number of 1 or more."""
    if param.max is None:
        return None if param.frozen else DEFAULT_MAX
    value = param.max.value
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def as_text(value: Sequence[Example]) -> str:
    """The value a demos param's examples have in the graph and the run record."""
    return json.dumps([dict(e) for e in value], ensure_ascii=False)


@lru_cache(maxsize=256)
def from_text(text: str) -> tuple[dict[str, str], ...]:
    """The examples in a demos value (`as_text`); DemosError when it is not a list of objects of text.
    Cached: the examples are shared, never to be changed."""
    try:
        value = json.loads(text)
    except ValueError:
        raise DemosError("a demos value must be a JSON list of examples") from None
    return checked(value)


def checked(value: object) -> tuple[dict[str, str], ...]:
    """A list of examples, each a mapping of names to text; DemosError naming the first that is not."""
    if not isinstance(value, (list, tuple)):
        raise DemosError(f"demos must be a list of examples, not {type(value).__name__}")
    for index, example in enumerate(value, start=1):
        if not isinstance(example, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in example.items()
        ):
            raise DemosError(f"example {index} must map names to text, as {{'question': '...', 'answer': '...'}}")
    return tuple(dict(example) for example in value)


@lru_cache(maxsize=256)
def shown(text: str) -> Demos:
    """A demos value (`as_text`) as templates read it."""
    return Demos.of(from_text(text))


def layout(rows: Sequence[Sequence[tuple[str, Callable[[str], str]]]]) -> str:
    """A demos list as a .sbp file has it: `[]`, or one example a line (`{question: "...", answer: "..."},`)
    when it fits and every value is on one line, else one field a line; each line under its bracket.

    Each row is an example's fields, each a key and its literal given the indentation of its line (a block
    string is indented under it)."""
    if not rows:
        return "[]"
    lines = ["["]
    for fields in rows:
        line = INDENT + "{" + ", ".join(f"{key}: {literal(INDENT)}" for key, literal in fields) + "},"
        if "\n" not in line and len(line) <= WIDTH:
            lines.append(line)
            continue
        lines.append(INDENT + "{")
        lines += [f"{INDENT * 2}{key}: {literal(INDENT * 2)}," for key, literal in fields]
        lines.append(INDENT + "},")
    lines.append("]")
    return "\n".join(lines)
