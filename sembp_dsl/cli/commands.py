"""`sbpc`: the command line. Each subcommand is a thin layer over one stage of the compiler.

This module holds the entry point and the commands over pipelines and models; the commands over run
records are in runs.py, and the flags both share in flags.py.
Heavy modules (litellm, the model runtime) are imported only by the commands that
call models, so `sbpc check` stays fast enough for pre-commit hooks and editors.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import traceback
from dataclasses import asdict, replace
from pathlib import Path

from .. import __version__, telemetry
from ..errors import BUG_IN_SBPC, SbpcError
from ..files import atomic_write, read_current
from ..language import kinds
from ..language.blocks.method import SETTINGS, STRATEGIES, SettingError
from ..language.codes import CODES, lookup
from ..language.diagnostics import PipelineError, as_json, did_you_mean, for_terminal, json_text
from ..language.nodes.trace import NodeTrace
from ..runtime import datasets
from ..runtime.datasets import EVAL_TEST_SIZE, anchor_data_dir
from .flags import (
    COUNT,
    POSITIVE_COUNT,
    PROBABILITY,
    Phases,
    UsageError,
    add_allow_module,
    add_data_flags,
    add_model_flags,
    add_otel_flags,
    add_setting,
    load_pipeline,
    method_settings,
    number,
    parse_pairs,
    print_ledger,
    progress_bar,
)
from .init import add_init
from .routers import router_problem
from .runs import add_run_commands
from .stopping import exit_code, handled, say, unsaid, word

LANGUAGE_BY_EXAMPLE = '''\
A pipeline file (.sbp) by example:

  # Comments start with '#'.
  pipeline liar "Decide whether a political statement is a lie"

  input statement, party: text            # inputs, read from data fields of the same name
  input source: text from "context"       # ... or from a differently named field

  param analyse = "Analyse the statement."   # a prompt parameter: the optimizer rewrites it
  frozen param style = "Be brief."           # frozen: never changed
  param verdict_task = """
    Is the statement a lie? Answer Yes or No.
    """                                      # block string: dedented by its closing quotes

  template judge = """
    {{ prompt }}
    Statement: {{ statement }}
    Analysis: {{ analysis }}
    """                                      # Jinja2 (sandboxed): {{ prompt }} + the node's inputs

  node analysis: text           { prompt = analyse }              # default template
  node verdict: choice(Yes, No) { prompt = verdict_task  template = judge }
  #   output types: text, number, json, choice(...); parse = reply (default) | tag (<output>...</output>)

  function search = "tools:search"       # Python code: search() in tools.py beside this file, imported
  node passages: json { function = search  timeout = 10 }   # only by run/eval/optimize (or --allow-module)

  statement, party, source -> analysis    # edges: every name on the left feeds every name on the right
  statement, analysis -> verdict          # the order of edges numbers the hints of a node
  output verdict                          # the node whose answer is scored
  metric exact                            # exact | numeric | json

  model forward   { name = "openai/gpt-4o-mini"  temperature = 0  max_tokens = 256 }
  model backward  { name = "openai/gpt-4o" }
  optimize { iterations = 3  errors_per_gradient = 2  gradient = sibling  update = full  gate = val }

The same pipeline can be written in YAML (.yaml/.yml); see docs/language.md.
'''


MOST_DIAGNOSTICS_SHOWN = 50  # a generated file can carry thousands of warnings: the first ones, then a count
SHOWN_ITEMS = 100  # a map's items `run --trace` prints in full; `run --json` has them all


def _report(diagnostics, text) -> None:
    for d in diagnostics[:MOST_DIAGNOSTICS_SHOWN]:
        print(d.render(text), file=sys.stderr)
    if len(diagnostics) > MOST_DIAGNOSTICS_SHOWN:
        print(
            f"... and {len(diagnostics) - MOST_DIAGNOSTICS_SHOWN} more (`sbpc check --json` lists them all)",
            file=sys.stderr,
        )


def cmd_check(args) -> int:
    # the parser (lark) costs about 0.6 s to import: --help, explain and schema never pay it
    from ..language.graph.compile import diagnose_file

    failed = False
    results = []
    for path in args.files:
        diagnostics, text, _ = diagnose_file(path, router_problem, tuple(args.allow_module or ()), datasets.fields_of)
        errors = [d for d in diagnostics if d.severity == "error"]
        failed = failed or bool(errors)
        results.append({"file": path, "ok": not errors, "diagnostics": [as_json(d) for d in diagnostics]})
        if not args.json:
            _report(diagnostics, text)
            warnings = len(diagnostics) - len(errors)
            status = f"{len(errors)} error(s)" if errors else "ok"
            print(f"{path}: {status}" + (f", {warnings} warning(s)" if warnings else ""))
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if failed else 0


def cmd_fmt(args) -> int:
    """Each .sbp file in the canonical layout: rewritten in place, or (--check, --diff) only reported."""
    # the formatter and the parser (lark) cost about 0.6 s to import: only the commands that parse pay it
    from ..language.syntax.source import parse_text, read
    from ..language.tooling.fmt import format_text
    from ..language.tooling.writeback import unified_diff

    dry = args.check or args.diff
    changed, failed = [], False
    for path in args.files:
        if path.endswith((".yaml", ".yml")):
            print(f"{path}: left as it is (sbpc fmt formats .sbp files)", file=sys.stderr)
            continue
        try:
            if path == "-":
                text = sys.stdin.read()
                new = format_text(text, "<stdin>")
            else:
                text = read(path)
                if not path.endswith(".sbp"):
                    parse_text(text, path)  # says which kinds of file there are
                new = format_text(text, path)
        except PipelineError as exc:
            _report(exc.diagnostics, exc.text)
            failed = True
            continue
        if path == "-":
            sys.stdout.write(new)
            continue
        if new == text:
            continue
        changed.append(path)
        if args.diff:
            sys.stdout.write(unified_diff(text, new, path))
        if args.check:
            print(f"would reformat {path}", file=sys.stderr)
        if not dry:
            atomic_write(Path(path), new, bom=read_current(Path(path))[1])
            print(f"reformatted {path}", file=sys.stderr)
    if dry and changed:
        return 1
    return 1 if failed else 0


def cmd_lsp(args) -> int:
    # the language server and its editor model are for `sbpc lsp` alone (pygls is an extra)
    from .lsp import serve

    return serve()


def cmd_explain(args) -> int:
    if args.code is None:
        for code in CODES.values():
            print(f"{code.code}  {code.title}")
        return 0
    found = lookup(args.code)
    if found is None:
        hint = did_you_mean(args.code.upper(), CODES) or "; `sbpc explain` lists every code"
        raise UsageError(f"unknown code {args.code!r}{hint}")
    print(found.render(), end="")
    return 0


def cmd_schema(args) -> int:
    # jsonschema costs about 0.1 s to import: only `sbpc schema` and YAML pipelines pay it
    from ..language.syntax.yaml_form import schema_text

    print(schema_text(list(STRATEGIES)), end="")
    return 0


def cmd_compile(args) -> int:
    # the emitters and the parser (lark) cost about 0.6 s to import: only the commands that parse pay it
    from ..language.graph.compile import compile_file
    from ..language.tooling.emit import EMITTERS, prompt_sections

    graph = compile_file(args.file)
    _report(graph.warnings, graph.pipeline.text)
    if args.emit == "prompts":  # streamed: a large graph has millions of prompts
        for i, section in enumerate(prompt_sections(graph)):
            print(("\n" if i else "") + section)
    elif args.emit == "constraints":  # which model takes which constraint is the model layer's to say
        # the model layer costs over 1 s to import (litellm's tables): only --emit constraints pays it
        from ..models.constraints import emit
        from ..models.llm import LLMError, resolve_model

        names: dict[str, str | None] = {}
        for role, spec in graph.models.items():
            try:
                names[role] = resolve_model(spec).name
            except LLMError:
                names[role] = None
        print(emit(graph, names))
    else:
        print(EMITTERS[args.emit](graph))
    return 0


def failure_text(node) -> str:
    """A failed node's error under the name of what failed, in capitals: `CALL FAILED: 503 ...`,
    `FUNCTION FAILED: ...`, `PARSE ERROR: no number in the reply`."""
    cause = node.cause
    return f"{cause.upper()}: {node.error.removeprefix(cause).removeprefix(':').strip()}"


def trace_text(t: NodeTrace) -> str:
    """A node's part of `run --trace`: its system message, prompt and reply, what its kind says of its own data,
    then its output or what failed; a mapped node's every item so (up to SHOWN_ITEMS), then the list; a node its
    sample's branch skipped, said so."""
    if not t.taken:
        return f"=== {t.node} (not taken: a branch this sample did not take) ===\n"
    runs = [exchange(item, f"item {k} of {len(t.items)}: ") for k, item in enumerate(t.items[:SHOWN_ITEMS], 1)]
    more = len(t.items) - SHOWN_ITEMS
    runs += [f"--- {more} more items (run --json lists them all) ---"] if more > 0 else []
    return (
        f"=== {t.node}{' (cached)' if t.cached else ''} ===\n"
        + ("\n".join(runs) if t.items else exchange(t, ""))
        + f"\n--- output ---\n{t.output if t.error is None else failure_text(t)}\n"
    )


