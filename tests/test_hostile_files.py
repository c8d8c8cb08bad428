"""Pipeline files are data from strangers: hostile templates, YAML and files give located errors, never a
traceback, a hang or gigabytes; the corpus in tests/hostile_corpus.py runs through `check` and `compile`."""

from __future__ import annotations

import contextlib
import io
import re
import time

import pytest

from sembp_dsl import cli
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.language.nodes.templates import RenderError

HEADER = 'pipeline t "A test"\ninput q: text\n'


def run_cli(*argv: str) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli.main(list(argv))
    return code, err.getvalue() + out.getvalue()


def template_file(tmp_path, template: str, name: str = "p.sbp"):
    path = tmp_path / name
    path.write_text(HEADER + f'template t = """\n{template}\n"""\nnode a: text {{ template = t }}\nq -> a\noutput a\n')
    return path


@pytest.mark.parametrize(
    "template, message",
    [
        ("{{ range(10**9) }}", "argument 1000000000 is too large"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "too much work|took more"),
        ("{{ lipsum(n=200000) }}", "lipsum: at most"),
        ("{{ 'x' * 300000000 }}", r"'\*' would build a value of 300,000,000"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursive too deeply"),
        (
            "{% macro f(n) %}{% if n > 0 %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}",
            "too much work|took more",
        ),
        ("{{ 1/0 }}", "ZeroDivisionError"),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "'~' would build",
        ),
        ("{% for i in range(99999) %}" + "x" * 1000 + "{% endfor %}", "output too large"),
        ("{{ 'x'|center(999999999) }}", "too large"),
        ("{{ '{:>99999999}'.format(1) }}", "format width"),
        ("{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}", "nested too deeply"),
        ("{% include 'other.j2' %}", "'{% include %}' is not allowed"),
        ("{% import 'other.j2' as o %}", "'{% import %}' is not allowed"),
        ("{% extends 'base.j2' %}", "'{% extends %}' is not allowed"),
        # each call takes about a second and a loop of 60 never reaches the next step check: 60 s before
        ("{% for i in range(60) %}{{ ('a ' * 200000) | urlize }}{% endfor %}", "took more than 3 s"),
        # a quarter second per power, and a loop of 400 never reached the next step check: 106 s before
        ("{% for i in range(400) %}{{ (3**3000000) % 7 }}{% endfor %}", "took more than 3 s"),
        # long division is quadratic: one `//` of two big numbers took a minute
        ("{{ (3**2500000) // (7**800000) }}", "'//' would take"),
        ("{{ (3**2500000) % (7**800000) }}", "'%' would take"),
        # Jinja folded a filter of constants while compiling, before any render began: 0.8 s each, unbounded; now
        # within the render's limits, whichever it meets first (the clock on a loaded machine, else the work)
        ("{{ 'a'|center(400000)|replace(' ', 'a ')|urlize }}" * 40, "took more than 3 s|too much work"),
    ],
)
def test_a_hostile_template_is_a_located_error_in_check(tmp_path, template, message):
    start = time.monotonic()
    code, err = run_cli("check", str(template_file(tmp_path, template)))
    assert time.monotonic() - start < 10
    assert code == 1 and re.search(message, err), err
    assert re.search(r"p\.sbp:4:1: error\[E05[012]\]: template", err) and "Traceback" not in err


def test_the_render_time_limit_holds_for_the_whole_check(tmp_path):
    """A template that takes its whole 3 s, used by six nodes: `check` spent 3 s on each (a file of them took
    over 400 s). The 3 s are the whole check's: the first is an error, the others are said to be untried."""
    slow = "{% for i in range(100000) %}{{ ('x' * 200000).count('y') }}{% endfor %}"
    path = tmp_path / "p.sbp"
    nodes = "".join(f"node n{i}: text {{ template = t{i} }}\nq -> n{i}\n" for i in range(6))
    templates = "".join(f'template t{i} = """\n{slow}{i}\n"""\n' for i in range(6))
    path.write_text(HEADER + templates + nodes + "output n0\n")
    start = time.monotonic()
    code, err = run_cli("check", str(path))
    assert time.monotonic() - start < 3 + 5  # the limit, and the rest of check on a loaded machine
    assert code == 1 and err.count("took more than 3 s") == 1, err
    assert "not tried: this check's 3 s for rendering templates were spent" in err, err


