"""`sbpc fmt`: one canonical layout that keeps comments and every string's text, is idempotent, compiles to the
same IR, and is what write-back already writes; files that do not parse are reported, never rewritten."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sembp_dsl import cli
from sembp_dsl.language.diagnostics import PipelineError
from sembp_dsl.language.syntax.parser import parse
from sembp_dsl.language.syntax.source import read as read_file
from sembp_dsl.language.syntax.tokens import read
from sembp_dsl.language.tooling.fmt import WIDTH, format_text
from sembp_dsl.language.tooling.writeback import rewrite

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "pipelines").glob("*.sbp"))
sys.path.insert(0, str(Path(__file__).parent))
from hostile_corpus import corpus  # noqa: E402

HOSTILE = [(name, data) for name, data in corpus() if name.endswith(".sbp")]


def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        old, sys.stdin = sys.stdin, io.StringIO(stdin)
        try:
            code = cli.main(list(argv))
        finally:
            sys.stdin = old
    return code, out.getvalue(), err.getvalue()


def same_ir(a: str, b: str) -> bool:
    return parse(a, "a.sbp") == parse(b, "b.sbp")  # spans never take part in equality


def test_a_messy_file_gets_the_canonical_layout():
    messy = (
        "# header comment\n\n\n"
        'pipeline   demo    "A demo"\n'
        'input q,ctx:text   from "context"   # where it reads\n'
        'param ask="Answer."\n'
        "frozen param style = 'x'\n".replace("'x'", '"Be brief."')
        + 'param long_name =   """\n        Say it.\n\n          indented\n        """\n'
        'node helper:text{prompt=ask;template="{{ prompt }} {{ q }}"}node a : choice( Yes,No ) { prompt = style }\n'
        "model forward {\n"
        '    name="m" # the model\n'
        "\n\n"
        "    # sampling\n"
        "    temperature=0\n"
        "}\n"
        "q,ctx->helper->a\noutput a\n\n\n\nmetric exact   \n# the end\n"
    )
    assert format_text(messy) == (
        "# header comment\n\n"
        'pipeline demo "A demo"\n'
        'input q, ctx: text from "context"  # where it reads\n'
        'param ask          = "Answer."\n'
        'frozen param style = "Be brief."\n'
        'param long_name    = """\n  Say it.\n\n    indented\n  """\n'
        'node helper: text       { prompt = ask  template = "{{ prompt }} {{ q }}" }\n'
        "node a: choice(Yes, No) { prompt = style }\n"
        "model forward {\n"
        '  name = "m"  # the model\n'
        "\n"
        "  # sampling\n"
        "  temperature = 0\n"
        "}\n"
        "q, ctx -> helper -> a\noutput a\n\nmetric exact\n# the end\n"
    )


def test_a_block_stays_on_one_line_only_when_written_so_and_short_enough():
    header = "pipeline t\ninput q: text\nnode a: text {}\nq -> a\noutput a\n"
    assert format_text(header + "optimize {\n  iterations = 2 }\n").endswith("optimize {\n  iterations = 2\n}\n")
    assert format_text(header + "optimize {iterations=2\n}\n").endswith("optimize { iterations = 2 }\n")
    long = "optimize { " + "  ".join(f"iterations = {10**9}" for _ in range(8)) + " }\n"
    formatted = format_text(header + long)
    assert formatted.endswith("optimize {\n" + "".join(f"  iterations = {10**9}\n" for _ in range(8)) + "}\n")


def test_long_edges_break_before_arrows_then_after_commas():
    names = [f"input_number_{i}" for i in range(12)]
    source = (
        "pipeline t\n"
        + "".join(f"input {n}: text\n" for n in names)
        + "node a: text {}\nnode b: text {}\n"
        + f"{', '.join(names)} -> a -> b\noutput b\n"
    )
    lines = format_text(source).splitlines()
    at = lines.index(next(line for line in lines if line.startswith("input_number_0,")))
    assert all(len(line) <= WIDTH for line in lines)
    assert lines[at + 1].startswith("    input_number_") and lines[at + 2 :][:2] == ["  -> a", "  -> b"]


def test_a_comment_inside_a_statement_keeps_it_as_written():
    source = "pipeline t\ninput q: text\nnode a: text {}\nq   # from the question\n   ->   a\noutput a\n"
    assert format_text(source) == source


def test_crlf_files_stay_crlf_and_a_bom_is_kept(tmp_path):
    path = tmp_path / "p.sbp"
    path.write_bytes(b"\xef\xbb\xbfpipeline t\r\ninput q:text\r\nnode a: text {}\r\nq->a\r\noutput a\r\n")
    assert run("fmt", str(path))[0] == 0
    assert path.read_bytes() == b"\xef\xbb\xbfpipeline t\r\ninput q: text\r\nnode a: text {}\r\nq -> a\r\noutput a\r\n"


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_the_shipped_pipelines_are_formatted(path):
    text = path.read_text()
    assert format_text(text, str(path)) == text


@pytest.mark.parametrize("name, data", HOSTILE, ids=[name for name, _ in HOSTILE])
def test_hostile_files_are_formatted_or_reported_never_mangled(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    try:  # what fmt needs: the file can be read and parses (its checks may fail)
        parse(read_file(str(path)), str(path))
    except PipelineError as exc:
        code, out, err = run("fmt", str(path))
        assert (code, out, err) == (1, "", exc.render() + "\n")  # what `sbpc check` prints first
        assert path.read_bytes() == data
        return
    code, out, err = run("fmt", str(path))
    assert code == 0, err
    formatted = path.read_text(encoding="utf-8-sig")
    assert format_text(formatted, name) == formatted
    assert same_ir(formatted, data.decode("utf-8-sig"))
    assert run("fmt", "--check", str(path))[0] == 0


def test_check_and_diff_write_nothing_and_say_what_would_change(tmp_path):
    messy, tidy = tmp_path / "messy.sbp", tmp_path / "tidy.sbp"
    messy.write_text("pipeline t\ninput q:text\nnode a: text {}\nq->a\noutput a\n")
    tidy.write_text(format_text(messy.read_text()))
    before = messy.read_text()
    code, out, err = run("fmt", "--check", str(messy), str(tidy))
    assert code == 1 and err == f"would reformat {messy}\n" and messy.read_text() == before
    code, out, err = run("fmt", "--diff", str(messy))
    assert code == 1 and "-input q:text\n+input q: text\n" in out and messy.read_text() == before
    assert run("fmt", "--check", str(tidy)) == (0, "", "")
    code, out, err = run("fmt", str(messy), str(tidy))
    assert code == 0 and err == f"reformatted {messy}\n" and messy.read_text() == tidy.read_text()


def test_fmt_reports_a_broken_file_like_check_and_leaves_yaml_alone(tmp_path):
    broken = tmp_path / "broken.sbp"
    broken.write_text("pipeline t\ninput q: txt\n")
    code, out, err = run("fmt", str(broken), str(ROOT / "pipelines/liar.yaml"))
    assert code == 1 and "broken.sbp:2:10: error[E001]: unexpected 'txt'" in err
    assert broken.read_text() == "pipeline t\ninput q: txt\n"
    assert "liar.yaml: left as it is (sbpc fmt formats .sbp files)" in err
    assert run("fmt", str(tmp_path / "missing.sbp"))[2].startswith(f"{tmp_path}/missing.sbp: error[E010]")
    (tmp_path / "p.txt").write_text("pipeline t\n")
    assert "error[E015]: unknown kind of file" in run("fmt", str(tmp_path / "p.txt"))[2]


def test_fmt_reads_stdin_and_writes_stdout():
    code, out, _ = run("fmt", "-", stdin="pipeline t\ninput q:text\nnode a: text {}\nq->a\noutput a\n")
    assert code == 0 and out == "pipeline t\ninput q: text\nnode a: text {}\nq -> a\noutput a\n"


# -- generated pipelines: every layout of every statement, comments anywhere whitespace may be

NAMES = ["a", "b", "q", "ctx", "helper", "judge_1", "x_y", "forward", "optimize"]
name = st.sampled_from(NAMES)
prose = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30)
line_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")), max_size=20).filter(
    lambda t: '"""' not in t and not t.endswith('"')
)


