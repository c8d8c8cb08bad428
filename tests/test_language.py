"""The .sbp language, its YAML twin and the checks: golden messages, exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sembp_dsl import cli
from sembp_dsl.language.diagnostics import PipelineError
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.language.syntax.parser import parse
from sembp_dsl.language.syntax.source import load
from sembp_dsl.language.tooling.emit import EMITTERS, emit_prompts

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = sorted(str(p) for p in (ROOT / "pipelines").iterdir() if p.suffix in (".sbp", ".yaml"))

HEADER = 'pipeline t "A test"\ninput q: text\n'


def check(tmp_path, source: str, name: str = "p.sbp") -> tuple[int, str]:
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    return check_path(str(path))


def check_path(path: str) -> tuple[int, str]:
    import contextlib
    import io

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli.main(["check", path])
    return code, err.getvalue().replace(str(Path(path).parent) + "/", "")


def test_examples_check_clean():
    assert PIPELINES, "no example pipelines found"
    for path in PIPELINES:
        code, err = check_path(path)
        assert (code, err) == (0, ""), path


def test_yaml_twin_lowers_to_the_same_ir():
    sbp, yaml = load(str(ROOT / "pipelines/liar.sbp")), load(str(ROOT / "pipelines/liar.yaml"))
    assert sbp == yaml
    # and the comparison is not vacuous: one changed prompt breaks it
    assert parse(sbp.text.replace("Analyze the statement", "Study the statement")) != yaml


def test_liar_graph_shape():
    graph = compile_file(str(ROOT / "pipelines/liar.sbp"))
    verdict = graph.nodes["verdict"]
    assert verdict.hints == (
        "statement_analysis",
        "job_title_analysis",
        "state_analysis",
        "party_analysis",
        "source_analysis",
    )
    assert verdict.context == ("statement", "job_title", "state", "party", "source")
    assert list(graph.nodes)[-1] == "verdict" and graph.output == "verdict"
    assert graph.trainable == tuple(p.name for p in graph.pipeline.params)
    assert [n for n in graph.nodes.values() if n.hints] == [verdict]


def test_block_strings_dedent_by_closing_quotes():
    pipeline = parse(
        HEADER + 'param p = """\n    first\n      indented\n\n    last\n    """\nparam s = "a\\n\\"b\\""\n'
    )
    assert pipeline.params[0].text == "first\n  indented\n\nlast"
    assert pipeline.params[1].text == 'a\n"b"'


def test_syntax_error_golden(tmp_path):
    code, err = check(tmp_path, HEADER + "node a: txt { }\noutput a\n")
    assert code == 1
    assert err == textwrap.dedent("""\
        p.sbp:3:9: error[E001]: unexpected 'txt'; expected one of 'choice', 'json', 'list', 'number', 'text', '{'
            3 | node a: txt { }
              |         ^~~
              = help: did you mean 'text'?
        """)


def test_every_broken_statement_is_reported(tmp_path):
    code, err = check(
        tmp_path, HEADER + "node a: text { prompt = }\nnode b: text {\n  parse == tag }\nparam x = 3\noutput a\n"
    )
    assert code == 1
    assert [line.split(": error")[0] for line in err.splitlines() if ": error[" in line] == [
        "p.sbp:3:25",
        "p.sbp:5:10",
        "p.sbp:6:11",
    ]


def test_unterminated_string(tmp_path):
    code, err = check(tmp_path, HEADER + 'param p = """\n  never closed\n')
    assert code == 1 and err.startswith("p.sbp:3:11: error[E003]: unterminated string\n")


def test_duplicates_and_undefined_names_all_at_once(tmp_path):
    code, err = check(
        tmp_path,
        HEADER
        + textwrap.dedent("""\
        param p = "x"
        param p = "y"
        node a: text { prompt = nope  template = missing }
        node a: text { prompt = p }
        q, ghost -> a
        output b
        """),
    )
    assert code == 1
    assert err == textwrap.dedent("""\
        p.sbp:6:6: error[E020]: duplicate node or input 'a'
            6 | node a: text { prompt = p }
              |      ^
        p.sbp:5:6: note: first declared here
            5 | node a: text { prompt = nope  template = missing }
              |      ^
        p.sbp:4:7: error[E020]: duplicate param 'p'
            4 | param p = "y"
              |       ^
        p.sbp:3:7: note: first declared here
            3 | param p = "x"
              |       ^
        p.sbp:5:25: error[E022]: undefined param 'nope'
            5 | node a: text { prompt = nope  template = missing }
              |                         ^~~~
        p.sbp:5:42: error[E023]: undefined template 'missing'
            5 | node a: text { prompt = nope  template = missing }
              |                                          ^~~~~~~
        p.sbp:7:4: error[E024]: undefined node or input 'ghost'
            7 | q, ghost -> a
              |    ^~~~~
        p.sbp:8:8: error[E026]: undefined node 'b'
            8 | output b
              |        ^
        """)


