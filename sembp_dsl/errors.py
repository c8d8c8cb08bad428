"""The root of every error sbpc raises, and the words its messages name options in.

`except sembp_dsl.SbpcError` catches them all: a pipeline that does not compile, a model that cannot be
called, a data set, cache, run record or file that is not what it should be. Anything else that escapes
is a bug in sbpc, which is why the command line prints a message for an SbpcError and a traceback for
the rest. This module imports nothing of sbpc, so every stage can derive its errors from it; each error
lives in the module of the stage that raises it, and every one is exported from `sembp_dsl`.

The whole tree (indented under its base; [X]: also an X, for callers that catch that; "inside sbpc": caught
where it is raised and turned into what the line says, never met by a user):

* SbpcError - an error that is the user's to fix, or to wait out
  * OptionError - a message that names the caller's options, as Python or the command line spells them
    * WriteBackError (files) [ValueError] - a file sbpc writes cannot be written: a folder or FIFO at its path,
      a read-only source, a bad `out`/--out, new prompts that would not parse back
    * SettingError (language.blocks.method) [ValueError] - a method setting out of its range or not one of its words
    * SettingTypeError (language.blocks.method) [TypeError] - a method setting of the wrong type
    * CacheError (models.cache) - the response cache cannot be opened or is damaged
    * LLMError (models.faults) - no call can succeed: no model, a bad key, an unknown model, nothing listening
    * BudgetExceeded (models.stops) - max_calls or max_cost was reached; a run stops with what it has
    * DataError (runtime.datasets) - a data set, data file or expected answer that cannot be used
    * TelemetryError (telemetry) - otel=True (--otel) asked for spans, but OpenTelemetry is not installed or its variables are unusable
    * RecordError (records.record) [ValueError] - a run record that cannot be written or read
      * ResumeError (records.record) - resume=True (--resume) found no run it may continue
  * PipelineError (language.diagnostics) - a pipeline that does not compile, with every diagnostic found
  * BlockStringError (language.syntax.parser) [ValueError] - inside sbpc: a bad triple-quoted string, made a diagnostic
  * BadScalar (language.syntax.yaml_form) [ValueError] - inside sbpc: a YAML value of no allowed type, made a diagnostic
  * DemosError (language.nodes.demos) [ValueError] - examples for a demos param that are not its node's
  * FormatError (language.tooling.fmt) [ValueError] - formatting would change what the file means (a formatter bug)
  * RenameError (language.tooling.editor) [ValueError] - a rename the editor asked for that cannot be done
  * RenderError (language.nodes.templates) [TemplateError] - a template failed while rendering (a limit, a Python error)
  * TemplateProblem (language.nodes.templates) [TemplateError] - a template that cannot work: syntax, a forbidden tag
  * CallFailed (models.faults) - a call failed for good after its retries; that sample is lost, the run goes on
  * BatchFailed (models.batch) - a batch the provider failed whole (its file refused): none of its requests ran
  * CallError (models.faults) - inside sbpc: one failed attempt on the fast path, retried or made CallFailed/LLMError
    * NoConnection (models.faults) - no connection within the connect timeout
    * PlainHttp (models.faults) - an https:// address whose server speaks plain http
  * BadReply (models.faults) - inside sbpc: a 2xx reply that is no chat completion, retried like a failed attempt
  * RouterConfigError (models.routing) - a router config file that cannot be read or is no litellm Router config
  * CodeError (runtime.code) - a pipeline's Python callable that may not or could not be imported
  * Overran (usercode) [TimeoutError] - inside sbpc: a call of the pipeline's code ran past its timeout; that
    call fails
  * ToolFailed (usercode) - inside sbpc: one call of an MCP server's tool failed (it hung, its server died,
    it answered an error or too much); the model is told, the run goes on
  * ServerStopped (usercode) - an MCP server could not be started again after it hung or died: the run stops
  * MetricFailed (runtime.evaluate) - inside sbpc: a metric could not score one answer; that sample is unscored
  * RunsError (records.runs) - no such run or iteration, or a file the run's prompts do not fit
  * InputError (runtime.inputs) [ValueError] - inputs a pipeline cannot take: unknown, missing or not sendable
  * PipelineClosed (runtime.session) [RuntimeError] - a call on a pipeline after close()
  * CompareError (compare) - a --vary that cannot be run, or a row that could not finish
  * ServeError (serve) - `sbpc serve` could not start: the address is taken, unknown or not this machine's
  * UsageError (cli.flags) - inside sbpc: bad flags, printed as argparse prints its own, with exit code 2
"""

from __future__ import annotations


class SbpcError(Exception):
    """An error that is the user's to fix (or to wait out); its message says what happened and what to do."""


#: How a failure that is no SbpcError is named where it is reported (the command line, a run record).
BUG_IN_SBPC = "this is a bug in sbpc"


class Option(str):
    """Text that names options, as each front end spells them: itself (a str) in the Python API's words,
    `runs_dir='runs'`, and `.cli` in the command line's, `--runs-dir runs`. Being text, it travels where text
    does (an evaluation's `stopped`, a failure's hint), and a front end still finds its own words in it."""

    cli: str

    def __new__(cls, python: str, cli: str) -> Option:
        text = super().__new__(cls, python)
        text.cli = cli
        return text

    # copy and pickle (dataclasses.asdict copies) keep both spellings; str's own takes one argument
    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]
        return str(self), self.cli


def option(name: str, value: object) -> Option:
    """A keyword argument and the flag it comes from: `option("runs_dir", "x")` is runs_dir='x' / --runs-dir x."""
    shown = value if isinstance(value, (int, float)) else str(value)  # a Path as the text it holds
    return Option(f"{name}={shown!r}", f"--{name.replace('_', '-')} {value}")


def worded(*parts: str) -> Option:
    """Text and Options joined into one Option, each spelling made of the same parts."""
    return Option("".join(parts), "".join(p.cli if isinstance(p, Option) else p for p in parts))


class OptionError(SbpcError):
    """An error that may name the caller's options: its message is text and Options, which str() spells as the
    Python API takes them and `.cli` as the command line does, so each reader sees the names they typed.
    `.text` is the message as one Option, for a reason that travels on as text (a run's `stopped`)."""

    def __init__(self, *parts: str):
        self.text = worded(*parts)
        super().__init__(str(self.text))
        self.cli = self.text.cli
