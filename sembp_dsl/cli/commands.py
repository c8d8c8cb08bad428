"""`sbpc`: the command line. Each subcommand is a thin layer over one stage of the compiler.

This module holds the entry point, the command line's grammar and the commands over pipeline files; the
commands that call models are in calling.py, those over run records in runs.py, and what they share in flags.py.
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
from pathlib import Path

from .. import __version__, telemetry
from ..errors import BUG_IN_SBPC, SbpcError
from ..files import atomic_write, read_current
from ..language.blocks.method import SETTINGS, STRATEGIES, SettingError
from ..language.codes import CODES, lookup
from ..language.diagnostics import PipelineError, as_json, did_you_mean
from ..runtime import datasets
from ..runtime.datasets import EVAL_TEST_SIZE, anchor_data_dir
from .calling import cmd_eval, cmd_optimize, cmd_run, cmd_serve
from .flags import (
    COUNT,
    POSITIVE_COUNT,
    PROBABILITY,
    UsageError,
    add_allow_module,
    add_data_flags,
    add_model_flags,
    add_otel_flags,
    add_setting,
    number,
    report_diagnostics,
)
from .init import add_init
from .routers import router_problem
from .runs import add_run_commands
from .stopping import exit_code, handled, unsaid

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
            report_diagnostics(diagnostics, text)
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
            report_diagnostics(exc.diagnostics, exc.text)
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
    report_diagnostics(graph.warnings, graph.pipeline.text)
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
