"""Scoring a prediction against the expected answer: the built-in metrics, each a `Metric` in METRICS.

Three built-in metrics: "exact" (string match after light normalisation, so "Yes." counts
for "yes" and "A" for "(A)"), "numeric" (numbers compared by value, so
"$18.00" counts for "18") and "json" (JSON values compared by structure, so key
order and spacing do not matter). A prediction of None means the pipeline's output could
not be parsed; it always scores False.

A file may define metrics of its own (an LLM judge, a Python function): what their settings mean is here
(`JUDGE_SETTINGS`, `parse_scale`; a function's `module:function` is read as a function node's is, by
callables.py); scoring with them needs a model or Python code, which runtime/ has.

A built-in metric is a record: how it scores a reply, the output types it accepts (and the words saying so), the
output types it is the default metric of, and why an expected answer could never be matched (a label no choice
offers, no number for `numeric`), which data are checked by before any call. To add one: a `Metric` and its line in
METRICS; the checker, the editor, `eval`, `optimize` and the data check read them from there.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from .. import ir
from ..diagnostics import did_you_mean
from .outputs import labels_of
from .shapes import parse_number

__all__ = ["DEFAULT", "JUDGE_SETTINGS", "METRICS", "Metric", "default_metric", "parse_number", "parse_scale", "score"]

JUDGE_SETTINGS = {"prompt": (str,), "model": (str,), "scale": (str,)}
_SCALE = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*\.\.\s*(-?\d+(?:\.\d+)?)\s*\Z")

# Only these are stripped, not all punctuation, so that "-50" keeps its sign
# and BBH dyck answers such as ") ]" survive.
# Quotes and markdown emphasis wrapped around an answer carry no meaning.
_WRAPPERS = "\"'`\u201c\u201d\u2018\u2019*"
# Sentence punctuation after an answer ("Yes.", "No!").
_TRAILING = ".!?,;:"
# A bracketed option ("(A)") is unwrapped so it also matches a bare "A".
_BRACKET_PAIRS = ("()", "[]")


# A number: optional sign (only when not glued to a word or digit, so "3-5"
# gives 5, not -5), optional $, then digits with thousands commas ("1,000") or
# plain digits, optional decimals. A trailing % is simply not part of the match.
# The lookbehind keeps "1.2.3" from yielding ".3".
@dataclass(frozen=True)
class Metric:
    """A built-in metric: `matches(predicted, expected)` scores a reply (never None: a reply that could not be parsed
    scores False before it is asked); `accepts` the output types' kinds it scores (empty: any), `needs` those in
    words (for E046); `default_for` the kinds it is the default metric of; `unmatchable(answer, node, type)` why an
    expected answer can never score 1 against the outputs of a node of that type, or None."""

    name: str
    matches: Callable[[str, str], bool]
    unmatchable: Callable[[str, str, ir.OutputType], str | None]
    accepts: tuple[str, ...] = ()
    needs: str = ""
    default_for: tuple[str, ...] = ()


def _exact(predicted: str, expected: str) -> bool:
    return _normalise(predicted) == _normalise(expected)


def _json(predicted: str, expected: str) -> bool:
    try:
        return bool(json.loads(predicted) == json.loads(expected))
    except ValueError:
        return False


def _numeric(predicted: str, expected: str) -> bool:
    got, want = parse_number(predicted), parse_number(expected)
    if got is None or want is None:
        return False
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)


BLANK = "no expected answer (its value is blank or null), so it would always score 0"


def _label_unmatchable(answer: str, node: str, type_: ir.OutputType) -> str | None:
    """A choice's answer must be one of its labels; any other output's answer may be anything."""
    labels = labels_of(type_)
    if not labels:
        return None
    if not answer:
        return BLANK
    if not any(_exact(label, answer) for label in labels):
        return (
            f"the expected answer {answer!r} is not among the labels of {node}: {type_}, "
            f"so it would always score 0{did_you_mean(answer, labels)}"
        )
    return None


def _number_unmatchable(answer: str, node: str, type_: ir.OutputType) -> str | None:
    if not answer:
        return BLANK
    if parse_number(answer) is None:
        return f"the expected answer {answer!r} holds no number, so the numeric metric would always score it 0"
    return None


def _json_unmatchable(answer: str, node: str, type_: ir.OutputType) -> str | None:
    if not answer:
        return BLANK
    if not _json(answer, answer):
        return f"the expected answer {answer!r} is not JSON, so the json metric would always score it 0"
    return None


DEFAULT = "exact"  # the metric of an output type no metric is the default of
METRICS: dict[str, Metric] = {  # one line per built-in metric, by name
    "exact": Metric("exact", _exact, _label_unmatchable),
    "numeric": Metric("numeric", _numeric, _number_unmatchable, ("number",), "a number output", ("number",)),
    "json": Metric("json", _json, _json_unmatchable, default_for=("json", "record")),
}


def score(metric: str, predicted: str | None, expected: str) -> bool:
    """True if `predicted` counts as `expected` under the built-in `metric` (a name in METRICS)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of: {', '.join(METRICS)}")
    return predicted is not None and METRICS[metric].matches(predicted, expected)


def default_metric(output_type: ir.OutputType | None) -> str:
    """The metric an output of this type is scored with when the file names none: the first whose `default_for`
    holds its kind, else DEFAULT."""
    kind = output_type.kind if output_type is not None else "text"
    return next((m.name for m in METRICS.values() if kind in m.default_for), DEFAULT)


def parse_scale(text: str) -> tuple[float, float] | None:
    """A judge's scale, `LOW..HIGH` ("1..5" -> (1.0, 5.0)), or None when it is not one (or LOW >= HIGH)."""
    match = _SCALE.match(text)
    if match is None:
        return None
    low, high = float(match.group(1)), float(match.group(2))
    return (low, high) if low < high else None


def _normalise(text: str) -> str:
    """Casefolded, single-spaced text minus wrapping quotes/brackets and final punctuation."""
    base = " ".join(text.split()).casefold()
    current, previous = base, None
    while current != previous:
        previous = current
        current = current.strip().strip(_WRAPPERS).rstrip(_TRAILING).strip()
        if (
            len(current) > 2
            and current[0] + current[-1] in _BRACKET_PAIRS
            and not any(c in current[1:-1] for c in "()[]")
        ):
            current = current[1:-1]
    # Answers made only of punctuation ("." or a dyck ") ]") compare as written.
    return current or base
