"""The commands that call models: `run`, `eval`, `optimize` and `serve`, and what they print (a trace, an
evaluation's report, an optimize run's summary). Heavy modules (litellm, the model runtime) are imported inside
them, so the commands that call no model never pay for them."""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import asdict, replace

from ..language import kinds
from ..language.blocks.method import SETTINGS
from ..language.diagnostics import for_terminal, json_text
from ..language.nodes.trace import NodeTrace
from .flags import (
    Phases,
    UsageError,
    load_pipeline,
    method_settings,
    parse_pairs,
    print_ledger,
    progress_bar,
    report_diagnostics,
)
from .stopping import say, word

SHOWN_ITEMS = 100  # a map's items `run --trace` prints in full; `run --json` has them all


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
    report_diagnostics(pipeline.graph.warnings, pipeline.graph.pipeline.text)
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