@st.composite
def string(draw) -> str:
    kind = draw(st.sampled_from(["json", "block", "verbatim"]))
    if kind == "json":
        return json.dumps(draw(prose), ensure_ascii=draw(st.booleans()))
    if kind == "verbatim":
        text = draw(line_text.filter(lambda t: not t.startswith(("\n", "\r"))))
        return f'"""{text}"""'
    indent = draw(st.sampled_from(["", "  ", "    ", "\t"]))
    lines = draw(st.lists(line_text, max_size=4))
    body = "".join(f"{indent}{draw(st.sampled_from(['', '  ']))}{line}\n" if line.strip() else "\n" for line in lines)
    return f'"""\n{body}{indent}"""'


@st.composite
def settings_of(draw) -> list[str]:
    out = []
    for _ in range(draw(st.integers(0, 4))):
        value = draw(st.one_of(string(), st.sampled_from(["0", "2.5", "-3", "1e3", "true", "false", "reply", "tag"])))
        out += [draw(name), "=", value] + ([";"] if draw(st.booleans()) else [])
    return out


@st.composite
def names_list(draw) -> list[str]:
    names = draw(st.lists(name, min_size=1, max_size=5))
    return [token for n in names for token in (n, ",")][:-1]


@st.composite
def type_(draw) -> list[str]:
    kind = draw(st.sampled_from(["text", "number", "json", "choice"]))
    if kind != "choice":
        return [kind]
    options = draw(
        st.lists(st.one_of(name, st.sampled_from(['"(A)"', '"not sure"', "1", "-1"])), min_size=1, max_size=3)
    )
    return ["choice", "(", *[t for o in options for t in (o, ",")][:-1], ")"]


