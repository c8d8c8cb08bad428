"""Every code block of README.md and docs/*.md that is not a shell or Python block is held too: a pipeline
checks clean, a fragment parses, JSON, YAML, TOML and Jinja parse, the EBNF summary names what the grammar
file has, and a block that shows output is what a command prints (test_shell_docs.py) or says why not.

The markers are those of test_shell_docs.py (its docstring has the rules), and for these blocks:
- an ```sbp or ```yaml block without a marker is a whole pipeline that `sbpc check` passes with no error.
- `<!-- fails check: MESSAGE -->`: a whole pipeline `check` rejects, with MESSAGE among its errors; a
  block below it marked `<!-- output of the block above -->` is what `sbpc check` prints on it.
- `<!-- fragment -->`: a part of a pipeline (```sbp: it parses after a `pipeline` line) or of a settings
  file (```json: it parses inside `{ }`; ```yaml: a mapping, valid
  against the pipeline schema if it names it, a router file a Router can be built from if it is one).
- ```json, ```toml, ```jinja blocks parse; ```ebnf is the grammar's summary (keywords, terminals).
- any other block (output, a file tree, a non-sbpc command) shows output (`output of`) or is a sketch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
import jsonschema
import pytest
import yaml
from conftest import ROOT
from test_shell_docs import ALL, CHECKED, SHOWN, Block, shows

from sembp_dsl.language.diagnostics import PipelineError
from sembp_dsl.language.graph.compile import diagnose
from sembp_dsl.language.syntax.source import parse_text
from sembp_dsl.models.routing import router_problem

PIPELINE = {"sbp", "yaml"}
PARSED = {"json", "toml", "jinja"}
SCHEMA = ROOT / "sembp_dsl/language/syntax/schema/pipeline.schema.json"
GRAMMAR = ROOT / "sembp_dsl/language/syntax/grammar/sbp.lark"
TOLD = {b for b in ALL if b.marker or b.shell or b in SHOWN.values() or b.language == "python"}


def marker(block: Block) -> str:
    return block.marker[0] if block.marker else ""


def errors(text: str, name: str) -> list[str]:
    diagnostics = diagnose(text, name).diagnostics
    return [d.message for d in diagnostics if d.severity == "error"]


HELD = [b for b in ALL if b.language in PIPELINE | PARSED | {"ebnf"} and marker(b) in ("", "fragment", "fails check")]


@pytest.mark.parametrize("block", HELD, ids=lambda b: f"{b.where}-{b.language}")
def test_the_block_is_what_it_says(block, tmp_path):
    kind = marker(block)
    mark = "or, if it is not one, mark it, on the line before, <!-- fragment --> or <!-- sketch: WHY -->"
    if kind == "fails check":
        found = errors(block.text, f"block.{block.language}")
        assert any(block.marker[1] in message for message in found), f"{block.where}: check says {found}"
    elif block.language in PIPELINE and kind != "fragment":
        found = errors(block.text, f"block.{block.language}")
        assert not found, f"{block.where}: `sbpc check` finds errors in this pipeline ({mark}): {found}"
    elif block.language in ("sbp", "yaml", *PARSED):
        try:
            parses(block, tmp_path)
        except (PipelineError, ValueError, yaml.YAMLError, jinja2.TemplateSyntaxError) as exc:
            pytest.fail(f"{block.where}: the {block.language} does not parse (or mark it <!-- sketch: WHY -->):\n{exc}")
    else:
        summary_matches_grammar(block)


def parses(block: Block, tmp_path: Path) -> None:
    """Parse the block as what it is: an sbp fragment after a `pipeline` line if it has none, a YAML mapping,
    JSON (a fragment inside `{ }`), TOML or a Jinja template."""
    if block.language == "sbp":
        whole = re.search(r"^pipeline ", block.text, re.M)
        parse_text(block.text if whole else f"pipeline fragment\n{block.text}", "fragment.sbp")
    elif block.language == "yaml":
        yaml_fragment(block, tmp_path)
    elif block.language == "json":
        json.loads("{" + block.text + "}" if marker(block) == "fragment" else block.text)
    elif block.language == "toml":
        pytest.importorskip("tomllib").loads(block.text)  # Python 3.11 and later
    else:
        jinja2.Environment().parse(block.text)


@pytest.mark.parametrize("block", sorted(CHECKED, key=lambda b: b.line), ids=lambda b: b.where)
def test_the_diagnostics_shown_are_what_check_prints(block):
    above = next(a for a, b in SHOWN.items() if b == block)
    name = re.match(r"([\w.-]+\.(?:sbp|yaml)):", block.text)
    assert name, f"{block.where}: the diagnostics start with the name of the file (s1.sbp:4:7: ...)"
    diagnosis = diagnose(above.text, name.group(1))
    printed = "\n".join(d.render(diagnosis.text) for d in diagnosis.diagnostics)
    assert shows(block.text, printed), f"{block.where} is not what `sbpc check {name.group(1)}` prints:\n{printed}"


def yaml_fragment(block: Block, tmp_path: Path) -> None:
    """A YAML fragment is a mapping; one that names the pipeline schema validates against it, and a router
    file (`model_list`) is one a Router can be built from."""
    data = yaml.safe_load(block.text)
    assert isinstance(data, dict), f"{block.where}: not a YAML mapping"
    if "$schema=" in block.text:
        jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    if "model_list" in data:
        (tmp_path / "router.yaml").write_text(block.text)
        assert router_problem(str(tmp_path / "router.yaml")) is None


def summary_matches_grammar(block: Block) -> None:
    """The EBNF names the grammar file, has its keywords and punctuation, and its terminals' patterns."""
    lark = GRAMMAR.read_text()
    assert str(GRAMMAR.relative_to(ROOT)) in block.path.read_text(), f"{block.where}: the doc names another file"
    quoted = re.compile(r'"([^"\s]+)"')
    literals = set(quoted.findall(re.sub(r"/.*?/", "", lark)))
    shown = set(quoted.findall(re.sub(r"/.*?/ ;|\(\*.*?\*\)", "", block.text)))
    assert shown == literals, (
        f"{block.where}: only in the doc {shown - literals}, only in the grammar {literals - shown}"
    )
    for name, pattern in re.findall(r"^([A-Z_]+)(?:\.\d)?: (/.*/)$", lark, re.M):
        assert f"{name} = {pattern}" in re.sub(r" +", " ", block.text), f"{block.where}: {name} is not {pattern}"


def test_every_block_is_held_or_says_why_not():
    """A block that no test holds (an output, a file tree, a command that is not sbpc) carries a marker."""
    loose = [b for b in ALL if b not in TOLD and b.language not in PIPELINE | PARSED | {"ebnf"}]
    assert not loose, "blocks no test holds; on the line before each, add <!-- output of: COMMAND --> or " + (
        "<!-- sketch: WHY -->:\n" + "\n".join(f"  {b.where} ({b.language or 'fenced'})" for b in loose)
    )


def test_the_blocks_are_found():
    """Pipelines, fragments and the grammar are found (a parser that found none would pass everything)."""
    kinds = {(b.language, marker(b)) for b in HELD}
    assert {("sbp", ""), ("sbp", "fragment"), ("ebnf", ""), ("json", "fragment")} <= kinds
    assert sum(b.language == "sbp" for b in HELD) >= 15
    assert len(CHECKED) >= 3