def test_cycle_is_printed(tmp_path):
    code, err = check(
        tmp_path, HEADER + "node a: text {}\nnode b: text {}\nnode c: text {}\nq -> a -> b -> c\nc -> a\noutput c\n"
    )
    assert code == 1
    assert "error[E040]: cycle: a -> b -> c -> a" in err


def test_template_variable_the_node_does_not_receive(tmp_path):
    code, err = check(
        tmp_path,
        HEADER
        + textwrap.dedent('''\
        param p = "Answer."
        template t = """
          {{ prompt }} {{ q }}
          Speaker: {{ speaker }}
          """
        node a: text { prompt = p  template = t }
        q -> a
        output a
        '''),
    )
    assert code == 1
    assert err == textwrap.dedent("""\
        p.sbp:6:15: error[E053]: template 't' uses 'speaker', which node 'a' does not receive (it receives: q)
            6 |   Speaker: {{ speaker }}
              |               ^~~~~~~
        """)


def test_template_syntax_error_points_into_the_template(tmp_path):
    code, err = check(
        tmp_path,
        HEADER + 'template t = """\n  ok\n  {% if q %}\n  """\nnode a: text { template = t }\nq -> a\noutput a\n',
    )
    assert code == 1 and "p.sbp:" in err and "template syntax" in err


def test_metric_mismatch_and_unknown_metric(tmp_path):
    code, err = check(tmp_path, HEADER + "node a: text {}\nq -> a\noutput a\nmetric numeric\n")
    assert code == 1
    assert "p.sbp:6:8: error[E046]: metric 'numeric' needs a number output, but 'a' is text" in err
    code, err = check(tmp_path, HEADER + "node a: text {}\nq -> a\noutput a\nmetric fuzzy\n")
    assert "error[E045]: unknown metric 'fuzzy'\n" in err and "= help: expected one of exact, numeric, json\n" in err


def test_no_output_node(tmp_path):
    code, err = check(tmp_path, HEADER + "node a: text {}\nq -> a\n")
    assert code == 1
    assert err.startswith("p.sbp:1:10: error[E042]: no output node: add `output <node>`\n")


def test_settings_are_checked(tmp_path):
    code, err = check(
        tmp_path,
        HEADER + "node a: text { parse = json  promt = x }\nq -> a\noutput a\n"
        'model backwards { name = 3 }\noptimize { iterations = "many" }\n',
    )
    assert code == 1
    for message in (
        "'parse' must be one of reply, tag, not 'json'",
        "unknown setting 'promt' in node 'a'",
        "unknown model role 'backwards'",
        "'name' must be a string, not 3",
        "'iterations' must be an integer",
    ):
        assert message in err


def test_warnings_do_not_fail(tmp_path):
    code, err = check(
        tmp_path, HEADER + 'param unused = "x"\nnode a: text {}\nnode stray: text {}\nq -> a\nq -> stray\noutput a\n'
    )
    assert code == 0
    assert "p.sbp:3:7: warning[W001]: param 'unused' is not used by any node" in err
    assert "p.sbp:5:6: warning[W004]: node 'stray' cannot reach the output 'a'" in err


YAML = textwrap.dedent("""\
    pipeline: t
    inputs: {q: text}
    params:
      p: Answer the question.
    nodes:
      a: {type: text, prompt: p}
    edges:
      - q -> a
    output: a
    """)


def test_yaml_schema_error_points_at_the_yaml(tmp_path):
    code, err = check(tmp_path, YAML.replace("output: a", "output: a\nmodles: {}"), "p.yaml")
    assert code == 1
    assert err.startswith("p.yaml:10:1: error[E063]: unknown key 'modles'\n")
    assert "   10 | modles: {}\n      | ^~~~~~\n      = help: did you mean 'models'?\n" in err


