"""Every combination works: each pipeline of `pipelines/` (and its YAML twin), each whole pipeline a doc shows,
and each pipeline of the generated grid (grid.py) through every command a user would run on it, against the
fake model of matrix.py. A case fails on a traceback, on "this is a bug in sbpc", or on an exit other than
the documented one, and its id names the pipeline and the command.

The pipelines are found by walking the folders and the docs: one added later is covered without editing this.
Each pipeline's workspace (its copy, its data, the runs the record commands read) is made once per process.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
from pathlib import Path

import pytest
from conftest import ROOT
from fake_batch import FakeBatchServer
from grid import FEATURES, GRID, generated, meaningful, pairs_of
from grid import Pipeline as Generated
from matrix import MODEL, Outcome, Universal, Workspace, sbpc, serve_one
from test_doc_blocks import HELD, PIPELINE, marker

import sembp_dsl as sbp

SHIPPED = sorted(p for p in (ROOT / "pipelines").iterdir() if p.suffix in (".sbp", ".yaml", ".yml"))
DOCS = [b for b in HELD if b.language in PIPELINE and marker(b) == ""]
EMITS = ("ir", "dot", "mermaid", "prompts", "constraints")
COMMANDS = (
    "check", "fmt-check", "fmt-twice", *(f"compile-{e}" for e in EMITS), "plan", "run-trace", "eval", "eval-batch",
    "eval-resume",
    "optimize-gradients", "optimize-demos", "optimize-models", "optimize-cost",
    "show", "report", "apply", "runs", "serve", "api",
)  # fmt: skip


def sources() -> list[tuple[str, object]]:
    """(id, where the pipeline comes from): a shipped file, a doc block, a generated combination."""
    found: list[tuple[str, object]] = [(f"pipelines/{p.name}", p) for p in SHIPPED]
    found += [(b.where, b) for b in DOCS]
    found += [(name, text) for name, text in generated(GRID)]
    return found


SOURCES = sources()
CASES = [pytest.param(name, command, id=f"{name}::{command}") for name, _ in SOURCES for command in COMMANDS]


@pytest.fixture(scope="module")
def server():
    with FakeBatchServer(delay=0.0, reply=Universal()) as running:  # the chat server, and OpenAI's batch API
        yield running


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory, server):
    made: dict[str, Workspace] = {}

    def workspace(name: str) -> Workspace:
        if name not in made:
            origin = dict(SOURCES)[name]
            folder = tmp_path_factory.mktemp(re.sub(r"\W+", "-", name)[-60:])
            if isinstance(origin, Path):
                made[name] = Workspace.of(origin.name, origin, folder, server.url, beside=origin.parent)
            elif isinstance(origin, Generated):
                (folder / "grid_code.py").write_text(origin.code)
                made[name] = Workspace.of("grid.sbp", origin.source, folder, server.url)
            else:
                made[name] = Workspace.of(f"block.{origin.language}", origin.text, folder, server.url)
        return made[name]

    return workspace


def sound(outcome: Outcome, *codes: int) -> None:
    """No traceback, no bug in sbpc, and an exit among `codes` (0 unless said)."""
    faults = outcome.faults()
    assert not faults, f"printed {' and '.join(faults)}:\n{outcome.text[-3000:]}"
    assert outcome.code in (codes or (0,)), f"exit {outcome.code}, not {codes or (0,)}:\n{outcome.text[-3000:]}"


@pytest.mark.parametrize(("name", "command"), CASES)
def test_every_command_on_every_pipeline(name, command, workspaces):
    space = workspaces(name)
    RUN[command.split("-")[0]](space, command)


def formatting(space: Workspace, command: str) -> None:
    if command == "fmt-check":
        sound(sbpc("fmt", "--check", space.path), 0, 1)  # 1: it would reformat (a doc block may be unformatted)
        return
    copy = space.path.with_name(f"formatted{space.path.suffix}")
    copy.write_text(space.path.read_text())
    sound(sbpc("fmt", copy))
    once = copy.read_text()
    sound(sbpc("fmt", copy))
    twice = copy.read_text()
    assert once == twice, "fmt is not idempotent:\n" + "".join(difflib.unified_diff(once, twice))
    sound(sbpc("fmt", "--check", copy))
    sound(sbpc("check", copy))


def compiling(space: Workspace, command: str) -> None:
    emitted = sbpc("compile", space.path, "--emit", command.split("-", 1)[1])
    sound(emitted)
    if command == "compile-ir":
        json.loads(emitted.out)


def optimizing(space: Workspace, command: str) -> None:
    strategy = command.split("-", 1)[1]
    if strategy == "cost":
        if not space.named_models:
            pytest.skip("names no models")
        sound(space.optimize("--objective", "cost", "--strategies", "models", *space.model_choice, priced=True))
        return
    if strategy not in space.strategies():
        pytest.skip(f"the {strategy} strategy does not apply")
    outcome = space.optimize(
        "--strategies", strategy, "--gate", "none", *space.model_choice, out=f"optimized-{strategy}",
        priced=strategy == "models",
    )  # fmt: skip
    sound(outcome)
    written = space.path.with_name(f"optimized-{strategy}{space.path.suffix}")
    if written.exists():
        sound(sbpc("check", written))
        assert written.read_text() != space.path.read_text()
    else:  # nothing to learn from on this data (every answer right, or none right for demos): said so
        assert "not written, as no prompt changed" in outcome.out, outcome.text[-2000:]


def recording(space: Workspace, command: str) -> None:
    optimized = bool(space.strategies())  # else optimize is a usage error (nothing to change), and makes no run
    if optimized:
        sound(space.recorded("optimize"))
    sound(space.recorded("eval"))
    runs = [space.folder("eval"), *([space.folder("optimize")] if optimized else [])]
    if command == "show":
        for run in runs:
            sound(sbpc("show", run))
            sound(sbpc("show", run, "--json"))
    elif command == "report":
        for run in runs:
            sound(sbpc("report", run, "--out", space.path.with_name(f"{Path(run).name}.html")))
    elif command == "apply":
        if not optimized:
            pytest.skip("no optimize run to apply: nothing in the pipeline to change")
        target = space.path.with_name(f"applied{space.path.suffix}")
        target.write_text(space.path.read_text())
        sound(sbpc("apply", space.folder("optimize"), target))
        sound(sbpc("check", target))
        written = space.path.with_name(f"optimized{space.path.suffix}")  # what that run wrote, if it changed a prompt
        assert target.read_text() == (written if written.exists() else space.path).read_text()
    else:
        listed = sbpc("runs", "--runs-dir", space.runs_dir)
        sound(listed)
        as_json = sbpc("runs", "--json", "--runs-dir", space.runs_dir)
        sound(as_json)
        listed_json = json.loads(as_json.out)  # the optimize cases' runs are in the same folder
        assert len(listed.out.strip().splitlines()) == len(listed_json) >= len(runs), listed.out


def evaluating(space: Workspace, command: str) -> None:
    if command == "eval":
        sound(space.recorded("eval"))
        return
    # eval-resume: an evaluation cut short as a kill leaves it (no end written, its last line half written) goes on
    runs = space.path.parent / "resumed"
    asked = ("eval", space.path, "--data", space.data, *space.sizes, *space.models, "--runs-dir", runs)
    sound(sbpc(*asked))
    [run] = runs.iterdir()
    record = json.loads((run / "run.json").read_text())
    record["finished"], record["ledger"] = False, None
    for key in ("score", "scored", "requested", "counts"):
        del record["evaluation"][key]
    (run / "run.json").write_text(json.dumps(record))
    whole = (run / "samples.jsonl").read_text().splitlines()
    (run / "samples.jsonl").write_text("".join(line + "\n" for line in whole[: len(whole) // 2]) + whole[-1][:9])
    resumed = sbpc(*asked, "--resume")
    sound(resumed)
    assert "the last line is cut off" in resumed.text, resumed.text[-2000:]
    ids = [json.loads(line)["id"] for line in (run / "samples.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(json.loads(line)["id"] for line in whole)


def running(space: Workspace, command: str) -> None:
    """run --trace as a user reads it, then --json: every node has its say, in JSON that parses."""
    row = ("--input-json", json.dumps(space.first_row()))
    sound(sbpc("run", space.path, "--trace", *row, *space.models))
    as_json = sbpc("run", space.path, "--json", *row, *space.models)
    sound(as_json)
    assert json.loads(as_json.out)["trace"]["output"] is not None, as_json.out


def planning(space: Workspace, command: str) -> None:
    planned = sbpc(
        "optimize", space.path, "--plan", "--data", space.data, *space.sizes, *space.models, *space.model_choice
    )
    sound(planned, 0 if space.strategies() else 2)  # 2: a usage error, nothing in the pipeline to change
    if space.strategies():
        as_json = sbpc("optimize", space.path, "--plan", "--json", "--data", space.data, *space.sizes, *space.models)
        sound(as_json)
        assert json.loads(as_json.out)["calls"]["forward"] > 0, as_json.out


def serving(space: Workspace, command: str) -> None:
    status, answer = serve_one(space)
    assert status == 200 and answer.get("error") is None, (status, answer)
    assert set(answer["trace"]["nodes"]) == set(space.graph.nodes), answer["trace"]


def batching(space: Workspace) -> None:
    """eval --batch scores what eval scores, every call through the batch API (no cache: each one is sent)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SBPC_BATCH_POLL", "0.01")
        batched = sbpc(
            "eval", space.path, "--data", space.data, *space.sizes, *space.models, "--no-cache", "--batch",
            "--runs-dir", space.path.parent / "runs-batch",
        )  # fmt: skip
    sound(batched)
    score = re.compile(r": accuracy .*")
    assert score.findall(batched.out) == score.findall(space.recorded("eval").out), batched.text[-2000:]
    if "calls priced at batch rates" not in batched.err:  # no model call: every node a function
        assert not re.search(r"^forward +[1-9]", batched.err, re.M), batched.err


