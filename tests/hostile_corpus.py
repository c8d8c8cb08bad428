"""A corpus of bad pipeline files, .sbp and YAML, of every kind a stranger's file can be bad in.

`corpus()` returns (file name, bytes) pairs, generated from two small valid pipelines by mutation:
hostile templates, YAML tags and aliases, deep nesting, control characters and bad bytes, every
token of the .sbp file deleted or doubled, every YAML line dropped or shifted, bad settings, names
and sizes. tests/test_hostile_files.py runs `check` and `compile` on each.

    python tests/hostile_corpus.py OUT_DIR   # write the files, to try them by hand
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SBP = '''pipeline mini "Answer a question"
input q: text
input ctx: text from "context"
param ask = "Answer the question."
template t = """
  {{ prompt }}
  Question: {{ q }}
  Context: {{ ctx }}
  """
param style = "Be brief."
node helper: text { prompt = ask }
node a: choice(Yes, No) { prompt = ask  template = t }
node judge: {verdict: choice(Yes, No), why: text} { prompt = ask  system = style  model = fast }
node reply: text { template = "{{ judge.verdict }}: {{ judge.why }}" }
q, ctx -> helper
q, ctx -> a
helper -> judge -> reply -> a
output a from "label"
metric exact
model forward { name = "m"  temperature = 0 }
model fast { name = "f" }
optimize { iterations = 2  gradient = sibling }
'''

YAML = """pipeline: mini
description: Answer a question
inputs:
  q: text
  ctx: {type: text, from: context}
params:
  ask: Answer the question.
  style: Be brief.
templates:
  t: |-
    {{ prompt }}
    Question: {{ q }}
    Context: {{ ctx }}
nodes:
  helper: {type: text, prompt: ask}
  a: {type: "choice(Yes, No)", prompt: ask, template: t}
  judge: {type: {verdict: "choice(Yes, No)", why: text}, prompt: ask, system: style, model: fast}
  reply: {type: text, template: "{{ judge.verdict }}: {{ judge.why }}"}
edges:
  - q, ctx -> helper
  - q, ctx -> a
  - helper -> judge -> reply -> a
output: {node: a, from: label}
metric: exact
models:
  forward: {name: m, temperature: 0}
  fast: {name: f}