def exchange(t: NodeTrace, item: str) -> str:
    """One run's system message, prompt, reply and what its kind keeps, each headed (`item 2 of 3: prompt`)."""
    parts = [(part.title, part.text) for part in kinds.shown(t.extra, full=True)]
    system = f"--- {item}system ---\n{t.system}\n" if t.system is not None else ""
    text = f"{system}--- {item}prompt ---\n{t.prompt}\n--- {item}reply{' (cut off by its length limit)' if t.cut_off else ''} ---\n{t.reply}"
    text += "".join(f"\n--- {item}{title} ---\n{shown}" for title, shown in parts)
    return text + (f"\n--- {item}error ---\n{t.error}" if item and t.error is not None else "")


def cmd_run(args) -> int:
    # the api and the model runtime cost about 0.25 s to import: only the commands that call models pay it
    from ..runtime.inputs import InputError

    try:
        inputs = json.loads(args.input_json) if args.input_json else {}
    except ValueError as exc:
        raise UsageError(f"--input-json is not valid JSON: {exc}")
    if not isinstance(inputs, dict):
        raise UsageError("--input-json expects a JSON object")
    inputs.update(parse_pairs(args.input, "--input"))
    with load_pipeline(args) as pipeline:
        try:  # unknown names (with a close one) and missing ones are usage errors, before any call
            prediction = pipeline.batch([inputs])[0]
        except InputError as exc:
            raise UsageError(f"--input: {exc} (give inputs with --input NAME=VALUE or --input-json)")
        trace = prediction.trace
        if args.json:
            print(
                json_text({"trace": trace.to_json(), "ledger": pipeline.ledger.to_json()})
            )  # replies: strangers' text
        else:
            if args.trace:
                for t in trace.nodes.values():
                    print(for_terminal(trace_text(t), sys.stdout))
            answer = (
                trace.output if trace.output is not None else f"(no answer: {prediction.error})\n{trace.final.reply}"
            )
            print(for_terminal(answer, sys.stdout))
        print_ledger(pipeline, args)
    return 0 if trace.output is not None else 1


