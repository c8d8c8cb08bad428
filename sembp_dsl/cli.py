"""`sbpc`: the command line. Each subcommand is a thin layer over one stage of the compiler.

Heavy modules (litellm, the model runtime) are imported only by the commands that
call models, so `sbpc check` stays fast enough for pre-commit hooks and editors.
"""

from __future__ import annotations

import argparse
import json
import sys

from .diagnostics import PipelineError

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
  #   output types: text, number, choice(...); parse = reply (default) | tag (<output>...</output>)

  statement, party, source -> analysis    # edges: every name on the left feeds every name on the right
  statement, analysis -> verdict          # the order of edges numbers the hints of a node
  output verdict                          # the node whose answer is scored
  metric exact                            # exact | numeric

  model forward   { name = "openai/gpt-4o-mini"  temperature = 0  max_tokens = 256 }
  model backward  { name = "openai/gpt-4o" }
  optimize { iterations = 3  errors_per_gradient = 2  gradient = sibling  update = full  gate = validation }

The same pipeline can be written in YAML (.yaml/.yml); see docs/language.md.
'''


def _report(diagnostics, text) -> None:
    for d in diagnostics:
        print(d.render(text), file=sys.stderr)


def cmd_check(args) -> int:
    from .checker import check
    from .source import load

    failed = False
    results = []
    for path in args.files:
        try:
            pipeline = load(path)
            analysis, diagnostics = check(pipeline)
            text = pipeline.text
        except PipelineError as exc:
            diagnostics, text = exc.diagnostics, exc.text
        errors = [d for d in diagnostics if d.severity == "error"]
        failed = failed or bool(errors)
        results.append({"file": path, "ok": not errors, "diagnostics": [
            {"severity": d.severity, "message": d.message, "line": d.span.line if d.span else None,
             "column": d.span.column if d.span else None} for d in diagnostics]})
        if not args.json:
            _report(diagnostics, text)
            warnings = len(diagnostics) - len(errors)
            status = f"{len(errors)} error(s)" if errors else "ok"
            print(f"{path}: {status}" + (f", {warnings} warning(s)" if warnings else ""))
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if failed else 0


def cmd_compile(args) -> int:
    from .emit import EMITTERS
    from .source import compile_file

    graph = compile_file(args.file)
    _report(graph.warnings, graph.pipeline.text)
    print(EMITTERS[args.emit](graph))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sbpc",
        description="Compile and optimize LLM pipelines with semantic backpropagation.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=LANGUAGE_BY_EXAMPLE,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    check = sub.add_parser("check", help="check pipeline files and report every problem at once",
                           description="Check pipeline files; exit 0 if fine, 1 if any has errors, 2 on usage errors.",
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=LANGUAGE_BY_EXAMPLE)
    check.add_argument("files", nargs="+", metavar="FILE", help=".sbp, .yaml or .yml pipeline files")
    check.add_argument("--json", action="store_true", help="print the diagnostics as JSON")
    check.set_defaults(run=cmd_check)

    comp = sub.add_parser("compile", help="compile a pipeline and print its IR, graph or prompts",
                          description="Compile a pipeline file and print it in another form.",
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog="examples:\n  sbpc compile pipelines/liar.sbp --emit mermaid\n"
                                 "  sbpc compile pipelines/liar.sbp --emit dot | dot -Tsvg > liar.svg\n"
                                 "  sbpc compile pipelines/liar.sbp --emit prompts   # forward and backward prompts")
    comp.add_argument("file", metavar="FILE")
    comp.add_argument("--emit", choices=["ir", "dot", "mermaid", "prompts"], default="ir",
                      help="ir: typed IR as JSON with source spans; dot/mermaid: the graph; prompts: every prompt rendered")
    comp.set_defaults(run=cmd_compile)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except PipelineError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