optimize: {iterations: 2, gradient: sibling}
"""

TEMPLATES = [
    "{{ range(10**9) }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ lipsum(n=200000) }}",
    "{{ 'x' * 300000000 }}",
    "{{ [0] * 300000000 }}",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}",
    "{{ 1/0 }}",
    "{{ 2 ** 10 ** 8 }}",
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "{% for i in range(99999) %}" + "x" * 500 + "{% endfor %}",
    "{{ 'x'|center(999999999) }}",
    "{{ '{:>999999999}'.format(1) }}",
    "{{ '%999999999d' % 1 }}",
    "{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}",
    "{% if 1 %}" * 400 + "{% endif %}" * 400,
    "{{ " + "[" * 3000 + "]" * 3000 + " }}",
    "{% include 'other.j2' %}",
    "{% import 'other.j2' as o %}",
    "{% from 'other.j2' import x %}",
    "{% extends 'base.j2' %}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ q.__class__ }}",
    "{{ self._TemplateReference__context }}",
    "{% for x in q recursive %}{{ loop(q) }}{% endfor %}",
    "{{ cycler(*range(100000)) }}",
    "{{ q.split()|join|join }}",
    "{% raw %}{{ never closed",
    "{{ q",
    "{% for %}",
    "{% endfor %}",
    "{{ q | nofilter }}",
    "{{ undefined_name }}",
    "{% set x = x %}{{ x }}",
    "{{ range(100000)|list|map('string')|join }}" * 3,
]

YAML_VALUES = [
    "!!int abc",
    "!!bool maybe",
    "!!timestamp never",
    "!!float x",
    "!!binary '%%%'",
    "!!python/object:os.system x",
    "!!set {a, b}",
    "!!omap [a: 1]",
    "2024-01-01",
    "2024-01-01 10:00:00",
    ".nan",
    ".inf",
    "-.inf",
    "!!null x",
    "!!str",
    "~",
    "[]",
    "{}",
    "0x_",
    "!custom tag",
    "!!merge x",
    "'\\ud800'",
    '"\\ud800"',
    '"\\udfff tail"',
    '"\\x00"',
    '"\\e[31m"',
    "1e400",
    "999999999999999999999999999999",
    "-5",
    "1.5",
]

SETTINGS = [
    "iterations = -1",
    "iterations = 1e32",
    "iterations = 100000000000000000000000000000",
    "train_size = -5",
    "val_size = 1.5",
    "test_size = true",
    "gate_alpha = 0",
    "gate_alpha = 7",
    "gradient = sibbling",
    "update = partial",
    "gate = never",
    "seed = 99999999999999999999999",
    "errors_per_gradient = 0",
    "itrations = 3",
]

MODEL_SETTINGS = [
    "temperature = -1",
    "temperature = 1e999",
    "top_p = 2",
    "max_tokens = 0",
    "max_tokens = 2.5",
    "timeout = 0",
    "timeout = -5",
    "name = 3",
    "stop = 7",
    "temprature = 0",
]

SEMANTIC = [
    ("q, ctx -> a", "q, ctx, qq -> a"),
    ("q, ctx -> a", "q, ctx -> y"),
    ("q, ctx -> a", "q, ctx -> a -> helper -> a"),
    ("q, ctx -> helper", "q, ctx -> hepler"),
    ("output a", "output b"),
    ("output a", "output q"),
    ("metric exact", "metric exct"),
    ("prompt = ask }", "prompt = aks }"),
    ("template = t }", "template = tt }"),
    ("choice(Yes, No)", 'choice("", No)'),
    ("choice(Yes, No)", "choice(Yes, Yes)"),
    ("choice(Yes, No)", 'choice("(A)", "")'),
    ("node helper", "node input"),
    ("node helper", "node a"),
    ("input q", "input a"),
    ("model forward", "model fowrard"),
    ("model forward", "model"),
    ("optimize {", "optimise {"),
    ("optimize {", "optimize fast {"),
    ("{{ ctx }}", "{{ nothing }}"),
    ("{{ prompt }}", "{{ prompt() }}"),
    ('param ask = "Answer the question."', 'param ask = "{{ 1/0 }}"'),
    ('param ask = "Answer the question."', 'param ask = "\\ud800"'),
    ('"Answer a question"', '"\\ud834"'),
    ("q, ctx -> a\n", "q, ctx -> a\nq -> a\nq, q -> a\n"),
    ("output a", "output a\noutput helper"),
    # node models, system messages, several params, record outputs
    ("model = fast", "model = fats"),
    ("system = style", "system = styel"),
    ("system = style", 'system = "{{ nothing }}"'),
    ('param style = "Be brief."', 'param style = "Be brief."\ntemplate style = "x"'),
    ('param style = "Be brief."', 'param style = "Rules for {{ nothing }}."'),
    ("why: text}", "why: text, why: text}"),
    ("why: text}", "_why: text}"),
    ("{verdict: choice(Yes, No)", "{verdict: choice(Yes, Yes)"),
    ("{{ judge.verdict }}", "{{ judge.verdit }}"),
    ("{{ judge.why }}", "{{ judge['whY'] }}"),
    ('output a from "label"', 'output judge.verdit from "label"'),
    ('output a from "label"', 'output a.verdict from "label"'),
    ('output a from "label"\nmetric exact', 'output judge.why from "label"\nmetric numeric'),
    ('param style = "Be brief."', 'param style = "Be brief."\nparam q = "x"'),
    ("model fast {", "model default {"),
    ("model fast {", "model fowrard {"),
    ('model fast { name = "f" }', 'model fast { name = "f" }\nmodel spare { name = 3 }'),
    ("{ prompt = ask  system", "{ system"),
    # metrics the file defines: judges and functions
    ("metric exact", 'metric exact = "metrics:overlap"'),
    ("metric exact", "metric quality { model = fast }"),
    ("metric exact", 'frozen param rubric = "Kind?"\nmetric quality { prompt = rubric  scale = 5..1 }'),
    ("metric exact", "metric quality { prompt = style }"),
    ("metric exact", 'frozen param rubric = "Is {{ nothing }} kind?"\nmetric quality { prompt = rubric }'),
    ("metric exact", 'metric overlap = "metrics.overlap"'),
    ("metric exact", 'metric quality { prompt = nope  model = fats  scale = "1..x"  temprature = 0 }'),
    ("metric exact", "metric quality { prompt = ask  scale = 1.5..2.5.3 }"),
    ("metric exact", 'metric quality { prompt = ask }\nmetric quality = "m:f"\nmetric qualty'),
    ("metric exact", "metric exact { }"),
    ("system = style", "system = style  system = style"),
    ('"{{ judge.verdict }}: {{ judge.why }}"', '"{{ prompt }}{{ judge }}"'),
    # function nodes: Python code in the graph, named but never imported by check or compile
    ('param style = "Be brief."', 'param style = "Be brief."\nfunction search = "tools.py/search"'),
    ("node helper: text { prompt = ask }", 'function search = "tools:search"\nnode helper: text { function = serach }'),
    (
        "node helper: text { prompt = ask }",
        'function f = "t:f"\nnode helper: text { function = f  prompt = ask  model = fast }',
    ),
    (
        "node helper: text { prompt = ask }",
        'function shell = "os:system"\nnode helper: text { function = shell  timeout = 0 }',
    ),
    (
        "node helper: text { prompt = ask }",
        'function f = "x:y"\nfunction f = "x:z"\nnode helper: text { function = f  timeout = "soon" }',
    ),
    ("template = t }", "template = t  timeout = 3 }"),
    ("node helper: text { prompt = ask }", 'function f = "../../etc:passwd"\nnode helper: {r: text} { function = f }'),
    (
        "node helper: text { prompt = ask }",
        'function f = "tools:_secret"\nnode helper: text { function = f  function = f }',
    ),
    ("node helper: text { prompt = ask }", "node helper: text { function = 3 }"),
    (
        "node helper: text { prompt = ask }",
        'function f = "subprocess:run"\nnode helper: text { function = f }\nhelper -> helper',
    ),
    (
        "node helper: text { prompt = ask }",
        'function f = "builtins:exec"\nnode helper: text { function = f  template = t }',
    ),
    ("node helper: text { prompt = ask }", 'function helper = "t:helper"\nnode helper: text { function = helper }'),
    ("node helper: text { prompt = ask }", 'function f = ""\nnode helper: text { function = f }'),
    ("node helper: text { prompt = ask }", 'function f = "t:f\\u0000"\nnode helper: text { function = f }'),
]

CONTROL = [
    "\x00",
    "\x1b[31m",
    "\x1b]0;owned\x07",
    "\x07",
    "\x7f",
    "\x85",
    "\u2028",
    "\u202e",
    "\ufeff",
    "\x0c",
    "\x0b",
    "\r",
]

BAD_BYTES = [b"\xff", b"\xc3", b"\xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]


def _sbp_tokens(text: str) -> list[re.Match]:
    return list(re.finditer(r'"""[\s\S]*?"""|"(?:[^"\\\n]|\\.)*"|->|[A-Za-z_]\w*|-?\d+|[{}():,=;]', text))


def _template_cases() -> list[tuple[str, str]]:
    out = []
    for index, template in enumerate(TEMPLATES):
        body = template.replace('"""', "'''")
        out.append(
            (
                f"template_{index:02d}.sbp",
                SBP.replace("  Context: {{ ctx }}\n", f"  Context: {{{{ ctx }}}}\n  {body}\n"),
            )
        )
        yaml_body = "\n".join("    " + line for line in body.split("\n"))
        out.append(
            (
                f"template_{index:02d}.yaml",
                YAML.replace("    Context: {{ ctx }}\n", f"    Context: {{{{ ctx }}}}\n{yaml_body}\n"),
            )
        )
        out.append(
            (f"param_template_{index:02d}.sbp", SBP.replace('"Answer the question."', '"""\n  ' + body + '\n  """'))
        )
    return out


