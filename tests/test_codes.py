"""Every diagnostic has a stable code: unique, documented (`sbpc explain`, docs/language.md) and reachable
(a file below produces it), shown in the text and in `check --json`."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sembp_dsl import cli
from sembp_dsl.language import codes
from sembp_dsl.language.codes import CODES, lookup
from sembp_dsl.language.kinds import KINDS

ROOT = Path(__file__).resolve().parents[1]
HEADER = 'pipeline t "A test"\ninput q: text\n'
OK = "node a: text {}\nq -> a\noutput a\n"
YAML = 'pipeline: t\ninputs: {q: text}\nnodes:\n  a: {type: text}\nedges: ["q -> a"]\noutput: a\n'

# code -> (file name, content): a file whose check reports that code
REACHED: dict[str, tuple[str, str | bytes]] = {
    "E001": ("p.sbp", HEADER + "node a: txt {}\nq -> a\noutput a\n"),
    "E002": ("p.sbp", HEADER + "node a: text { @ }\nq -> a\noutput a\n"),
    "E003": ("p.sbp", HEADER + 'param p = "open\n' + OK),
    "E004": ("p.sbp", HEADER + 'param p = "C:\\path"\n' + OK),
    "E005": ("p.sbp", HEADER + 'param p = """\n  text"""\n' + OK),
    "E006": ("p.sbp", HEADER + 'param p = """\n  text\nless\n  """\n' + OK),
    "E007": ("p.sbp", HEADER + 'param p = "bell \\u0007"\n' + OK),
    "E008": ("p.sbp", HEADER + 'param p = "half \\ud800"\n' + OK),
    "E009": ("p.sbp", HEADER + "node a: text { prompt = p\nnode b: text {}\nq -> a\noutput a\n"),
    "E010": ("missing.sbp", None),  # not written
    "E011": ("folder.sbp", "<dir>"),
    "E012": ("big.sbp", "<big>"),
    "E013": ("x" * 300 + ".sbp", None),  # a name too long for the file system
    "E014": ("p.sbp", b"pipeline t\n\xff"),
    "E015": ("p.txt", HEADER + OK),
    "E016": ("p.sbp", "<torn>"),
    "E020": ("p.sbp", HEADER + 'param p = "x"\nparam p = "y"\n' + OK),
    "E021": ("p.sbp", HEADER + "node output: text {}\nq -> output\noutput output\n"),
    "E022": ("p.sbp", HEADER + "node a: text { prompt = nope }\nq -> a\noutput a\n"),
    "E023": ("p.sbp", HEADER + "node a: text { template = nope }\nq -> a\noutput a\n"),
    "E024": ("p.sbp", HEADER + "node a: text {}\nq, r -> a\noutput a\n"),
    "E025": ("p.sbp", HEADER + "input r: text\nq -> r\n" + OK),
    "E026": ("p.sbp", HEADER + "node a: text {}\nq -> a\noutput b\n"),
    "E030": ("p.sbp", HEADER + "node a: text { promt = x }\nq -> a\noutput a\n"),
    "E031": ("p.sbp", HEADER + OK + "optimize { iterations = 1  iterations = 2 }\n"),
    "E032": ("p.sbp", HEADER + OK + "optimize { gradient = sibbling }\n"),
    "E033": ("p.sbp", HEADER + OK + 'optimize { iterations = "many" }\n'),
    "E034": ("p.sbp", HEADER + OK + "optimize { iterations = -1 }\n"),
    "E035": ("p.sbp", HEADER + OK + "optimise { iterations = 1 }\n"),
    "E036": ("p.sbp", HEADER + OK + 'model fowrard { name = "m" }\n'),
    "E037": ("p.sbp", HEADER + OK + "optimize fast { iterations = 1 }\n"),
    "E040": ("p.sbp", HEADER + "node a: text {}\nnode b: text {}\nq -> a -> b -> a\noutput b\n"),
    "E041": ("p.sbp", "<edges>"),
    "E042": ("p.sbp", HEADER + "node a: text {}\nq -> a\n"),
    "E043": ("p.sbp", HEADER + OK + "output a\n"),
    "E044": ("p.sbp", HEADER + OK + "metric exact\nmetric exact\n"),
    "E045": ("p.sbp", HEADER + OK + "metric fuzzy\n"),
    "E046": ("p.sbp", HEADER + OK + "metric numeric\n"),
    "E047": ("p.sbp", HEADER + "node a: choice(Yes, Yes) {}\nq -> a\noutput a\n"),
    "E048": ("p.sbp", HEADER + 'node a: choice("", No) {}\nq -> a\noutput a\n'),
    "E050": ("p.sbp", HEADER + 'template t = "{% if q %}"\nnode a: text { template = t }\nq -> a\noutput a\n'),
    "E051": ("p.sbp", HEADER + "template t = \"{% include 'x' %}\"\nnode a: text { template = t }\nq -> a\noutput a\n"),
    "E052": ("p.sbp", HEADER + 'template t = "{{ 1/0 }}"\nnode a: text { template = t }\nq -> a\noutput a\n'),
    "E053": ("p.sbp", HEADER + 'template t = "{{ nope }}"\nnode a: text { template = t }\nq -> a\noutput a\n'),
    "E054": ("p.sbp", HEADER + 'template t = "{{ prompt }}"\nnode a: text { template = t }\nq -> a\noutput a\n'),
    "E055": ("p.sbp", HEADER + 'param p = "{{ nope }}"\nnode a: text { prompt = p }\nq -> a\noutput a\n'),
    "E056": ("p.sbp", HEADER + OK + 'template loss = "{{ score }}"\n'),
    "E057": ("p.sbp", "<long param>"),
    "E060": ("p.yaml", "pipeline: t\nnodes: [a\n"),
    "E061": ("p.yaml", YAML + "description: &d x\nother: *d\n"),
    "E062": ("p.yaml", "- pipeline: t\n"),
    "E063": ("p.yaml", YAML + "modles: {}\n"),
    "E064": ("p.yaml", YAML + "description: 2024-01-01\n"),
    "E065": ("p.yaml", YAML.replace("{type: text}", "{type: choice(Yes, No)}")),
    "E066": ("p.yaml", YAML.replace("inputs: {q: text}", "inputs: {[q]: text}")),
    "E067": ("p.yaml", YAML + "output: a\n"),
    "E068": ("p.yaml", YAML.replace('"q -> a"', '"q, 9x -> a"')),
    "E069": ("p.sbp", HEADER + OK + 'model { name = "openai/m"  api_base = "127.0.0.1:8911/v1" }\n'),
    "E070": ("p.sbp", HEADER + OK + 'model { name = "pool"  router = "no-such-router.yaml" }\n'),
    "E071": ("p.sbp", HEADER + "node a: text { model = strong }\nq -> a\noutput a\n"),
    "E136": ("p.sbp", HEADER + OK + "optimize { strategies = [gradients, model] }\n"),
    "E137": ("p.sbp", HEADER + "node a: text { model = m }\nq -> a\noutput a\n" + "model m { input_price = 1 }\n"),
    "E138": ("p.sbp", HEADER + "node a: text { models = [m] }\nq -> a\noutput a\nmodel m {}\n"),
    "E072": ("p.sbp", HEADER + "node a: text { system = rules }\nq -> a\noutput a\n"),
    "E073": ("p.sbp", HEADER + 'param s = "x"\ntemplate s = "y"\nnode a: text { system = s }\nq -> a\noutput a\n'),
    "E074": ("p.sbp", HEADER + "node a: {v: text, v: text} {}\nq -> a\noutput a\n"),
    "E075": ("p.sbp", HEADER + "node a: {_v: text} {}\nq -> a\noutput a\n"),
    "E076": ("p.sbp", HEADER + "node a: {v: text} {}\nq -> a\noutput a.w\n"),
    "E077": ("p.sbp", HEADER + "node a: text {}\nq -> a\noutput a.v\n"),
    "E078": (
        "p.sbp",
        HEADER + 'param q = "x"\ntemplate t = "{{ q }}"\nnode a: text { template = t }\nq -> a\noutput a\n',
    ),
    "E079": ("p.sbp", HEADER + OK + "model default {}\n"),
    "E080": ("p.sbp", HEADER + 'function f = "tools.py/search"\nnode a: json { function = f }\nq -> a\noutput a\n'),
    "E081": (
        "p.sbp",
        HEADER + 'function search = "tools:search"\nnode a: json { function = serach }\nq -> a\noutput a\n',
    ),
    "E082": (
        "p.sbp",
        HEADER + 'function f = "tools:f"\nparam p = "x"\nnode a: json { function = f  prompt = p }\nq -> a\noutput a\n',
    ),
    "E083": ("p.sbp", "<symlink out>"),
    "E084": ("p.sbp", "<run: no such function>"),
    "E090": ("p.sbp", HEADER + "node a: text { demos = shots }\nq -> a\noutput a\n"),
    "E091": ("p.sbp", HEADER + 'demos s = []\nnode a: text { template = "{{ q }}"  demos = s }\nq -> a\noutput a\n'),
    "E092": (
        "p.sbp",
        HEADER + 'function f = "tools:f"\ndemos s = []\nnode a: json { function = f  demos = s }\nq -> a\noutput a\n',
    ),
    "E093": ("p.sbp", HEADER + "demos s = []\nnode a: text { prompt = s }\nq -> a\noutput a\n"),
    "E094": (
        "p.sbp",
        HEADER + "demos s = []\nnode a: text { demos = s }\nnode b: text { demos = s }\nq -> a, b\noutput a\n",
    ),
    "E095": ("p.sbp", HEADER + "demos s max 0 = []\nnode a: text { demos = s }\nq -> a\noutput a\n"),
    "E096": ("p.sbp", HEADER + 'demos s = [{q: "x", a: "y", z: "w"}]\nnode a: text { demos = s }\nq -> a\noutput a\n'),
    "E097": ("p.sbp", HEADER + 'demos s = [{q: "x"}]\nnode a: text { demos = s }\nq -> a\noutput a\n'),
    "E098": ("p.sbp", HEADER + 'demos s = [{q: "x", q: "z", a: "y"}]\nnode a: text { demos = s }\nq -> a\noutput a\n'),
    "E099": (
        "p.sbp",
        HEADER + 'demos s max 1 = [{q: "x", a: "y"}, {q: "z", a: "w"}]\nnode a: text { demos = s }\nq -> a\noutput a\n',
    ),
    "E100": ("p.sbp", HEADER + OK + 'metric exact = "metrics:overlap"\n'),
    "E101": ("p.sbp", HEADER + OK + "metric helpful { }\n"),
    "E102": ("p.sbp", HEADER + OK + 'frozen param r = "Kind?"\nmetric helpful { prompt = r  scale = 5..1 }\n'),
    "E103": ("p.sbp", HEADER + OK + 'param r = "Kind?"\nmetric helpful { prompt = r }\n'),
    "E104": ("p.sbp", HEADER + OK + 'frozen param r = "Is {{ reply }} kind?"\nmetric helpful { prompt = r }\n'),
    "E105": ("p.sbp", HEADER + OK + 'metric overlap = "metrics.overlap"\n'),
    "E110": ("p.sbp", HEADER + "node a: text { tools = [lokup] }\nq -> a\noutput a\n"),
    "E111": (
        "p.sbp",
        HEADER + 'function f = "tools:f"\nnode a: text { tools = [f]  max_steps = 0 }\nq -> a\noutput a\n',
    ),
    "E112": ("p.sbp", "<tool *args>"),
    "E141": ("p.sbp", "<function: input not taken>"),
    "E142": ("p.sbp", "<function: parameter not fed>"),
    "E113": (
        "p.sbp",
        HEADER + 'function f = "tools:f" { description = nope }\nnode a: text { tools = [f] }\nq -> a\noutput a\n',
    ),
    "W001": ("p.sbp", HEADER + 'param unused = "x"\n' + OK),
    "W002": ("p.sbp", HEADER + 'template orphan = "{{ q }}"\n' + OK),
    "W003": ("p.sbp", HEADER + "input r: text\n" + OK),
    "W004": ("p.sbp", HEADER + "node stray: text {}\nq -> stray\n" + OK),
    "W005": ("p.sbp", HEADER + "node a: text {}\nq -> a\nq -> a\noutput a\n"),
    "W006": ("p.sbp", HEADER + 'template t = "{{ 10 / (q|int) }}"\nnode a: text { template = t }\nq -> a\noutput a\n'),
    "W007": (
        "p.sbp",
        HEADER + 'param v = "Answer Yes or No."\nnode a: choice(Yes, No) { prompt = v }\nq -> a\noutput a\n',
    ),
    "W008": ("p.sbp", HEADER + OK + 'model critic { name = "openai/m" }\n'),
    "W009": ("p.sbp", HEADER + 'function shell = "os:system"\nnode a: text { function = shell }\nq -> a\noutput a\n'),
    "W010": ("p.sbp", HEADER + 'function f = "tools:f"\n' + OK),
    "W011": (
        "p.sbp",
        HEADER + 'frozen demos s max 2 = [{q: "x", a: "y"}]\nnode a: text { demos = s }\nq -> a\noutput a\n',
    ),
    "W012": ("p.sbp", HEADER + "frozen demos s = []\nnode a: text { demos = s }\nq -> a\noutput a\n"),
    "E120": ("p.sbp", HEADER + "node a: text {}\nnode b: text {}\nq -> a\na -> b when a == x\noutput b\n"),
    "E121": ("p.sbp", HEADER + "node t: choice(x, y) {}\nnode b: text {}\nq -> t\nq -> b when t == x\noutput b\n"),
    "E122": ("p.sbp", HEADER + "node t: choice(x, y) {}\nnode b: text {}\nq -> t\nt -> b when t == z\noutput b\n"),
    "E123": ("p.sbp", HEADER + "node t: choice(x, y) {}\nnode b: text {}\nq -> t\nt -> b when t == x\noutput b\n"),
    "E124": ("p.sbp", HEADER + "node a: text {}\nnode b: number {}\nq -> a, b\noutput a | b\n"),
    "E125": ("p.sbp", HEADER + "node a: text for each x in q { max_items = 2 }\nq -> a\noutput a\n"),
    "E126": ("p.sbp", "pipeline t\ninput q: list[text]\nnode a: text for each x in q {}\nq -> a\noutput a\n"),
    "E127": (
        "p.sbp",
        "pipeline t\ninput q: list[text]\ninput r: text\nnode a: text for each x in q { max_items = 2 }\nr -> a\noutput a\n",
    ),
    "E128": ("p.sbp", HEADER + OK + 'model forward { name = "opneai/gpt-4o-mini" }\n'),
    "E162": ("p.sbp", HEADER + "node a: text {}\noutput a\n"),
    "E161": ("p.sbp", HEADER + OK + 'model forward { name = "gpt-4o-mni" }\n'),
    "E130": ("p.sbp", HEADER + OK + 'data mine { file = "d.jsonl" }\n'),
    "E131": ("p.sbp", HEADER + OK + "data { train = 3 }\n"),
    "E132": ("p.sbp", HEADER + OK + 'data { file = "d.jsonl"  seed = 1 }\noptimize { seed = 2 }\n'),
    "E133": ("p.sbp", HEADER + OK + 'data { file = "d.jsonl" }\ndata { file = "e.jsonl" }\n'),
    "E134": ("p.sbp", HEADER + OK + 'data { file = "missing.jsonl" }\n'),
    "E135": ("p.sbp", HEADER + OK + f'data {{ file = "{ROOT / "pipelines/triage.jsonl"}" }}\n'),
    "E139": ("p.sbp", HEADER + OK + 'data { file = "d.jsonl"  test = "t.jsonl" }\n'),
    "E140": ("p.sbp", HEADER + OK + 'data { train = "d.jsonl"  test = "./d.jsonl" }\n'),
    "E160": (
        "p.sbp",
        HEADER + OK + f'data {{ file = "{ROOT / "pipelines/triage.jsonl"}"  train = 20  validation = 20 }}\n',
    ),
    "E150": ("p.sbp", "<async metric>"),
    "W013": ("p.sbp", "<plan: remote nodes>"),
    "E170": ("p.sbp", HEADER + OK + "mcp docs { env = [DOCS_ROOT] }\n"),
    "E171": (
        "p.sbp",
        HEADER + OK + 'mcp docs { url = "http://localhost:8000/mcp"  headers = "X-Key: sk-4f9a8b7c6d5e4f3a2b1c" }\n',
    ),
    "E172": (
        "p.sbp",
        HEADER + OK + 'mcp docs { url = "http://localhost:8000/mcp"  headers = "Bearer ${DOCS_TOKEN}" }\n',
    ),
    "E173": ("p.sbp", HEADER + OK + 'mcp docs { command = "python docs_server.py" }\n'),
    "E174": ("p.sbp", HEADER + 'param t = "x"\nnode a: text { prompt = t  tools = [dcos.search] }\nq -> a\noutput a\n'),
    "E175": ("p.sbp", "<mcp: locked>"),
    "E176": ("p.sbp", "<run: mcp changed>"),
    "E177": ("p.sbp", "<run: mcp cannot start>"),
    "W035": ("p.sbp", "<tool: untyped>"),
    "W036": ("p.sbp", "<tool: undocumented>"),
    "W037": ("p.sbp", "<tool: arguments undescribed>"),
    "W020": (
        "p.sbp",
        HEADER + "node t: choice(x, y) {}\nnode a: text {}\nnode b: text {}\nnode c: text {}\nq -> t\n"
        "t -> a when t == x\nt -> c when t == y\na, t -> b when t == y\nb -> c\noutput a | c\n",
    ),
}
FUNCTION = HEADER + 'function search = "tools:search"\nnode a: json { function = search }\nq -> a\noutput a\n'
AT_RUN = {
    "E084",
    "E176",
    "E177",
}  # only a run imports a function's module: `sbpc run` reaches these, before any model call
AT_PLAN = {"W013"}  # which model each role gets is known once a run is planned: `optimize --plan` reaches these
UNREACHABLE: dict[str, str] = {}  # code -> why no test can produce it (none so far)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exit:
            code = exit.code
    return code, out.getvalue(), err.getvalue()


def make(tmp_path: Path, monkeypatch, name: str, content) -> Path:
    from sembp_dsl.language.check import edges, templates
    from sembp_dsl.language.syntax import source

    path = tmp_path / name
    if content == "<dir>":
        path.mkdir()
    elif content == "<big>":
        monkeypatch.setattr(source, "MAX_FILE_BYTES", 100)
        path.write_text(HEADER + OK + "#" * 200 + "\n")
    elif content == "<torn>":  # a hard-linked file whose in-place write was killed: the whole copy is beside it
        path.write_text(HEADER + OK)
        (tmp_path / "other.sbp").hardlink_to(path)
        (tmp_path / f".{name}.sbpc-tmp").write_text(HEADER + OK)
    elif content == "<edges>":
        monkeypatch.setattr(edges, "MAX_EDGES", 3)
        path.write_text(HEADER + "input r: text\nnode a: text {}\nnode b: text {}\nq, r -> a, b\noutput a\n")
    elif content == "<long param>":
        from sembp_dsl.language.nodes import templates as rendering

        monkeypatch.setattr(templates, "MAX_OUTPUT_CHARS", 10)  # the checker's limit on a param
        monkeypatch.setattr(rendering, "MAX_OUTPUT_CHARS", 10)  # a render's
        path.write_text(
            HEADER + 'param p = "more than ten characters"\nnode a: text { prompt = p }\nq -> a\noutput a\n'
        )
    elif content == "<symlink out>":  # tools.py beside the pipeline is a link to a file outside its folder
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "tools.py").write_text("def search(q):\n    return []\n")
        (tmp_path / "pipelines").mkdir()
        (tmp_path / "pipelines" / "tools.py").symlink_to(tmp_path / "elsewhere" / "tools.py")
        path = tmp_path / "pipelines" / name
        path.write_text(FUNCTION)
    elif content == "<run: no such function>":
        (tmp_path / "tools.py").write_text("def find(q):\n    return []\n")
        path.write_text(FUNCTION)
    elif content == "<tool *args>":  # read beside the pipeline, never imported
        (tmp_path / "tools.py").write_text("def f(*places):\n    return ''\n")
        path.write_text(HEADER + 'function f = "tools:f"\nnode a: text { tools = [f] }\nq -> a\noutput a\n')
    elif content in ("<function: input not taken>", "<function: parameter not fed>"):  # read, never imported
        (tmp_path / "tools.py").write_text("def look(q, fact):\n    return ''\n")
        fed = "input fact: text\nq, fact, r -> a" if "taken" in content else "q -> a"
        path.write_text(
            HEADER
            + f'input r: text\nfunction look = "tools:look"\nnode a: text {{ function = look }}\n{fed}\noutput a\n'
        )
    elif isinstance(content, str) and content.startswith(("<mcp:", "<run: mcp")):
        path = mcp_pipeline(path, content)
    elif isinstance(content, str) and content.startswith("<tool:"):
        body = {
            "<tool: untyped>": 'def f(x) -> str:\n    """Say x.\n\n    Args:\n        x: what to say\n    """\n    return x\n',
            "<tool: undocumented>": "def f(x: str) -> str:\n    return x\n",
            "<tool: arguments undescribed>": 'def f(x: str) -> str:\n    """Say x."""\n    return x\n',
        }[content]
        (tmp_path / "tools.py").write_text(body)
        path.write_text(
            HEADER
            + 'param t = "x"\nfunction f = "tools:f"\nnode a: text { prompt = t  tools = [f] }\nq -> a\noutput a\n'
        )
    elif content == "<async metric>":  # read beside the pipeline, never imported
        (tmp_path / "metrics.py").write_text("async def overlap(prediction, example):\n    return 1.0\n")
        path.write_text(HEADER + OK + 'metric overlap = "metrics:overlap"\n')
    elif content == "<plan: remote nodes>":  # nodes on a remote model; backward and optimizer named nowhere
        remote = 'param p = "Say."\nnode a: text { prompt = p  model = fast }\nmodel fast { name = "openai/m" }\n'
        path.write_text(HEADER + remote + "q -> a\noutput a\n")
        (tmp_path / "rows.jsonl").write_text("".join(f'{{"q": "{i}", "answer": "x"}}\n' for i in range(4)))
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    return path


def mcp_pipeline(path: Path, content: str) -> Path:
    """A pipeline calling the tests' MCP server (tests/mcp_docs_server.py), and a lock: as the server has it, with
    a schema it no longer has (E176), or for a command that is not there (E177)."""
    from sembp_dsl.language.mcp_servers import Server, lock_path
    from sembp_dsl.language.syntax.source import parse_text
    from sembp_dsl.runtime.mcp_client import write_lock

    command = {"<run: mcp cannot start>": "sbpc-no-such-server --stdio"}.get(
        content, f"{sys.executable} {ROOT / 'tests' / 'mcp_docs_server.py'}"
    )
    tool = "serch" if content == "<mcp: locked>" else "search"
    text = HEADER + f'param t = "x"\nmcp docs {{ command = "{command}" }}\n'
    text += f"node a: text {{ prompt = t  tools = [docs.{tool}] }}\nq -> a\noutput a\n"
    path.write_text(text)
    block = parse_text(text, str(path)).blocks[0]
    schema = {"type": "object", "properties": {"words": {"type": "string"}}}  # the server's says `query`
    tools = {"search": {"description": "Search the shop's help pages.", "input_schema": schema}}
    server = Server.of(block)
    write_lock(lock_path(str(path)), {"docs": {"settings": server.settings_hash(), "tools": tools}})
    return path


def test_codes_are_unique_well_formed_and_documented():
    assert len(CODES) == len(codes.listed()), "a code is listed twice (in a table, or as a kind's own)"
    for code, entry in CODES.items():
        assert re.fullmatch(r"[EW]\d{3}", code), code
        assert entry.title and entry.explanation and entry.example and entry.fix, code
        assert entry.severity == ("warning" if code[0] == "W" else "error")
    doc = (ROOT / "docs/language.md").read_text()
    undocumented = [code for code in CODES if not re.search(rf"^\| `{code}` \|", doc, re.M)]
    assert not undocumented, f"docs/language.md has no row for {undocumented}"


def test_every_code_is_reached_or_said_why_not():
    assert set(REACHED) | set(UNREACHABLE) == set(CODES)
    assert not set(REACHED) & set(UNREACHABLE)


def test_the_code_table_and_the_code_agree():
    """Every code the package reports is in the registry, and every registered code is reported somewhere: a
    kind's own codes (NodeKind.codes) are registered through kinds/, and declaring one is not reporting it."""
    used = set()
    for path in (ROOT / "sembp_dsl").rglob("*.py"):
        if path.parent.name != "codes":  # the registry itself
            reported = re.sub(r'Code\(\s*"[EW]\d{3}"', "", path.read_text())  # a kind's declaration of its own
            used |= set(re.findall(r'"([EW]\d{3})"', reported))
    assert used == set(CODES), (used - set(CODES), set(CODES) - used)
    declared = {code.code for kind in KINDS.values() for code in kind.codes}
    assert declared and declared <= set(CODES) and not declared & {c.code for c in codes._CODES}


