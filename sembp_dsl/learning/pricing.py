"""What a pipeline costs to run, per 1,000 samples: the objective `cost` makes cheaper, and what a run reports
before and after.

Measured, not declared: each model node's tokens on the samples an evaluation scored, priced at the node's model by
litellm's table (a cached answer is priced as if it were asked, since a deployed pipeline would ask it).
"""

from __future__ import annotations

from ..language.graph import Graph
from ..models.llm import LLM
from ..runtime.evaluate import Evaluation


def per_thousand(graph: Graph, llm: LLM, evaluation: Evaluation) -> float | None:
    """Dollars 1,000 samples would cost, by the mean tokens each model node took on the scored samples; None when
    none was scored or a model has no price."""
    results = [r for r in evaluation.results if not r.lost]
    if not results:
        return None
    total = 0.0
    for node in graph.model_nodes:
        calls = [call for r in results if (trace := r.trace.nodes.get(node.name)) for call in (trace, *trace.items)]
        price = llm.price(node.model, sum(c.prompt_tokens for c in calls), sum(c.completion_tokens for c in calls))
        if price is None:
            return None
        total += price
    return 1000 * total / len(results)
