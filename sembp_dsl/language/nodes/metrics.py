"""Scoring a prediction against the expected answer.

Three built-in metrics: "exact" (string match after light normalisation, so "Yes." counts
for "yes" and "A" for "(A)"), "numeric" (numbers compared by value, so
"$18.00" counts for "18") and "json" (JSON values compared by structure, so key
order and spacing do not matter). A prediction of None means the pipeline's output could
not be parsed; it always scores False.

A file may define metrics of its own (an LLM judge, a Python function): what their settings mean is here
(`JUDGE_SETTINGS`, `parse_scale`; a function's `module:function` is read as a function node's is, by
callables.py); scoring with them needs a model or Python code, which runtime/ has.
"""

from __future__ import annotations

import json
import math
import re

__all__ = ["JUDGE_SETTINGS", "METRICS", "parse_number", "parse_scale", "score"]

METRICS = ("exact", "numeric", "json")
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
_NUMBER = re.compile(
    r"(?:(?<![\w.])(?P<sign>[-\u2212]))?\$?"
    r"(?<![\d.])(?P<body>\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
)


def score(metric: str, predicted: str | None, expected: str) -> bool:
    """True if `predicted` counts as `expected` under `metric` ("exact", "numeric" or "json")."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of: {', '.join(METRICS)}")
    if predicted is None:
        return False
    if metric == "exact":
        return _normalise(predicted) == _normalise(expected)
    if metric == "json":
        try:
            return json.loads(predicted) == json.loads(expected)
        except ValueError:
            return False
    got, want = parse_number(predicted), parse_number(expected)
    if got is None or want is None:
        return False
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)


def parse_scale(text: str) -> tuple[float, float] | None:
    """A judge's scale, `LOW..HIGH` ("1..5" -> (1.0, 5.0)), or None when it is not one (or LOW >= HIGH)."""
    match = _SCALE.match(text)
    if match is None:
        return None
    low, high = float(match.group(1)), float(match.group(2))
    return (low, high) if low < high else None


def parse_number(text: str) -> float | None:
    """The last number in `text` ("1,000" -> 1000.0, "$18.00" -> 18.0), or None.

    The last one, because model outputs usually reason first and answer at the end.
    """
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    value = float(last["body"].replace(",", ""))
    return -value if last["sign"] else value


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
