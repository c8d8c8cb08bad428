"""The first request of `sbpc run` and `sbpc eval` waits on no import it does not need (issue 31).

Each command runs in a fresh process against the loopback fake server. An audit hook (sys.addaudithook: no
hook in sbpc itself) takes sys.modules at the moment the process connects to the server, the first request
on its way, and ends the process there. What was imported by then is held to an allow-list of what the call
needs: sbpc's own stages that take a pipeline to its first call (not the optimize loop, nor run records), and
the packages and standard modules it sends with. A package is allowed with everything it imports itself, as
read from a fresh interpreter, so the list does not break on another version of aiohttp or of Python.
bench/startup.py measures how soon that request leaves; docs/performance.md has the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_server import FakeServer

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "pipelines" / "liar_paper.sbp"
INPUTS = ("statement", "job_title", "state", "party", "source")

# sbpc's own modules a first call needs: the command line, the language (reading and compiling the file), the
# models layer (sending), the runtime (running, data, scoring), the API over them, and telemetry (the calls'
# spans, a no-op that imports no OpenTelemetry unless spans are asked for). Not learning/ (the optimize
# loop), records/ (a record is written after the calls), serve.py or compare.py.
SBPC_PACKAGES = ("sembp_dsl.cli", "sembp_dsl.language", "sembp_dsl.models", "sembp_dsl.runtime")
SBPC = (
    "sembp_dsl",
    "sembp_dsl.errors",
    "sembp_dsl.files",
    "sembp_dsl.usercode",
    "sembp_dsl.api",
    "sembp_dsl.telemetry",
    *SBPC_PACKAGES,
)
SBPC_NOT = ("sembp_dsl.cli.lsp", "sembp_dsl.cli.reading", "sembp_dsl.language.syntax.yaml_form")  # editors, YAML files
# What sbpc sends and renders with, each with what it imports itself: aiohttp (the fast path), jinja2 (the
# prompts' templates), lark (the .sbp grammar); and what sbpc itself takes from the standard library on the way.
PACKAGES = ("aiohttp", "jinja2.meta", "jinja2.sandbox", "lark")
STANDARD = (
    "argparse",  # the command line
    "asyncio",  # the calls
    "csv",  # LIAR's files
    "decimal",  # numbers in replies (language/nodes/shapes.py)
    "difflib",  # "did you mean" in diagnostics
    "hashlib",  # cache keys
    "json",
    "sqlite3",  # the response cache
)
# The probe: the hook takes sys.modules (and who imported each module) at the first connection to the server's
# port, writes them out, and ends the process; then the command line runs as `sbpc` runs it.
PROBE = """
import json, os, sys
port, out = int(sys.argv[1]), sys.argv[2]
importer = {}

def hook(event, args):
    if event == "import" and args[0] not in sys.modules:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
            frame = frame.f_back
        importer.setdefault(args[0], frame.f_globals.get("__name__", "?") if frame else "?")
    elif event == "socket.connect" and isinstance(args[1], tuple) and args[1][1] == port:
        with open(out, "w") as file:
            json.dump({"modules": sorted(sys.modules), "importer": importer}, file)
        os._exit(0)

sys.addaudithook(hook)
from sembp_dsl import cli
sys.exit(cli.main(sys.argv[3:]))
"""


def baseline() -> set[str]:
    """The top-level names a fresh interpreter holds once it has imported what a first call needs, and no more."""
    listing = f"import sys, {', '.join((*PACKAGES, *STANDARD))}; print(' '.join(sys.modules))"
    names = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0] for name in names.split()}


def unneeded(modules: list[str], allowed: set[str]) -> list[str]:
    """The modules imported before the first request that it does not need."""
    builtin = set(sys.builtin_module_names)  # compiled into the interpreter: nothing to read or run
    extra = []
    for name in modules:
        if name.startswith("sembp_dsl"):
            if name in SBPC_NOT or not (name in SBPC or name.startswith(tuple(f"{p}." for p in SBPC_PACKAGES))):
                extra.append(name)
        elif name.split(".")[0] not in allowed and name not in builtin and name != "__main__":
            extra.append(name)
    return extra


def first_request(tmp_path: Path, server: FakeServer, *args: str) -> dict:
    """What the process of `sbpc ARGS` had imported when it connected to the server (it ends there)."""
    out = tmp_path / "modules.json"
    model = ["--model", "openai/fake", "--api-base", server.url]
    command = [sys.executable, "-c", PROBE, str(server.port), str(out), *args, *model]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.exists(), f"no request reached the server (exit {proc.returncode}):\n{proc.stderr}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def allowed() -> set[str]:
    return baseline()


@pytest.mark.parametrize(
    "command",
    [
        ["run", str(PIPELINE), *(f"--input={name}=x" for name in INPUTS)],
        ["eval", str(PIPELINE), "--data", "liar"],
    ],
    ids=["run", "eval"],
)
def test_the_first_request_waits_on_no_import_it_does_not_need(tmp_path, allowed, command):
    with FakeServer(reply="Yes") as server:
        seen = first_request(tmp_path, server, *command)
    extra = unneeded(seen["modules"], allowed)
    importer = seen["importer"]
    roots = {name: importer.get(name, "?") for name in extra if importer.get(name) not in extra}  # what to undo
    assert not extra, f"{len(extra)} modules imported before the first request, which needs none of them: {roots}"
    assert not {"litellm", "openai", "jsonschema", "tqdm", "yaml"} & {m.split(".")[0] for m in seen["modules"]}


def test_the_allow_list_catches_a_module_the_first_call_does_not_need(tmp_path, allowed):
    """The check can fail: the optimize loop, a package sbpc does not send with, a costly standard module."""
    modules = ["sembp_dsl.api", "sembp_dsl.learning.optimize", "sembp_dsl.records.record", "jsonschema", "tkinter"]
    assert unneeded(modules, allowed) == modules[1:]
    assert unneeded(["sembp_dsl.cli.lsp", "sembp_dsl.language.syntax.yaml_form", "aiohttp.client"], allowed) == [
        "sembp_dsl.cli.lsp",
        "sembp_dsl.language.syntax.yaml_form",
    ]