def test_a_template_that_fails_on_some_data_is_a_per_sample_render_error(tmp_path):
    # `q|int` of a placeholder is 0, so check cannot know: a warning, and at run time this sample's error
    path = template_file(tmp_path, "{{ 10 / (q|int) }}")
    code, err = run_cli("check", str(path))
    assert code == 0 and "warning[W006]: template may not render: ZeroDivisionError" in err
    node = compile_file(str(path)).nodes["a"]
    assert node.render({"q": "4"}, {}) == "2.5"
    with pytest.raises(RenderError, match="ZeroDivisionError") as caught:
        node.render({"q": "0"}, {})
    assert caught.value.lineno == 1


def test_a_data_value_that_makes_a_template_blow_up_is_stopped(tmp_path):
    node = compile_file(str(template_file(tmp_path, "{{ 'ab' * (q|int) }}"))).nodes["a"]
    with pytest.raises(RenderError, match="would build"):
        node.render({"q": "900000000"}, {})


def test_ordinary_templates_render_as_before(tmp_path):
    source = (
        "{% for w in q.split() %}{{ loop.index }}={{ w|upper }} {% endfor %}{{ '%05d' % 42 }} {{ '{:>4}'.format(7) }}"
    )
    node = compile_file(str(template_file(tmp_path, source))).nodes["a"]
    assert node.render({"q": "a b"}, {}) == "1=A 2=B 00042    7"


YAML = 'pipeline: t\ninputs: {q: text}\nnodes:\n  a: {type: text}\nedges: ["q -> a"]\noutput: a\n'


def check_yaml(tmp_path, text: str) -> tuple[int, str]:
    path = tmp_path / "p.yaml"
    path.write_bytes(text.encode("utf-8"))
    code, err = run_cli("check", str(path))
    return code, err.replace(str(tmp_path) + "/", "")


@pytest.mark.parametrize(
    "extra, expected",
    [
        ("optimize: {iterations: !!int abc}\n", "p.yaml:7:24: error[E064]: 'abc' is not a valid !!int"),
        ("optimize: {seed: !!bool maybe}\n", "p.yaml:7:18: error[E064]: 'maybe' is not a valid !!bool"),
        ("description: !!timestamp never\n", "p.yaml:7:14: error[E064]: 'never' is not a valid !!timestamp"),
        ("description: 2024-01-01\n", "p.yaml:7:14: error[E064]: YAML reads '2024-01-01' as !!timestamp"),
        ("models: {forward: {temperature: .nan}}\n", "p.yaml:7:33: error[E064]: .nan is not a finite number"),
        ("x: " + "[" * 5000 + "]" * 5000 + "\n", "p.yaml:7:67: error[E060]: YAML: nested more than 64 levels deep"),
        ("params:\n  p: &x hello\n  r: *x\n", "p.yaml:9:6: error[E061]: YAML alias '*x' is not supported here"),
        ("params:\n  r: *nope\n", "p.yaml:8:6: error[E060]: YAML: found undefined alias 'nope'"),
        ("description: a\x00b\n", "p.yaml:7:15: error[E060]: YAML: character '\\x00' is not allowed"),
    ],
)
def test_hostile_yaml_is_a_located_error(tmp_path, extra, expected):
    code, err = check_yaml(tmp_path, YAML + extra)
    assert code == 1 and err.startswith(expected), err
    assert err.count("error[") == 1


def test_yaml_type_errors_are_in_words(tmp_path):
    source = YAML.replace(
        "  a: {type: text}\n", "  a: {type: text}\n  b: {type: choice(Yes, No)}\n  c: {type: texts}\n"
    )
    code, err = check_yaml(tmp_path, source.replace("q -> a", "q -> a, b, c"))
    assert code == 1 and err.count("error[") == 2, err  # the split choice is one cause, not three errors
    assert (
        'p.yaml:5:13: error[E065]: a choice type must be quoted in YAML, or its commas end the value: write type: "choice(Yes, No)"'
        in err
    )
    assert (
        'p.yaml:6:13: error[E063]: nodes.c.type: \'texts\' is not a type: text, number, json, "choice(A, B)" or "list[text]"\n'
        in err
    )
    assert "      = help: did you mean 'text'?\n" in err
    assert "does not match" not in err and "^" + "\\s" not in err


