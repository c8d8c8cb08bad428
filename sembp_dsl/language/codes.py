"""Every diagnostic's stable code, with what `sbpc explain CODE` prints: a paragraph, a bad example, the fix.

Codes never change meaning once published: `E0xx` are errors (the file cannot be compiled), `W0xx` warnings.
A new check takes a new code; a check that goes away leaves its code unused. The ranges group the stages:
E00x syntax and strings, E01x files, E02x names, E03x settings and blocks, E04x graph, output and metric,
E05x templates, E06x the YAML form, E07x models (blocks and the nodes that name them), system messages and
record outputs, E08x function nodes (Python code in the graph), E09x demonstrations (demos params), E10x
metrics the file defines (a judge, a function), E11x nodes that call tools, E12x branches and maps, E13x data
named in the file (E136-E138: what optimize may change and what models cost; E139-E140: each split's own
data file), E15x code the file names, read before it runs, E16x data a run would refuse, E17x tools
from MCP servers; W0xx warnings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    code: str
    title: str  # what went wrong, in a few words: the list `sbpc explain` prints
    explanation: str
    example: str  # a file (or command) that gets this diagnostic
    fix: str  # the same, fixed (or what to do)

    @property
    def severity(self) -> str:
        return "warning" if self.code.startswith("W") else "error"

    def render(self) -> str:
        """The page `sbpc explain CODE` prints."""
        indent = "\n".join("    " + line if line else "" for line in self.example.split("\n"))
        fixed = "\n".join("    " + line if line else "" for line in self.fix.split("\n"))
        return (
            f"{self.code}: {self.title} ({self.severity})\n\n{self.explanation}\n\n"
            f"For example:\n\n{indent}\n\nFix:\n\n{fixed}\n"
        )


_CODES = [
    # E00x: syntax and strings
    Code(
        "E001",
        "unexpected token",
        "The parser met a word or symbol it cannot take at this point of a statement. The message says what\n"
        "it found and what it could have taken; a misspelt keyword gets a `help:` with the closest one. After\n"
        "a syntax error the broken statement is skipped, so every broken statement of a file is reported.",
        "pipeline t\ninput q: txt\nnode a: text {}\nq -> a\noutput a",
        "pipeline t\ninput q: text\nnode a: text {}\nq -> a\noutput a",
    ),
    Code(
        "E002",
        "unexpected character",
        "A character that no token of the language starts with, such as `@`, `!` or a stray control\n"
        "character. Names are ASCII letters, digits and `_`; text belongs in strings.",
        "node a: text { prompt = p @ }",
        "node a: text { prompt = p }",
    ),
    Code(
        "E003",
        "unterminated string",
        'A string is missing its closing quotes. A `"..."` string must close on its own line; a `"""` block\n'
        'string runs to the next `"""`, so one missing closer swallows the rest of the file.',
        'param p = "Answer the question.',
        'param p = "Answer the question."',
    ),
    Code(
        "E004",
        "invalid escape sequence in string",
        'A `"..."` string takes JSON escapes only: \\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX. Any other backslash\n'
        'is an error. A block string (`"""`) has no escapes: write a backslash there as it is.',
        'param p = "C:\\path"',
        'param p = "C:\\\\path"        # or: param p = """C:\\path"""',
    ),
    Code(
        "E005",
        "closing quotes of a block string not on a line of their own",
        'A block string that starts with a newline after `"""` is dedented by the indentation of its\n'
        "closing quotes, so those must stand on a line of their own with only spaces or tabs before them.",
        'param p = """\n  Answer the question."""',
        'param p = """\n  Answer the question.\n  """',
    ),
    Code(
        "E006",
        "block string line indented less than its closing quotes",
        "The indentation of a block string's closing quotes is removed from every line; a line that is\n"
        "not blank and indented less than them cannot lose it. Tabs and spaces are compared as written.",
        'param p = """\n  Answer.\nBe brief.\n  """',
        'param p = """\n  Answer.\n  Be brief.\n  """',
    ),
    Code(
        "E007",
        "control character in a string",
        "Strings are prompts, and a prompt holds text: a control character other than tab, newline and\n"
        "carriage return (an escape sequence, a bell, a NUL) is garbage to a model and a way for a hostile\n"
        "file to drive a terminal.",
        'param p = "red \\u001b[31m text"',
        'param p = "red text"',
    ),
    Code(
        "E008",
        "half a surrogate pair in a string",
        "A `\\uXXXX` escape between D800 and DFFF is half of a UTF-16 pair and no character on its own: no\n"
        "file or model accepts it. A whole pair, such as `\\ud83d\\ude00`, is one character and is fine.",
        'param p = "half \\ud800 a pair"',
        'param p = "a whole pair: \\ud83d\\ude00"',
    ),
    Code(
        "E009",
        "a `{` is never closed",
        "A node or block opened with `{` runs to the next statement without its `}`. The parser only notices\n"
        "a statement later (it reads `node` as one more setting), so the error points back at the `{`.",
        "node a: text { prompt = p\nnode b: text {}",
        "node a: text { prompt = p }\nnode b: text {}",
    ),
    # E01x: files
    Code(
        "E010",
        "no such file",
        "The path names no file (or a symbolic link whose target is gone).",
        "sbpc check pipelnes/liar.sbp",
        "sbpc check pipelines/liar.sbp",
    ),
    Code(
        "E011",
        "not a regular file",
        "A pipeline is read from a regular file. A directory, a FIFO, a socket or a device is refused\n"
        "before it is read, so a path can never block the command.",
        "sbpc check pipelines/",
        "sbpc check pipelines/*.sbp",
    ),
    Code(
        "E012",
        "file too large",
        "A pipeline file may be at most 64 MB: far beyond any real pipeline, whose prompts could not be\n"
        "sent to a model anyway. The size is checked before the file is read.",
        "sbpc check dump.sbp        # 80 MB",
        "Keep data in data sets (--data), not in the pipeline file.",
    ),
    Code(
        "E013",
        "file cannot be read",
        "The operating system refused to read the file (no permission, a name too long, an I/O error);\n"
        "the message gives its reason.",
        "sbpc check secret.sbp      # mode 000",
        "chmod u+r secret.sbp",
    ),
    Code(
        "E014",
        "invalid UTF-8",
        "Pipeline files are UTF-8 text (a byte order mark is allowed). The error points at the first byte\n"
        "that is not UTF-8, often a file saved as Latin-1 or UTF-16.",
        'param p = "caf\\xe9"        # the byte 0xe9 of Latin-1',
        "Save the file as UTF-8 (iconv -f latin1 -t utf-8 old.sbp > new.sbp).",
    ),
    Code(
        "E015",
        "unknown kind of file",
        "sbpc reads `.sbp` files and their YAML twin (`.yaml`, `.yml`), and tells them apart by suffix.",
        "sbpc check pipeline.txt",
        "mv pipeline.txt pipeline.sbp",
    ),
    Code(
        "E016",
        "interrupted write",
        "sbpc rewrites a file with other hard links in place, after saving the whole new text beside it as\n"
        "`.NAME.sbpc-tmp`. That copy is still there, so the last such write was killed midway and the file\n"
        "may hold part new and part old text. The message names the copy. When the write was an optimize\n"
        "run's, `sbpc optimize ... --resume` finishes it (the copy is the text the run recorded it was writing).",
        "sbpc check liar.sbp        # .liar.sbp.sbpc-tmp is beside it",
        "cp .liar.sbp.sbpc-tmp liar.sbp && rm .liar.sbp.sbpc-tmp    # or rm it to keep the file as it is",
    ),
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
    # E06x: the YAML form
    Code(
        "E060",
        "YAML syntax",
        "The file is not valid YAML (or nests more than 64 levels deep, or holds a character YAML forbids).\n"
        "The message is PyYAML's, located at the problem.",
        "pipeline: t\nnodes: [a",
        "pipeline: t\nnodes: [a]",
    ),
    Code(
        "E061",
        "YAML alias",
        "Aliases (`*name`) are refused: a few lines could expand into gigabytes, and a prompt written once\n"
        "must be written back once. One error per anchor.",
        "params:\n  p: &x Answer.\n  r: *x",
        "params:\n  p: Answer.\n  r: Answer.",
    ),
    Code(
        "E062",
        "YAML pipeline is not a mapping",
        "The top of a YAML pipeline is a mapping with the keys pipeline, nodes, output and the others of\n"
        "docs/language.md, 5.",
        "- pipeline: t",
        "pipeline: t\nnodes: {a: {type: text}}\noutput: a",
    ),
    Code(
        "E063",
        "YAML value the schema does not allow",
        "The YAML form is checked against its JSON Schema (`sbpc schema`): unknown keys, wrong types,\n"
        "unknown names and numbers out of range, each in words and at its place. Point your editor at the\n"
        "schema to see these as you type.",
        "pipeline: t\nmodles: {}",
        "pipeline: t\nmodels: {}",
    ),
    Code(
        "E064",
        "YAML value a pipeline cannot use",
        "A value its tag cannot hold (`!!int abc`), a value YAML reads as a date (quote it), `.nan` or\n"
        "`.inf`, or a control character in a string.",
        "description: 2024-01-01",
        'description: "2024-01-01"',
    ),
    Code(
        "E065",
        "unquoted choice type in YAML",
        "In a flow mapping the commas of `choice(Yes, No)` end the value, so the type must be quoted.",
        "nodes:\n  a: {type: choice(Yes, No)}",
        'nodes:\n  a: {type: "choice(Yes, No)"}',
    ),
    Code(
        "E066",
        "YAML key that is not a plain name",
        "Keys of a YAML pipeline are plain names, not lists or mappings.",
        "inputs:\n  [q]: text",
        "inputs:\n  q: text",
    ),
    Code(
        "E067",
        "duplicate YAML key",
        "A key appears twice in one mapping; YAML would silently keep the last. A `note:` points at the\nfirst.",
        "metric: exact\nmetric: json",
        "metric: json",
    ),
    Code(
        "E068",
        "bad YAML edge",
        'Each item of `edges` is one edge statement such as "a, b -> c"; its names are plain names and\n'
        "each `->` has names on both sides.",
        'edges:\n  - "q, 9ctx -> a ->"',
        'edges:\n  - "q, ctx -> a"',
    ),
    Code(
        "E069",
        "api_base is not an http(s) URL",
        "A model's `api_base` is the base URL of an OpenAI-compatible server: a scheme, a host and, if\n"
        "need be, a port from 0 to 65535. Without `http://` no request can go out (litellm would try for\n"
        "seconds, then blame the connection).",
        'model { name = "openai/m"  api_base = "127.0.0.1:8911/v1" }',
        'model { name = "openai/m"  api_base = "http://127.0.0.1:8911/v1" }',
    ),
    Code(
        "E070",
        "router file cannot be used",
        "The `router` file a model block names (a litellm Router / proxy config, found beside the pipeline)\n"
        "cannot be read, or is not one litellm's Router could take: the message says where and why.",
        'model { name = "pool"  router = "missing.yaml" }',
        'model { name = "pool"  router = "router.yaml" }   # a file with a model_list',
    ),
    Code(
        "E071",
        "undefined model",
        "A node's `model` names a model: a role (forward, backward, optimizer) or a `model NAME { }` block\n"
        "of the pipeline. So does every name in a `models` list (the optimize block's, or a node's).",
        'node judge: text { prompt = p  model = strnog }\nmodel strong { name = "openai/gpt-4o" }',
        'node judge: text { prompt = p  model = strong }\nmodel strong { name = "openai/gpt-4o" }',
    ),
    Code(
        "E072",
        "undefined system message",
        "A node's `system` names a param or a template, whose text (rendered with the node's inputs) is sent\n"
        "as the system message; a value that is not a name is an inline template.",
        'param rules = "Be polite."\nnode a: text { prompt = p  system = rulez }',
        'param rules = "Be polite."\nnode a: text { prompt = p  system = rules }',
    ),
    Code(
        "E073",
        "system message name is both a param and a template",
        "`system = NAME` may send a param or a template; when both are called NAME, which one is meant\n"
        "cannot be told. Rename one of them.",
        'param style = "Be brief."\ntemplate style = "{{ style }}"\nnode a: text { prompt = p  system = style }',
        'param style = "Be brief."\nnode a: text { prompt = p  system = style }',
    ),
    Code(
        "E074",
        "record field listed twice",
        "Each field of a record output has one name and one type.",
        "node judge: {verdict: choice(Yes, No), verdict: text} { prompt = p }",
        "node judge: {verdict: choice(Yes, No), reason: text} { prompt = p }",
    ),
    Code(
        "E075",
        "record field name starting with '_'",
        "Templates read a field as `{{ judge.verdict }}`, and the template sandbox refuses names that\n"
        "start with `_`, so such a field could never be read.",
        "node judge: {_verdict: choice(Yes, No)} { prompt = p }",
        "node judge: {verdict: choice(Yes, No)} { prompt = p }",
    ),
    Code(
        "E076",
        "no such field",
        "A template (`{{ judge.verdit }}`) or the output (`output judge.verdit`) names a field the record\n"
        "output of that node does not have.",
        "node judge: {verdict: choice(Yes, No), reason: text} { prompt = p }\noutput judge.verdit",
        "node judge: {verdict: choice(Yes, No), reason: text} { prompt = p }\noutput judge.verdict",
    ),
    Code(
        "E077",
        "field of a node that returns no record",
        "`output node.field` scores one field of a record output, and `{{ node.field }}` reads one; a node or\n"
        "input of another type (text, a choice, a number) is one value, with no fields.",
        "node a: text { prompt = p }\noutput a.verdict",
        "node a: {verdict: choice(Yes, No)} { prompt = p }\noutput a.verdict",
    ),
    Code(
        "E078",
        "a template name that is both a param and an input",
        "A template may read the node's inputs and any param by name; a name that is both cannot be told\n"
        "apart. Rename the param (or the input).",
        'input task: text\nparam task = "Answer."\ntemplate t = "{{ task }}"',
        'input task: text\nparam instruction = "Answer."\ntemplate t = "{{ instruction }} {{ task }}"',
    ),
    Code(
        "E079",
        "a model named 'default'",
        "In the YAML form, `models: {default: ...}` is the unnamed `model { }` block, the settings every model\n"
        "shares; so no model can be called `default`.",
        "model default { temperature = 0 }",
        "model { temperature = 0 }",
    ),
    Code(
        "E080",
        "function not named as module:name",
        'A `function` declaration names a Python callable as `"module:name"`: a module (dotted Python names,\n'
        "no path) and one public name in it. Nothing is imported when a file is checked or compiled.",
        'function search = "tools.py/search"',
        'function search = "tools:search"      # search() in tools.py beside the pipeline',
    ),
    Code(
        "E081",
        "undefined function",
        'A node\'s `function` names a `function NAME = "module:name"` declaration of the pipeline.',
        'function search = "tools:search"\nnode passages: json { function = serach }',
        'function search = "tools:search"\nnode passages: json { function = search }',
    ),
    Code(
        "E082",
        "a function node with a model's settings",
        "A function node calls Python code with its predecessors as keyword arguments: it sends no prompt,\n"
        "so it takes no `prompt`, `template`, `system`, `parse` or `model`. It takes `timeout` (seconds).",
        "node passages: json { function = search  prompt = p }",
        "node passages: json { function = search  timeout = 10 }",
    ),
    Code(
        "E083",
        "module may not be imported",
        "A pipeline file is data from strangers, so naming a module is not enough to run it. A function's\n"
        "module is imported only from the pipeline's own folder (tools.py beside rag.sbp; not a symbolic\n"
        "link out of it, and the callable must be defined there, not imported into it) or when the user\n"
        "names it: `--allow-module NAME` on the command line, `load(path, allow_modules=[NAME])` in Python.\n"
        "`sbpc check` imports nothing; it warns (W009) about a module that is not beside the pipeline.",
        'function run = "os:system"     # sbpc run p.sbp',
        'function search = "tools:search"   # tools.py beside p.sbp; or: sbpc run p.sbp --allow-module mytools',
    ),
    Code(
        "E084",
        "function cannot be loaded",
        "The module was allowed, but importing it failed, or it has no such name, or what it has under that\n"
        "name cannot be called. The message says which, with the exception the import raised.",
        'function search = "tools:serach"     # sbpc run p.sbp',
        'function search = "tools:search"',
    ),
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
    # E11x: nodes that call tools (a tool loop)
    Code(
        "E110",
        "a tool that is not a declared function",
        "`tools = [...]` names the functions the node's model may call. Each must be declared in the file with\n"
        '`function NAME = "module:function"`, where the checker reads its signature (without importing it).',
        "node solve: text { prompt = task  tools = [lokup] }",
        'function lookup = "tools:lookup"\nnode solve: text { prompt = task  tools = [lookup] }',
    ),
    Code(
        "E111",
        "max_steps below 1",
        "`max_steps` is how many replies the model may give at a tool loop, the last of which answers: at\n"
        "least 1 (one reply, which must answer at once).",
        "node solve: text { prompt = task  tools = [lookup]  max_steps = 0 }",
        "node solve: text { prompt = task  tools = [lookup]  max_steps = 4 }",
    ),
    Code(
        "E112",
        "a signature that cannot become a tool's schema",
        "A model calls a tool with named arguments, as a JSON object whose schema sbpc reads from the\n"
        "function's signature (type hints and defaults) and docstring. `*args`, `**kwargs`, positional-only\n"
        "parameters and types with no JSON form (a socket, a class of your own) have none, nor has a function\n"
        "with no Python source (`math:sqrt`, built into Python or compiled). The module beside the pipeline\n"
        "(or an allowed one) is read, never imported; a module that is not UTF-8 text, or nested too deeply\n"
        "to read, cannot be read.",
        "def lookup(*places): ...",
        'def lookup(place: str, fact: Literal["population", "area"] = "population") -> str:\n'
        '    """Look up one fact about a place."""',
    ),
    Code(
        "E113",
        "a tool's description names no param",
        "A function's `description` names the param that tells the model what the tool does (so the optimizer\n"
        "can improve it like a prompt, and write-back changes the .sbp, never the Python file). It must be a\n"
        "param the file declares.",
        'function lookup = "tools:lookup" { description = lookup_dc }',
        'param lookup_doc = "Look up one fact about a place."\n'
        'function lookup = "tools:lookup" { description = lookup_doc }',
    ),
    # E17x: tools from MCP servers (language/mcp_servers.py; E176-E177 at run time)
    Code(
        "E170",
        "an MCP server block that names no server",
        "`mcp NAME { ... }` declares a Model Context Protocol server whose tools nodes call as `NAME.tool`. It\n"
        "needs exactly one of `command` (a program sbpc starts, spoken to on its stdin and stdout) and `url` (a\n"
        "streamable HTTP server), and a name.",
        "mcp docs { env = [DOCS_ROOT] }",
        'mcp docs { command = "python docs_server.py"  env = [DOCS_ROOT] }',
    ),
    Code(
        "E171",
        "a key written out in an MCP server's settings",
        "A pipeline file is shared, committed and shown in diffs: a key written in it leaks. A server's command,\n"
        "url and headers take keys from variables: `${NAME}` in a header or the url, `env = [NAME]` for a\n"
        "command's server. A literal that looks like a key (`sk-...`, a long random token) is refused.",
        'mcp docs { url = "https://docs.example.com/mcp"  headers = "Authorization: Bearer sk-4f9a8b7c6d5e4f3a2b1c" }',
        'mcp docs { url = "https://docs.example.com/mcp"  headers = "Authorization: Bearer ${DOCS_TOKEN}" }',
    ),
    Code(
        "E172",
        "headers that are no HTTP headers",
        "`headers` is one `Name: value` a line (a block string holds several), sent to a server reached by\n"
        "`url`; a server sbpc starts with `command` takes its settings from `env` instead.",
        'mcp docs { url = "http://localhost:8000/mcp"  headers = "Bearer ${DOCS_TOKEN}" }',
        'mcp docs { url = "http://localhost:8000/mcp"  headers = "Authorization: Bearer ${DOCS_TOKEN}" }',
    ),
    Code(
        "E173",
        "an MCP server's tools are not locked",
        "`check` starts no server: the tools' schemas come from the lock, `.sbpc/mcp.lock.json` beside the\n"
        "pipeline, which `sbpc tools sync FILE` writes by starting each server once and listing its tools. The\n"
        "lock keeps a hash of each server's settings: a changed command, url, env or headers needs a new sync.",
        "sbpc check agent.sbp        # before any sync",
        "sbpc tools sync agent.sbp\nsbpc check agent.sbp",
    ),
    Code(
        "E174",
        "a tool of an MCP server that is not declared",
        "`tools = [docs.search]` names the tool `search` of the server declared by `mcp docs { ... }`.",
        "node a: text { prompt = task  tools = [dcos.search] }",
        "node a: text { prompt = task  tools = [docs.search] }",
    ),
    Code(
        "E175",
        "an MCP server has no such tool",
        "The lock lists the tools the server had when `sbpc tools sync` ran; the name must be one of them.\n"
        "If the server has gained the tool since, sync again.",
        "node a: text { prompt = task  tools = [docs.serch] }",
        "node a: text { prompt = task  tools = [docs.search] }",
    ),
    Code(
        "E176",
        "an MCP server's tools differ from the lock",
        "At run time each server's tools are listed and compared with the lock before any call: a tool whose\n"
        "schema or description changed (or that is gone) would be offered to the model as it no longer is, and\n"
        "what was checked would not be what runs. The run stops before any model call.",
        "sbpc run agent.sbp ...     # the server changed since the lock was written",
        "sbpc tools sync agent.sbp  # then check and run again",
    ),
    Code(
        "E177",
        "an MCP server that cannot be started or reached",
        "The server's command failed to start or exited, its URL did not answer as an MCP server, or a variable\n"
        "its env or headers name is not set. The run stops before any model call, saying which.",
        'mcp docs { command = "python docs_servr.py" }',
        'mcp docs { command = "python docs_server.py" }',
    ),
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
    # E13x: data named in the file
    Code(
        "E130",
        "named data block",
        "A pipeline draws its examples from one data file, so the data block takes no name.",
        'data tickets { file = "tickets.jsonl" }',
        'data { file = "tickets.jsonl" }',
    ),
    Code(
        "E131",
        "data block without a file",
        "A data block names the file a run reads its examples from (a .jsonl, .csv or .tsv file, relative\n"
        "to the pipeline's folder); its sizes and seed cut that file, so without it they cut nothing. With\n"
        'each split\'s own file, `train = "train.jsonl"` is the one a run cannot do without: validation and\n'
        "test files alone leave optimize nothing to learn from.",
        "data { train = 20  validation = 20 }",
        'data { file = "tickets.jsonl"  train = 20  validation = 20 }',
    ),
    Code(
        "E132",
        "a size set twice",
        "A data block's `train`, `validation`, `test` and `seed` are the optimize block's `train_size`,\n"
        "`val_size`, `test_size` and `seed`. Saying one in both places leaves the reader to guess which\n"
        "wins: keep it in one (beside the data is where a reader looks for how it is cut).",
        'data { file = "tickets.jsonl"  train = 20 }\noptimize { train_size = 30 }',
        'data { file = "tickets.jsonl"  train = 30 }',
    ),
    Code(
        "E133",
        "a second data block",
        "A pipeline names one data file; a command's --data gives another for one run.",
        'data { file = "a.jsonl" }\ndata { file = "b.jsonl" }',
        'data { file = "a.jsonl" }',
    ),
    Code(
        "E134",
        "the data file cannot be used",
        "`sbpc check` reads the file the data block names, as a run would: one that is missing, unreadable,\n"
        "has no answer column (answer, label or target) or has bad rows is reported here, every bad row\n"
        "with its line. The path is relative to the pipeline's folder, not to where sbpc runs.",
        'data { file = "tickets.jsnol" }',
        'data { file = "tickets.jsonl" }',
    ),
    Code(
        "E135",
        "an input the data does not have",
        "Each input reads the data field of its name (or the one `from` names), and the output's `from`\n"
        "names the answer's field (without it, a column named answer, label or target); the data file the\n"
        "block names has no such field. Rename the input, say which field it reads, or pass --map\n"
        'INPUT=FIELD for one run; name the answer\'s column with `output NODE from "COLUMN"`.',
        'input text: text          # the file has "message", not "text"',
        "input text: text from message",
    ),
    # E136-E138: what optimize may change and what models cost
    Code(
        "E136",
        "undefined strategy",
        "The optimize block's `strategies` names the kinds of change a step may make: `gradients` (prompts\n"
        "rewritten from the backward pass's feedback), `demos` (examples drawn from right answers) and\n"
        "`models` (a node moved to another of its `models`). A name that is none of them would be dropped.",
        "optimize { strategies = [gradients, model] }",
        "optimize { strategies = [gradients, models] }",
    ),
    Code(
        "E137",
        "half a declared price",
        "A model block may declare what its calls cost, in dollars per million tokens: `input_price` for the\n"
        "prompt and `output_price` for the reply. sbpc charges, plans and compares models by it (before\n"
        "litellm's table), so a missing half would be charged nothing. Give both (0 where it is free).",
        'model fast { name = "openai/my-model"  input_price = 0.15 }',
        'model fast { name = "openai/my-model"  input_price = 0.15  output_price = 0.6 }',
    ),
    Code(
        "E138",
        "a node's models without a model of its own",
        "A node's `models = [...]` lists the models the optimizer may move it to; a move rewrites the node's\n"
        "`model = ...` line, so the node must name a model of its own (a `model NAME { }` block), not a role.",
        "node draft: text { prompt = p  models = [fast, strong] }",
        "node draft: text { prompt = p  model = strong  models = [fast, strong] }",
    ),
    # E139-E140: each split's own file in the data block
    Code(
        "E139",
        "one pool and splits' own files",
        "A data block names its examples one of two ways: `file`, one pool that the sizes (`train = 20`) cut\n"
        'into train, validation and test; or each split\'s own file (`train = "train.jsonl"`, `validation`,\n'
        "`test`), each split drawn from its file alone. Both at once would leave the reader to guess which\n"
        "rows each split holds. The sizes of splits with files of their own go in the optimize block.",
        'data { file = "all.jsonl"  test = "test.jsonl" }',
        'data { train = "train.jsonl"  test = "test.jsonl" }',
    ),
    Code(
        "E140",
        "one file for two splits",
        "Each split named by a file is drawn from that file alone, so the test split is never trained on. Two\n"
        "splits naming the same file would draw from the same rows: the score on one would say nothing of the\n"
        "other. Give each its own file, or name one pool with `file` and cut it by sizes (disjoint splits).\n"
        "A link, a hard link or another spelling of the path names the same file, and is the same mistake.",
        'data { train = "rows.jsonl"  test = "rows.jsonl" }',
        'data { file = "rows.jsonl"  train = 20  test = 50 }',
    ),
    Code(
        "E141",
        "a function node given an input its function does not take",
        "A function node calls its function with each input as a keyword argument (a map's item by the map's\n"
        "name for it). An input the signature does not name would fail every call, so it is refused before\n"
        "any: add the parameter, or stop feeding the input. A branch's deciding node is the exception: it\n"
        "must feed the branch, and is passed only when the function takes it. The module beside the\n"
        "pipeline is read, never imported.",
        "def lookup(order_id): ...\n\nkind, order_id -> facts",
        "def lookup(order_id, kind): ...\n\nkind, order_id -> facts",
    ),
    Code(
        "E142",
        "a function node's parameter that nothing feeds",
        "Each parameter of a function node's function without a default needs an input of that name (or the\n"
        "map's item): the call would fail on every sample without it.",
        "def lookup(order_id, fact): ...\n\norder_id -> facts",
        'def lookup(order_id, fact="status"): ...\n\norder_id -> facts',
    ),
    # E16x: data a run would refuse, found by check
    Code(
        "E160",
        "sizes larger than the data",
        "The sizes the data block (or the optimize block) gives add up to more rows than the data file\n"
        "holds, so `eval` and `optimize` would refuse to cut it. Sizes left out are never refused: a run\n"
        "scales sbpc's defaults down to fit a small file, and says so.",
        'data { file = "tickets.jsonl"  train = 20  validation = 20 }   # the file has 22 rows',
        'data { file = "tickets.jsonl"  train = 11  validation = 11 }',
    ),
    # E150-E159: code the file names, read before it runs
    Code(
        "E150",
        "an async metric",
        "A Python metric is called with (prediction, example) and returns a score: a bool, a number from 0 to\n"
        "1, or (score, reason). sbpc calls it in a worker thread and does not await what it returns, so an\n"
        "`async def` metric can never score. `check` reads the module beside the pipeline (never imports it)\n"
        "and refuses one; a metric from an allowed module is refused when a run first scores with it.",
        "async def overlap(prediction, example):\n    return 1.0",
        "def overlap(prediction, example):\n    return 1.0",
    ),
    Code(
        "E161",
        "a model name with no provider",
        "A model name is `provider/model`; a bare name is looked up in litellm's table of models (gpt-4o-mini,\n"
        "claude-3-5-sonnet-latest, ...), and a name it does not know is refused before any request is sent\n"
        "(`LLM Provider NOT provided`). Name the provider (`openai/...` with `api_base` reaches any\n"
        "OpenAI-compatible server), or fix the spelling.",
        'model forward { name = "gpt-4o-mni" }',
        'model forward { name = "gpt-4o-mini" }',
    ),
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
    Code(
        "W035",
        "a tool argument without a type",
        "An argument with no type hint (or a server's property with no type) is offered to the model as any\n"
        "JSON value, so nothing tells it what to send and nothing checks what it sends.",
        "def lookup(place, fact: str) -> str: ...",
        "def lookup(place: str, fact: str) -> str: ...",
    ),
    Code(
        "W036",
        "a tool without a description",
        "A tool with no docstring (or a server's tool with no description) is offered with an empty description:\n"
        "the model sees its name alone. A description param (`description = lookup_doc`) also lets the\n"
        "optimizer improve it.",
        "def lookup(place: str) -> str:\n    return FACTS[place]",
        'def lookup(place: str) -> str:\n    """Look up one fact about a place."""',
    ),
    Code(
        "W037",
        "a tool argument without a description",
        "Each argument's description comes from the docstring's `Args:` lines (or the server's schema); one\n"
        "without leaves the model to guess from its name.",
        'def lookup(place: str) -> str:\n    """Look up one fact about a place."""',
        'def lookup(place: str) -> str:\n    """Look up one fact about a place.\n\n    Args:\n        place: the place\'s name alone\n    """',
    ),
]

CODES: dict[str, Code] = {c.code: c for c in _CODES}


def lookup(code: str) -> Code | None:
    """The code as written in any case, with or without leading zeros: e021, E21 and E021 are one code."""
    code = code.strip().upper()
    if len(code) > 1 and code[1:].isdigit():
        code = f"{code[0]}{int(code[1:]):03d}"
    return CODES.get(code)
