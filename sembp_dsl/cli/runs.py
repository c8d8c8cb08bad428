"""`sbpc runs`, `show`, `apply`, `report` and `compare`: the commands over run records, a thin layer over runs.py,
report.py and compare.py. commands.py adds them to its parser with add_run_commands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..files import atomic_write
from ..language.diagnostics import json_text, visible
from .flags import (
    COUNT,
    POSITIVE_COUNT,
    PROBABILITY,
    Phases,
    UsageError,
    add_data_flags,
    add_model_flags,
    add_setting,
    load_pipeline,
    method_settings,
    parse_pairs,
    print_ledger,
    progress_bar,
)
from .stopping import say, word


def _runs_command(work):
    """A run-record command: a run that is not there, or does not fit, is a message and exit 1."""

    def command(args) -> int:
        # records.runs costs about 1.4 s to import (the parser, for apply): only the commands over records pay it
        from ..records.runs import RunsError

        try:
            return work(args)
        except RunsError as exc:  # it may quote a record: a key from a hostile file, say
            print(visible(f"sbpc: error: {exc}"), file=sys.stderr)
            return 1

    return command


@_runs_command
def cmd_runs(args) -> int:
    # records.runs costs about 1.4 s to import (the parser, for apply): only the commands over records pay it
    from ..records.runs import find_runs, render_list

    runs, unreadable = find_runs(args.runs_dir)
    if not args.json:
        print(render_list(runs, unreadable, args.runs_dir))
        return 0
    print(json_text([r.summary() for r in runs]))
    for reason in unreadable:  # not in the list of runs, which scripts read, but not kept from the user either
        print(visible(f"sbpc: warning: unreadable {reason}"), file=sys.stderr)
    return 0


@_runs_command
def cmd_show(args) -> int:
    # records.runs costs about 1.4 s to import (the parser, for apply): only the commands over records pay it
    from ..records.runs import render_show, resolve

    run = resolve(args.run_spec, args.runs_dir)
    print(json_text(run.raw) if args.json else render_show(run, args.wrong))
    return 0


@_runs_command
def cmd_apply(args) -> int:
    # records.runs costs about 1.4 s to import (the parser, for apply): only the commands over records pay it
    from ..records.runs import apply, resolve

    target, diff, notice = apply(resolve(args.run_spec, args.runs_dir), args.iteration, args.file)
    if notice:
        print(notice, file=sys.stderr)
    print(f"{diff}written to {target}" if diff else f"{target} already holds these prompts; nothing written")
    return 0


def _check_page(path: str, flag: str) -> None:
    """Say before any work that a page cannot be written there: no such folder, or a folder itself."""
    if Path(path).is_dir():
        raise UsageError(f"{flag} {path} is a folder; give a file name, e.g. {Path(path) / 'report.html'}")
    if not Path(path).resolve().parent.is_dir():
        raise UsageError(f"{flag}: no folder {Path(path).parent} to write {path} in")


def _write_page(path: str, html: str) -> None:
    # records.runs costs about 1.4 s to import (the parser, for apply): only the commands over records pay it
    from ..records.runs import RunsError

    try:
        atomic_write(Path(path), html)
    except OSError as exc:
        raise RunsError(f"cannot write {path}: {exc.strerror or exc}") from None


@_runs_command
def cmd_report(args) -> int:
    # compare and report cost over 1 s to import (the records and the parser): only `sbpc report` pays them
    from ..compare import compare_evals
    from ..records.report import render, render_eval
    from ..records.runs import RunsError, resolve

    _check_page(args.out, "--out")
    runs = [resolve(spec, args.runs_dir) for spec in args.run_specs]
    evals = [run for run in runs if run.kind == "eval"]
    if not evals:
        _write_page(args.out, render(runs))
    elif len(runs) == 1:
        _write_page(args.out, render_eval(runs[0]))
    elif len(runs) == 2 and len(evals) == 2:
        _write_page(args.out, compare_evals(*runs))
    else:
        raise RunsError(
            "report takes optimize runs, one evaluation, or two evaluations to compare sample by sample; "
            f"not {len(evals)} evaluation(s) among {len(runs)} runs"
        )
    print(f"wrote {args.out} ({len(runs)} run(s)); it opens offline in any browser")
    return 0


@_runs_command
def cmd_compare(args) -> int:
    # compare, the api and the model runtime cost about 2 s to import: only `sbpc compare` pays them
    from .. import compare

    if args.report:
        _check_page(args.report, "--report")
    done, rows, seeds = [], [], []  # optimize runs finished, for an interrupt to say
    with load_pipeline(args) as pipeline:
        try:
            rows = compare.make_rows(compare.parse_vary(args.vary or [], pipeline.graph), args.grid)
            experiment = compare.Experiment(
                pipeline,
                args.examples,
                method_settings(args),
                parse_pairs(args.map, "--map"),
                args.metric,
            )
            first = args.seed if args.seed is not None else pipeline.graph.optimize.seed
            seeds = [first + i for i in range(args.seeds)]

            phase = Phases(args.json, indent="  ")  # under the compare bar, each phase of each optimize
            with progress_bar(len(rows) * len(seeds), "compare", args.json, unit="run") as bar:

                def finished(what: str) -> None:
                    done.append(what)
                    bar.set_postfix_str(what)
                    bar.update()

                results = compare.compare(experiment, rows, seeds, args.runs_dir, finished, phase)
        except compare.CompareError as exc:
            print(f"sbpc: error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            kept = (
                f"their run records are in {args.runs_dir}"
                if args.runs_dir
                else "no run record was kept (--runs-dir keeps them)"
            )
            say(
                f"\n{word()} after {len(done)} of {len(rows) * len(seeds)} optimize runs: no table, since rows "
                f"must share seeds to be compared; {kept}."
                f"{'' if args.no_cache else ' Run it again: the calls already made come from the cache.'}"
            )
        print(
            json.dumps(
                {
                    "file": args.file,
                    "data": args.data,
                    "seeds": seeds,
                    "rows": compare.to_json(results),
                    "ledger": pipeline.ledger.to_json(),
                },
                indent=2,
            )
            if args.json
            else compare.markdown(results, experiment)
        )
        if args.report:
            _write_page(args.report, compare.html(results, experiment))
            print(f"wrote {args.report}", file=sys.stderr)
        print_ledger(pipeline, args)
    return 0


RUN_HELP = (
    "a run: its folder, its number in `sbpc runs` (-1: the newest), or the start of its name (e.g. 20260101-1200)"
)


def _add_runs_dir(parser) -> None:
    parser.add_argument("--runs-dir", default=".sbpc/runs", help="where run records are (default .sbpc/runs)")


def add_run_commands(sub) -> None:
    """Commands over run records: list, show, apply, report, compare."""
    _add_reading_commands(sub)
    _add_report(sub)
    _add_compare(sub)


def _add_reading_commands(sub) -> None:
    """runs, show and apply: a record listed, read, or its prompts written back."""
    ls = sub.add_parser(
        "runs",
        help="list the optimize runs and evaluations on record, one line each",
        description="Every run in the runs folder, optimize or eval: when, file, data, the settings that differ "
        "from the defaults, initial -> best gate score and test before -> after (an evaluation: its "
        "score), calls, cost, and whether it finished.",
    )
    _add_runs_dir(ls)
    ls.add_argument("--json", action="store_true", help="print the runs as JSON")
    ls.set_defaults(run=cmd_runs)

    show = sub.add_parser(
        "show",
        help="show one run iteration by iteration (an evaluation sample by sample)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A run iteration by iteration: scores, each candidate prompt with its fate and why, "
        "a word diff against the prompt it would replace ([-old-]{+new+}), and the "
        "gradients behind it. An evaluation sample by sample, wrong ones first: inputs, "
        "expected and given answer, and each node's reply.",
        epilog="examples:\n  sbpc show -1                 # the newest run\n"
        "  sbpc show .sbpc/runs/20260101-120000-liar",
    )
    show.add_argument("run_spec", metavar="RUN", help=RUN_HELP)
    _add_runs_dir(show)
    show.add_argument("--json", action="store_true", help="print the run record as it is")
    show.add_argument("--wrong", action="store_true", help="an evaluation: show only its wrong and lost samples")
    show.set_defaults(run=cmd_show)

    ap = sub.add_parser(
        "apply",
        help="write the prompts of one iteration of a run into a pipeline file",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write the prompts a run had after iteration K into FILE, with optimize's own "
        "write-back: only the prompt literals change, checked by parsing the file again. "
        "By default: the prompts the run ended with, into the file it optimized.",
        epilog="examples:\n  sbpc apply -1 && git diff                 # the newest run's result, into its file\n"
        "  sbpc apply -1 --iteration 2 pipelines/liar.sbp && git diff pipelines/liar.sbp",
    )
    ap.add_argument("run_spec", metavar="RUN", help=RUN_HELP)
    ap.add_argument(
        "--iteration",
        type=COUNT,
        metavar="K",
        help="the iteration whose prompts to write (0: the run's initial prompts; default: its last)",
    )
    ap.add_argument("file", metavar="FILE", nargs="?", help="the pipeline file to write into (default: the run's)")
    _add_runs_dir(ap)
    ap.set_defaults(run=cmd_apply)


def _add_report(sub) -> None:
    """`sbpc report`: one HTML page about one run, or comparing several."""
    rep = sub.add_parser(
        "report",
        help="write one HTML page about one run, or comparing several",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="One self-contained HTML file that opens offline: train, gate and test scores and "
        "calls and cost per iteration (plots by matplotlib: pip install 'sbpc[report]'), "
        "every candidate's diff and fate, the gradients per node, and the final diff of "
        "the source file. Several runs give one page that compares them. One evaluation "
        "gives a table of its samples (wrong ones first), each expandable to every node's prompt and reply; "
        "two evaluations of the same data are compared sample by sample: which flipped, which way, and the "
        "paired difference with its 95% t interval. The page runs no script and loads nothing.",
        epilog="examples:\n  sbpc report -1 && xdg-open report.html\n  sbpc report 3 4 5 --out ablation.html\n"
        "  sbpc report 6 7 --out prompts.html     # two evaluations, sample by sample",
    )
    rep.add_argument("run_specs", nargs="+", metavar="RUN", help=RUN_HELP)
    rep.add_argument(
        "--out", default="report.html", metavar="FILE", help="where to write the page (default report.html)"
    )
    _add_runs_dir(rep)
    rep.set_defaults(run=cmd_report)


def _add_compare(sub) -> None:
    """`sbpc compare`: one optimize per setting and seed, and a table of their held-out accuracy."""
    cmp = sub.add_parser(
        "compare",
        help="optimize under several settings and seeds, and compare held-out accuracy",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one optimize per setting and seed (never writing back, all sharing one response cache) and\n"
        "print a table: per row, held-out test accuracy as the mean and 95% t interval over seeds, the\n"
        "difference from the first row paired by seed with its interval, and calls, tokens, cost and\n"
        "wall time. Rows change one --vary setting at a time from the base (the first value of each\n"
        "--vary), as the paper's liar.sh does; --grid runs every combination instead.",
        epilog="examples:\n"
        "  sbpc compare pipelines/liar.sbp --data liar --vary gradient=sibling,no-sibling,none --seeds 3 --test-size 100\n"
        "  sbpc compare pipelines/liar_paper.sbp --data liar --vary gradient=sibling,none,no-sibling \\\n"
        "      --vary only=each --vary gate=train,none --seeds 3 --test-size 200 --report liar.html   # liar.sh\n"
        "--vary takes gradient, only (each | all | PARAM[+PARAM]), gate, update, iterations,\n"
        "errors_per_gradient, train_size, val_size, gate_alpha.",
    )
    cmp.add_argument("file", metavar="FILE")
    g = cmp.add_argument_group("experiment")
    g.add_argument(
        "--vary",
        action="append",
        metavar="SETTING=V1,V2",
        help="a setting and its values; the first is the base (repeat for several settings)",
    )
    g.add_argument("--grid", action="store_true", help="every combination of the --vary values, not one at a time")
    g.add_argument("--seeds", type=POSITIVE_COUNT, default=3, help="seeds per row: --seed, --seed + 1, ... (default 3)")
    add_setting(g, "iterations", COUNT, "default: the file's", "--iterations", metavar="N")
    add_setting(g, "errors_per_gradient", POSITIVE_COUNT, "default: the file's")
    add_setting(g, "gate_alpha", PROBABILITY, "default: the file's", metavar="P")
    w = cmp.add_argument_group("output")
    w.add_argument("--report", metavar="FILE", help="also write an HTML page with the table and plots")
    w.add_argument("--runs-dir", help="keep each optimize's run record here (default: none kept)")
    add_data_flags(cmp)
    add_model_flags(cmp, learning=True)
    cmp.set_defaults(run=cmd_compare)