def test_yaml_semantic_error_points_at_the_yaml(tmp_path):
    code, err = check(tmp_path, YAML.replace("q -> a", "q -> b"), "p.yaml")
    assert code == 1
    assert err.startswith(
        textwrap.dedent("""\
        p.yaml:8:10: error[E024]: undefined node or input 'b'
            8 |   - q -> b
              |          ^
        """)
    )


def test_yaml_syntax_error(tmp_path):
    code, err = check(tmp_path, "pipeline: t\nnodes: [a\n", "p.yaml")
    assert code == 1 and err.startswith("p.yaml:3:1: error[E060]: YAML:")


@pytest.mark.parametrize(
    "content", [b"", b"\x00\xff\xfe garbage \x89PNG", b"\xef\xbb\xbf", "pipeline x\nnode é: text".encode()]
)
def test_garbage_gives_located_errors(tmp_path, content):
    for suffix in (".sbp", ".yaml"):
        path = tmp_path / f"g{suffix}"
        path.write_bytes(content)
        code, err = check_path(str(path))
        assert code == 1 and "error[E" in err and "Traceback" not in err


def test_every_truncation_of_an_example_is_handled():
    text = (ROOT / "pipelines/liar.sbp").read_text()
    for cut in range(0, len(text), 7):
        try:
            parse(text[:cut], "cut.sbp")
        except PipelineError as exc:
            assert exc.render().startswith("cut.sbp:")


def test_whole_process_never_shows_a_traceback(tmp_path):
    bad = tmp_path / "bad.sbp"
    bad.write_bytes(b"pipeline x\n\xff\xfe")
    cases = [str(bad), str(tmp_path), str(tmp_path / "missing.sbp")]
    result = subprocess.run([sys.executable, "-m", "sembp_dsl.cli", "check", *cases], capture_output=True, text=True)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{bad}:2:1: error[E014]: invalid UTF-8 (byte 0xff)" in result.stderr
    assert f"{tmp_path}: error[E011]: is a directory" in result.stderr
    assert "missing.sbp: error[E010]: no such file" in result.stderr
    usage = subprocess.run([sys.executable, "-m", "sembp_dsl.cli", "check"], capture_output=True, text=True)
    assert usage.returncode == 2


def test_emitters():
    graph = compile_file(str(ROOT / "pipelines/liar.sbp"))
    data = json.loads(EMITTERS["ir"](graph))
    assert data["params"][0]["literal"][1:3] == [9, 27]  # line and column of the first prompt literal
    assert '"statement_analysis" -> "verdict";' in EMITTERS["dot"](graph)
    mermaid = EMITTERS["mermaid"](graph)
    ids = {
        line.split('"')[1].split(":")[0]: line.split()[0].split("[")[0].split("(")[0]
        for line in mermaid.splitlines()[1:]
        if '"' in line
    }
    assert f"{ids['statement_analysis']} --> {ids['verdict']}" in mermaid
    prompts = EMITTERS["prompts"](graph)
    assert "Hint 5 (from source_analysis): <output of source_analysis>" in prompts
    assert prompts.count("backward, no sibling") == 5
    assert "The answer should be <expected>" in prompts
    # the optimizer's prompt for every trainable param, with its limit and an example's placeholders
    assert prompts.count(": optimizer ===") == len(graph.trainable) == 6
    section = prompts.split("=== verdict_task: optimizer ===\n")[1]
    assert 'used by the component "verdict"' in section and "How the output should change:\n<gradient>" in section
    assert "keep it under 800 characters" in section


def test_templates_render_in_a_sandbox(tmp_path):
    path = tmp_path / "evil.sbp"
    path.write_text(
        HEADER
        + 'template t = "{{ q.__class__.__mro__[1].__subclasses__() }}"\nnode a: text { template = t }\nq -> a\noutput a\n'
    )
    with pytest.raises(PipelineError, match="SecurityError: access to attribute '__class__'"):
        compile_file(str(path))


def test_yaml_bad_keys_point_at_the_key(tmp_path):
    source = YAML.replace("inputs: {q: text}", "inputs: {q: text, bad-name: text}") + "models:\n  fa-st: {name: x}\n"
    code, err = check(tmp_path, source, "p.yaml")
    assert code == 1
    assert "p.yaml:2:19: error[E063]: inputs: 'bad-name' is not a valid name" in err
    assert "p.yaml:11:3: error[E063]: models: 'fa-st' is not a valid name" in err


def test_a_file_without_its_header_gets_one_error(tmp_path):
    code, err = check(tmp_path, "node a: text {}\noutput a\n")
    assert code == 1 and err.count("error[") == 1 and "expected 'pipeline'" in err


