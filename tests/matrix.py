"""The machinery of the matrix (test_matrix.py): a fake model that answers any node sensibly, and a pipeline's
workspace in which every command a user would run on it runs, in-process, as `sbpc` runs it.

Nothing here knows a shipped file: a pipeline is read through the compiler (its inputs, output type, demos
and named models), its data is the `.jsonl` beside it or rows made from its inputs, and the fake model
answers by what each request asks for (its tools, its JSON Schema, or the words of a backward or
optimizer question).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import shutil
import threading
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from sembp_dsl.cli.commands import main
from sembp_dsl.errors import BUG_IN_SBPC
from sembp_dsl.language import ir
from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.language.graph.graph import Graph

MODEL = "openai/gpt-4o-mini"  # litellm knows it takes a JSON Schema and tools: every shaped reply carries its schema
CHEAPER = ("openai/gpt-4o-mini", "openai/gpt-4o", "openai/gpt-4.1-mini", "openai/gpt-4.1", "openai/gpt-4o-2024-08-06")
ROWS = 8  # rows made for a pipeline that ships no data
ROLES = ("forward", "backward", "optimizer")


class Universal:
    """A fake model for any pipeline: a tool call while a node has tools and no result yet, an instance of the
    reply's JSON Schema when the request carries one (an option picked by the prompt's hash, so both sides of a
    branch run across rows), one `Hint k:` line per hint asked for, a `<prompt>` for the optimizer, and else a
    JSON list of two short texts (a text node takes it as text, a list node as its items)."""

    reads_request = True

    def __init__(self) -> None:
        self.requests = 0

    def __call__(self, messages: list, request: dict):
        self.requests += 1
        prompt = str(messages[-1].get("content") or "") if messages else ""
        salt = zlib.crc32("".join(str(m.get("content")) for m in messages).encode())
        tools = request.get("tools") or []
        if tools and messages[-1].get("role") != "tool":
            function = tools[0]["function"]
            arguments = instance(function.get("parameters") or {"type": "object"}, salt)
            call = {"id": f"call{salt}", "type": "function", "function": {"name": function["name"]}}
            call["function"]["arguments"] = json.dumps(arguments)
            return {"content": None, "tool_calls": [call]}
        schema = (request.get("response_format") or {}).get("json_schema", {}).get("schema")
        if schema:
            return json.dumps(instance(schema, salt))
        if messages[-1].get("role") == "tool":  # a tool loop's answer, which no schema holds: as its prompt says
            return answer_in_words(next(m for m in messages if m.get("role") == "user")["content"], salt)
        hints = re.findall(r"^Hint (\d+)(?: \(from \w+\))?: \.\.\.$|^Hint (\d+) \(from", prompt, re.M)
        if "<prompt>" in prompt and "</prompt>" in prompt:
            return "<prompt>Answer the question carefully and say only the answer.</prompt>"
        if hints:
            numbers = sorted({int(a or b) for a, b in hints})
            return "\n".join(f"Hint {k}: It should name the facts the answer needs." for k in numbers)
        return json.dumps(["A short answer.", "Another answer."])


def answer_in_words(prompt: str, salt: int) -> str:
    """An answer as a prompt asks for it in words (shapes.answer_format): a record's fields, a choice's option, a
    number, a JSON array; else a short text."""
    fields = re.findall(
        r'^- "(\w+)": (.+)$', prompt.split("Reply with a JSON object with exactly these fields:")[-1], re.M
    )
    options = re.search(r"Begin the answer with one of: (.+)\.$", prompt, re.M)
    if "Reply with a JSON object" in prompt and fields:
        kinds = {"text": "A short answer.", "a number": 1, "any JSON value": []}
        chosen = {name: re.findall(r'"([^"]*)"', what) for name, what in fields}
        return json.dumps({n: chosen[n][salt % len(chosen[n])] if chosen[n] else kinds[w] for n, w in fields})
    if options:
        choices = options.group(1).split(", ")
        return f"{choices[salt % len(choices)]}: a short answer."
    if "End the answer with the number." in prompt:
        return f"The answer is {1 + salt % 2}."
    if "Answer with a JSON array, each item text." in prompt:
        return json.dumps(["A short answer.", "Another answer."])
    return "A short answer."


def instance(schema: dict, salt: int):
    """A value that keeps to a JSON Schema (the subset sbpc sends): the first of anyOf, an option by `salt`."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][salt % len(schema["enum"])]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return instance(schema[key][0], salt)
    kind = schema.get("type", "string")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: instance(part, salt + i) for i, (name, part) in enumerate(properties.items())}
    if kind == "array":
        return [instance(schema.get("items", {}), salt + i) for i in range(2)]
    if kind in ("number", "integer"):  # 1, 2 or 5: right for some rows and wrong for others, a judge's score too
        return max(schema.get("minimum", 1), min(schema.get("maximum", 5), (1, 2, 5)[salt % 3]))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "A short answer."[: schema.get("maxLength", 100)]


