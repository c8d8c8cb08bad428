"""The editor files in editors/: the TextMate grammar tokenizes every shipped pipeline with no region left
unmatched, strings and comments exactly where the compiler finds them, Jinja2 coloured inside templates;
the VS Code extension, the Neovim and the Helix configurations start `sbpc lsp`."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sembp_dsl.language.syntax.tokens import read
from sembp_dsl.language.tooling.fmt import format_text

ROOT = Path(__file__).resolve().parents[1]
EDITORS = ROOT / "editors"
GRAMMAR = EDITORS / "vscode/syntaxes/sbp.tmLanguage.json"
SHIPPED = sorted((ROOT / "pipelines").glob("*.sbp"))
MESSY = (
    'pipeline demo "A \\"quoted\\" demo"  # comment\ninput q,ctx:text from "context"\n'
    'frozen param p = "{{ q | upper }} and {{ ctx }}" # trailing\n'
    'template t = """\n  {% for x in q %}{{ loop.index }}. {{ x ~ \'!\' }}{% endfor %}\n  {# note #}\n  """\n'
    'node a: choice(Yes, "not sure", -1) { prompt = p ; template = t  parse = tag }\n'
    'q, ctx -> a\noutput a from "label"\nmetric exact\n'
    'model forward {\n  name = "m"  temperature = 0.5\n  seed = -3  max_tokens = 1e3\n}\noptimize { gate = none }\n'
)


def tokens(text: str) -> list[tuple[int, str, list[str]]]:
    """(offset, text, scopes) for every token the grammar gives, by textmate-grammar-python."""
    pytest.importorskip("textmate_grammar")
    from textmate_grammar.parsers.base import LanguageParser

    logging.getLogger("textmate_grammar").setLevel(logging.ERROR)  # it narrates every unmatched run of text
    parser = LanguageParser(json.loads(GRAMMAR.read_text()))
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    element = parser.parse_string(text)
    assert element is not None
    return [(starts[line] + column, content, scopes) for (line, column), content, scopes in element.flatten()]


@pytest.mark.parametrize("text", [*(p.read_text() for p in SHIPPED), MESSY], ids=[*(p.name for p in SHIPPED), "messy"])
def test_the_grammar_leaves_nothing_unmatched_and_finds_strings_and_comments_where_the_compiler_does(text):
    found = tokens(text)
    unmatched = [(at, content) for at, content, scopes in found if content.strip() and scopes == ["source.sbp"]]
    assert not unmatched, unmatched[:5]
    assert not [t for t in found if any(s.startswith("invalid") for s in t[2])]
    covered = "".join(content for _, content, _ in found)
    assert covered.replace("\n", "") == text.replace("\n", "")  # every character tokenized, once, in order
    source = read(text)
    strings = {
        i
        for s in source.statements
        for t in s.tokens
        if t.type in ("STRING", "BLOCK_STRING")
        for i in range(t.start, t.end)
    }
    comments = {i for c in source.comments for i in range(c.start, c.end)}
    for at, content, scopes in found:
        kind = next((s.split(".")[0] for s in scopes[1:] if s.split(".")[0] in ("string", "comment", "meta")), None)
        for i in range(at, at + len(content)):
            if text[i] == "\n":
                continue
            if i in strings:
                assert kind in ("string", "meta") or any("jinja" in s for s in scopes), (i, content, scopes)
            elif i in comments:
                assert kind == "comment", (i, content, scopes)
            else:
                assert kind not in ("string", "comment"), (i, content, scopes)


def test_jinja_is_coloured_inside_templates_and_params():
    found = tokens((ROOT / "pipelines/liar.sbp").read_text())
    variables = {content for _, content, scopes in found if "variable.other.jinja" in scopes}
    assert {"prompt", "statement", "job_title", "verdict"} - variables == {"verdict"}
    assert any("punctuation.section.embedded.begin.jinja" in scopes for _, _, scopes in found)
    messy = tokens(MESSY)
    assert (
        "upper",
        ["source.sbp", "string.quoted.double.sbp", "meta.embedded.expression.jinja", "support.function.filter.jinja"],
    ) in [(c, s) for _, c, s in messy]
    assert any(c == "for" and "keyword.control.jinja" in s for _, c, s in messy)
    assert any("comment.block.jinja" in s for _, _, s in messy)


def test_the_vscode_extension_is_whole_and_starts_the_server():
    folder = EDITORS / "vscode"
    package = json.loads((folder / "package.json").read_text())
    (language,) = package["contributes"]["languages"]
    (grammar,) = package["contributes"]["grammars"]
    assert language["id"] == grammar["language"] == "sbp" and language["extensions"] == [".sbp"]
    assert json.loads((folder / grammar["path"]).read_text())["scopeName"] == grammar["scopeName"] == "source.sbp"
    configuration = json.loads((folder / language["configuration"]).read_text())
    assert configuration["comments"]["lineComment"] == "#"
    main = (folder / package["main"]).read_text()
    assert (
        'args: ["lsp"]' in main
        and "vscode-languageclient/node" in main
        and "vscode-languageclient" in package["dependencies"]
    )
    if shutil.which("node"):
        assert subprocess.run(["node", "--check", str(folder / package["main"])]).returncode == 0


def test_neovim_and_helix_start_sbpc_lsp():
    assert '{ "sbpc", "lsp" }' in (EDITORS / "neovim/sbp.lua").read_text()
    if sys.version_info >= (3, 11):
        import tomllib

        helix = tomllib.loads((EDITORS / "helix/languages.toml").read_text())
        assert helix["language-server"]["sbpc"] == {"command": "sbpc", "args": ["lsp"]}
        assert helix["language"][0]["language-servers"] == ["sbpc"] and helix["language"][0]["file-types"] == ["sbp"]


def test_the_messy_sample_is_a_pipeline():
    assert format_text(MESSY)  # it parses: the grammar is tested on real .sbp, quirks included


def test_the_pre_commit_hooks_run_check_and_fmt_on_sbp_files_and_pass_on_the_shipped_ones():
    import contextlib
    import io
    import shlex

    import yaml

    from sembp_dsl import cli

    hooks = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert {hooks["sbpc-check"]["entry"], hooks["sbpc-fmt"]["entry"]} == {"sbpc check", "sbpc fmt --check"}
    for hook in hooks.values():
        assert hook["language"] == "python" and re.search(hook["files"], "pipelines/liar.sbp")
        command = shlex.split(hook["entry"])[1:]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert cli.main([*command, *map(str, SHIPPED)]) == 0, hook["id"]  # pre-commit passes the files
