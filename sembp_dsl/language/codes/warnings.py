"""Warnings (W0xx): what still compiles, but is likely not what was meant (W035-W037, of a tool, are the tool
loop's own: language/kinds/agent/codes.py)."""

from .code import Code

TABLE = [
    # W00x: warnings
    Code(
        "W001",
        "unused param",
        "No node uses this param as its prompt, so it is never sent nor optimized.",
        'param unused = "x"',
        "node a: text { prompt = unused }      # or delete the param",
    ),
    Code(
        "W002",
        "unused template",
        "No node uses this template, and it does not override a built-in one.",
        'template orphan = "{{ q }}"',
        "node a: text { template = orphan }    # or delete the template",
    ),
    Code(
        "W003",
        "unused input",
        "No edge leads from this input, so no node sees its value.",
        "input q, extra: text\nq -> a",
        "input q, extra: text\nq, extra -> a",
    ),
    Code(
        "W004",
        "node cannot reach the output",
        "No path leads from this node to the output, so its answer never counts; it still costs a call\nper sample.",
        "q -> a\nq -> stray\noutput a",
        "q -> stray -> a\noutput a",
    ),
    Code(
        "W005",
        "edge declared twice",
        "The same pair is declared twice; the repeat is ignored (edge order sets hint numbers, so the first\n"
        "declaration counts). A `note:` points at the first.",
        "q -> a\nq -> a",
        "q -> a",
    ),
    Code(
        "W006",
        "template may not render",
        "The template failed with one set of placeholder values but not the other, so it depends on the\n"
        "data: a sample it fails on becomes that sample's error at run time.",
        'template t = "{{ 10 / (q|int) }}"',
        "template t = \"{{ 10 / (q|int) if q|int else 'n/a' }}\"",
    ),
    Code(
        "W007",
        "the answer format lives only in a trainable param",
        "The output node answers with one of its options, and only a param the optimizer may rewrite says\n"
        "so. A candidate that drops that sentence makes every answer unreadable: the gate rejects it, and\n"
        "the step is lost. Say how to answer where the optimizer cannot change it.",
        'param verdict_task = "Is the claim true? Answer Yes or No."\nnode verdict: choice(Yes, No) { prompt = verdict_task }',
        'param verdict_task = "Is the claim true?"\ntemplate judge = """\n  {{ prompt }}\n  Claim: {{ q }}\n  Answer Yes or No."""\n'
        "node verdict: choice(Yes, No) { prompt = verdict_task  template = judge }",
    ),
    Code(
        "W008",
        "unused model",
        "No node (nor judge) names this model (`model = NAME`), so no call goes to it.",
        'model spare { name = "openai/gpt-4o" }',
        "node judge: text { prompt = p  model = spare }     # or delete the block",
    ),
    Code(
        "W009",
        "function module not beside the pipeline",
        "The module is not in the pipeline's folder, so `run`, `eval` and `optimize` refuse to import it (E083)\n"
        "unless the user allows it by name. `sbpc check --allow-module NAME` checks as such a run would.",
        'function run = "os:system"',
        'function search = "tools:search"     # tools.py beside the pipeline',
    ),
    Code(
        "W010",
        "unused function",
        "No node names this function (`function = NAME`), so it is never imported nor called.",
        'function search = "tools:search"',
        "node passages: json { function = search }     # or delete the declaration",
    ),
    Code(
        "W011",
        "max on frozen demos",
        "A frozen demos param keeps the examples written in the file; the optimizer picks none, so its\n"
        "`max` only bounds the examples you wrote.",
        "frozen demos shots max 3 = [...]",
        "frozen demos shots = [...]     # or drop `frozen` to let the optimizer pick them",
    ),
    Code(
        "W012",
        "frozen demos without examples",
        "A frozen demos param with no examples shows its node nothing, and the optimizer may not fill it.",
        "frozen demos shots = []",
        'frozen demos shots = [{question: "1+1?", answer: "2"}]     # or drop `frozen`',
    ),
    Code(
        "W013",
        "remote nodes learn from the embedded model",
        "The nodes call a remote model, but no model is named for backward or optimizer, so those roles fall\n"
        "to the embedded model (SmolLM2, 135M parameters): far too small to critique or rewrite the prompts of\n"
        "a larger model. sbpc warns rather than picking a model for them: it cannot rank models, and choosing a\n"
        "paid one would spend unasked. `optimize --plan` and the start of every run say it.",
        'node a: text { prompt = p  model = fast }\nmodel fast { name = "openai/gpt-4o" }',
        'node a: text { prompt = p  model = fast }\nmodel fast { name = "openai/gpt-4o" }\n'
        'model backward { name = "openai/gpt-4o" }\nmodel optimizer { name = "openai/gpt-4o" }',
    ),
    Code(
        "W020",
        "a branch that never runs",
        "No values of the conditions let this node run: its conditions contradict each other along every path\n"
        "to it, so it is never called and never learns.",
        "triage -> a when triage == Yes\na, triage -> b when triage == No",
        "triage -> b when triage == No",
    ),
]