@st.composite
def statement(draw, params: list[str]) -> list[str]:
    kind = draw(st.sampled_from(["input", "param", "template", "node", "edge", "output", "metric", "block"]))
    if kind == "input":
        return ["input", *draw(names_list()), ":", *draw(type_())] + (
            ["from", draw(string())] if draw(st.booleans()) else []
        )
    if kind == "param":
        return (["frozen"] if draw(st.booleans()) else []) + [
            "param",
            draw(st.sampled_from(params)),
            "=",
            draw(string()),
        ]
    if kind == "template":
        return ["template", draw(name), "=", draw(string())]
    if kind == "node":
        return ["node", draw(name), ":", *draw(type_()), "{", *draw(settings_of()), "}"]
    if kind == "edge":
        chain = draw(names_list())
        for _ in range(draw(st.integers(1, 3))):
            chain += ["->", *draw(names_list())]
        return chain
    if kind == "output":
        return ["output", draw(name)] + (["from", draw(string())] if draw(st.booleans()) else [])
    if kind == "metric":
        return ["metric", draw(name)]
    return (
        [draw(st.sampled_from(["model", "optimize"]))]
        + ([draw(name)] if draw(st.booleans()) else [])
        + [
            "{",
            *draw(settings_of()),
            "}",
        ]
    )


WORDY = re.compile(r"[\w\"-]")
SEPARATORS = [" ", "  ", "\n", "\t", "\n\n", "   \n  ", " # note\n", "\n# own line\n\n"]


