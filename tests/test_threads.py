"""Threads may load pipelines at once (the API promises that threads work): each load must get its own file's
IR and its own file's errors, and one thread's parse never waits for another's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

from conftest import ROOT
from lark import Lark

from sembp_dsl.language.diagnostics import PipelineError
from sembp_dsl.language.syntax.parser import parse

# A fresh interpreter, so the first loads also race to build the Lark parser and the YAML schema; a tiny
# switch interval makes threads take turns inside every parse.
RACE = textwrap.dedent("""\
    import sys, threading
    from sembp_dsl.language.diagnostics import PipelineError
    from sembp_dsl.language.graph.compile import compile_file

    sys.setswitchinterval(1e-6)
    files = sys.argv[1:]

    def outcome(path):
        try:
            graph = compile_file(path)
            return graph.pipeline, [(d.file, d.message) for d in graph.warnings]
        except PipelineError as exc:
            return "error", [(d.file, d.span, d.message) for d in exc.diagnostics]

    seen, failures, start = [], [], threading.Barrier(8)

    def work(k):
        start.wait()
        for i in range(24):
            path = files[(k + i) % len(files)]
            try:
                seen.append((path, outcome(path)))
            except BaseException as exc:
                failures.append(f"{path}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    alone = {path: outcome(path) for path in files}  # one thread: what each load must give
    wrong = sorted({path for path, got in seen if got != alone[path]})
    print(len(seen), failures[:3], wrong)
""")


def test_threads_loading_sbp_and_yaml_at_once_each_get_their_own_ir(tmp_path):
    broken = tmp_path / "broken.sbp"  # errors the parser's builder collects, not the grammar
    broken.write_text(
        'pipeline broken\ninput q: text\nparam p = "bad \\q escape"\nnode a: text { prompt = p }\nq -> a\noutput a\n'
    )
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("pipeline: bad\ninputs: {q: text}\nnodes: {a: {type: text, prompt: !!int abc}}\noutput: a\n")
    files = [ROOT / "pipelines" / "gsm8k.sbp", ROOT / "pipelines" / "liar.yaml", broken, bad_yaml]
    files.append(ROOT / "pipelines" / "liar.sbp")
    proc = subprocess.run(
        [sys.executable, "-c", RACE, *map(str, files)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert proc.stdout.strip() == "192 [] []", proc.stdout + proc.stderr


def outcome(text: str, name: str):
    try:
        return parse(text, name)
    except PipelineError as exc:
        return [(d.span, d.message) for d in exc.diagnostics]


def test_eight_threads_parsing_at_once_each_get_their_own_ir():
    texts = {path.name: path.read_text() for path in sorted((ROOT / "pipelines").glob("*.sbp"))}
    texts["broken.sbp"] = 'pipeline broken\ninput q: text\nparam p = "bad \\q"\nnode a: text { prompt = p }\noutput a\n'
    alone = {name: outcome(text, name) for name, text in texts.items()}
    assert isinstance(alone["broken.sbp"], list) and not isinstance(alone["liar.sbp"], list)
    names, start, got = sorted(texts), threading.Barrier(8), []

    def work(k: int) -> None:
        start.wait()
        for i in range(16):
            name = names[(k + i) % len(names)]
            got.append((name, outcome(texts[name], name)))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns inside every parse
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(old)
    assert len(got) == 8 * 16
    assert not [name for name, result in got if result != alone[name]]


def test_a_parse_never_waits_for_another_threads_parse(monkeypatch):
    """The first thread stops inside Lark's parse until a second thread has parsed a whole file: a lock held
    around parsing would keep the second out, and the first would wait in vain."""
    text = (ROOT / "pipelines" / "liar_paper.sbp").read_text()
    real, inside, second_done, waited = Lark.parse, threading.Event(), threading.Event(), []

    def parse_after_the_second(self, *args, **kwargs):
        if threading.current_thread().name == "first":
            inside.set()
            waited.append(second_done.wait(timeout=10))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Lark, "parse", parse_after_the_second)
    results = {}

    def work() -> None:
        results[threading.current_thread().name] = parse(text, "liar_paper.sbp")
        if threading.current_thread().name == "second":
            second_done.set()

    first = threading.Thread(target=work, name="first")
    first.start()
    assert inside.wait(timeout=10)
    second = threading.Thread(target=work, name="second")
    second.start()
    second.join(timeout=20)
    first.join(timeout=20)
    assert waited == [True] and results["first"] == results["second"] == parse(text, "liar_paper.sbp")