def cmd_eval(args) -> int:
    with load_pipeline(args) as pipeline:
        count, metric, scored = _to_score(pipeline, args)
        with progress_bar(count, f"eval {scored}", args.json) as bar, _resumed(args):
            evaluation = pipeline.evaluate(  # the data set again by name, so that the record names it
                args.examples,
                metric,
                split=args.split,
                limit=args.limit,
                mapping=parse_pairs(args.map, "--map"),
                on_done=lambda r: bar.update(),
                runs_dir=args.runs_dir,
                batch=_batch(args),
                keep=args.errors,  # the summary's sums and the wrong samples it prints: flat however many rows
                resume=args.resume,
                **method_settings(args),
            )
        for note in evaluation.notes:
            print(for_terminal(f"sbpc: note: {note}", sys.stderr), file=sys.stderr)
        evaluation = replace(evaluation, stopped=evaluation.stopped and evaluation.stopped.cli)  # a budget as flags
        code = 0 if evaluation.trustworthy else 1  # nothing, or too little, scored is no result
        if args.json:
            print(
                json_text(
                    {
                        "file": args.file,
                        "data": args.data,
                        "split": args.split,
                        "metric": metric,
                        **evaluation.to_json(args.errors),
                        "run": str(evaluation.record),
                        "ledger": pipeline.ledger.to_json(),
                    }
                )
            )
            return code
        # the wrong answers' lines quote replies and data: strangers' text
        print(for_terminal(evaluation.report(f"{args.file} on {scored}", metric, args.errors), sys.stdout))
        print(f"run record: {evaluation.record}/run.json")
        print_ledger(pipeline, args)
        if evaluation.scored and not evaluation.trustworthy:
            print(
                f"sbpc: error: {evaluation.tally.lost} of {evaluation.tally.samples} samples were lost to failed "
                "calls; the score of the rest is no result (the causes are above)",
                file=sys.stderr,
            )
    return code


def _batch(args):
    """What `eval --batch` asks of the batch API: its progress told on stderr (a killed run is resumed with --resume,
    as any evaluation)."""
    from ..models.batch import Batch  # the model layer: imported by the commands that call models only

    return Batch(progress=lambda line: print(line, file=sys.stderr, flush=True)) if args.batch else False