@dataclass
class Outcome:
    """What one command did: its exit code and what it printed."""

    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def faults(self) -> list[str]:
        """What no command may ever print: a traceback, sbpc's own word for a bug, or a Python None for an answer."""
        found = []
        if "Traceback (most recent call last)" in self.text:
            found.append("a traceback")
        if BUG_IN_SBPC in self.text:
            found.append(f"'{BUG_IN_SBPC}'")
        if re.search(r"\bgot None\b|: None\)", self.text):
            found.append("Python's None where words belong")
        return found


def sbpc(*args: str) -> Outcome:
    """`sbpc ARGS` in this process: main() with its output captured, an exit by argparse as its code."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
    return Outcome(code, out.getvalue(), err.getvalue())


@dataclass
class Workspace:
    """A pipeline copied into its own folder with the files beside it, its data, and the runs made on it."""

    name: str
    path: Path
    graph: Graph
    data: Path
    url: str
    runs: dict[str, Outcome] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, name: str, source: Path | str, folder: Path, url: str, beside: Path | None = None) -> Workspace:
        """`source` (a file, or a pipeline's text with `name` as its file name) in `folder`, with the files of
        the folder `beside` it (its Python modules and data), and data to run it on."""
        folder.mkdir(parents=True, exist_ok=True)
        if beside is not None:
            for sibling in beside.iterdir():
                if sibling.suffix in (".py", ".jsonl", ".csv"):
                    shutil.copy(sibling, folder / sibling.name)
        path = folder / name
        path.write_text(source.read_text() if isinstance(source, Path) else source)
        graph = compile_file(str(path))
        data = folder / f"{path.stem}.jsonl"
        if not data.exists():
            data = folder / "matrix-rows.jsonl"
            data.write_text("".join(json.dumps(row) + "\n" for row in made_rows(graph)))
        return cls(name, path, graph, data, url)

    @property
    def models(self) -> tuple[str, ...]:
        return ("--model", MODEL, "--api-base", self.url)

    #: the splits every command that reads data draws (a file's optimize block may ask for more than it has rows,
    #: or for no test split): eval scores the test split of optimize's
    SIZES = {"train_size": 3, "val_size": 3, "test_size": 2, "seed": 0}

    @property
    def sizes(self) -> tuple[str, ...]:
        return tuple(part for key, n in self.SIZES.items() for part in (f"--{key.replace('_', '-')}", str(n)))

    @property
    def runs_dir(self) -> Path:
        return self.path.parent / "runs"

    def first_row(self) -> dict:
        row = json.loads(self.data.read_text().splitlines()[0])
        return {i.name: row.get(i.field or i.name) for i in self.graph.inputs}

    def strategies(self) -> list[str]:
        """The optimize strategies that apply: gradients when a prompt is trained, demos when a node has demos
        to pick, models when the file names models a node may move between."""
        found = ["gradients"] if self.graph.trainable else []
        if self.graph.trainable_demos:
            found.append("demos")
        if self.named_models:
            found.append("models")
        return found

    @property
    def named_models(self) -> list[str]:
        return [name for name in self.graph.models if name not in ROLES]

    @property
    def model_choice(self) -> tuple[str, ...]:
        """The flag naming the models a node may move to (the file's named ones), when it names any."""
        return ("--models", ",".join(self.named_models)) if self.named_models else ()

    def priced(self) -> Path:
        """A copy whose models are distinct priced ones (a named model a step may move a node to is cheaper or
        dearer than another), all on the fake server: what the models strategy and the cost objective weigh.
        The YAML form keeps its models (each then the one --model names)."""
        if self.path.suffix != ".sbp":
            return self.path
        names = [*ROLES, *self.named_models]
        blocks = "".join(
            f'model {name} {{ name = "{CHEAPER[i % len(CHEAPER)]}"  api_base = "{self.url}" }}\n'
            for i, name in enumerate(names)
        )
        copy = self.path.with_name(f"priced{self.path.suffix}")
        copy.write_text(re.sub(r"\nmodel[^{]*\{[^}]*\}", "", self.path.read_text()) + "\n" + blocks)
        return copy

    def optimize(self, *extra: str, out: str = "optimized", priced: bool = False) -> Outcome:
        target = self.path.parent / f"{out}{self.path.suffix}"
        models = () if priced and self.path.suffix == ".sbp" else self.models
        return sbpc(
            "optimize", self.priced() if priced else self.path, "--data", self.data, *self.sizes, "--iters", "1",
            *models, "--runs-dir", self.runs_dir, "--out", target, *extra,
        )  # fmt: skip

    def recorded(self, kind: str) -> Outcome:
        """The eval or optimize run the record commands read, made once (whichever case asks first)."""
        with self.lock:
            if kind not in self.runs:
                if kind == "eval":
                    self.runs[kind] = sbpc(
                        "eval", self.path, "--data", self.data, *self.sizes, *self.models,
                        "--runs-dir", self.runs_dir, "--errors", "2",
                    )  # fmt: skip
                else:
                    self.runs[kind] = self.optimize("--gate", "none", *self.model_choice)
            return self.runs[kind]

    def folder(self, kind: str) -> str:
        """The record folder of the eval or optimize run, as the command printed it (the runs' numbers depend on
        which case made its run first)."""
        found = re.search(r"^run record: (.+)/run\.json$", self.recorded(kind).text, re.M)
        assert found, f"the {kind} run names no record:\n{self.recorded(kind).text[-2000:]}"
        return found.group(1)


def made_rows(graph: Graph) -> list[dict]:
    """A few rows for a pipeline that ships no data: each input a value of its type, and an answer of the
    output's type under the field the metric reads."""
    rows = []
    for i in range(ROWS):
        row = {i_.field or i_.name: value_of(i_.type, f"{i_.name} {i}", i) for i_ in graph.inputs}
        row[graph.answer_field or "answer"] = answer_of(scored_type(graph), i)
        rows.append(row)
    return rows


def scored_type(graph: Graph) -> ir.OutputType:
    """The type of the value scored: the output's value (a mapped node's is a list), or its field."""
    whole = graph.type_of(graph.output)
    field = whole.field(graph.output_field) if graph.output_field else None
    return field.type if field is not None else whole


def value_of(type_: ir.OutputType, text: str, i: int):
    if type_.kind == "list":
        return [value_of(type_.item, f"{text} item {k}", i) for k in range(2)] if type_.item else [text, text]
    if type_.kind == "number":
        return i + 1
    if type_.kind == "choice":
        return type_.choices[i % len(type_.choices)]
    return f"A sample {text}."


def answer_of(type_: ir.OutputType, i: int):
    """Row i's answer: every other one what the fake model answers, so an optimizer has errors to learn from and
    right answers to take as demos."""
    if type_.kind == "choice":
        return type_.choices[i % len(type_.choices)]
    if type_.kind == "number":
        return 1 + i % 2
    if type_.kind == "list":
        return json.dumps(["A short answer.", "Another answer."][: 1 + i % 2])
    if type_.kind == "record":
        return json.dumps({f.name: answer_of(f.type, i) for f in type_.fields})
    return json.dumps(["A short answer.", "Another answer."]) if i % 2 else "A short answer."


def serve_one(workspace: Workspace) -> tuple[int, dict]:
    """One request through `sbpc serve`'s application (serve.start on a loop of its own, traces allowed, the
    request asking for one): its status and body."""
    import sembp_dsl as sbp
    from sembp_dsl import serve

    pipeline = sbp.load(workspace.path, model=MODEL, api_base=workspace.url, cache=False)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        runner = asyncio.run_coroutine_threadsafe(serve.start(pipeline, "127.0.0.1", 0, allow_trace=True), loop).result(
            30
        )
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/?trace=1"
        body = json.dumps(workspace.first_row()).encode()
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, answer = response.status, json.loads(response.read())
        except urllib.error.HTTPError as refused:
            status, answer = refused.code, json.loads(refused.read())
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    return status, answer
