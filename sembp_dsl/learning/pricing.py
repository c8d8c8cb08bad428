"""What a pipeline costs to run, per 1,000 samples: the objective `cost` makes cheaper, and what a run reports
before and after.

Measured, not declared: each model node's tokens on each sample an evaluation scored, priced at the node's model
by its declared prices or litellm's table (a cached answer is priced as if it were asked, since a deployed
pipeline would ask it). Two pipelines are compared on the samples both ran (records/costs.py).
"""

from __future__ import annotations

from ..language.graph.graph import Graph
from ..models.llm import LLM
from ..runtime.evaluate import Evaluation


def sample_costs(graph: Graph, llm: LLM, evaluation: Evaluation) -> dict[str, float] | None:
    """Dollars each scored sample cost the pipeline, by the tokens each of its model nodes took on it (every item
    of a mapped node, every turn of a tool loop); None when a model has no price."""
    costs: dict[str, float] = {}
    for result in evaluation.results:
        if result.lost:
            continue
        total = 0.0
        for node in graph.model_nodes:
            trace = result.trace.nodes.get(node.name)
            calls = (trace, *trace.items) if trace is not None else ()
            price = llm.price(node.model, sum(c.prompt_tokens for c in calls), sum(c.completion_tokens for c in calls))
            if price is None:
                return None
            total += price
        costs[result.sample.id] = total
    return costs