def _to_score(pipeline, args) -> tuple[int, str, str]:
    """How many samples `eval` scores, with which metric, and its words for them; the rows read for that are let
    go before the evaluation reads them again (held through it, a long file's rows were its largest part)."""
    # the api and the model runtime cost about 0.25 s to import: only the commands that call models pay it
    from ..runtime.evaluate import first_needed, metric_for, split_to_score

    dataset = args.examples.load(first_needed(pipeline.graph, args.split, method_settings(args), args.limit))
    # the same sizes as optimize, so a single-pool data set is carved the same way and test never overlaps;
    # the user's own file with no size given is scored whole
    count = len(split_to_score(pipeline.graph, dataset, args.split, method_settings(args))[: args.limit])
    if not count:  # a score of nothing is no result: said before a run record is made
        size = f"{args.split}_size"
        given = f" ({SETTINGS[size].option} 0)" if getattr(args, size, None) == 0 else ""
        why = "--limit 0" if args.limit == 0 else f"the {args.split} split of {dataset.name} is empty{given}"
        raise UsageError(f"nothing to score: {why}")
    metric = args.metric or metric_for(pipeline.graph, dataset.metric)
    return count, metric, _scored(dataset, args.split, count, args.limit)


@contextlib.contextmanager
def _resumed(args):
    """`eval --resume` that finds no evaluation to go on with: a usage error, said as the flag's."""
    if not args.resume:
        yield
        return
    from ..records.record import ResumeError  # the run record: imported by an evaluation that keeps one anyway

    try:
        yield
    except ResumeError as exc:
        raise UsageError(f"--resume: {exc.cli}") from None


def _scored(dataset, split: str, count: int, limit: int | None) -> str:
    """What `eval` scored, as its report names it: a user's file whole (or its first rows), else a split of it."""
    rows = sum(map(len, dataset.pools.values()))
    if not (dataset.user and count == rows):
        return f"{dataset.name}/{split} ({count} of {rows} rows)"
    return f"{dataset.name} (its first {count} rows)" if limit is not None else f"{dataset.name} (every row)"


def cmd_optimize(args) -> int:
    # the run record and the model runtime cost about 0.25 s to import: only the commands that call models pay it
    from ..records.record import ResumeError, resume_command

    # the plan runs no code; with --resume, a write into the file its run was making when killed is finished first
    pipeline = load_pipeline(args, code=not args.plan, resume=args.resume)
    if pipeline.finished_write:
        print(pipeline.finished_write, file=sys.stderr)
    _report(pipeline.graph.warnings, pipeline.graph.pipeline.text)
    data, settings = args.examples, method_settings(args)
    mapping = parse_pairs(args.map, "--map")
    the_plan = pipeline.plan(data, metric=args.metric, mapping=mapping, **settings)
    if args.plan:
        print(json_text(_plan_json(the_plan)) if args.json else the_plan.render())
        return 0

    progress = Phases(args.json)

    def log(line: str) -> None:
        progress.close()
        if not args.json:
            print(line, flush=True)

    if not args.json:
        print(the_plan.render(), file=sys.stderr)
        if the_plan.warning:
            print(f"warning: {the_plan.warning.cli}", file=sys.stderr)
    try:
        found = pipeline.optimize(
            data,
            metric=args.metric,
            mapping=mapping,
            runs_dir=args.runs_dir,
            resume=args.resume,
            write=False if args.dry_run else args.out or True,
            log=log,
            progress=progress,
            **settings,
        )
    except ResumeError as exc:
        raise UsageError(f"--resume: {exc.cli}")
    except KeyboardInterrupt:
        say(
            f"\n{word()}; the best prompts so far are in {args.out or args.file}"
            f"{' (dry run: nothing written)' if args.dry_run else ''}. Continue with: {resume_command(args.argv)}"
        )
    finally:
        pipeline.close()
    log("")
    outcome, diff = found.outcome, found.diff
    code = 1 if outcome.failed else 0
    if args.json:
        record = json.loads((found.record / "run.json").read_text())
        print(json_text({"run": str(found.record), "plan": _plan_json(the_plan), **record, "diff": diff}))
        return code
    _print_optimized(args, found, resume_command(args.argv))
    print_ledger(pipeline, args)
    return code


def _print_optimized(args, found, resume: str) -> None:
    """What an optimize run ended with: why it stopped early, the held-out change, the diff and where it went."""
    outcome, diff = found.outcome, found.diff
    if outcome.stopped:
        print(f"stopped early: {outcome.stopped.cli}\nthe best prompts so far are kept; continue with: {resume}")
    if outcome.test_after is not None:
        print(held_out_change(outcome.test_before, outcome.test_after))
    print(f"\n{diff}" if diff else outcome.unchanged or "no prompt changed")
    if diff:
        print("nothing written (--dry-run)" if args.dry_run else f"written to {found.written}")
    elif args.out:
        print(f"{args.out}: not written, as no prompt changed (it would be a copy of {args.file})")
    print(f"run record: {found.record}/run.json")