def api(space: Workspace, command: str) -> None:
    with sbp.load(space.path, model=MODEL, api_base=space.url, cache=False) as pipeline:
        prediction = pipeline(**space.first_row())
        assert not prediction.failed, prediction.error
        evaluation = pipeline.evaluate(str(space.data), **space.SIZES)
        assert evaluation.results


RUN = {
    "check": lambda space, _: sound(sbpc("check", space.path)),
    "fmt": formatting,
    "compile": compiling,
    "plan": planning,
    "run": running,
    "eval": lambda space, command: batching(space) if command == "eval-batch" else evaluating(space, command),
    "optimize": optimizing,
    "show": recording,
    "report": recording,
    "apply": recording,
    "runs": recording,
    "serve": serving,
    "api": api,
}


def test_the_grid_holds_every_pair_of_features_that_means_something():
    wanted = {
        ((a, x), (b, y))
        for a, b in itertools.combinations(FEATURES, 2)
        for x in FEATURES[a]
        for y in FEATURES[b]
        if meaningful({a: x, b: y})
    }
    held = set().union(*(pairs_of(dict(zip(FEATURES, p.name.split("-")))) for p in GRID))
    assert wanted <= held and len(GRID) < len(list(itertools.product(*FEATURES.values()))) / 20
    assert len({p.name for p in GRID}) == len(GRID)


def test_the_matrix_walks_the_folders_and_the_docs():
    """Every shipped pipeline and whole doc pipeline is a source (a walk that found none would pass everything)."""
    assert {p.suffix for p in SHIPPED} == {".sbp", ".yaml"} and len(SHIPPED) >= 9
    assert len(DOCS) >= 4 and len(CASES) == len(SOURCES) * len(COMMANDS)