@pytest.mark.parametrize("code", sorted(REACHED))
def test_each_code_is_reached(tmp_path, monkeypatch, code):
    name, content = REACHED[code]
    path = make(tmp_path, monkeypatch, name, content)
    if code in AT_RUN:
        status, out, err = run("run", str(path), "--input", "q=x", "--model", "openai/none")
        assert status == 1 and f"error[{code}]: " in err and "Traceback" not in err, err
        return
    if code in AT_PLAN:
        sizes = ["--train-size", "2", "--val-size", "2", "--test-size", "0"]
        status, out, err = run("optimize", str(path), "--plan", "--data", str(tmp_path / "rows.jsonl"), *sizes)
        assert status == 0 and f"warning[{code}]: " in out and "Traceback" not in err, out + err
        return
    status, out, err = run("check", "--json", str(path))
    found = [d for d in json.loads(out)[0]["diagnostics"] if d["code"] == code]
    assert found, out
    assert status == (0 if code.startswith("W") else 1)
    status, out, err = run("check", str(path))
    assert f"{'warning' if code[0] == 'W' else 'error'}[{code}]: {found[0]['message']}" in err


def test_json_carries_code_help_notes_and_ranges(tmp_path):
    path = tmp_path / "p.sbp"
    path.write_text(HEADER + 'param p = "x"\nparam p = "y"\nnode a: text { prompt = pp }\nq -> a\noutput a\n')
    status, out, _ = run("check", "--json", str(path))
    duplicate, undefined = json.loads(out)[0]["diagnostics"][:2]
    assert duplicate == {
        "severity": "error",
        "code": "E020",
        "message": "duplicate param 'p'",
        "line": 4,
        "column": 7,
        "end_line": 4,
        "end_column": 8,
        "help": None,
        "notes": [{"message": "first declared here", "line": 3, "column": 7, "end_line": 3, "end_column": 8}],
    }
    assert undefined["code"] == "E022" and undefined["help"] == "did you mean 'p'?" and undefined["column"] == 25


def test_explain_prints_each_code_and_lists_them_all():
    for code, entry in CODES.items():
        status, out, _ = run("explain", code.lower())
        assert status == 0 and out.startswith(f"{code}: {entry.title}") and entry.fix.split("\n")[0] in out
    status, out, _ = run("explain")
    assert status == 0 and [line.split()[0] for line in out.splitlines()] == list(CODES)
    assert lookup("e22") is CODES["E022"] and lookup("E22x") is None


def test_explain_in_a_fresh_process_lists_the_kinds_codes_too():
    """A kind's codes reach the registry when kinds/ is imported: the CLI's `explain` must see them on its own."""
    done = subprocess.run(
        [sys.executable, "-m", "sembp_dsl.cli", "explain"], capture_output=True, text=True, check=True, timeout=60
    )
    assert [line.split()[0] for line in done.stdout.splitlines()] == list(CODES)


def test_explain_an_unknown_code_is_a_usage_error_with_a_suggestion():
    status, _, err = run("explain", "E0222")
    assert status == 2 and "unknown code 'E0222'; did you mean 'E022'?" in err
    status, _, err = run("explain", "Z9")
    assert status == 2 and "`sbpc explain` lists every code" in err
