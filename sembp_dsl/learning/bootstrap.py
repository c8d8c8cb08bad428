"""Training samples answered right -> demonstrations. The demos half of a step.

As DSPy's BootstrapFewShot does, an example is what a node saw and said on a training sample the whole
pipeline got right: the values of its inputs and its own parsed output, taken from the forward pass the
iteration already ran (no call is made here). Each iteration proposes, for every trainable demos param, a
set of up to its `max` such examples drawn at random; the set then goes through the gate with the step's
other candidates, so it is kept only when the pipeline with it beats the pipeline without it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..language.demos import as_text, from_text
from ..language.graph import Graph
from ..records.record import Proposal
from ..runtime.evaluate import Result


@dataclass(frozen=True)
class DemosCandidate:
    param: str
    new: str | None  # the set, as the graph holds it (demos.as_text); None when there is none to try
    reason: str | None  # why there is none
    samples: tuple[str, ...] = ()  # the training samples its examples come from, in its order

    def proposal(self, fate: str) -> Proposal:
        """As the run record keeps it, with its fate."""
        return Proposal(self.param, fate, self.new, None, list(self.samples))


def pool(graph: Graph, param: str, results: Sequence[Result]) -> list[tuple[str, dict[str, str]]]:
    """(sample id, example) for every training sample the pipeline got right whose node answered in its type, in
    full, in the split's order; a sample that repeats another's example is left out. An answer whose text a length
    limit cut off is no example: it would be written into the user's file as it was cut."""
    node = graph.nodes[graph.demos[param].node]
    seen, out = set(), []
    for result in results:
        trace = result.trace.nodes.get(node.name)
        if not result.correct or trace is None or trace.output is None or (trace.cut_off and node.type.free_text):
            continue
        values = result.trace.values
        example = {**{name: str(values[name]) for name in node.inputs}, node.name: trace.output}
        key = json.dumps(example, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append((result.sample.id, example))
    return out


def propose_demos(graph: Graph, param: str, results: Sequence[Result], rng: random.Random) -> DemosCandidate:
    """A new set for a demos param: up to its max examples from the training samples answered right."""
    found = pool(graph, param, results)
    if not found and any(result.correct for result in results):
        return DemosCandidate(param, None, "no sample answered right gave a whole example (unreadable, or cut off)")
    if not found:
        return DemosCandidate(param, None, "no training sample was answered right, so no example to take")
    chosen = rng.sample(found, min(graph.demos[param].max, len(found)))
    new = as_text([example for _, example in chosen])
    if sorted(map(json.dumps, from_text(new))) == sorted(map(json.dumps, from_text(graph.prompts[param]))):
        return DemosCandidate(param, None, "the examples it holds already", tuple(s for s, _ in chosen))
    return DemosCandidate(param, new, None, tuple(sample for sample, _ in chosen))
