"""What the command modules (commands.py, calling.py, runs.py) share: diagnostics printed, the model and data
flags, the number types that check flags, NAME=VALUE pairs, usage errors, and the pipeline and ledger the flags ask
for. It imports none of them, so no import runs back up."""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time

from .. import telemetry
from ..errors import SbpcError
from ..language.blocks.data import DataSpec
from ..language.blocks.method import SETTINGS
from ..language.ir import gc_paused

PROGRESS_EVERY = 10.0  # seconds between progress lines when stderr is no terminal


class LineProgress:
    """Progress where no bar can be drawn (CI, a log file, nohup): a line on stderr at most every
    PROGRESS_EVERY seconds, and one at the end if any was printed, so a long phase never looks hung and a
    short one prints nothing. The part of tqdm's interface the commands use."""

    def __init__(self, total: int, desc: str, unit: str, every: float | None = None):
        self.total, self.desc, self.unit, self.n, self.postfix = total, desc.strip(), unit, 0, ""
        self.every = PROGRESS_EVERY if every is None else every  # seconds between lines (math.inf: none, --json)
        self.last = time.monotonic()
        self.printed: int | None = None  # the count the last line showed

    def update(self, count: int = 1) -> None:
        self.n += count
        if time.monotonic() - self.last >= self.every:
            self._line()

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def close(self) -> None:
        if self.printed is not None and self.printed != self.n:  # the end, unless the last line showed it
            self._line()
        self.printed = None

    def _line(self) -> None:
        postfix = f" ({self.postfix})" if self.postfix else ""
        unit = f" {self.unit}s" if self.unit else ""
        print(f"{self.desc}: {self.n}/{self.total}{unit}{postfix}", file=sys.stderr, flush=True)
        self.last, self.printed = time.monotonic(), self.n

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_bar(total: int, desc: str, quiet: bool, unit: str = "sample", leave: bool = True):
    """A bar on a terminal, progress lines elsewhere, nothing with --json."""
    if quiet:
        return LineProgress(total, desc, unit, every=math.inf)
    if sys.stderr.isatty():
        # tqdm costs about 35 ms to import: only a bar on a terminal pays it, not check, fmt, --json or a log file
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=leave)
    return LineProgress(total, desc, unit)


class Phases:
    """The `progress` an optimize run is given: a bar (or lines) per phase, closed the moment the phase is done, so
    that its last line comes before the next phase's first. A phase counts samples, or prompts for the optimizer,
    so no unit is named; its label says what it counts."""

    def __init__(self, quiet: bool, indent: str = ""):
        self.quiet, self.indent = quiet, indent
        self.open: list = []  # the bars of the phases not done yet

    def __call__(self, what: str, total: int):
        bar = progress_bar(total, self.indent + what, self.quiet, unit="", leave=False)
        self.open.append(bar)

        def tick(_done: object) -> None:
            bar.update()
            if bar.n >= total:
                self.open.remove(bar)
                bar.close()

        return tick

    def close(self) -> None:
        """Close the phases left open: those a budget or a failure cut short."""
        for bar in self.open:
            bar.close()
        self.open.clear()


class UsageError(SbpcError):
    """Bad flags: reported like argparse's own errors, with exit code 2."""


def parse_pairs(pairs: list[str], what: str) -> dict[str, str]:
    """NAME=VALUE flags (--input, --map) as a dict; anything else is a usage error."""
    out = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"{what} expects NAME=VALUE, got {pair!r}")
        out[name.strip()] = value
    return out