def test_yaml_one_of_failures_are_explained(tmp_path):
    code, err = check_yaml(
        tmp_path, YAML.replace("inputs: {q: text}", "inputs: {q: 3}").replace("output: a", "output: {node: a, from: 3}")
    )
    assert (
        'p.yaml:2:13: error[E063]: inputs.q: expected a type (text, number, json, "choice(A, B)") or a mapping with type and from, not the number 3'
        in err
    )
    assert "p.yaml:6:25: error[E063]: output.from: expected a string, not the number 3" in err
    assert "is not valid here" not in err


def edge_statement(n: int, sources: str = "input") -> str:
    names = [f"s{i}" for i in range(n)], [f"t{i}" for i in range(n)]
    return (
        "pipeline big\n"
        + "".join(f"{sources} {s}: text{' {}' if sources == 'node' else ''}\n" for s in names[0])
        + ("input q: text\nq -> " + ", ".join(names[0]) + "\n" if sources == "node" else "")
        + "".join(f"node {t}: text {{}}\n" for t in names[1])
        + f"{', '.join(names[0])} -> {', '.join(names[1])}\noutput t0\n"
    )


def test_a_big_edge_statement_is_kept_as_a_product(tmp_path):
    import tracemalloc

    from sembp_dsl.language.syntax.parser import parse

    pipeline = parse(edge_statement(1500))
    assert len(pipeline.edges) == 1 and len(pipeline.edges[0].sources) == len(pipeline.edges[0].targets) == 1500
    path = tmp_path / "big.sbp"
    path.write_text(edge_statement(1500))
    tracemalloc.start()
    start = time.monotonic()
    graph = compile_file(str(path))
    seconds, (_, peak) = time.monotonic() - start, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(graph.nodes["t7"].inputs) == 1500
    assert graph.nodes["t7"].inputs is graph.nodes["t8"].inputs  # one tuple shared, not 1,500 copies
    assert peak < 150 * 2**20 and seconds < 20, (peak, seconds)  # was 1.7 GB and 98 s in check alone


def test_past_a_sane_size_the_edges_are_a_limit_error(tmp_path, monkeypatch):
    from sembp_dsl.language.check import edges

    monkeypatch.setattr(edges, "MAX_EDGES", 10_000)
    code, err = run_cli("check", str(_write(tmp_path, "big.sbp", edge_statement(101))))
    assert (
        code == 1
        and "big.sbp:204:1: error[E041]: the edges declare 10,201 pairs; a pipeline may have at most 10,000" in err
    )


def test_a_20_mb_literal_is_cheap_to_check_and_a_limit_error_to_compile(tmp_path):
    import tracemalloc

    path = _write(
        tmp_path,
        "lit.sbp",
        'pipeline t\ninput q: text\nparam p = "'
        + "x" * (20 * 2**20)
        + '"\nnode a: text { prompt = p }\nq -> a\noutput a\n',
    )
    tracemalloc.start()
    code, err = run_cli("check", str(path))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 400 * 2**20, peak  # was 3.3 GB
    assert (
        code == 1
        and "lit.sbp:3:7: error[E057]: param 'p' is 20,971,520 characters; a prompt may be at most 16,000,000" in err
    )


def _write(folder, name: str, text: str):
    path = folder / name
    path.write_text(text)
    return path


def _corpus():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from hostile_corpus import corpus

    return corpus()


LOCATED = re.compile(r"^(?P<file>[^\n]+?):(?P<line>\d+):(?P<col>\d+): (error\[E\d{3}\]|warning\[W\d{3}\]|note): ", re.M)
CORPUS = _corpus()