def _yaml_value_cases() -> list[tuple[str, str]]:
    out = []
    for index, value in enumerate(YAML_VALUES):
        out.append((f"tag_setting_{index:02d}.yaml", YAML.replace("iterations: 2", f"iterations: {value}")))
        out.append((f"tag_param_{index:02d}.yaml", YAML.replace("ask: Answer the question.", f"ask: {value}")))
        out.append(
            (
                f"tag_description_{index:02d}.yaml",
                YAML.replace("description: Answer a question", f"description: {value}"),
            )
        )
    return out


def _nesting_cases() -> list[tuple[str, str]]:
    out = []
    for depth in (70, 500, 5000, 50000):
        out.append((f"deep_flow_list_{depth}.yaml", YAML + "extra: " + "[" * depth + "]" * depth + "\n"))
        out.append((f"deep_flow_map_{depth}.yaml", YAML + "extra: " + "{a: " * depth + "1" + "}" * depth + "\n"))
        out.append((f"deep_block_{depth}.yaml", YAML + "".join("  " * i + "k:\n" for i in range(min(depth, 2000)))))
        out.append(
            (f"deep_parens_{depth}.sbp", SBP.replace("{{ q }}", "{{ " + "(" * depth + "q" + ")" * depth + " }}"))
        )
    return out