def _plan_json(plan) -> dict:
    return {**asdict(plan), "warning": plan.warning and plan.warning.cli}


def cmd_serve(args) -> int:
    # aiohttp and the model runtime cost about 2 s to import: only `sbpc serve` pays it
    from ..serve import MCP_PATH, serve, serve_mcp_stdio

    pipeline = load_pipeline(args)
    if args.mcp == "stdio":  # stdout is the protocol's: nothing else is written there
        print(
            f"serving {args.file} as the MCP tool '{pipeline.graph.pipeline.name}' on stdin and stdout", file=sys.stderr
        )
        serve_mcp_stdio(pipeline)
        return 0

    def announce(url: str) -> None:
        print(
            f"serving {args.file} on {url}  (POST / with a JSON object of {', '.join(pipeline.inputs)}; "
            + (f"MCP clients at {url}{MCP_PATH}; " if args.mcp else "")
            + "GET /health; Ctrl-C stops)",
            flush=True,
        )

    serve(pipeline, args.host, args.port, announce, allow_trace=args.allow_trace, mcp=args.mcp == "http")
    return 0


def cmd_tools_sync(args) -> int:
    """Start each MCP server a file declares once, list its tools, and write their schemas to the lock."""
    # the parser and the MCP client (the mcp package, when a file has servers): only this command pays them
    from ..language.mcp_servers import LOCK
    from ..language.syntax.source import load
    from ..runtime.mcp_client import sync

    for path in args.files:
        locked = sync(load(path))
        if not locked:
            print(f"{path}: declares no MCP server (mcp NAME {{ command = ... }}): nothing to lock", file=sys.stderr)
        for server, count in locked:
            print(f"{path}: locked {count} tool(s) of the MCP server '{server}' in {LOCK} beside it")
    return 0


def _add_tools(sub) -> None:
    """`sbpc tools sync`: the lock of the tools MCP servers give (check reads it, never starting a server)."""
    tools = sub.add_parser("tools", help="lock the tools of a pipeline's MCP servers (sbpc tools sync FILE)")
    actions = tools.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    sync = actions.add_parser(
        "sync",
        help="start each MCP server once, list its tools, and write their schemas to .sbpc/mcp.lock.json",
        description="Start each MCP server FILE declares once, list its tools, and write their schemas to\n"
        ".sbpc/mcp.lock.json beside FILE (commit it): `sbpc check` reads it and starts no server, and a run\n"
        "stops if a server's tools differ from it.",
    )
    sync.add_argument("files", nargs="+", metavar="FILE")
    sync.set_defaults(run=cmd_tools_sync, parser=sync)


def held_out_change(before, after) -> str:
    """The test split, initial vs final, as a paired difference with its 95% t interval, in words when it fell.

    Paired over the samples scored both times: a sample lost to a failed call on either side has no
    difference to count, and counting it as 0 would pull the change towards nothing.
    """
    # ~2 ms to import (measured), but the learning stage is no part of run or eval (tests/test_startup.py)
    from ..learning.stats import t_interval

    initial = {r.sample.id: r.score for r in before.results if not r.lost}
    pairs = [(initial[r.sample.id], r.score) for r in after.results if not r.lost and r.sample.id in initial]
    if not pairs:
        return f"test ({len(after.results)} samples): no sample was scored both before and after"
    mean, low, high = t_interval([final - first for first, final in pairs])
    lost = len(after.results) - len(pairs)
    text = (
        f"test ({len(pairs)} samples{f', {lost} lost to failed calls' if lost else ''}): "
        f"initial {sum(p[0] for p in pairs) / len(pairs):.3f} -> final {sum(p[1] for p in pairs) / len(pairs):.3f}; "
        f"paired change {mean:+.3f}" + (f", 95% interval [{low:+.3f}, {high:+.3f}]" if low is not None else "")
    )
    if mean < 0:
        text += (
            "\nwarning: the optimized pipeline scores LOWER than the original on the held-out test split; "
            "review the diff before you commit it"
        )
    return text