def load_pipeline(args, code: bool = True, resume: bool = False):
    """The pipeline of a command, with the models and limits its flags ask for (`code=False`: importing no
    function module, for a command that runs none; `resume`: the write into the file an unfinished run in
    --runs-dir was making when killed finished first); for a command that reads data, `args.examples`, the Data its
    flags or the file's data block name."""
    roles = {
        role: flag for role, flag in (("backward", args.backward_model), ("optimizer", args.optimizer_model)) if flag
    }
    with gc_paused():  # what is made here lives to the end: a collection would find nothing
        # the api and the model runtime cost about 0.25 s to import: only the commands that load a pipeline pay it
        from ..api import Data, load

        pipeline = load(
            args.file,
            model=args.model,
            roles=roles,
            api_base=args.api_base,
            concurrency=args.concurrency,
            timeout=args.timeout,
            cache=not args.no_cache,
            max_calls=args.max_calls,
            max_cost=args.max_cost,
            allow_modules=args.allow_module or (),
            code=code,
            otel=telemetry.asked(vars(args).get("otel") or vars(args).get("otel_content") or None),
            otel_content=vars(args).get("otel_content") or None,
            resume=args.runs_dir if resume else False,
        )
    # the modules and the pipeline live to the end: frozen, later GC passes skip them (~10% CPU per call)
    gc.freeze()
    if "data" in vars(args):
        args.data, test, validation = named_data(args.data, args.test_data, pipeline.graph.data)
        args.examples = Data(args.data, args.data_dir, test, validation)
    return pipeline


def named_data(flag: str | None, test: str | None, named: DataSpec | None) -> tuple[str, str | None, str | None]:
    """The data, its test file and its validation file: --data (and --test-data), else the files the pipeline's
    data block names (its test file unless --test-data gives one); a usage error with neither."""
    if flag:
        return flag, test, None
    if named is None:
        raise UsageError('the following arguments are required: --data (or name it in the file: data { file = "..." })')
    return named.path, test or named.test, named.validation


def print_ledger(pipeline, args) -> None:
    if not args.json:
        print("\n" + pipeline.ledger.render(), file=sys.stderr)


