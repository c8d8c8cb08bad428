"""Run records -> one self-contained HTML page: plots, every candidate with its diff and fate, gradients, the final diff;
for an evaluation, its samples with each node's prompt and reply.

The page opens offline and trusts nothing it shows: prompts, replies and sample ids
come from strangers, so every string is escaped, and a Content-Security-Policy
forbids scripts, remote loads and any style but the page's own (pinned by its hash).
Plots are drawn by matplotlib as SVG and embedded as data: images, which cannot run
code or load anything even if a label held markup.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
from bisect import bisect_right
from collections.abc import Callable, Sequence

from ..language import kinds
from ..language.diagnostics import visible
from ..language.nodes.trace import answer_words, extra_of
from .record import Iteration
from .runs import (
    Run,
    RunsError,
    demos_words,
    eval_score,
    final_diff,
    fmt,
    gate_words,
    is_demos,
    is_right,
    prompt_changes,
    sample_score,
    sample_verdict,
    spend,
    train_words,
    verdict,
    word_diff,
)


def escape(text: str) -> str:
    """Markup-safe and visible: bidi overrides and control characters in replies are written out as the
    terminal output writes them (\\u202e), so a reply cannot reorder or hide what the page shows."""
    return html.escape(visible(text))


CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ddd; margin-top: 2em; }
h3 { font-size: 1.05em; margin-bottom: .3em; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre, .prompt { white-space: pre-wrap; word-break: break-word; font: 12.5px/1.4 ui-monospace, monospace;
  background: #f8f8f8; padding: .5em; border-radius: 4px; margin: .3em 0; }
del { background: #fdd; color: #900; } ins { background: #dfd; color: #060; text-decoration: none; }
.taken { color: #060; font-weight: 600; } .rejected { color: #900; font-weight: 600; }
.muted { color: #666; } img.plot { max-width: 100%; height: auto; display: block; margin: .5em 0; }
details { margin: .4em 0; } summary { cursor: pointer; }
pre .add { color: #060; } pre .del { color: #900; } pre .hunk { color: #559; }
#only-wrong:checked ~ * .right { display: none; }
#only-changed:checked ~ * .same { display: none; }
"""

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def page(title: str, body: str) -> str:
    """A whole page: the strict policy, the one style block it allows, and `body` (already escaped)."""
    digest = base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
    policy = f"default-src 'none'; img-src data:; style-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        f'<meta name="referrer" content="no-referrer">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        f"<h1>{escape(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


def figure(draw: Callable, size: tuple[float, float] = (9, 3.6), alt: str = "plot") -> str:
    """An <img> holding the SVG matplotlib draws: `draw(fig)` fills a fresh figure (no pyplot, no GUI)."""
    try:  # an optional extra, and ~0.4 s to import (measured): only a report with plots pays it
        from matplotlib import rc_context
        from matplotlib.figure import Figure
    except ImportError:
        raise RunsError(
            "the report draws its plots with matplotlib, which is not installed: pip install 'sbpc[report]'"
        )

    # labels are data: no $...$ mathtext; text stays text; the same input gives the same bytes
    with rc_context({"text.parse_math": False, "svg.fonttype": "none", "svg.hashsalt": "sbpc"}):
        fig = Figure(figsize=size, layout="constrained")
        draw(fig)
        out = io.BytesIO()
        fig.savefig(out, format="svg", metadata={"Date": None})
    data = base64.b64encode(out.getvalue()).decode()
    return f'<img class="plot" alt="{escape(alt)}" src="data:image/svg+xml;base64,{data}">'


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An HTML table; numbers are right-aligned, everything is escaped."""

    def cell(value) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return f'<td class="num">{escape(str(value))}</td>'
        return f"<td>{escape(str(value))}</td>"

    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "\n".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table>\n<tr>{head}</tr>\n{body}\n</table>"


def score_changes_html(pairs: Sequence[tuple[dict, dict]], most: int | None = None) -> str:
    """The samples whose score moved from A to B, by how much, largest first (the first `most`): with partial credit
    most moves are no flip between right and wrong, and only this shows them."""
    moved = sorted(
        ((x, y) for x, y in pairs if abs(y["score"] - x["score"]) > 1e-12),
        key=lambda pair: (-abs(pair[1]["score"] - pair[0]["score"]), pair[0]["id"]),
    )
    rows = [[x["id"], fmt(x["score"]), fmt(y["score"]), f"{y['score'] - x['score']:+.3f}"] for x, y in moved[:most]]
    header = f"<h2>scores changed ({len(moved)})</h2>"
    if len(rows) < len(moved):
        header += f"<p>the {len(rows)} largest; {len(moved) - len(rows)} more left out</p>"
    return header + table(["sample", "A's score", "B's score", "B - A"], rows) if moved else header


def output_changes_html(pairs: Sequence[tuple[dict, dict]], changed: int, of: int) -> str:
    """Samples both scored, A's output beside B's, with a filter (checked: only those whose output changed):
    scores can stay equal while outputs change (partial credit, a judge), and only this shows them. `pairs` are
    those the page holds (those whose output changed first), of `changed` changed among `of`. The filter is a
    checkbox the page's own style reads, as the page allows no script."""
    head = "".join(f"<th>{escape(h)}</th>" for h in ("sample", "expected", "A's output", "B's output", "A", "B"))
    rows = "\n".join(
        f'<tr class="{"changed" if x.get("output") != y.get("output") else "same"}">'
        + "".join(f"<td>{escape(str(v))}</td>" for v in (x["id"], x.get("expected"), x.get("output"), y.get("output")))
        + f'<td class="num">{fmt(x["score"])}</td><td class="num">{fmt(y["score"])}</td></tr>'
        for x, y in pairs
    )
    left = f"<p>{of - len(pairs)} samples left out (the first {len(pairs)}, changed ones first, are listed)</p>"
    return (
        f"<h2>outputs changed ({changed} of {of})</h2>"
        + (left if len(pairs) < of else "")
        + '<div class="samples"><input type="checkbox" id="only-changed" checked>'
        '<label for="only-changed"> only samples whose output changed</label>'
        f"<div><table>\n<tr>{head}</tr>\n{rows}\n</table></div></div>"
    )


def diff_html(old: str, new: str) -> str:
    """A word diff as <del>/<ins>, escaped."""
    tags = {"=": "{}", "-": "<del>{}</del>", "+": "<ins>{}</ins>"}
    return f'<div class="prompt">{"".join(tags[op].format(escape(text)) for op, text in word_diff(old, new))}</div>'


def unified_html(diff: str) -> str:
    """A unified diff in a <pre>, lines coloured by kind, escaped."""

    def line(text: str) -> str:
        kind = (
            "add"
            if text.startswith("+")
            else "del"
            if text.startswith("-")
            else "hunk"
            if text.startswith("@@")
            else ""
        )
        return f'<span class="{kind}">{escape(text)}</span>' if kind else escape(text)

    return "<pre>" + "".join(line(t) for t in diff.splitlines(True)) + "</pre>"


# --- plots ----------------------------------------------------------------------------------------


def score_series(run: Run) -> dict[str, list[tuple[int, float]]]:
    """Points (x, score) where x is the number of finished iterations whose prompts are scored (0: the initial).
    A training score over part of the split (the error draw stopped at its errors) is left out: no point of a line
    is over other samples than the rest."""
    its, size = run.iterations, run.record.settings.method.train_size
    train = [
        (it.index - 1, it.train_score)
        for it in its
        if it.train_score is not None and (it.train_samples is None or it.train_samples >= size)
    ]
    test = run.record.test
    tested = [(0, test.initial), (len(its), test.final)] if test else []
    return {"train": train, "gate": run.record.gate_scores(), "test": [(x, y) for x, y in tested if y is not None]}


def plot_scores(runs: Sequence[Run]) -> str:
    def draw(fig):
        ax = fig.subplots()
        for n, run in enumerate(runs):
            color, label = PALETTE[n % len(PALETTE)], (f"{run.name}: " if len(runs) > 1 else "")
            shift = 0.06 * (n - (len(runs) - 1) / 2)  # runs side by side, so equal scores do not hide a line
            series = {key: [(x + shift, y) for x, y in points] for key, points in score_series(run).items()}
            for key, style in (
                ("train", dict(linestyle=":", marker=".")),
                ("gate", dict(linestyle="-", marker="o")),
                ("test", dict(linestyle="none", marker="s", markersize=8)),
            ):
                if series[key]:
                    xs, ys = zip(*series[key])
                    ax.plot(xs, ys, color=color, label=f"{label}{key}", **style)
        ax.set(
            xlabel="iterations done (0: initial prompts)",
            ylabel="accuracy",
            ylim=(-0.05, 1.05),
            title="scores: train (before each step), gate (prompts kept), test (initial and final)",
        )
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a run with no score yet draws nothing to name
            ax.legend(fontsize="small", loc="best")

    return figure(draw, alt="train, gate and test scores per iteration")


def plot_spend(runs: Sequence[Run]) -> str:
    def draw(fig):
        calls_ax, cost_ax = fig.subplots(1, 2)
        for n, run in enumerate(runs):
            color = PALETTE[n % len(PALETTE)]
            xs = [it.index for it in run.iterations]
            label = run.name if len(runs) > 1 else None
            calls_ax.plot(xs, [it.calls for it in run.iterations], marker="o", color=color, label=label)
            cost_ax.plot(xs, [it.cost for it in run.iterations], marker="o", color=color, label=label)
        if not any(it.cost for run in runs for it in run.iterations):
            cost_ax.text(
                0.5,
                0.5,
                "no cost: every call was to a model\nwithout a price (local, or unknown to litellm)",
                transform=cost_ax.transAxes,
                ha="center",
                va="center",
                color="#666",
            )
        calls_ax.set(xlabel="iteration", ylabel="calls", title="model calls per iteration")
        cost_ax.set(xlabel="iteration", ylabel="dollars", title="cost per iteration")
        for ax in (calls_ax, cost_ax):
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        if len(runs) > 1:
            calls_ax.legend(fontsize="small")

    return figure(draw, alt="calls and cost per iteration")


SHOWN_DEPLOYMENTS = len(PALETTE)  # the most deployments the concurrency plot draws (most refused first)
SHOWN_POINTS = 2000  # the most window changes (and refusals) it draws per deployment: a plot's size is bounded
LONGEST = 1e7  # seconds (115 days): a time beyond, or a window above, is no run's and is left out of the plot
SHOWN_LABEL = 60  # the most characters of a deployment's name the legend shows


def plausible(value: object, top: float) -> bool:
    """A number a plot can place: finite, from 0 to `top` (a record's NaN, -1 or 1e308 is none)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= top


def windows_of(series: object) -> list[tuple[float, int]]:
    """A deployment's window changes as a record holds them, the unplottable left out, thinned to SHOWN_POINTS
    (the smallest and the largest window of each stretch kept, so no drop to 1 is thinned away)."""
    points = [
        (float(p[0]), int(p[1]))
        for p in (series if isinstance(series, list) else [])
        if isinstance(p, list) and len(p) >= 2 and plausible(p[0], LONGEST) and plausible(p[1], LONGEST)
    ]
    if len(points) <= SHOWN_POINTS:
        return points
    stretch = -(-len(points) // (SHOWN_POINTS // 2))
    thinned = []
    for start in range(0, len(points), stretch):
        part = points[start : start + stretch]
        low, high = min(part, key=lambda p: p[1]), max(part, key=lambda p: p[1])
        thinned += sorted({low, high})
    return thinned


def refusals_of(series: object) -> list[float]:
    """A deployment's refusal times as a record holds them, the unplottable left out, at most SHOWN_POINTS."""
    times = [float(t) for t in (series if isinstance(series, list) else []) if plausible(t, LONGEST)]
    return times[:: -(-len(times) // SHOWN_POINTS)] if len(times) > SHOWN_POINTS else times


def plot_concurrency(ledger: dict | None) -> str:
    """Each deployment's adaptive window (calls in flight it allowed) over the run, its refusals for load (429,
    503, 529) marked where they came; nothing when the run had no window (a fixed --concurrency) and no refusal.
    A record is a stranger's: its names are shown escaped and cut short, at most SHOWN_DEPLOYMENTS deployments
    (the most refused) and SHOWN_POINTS points each are drawn, and the plot says what it left out."""
    windows, refusals = (ledger or {}).get("concurrency") or {}, (ledger or {}).get("refusals") or {}
    if not windows and not refusals:
        return ""
    refused = sum(len(r) for r in refusals.values() if isinstance(r, list))
    names = sorted({*windows, *refusals}, key=lambda name: (-len(refusals.get(name) or ()), name))
    drawn, left = names[:SHOWN_DEPLOYMENTS], len(names) - SHOWN_DEPLOYMENTS

    def draw(fig):
        ax = fig.subplots()
        for n, name in enumerate(drawn):
            color, sizes = PALETTE[n % len(PALETTE)], windows_of(windows.get(name))
            label = visible(name if len(name) <= SHOWN_LABEL else name[: SHOWN_LABEL - 3] + "...")
            if sizes:
                times, widths = [t for t, _ in sizes], [w for _, w in sizes]
                ax.step(times, widths, where="post", color=color, label=label)
            marks = refusals_of(refusals.get(name))
            # each mark at the window then (the first one's before any change, 1 with no window at all)
            at = [sizes[max(bisect_right(sizes, (t, LONGEST)) - 1, 0)][1] if sizes else 1 for t in marks]
            ax.plot(marks, at, marker="x", color="#d62728", markersize=8, linestyle="none")
        if refused:
            ax.plot([], [], marker="x", color="#d62728", linestyle="none", label=f"refused for load x{refused}")
        if left > 0:
            ax.plot([], [], linestyle="none", label=f"{left} more deployment(s) not drawn")
        ax.set(xlabel="seconds", ylabel="calls in flight allowed", title="concurrency over time")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")

    return figure(draw, size=(9, 3), alt=f"concurrency over time per deployment, {refused} refusals for load marked")


def plot_intervals(
    labels: Sequence[str],
    means: Sequence[float],
    lows: Sequence[float],
    highs: Sequence[float],
    ylabel: str,
    title: str,
) -> str:
    """One point per row with its interval as an error bar (compare's plot)."""

    def draw(fig):
        ax = fig.subplots()
        xs = range(len(labels))
        ax.errorbar(
            xs,
            means,
            yerr=[[m - lo for m, lo in zip(means, lows)], [hi - m for m, hi in zip(means, highs)]],
            fmt="o",
            capsize=6,
            color=PALETTE[0],
        )
        ax.set_xticks(list(xs), [str(label) for label in labels], rotation=20, ha="right", fontsize="small")
        ax.set(ylabel=ylabel, title=title)
        ax.grid(alpha=0.3, axis="y")

    return figure(draw, size=(9, 4), alt=title)


# --- the run pages ---------------------------------------------------------------------------------


def summary_table(runs: Sequence[Run]) -> str:
    rows = [
        [
            run.name,
            run.settings.file,
            run.settings.data,
            run.settings_words(),
            *run.scores_words(),
            len(run.iterations),
            run.record.calls,
            f"{run.record.tokens} ({run.record.cached_tokens} cached{run.record.saving_words()})"
            if run.record.cached_tokens
            else run.record.tokens,
            f"{run.record.cost:.4f}",
            run.status,
        ]
        for run in runs
    ]
    return table(
        [
            "run",
            "file",
            "data",
            "settings",
            "gate initial -> best",
            "test initial -> final",
            "iterations",
            "calls",
            "tokens",
            "cost $",
            "status",
        ],
        rows,
    )


def iteration_html(run: Run, it: Iteration) -> str:
    k = it.index
    parts = [
        f"<h3>iteration {escape(str(k))}: {escape(verdict(it))}</h3>",
        f"<p>{escape(train_words(it, run.record.settings.method.train_size))}; {escape(gate_words(it) or 'no gate')}; "
        f"{escape(spend(it))}</p>",
    ]
    if it.lost:
        parts.append(f"<p>{it.lost} training sample(s) lost to failed calls</p>")
    before = run.prompts_at(k - 1)
    for c in it.candidates:
        fate = c.fate
        kind = "taken" if fate == "taken" else "rejected"
        by = f" [{escape(c.strategy)}]" if c.strategy else ""  # the strategy that proposed it
        parts.append(f'<p>candidate for <b>{escape(c.param)}</b>: <span class="{kind}">{escape(fate)}</span>{by}</p>')
        if is_demos(c):
            words = demos_words(c)
            parts += [f"<p>{escape(words[0])}</p><pre>{escape(words[1])}</pre>"] if words else []
            continue
        if c.new is not None:
            parts.append(diff_html(before.get(c.param, ""), c.new))
        parts.append(f"<details><summary>the optimizer's reply</summary><pre>{escape(c.reply or '')}</pre></details>")
    for g in it.gradients:
        rows = [[node, text] for node, text in g.nodes.items()]
        parts.append(
            f"<details><summary>gradients from sample {escape(g.sample)} (expected "
            f"{escape(repr(g.expected))}, got {escape(repr(g.output))})</summary>"
            f"{table(['node', 'gradient'], rows)}</details>"
        )
    return "\n".join(parts)


def progress_table(run: Run) -> str:
    """Accuracy and cost iteration by iteration: the gate score and the cost per 1,000 samples of the pipeline the
    run kept after each (measured on the gate samples its step's gate ran: the header's initial -> kept compares
    two on the same samples), and what the iteration's calls cost."""
    record = run.record
    scores, costs = dict(record.gate_scores()), dict(record.kept_per_1000())
    money = lambda value: "-" if value is None else f"${value:.4f}"  # noqa: E731
    rows: list[list[object]] = [["initial", "", fmt(scores.get(0)), money(costs.get(0)), "", ""]]
    rows += [
        [it.index, verdict(it), fmt(scores.get(it.index)), money(costs.get(it.index)), it.calls, f"${it.cost:.4f}"]
        for it in run.iterations
    ]
    header = [
        "iteration",
        "step",
        "gate score kept",
        "kept pipeline per 1,000 samples (on its gate's)",
        "calls",
        "spent",
    ]
    return "<h3>accuracy and cost per iteration</h3>" + table(header, rows)


def run_html(run: Run) -> str:
    s = run.settings
    parts = [
        f"<h2>{escape(run.name)}</h2>",
        f"<p>{escape(s.file)} on {escape(str(s.data))}, started {escape(run.started)}; <b>{escape(run.status)}</b></p>",
        "<details><summary>settings</summary>"
        + table(
            ["setting", "value"],
            [[k, v if isinstance(v, (str, int, float)) else json.dumps(v)] for k, v in s.recorded().items()],
        )
        + "</details>",
    ]
    if run.record.test:
        parts.append(f"<p>test ({run.record.test.samples} samples): {escape(run.scores_words()[1])}</p>")
    if per_1000 := run.per_1000_words():
        parts.append(f"<p>the pipeline per 1,000 samples: {escape(per_1000)}</p>")
    if run.iterations:
        parts.append(progress_table(run))
    parts.append(plot_concurrency(run.record.ledger))
    parts += [iteration_html(run, it) for it in run.iterations]
    if run.not_run():
        parts.append(f'<p class="muted">{run.not_run()} iteration(s) not run.</p>')
    parts.append("<h3>the source file, initial -> final prompts</h3>")
    diff = final_diff(run)
    if diff:
        parts.append(unified_html(diff))
    elif diff is None:
        changes = prompt_changes(run)
        parts.append('<p class="muted">the source file is gone or no longer fits; the changed prompts:</p>')
        parts += [f"<p><b>{escape(name)}</b></p>{diff_html(old, new)}" for name, (old, new) in changes.items()]
        if not changes:
            parts.append("<p>no prompt changed</p>")
    else:
        parts.append("<p>no prompt changed</p>")
    return "\n".join(parts)


def render(runs: Sequence[Run]) -> str:
    """One run's page, or a page comparing several: a summary table, shared plots, then each run in full."""
    title = f"sbpc run {runs[0].name}" if len(runs) == 1 else f"sbpc: {len(runs)} runs compared"
    body = [summary_table(runs), plot_scores(runs), plot_spend(runs)]
    body += [run_html(run) for run in runs]
    return page(title, "\n".join(body))


# --- evaluations ----------------------------------------------------------------------------------


def sample_html(sample: dict, label: str = "") -> str:
    """One sample as a <details>: its inputs, expected and given answer, then each node's prompt and reply."""
    what = sample_verdict(sample)
    head = f"{label}{sample.get('id')}: {what}" + ("" if sample.get("lost") else f", score {fmt(sample.get('score'))}")
    parts = [
        f'<details class="{"right" if what == "right" else "wrong"}"><summary>{escape(head)}</summary>',
        table(["input", "value"], [[k, v] for k, v in sample.get("inputs", {}).items()]),
        f"<p>expected <b>{escape(repr(sample.get('expected')))}</b>, got <b>{escape(answer_words(sample.get('output')))}</b>"
        + (f" ({escape(str(sample['error']))})" if sample.get("error") else "")
        + "</p>",
        *([f"<p>why: {escape(str(sample['reason']))}</p>"] if sample.get("reason") else []),
    ]
    calls = [*sample.get("nodes", {}).items(), *([("the judge", sample["judge"])] if sample.get("judge") else [])]
    parts += [part for node, trace in calls for part in (f"<h3>{escape(node)}</h3>", node_html(trace))]
    return "\n".join([*parts, "</details>"])


def node_html(trace: dict) -> str:
    """A recorded node: its prompt, reply and what its kind says of its own data, then each mapped item's the same
    way, folded; a node its sample's branch skipped, said so."""
    if trace.get("taken") is False:
        return '<p class="muted">not taken: a branch this sample did not take</p>'
    parts = [
        f'<p class="muted">prompt</p><pre>{escape(str(trace.get("prompt", "")))}</pre>',
        f'<p class="muted">reply</p><pre>{escape(str(trace.get("reply", "")))}</pre>',
        *(f'<p class="muted">{escape(p.title)}</p><pre>{escape(p.text)}</pre>' for p in kinds.shown(extra_of(trace))),
    ]
    items = trace.get("items") or []
    parts += [
        f"<details><summary>item {k} of {len(items)}</summary>\n{node_html(item)}\n</details>"
        for k, item in enumerate(items, start=1)
    ]
    return "\n".join(parts)


def eval_facts(run: Run) -> str:
    """What an evaluation scored, how, and with which prompts."""
    e, record = run.evaluation, run.record
    asked = {
        "data": run.settings.data,
        "split": e.get("split"),
        "metric": e.get("metric"),
        "limit": e.get("limit"),
        "seed": run.settings.method.seed,
        "test_data": run.settings.test_data,
        **{f"{role} model": name for role, name in run.settings.models.items()},
    }
    return "\n".join(
        [
            f"<p>{escape(run.settings.file)} on {escape(str(run.settings.data))}/{escape(str(e.get('split')))}, "
            f"metric {escape(str(e.get('metric')))}, started {escape(run.started)}; <b>{escape(run.status)}</b></p>",
            f"<p>score {escape(eval_score(run))}; {escape(record.spent_words())}</p>",
            "<details><summary>settings</summary>"
            + table(["setting", "value"], [[k, "-" if v is None else v] for k, v in asked.items()])
            + "</details>",
            f"<details><summary>prompts (sha256 {escape(str(e.get('prompts_sha256', '-'))[:12])})</summary>"
            + "".join(
                f"<p><b>{escape(name)}</b></p><pre>{escape(text)}</pre>" for name, text in run.prompts_at(0).items()
            )
            + "</details>",
        ]
    )


REPORTED_SAMPLES = 300  # the most samples of an evaluation a page holds, wrong and lost ones first


def render_eval(run: Run) -> str:
    """One evaluation: a table of its samples (wrong ones first), then each sample expandable to every node's
    prompt and reply; the first REPORTED_SAMPLES, saying how many are left out. A checkbox hides the right ones, by
    the page's own style: no script."""
    seen = run.view(REPORTED_SAMPLES)
    rows = "\n".join(
        f'<tr class="{"right" if is_right(x) else "wrong"}">'
        + "".join(
            f"<td>{escape(str(v))}</td>"
            for v in (x.get("id"), sample_verdict(x), sample_score(x), x.get("expected"), x.get("output"))
        )
        + "</tr>"
        for x in seen.shown
    )
    head = "".join(f"<th>{h}</th>" for h in ("sample", "verdict", "score", "expected", "output"))
    body = [
        eval_facts(run),
        *(f'<p class="muted">note: {escape(note)}</p>' for note in seen.notes),
        f"<h2>samples ({seen.samples})</h2>",
        *([f"<p>{escape(seen.left_out_words())}</p>"] if seen.left_out else []),
        '<div class="samples"><input type="checkbox" id="only-wrong">'
        '<label for="only-wrong"> only wrong and lost samples</label>',
        f"<div><table>\n<tr>{head}</tr>\n{rows}\n</table></div>",
        "<div>" + "\n".join(sample_html(x) for x in seen.shown) + "</div></div>",
    ]
    return page(f"sbpc eval {run.name}", "\n".join(body))