def _add_file_commands(sub) -> None:
    """The commands over pipeline files as text: check, fmt and the language server."""
    check = sub.add_parser(
        "check",
        help="check pipeline files and report every problem at once",
        description="Check pipeline files; exit 0 if fine, 1 if any has errors, 2 on usage errors.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=LANGUAGE_BY_EXAMPLE,
    )
    check.add_argument("files", nargs="+", metavar="FILE", help=".sbp, .yaml or .yml pipeline files")
    check.add_argument("--json", action="store_true", help="print the diagnostics as JSON")
    add_allow_module(check)
    check.set_defaults(run=cmd_check)

    fmt = sub.add_parser(
        "fmt",
        help="format .sbp files in the one canonical layout (--check for CI)",
        description="Rewrite .sbp files in the canonical layout: one statement per line, tokens spaced one way, runs\n"
        "of statements lined up on their = or {, block strings indented two spaces. Comments and the text of\n"
        "every string are kept exactly, and the result must compile to the same pipeline. A file that does\n"
        "not parse is reported as `sbpc check` does and never rewritten. YAML files are left as they are\n"
        "(YAML has formatters of its own). Exit 0 when all is well, 1 when a file has errors or (with\n"
        "--check or --diff) would be reformatted.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  sbpc fmt pipelines/*.sbp\n  sbpc fmt --check pipelines/*.sbp   # in CI or a pre-commit hook\n"
        "  sbpc fmt - < liar.sbp               # stdin to stdout, for editors",
    )
    fmt.add_argument(
        "files", nargs="+", metavar="FILE", help=".sbp files (- reads standard input, writes standard output)"
    )
    fmt.add_argument(
        "--check", action="store_true", help="write nothing; list the files that would change, exit 1 if any"
    )
    fmt.add_argument("--diff", action="store_true", help="write nothing; print what would change as a unified diff")
    fmt.set_defaults(run=cmd_fmt)

    lsp = sub.add_parser(
        "lsp",
        help="run the language server (LSP, on stdin/stdout) for editors",
        description="A Language Server Protocol server on standard input and output, for .sbp (and .yaml) files:\n"
        "diagnostics as you type (those of `sbpc check`), hover, go to definition, references, rename,\n"
        "completion, the outline, and formatting (`sbpc fmt`). Your editor starts it; docs/editors.md says how.\n"
        "Needs the lsp extra: pip install 'sbpc[lsp]'.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    lsp.add_argument(
        "--stdio",
        action="store_true",
        help="talk over stdin/stdout (the default and only way; for editors that pass it)",
    )
    lsp.set_defaults(run=cmd_lsp)


def _add_reading_commands(sub) -> None:
    """The commands that print what sbpc knows: explain, compile and schema."""
    explain = sub.add_parser(
        "explain",
        help="explain a diagnostic code (E022, W001, ...): what it means, an example and the fix",
        description="Print what a diagnostic code means, with an example and its fix; with no code, list them all.",
    )
    explain.add_argument("code", nargs="?", metavar="CODE", help="a code such as E022 (default: list every code)")
    explain.set_defaults(run=cmd_explain)

    comp = sub.add_parser(
        "compile",
        help="compile a pipeline and print its IR, graph or prompts",
        description="Compile a pipeline file and print it in another form.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  sbpc compile pipelines/liar.sbp --emit mermaid\n"
        "  sbpc compile pipelines/liar.sbp --emit dot | dot -Tsvg > liar.svg\n"
        "  sbpc compile pipelines/liar.sbp --emit prompts   # forward and backward prompts\n"
        "  sbpc compile pipelines/liar.sbp --emit constraints   # the grammar or JSON Schema of each reply",
    )
    comp.add_argument("file", metavar="FILE")
    comp.add_argument(
        "--emit",
        choices=["ir", "dot", "mermaid", "prompts", "constraints"],
        default="ir",
        help="ir: typed IR as JSON with source spans; dot/mermaid: the graph; prompts: every prompt rendered; "
        "constraints: what each reply's model is held to (a GBNF grammar, a JSON Schema, or nothing)",
    )
    comp.set_defaults(run=cmd_compile)

    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of the YAML form, for editors",
        description="Print the JSON Schema of YAML pipelines. Point your editor at it, e.g. with a first line\n"
        "  # yaml-language-server: $schema=pipeline.schema.json\n"
        "after `sbpc schema > pipeline.schema.json`.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    schema.set_defaults(run=cmd_schema)