def number(kind, low: float, inclusive: bool, what: str, high: float = float("inf")):
    """An argparse type: a finite `kind` above `low` (or at it, when inclusive) and at most `high`; else a usage error."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not low <= value <= min(high, 1e308) or (value == low and not inclusive):  # also refuses nan and inf
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what  # argparse names the type in its messages
    return parse


COUNT = number(int, 0, True, "a whole number, 0 or more")
POSITIVE_COUNT = number(int, 1, True, "a whole number, 1 or more")
SECONDS = number(float, 0, False, "a number of seconds above 0")
DOLLARS = number(float, 0, True, "an amount of dollars, 0 or more")
PROBABILITY = number(float, 0, False, "a probability above 0 and at most 1", high=1)


def add_model_flags(p: argparse.ArgumentParser, learning: bool = False) -> None:
    g = p.add_argument_group("models and limits")
    every = "every call (unless --backward-model / --optimizer-model say otherwise)" if learning else "every call"
    g.add_argument(
        "--model",
        help=f"litellm model for {every}, e.g. openai/gpt-4o-mini, anthropic/claude-3-5-haiku-latest, "
        "ollama/llama3, embedded/smollm2-135m",
    )
    if learning:
        g.add_argument("--backward-model", help="model for backward (gradient) calls")
        g.add_argument("--optimizer-model", help="model for optimizer calls")
    else:
        p.set_defaults(backward_model=None, optimizer_model=None)  # only forward calls: those flags do not apply
    g.add_argument(
        "--api-base",
        metavar="URL",
        help="OpenAI-compatible server for every role, e.g. http://localhost:8000/v1 "
        "(with --model openai/NAME; overrides api_base and OPENAI_BASE_URL)",
    )
    g.add_argument("--concurrency", type=POSITIVE_COUNT, help="LLM calls in flight at most, fixed (default: adaptive)")
    g.add_argument("--timeout", type=SECONDS, default=120.0, help="seconds per call before it is retried (default 120)")
    g.add_argument(
        "--no-cache",
        action="store_true",
        help="do not read or write the response cache ($SBPC_CACHE_DIR or ~/.cache/sbpc/responses.sqlite)",
    )
    add_allow_module(g)
    g.add_argument("--max-calls", type=COUNT, help="stop cleanly after this many LLM calls")
    g.add_argument("--max-cost", type=DOLLARS, help="stop cleanly once this many dollars are spent")
    g.add_argument("--json", action="store_true", help="print a machine-readable report")


def add_otel_flags(p: argparse.ArgumentParser) -> None:
    """--otel and --otel-content: the commands that run a pipeline export spans when asked."""
    g = p.add_argument_group("telemetry")
    g.add_argument(
        "--otel",
        action="store_true",
        help="export OpenTelemetry spans of the run, its calls and steps by OTLP/HTTP to $OTEL_EXPORTER_OTLP_ENDPOINT "
        "(default http://localhost:4318; SBPC_OTEL=1 does the same); needs the otel extra",
    )
    g.add_argument(
        "--otel-content",
        action="store_true",
        help="with the spans, every prompt and reply text (off: tokens, models and timings only; "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true does the same)",
    )


def add_allow_module(g) -> None:
    g.add_argument(
        "--allow-module",
        action="append",
        metavar="NAME",
        help="let function nodes import this module (and the modules of this package) by Python's rules; "
        "without it only modules beside the pipeline file are imported (repeat for each)",
    )


def add_data_flags(p: argparse.ArgumentParser, test_default: str = "the file's optimize block") -> None:
    g = p.add_argument_group("data")
    g.add_argument(
        "--data",
        help="liar | gsm8k | bbh:<task> | PATH (.jsonl, .csv, .tsv, .parquet, .arrow, a Hugging Face folder); "
        "JSON values that are not strings reach prompts as JSON text (default: the file's data block)",
    )
    g.add_argument(
        "--test-data",
        metavar="PATH",
        help="a separate file for the test split (.jsonl, .csv, .tsv); --data then gives train and val only",
    )
    g.add_argument(
        "--data-dir", help="folder holding liar/, gsm8k/, bbh/ (default: $SBPC_DATA_DIR, then ~/.cache/sbpc/datasets)"
    )
    g.add_argument(
        "--map",
        action="append",
        metavar="INPUT=FIELD",
        help="read a pipeline input from a differently named data field",
    )
    g.add_argument(
        "--metric",
        metavar="NAME",
        help="score with this metric: exact, numeric, json, or one the file defines (default: the file's "
        "`metric`, else its first defined one, else the data set's)",
    )
    from_file = "the file's optimize block"
    add_setting(g, "train_size", COUNT, f"default: {from_file}")
    add_setting(g, "val_size", COUNT, f"default: {from_file}")
    add_setting(g, "test_size", COUNT, f"default: {test_default}")
    add_setting(g, "seed", int)


def add_setting(g, name: str, kind, default: str | None = None, *aliases: str, **more) -> None:
    """The flag of a method setting, with its meaning from the one table of settings (language/blocks/method.py)."""
    setting = SETTINGS[name]
    default = default or f"default: the file's, else {setting.default}"
    g.add_argument(setting.option, *aliases, dest=name, type=kind, help=f"{setting.help} ({default})", **more)


def method_settings(args) -> dict:
    """The method settings given as flags (the others come from the pipeline's `optimize` block)."""
    given = {name: getattr(args, name) for name in SETTINGS if getattr(args, name, None) is not None}
    if getattr(args, "no_gate", False):
        given["gate"] = "none"
    if getattr(args, "only", None):
        given["only"] = tuple(p.strip() for p in args.only.split(","))
    if getattr(args, "models", None):
        given["models"] = tuple(m.strip() for m in args.models.split(","))
    if getattr(args, "strategies", None) is not None:
        given["strategies"] = tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    return given


MOST_DIAGNOSTICS_SHOWN = 50  # a generated file can carry thousands of warnings: the first ones, then a count


def report_diagnostics(diagnostics, text) -> None:
    """A file's diagnostics on stderr, each with its source lines: the first MOST_DIAGNOSTICS_SHOWN, then a count."""
    for d in diagnostics[:MOST_DIAGNOSTICS_SHOWN]:
        print(d.render(text), file=sys.stderr)
    if len(diagnostics) > MOST_DIAGNOSTICS_SHOWN:
        print(
            f"... and {len(diagnostics) - MOST_DIAGNOSTICS_SHOWN} more (`sbpc check --json` lists them all)",
            file=sys.stderr,
        )
