"""`choice(...)` replies: options with punctuation and signed numbers are read as written (issue 7)."""

from __future__ import annotations

import pytest

from sembp_dsl.language.graph.graph import build
from sembp_dsl.language.kinds.model import match_choice, parse_reply
from sembp_dsl.language.syntax.parser import parse


@pytest.mark.parametrize(
    "choices, reply, expected",
    [
        (("(A)", "(B)"), "(A)", "(A)"),
        (("(A)", "(B)"), "(B) because the second option fits", "(B)"),
        (("(A)", "(B)"), "Answer: (B)", "(B)"),
        (("(A)", "(B)"), "**(A)**", "(A)"),
        (("(A)", "(B)"), "A", "(A)"),  # the bare letter still counts
        (("1", "-1"), "-1", "-1"),
        (("1", "-1"), "1", "1"),
        (("1", "-1"), "Final answer: -1.", "-1"),
        (("1", "-1"), "+1", "1"),
        (("1", "2"), "-1", None),  # a negative number is not its absolute value
        (("1", "10"), "10", "10"),
        (("Yes", "No"), "Yes.", "Yes"),
        (("Yes", "No"), "**Answer:** no", "No"),
        (("Yes", "No"), "Yesterday", None),
        (("True", "False"), "- True", "True"),
        (("1", "2"), "1.5", None),  # a decimal part makes another number
        (("1", "2"), "1,5", None),  # ... written with a decimal comma too
        (("1", "2"), "1. Because the first holds", "1"),  # a full stop ends the option
        (("(A)", "(B)"), "The answer is (A)", "(A)"),  # a label before the option is skipped
        (("(A)", "(B)"), "The final answer is: B", "(B)"),
    ],
)
def test_a_reply_matches_the_option_it_starts_with(choices, reply, expected):
    assert match_choice(choices, reply) == expected


def test_parse_reply_reads_punctuated_and_signed_options():
    pipeline = parse(
        'pipeline t\ninput q: text\nnode bbh: choice("(A)", "(B)") {}\nnode sign: choice(1, -1) {}\n'
        "q -> bbh\nq -> sign\noutput bbh\n"
    )
    graph = build(pipeline)
    assert parse_reply(graph.nodes["bbh"], "(A) since the premise holds") == ("(A)", None)
    assert parse_reply(graph.nodes["sign"], "-1") == ("-1", None)
    assert parse_reply(graph.nodes["sign"], "maybe") == (None, "the reply does not start with one of 1, -1")
