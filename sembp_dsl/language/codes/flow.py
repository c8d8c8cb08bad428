"""Codes of the flow: E12x branches (conditional edges, the output's alternatives) and maps (`for each`)."""

from .code import Code

TABLE = [
    # E12x: branches (conditional edges, the output's alternatives) and maps (`for each`)
    Code(
        "E120",
        "a condition on a value that is not a choice or a record's field",
        "A branch is decided by a value with known options: a choice output or input, or a field of a\n"
        "record output. Free text has no options to branch on.",
        "node answer: text { prompt = p }\nanswer -> review when answer == Yes",
        "node triage: choice(Yes, No) { prompt = p }\ntriage -> review when triage == Yes",
    ),
    Code(
        "E121",
        "a condition on a value that does not feed its edge",
        "A condition reads a value of the edge statement it ends: one of its sources. Otherwise the value may\n"
        "not be there when the edge is decided.",
        'question -> hard when triage == "Yes"',
        'triage, question -> hard when triage == "Yes"',
    ),
    Code(
        "E122",
        "a condition on an option that does not exist",
        "The option a condition compares with must be one of its value's options, or the branch never (or\n"
        "always) runs.",
        "node triage: choice(Yes, No) { prompt = p }\ntriage -> hard when triage == yes",
        "triage -> hard when triage == Yes",
    ),
    Code(
        "E123",
        "the output may be missing",
        "For some values of the conditions no node the output may come from runs, so that sample would\n"
        "have no answer. The message lists those values.",
        "triage -> hard when triage == Yes\ntriage -> easy when triage == Yes\noutput easy | hard",
        "triage -> easy when triage == No     # a branch for every option\noutput easy | hard",
    ),
    Code(
        "E124",
        "output alternatives of different types",
        "`output easy | hard` scores whichever ran, so every alternative has the output's type.",
        "node easy: text { prompt = p }\nnode hard: number { prompt = q }\noutput easy | hard",
        "node hard: text { prompt = q }",
    ),
    Code(
        "E125",
        "a map over a value that is not a list",
        "`for each item in NAME` runs the node once per item of a list: NAME is a `list[...]` input or node, or\n"
        "a node mapped itself (its value is the list of its runs).",
        "input question: text\nnode note: text for each q in question { prompt = p  max_items = 8 }",
        "input passages: list[text]\nnode note: text for each passage in passages { prompt = p  max_items = 8 }",
    ),
    Code(
        "E126",
        "a map without max_items",
        "A map runs once per item; `max_items` bounds the runs of one sample, which the plan counts (items past\n"
        "it are not run, and counted on the ledger).",
        "node note: text for each passage in passages { prompt = p }",
        "node note: text for each passage in passages { prompt = p  max_items = 8 }",
    ),
    Code(
        "E127",
        "a map over a value that does not feed its node",
        "The list a node maps over is one of its inputs: an edge from it to the node.",
        "node note: text for each passage in passages { prompt = p  max_items = 8 }",
        "passages -> note",
    ),
    Code(
        "E128",
        "a model name with an unknown provider",
        "A model name is `provider/model`, and the provider is one litellm knows (`openai`, `anthropic`,\n"
        "`ollama`, ... and sbpc's `embedded`); `openai/...` with `api_base` reaches any OpenAI-compatible server.\n"
        "A misspelt provider would fail only at the first call.",
        'model forward { name = "opneai/gpt-4o-mini" }',
        'model forward { name = "openai/gpt-4o-mini" }',
    ),
]
