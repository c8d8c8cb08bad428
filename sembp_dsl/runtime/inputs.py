"""What a caller hands a pipeline, checked and turned into the text the graph takes: a row of inputs, and new
values for its prompt parameters. Every problem is found before the first call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import SbpcError
from ..language.diagnostics import did_you_mean
from ..language.graph.graph import Graph
from ..language.nodes.demos import DemosError, checked, from_text
from ..language.nodes.demos import as_text as demos_text
from .datasets import ANSWER_COLUMNS, as_text


class InputError(SbpcError, ValueError):
    """Inputs a pipeline cannot take (unknown, missing, or not sendable): the caller's to fix."""


def input_texts(graph: Graph, given: Mapping[str, Any]) -> dict[str, str]:
    """The pipeline's inputs as text: strings as given, other values as JSON. A row of data is taken as it is, as
    `evaluate` takes it: an input may be named by the data field it reads (`from "field"`), and the expected
    answer's field is left out. Unknown and missing names are one error naming them all, before any call."""
    names = tuple(i.name for i in graph.inputs)
    fields = {i.field: i.name for i in graph.inputs if i.field and i.field not in names}
    answers = {*ANSWER_COLUMNS, graph.answer_field}  # what a row holds besides its inputs
    values: dict[str, Any] = {}
    problems = []
    for key, value in given.items():
        name = key if key in names else fields.get(key)
        if name is None:
            if key not in answers:
                problems.append(f"no input '{key}'{did_you_mean(key, [*names, *fields])}")
        elif name in values:
            problems.append(f"input '{name}' is given twice, by its name and by its data field")
        else:
            values[name] = value
    missing = [name for name in names if name not in values]
    if missing:
        problems.append(f"missing input{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
    if problems:
        takes = [
            f"{i.name} (or its data field '{i.field}')" if i.name in fields.values() else i.name for i in graph.inputs
        ]
        raise InputError(f"{'; '.join(problems)} ({graph.pipeline.path} takes: {', '.join(takes)})")
    return {name: _input_text(name, value) for name, value in values.items()}


def _input_text(name: str, value: Any) -> str:
    """One input as text; a value JSON cannot hold (bytes, a set, a tuple key, nesting past Python's limit) or
    UTF-8 cannot carry (a lone surrogate) is named."""
    try:
        text = as_text(value)
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"input '{name}' holds a lone surrogate ({exc.object[exc.start]!r}), which no model request can carry"
        ) from None
    except (TypeError, ValueError, RecursionError) as exc:
        reason = "it nests too deeply" if isinstance(exc, RecursionError) else exc
        raise InputError(f"input '{name}' cannot be sent as text or JSON: {reason}") from None
    return text


def prompt_texts(graph: Graph, prompts: Mapping[str, str | Sequence[Mapping[str, str]]]) -> dict[str, str]:
    """New values of prompt parameters as the graph holds them: a text, or for a demos param a list of examples
    (each a dict of its node's inputs and output) or that list as JSON text. DemosError (a ValueError) for examples
    that are not its node's."""
    texts = {}
    for name, text in prompts.items():
        if name not in graph.prompts:
            raise ValueError(
                f"no param '{name}'{did_you_mean(str(name), graph.prompts)} (params: {', '.join(graph.prompts)})"
            )
        if name in graph.demos:
            texts[name] = _demos_text(graph, name, text)
        elif not isinstance(text, str):
            raise TypeError(f"param '{name}' must be text, got {type(text).__name__}")
        else:
            texts[name] = text
    return texts


def _demos_text(graph: Graph, name: str, value: str | Sequence[Mapping[str, str]]) -> str:
    """A demos param's new value as the graph holds it, once its examples are checked against its node."""
    spec = graph.demos[name]
    examples = from_text(value) if isinstance(value, str) else checked(value)
    if len(examples) > spec.max:
        raise DemosError(f"demos '{name}' may hold at most {spec.max} examples, not {len(examples)}")
    keys = [*graph.nodes[spec.node].inputs, spec.node]
    for index, example in enumerate(examples, start=1):
        if sorted(example) != sorted(keys):
            raise DemosError(
                f"example {index} of demos '{name}' must give {', '.join(keys)}, not {', '.join(example) or 'nothing'}"
            )
    return demos_text(examples)
