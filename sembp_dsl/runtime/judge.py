"""An LLM judge: a metric the file defines (`metric quality { model = strong  prompt = rubric  scale = 1..5 }`).

It shows its model the task, the sample's inputs, the output scored, the reference answer when the data has one,
and the rubric (a frozen param, rendered with the inputs, `output` and `expected`), and reads a record reply,
`{reason: text, score: number}`, constrained and parsed as any record output is (language/nodes/shapes.py). The score
on its scale becomes a score from 0 to 1; the reason is the loss feedback the backward pass starts from. Its
calls are booked to the role "judge", on the model it names (default: the forward model).
"""

from __future__ import annotations

import json

from jinja2 import TemplateError

from ..language import ir
from ..language.graph.graph import Graph, MetricSpec
from ..language.nodes.shapes import describe as describe_fields
from ..language.nodes.shapes import node_shape, read_record
from ..language.nodes.trace import NodeTrace, Trace
from ..models.llm import LLM, CallFailed
from .datasets import Sample
from .evaluate import MetricFailed, Scorer, Verdict

JUDGE_ROLE = "judge"
_BUILT_IN = ir.Span("<judge>", 1, 1, 1, 1, 0, 0)
VERDICT = ir.OutputType(
    "record",
    fields=tuple(
        ir.Field(name, ir.OutputType(kind, span=_BUILT_IN), span=_BUILT_IN)
        for name, kind in (("reason", "text"), ("score", "number"))
    ),
    span=_BUILT_IN,
)


def judge(graph: Graph, llm: LLM, spec: MetricSpec) -> Scorer:
    """The judge `spec` as a metric: one call per answer scored; a failed call, an unreadable reply or a score off
    its scale leaves that sample unscored (MetricFailed), with why."""
    shape = node_shape(VERDICT)
    low, high = spec.scale

    async def score(trace: Trace, sample: Sample, expected: str) -> Verdict:
        held = llm.capabilities(spec.model).holds(shape)
        fields = "" if held else describe_fields(VERDICT)  # no JSON Schema reaches the model: the fields in words
        try:
            prompt = graph.judge_question(spec, trace.inputs, trace.output or "", expected, fields)
        except TemplateError as exc:
            raise MetricFailed(f"judge '{spec.name}': its rubric does not render for this sample: {exc}") from None
        try:
            completion = await llm.complete(JUDGE_ROLE, prompt, shape, model=spec.model)
        except CallFailed as exc:
            raise MetricFailed(f"judge '{spec.name}': its call failed: {exc}") from None
        read, problem = read_record(VERDICT, completion.text)
        judged = NodeTrace(
            f"{JUDGE_ROLE} {spec.name}",
            prompt,
            completion.text,
            read,
            problem,
            completion.prompt_tokens,
            completion.completion_tokens,
            completion.latency,
            completion.cached,
            cost=completion.cost,
        )
        if read is None:
            raise MetricFailed(
                f"judge '{spec.name}': its reply could not be read ({problem}): {completion.text[:200]!r}", judged
            )
        verdict = json.loads(read)
        value = verdict["score"]
        if not low <= value <= high:
            raise MetricFailed(f"judge '{spec.name}' gave {value}, off its scale {spec.scale_text}", judged)
        return Verdict((value - low) / (high - low), verdict["reason"].strip() or None, judged)

    return score
