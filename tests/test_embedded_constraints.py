"""The embedded model under its grammars: llama.cpp takes every grammar sbpc emits, and each constrained
reply parses, whatever the small model would have written unconstrained.

Skipped when the embedded model is not installed. About a minute on 2 busy cores.
"""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest

from sembp_dsl.language import ir
from sembp_dsl.language.graph.graph import ModelSpec
from sembp_dsl.language.kinds.model import parse_reply
from sembp_dsl.language.nodes.node import GraphNode
from sembp_dsl.language.nodes.shapes import hints_shape, node_shape, prompt_shape
from sembp_dsl.learning.backward import hint_lines
from sembp_dsl.learning.descent import extract
from sembp_dsl.models import embedded
from sembp_dsl.models.llm import LLM

pytestmark = [
    pytest.mark.slow,  # the real model
    pytest.mark.skipif(not embedded.available(), reason="embedded model not installed"),
]


def ask(prompt: str, shape, max_tokens: int, **settings):
    spec = ModelSpec(
        "forward", embedded.MODEL, MappingProxyType({"temperature": 0, "max_tokens": max_tokens, **settings})
    )
    llm = LLM({"forward": spec})
    return llm.run(llm.complete("forward", prompt, shape)), llm


def typed(kind: str, choices: tuple[str, ...] = (), parse: str = "reply") -> GraphNode:
    return GraphNode("n", ir.OutputType(kind, choices, span=None), None, "", parse, (), (), (), ())


def listed(item: ir.OutputType) -> GraphNode:
    return GraphNode("n", ir.OutputType("list", item=item, span=None), None, "", "reply", (), (), (), ())


VERDICT = ir.OutputType(
    "record",
    fields=(
        ir.Field("answer", ir.OutputType("choice", ("Yes", "No"), span=None), span=None),
        ir.Field("n", ir.OutputType("number", span=None), span=None),
    ),
    span=None,
)

CASES = [
    (typed("choice", ("Yes", "No")), "Is the sky green? Think about it carefully and explain.", 48),
    (typed("choice", ("(A)", "(B)", "(C)")), "Which animal barks? Options: (A) cat (B) dog (C) fish.", 48),
    (typed("number"), "Tom has 3 apples and buys 4 more. How many apples does he have?", 96),
    (typed("json"), "Give the name and the age of a person as a JSON object with the keys name and age.", 96),
    (typed("text", parse="tag"), "Which is larger, 3 or 5? Put the answer in <output></output>.", 64),
    (typed("number", parse="tag"), "What is 6 times 7? Put the number in <output></output>.", 64),
    (typed("choice", ("Yes", "No"), parse="tag"), "Is 7 a prime number? Put Yes or No in <output></output>.", 64),
    (listed(ir.OutputType("number", span=None)), "Name the first three prime numbers.", 64),
    (listed(VERDICT), "Is 2 even? Is 3 even? Answer each, with the number.", 96),
]


@pytest.mark.parametrize("node, prompt, max_tokens", CASES, ids=lambda c: str(getattr(c, "type", "")) or None)
def test_a_constrained_reply_of_each_type_parses(node, prompt, max_tokens):
    completion, llm = ask(prompt, node_shape(node.type, node.parse), max_tokens)
    shape = node_shape(node.type, node.parse)
    output, error = parse_reply(node, completion.text)
    assert error is None and output, completion.text  # in shape, even where a part ran to its bound
    # a part the grammar closed at its bound was cut there, and the completion says so as max_tokens would
    assert completion.finish_reason == ("length" if shape.ran_out(completion.text, max_tokens) else "stop")
    assert llm.ledger.counters["constrained replies (grammar)"] == 1
    if node.type.kind == "json":
        assert isinstance(json.loads(output), (dict, list))
    if node.type.kind == "list":  # an array of the item type, never an object: every item read as that type
        assert isinstance(json.loads(output), list) and completion.text.lstrip().startswith("["), completion.text


def test_backward_and_optimizer_replies_are_in_shape_within_their_max_tokens():
    hints, _ = ask(
        "Three helpers wrote about the colour of the sky: 'green', 'red', 'blue'. For each, say how it should change.",
        hints_shape(3),
        60,
    )
    assert sorted(hint_lines(hints.text, 3)) == [1, 2, 3], hints.text
    assert hints.finish_reason == ("length" if hints_shape(3).ran_out(hints.text, 60) else "stop")
    ask_for_prompt = 'Improve this instruction: "Analyze the party of the speaker." Reply inside <prompt>...</prompt>.'
    block, _ = ask(ask_for_prompt, prompt_shape(800), 60)
    new, reason = extract(block.text, block.finish_reason)
    # a block the model ended is a candidate; one the grammar closed at its bound (SmolLM2 runs on to it at any
    # max_tokens tried, 60 to 250) is a fragment, never a candidate
    assert (reason is None and new) if block.finish_reason == "stop" else reason.startswith("cut off"), block.text
    # 8 tokens leave the prompt 7 characters: the grammar closes the block there, mid-word, whatever the model
    cut, _ = ask(ask_for_prompt, prompt_shape(800), 8)
    assert cut.text.startswith("<prompt>") and cut.text.endswith("</prompt>") and cut.finish_reason == "length"
    new, reason = extract(cut.text, cut.finish_reason)
    assert new is None and reason.startswith("cut off"), cut.text


def test_off_sends_no_grammar_and_the_cache_keeps_them_apart(tmp_path):
    """`constrain = off`: the small model writes as it likes (here: no option first)."""
    from sembp_dsl.models.cache import ResponseCache

    node = typed("choice", ("Yes", "No"))
    prompt = "Is the sky green? Think about it carefully and explain."
    spec = lambda **extra: ModelSpec(  # noqa: E731
        "forward", embedded.MODEL, MappingProxyType({"temperature": 0, "max_tokens": 24, **extra})
    )
    cache = ResponseCache(tmp_path / "c.sqlite")
    on, off = LLM({"forward": spec()}, cache=cache), LLM({"forward": spec(constrain="off")}, cache=cache)
    shape = node_shape(node.type)
    constrained = on.run(on.complete("forward", prompt, shape))
    free = off.run(off.complete("forward", prompt, shape))
    assert not free.cached and "constrained replies (grammar)" not in off.ledger.counters
    assert parse_reply(node, constrained.text)[1] is None
    assert free.text != constrained.text


def test_every_grammar_of_the_shipped_pipelines_is_taken_by_llama_cpp():
    """llama.cpp parses each grammar `sbpc compile --emit constraints` shows for the shipped pipelines (one
    it could not parse would fail every call): one token is sampled under each."""
    from conftest import ROOT

    from sembp_dsl.language.graph.compile import compile_file
    from sembp_dsl.models.constraints import replies

    grammars = set()
    for name in ("liar", "gsm8k", "bbh"):
        graph = compile_file(str(ROOT / f"pipelines/{name}.sbp"))
        for reply in replies(graph):
            grammars.add(reply.shape.grammar(graph.models[reply.model].settings.get("max_tokens")))
    assert len(grammars) >= 6
    for grammar in grammars:
        reply = embedded.generate([{"role": "user", "content": "Hello"}], grammar=grammar, max_tokens=1, temperature=0)
        assert reply["usage"]["completion_tokens"] == 1
