"""Codes of the checker's core rules (check/): E02x names, E03x settings and blocks, E04x the graph, the
output, the metric and types, E05x templates."""

from .code import Code

TABLE = [
    # E02x: names
    Code(
        "E020",
        "duplicate declaration",
        "Inputs and nodes share one namespace; params and templates each have their own. A name declared\n"
        "twice in one namespace is an error at the second declaration; a `note:` points at the first.",
        'param p = "x"\nparam p = "y"',
        'param p = "x"\nparam p2 = "y"',
    ),
    Code(
        "E021",
        "reserved word as a name",
        "Inputs and nodes cannot be named after a statement keyword (pipeline, input, param, frozen,\n"
        "template, node, output, metric, from) nor `prompt` and `inputs`, which templates use as variables:\n"
        "an edge statement starting with such a name would read as another statement.",
        "node output: text {}",
        "node answer: text {}",
    ),
    Code(
        "E022",
        "undefined param",
        "A node's `prompt = NAME` names a param that is not declared. A `help:` line names the closest one.",
        'param analyze = "Analyze."\nnode a: text { prompt = analyse }',
        'param analyze = "Analyze."\nnode a: text { prompt = analyze }',
    ),
    Code(
        "E023",
        "undefined template",
        "A node's `template = NAME` names a template that is not declared. A value that looks like a name\n"
        "always refers to a template; inline Jinja must be more than one word.",
        'template judge = "{{ prompt }} {{ q }}"\nnode a: text { template = juge }',
        'template judge = "{{ prompt }} {{ q }}"\nnode a: text { template = judge }',
    ),
    Code(
        "E024",
        "undefined node or input",
        "An edge, or a map's `for each ... in NAME`, names something that is neither an input nor a node.\n"
        "Each misspelt name is reported once per statement, and the node it probably meant gets no template\n"
        "errors on top.",
        "node judge: text {}\nq -> juge",
        "node judge: text {}\nq -> judge",
    ),
    Code(
        "E025",
        "edge into an input",
        "Inputs are the sources of the graph: they read data fields, so nothing can feed them. An edge can\n"
        "only lead into a node.",
        "input q, r: text\nq -> r",
        "input q, r: text\nnode a: text {}\nq, r -> a",
    ),
    Code(
        "E026",
        "output is not a node",
        "`output NAME` names the node whose answer is scored; it must be a declared node, not an input.",
        "node alpha: text {}\noutput alpa",
        "node alpha: text {}\noutput alpha",
    ),
    # E03x: settings and blocks
    Code(
        "E030",
        "unknown setting",
        "A node takes prompt, template and parse; a model block and the optimize block have their own keys\n"
        "(docs/language.md, 3.11 and 3.12). A `help:` line names the closest key, or lists them all.",
        "node a: text { promt = p }",
        "node a: text { prompt = p }",
    ),
    Code(
        "E031",
        "duplicate setting",
        "A key is set twice in one node or block; a `note:` points at the first. Which one should win\n"
        "would be a guess, so it is an error.",
        "optimize { iterations = 3  iterations = 5 }",
        "optimize { iterations = 5 }",
    ),
    Code(
        "E032",
        "value not allowed",
        "The setting takes one of a few names (`parse`: reply or tag; `gradient`: sibling, no_sibling or\n"
        "none; `update`: full or sample; `gate`: val, train or none).",
        "optimize { gradient = sibbling }",
        "optimize { gradient = sibling }",
    ),
    Code(
        "E033",
        "value of the wrong type",
        "The setting takes a string, an integer or a number, and got something else. An integer setting\n"
        'rejects `2.5`, `1e3` and `"3"`.',
        'optimize { iterations = "many" }',
        "optimize { iterations = 5 }",
    ),
    Code(
        "E034",
        "value out of range",
        "Numbers are checked against a range beyond which a run would surely fail or never end:\n"
        "temperature 0 to 2, top_p 0 to 1, iterations 0 to 1,000, gate_alpha above 0 up to 1, and so on\n"
        "(docs/language.md, 3.7).",
        "optimize { train_size = -5 }",
        "optimize { train_size = 20 }",
    ),
    Code(
        "E035",
        "unknown block",
        "A settings block is `model [ROLE] { ... }`, `optimize { ... }` or `data { ... }`.",
        "optimise { iterations = 2 }",
        "optimize { iterations = 2 }",
    ),
    Code(
        "E036",
        "unknown model role",
        "A model block named after a role configures it: forward (running the nodes), backward (feedback on\n"
        "hints) or optimizer (rewriting params). Any other name declares a model of its own, for the nodes\n"
        "that name it (`model = fast`); a block whose name is close to a role and that no node uses is taken\n"
        "for a misspelt role. An unnamed `model { }` block applies to every model.",
        'model fowrard { name = "openai/gpt-4o-mini" }',
        'model forward { name = "openai/gpt-4o-mini" }',
    ),
    Code(
        "E037",
        "named optimize block",
        "There is one set of optimizer settings, so the optimize block takes no name.",
        "optimize fast { iterations = 1 }",
        "optimize { iterations = 1 }",
    ),
    # E04x: graph, output, metric, types
    Code(
        "E040",
        "cycle",
        "A pipeline is a directed acyclic graph: a node cannot feed itself, directly or through others.\n"
        "Each cycle is reported once, as the path that closes it.",
        "q -> a -> b\nb -> a",
        "q -> a -> b",
    ),
    Code(
        "E041",
        "too many edges",
        "The edges of a pipeline declare at most 10,000,000 pairs in all (`a, b -> c, d` is four pairs).\n"
        "Running more would mean a model call per pair and sample.",
        "i0, i1, ..., i4000 -> n0, n1, ..., n4000",
        "Feed a few summarising nodes instead of every pair.",
    ),
    Code(
        "E042",
        "no output",
        "Every pipeline names the node whose answer is scored, with `output NAME`.",
        "node a: text {}\nq -> a",
        "node a: text {}\nq -> a\noutput a",
    ),
    Code(
        "E043",
        "second output",
        "A pipeline has exactly one output statement; a `note:` points at the first.",
        "output a\noutput b",
        "output b",
    ),
    Code(
        "E044",
        "second metric",
        "A pipeline has at most one metric statement; a `note:` points at the first.",
        "metric exact\nmetric numeric",
        "metric numeric",
    ),
    Code(
        "E045",
        "unknown metric",
        "`metric NAME` names the metric scored: a built-in one, exact (normalised string match), numeric\n"
        "(the last number, by value) or json (JSON values compared), or one the file defines.",
        "metric fuzzy",
        "metric exact",
    ),
    Code(
        "E046",
        "metric does not fit the output type",
        "`metric numeric` compares numbers, so the output node must be of type number.",
        "node a: text {}\noutput a\nmetric numeric",
        "node a: number {}\noutput a\nmetric numeric",
    ),
    Code(
        "E047",
        "choice lists an option twice",
        "The options of `choice(...)` are the answers a reply can start with; each must be distinct.",
        "node a: choice(Yes, No, Yes) {}",
        "node a: choice(Yes, No) {}",
    ),
    Code(
        "E048",
        "empty choice option",
        "A choice option cannot be empty (or only spaces): every reply would start with it.",
        'node a: choice("", No) {}',
        "node a: choice(Yes, No) {}",
    ),
    # E05x: templates
    Code(
        "E050",
        "template syntax",
        "A template (or a param, which is rendered as Jinja2 when it holds `{`) does not compile: an\n"
        "unclosed tag, an unknown filter, nesting too deep for Python. The error points at its line.",
        'template t = "{% if q %}{{ q }}"',
        'template t = "{% if q %}{{ q }}{% endif %}"',
    ),
    Code(
        "E051",
        "template loads another file",
        "`{% include %}`, `{% import %}` and `{% extends %}` are refused: pipeline files come from\n"
        "strangers, and a pipeline's templates live in its own file.",
        "template t = \"{% include 'other.j2' %}\"",
        'template t = """\n  {{ prompt }}\n  Question: {{ q }}\n  """',
    ),
    Code(
        "E052",
        "template cannot render",
        "The checker renders every template with placeholder values, twice. A template that fails both\n"
        "ways, or goes over a limit of work or size, cannot work with any data.",
        'template t = "{{ 1/0 }}"',
        'template t = "{{ q }}"',
    ),
    Code(
        "E053",
        "template uses a variable the node does not receive",
        "A node's template sees `prompt` and the name of each predecessor; a variable that is neither is\n"
        "undefined at run time. The message lists what the node receives; add an edge or fix the name.",
        'template t = "{{ prompt }} {{ speaker }}"\nnode a: text { prompt = p  template = t }\nq -> a',
        'template t = "{{ prompt }} {{ speaker }}"\nnode a: text { prompt = p  template = t }\nq, speaker -> a',
    ),
    Code(
        "E054",
        "template uses {{ prompt }} but the node has no prompt",
        "A template that reads `{{ prompt }}` needs its node to say which param fills it.",
        'template t = "{{ prompt }} {{ q }}"\nnode a: text { template = t }',
        'param p = "Answer."\ntemplate t = "{{ prompt }} {{ q }}"\nnode a: text { prompt = p  template = t }',
    ),
    Code(
        "E055",
        "param uses a variable the node does not receive",
        "A param holding `{` is rendered with its node's variables before the template is; each node that\n"
        "uses it must receive every name it reads.",
        'param p = "Judge {{ speaker }}."\nnode a: text { prompt = p }\nq -> a',
        'param p = "Judge {{ speaker }}."\nnode a: text { prompt = p }\nq, speaker -> a',
    ),
    Code(
        "E056",
        "built-in template override uses a variable it is not given",
        "A template named loss, backward, backward_no_sibling or optimizer replaces the built-in one and is\n"
        "given that template's variables only (docs/language.md, 4.3).",
        'template loss = "{{ expected }} {{ score }}"',
        'template loss = "The answer should be {{ expected }}."',
    ),
    Code(
        "E057",
        "param too long",
        "A param is rendered into every prompt of its nodes; one longer than the output limit of a render\n"
        "(16,000,000 characters) could never be sent.",
        'param p = "xxxx...(20 MB)..."',
        "Keep prompts short; data belongs in inputs.",
    ),
]
