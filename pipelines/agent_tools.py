"""Tools for pipelines/agent.sbp: facts about the (invented) Vellmar Islands, and arithmetic.

Pure Python, no network. The facts are invented, so a model cannot know them without looking them up;
the arithmetic is evaluated from a parsed expression (numbers and + - * / ** % // and parentheses only),
never with eval().
"""

from __future__ import annotations

import ast
import operator
from typing import Literal

FACTS = {
    "Orvane": {"kind": "island", "population": 52000, "area": 410, "capital": "Kesh"},
    "Hollin": {"kind": "island", "population": 9100, "area": 380, "capital": "Sarnmouth"},
    "Tamsin Isle": {"kind": "island", "population": 300, "area": 18, "capital": "Brightwater"},
    "Kesh": {"kind": "town", "population": 18400, "founded": 1412, "island": "Orvane"},
    "Sarnmouth": {"kind": "town", "population": 4200, "founded": 1588, "island": "Hollin"},
    "Brightwater": {"kind": "village", "population": 300, "founded": 1530, "island": "Tamsin Isle"},
    "Greyhollow": {"kind": "village", "population": 650, "founded": 1650, "island": "Hollin"},
    "Corvel": {"kind": "village", "population": 120, "founded": 1790, "island": "Hollin"},
}

Fact = Literal["kind", "population", "area", "capital", "founded", "island"]


def lookup(place: str, fact: Fact) -> str:
    """Look up one fact about a place of the Vellmar Islands.

    Args:
        place: the place's name alone, such as "Kesh" (not a whole question)
        fact: which fact: its kind, population, area (square kilometres), capital, year founded, or island
    """
    key = next((name for name in FACTS if name.casefold() == place.strip().casefold()), None)
    if key is None:
        return f"no place called {place!r}; the places are {', '.join(FACTS)}"
    value = FACTS[key].get(fact)
    return f"{key} has no {fact} on record" if value is None else f"{fact} of {key}: {value}"


OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def calc(expression: str) -> float:
    """Evaluate an arithmetic expression such as "18400 - 4200" or "(1650 - 1412) / 2".

    Args:
        expression: numbers, + - * / // % ** and parentheses
    """
    return _value(ast.parse(expression, mode="eval").body)


def _value(node: ast.expr) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return -_value(node.operand) if isinstance(node.op, ast.USub) else _value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return OPERATORS[type(node.op)](left, right)
    raise ValueError(f"not arithmetic: {ast.unparse(node)}")