@st.composite
def pipeline_text(draw) -> str:
    params = [f"p{i}" for i in range(draw(st.integers(1, 4)))]
    tokens = ["pipeline", draw(name)] + ([draw(string())] if draw(st.booleans()) else [])
    used: set[str] = set()
    for _ in range(draw(st.integers(0, 10))):
        found = draw(statement(params))
        if "param" in found[:2]:  # a param is declared once, so write-back knows which to rewrite
            param = found[found.index("param") + 1]
            if param in used:
                continue
            used.add(param)
        tokens += found
    out = draw(st.sampled_from(["", "# leading\n", "\n\n"]))
    for before, token in zip(["", *tokens], tokens):
        if before and (WORDY.match(before[-1]) and WORDY.match(token[0]) or draw(st.booleans())):
            out += draw(st.sampled_from(SEPARATORS))
        out += token
    return out + draw(st.sampled_from(["", "\n", "  # trailing\n", "\n\n# closing\n"]))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipeline_text())
def test_generated_pipelines_format_to_the_same_ir_and_stay_formatted(text):
    try:
        before = parse(text, "g.sbp")
    except PipelineError:  # a generated string may hold what no file can (an escape gone wrong); not our case
        return
    formatted = format_text(text, "g.sbp")
    assert parse(formatted, "g.sbp") == before
    assert format_text(formatted, "g.sbp") == formatted
    assert [c.text for c in read(formatted).comments] == [c.text for c in read(before.text).comments]


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pipeline_text(),
    st.lists(st.one_of(prose, st.lists(line_text, min_size=2, max_size=4).map("\n".join)), min_size=4, max_size=4),
)
def test_what_write_back_writes_into_a_formatted_file_is_formatted(text, prompts):
    try:
        formatted = format_text(text, "g.sbp")
    except PipelineError:
        return
    pipeline = parse(formatted, "g.sbp")
    new = {param.name: prompt for param, prompt in zip(pipeline.params, prompts)}
    rewritten = rewrite(pipeline, new)
    assert format_text(rewritten, "g.sbp") == rewritten


def test_the_language_doc_shows_liar_sbp_as_it_is():
    doc = (ROOT / "docs/language.md").read_text()
    shown = re.search(r"```sbp\n(pipeline liar .*?)```", doc, re.S).group(1)
    whole = (ROOT / "pipelines/liar.sbp").read_text()
    assert whole.endswith(shown) and format_text(shown) == shown


def test_formatting_a_long_file_makes_no_full_garbage_collection():
    """`sbpc fmt` of an 838 KB, 20,000-node chain took over 300 s: its three parses make millions of acyclic
    objects, and each full collection walks all of them, so time grew faster than the file. A full collection
    during formatting is what made it superlinear (bench/hostile_sizes.py measures the time itself)."""
    import gc

    text = "pipeline chain\ninput q: text\n" + "".join(f"node n{i}: text {{}}\n" for i in range(3000))
    text += "".join(f"{'q' if i == 0 else f'n{i - 1}'} -> n{i}\n" for i in range(3000)) + "output n2999\n"
    full = []

    def count(phase, info):
        if phase == "start" and info["generation"] == 2:
            full.append(info)

    gc.collect()
    gc.callbacks.append(count)
    try:
        format_text(text)
    finally:
        gc.callbacks.remove(count)
    assert full == []


def test_a_formatted_file_is_parsed_once_and_a_changed_one_is_proved(monkeypatch):
    """`sbpc fmt` cost 3 to 5 times `check` on a 20,000-node chain: it parsed the file into IR, read it again
    for its tokens, and parsed its own output to prove it, even when that output was the file itself.
    Text that comes out as it went in needs no proof; text that changed is still proved."""
    import sembp_dsl.language.tooling.fmt as fmt

    parsed: list[str] = []

    def counting(text, path="<string>"):
        parsed.append(text)
        return parse(text, path)

    monkeypatch.setattr(fmt, "parse", counting)
    formatted = "pipeline chain\ninput q: text\nnode a: text {}\nq -> a\noutput a\n"
    assert fmt.format_text(formatted) == formatted and parsed == [formatted]
    parsed.clear()
    messy = formatted.replace("q -> a", "q->a")
    assert fmt.format_text(messy) == formatted and parsed == [messy, formatted]
