"""Codes of what a node names: E07x models (blocks and the nodes that name them), system messages and record
outputs; E08x function nodes (Python code in the graph; E081-E082 are the function kind's own:
language/kinds/function.py)."""

from .code import Code

TABLE = [
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
]