def _add_run_and_eval(sub) -> None:
    """The commands that run a pipeline: run (one input) and eval (a data split)."""
    run = sub.add_parser(
        "run",
        help="run a pipeline on one input and print its output",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  sbpc run pipelines/gsm8k.sbp --input question='What is 7 times 6?' --trace",
    )
    run.add_argument("file", metavar="FILE")
    run.add_argument("--input", action="append", metavar="NAME=VALUE", help="a pipeline input (repeat for each)")
    run.add_argument("--input-json", metavar="JSON", help='all inputs as a JSON object, e.g. \'{"question": "..."}\'')
    run.add_argument(
        "--trace", action="store_true", help="print every node's prompt, reply and parsed output, or what failed"
    )
    add_model_flags(run)
    add_otel_flags(run)
    run.set_defaults(run=cmd_run)

    ev = sub.add_parser(
        "eval",
        help="score a pipeline on a data split",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  sbpc eval pipelines/liar.sbp --data liar --limit 5\n"
        "  sbpc eval pipelines/gsm8k.sbp --data gsm8k --test-size 200 --model openai/gpt-4o-mini --json\n"
        "  sbpc eval pipelines/bbh.sbp --data bbh:navigate --errors 3",
    )
    ev.add_argument("file", metavar="FILE")
    ev.add_argument(
        "--split", choices=["train", "val", "test"], default="test", help="which split to score (default test)"
    )
    ev.add_argument("--limit", type=COUNT, help="score only the first N samples of the split")
    ev.add_argument("--errors", type=COUNT, default=0, metavar="N", help="print the first N wrong samples")
    ev.add_argument(
        "--runs-dir", default=".sbpc/runs", help="where the run record goes (default .sbpc/runs; `sbpc show` reads it)"
    )
    ev.add_argument(
        "--batch",
        action="store_true",
        help="send the model calls through the provider's batch API (OpenAI's), at its batch price; waits up to 24 h",
    )
    ev.add_argument(
        "--resume",
        action="store_true",
        help="go on with the newest unfinished evaluation asked the same, scoring only the samples it had not "
        "finished (with --batch: waiting on the batches it had sent, never sending them twice)",
    )
    add_data_flags(ev, test_default=f"{EVAL_TEST_SIZE}; your own file is scored whole when no size is given")
    add_model_flags(ev)
    add_otel_flags(ev)
    ev.set_defaults(run=cmd_eval)


def _add_optimize(sub) -> None:
    """`sbpc optimize`: its method, output, data and model flags."""
    op = sub.add_parser(
        "optimize",
        help="optimize the prompts of a pipeline and write them back into its file",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Semantic backpropagation: run the pipeline on training samples, send feedback on its errors\n"
        "backwards through the graph, ask an optimizer model for better prompts, keep them only if\n"
        "they score higher on the gate split, and write the best prompts back into FILE.",
        epilog="examples:\n"
        "  sbpc optimize pipelines/liar.sbp --data liar\n"
        "  sbpc optimize pipelines/liar.sbp --data liar --model openai/gpt-4o-mini --iters 5 --test-size 200\n"
        "  sbpc optimize pipelines/liar.sbp --data liar --gradient no-sibling --dry-run   # the TextGrad-like ablation\n"
        "  sbpc optimize pipelines/liar.sbp --data liar --only verdict_task              # one prompt only\n"
        "  sbpc optimize pipelines/liar.sbp --data liar --resume                         # after an interruption\n"
        "Settings not given as flags come from the pipeline's `optimize { ... }` block.",
    )
    op.add_argument("file", metavar="FILE")
    g = op.add_argument_group("method")
    add_setting(g, "iterations", COUNT, None, "--iterations", metavar="N")
    add_setting(g, "errors_per_gradient", POSITIVE_COUNT)
    add_setting(g, "gradient", None, None, choices=SETTINGS["gradient"].words)
    add_setting(g, "update", None, None, choices=SETTINGS["update"].words)
    g.add_argument("--only", metavar="PARAM[,PARAM]", help="optimize only these prompt parameters")
    add_setting(g, "gate", None, None, choices=SETTINGS["gate"].words)
    g.add_argument("--no-gate", action="store_true", help="keep every step (same as --gate none)")
    add_setting(g, "gate_alpha", PROBABILITY, None, metavar="P")
    add_setting(g, "objective", None, None, choices=SETTINGS["objective"].words)
    add_setting(g, "margin", PROBABILITY, None, metavar="M")
    g.add_argument("--models", metavar="MODEL[,MODEL]", help="the named models a node may be moved to")
    g.add_argument(
        "--strategies",
        metavar="NAME[,NAME]",
        help=f"the kinds of change a step may make, of {', '.join(STRATEGIES)} (default: all)",
    )
    w = op.add_argument_group("output")
    w.add_argument(
        "--dry-run",
        action="store_true",
        help="run the whole method (it calls models and spends), print the diff, write nothing to FILE",
    )
    w.add_argument(
        "--plan",
        action="store_true",
        help="print the most calls, tokens and cost the run can take, then exit without calling any model",
    )
    w.add_argument("--out", metavar="FILE", help="write the optimized pipeline here instead of over FILE")
    w.add_argument("--runs-dir", default=".sbpc/runs", help="where run records go (default .sbpc/runs)")
    w.add_argument("--resume", action="store_true", help="continue the last unfinished run of FILE")
    add_data_flags(op)
    add_model_flags(op, learning=True)
    add_otel_flags(op)
    op.set_defaults(run=cmd_optimize)