def _alias_cases() -> list[tuple[str, str]]:
    bomb = "lol0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"lol{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
    )
    return [
        ("alias_param.yaml", YAML.replace("ask: Answer the question.", "ask: &x Answer the question.\n  other: *x")),
        (
            "alias_mapping.yaml",
            YAML.replace("  forward: {name: m, temperature: 0}", "  forward: &m {name: m}\n  backward: *m"),
        ),
        ("alias_list.yaml", YAML.replace("edges:\n", "edges: &e\n") + "again: *e\n"),
        ("alias_undefined.yaml", YAML.replace("ask: Answer the question.", "ask: *nowhere")),
        ("alias_bomb.yaml", YAML + bomb),
        (
            "alias_merge.yaml",
            YAML.replace("  forward: {name: m, temperature: 0}", "  forward: &m {name: m}\n  backward: {<<: *m}"),
        ),
        ("alias_self.yaml", YAML + "loop: &l [*l]\n"),
        ("anchor_only.yaml", YAML.replace("ask: Answer the question.", "ask: &x Answer the question.")),
    ]


def _byte_cases() -> list[tuple[str, bytes]]:
    out = []
    for name, base in (("sbp", SBP), ("yaml", YAML)):
        raw = base.encode()
        for index, char in enumerate(CONTROL):
            middle = raw.index(b"Answer the question.") + 6
            out.append((f"control_{index:02d}.{name}", raw[:middle] + char.encode() + raw[middle:]))
        for index, bad in enumerate(BAD_BYTES):
            for where, at in (("start", 0), ("middle", len(raw) // 2), ("end", len(raw))):
                out.append((f"bytes_{index}_{where}.{name}", raw[:at] + bad + raw[at:]))
        out.append((f"cr_only.{name}", base.replace("\n", "\r").encode()))
        out.append((f"crlf_mixed.{name}", base.replace("\n", "\r\n", 5).encode()))
        out.append((f"bom_twice.{name}", b"\xef\xbb\xbf\xef\xbb\xbf" + raw))
        out.append((f"utf16.{name}", base.encode("utf-16")))
        out.append((f"empty.{name}", b""))
        out.append((f"whitespace.{name}", b" \n\t\n"))
        out.append((f"nul_only.{name}", b"\x00" * 100))
        out.append((f"binary.{name}", bytes(range(256)) * 4))
    return out


def _syntax_cases() -> list[tuple[str, str]]:
    out = []
    tokens = _sbp_tokens(SBP)
    for index, token in enumerate(tokens):
        out.append((f"delete_token_{index:03d}.sbp", SBP[: token.start()] + SBP[token.end() :]))
        if index % 2 == 0:
            out.append((f"double_token_{index:03d}.sbp", SBP[: token.end()] + " " + token.group() + SBP[token.end() :]))
    lines = YAML.split("\n")
    for index in range(len(lines) - 1):
        out.append((f"drop_line_{index:02d}.yaml", "\n".join(lines[:index] + lines[index + 1 :])))
        out.append(
            (f"shift_line_{index:02d}.yaml", "\n".join(lines[:index] + [" " + lines[index]] + lines[index + 1 :]))
        )
    out += [
        ("header_two_strings.sbp", SBP.replace('pipeline mini "Answer a question"', 'pipeline mini "x" "y"')),
        ("header_missing.sbp", SBP.replace('pipeline mini "Answer a question"\n', "")),
        ("header_number.sbp", SBP.replace("pipeline mini", "pipeline 42")),
        ("two_on_a_line.sbp", SBP.replace("node helper: text { prompt = ask }", "node helper: txt {} node b: txet {}")),
        ("unterminated_string.sbp", SBP.replace('"Answer the question."', '"Answer the question.')),
        ("unterminated_block.sbp", SBP.replace('  """\nnode helper', "node helper")),
        ("bad_escape.sbp", SBP.replace("Answer the question.", "Answer \\q the question.")),
        ("block_indent.sbp", SBP.replace("  Question: {{ q }}", "Question: {{ q }}")),
        ("many_errors.sbp", SBP + "node x: txt {}\n" * 500),
        ("keyword_names.sbp", SBP.replace("helper", "node")),
        ("unicode_name.sbp", SBP.replace("helper", "h\u00e9lper")),
        ("long_name.sbp", SBP.replace("helper", "h" * 100000)),
        ("long_line.sbp", SBP.replace("Answer the question.", "x" * 1000000 + '" x "')),
        ("yaml_tabs.yaml", YAML.replace("  q: text", "\tq: text")),
        ("yaml_list_root.yaml", "- " + YAML.replace("\n", "\n  ")),
        ("yaml_scalar_root.yaml", "just text\n"),
        ("yaml_two_docs.yaml", YAML + "---\n" + YAML),
        ("yaml_duplicate_key.yaml", YAML + "metric: json\n"),
        ("yaml_choice_unquoted.yaml", YAML.replace('"choice(Yes, No)"', "choice(Yes, No)")),
        ("yaml_bad_type.yaml", YAML.replace('"choice(Yes, No)"', "texts")),
        ("yaml_key_not_scalar.yaml", YAML.replace("  q: text", "  [q]: text")),
        ("yaml_edge_names.yaml", YAML.replace("q, ctx -> helper", "q, 9ctx -> helper -> ")),
        ("yaml_edge_number.yaml", YAML.replace("- q, ctx -> helper", "- 42")),
        ("yaml_output_list.yaml", YAML.replace("output: {node: a, from: label}", "output: [a]")),
        ("yaml_input_number.yaml", YAML.replace("q: text", "q: 3")),
        ("yaml_record_field_type.yaml", YAML.replace("why: text}", "why: 3}")),
        ("yaml_record_list.yaml", YAML.replace('{verdict: "choice(Yes, No)", why: text}', "[verdict, why]")),
        ("yaml_record_empty.yaml", YAML.replace('{verdict: "choice(Yes, No)", why: text}', "{}")),
        ("yaml_record_unquoted_choice.yaml", YAML.replace('verdict: "choice(Yes, No)"', "verdict: choice(Yes, No)")),
        ("yaml_output_field.yaml", YAML.replace("{node: a, from: label}", "judge.verdit")),
        ("yaml_output_dots.yaml", YAML.replace("{node: a, from: label}", "a.b.c")),
        ("yaml_model_name.yaml", YAML.replace("model: fast", "model: fats")),
        ("yaml_model_key.yaml", YAML.replace("  fast: {name: f}", "  fa-st: {name: f}")),
        ("yaml_system.yaml", YAML.replace("system: style", "system: 3")),
        ("yaml_function_bad.yaml", YAML.replace("nodes:\n", 'functions: {search: "tools.py:x"}\nnodes:\n')),
        ("yaml_function_list.yaml", YAML.replace("nodes:\n", "functions: [search]\nnodes:\n")),
        ("yaml_function_number.yaml", YAML.replace("nodes:\n", "functions: {search: 3}\nnodes:\n")),
        (
            "yaml_function_os.yaml",
            YAML.replace("nodes:\n", "functions: {run: 'os:system'}\nnodes:\n").replace(
                "helper: {type: text, prompt: ask}", "helper: {type: text, function: run}"
            ),
        ),
        (
            "yaml_function_node.yaml",
            YAML.replace("helper: {type: text, prompt: ask}", "helper: {type: text, function: nope, timeout: -1}"),
        ),
        (
            "yaml_function_prompt.yaml",
            YAML.replace("nodes:\n", "functions: {f: 't:f'}\nnodes:\n").replace(
                "helper: {type: text, prompt: ask}", "helper: {type: text, function: f, prompt: ask}"
            ),
        ),
        ("yaml_metric_scale.yaml", YAML + "metrics: {quality: {prompt: ask, scale: 5}}\n"),
        ("yaml_metric_list.yaml", YAML + "metrics: {overlap: [metrics, overlap]}\n"),
        ("yaml_metric_setting.yaml", YAML + "metrics: {quality: {rubric: ask}}\n"),
        ("yaml_metric_name.yaml", YAML.replace("metric: exact", "metric: qualty\nmetrics: {quality: m:f}")),
    ]
    return out


def _semantic_cases() -> list[tuple[str, str]]:
    out = []
    for index, (old, new) in enumerate(SEMANTIC):
        assert old in SBP, old
        out.append((f"semantic_{index:02d}.sbp", SBP.replace(old, new, 1)))
    for index, setting in enumerate(SETTINGS):
        out.append((f"optimize_{index:02d}.sbp", SBP.replace("iterations = 2", setting)))
        key, value = (part.strip() for part in setting.split("="))
        out.append((f"optimize_{index:02d}.yaml", YAML.replace("iterations: 2", f"{key}: {value}")))
    for index, setting in enumerate(MODEL_SETTINGS):
        out.append((f"model_{index:02d}.sbp", SBP.replace("temperature = 0", setting)))
        key, value = (part.strip() for part in setting.split("="))
        out.append((f"model_{index:02d}.yaml", YAML.replace("temperature: 0", f"{key}: {value}")))
    out.append(("cycles.sbp", SBP + "node b: text {}\nnode c: text {}\nb -> c -> b\na -> helper -> a\n"))
    out.append(
        (
            "big_product.sbp",
            "pipeline big\n"
            + "".join(f"input i{k}: text\n" for k in range(300))
            + "".join(f"node n{k}: text {{}}\n" for k in range(300))
            + ", ".join(f"i{k}" for k in range(300))
            + " -> "
            + ", ".join(f"n{k}" for k in range(300))
            + "\noutput n0\n",
        )
    )
    return out


HELPER = "node helper: text { prompt = ask }"
DEMOS_SBP = {  # name -> (what replaces HELPER, or a pair (old, new)); a name with a code reports that code
    "demos_E090": "node helper: text { prompt = ask  demos = shots }",
    "demos_E090_text_param": "node helper: text { prompt = ask  demos = style }",
    "demos_E091": ("template = t }", "template = t  demos = shots }\ndemos shots = []"),
    "demos_E093": ('param style = "Be brief."', "demos style = []"),
    "demos_E093_template": ("template = t }", 'template = "{{ shots }}" }\ndemos shots = []'),
    "demos_E094": "demos s = []\nnode helper: text { prompt = ask  demos = s }\nnode h2: text { demos = s }",
    "demos_E095": "demos s max 0 = []\nnode helper: text { prompt = ask  demos = s }",
    "demos_E095_float": "demos s max 2.5 = []\nnode helper: text { prompt = ask  demos = s }",
    "demos_E095_huge": "demos s max 1e999 = []\nnode helper: text { prompt = ask  demos = s }",
    "demos_E096": 'demos s = [{q: "x", ctx: "y", helpr: "z"}]\nnode helper: text { prompt = ask  demos = s }',
    "demos_E097": 'demos s = [{q: "x"}, {}]\nnode helper: text { prompt = ask  demos = s }',
    "demos_E098": 'demos s = [{q: "x", q: "y", ctx: "c", helper: "h"}]\nnode helper: text { prompt = ask  demos = s }',
    "demos_E099": 'demos s max 1 = [{q: "x", ctx: "c", helper: "h"}, {q: "y", ctx: "d", helper: "i"}]\n' + HELPER,
    "demos_W011": 'frozen demos s max 1 = [{q: "x", ctx: "c", helper: "h"}]\n'
    "node helper: text { prompt = ask  demos = s }",
    "demos_W012": "frozen demos s = []\nnode helper: text { prompt = ask  demos = s }",
    "demos_E052_field": (
        "template = t }",
        'template = "{% for e in s %}{{ e.nope }}{% endfor %}{{ q }}{{ ctx }}{{ reply }}"  demos = s }\ndemos s = []',
    ),
    "demos_number_value": "demos s = [{q: 1}]\nnode helper: text { prompt = ask  demos = s }",
    "demos_unclosed": "demos s = [\n" + HELPER,
    "demos_no_colon": 'demos s = [{q "x"}]\n' + HELPER,
    "demos_no_name": "demos = []\n" + HELPER,
    "demos_max_no_number": "demos s max = []\n" + HELPER,
    "demos_max_string": 'frozen demos s max "3" = []\n' + HELPER,
    "demos_nested": 'demos s = [[{q: "x"}]]\n' + HELPER,
    "demos_many": "demos s max 1 = [" + '{q: "x", ctx: "y", helper: "z"},' * 1000 + "]\n"
    "node helper: text { prompt = ask  demos = s }",
}
DEMOS_YAML = {
    "demos_yaml_number": "ask: {demos: [{q: 3}]}",
    "demos_yaml_not_list": "ask: {demos: x}",
    "demos_yaml_max_text": "ask: {demos: [], max: three}",
    "demos_yaml_text_too": "ask: {demos: [], text: x}",
    "demos_yaml_list_item": "ask: {demos: [x, [y]]}",
    "demos_yaml_E093": "ask: {demos: [], max: -1}",
}


def _demos_cases() -> list[tuple[str, str]]:
    out = []
    for name, change in DEMOS_SBP.items():
        old, new = change if isinstance(change, tuple) else (HELPER, change)
        assert old in SBP, old
        out.append((f"{name}.sbp", SBP.replace(old, new, 1)))
    for name, change in DEMOS_YAML.items():
        out.append((f"{name}.yaml", YAML.replace("ask: Answer the question.", change)))
    return out


def corpus() -> list[tuple[str, bytes]]:
    """Every bad file, as (name, bytes); names are unique."""
    files: list[tuple[str, bytes | str]] = [
        *_template_cases(),
        *_yaml_value_cases(),
        *_nesting_cases(),
        *_alias_cases(),
        *_byte_cases(),
        *_syntax_cases(),
        *_semantic_cases(),
        *_demos_cases(),
    ]
    out = [(name, data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")) for name, data in files]
    assert len({name for name, _ in out}) == len(out), "corpus names must be unique"
    return out


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in corpus():
        (folder / name).write_bytes(data)
    print(f"{len(corpus())} files in {folder}")
