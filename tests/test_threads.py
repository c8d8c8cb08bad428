"""Threads may load pipelines at once (the API promises that threads work): the parser's and the YAML
loader's builders are shared, so each load must get its own file's IR and its own file's errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import ROOT

# A fresh interpreter, so the first loads also race to build the Lark parser and the YAML schema; a tiny
# switch interval makes threads take turns inside every parse.
RACE = textwrap.dedent("""\
    import sys, threading
    from sembp_dsl.language.diagnostics import PipelineError
    from sembp_dsl.language.source import compile_file

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