def _add_serve(sub) -> None:
    """`sbpc serve`: a pipeline as an HTTP JSON service."""
    srv = sub.add_parser(
        "serve",
        help="serve a pipeline as an HTTP JSON service",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Serve FILE over HTTP: POST / with a JSON object of its inputs returns its output\n"
        "(?trace=1 adds every node's prompt and reply, when --allow-trace is given); GET /health says\n"
        "what it serves (it calls no model). Each request is logged on stderr.\n"
        "Bad input gets 400 with the reason; a failed model call 502 with its cause.",
        epilog="example:\n  sbpc serve pipelines/liar.sbp --port 8000 --model openai/gpt-4o-mini\n"
        '  curl -s localhost:8000 -d \'{"statement": "...", "job_title": "...", ...}\'',
    )
    srv.add_argument("file", metavar="FILE")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    srv.add_argument(
        "--port",
        type=number(int, 0, True, "a port from 0 to 65535", 65535),
        default=8000,
        help="port (default 8000; 0 picks a free one)",
    )
    srv.add_argument(
        "--allow-trace",
        action="store_true",
        help="answer ?trace=1 with every prompt and reply (off: anyone who reaches the port would see them)",
    )
    srv.add_argument(
        "--mcp",
        nargs="?",
        const="stdio",
        choices=("stdio", "http"),
        help="serve the pipeline as one MCP tool (its inputs the tool's schema, its title the description): on stdin "
        "and stdout (--mcp, what an IDE or a desktop assistant starts), or at /mcp beside POST / (--mcp http)",
    )
    add_model_flags(srv)
    srv.set_defaults(run=cmd_serve)


@functools.cache  # once per process: a build costs about 5 ms (argparse's gettext lookups), a parse reuses it
def build_parser() -> argparse.ArgumentParser:

    parser = argparse.ArgumentParser(
        prog="sbpc",
        description="Compile and optimize LLM pipelines with semantic backpropagation.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=LANGUAGE_BY_EXAMPLE,
    )
    parser.add_argument("--version", action="version", version=f"sbpc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    add_init(sub)
    _add_file_commands(sub)
    _add_reading_commands(sub)
    _add_run_and_eval(sub)
    _add_optimize(sub)
    _add_serve(sub)
    _add_tools(sub)
    add_run_commands(sub)
    for command in sub.choices.values():
        if command.get_default("parser") is None:
            command.set_defaults(parser=command)  # a usage error prints the usage of the subcommand given
    return parser


def main(argv: list[str] | None = None) -> int:
    anchor_data_dir()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse gives an optional positional (apply's FILE) only the words before the first option, so
    # `apply -1 --iteration 2 FILE` would leave FILE over: it is taken here, anything else refused as usual
    if extra and getattr(args, "file", "") is None and len(extra) == 1 and not extra[0].startswith("-"):
        args.file, extra = extra[0], []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for the --resume hint
    # serve has its own: SIGTERM or Ctrl-C stops taking requests and lets those in flight finish
    with contextlib.nullcontext() if args.run is cmd_serve else handled():
        stopped = True  # until the command returns: an exit leaves as quickly as Ctrl-C does
        try:
            code = _run_command(args, parser)
            stopped = code == exit_code()
            return code
        finally:
            undelivered = telemetry.finish(quick=stopped)  # the last spans, when the command exported any
            if undelivered:
                print(f"sbpc: warning: {undelivered}", file=sys.stderr)


def _run_command(args, parser: argparse.ArgumentParser) -> int:
    """The command the flags name, its errors said as the command line says them."""
    try:
        return args.run(args)
    except PipelineError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (stopping.py)
        if last := unsaid():
            print(last, file=sys.stderr)
        return exit_code()
    except BrokenPipeError:
        return 0
    except (UsageError, SettingError) as exc:  # SettingError: a method setting a flag asked for, in the flags' words
        given: argparse.ArgumentParser = getattr(args, "parser", parser)  # the subcommand that was given
        given.error(exc.cli if isinstance(exc, SettingError) else str(exc))  # with its usage
    except SbpcError as exc:  # the user's to fix (data, models, budgets, files): a message, not a traceback
        print(f"sbpc: error: {getattr(exc, 'cli', exc)}", file=sys.stderr)  # options as flags (OptionError)
        return 1
    except Exception:  # none of the above: sbpc's own fault, said as such (a run's record so far is kept)
        traceback.print_exc()
        print(
            f"sbpc: {BUG_IN_SBPC}, not in your pipeline or data: please report it with the traceback above "
            "(a run's record so far is kept: sbpc runs)",
            file=sys.stderr,
        )
        return 70  # EX_SOFTWARE
