"""Tests for sembp_dsl.language.nodes.metrics."""

from __future__ import annotations

import pytest

from sembp_dsl.language.nodes.metrics import METRICS, parse_number, score


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [
        ("Yes", "Yes"),
        ("yes.", "Yes"),
        ("  YES  ", "Yes"),
        ('"No"', "No"),
        ("**No**", "No"),
        ("(A)", "(A)"),
        ("A", "(A)"),
        ("(a).", "(A)"),
        ("valid", "valid"),
        ("Monsters,  Inc", "Monsters, Inc"),
        ("] ]", "] ]"),
        ("-50", "-50"),
    ],
)
def test_exact_matches(predicted: str, expected: str) -> None:
    assert score("exact", predicted, expected)


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [
        ("No", "Yes"),
        ("valid", "invalid"),
        ("(B)", "(A)"),
        ("(A) Monsters", "(A)"),
        ("50", "-50"),
        (")", "] ]"),
        ("...", "?"),
        ("", "Yes"),
    ],
)
def test_exact_mismatches(predicted: str, expected: str) -> None:
    assert not score("exact", predicted, expected)


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [
        ("18", "18"),
        ("$18.00", "18"),
        ("1,000", "1000"),
        ("1000", "1,000"),
        ("-3", "-3"),
        ("The answer is 72.", "72"),
        ("0.1", "0.10000000001"),
        ("25%", "25"),
    ],
)
def test_numeric_matches(predicted: str, expected: str) -> None:
    assert score("numeric", predicted, expected)


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [("17", "18"), ("3", "-3"), ("18.5", "18"), ("eighteen", "18"), ("", "18"), ("18", "n/a")],
)
def test_numeric_mismatches(predicted: str, expected: str) -> None:
    assert not score("numeric", predicted, expected)


@pytest.mark.parametrize("metric", METRICS)
def test_none_prediction_scores_false(metric: str) -> None:
    assert not score(metric, None, "18")


def test_unknown_metric() -> None:
    with pytest.raises(ValueError, match="exact"):
        score("fuzzy", "a", "a")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("18", 18.0),
        ("$18.00", 18.0),
        ("1,000", 1000.0),
        ("-$1,234.50 in total", -1234.5),
        ("-7", -7.0),
        ("50%", 50.0),
        (".5", 0.5),
        ("First 3 apples, then 5 pears, so 8.", 8.0),
        ("from 3-5", 5.0),
        ("10 - 4", 4.0),
        ("list 1,2,3", 3.0),
        ("version 1.2.3", 1.2),
    ],
)
def test_parse_number_takes_last_number(text: str, value: float) -> None:
    assert parse_number(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "no digits here", "-", "$"])
def test_parse_number_none(text: str) -> None:
    assert parse_number(text) is None


def test_json_metric_compares_structure():
    assert score("json", '{"a": 1, "b": [1, 2]}', '{ "b": [1,2], "a": 1 }')
    assert not score("json", '{"a": 1}', '{"a": 2}')
    assert not score("json", "not json", '{"a": 1}')
    assert not score("json", None, "{}")
