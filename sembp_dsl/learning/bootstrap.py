"""Training samples answered right -> demonstrations. The demos half of a step.

As DSPy's BootstrapFewShot does, an example is what a node saw and said on a training sample the whole
pipeline got right: the values of its inputs and its own parsed output, taken from the forward pass the
iteration already ran (no call is made here). Each iteration proposes, for every trainable demos param, a
set of up to its `max` such examples drawn at random; the set then goes through the gate with the step's
other candidates, so it is kept only when the pipeline with it beats the pipeline without it.

When no training sample was answered right (a weak model on a small split), the output node's examples are
labelled ones, as DSPy's LabeledFewShot gives: what the node saw on a training sample, and the sample's own
expected answer, gated the same way.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..language.diagnostics import bad_characters
from ..language.graph.graph import Graph
from ..language.nodes.demos import as_text, from_text
from ..language.nodes.outputs import answer_is_output
from ..records.record import Proposal
from ..runtime.evaluate import Result


@dataclass(frozen=True)
class DemosCandidate:
    param: str
    new: str | None  # the set, as the graph holds it (demos.as_text); None when there is none to try
    reason: str | None  # why there is none
    samples: tuple[str, ...] = ()  # the training samples its examples come from, in its order
    left_out: tuple[str, ...] = ()  # "sample: why" for each example answered right that the file cannot hold

    def proposal(self, fate: str) -> Proposal:
        """As the run record keeps it, with its fate."""
        return Proposal(self.param, fate, self.new, None, list(self.samples), left_out=list(self.left_out))


@dataclass(frozen=True)
class Pool:
    """The examples a demos param may draw: (sample id, example), and those left out as "sample: why"."""

    examples: list[tuple[str, dict[str, str]]]
    left_out: tuple[str, ...]


def pool(graph: Graph, param: str, results: Sequence[Result]) -> Pool:
    """(sample id, example) for every training sample the pipeline got right whose node answered in its type, in
    full, in the split's order; a sample that repeats another's example is left out. An answer whose text a length
    limit cut off is no example: it would be written into the user's file as it was cut. Nor is one holding what
    a pipeline file cannot (a control character, a lone surrogate): writing the run's result back would fail."""
    node = graph.nodes[graph.demos[param].node]
    examples = []
    for result in results:
        trace = result.trace.nodes.get(node.name)
        if not result.correct or trace is None or trace.output is None or (trace.cut_off and node.type.free_text):
            continue
        values = result.trace.values
        examples.append(
            (result.sample.id, {**{name: str(values[name]) for name in node.inputs}, node.name: trace.output})
        )
    return pooled(examples)


def labelled(graph: Graph, param: str, results: Sequence[Result]) -> Pool:
    """(sample id, example) of the training samples, each what the output node saw and the sample's own expected
    answer, for a demos param of the output node (not of a record's field: no whole record to show); an answer the
    node could not give (a choice it does not offer) is none, nor is a sample an earlier node's failure left
    without every value the node reads."""
    node = graph.nodes[graph.demos[param].node]
    if node.name != graph.output or graph.output_field:
        return Pool([], ())
    examples = []
    for result in results:
        values, expected = result.trace.values, result.expected
        if not answer_is_output(node.type, expected) or any(name not in values for name in node.inputs):
            continue
        examples.append((result.sample.id, {**{name: str(values[name]) for name in node.inputs}, node.name: expected}))
    return pooled(examples)


def pooled(examples: Sequence[tuple[str, dict[str, str]]]) -> Pool:
    """(sample id, example) pairs as a pool: each example once, and one holding characters a prompt cannot carry
    left out, saying why."""
    seen, out, left_out = set(), [], []
    for sample, example in examples:
        bad = next(
            (f"{sample}: {name}: {why}" for name, text in example.items() if (why := bad_characters(text))), None
        )
        key = json.dumps(example, sort_keys=True)
        if bad is not None:
            left_out.append(bad)
        elif key not in seen:
            seen.add(key)
            out.append((sample, example))
    return Pool(out, tuple(left_out))


def ran(result: Result, node: str) -> bool:
    trace = result.trace.nodes.get(node)
    return trace is not None and trace.taken


def propose_demos(graph: Graph, param: str, results: Sequence[Result], rng: random.Random) -> DemosCandidate:
    """A new set for a demos param: up to its max examples from the training samples answered right; with none
    answered right, labelled examples (`labelled`) for the output node's."""
    found = pool(graph, param, results)
    if not any(result.correct for result in results):
        found = labelled(graph, param, results)
    if not found.examples and found.left_out:
        why = "every example answered right holds what the pipeline file cannot hold"
        return DemosCandidate(param, None, why, left_out=found.left_out)
    right = [result for result in results if result.correct]
    node = graph.demos[param].node
    if not found.examples and right and not any(ran(result, node) for result in right):
        return DemosCandidate(param, None, f"'{node}' ran on no training sample answered right (a branch passed it by)")
    if not found.examples and right:
        return DemosCandidate(param, None, "no sample answered right gave a whole example (unreadable, or cut off)")
    if not found.examples:
        return DemosCandidate(
            param,
            None,
            "no training sample was answered right, and none gives a labelled example (its answer is the output "
            "node's only when the node gives the whole output, as text or one of its choices)",
        )
    chosen = rng.sample(found.examples, min(graph.demos[param].max, len(found.examples)))
    new = as_text([example for _, example in chosen])
    samples = tuple(sample for sample, _ in chosen)
    if sorted(map(json.dumps, from_text(new))) == sorted(map(json.dumps, from_text(graph.prompts[param]))):
        return DemosCandidate(param, None, "the examples it holds already", samples, found.left_out)
    return DemosCandidate(param, new, None, samples, found.left_out)