def test_builtin_prompts_can_be_overridden_per_pipeline(tmp_path):
    source = HEADER + "node a: text {}\nnode b: text {}\nq -> a -> b\noutput b\n"
    override = (
        'template backward = """\n  Judge {{ node }} on {{ hints | length }} hints; feedback: {{ feedback }}\n  """\n'
    )
    path = tmp_path / "p.sbp"
    path.write_text(source + override)
    prompts = EMITTERS["prompts"](compile_file(str(path)))
    assert "Judge b on 1 hints; feedback: <feedback on b>" in prompts
    code, err = check(tmp_path, source + 'template loss = "{{ expected }} {{ secret }}"\n')
    assert (
        code == 1
        and "template 'loss' uses 'secret'; it may use expected, grade, node, output, parse_error, reason, task" in err
    )


def test_json_output_type_and_its_default_metric(tmp_path):
    from sembp_dsl.language.kinds.model import parse_reply

    path = tmp_path / "j.sbp"
    path.write_text(HEADER + "node facts: json { parse = tag }\nq -> facts\noutput facts\n")
    graph = compile_file(str(path))
    assert str(graph.nodes["facts"].type) == "json" and graph.metric == "json"
    reply = 'Here you go: <output>```json\n{"b": [1, 2], "a": "x"}\n```</output> done'
    assert parse_reply(graph.nodes["facts"], reply) == ('{"a": "x", "b": [1, 2]}', None)
    assert parse_reply(graph.nodes["facts"], "<output>none</output>") == (None, "no JSON value in the reply")
    yaml_path = tmp_path / "j.yaml"
    yaml_path.write_text(YAML.replace("{type: text, prompt: p}", "{type: json, prompt: p}"))
    assert str(compile_file(str(yaml_path)).nodes["a"].type) == "json"


def test_only_used_unfrozen_params_are_trainable(tmp_path):
    path = tmp_path / "p.sbp"
    path.write_text(
        HEADER + 'param used = "a"\nparam unused = "b"\nfrozen param fixed = "c"\n'
        "node a: text { prompt = used }\nnode b: text { prompt = fixed }\nq -> a, b\na, b -> c\n"
        "node c: text {}\noutput c\n"
    )
    assert compile_file(str(path)).trainable == ("used",)


def test_yaml_alias_bombs_are_refused(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
    )
    code, err = check(tmp_path, "pipeline: t\n" + bomb, "bomb.yaml")
    assert (
        code == 1
        and err.count("error[E061]: YAML alias '*") == 8
        and "bomb.yaml:3:8: error[E061]: YAML alias '*a'" in err
    )


def test_a_prompt_may_only_use_what_its_node_receives(tmp_path):
    code, err = check(
        tmp_path,
        HEADER + 'param p = "Judge {{ q }} said by {{ speaker }}."\nnode a: text { prompt = p }\nq -> a\noutput a\n',
    )
    assert code == 1
    assert "p.sbp:3:37: error[E055]: param 'p' uses 'speaker', which node 'a' does not receive" in err
    code, err = check(
        tmp_path, HEADER + 'param p = "Judge {% if q %}"\nnode a: text { prompt = p }\nq -> a\noutput a\n'
    )
    assert code == 1 and "error[E050]: template syntax in param 'p':" in err


def test_compile_ir_masks_a_password_in_a_url_setting(tmp_path, capsys):
    path = tmp_path / "p.sbp"
    path.write_text(
        HEADER
        + 'node a: text {}\nq -> a\noutput a\nmodel forward { name = "openai/m"  api_base = "http://me:s3cret@localhost:1/v1" }\n'
    )
    assert cli.main(["compile", str(path), "--emit", "ir"]) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out and "http://me:***@localhost:1/v1" in out


def test_compile_prints_prompts_as_it_makes_them_and_caps_warnings(tmp_path):
    """A graph with 3,000 unused params: 50 warnings and a count, and the prompts come out whole, in order."""
    path = tmp_path / "big.sbp"
    path.write_text(
        HEADER + "".join(f'param p{i} = "x"\n' for i in range(3000)) + "node a: text {}\nq -> a\noutput a\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "compile", str(path), "--emit", "prompts"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0
    assert (
        result.stderr.count("warning[W001]:") == 50
        and "... and 2950 more (`sbpc check --json` lists them all)" in result.stderr
    )
    assert result.stdout == emit_prompts(compile_file(str(path))) + "\n"
