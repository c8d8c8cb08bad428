"""Codes of what training and scoring read: E09x demonstrations (demos params), E10x metrics the file defines."""

from .code import Code

TABLE = [
    # E09x: demonstrations (demos params)
    Code(
        "E090",
        "not a demos param",
        "A node's `demos = NAME` must name a demos param (`demos NAME = [...]`): the examples shown to it.\n"
        "The name is undefined, or it is a text param.",
        'param shots = "Q: 1+1 A: 2"\nnode answer: text { demos = shots }',
        "demos shots max 3 = []\nnode answer: text { demos = shots }",
    ),
    Code(
        "E091",
        "demos never shown",
        "The node has demos, but its template (and its system message) never names them, so no example\n"
        "would reach the model. Put `{{ NAME }}` where the examples belong (or loop over them:\n"
        "`{% for ex in NAME %}...{{ ex.question }}...{% endfor %}`). A node without a template shows them\n"
        "between its prompt and its inputs.",
        'template t = "{{ prompt }}\nQuestion: {{ question }}"\nnode answer: text { prompt = task  template = t  demos = shots }',
        'template t = "{{ prompt }}\n{{ shots }}\nQuestion: {{ question }}"\n'
        "node answer: text { prompt = task  template = t  demos = shots }",
    ),
    Code(
        "E092",
        "demos on a function node",
        "A function node calls Python, not a model: there is no prompt to show examples in. Give the demos\n"
        "to the node that reads the function's output.",
        "node passages: json { function = search  demos = shots }",
        "node passages: json { function = search }\nnode answer: text { prompt = task  demos = shots }",
    ),
    Code(
        "E093",
        "demos used as text",
        "A demos param holds examples, not text: it cannot be a node's `prompt` or `system`, and a template\n"
        "may show only the demos of its own node (`demos = NAME`), whose inputs and output they are.",
        "node answer: text { prompt = shots }",
        "node answer: text { prompt = task  demos = shots }",
    ),
    Code(
        "E094",
        "demos shared by two nodes",
        "The examples of a demos param are one node's inputs and output, and the optimizer picks them from\n"
        "what that node saw and answered; so a demos param belongs to one node. Declare one for each.",
        "node a: text { demos = shots }\nnode b: text { demos = shots }",
        "node a: text { demos = shots_a }\nnode b: text { demos = shots_b }",
    ),
    Code(
        "E095",
        "bad demos max",
        "`max` is how many examples the optimizer may put in a demos param: a whole number, 1 or more.",
        "demos shots max 0 = []",
        "demos shots max 3 = []",
    ),
    Code(
        "E096",
        "example gives an unknown field",
        "An example gives a field its node neither receives nor answers. An example of node `answer` fed by\n"
        "`question` gives `question` and `answer`, exactly.",
        'demos shots = [{qestion: "1+1?", answer: "2"}]',
        'demos shots = [{question: "1+1?", answer: "2"}]',
    ),
    Code(
        "E097",
        "example lacks a field",
        "An example must give each input of its node and the node's output (the node's name), so the\n"
        "model sees a whole case: what came in and what came out.",
        'demos shots = [{question: "1+1?"}]',
        'demos shots = [{question: "1+1?", answer: "2"}]',
    ),
    Code(
        "E098",
        "example gives a field twice",
        "An example gives the same field twice; a `note:` points at the first.",
        'demos shots = [{question: "1+1?", answer: "2", answer: "3"}]',
        'demos shots = [{question: "1+1?", answer: "2"}]',
    ),
    Code(
        "E099",
        "more examples than max",
        "A demos param holds more examples than its `max` (4 when a trainable one sets none), so it could\n"
        "never be written back as it is.",
        'demos shots max 1 = [{question: "1+1?", answer: "2"}, {question: "2+2?", answer: "4"}]',
        'demos shots max 2 = [{question: "1+1?", answer: "2"}, {question: "2+2?", answer: "4"}]',
    ),
    # E10x: metrics the file defines
    Code(
        "E100",
        "a metric defined with a built-in's name",
        "exact, numeric and json are the built-in metrics; a metric the file defines (a judge, a function)\n"
        "needs a name of its own, so that `metric NAME` and `--metric NAME` say which one scores.",
        'metric exact = "metrics:overlap"',
        'metric overlap = "metrics:overlap"',
    ),
    Code(
        "E101",
        "a judge without a rubric",
        "An LLM judge grades each answer by a rubric: a frozen param it names with `prompt`. Without one it\n"
        "would grade by nothing.",
        "metric quality { model = strong }",
        'frozen param rubric = "Full marks for a polite reply that answers the question."\n'
        "metric quality { model = strong  prompt = rubric }",
    ),
    Code(
        "E102",
        "a judge's scale is not LOW..HIGH",
        "`scale` says what scores the judge gives, `LOW..HIGH` with LOW below HIGH (default 0..1); a score\n"
        "of S counts (S - LOW) / (HIGH - LOW), so 4 on 1..5 is 0.75.",
        "metric quality { prompt = rubric  scale = 5..1 }",
        "metric quality { prompt = rubric  scale = 1..5 }",
    ),
    Code(
        "E103",
        "a judge's rubric is trainable",
        "The optimizer keeps a step when the metric scores it higher. If it could rewrite the rubric too, the\n"
        "easiest step would be a more lenient rubric: every score rises and no answer improves. So sbpc does\n"
        "not optimize a judge: its rubric must be a frozen param.",
        'param rubric = "Full marks for a polite reply."\nmetric quality { prompt = rubric }',
        'frozen param rubric = "Full marks for a polite reply."\nmetric quality { prompt = rubric }',
    ),
    Code(
        "E104",
        "a rubric uses a name a judge cannot read",
        "A rubric is a template too: it may use the pipeline's inputs, `output` (the answer graded) and\n"
        "`expected` (the data's reference answer), nothing else.",
        'frozen param rubric = "Does {{ reply }} answer {{ question }}?"',
        'frozen param rubric = "Does {{ output }} answer {{ question }}?"',
    ),
    Code(
        "E105",
        "a function metric not named as module:function",
        'A function metric names a Python function as "module:function", the module beside the pipeline\n'
        "file (metrics.py for `metrics`). It is imported only when a run scores with it, never by `check`.",
        'metric overlap = "metrics.overlap"',
        'metric overlap = "metrics:overlap"',
    ),
]
