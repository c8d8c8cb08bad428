"""Diagnostics at the level of rustc and ruff: one error per cause, "did you mean", every error in one run,
and nothing a hostile file writes reaches the terminal raw."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from sembp_dsl import cli
from sembp_dsl.language.diagnostics import PipelineError
from sembp_dsl.language.graph.compile import compile_file

HEADER = 'pipeline t "A test"\ninput q: text\n'


def check(tmp_path, source: str, name: str = "p.sbp") -> tuple[int, str]:
    path = tmp_path / name
    path.write_bytes(source.encode("utf-8", "surrogatepass"))
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli.main(["check", str(path)])
    return code, err.getvalue().replace(str(Path(path).parent) + "/", "")


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r": error\[E\d{3}\]: ", line)]


def test_an_undefined_target_of_many_sources_is_one_error(tmp_path):
    code, err = check(
        tmp_path, HEADER + "input r: text\ninput s: text\nnode a: text {}\nq, r, s -> y\nq -> a\noutput a\n"
    )
    assert code == 1 and errors(err) == ["p.sbp:6:12: error[E024]: undefined node or input 'y'"]


def test_a_typo_does_not_cascade_into_template_errors(tmp_path):
    source = HEADER + (
        'template t = "{{ q }} {{ prompt }}"\nparam p = "Judge"\n'
        "node judge: text { template = t  prompt = p }\nq -> juge\noutput judge\n"
    )
    code, err = check(tmp_path, source)
    assert errors(err) == ["p.sbp:6:6: error[E024]: undefined node or input 'juge'"]
    assert "      = help: did you mean 'judge'?\n" in err


@pytest.mark.parametrize(
    "source, message, help",
    [
        (
            'node a: text { prompt = analyse }\nparam analyze = "x"\nq -> a\noutput a\n',
            "error[E022]: undefined param 'analyse'",
            "did you mean 'analyze'?",
        ),
        (
            'template judge = "{{ q }}"\nnode a: text { template = juge }\nq -> a\noutput a\n',
            "error[E023]: undefined template 'juge'",
            "did you mean 'judge'?",
        ),
        (
            "node a: text { promt = x }\nq -> a\noutput a\n",
            "error[E030]: unknown setting 'promt' in node 'a'",
            "did you mean 'prompt'?",
        ),
        (
            'node a: text {}\nq -> a\noutput a\nmodel fowrard { name = "openai/m" }\n',
            "error[E036]: unknown model role 'fowrard'",
            "did you mean 'forward'?",
        ),
        (
            "node a: text {}\nq -> a\noutput a\noptimize { gradient = sibbling }\n",
            "error[E032]: 'gradient' must be one of sibling, no_sibling, none, not 'sibbling'",
            "did you mean 'sibling'?",
        ),
        (
            "node a: text {}\nq -> a\noutput a\noptimise { iterations = 2 }\n",
            "error[E035]: unknown block 'optimise'",
            "did you mean 'optimize'?",
        ),
        ("node a: text {}\nq -> a\noutput b\n", "error[E026]: undefined node 'b'", None),
        (
            "node alpha: text {}\nq -> alpha\noutput alpa\n",
            "error[E026]: undefined node 'alpa'",
            "did you mean 'alpha'?",
        ),
        (
            "node a: text {}\nq -> a\noutput a\nmetric exct\n",
            "error[E045]: unknown metric 'exct'",
            "did you mean 'exact'?",
        ),
    ],
)
def test_did_you_mean_is_a_help_line(tmp_path, source, message, help):
    code, err = check(tmp_path, HEADER + source)
    head, caret_lines, rest = err.split("\n", 3)[0], err.split("\n")[1:3], err.split("\n")[3:]
    assert code == 1 and head.endswith(": " + message), err  # the message ends where the hint begins
    assert caret_lines[1].lstrip().startswith("| ")
    assert rest[:1] == ([f"      = help: {help}"] if help else [""]), err


def test_a_duplicate_has_a_note_with_its_own_caret_at_the_first(tmp_path):
    code, err = check(
        tmp_path, HEADER + 'param p = "x"\nparam p = "y"\nnode a: text { prompt = p }\nq -> a\noutput a\n'
    )
    assert code == 1
    assert err == (
        "p.sbp:4:7: error[E020]: duplicate param 'p'\n"
        '    4 | param p = "y"\n'
        "      |       ^\n"
        "p.sbp:3:7: note: first declared here\n"
        '    3 | param p = "x"\n'
        "      |       ^\n"
    )


def test_two_syntax_errors_on_one_line_are_both_reported(tmp_path):
    code, err = check(tmp_path, HEADER + "node a: txt {} node b: txet {}\nq -> a\noutput a\n")
    assert [e.split(": error[")[0] for e in errors(err)] == ["p.sbp:3:9", "p.sbp:3:24"]


def test_two_cycles_are_both_reported(tmp_path):
    source = HEADER + "".join(f"node {n}: text {{}}\n" for n in "abcd") + "q -> a\na -> b -> a\nc -> d -> c\noutput a\n"
    code, err = check(tmp_path, source)
    assert [e.split("error[E040]: ")[1] for e in errors(err)] == ["cycle: a -> b -> a", "cycle: c -> d -> c"]


def test_an_error_in_the_header_names_statements_and_hides_nothing(tmp_path):
    code, err = check(tmp_path, 'pipeline mini "x" "y"\ninput q: txet\nnode a: text {}\nq -> a\noutput a\n')
    first, second = errors(err)
    assert first.startswith(
        "p.sbp:1:19: error[E001]: unexpected '\"y\"'; expected one of 'demos', 'frozen', 'function', 'input', 'metric'"
    )
    assert "')'" not in first
    assert (
        second
        == "p.sbp:2:10: error[E001]: unexpected 'txet'; expected one of 'choice', 'json', 'list', 'number', 'text'"
    )
    assert "      = help: did you mean 'text'?" in err


def test_cr_only_files_get_true_lines_and_columns(tmp_path):
    code, err = check(tmp_path, (HEADER + "node a: text {}\nq -> zz\noutput a\n").replace("\n", "\r"))
    assert errors(err) == ["p.sbp:4:6: error[E024]: undefined node or input 'zz'"]
    assert "    4 | q -> zz\n" in err


def test_control_characters_in_echoed_source_are_escaped(tmp_path):
    code, err = check(
        tmp_path, HEADER + 'node a: txet { prompt = "\x1b[31m\x1b]0;owned\x07\u202e" }\nq -> a\noutput a\n'
    )
    assert code == 1 and "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    assert "\\x1b[31m\\x1b]0;owned\\x07\\u202e" in err
    assert "    3 | node a: txet" in err and "      |         ^~~~\n" in err  # the caret still lines up


def test_a_long_line_is_cut_around_the_error(tmp_path):
    code, err = check(tmp_path, HEADER + 'param p = "' + "x" * 100000 + '" node a: txet {}\nq -> a\noutput a\n')
    assert code == 1 and len(err) < 2000 and "^~~~" in err


def test_a_lone_surrogate_is_an_error_in_check_and_compile(tmp_path):
    source = HEADER + 'param p = "half \\ud800 a pair"\nnode a: text { prompt = p }\nq -> a\noutput a\n'
    code, err = check(tmp_path, source)
    assert code == 1 and "p.sbp:3:11: error[E008]: a \\u escape in this string is half a surrogate pair" in err
    with pytest.raises(PipelineError):
        compile_file(str(tmp_path / "p.sbp"))
    code, err = check(tmp_path, source.replace("\\ud800", "\\ud83d\\ude00"))  # a whole pair is a character
    assert code == 0, err


@pytest.mark.parametrize(
    "setting, message",
    [
        ("train_size = -5", "'train_size' must be at least 0 and at most 10,000,000, not -5"),
        ("iterations = 1e32", "'iterations' must be an integer, not 1e+32"),
        ("iterations = 100000000000000000000000000000000", "'iterations' must be at least 0 and at most 1,000"),
        ("gate_alpha = 0", "'gate_alpha' must be more than 0"),
        ("errors_per_gradient = 0", "'errors_per_gradient' must be at least 1"),
    ],
)
def test_check_rejects_settings_that_would_surely_fail(tmp_path, setting, message):
    code, err = check(tmp_path, HEADER + f"node a: text {{}}\nq -> a\noutput a\noptimize {{ {setting} }}\n")
    assert code == 1 and message in err, err


def test_check_rejects_an_empty_choice_and_nan(tmp_path):
    code, err = check(tmp_path, HEADER + 'node a: choice("", No) {}\nq -> a\noutput a\n')
    assert code == 1 and "p.sbp:3:9: error[E048]: a choice option cannot be empty" in err
    yaml = 'pipeline: t\ninputs: {q: text}\nnodes:\n  a: {type: text}\nedges: ["q -> a"]\noutput: a\nmodels: {forward: {temperature: .nan, timeout: -1}}\n'
    code, err = check(tmp_path, yaml, "p.yaml")
    assert code == 1 and "p.yaml:7:33: error[E064]: .nan is not a finite number" in err


def test_a_repeated_edge_is_one_warning_at_the_repeat(tmp_path):
    code, err = check(tmp_path, HEADER + "node a: text {}\nq -> a\nq -> a\noutput a\n")
    assert code == 0 and [line for line in err.splitlines() if "warning" in line or "note" in line] == [
        "p.sbp:5:1: warning[W005]: edge q -> a is declared twice",
        "p.sbp:4:1: note: first declared here",
    ]
    code, err = check(tmp_path, HEADER + "node a: text {}\nq, q -> a\noutput a\n")
    assert code == 0 and "p.sbp:4:4: warning[W005]: edge q -> a is declared twice" in err
    assert "p.sbp:4:1: note: first declared here" in err


SCHEMA_YAML = 'pipeline: t\ninputs: {q: text}\nnodes:\n  a: {type: text}\nedges: ["q -> a"]\noutput: a\n'


@pytest.mark.parametrize(
    "extra, edit",
    [
        ("colour: red\n", None),
        (None, ("a: {type: text}", "a: {type: text, promt: p}")),
        (None, ("a: {type: text}", "a: {type: text, parse: json}")),
        (None, ("a: {type: text}", "a: {type: 3}")),
        (None, ("a: {type: text}", "a: {type: texts}")),
        ("metric: 9exact\n", None),
        ("metrics: {helpful: {prompt: p, scale: 5}}\n", None),
        ("metrics: {helpful: {rubric: p}}\n", None),
        ("models: {9lives: {name: m}}\n", None),
        ("models: {forward: {name: m, temprature: 0}}\n", None),
        ("models: {forward: {temperature: hot}}\n", None),
        ("models: {forward: {max_tokens: 0}}\n", None),
        ("optimize: {gradient: sibbling}\n", None),
        ("optimize: {iterations: -1}\n", None),
        ("optimize: {gate_alpha: 0}\n", None),
        ("optimize: {train_size: many}\n", None),
        (None, ("inputs: {q: text}", "inputs: {q: [text]}")),
        (None, ("output: a", "output: {node: a, form: answer}")),
    ],
)
def test_the_shipped_schema_rejects_what_check_rejects(tmp_path, extra, edit):
    import jsonschema
    import yaml

    from sembp_dsl.language.syntax.yaml_form import schema

    source = SCHEMA_YAML + (extra or "")
    if edit:
        source = source.replace(*edit)
    assert list(jsonschema.Draft202012Validator(schema()).iter_errors(yaml.safe_load(source))), source
    code, err = check(tmp_path, source, "p.yaml")
    assert code == 1 and err.count("error[") == 1, err


def test_the_shipped_schema_accepts_the_examples_and_matches_the_checker():
    import jsonschema
    import yaml

    from sembp_dsl.language.check import settings
    from sembp_dsl.language.nodes import maps
    from sembp_dsl.language.nodes.metrics import JUDGE_SETTINGS
    from sembp_dsl.language.syntax.yaml_form import schema

    root = Path(__file__).resolve().parents[1]
    jsonschema.Draft202012Validator.check_schema(schema())
    for path in [root / "pipelines/liar.yaml"]:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema(), cls=jsonschema.Draft202012Validator)
    defs = schema()["$defs"]
    for name, table in (("model", settings.MODEL_SETTINGS), ("optimize", settings.OPTIMIZE_SETTINGS)):
        assert set(defs[name]["properties"]) == set(table), name
        for key, accepted in table.items():
            if isinstance(accepted[0], str):
                assert defs[name]["properties"][key]["enum"] == list(accepted)
            if key in settings.BOUNDS:
                low, high, exclusive = settings.BOUNDS[key]
                assert defs[name]["properties"][key]["exclusiveMinimum" if exclusive else "minimum"] == low
                assert defs[name]["properties"][key]["maximum"] == high
    node = schema()["properties"]["nodes"]["additionalProperties"]["properties"]
    assert set(node) == {"type", "each", *settings.NODE_SETTINGS, *maps.SETTINGS}  # `each`: a map's `for each`
    assert node["timeout"]["maximum"] == settings.BOUNDS["timeout"][1]
    assert schema()["properties"]["metric"]["$ref"] == "#/$defs/name"  # a built-in, or a metric the file defines
    assert set(schema()["$defs"]["judge"]["properties"]) == set(JUDGE_SETTINGS)
    assert schema()["properties"]["models"]["propertyNames"] == {"$ref": "#/$defs/name"}  # roles and named models


def test_sbpc_schema_prints_the_shipped_schema_with_the_strategies_named():
    import json

    from sembp_dsl.language.blocks.method import STRATEGIES
    from sembp_dsl.language.syntax.yaml_form import schema

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["schema"]) == 0
    printed, shipped = json.loads(out.getvalue()), json.loads(json.dumps(schema()))  # a copy: schema() is cached
    assert printed["$defs"]["optimize"]["properties"]["strategies"]["items"] == {"enum": list(STRATEGIES)}
    del printed["$defs"]["optimize"]["properties"]["strategies"]["items"]
    del shipped["$defs"]["optimize"]["properties"]["strategies"]["items"]
    assert printed == shipped


def test_mermaid_ids_are_never_mermaid_keywords(tmp_path):
    import re

    from sembp_dsl.language.tooling.emit import emit_mermaid

    path = tmp_path / "k.sbp"
    path.write_text(
        'pipeline k\ninput end: text\nnode style: choice("(A)", "B") {}\nnode class: text {}\n'
        "node click: text {}\nend -> style, class -> click\noutput click\n"
    )
    chart = emit_mermaid(compile_file(str(path))).splitlines()
    assert chart[0] == "flowchart LR"
    shape = re.compile(r'  n\d+(\(\["[^"]*"\]\)|\[\["[^"]*"\]\]|\["[^"]*"\])\Z')
    assert all(shape.match(line) or re.fullmatch(r"  n\d+ --> n\d+", line) for line in chart[1:]), chart
    assert chart[1:5] == [
        '  n0(["end"])',
        '  n1["style: choice((A), B)"]',
        '  n2["class: text"]',
        '  n3[["click: text"]]',
    ]
    assert chart[5:] == ["  n0 --> n1", "  n0 --> n2", "  n1 --> n3", "  n2 --> n3"]


def test_the_language_doc_matches_the_code():
    import re

    from sembp_dsl.language.nodes.templates import BUILTIN, builtin_source

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs/language.md").read_text()
    assert builtin_source("loss").strip() in doc  # the loss template, quoted verbatim
    gsm8k = (root / "pipelines/gsm8k.sbp").read_text()
    quoted = re.search(r"^(node answer: number \{.*?\})\s+# gsm8k\.sbp$", doc, re.M).group(1)
    declared = re.search(r"^node answer: number\s*\{.*?\}", gsm8k, re.M).group(0)
    assert quoted.split() == declared.split()
    assert "End with the final answer, a single number, on the last line." in gsm8k
    assert "End with the final answer, a single number, on the last line." in " ".join(doc.split())
    for name, allowed in BUILTIN.items():
        row = re.search(rf"^\| `{name}` \|[^|]*\| (.*) \|$", doc, re.M).group(1)
        if not row.startswith("same as"):
            assert set(re.findall(r"`(\w+)`", row)) == allowed, name


def test_control_characters_in_strings_are_errors(tmp_path):
    code, err = check(tmp_path, HEADER + 'param p = "red \x1b[31m"\nnode a: text { prompt = p }\nq -> a\noutput a\n')
    assert code == 1 and "p.sbp:3:11: error[E007]: control character \\x1b in a string; pipelines hold text" in err
    assert "\x1b" not in err
    yaml = 'pipeline: t\ninputs: {q: text}\nnodes:\n  a: {type: text}\nedges: ["q -> a"]\noutput: a\ndescription: "bell \\a"\n'
    code, err = check(tmp_path, yaml, "p.yaml")
    assert code == 1 and "p.yaml:7:14: error[E007]: control character \\x07 in a string" in err


def test_two_cycles_that_share_a_node_are_both_reported(tmp_path):
    source = (
        HEADER
        + "".join(f"node {n}: text {{}}\n" for n in "abcd")
        + "q -> a\na -> b -> a\na -> c -> a\nc -> d\noutput d\n"
    )
    code, err = check(tmp_path, source)
    assert [e.split("error[E040]: ")[1] for e in errors(err)] == ["cycle: a -> b -> a", "cycle: c -> a -> c"]


def test_a_node_behind_a_cycle_is_not_reported_as_on_one(tmp_path):
    source = HEADER + "".join(f"node {n}: text {{}}\n" for n in "abc") + "q -> a\na -> b -> a\nb -> c\noutput c\n"
    code, err = check(tmp_path, source)
    assert [e.split("error[E040]: ")[1] for e in errors(err)] == ["cycle: a -> b -> a"]


@pytest.mark.parametrize(
    "source, where, line",
    [
        ("node a: text { prompt = p\nnode impact: text {}\nq -> a\noutput a\n", "p.sbp:3:14", 4),
        ("node a: text { prompt = p\n  template = t\nq -> a\noutput a\n", "p.sbp:3:14", 5),
        ('model forward { name = "x"\nnode a: text {}\nq -> a\noutput a\n', "p.sbp:3:15", 4),
    ],
)
def test_a_missing_closing_brace_is_one_error_at_the_brace(tmp_path, source, where, line):
    code, err = check(tmp_path, HEADER + source)
    assert errors(err) == [f"{where}: error[E009]: this '{{' is never closed: add '}}' before line {line}"]


@pytest.mark.parametrize(
    "source, expected",
    [
        (
            "pipeline: t\ninputs:\n  q: text\nnodes:\n  a:\n    type: text\n   prompt: p\noutput: a\n",
            "p.yaml:7:4: error[E060]: YAML: this line is indented 3 spaces, which lines up with no key above it "
            "(line 6 has 4 spaces): indent it as far as the keys it belongs with",
        ),
        (
            "pipeline: t\ninputs:\n  q: text\nnodes:\n  a:\n    type: text\n      prompt: p\noutput: a\n",
            "p.yaml:7:7: error[E060]: YAML: this key is indented more than line 6 (6 spaces after 4 spaces), "
            "which already has a value, so it cannot start a key there: indent it like the line above",
        ),
        (
            "pipeline: t\ninputs:\n\tq: text\n",
            "p.yaml:3:1: error[E060]: YAML: a tab in the indentation: YAML indents with spaces only",
        ),
        (
            "pipeline: t\nparams:\n  p: Answer: yes\n",
            "p.yaml:3:12: error[E060]: YAML: ': ' inside a value: put the value in quotes "
            '(prompt: "Answer: Yes or No")',
        ),
    ],
)
def test_yaml_indentation_errors_are_in_words_at_the_line_that_is_wrong(tmp_path, source, expected):
    code, err = check(tmp_path, source, "p.yaml")
    assert errors(err) == [expected]


def test_an_input_and_a_node_of_one_name_is_one_error_even_as_the_output(tmp_path):
    code, err = check(
        tmp_path,
        HEADER + 'input a: text\nnode a: choice(Yes, No) { prompt = p }\nparam p = "Yes or No?"\nq -> a\noutput a\n',
    )
    assert code == 1 and "Traceback" not in err
    assert errors(err) == ["p.sbp:4:6: error[E020]: duplicate node or input 'a'"]