def run_bounded(argv: list[str], seconds: float = 10) -> tuple[int, str, float]:
    """Run the CLI in-process; an alarm turns a hang into a failure instead of a stuck test run."""
    import signal

    def hang(signum, frame):
        raise TimeoutError(f"{' '.join(argv)} took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        code, output = run_cli(*argv)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return code, output, time.monotonic() - start


def test_the_corpus_is_big_and_varied():
    names = [name for name, _ in CORPUS]
    assert len(names) >= 300
    assert sum(n.endswith(".sbp") for n in names) >= 150 and sum(n.endswith(".yaml") for n in names) >= 150


@pytest.mark.parametrize("name, data", CORPUS, ids=[name for name, _ in CORPUS])
def test_a_bad_file_gives_located_errors_never_a_traceback(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    for command in ("check", "compile"):
        code, output, seconds = run_bounded([command, str(path)])  # an exception here is a traceback: the test fails
        assert code in (0, 1) and seconds < 10, (command, code, seconds)
        for line in output.splitlines():
            if ": error" in line and line.startswith(str(path)):
                assert LOCATED.match(line), f"{command}: error without line:col: {line}"
        if command == "check" and code == 1:
            assert LOCATED.search(output), output[:2000]
        assert "\x1b" not in output and "\x00" not in output and "\x07" not in output


#: The checks of issue 17 (named models, system messages, record outputs): each must fire, located, on a file of the
#: corpus, so that the test above holds every one of them to "no traceback, file:line:col".
NODE_CODES = {f"E07{digit}" for digit in range(1, 10)} | {"W008"}


def test_every_check_of_the_node_features_fires_located_in_the_corpus(tmp_path):
    found: dict[str, set[str]] = {".sbp": set(), ".yaml": set()}
    for name, data in CORPUS:
        if not name.startswith(("semantic_", "yaml_")):
            continue
        path = tmp_path / name
        path.write_bytes(data)
        _, output = run_cli("check", str(path))
        located = rf"^{re.escape(str(path))}:\d+:\d+: (?:error|warning)\[(\w\d{{3}})\]"
        found[path.suffix] |= set(re.findall(located, output, re.M))
    assert NODE_CODES <= found[".sbp"], sorted(NODE_CODES - found[".sbp"])
    assert {"E071", "E076"} <= found[".yaml"], sorted(found[".yaml"])


def test_odd_paths_are_refused_clearly_and_never_block(tmp_path):
    import os

    fifo = tmp_path / "fifo.sbp"
    os.mkfifo(fifo)
    code, output, seconds = run_bounded(["check", str(fifo)], seconds=5)
    assert (
        code == 1
        and seconds < 5
        and "fifo.sbp: error[E011]: is not a regular file (a FIFO, socket or device?)" in output
    )
    code, output, _ = run_bounded(["compile", str(fifo)], seconds=5)
    assert code == 1 and "is not a regular file" in output
    (tmp_path / "broken.sbp").symlink_to(tmp_path / "nowhere.sbp")
    assert run_cli("check", str(tmp_path / "broken.sbp")) == (
        1,
        f"{tmp_path}/broken.sbp: error[E010]: no such file (a broken symbolic link)\n{tmp_path}/broken.sbp: 1 error(s)\n",
    )
    good = _write(tmp_path, "good.sbp", HEADER + "node a: text {}\nq -> a\noutput a\n")
    (tmp_path / "link.sbp").symlink_to(good)
    assert run_cli("check", str(tmp_path / "link.sbp"))[0] == 0  # a link to a regular file is fine
    (tmp_path / "folder.sbp").mkdir()
    assert (
        "folder.sbp: error[E011]: is a directory, not a pipeline file"
        in run_cli("check", str(tmp_path / "folder.sbp"))[1]
    )
    assert "/dev/zero: error[E011]: is not a regular file" in run_bounded(["check", "/dev/zero"], seconds=5)[1]


def test_a_file_past_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from sembp_dsl.language.syntax import source

    monkeypatch.setattr(source, "MAX_FILE_BYTES", 2**20)
    path = _write(tmp_path, "huge.sbp", HEADER + "#" + "x" * (3 * 2**20) + "\n")
    code, output = run_cli("check", str(path))
    assert code == 1 and "huge.sbp: error[E012]: is 3.0 MB; a pipeline file may be at most 1 MB" in output


def test_each_render_has_its_own_budget(tmp_path):
    node = compile_file(
        str(template_file(tmp_path, "{% for i in range(100000) %}{% for c in 'abcdef' %}{% endfor %}{% endfor %}ok"))
    ).nodes["a"]
    for _ in range(3):  # 700,000 steps each: three renders would be over the limit if the budget carried over
        assert node.render({"q": "x"}, {}) == "ok"


def test_numbers_in_ordinary_strings_are_not_taken_for_format_widths(tmp_path):
    source = (
        "{{ 'id: 12345678'.replace('id', 'order') }} {{ 'call {n} at 5551234567'.format(n=q) }} {{ '%s 1234567' % q }}"
    )
    node = compile_file(str(template_file(tmp_path, source))).nodes["a"]
    assert node.render({"q": "x"}, {}) == "order: 12345678 call x at 5551234567 x 1234567"
