"""Jinja2, sandboxed and bounded: pipeline files are data from strangers, so their templates get no
Python, no file access, and a budget of work and output per render.

Every way a template can make work grows a `Budget`: loop iterations, calls (macros and methods),
filter results, operators that build big values (`'x' * 10**9`, `2 ** 10**9`) or divide big numbers, and
the text each block or macro outputs. Filters are never run while compiling (Jinja folds a filter of
constants at compile time, outside any budget), so all of a template's work happens in a render. Spending past the budget, or any Python error while rendering (`{{ 1/0 }}`,
a recursive macro), raises `RenderError`, a `TemplateError` carrying the template line, so a render
failure is a located error in `check` and a per-sample error at run time, never a traceback or a hang.
"""

from __future__ import annotations

import functools
import math
import re
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from jinja2 import StrictUndefined, Template, TemplateError, TemplateSyntaxError, meta, nodes, pass_context
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import generate_lorem_ipsum

from ...errors import SbpcError

MAX_OUTPUT_CHARS = 16_000_000  # all text one render outputs, macros and blocks included
MAX_VALUE_CHARS = 4_000_000  # one string, list or number (in digits) built by an operator, call or filter
MAX_STEPS = 1_000_000  # loop iterations + calls + filter result items
CALL_STEPS = 20  # a call (a macro, a method) costs about twenty loop iterations
MAX_SECONDS = 3.0  # a backstop for work the step count cannot see
MAX_ARGUMENT = 1_000_000  # an integer passed to a call or filter (widths, counts, repeats)
MAX_LIPSUM = 100  # paragraphs or words asked of `lipsum`
# Long division (`//`, `%`) costs the product of its two numbers' sizes: past about 10**11 bits squared, a
# tenth of a second, one operation could run for a minute between two checks of the clock.
MAX_DIVISION_WORK = 10**11
# A printf (`%9999999d`) or format() (`{:>9999999}`) width or precision of a million or more.
WIDE_FORMAT = re.compile(r"%[-+ #0]*\d{7,}|%[-+ #0]*\d*\.\d{7,}|\{[^{}]*:[^{}]*?\d{7,}[^{}]*\}")
FORBIDDEN = {nodes.Include: "include", nodes.Import: "import", nodes.FromImport: "import", nodes.Extends: "extends"}


class RenderError(SbpcError, TemplateError):
    """A template failed while rendering: over a limit, or a Python error such as division by zero.

    `limit`: the template went over a limit of work, size or depth (data rarely changes that).
    """

    def __init__(self, message: str, lineno: int | None = None, limit: bool = True):
        super().__init__(message)
        self.lineno, self.limit = lineno, limit


#: When the renders of one `check` must end, whatever each render's own limit: a slow template used by many
#: nodes cost MAX_SECONDS each (a file of them kept `check` busy for 400 s). Unbounded outside a check.
_UNTIL: ContextVar[float] = ContextVar("template_renders_until", default=math.inf)


@dataclass
class Budget:
    steps: int = 0
    output: int = 0
    deadline: float = field(default_factory=lambda: min(time.monotonic() + MAX_SECONDS, _UNTIL.get()))

    def step(self, count: int = 1) -> None:
        before, self.steps = self.steps, self.steps + count
        if self.steps > MAX_STEPS:
            raise RenderError(f"too much work: more than {MAX_STEPS:,} loop iterations, calls and filter items")
        if before >> 10 != self.steps >> 10:  # every 1,024 steps
            self.check_time()

    def check_time(self) -> None:
        """After every call and filter too: one can take seconds (`urlize` on a long text), and a loop of
        them would otherwise run for minutes between two step checks."""
        if time.monotonic() > self.deadline:
            raise RenderError(f"rendering took more than {MAX_SECONDS:g} s")

    def emit(self, chars: int) -> None:
        self.output += chars
        if self.output > MAX_OUTPUT_CHARS:
            raise RenderError(f"output too large: more than {MAX_OUTPUT_CHARS:,} characters")


_BUDGET: ContextVar[Budget] = ContextVar("template_budget")


def _budget() -> Budget:
    try:
        return _BUDGET.get()
    except LookupError:  # not inside `BoundedTemplate.render` (Template.generate): each operation's own limits
        return Budget()


def _size(value) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() * 3 // 10  # decimal digits, roughly
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set)) else 0


def _check_value(value):
    size = _size(value)
    if size > MAX_VALUE_CHARS:
        raise RenderError(f"value too large: {size:,} items or characters (the limit is {MAX_VALUE_CHARS:,})")
    return value


def _check_arguments(args, kwargs) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, (tuple, list)):
            _check_arguments(value, {})
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_ARGUMENT:
            raise RenderError(f"argument {value} is too large (the limit is {MAX_ARGUMENT:,})")


def _check_format(text: str) -> None:
    if WIDE_FORMAT.search(text):
        raise RenderError("a format width of a million or more characters")


def _estimated_size(op: str, left, right) -> int:
    """How big `left op right` would be, before building it."""
    if op in ("*", "+"):
        if isinstance(left, int) and isinstance(right, int):
            return (_size(left) + _size(right)) if op == "*" else max(_size(left), _size(right))
        if op == "+":
            return _size(left) + _size(right)
        count, seq = (right, left) if isinstance(right, int) else (left, right)
        return _size(seq) * count if isinstance(count, int) else 0
    if op == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
        return right * left.bit_length() * 3 // 10
    if op == "%" and isinstance(left, str):
        _check_format(left)
        _check_arguments(right if isinstance(right, tuple) else (right,), {})
    if op in ("//", "%") and isinstance(left, int) and isinstance(right, int):
        quotient_bits = max(left.bit_length() - right.bit_length(), 0)
        if quotient_bits * right.bit_length() > MAX_DIVISION_WORK:
            raise RenderError(
                f"'{op}' would take too long: long division of two numbers of {_size(left):,} and "
                f"{_size(right):,} digits"
            )
    return 0


#: What a template's own code can raise in the sandbox ({{ 1/0 }}, {{ x[9] }}, {{ "a" + 1 }}, an unsafe
#: attribute): one sample's problem. Anything else is a bug in sbpc, and surfaces as one.
TEMPLATE_FAULTS = (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, TemplateError)


class BoundedTemplate(Template):
    def render(self, *args, **kwargs) -> str:
        token = _BUDGET.set(Budget())
        try:
            text = super().render(*args, **kwargs)
        except RenderError as exc:
            raise RenderError(str(exc), exc.lineno or _template_line(exc), exc.limit) from None
        except TemplateSyntaxError:
            raise
        except RecursionError as exc:
            raise RenderError(
                "nested or recursive too deeply (a macro that calls itself?)", _template_line(exc)
            ) from None
        except MemoryError as exc:
            raise RenderError("out of memory", _template_line(exc)) from None
        except TEMPLATE_FAULTS as exc:  # the template's own error ({{ 1/0 }}, a bad call): one sample's problem
            raise RenderError(f"{type(exc).__name__}: {exc}", _template_line(exc), limit=False) from None
        finally:
            _BUDGET.reset(token)
        problem = unsendable(text)
        if problem is not None:  # from a data row, a function's output, a reply: no request could carry the prompt
            raise RenderError(f"the prompt {problem}", limit=False)
        return text


def unsendable(text: str) -> str | None:
    """Why `text` cannot be sent to a model or written as UTF-8 (it holds a lone surrogate), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds a lone surrogate ({exc.object[exc.start]!r}), half a UTF-16 pair that UTF-8 cannot carry"
    return None


def _template_line(exc: BaseException) -> int | None:
    """The template line an error happened on: Jinja rewrites tracebacks to point into the template."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


class BoundedEnvironment(SandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "%", "//"})
    template_class = BoundedTemplate

    def call_binop(self, context, op, left, right):
        budget = _budget()
        budget.step()
        size = _estimated_size(op, left, right)
        if size > MAX_VALUE_CHARS:
            raise RenderError(
                f"'{op}' would build a value of {size:,} items or characters (the limit is {MAX_VALUE_CHARS:,})"
            )
        result = _check_value(super().call_binop(context, op, left, right))
        budget.check_time()  # a big power takes a quarter second: a loop of them between two step checks took minutes
        return result

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's signature)
        budget = _budget()
        budget.step(CALL_STEPS)
        _check_arguments(args, kwargs)
        wrapped = getattr(__obj, "__wrapped__", None)  # str.format, wrapped by the sandbox
        if isinstance(getattr(wrapped, "__self__", None), str):
            _check_format(wrapped.__self__)
        result = _check_value(SandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs))
        budget.step(_size(result) // 8)
        budget.check_time()
        return result

    def _generate(self, source, name, filename, defer_init=False):
        """Count loop iterations and bound `~`: every `{% for %}` iterates through the `_counted`
        filter, every `a ~ b` joins through `_joined`."""
        for loop in source.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, "_counted", [], [], None, None, lineno=loop.iter.lineno)
        for concat in list(source.find_all(nodes.Concat)):
            joined = nodes.Filter(nodes.List(concat.nodes), "_joined", [], [], None, None, lineno=concat.lineno)
            concat.nodes = [joined]
        return super()._generate(source, name, filename, defer_init)


#: What a filter that asks for it is passed first, from the render's context.
_PASSED = {
    "context": lambda context: context,
    "eval_context": lambda context: context.eval_ctx,
    "environment": lambda context: context.environment,
}


def _bounded_filter(function):
    """`function` within the budget. It asks for the render's context (and passes on what `function` asked
    for): Jinja folds no such filter while compiling, so its work is always a render's."""
    passed = getattr(getattr(function, "jinja_pass_arg", None), "name", None)

    @functools.wraps(function)
    def bounded(context, *args, **kwargs):
        _check_arguments(args[1:], kwargs)  # args[0] is the value filtered
        first = (_PASSED[passed](context),) if passed in _PASSED else ()
        result = _check_value(function(*first, *args, **kwargs))
        budget = _budget()
        budget.step(1 + _size(result) // 8)
        budget.check_time()
        return result

    return pass_context(bounded)


def _counted(iterable):
    budget = _budget()
    for item in iterable:
        budget.step()
        yield item


def _joined(values) -> str:
    texts = [str(v) for v in values]
    size = sum(map(len, texts))
    if size > MAX_VALUE_CHARS:
        raise RenderError(f"'~' would build a string of {size:,} characters (the limit is {MAX_VALUE_CHARS:,})")
    return "".join(texts)


def _bounded_concat(parts) -> str:
    budget, out = _budget(), []
    for part in parts:
        budget.emit(len(part))
        out.append(part)
    return "".join(out)


def _bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    if n > MAX_LIPSUM or max > MAX_LIPSUM:
        raise RenderError(f"lipsum: at most {MAX_LIPSUM} paragraphs of at most {MAX_LIPSUM} words")
    return generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def _make_env() -> BoundedEnvironment:
    env = BoundedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)
    env.concat = _bounded_concat  # type: ignore[method-assign]  # Jinja's concat is a plain function attribute
    env.filters = {name: _bounded_filter(f) for name, f in env.filters.items()}
    env.filters["_counted"] = _counted
    env.filters["_joined"] = _joined
    env.globals["lipsum"] = _bounded_lipsum
    return env


ENV = _make_env()

# A node without a template gets its prompt followed by one "name: value" line per input.
DEFAULT_TEMPLATE = "{{ prompt }}\n{% for name, value in inputs %}\n{{ name }}: {{ value }}{% endfor %}"

# Templates that drive the method itself; a pipeline may override any of them by
# declaring a template of the same name. Values: the variables each one may use.
BUILTIN = {
    "loss": {"task", "node", "output", "expected", "parse_error", "reason", "grade"},
    "backward": {"task", "node", "prompt", "system", "context", "hints", "output", "feedback"},
    "backward_no_sibling": {"task", "node", "prompt", "system", "context", "hints", "output", "feedback"},
    "optimizer": {"task", "node", "param", "prompt", "examples", "max_chars", "max_sentences", "tool", "tools"},
}


@functools.cache
def builtin_source(name: str) -> str:
    """A built-in prompt's text (language/prompts/NAME.j2), read as a file: importlib.resources would cost the
    first call ~8 ms of imports (zipfile among them) to read a file the package installs as a file."""
    return (Path(__file__).parents[1] / "prompts" / f"{name}.j2").read_text(encoding="utf-8")


class TemplateProblem(SbpcError, TemplateError):
    """A template that cannot work: bad syntax, a forbidden tag, or too deep to compile (`kind`: syntax,
    loads or compile)."""

    def __init__(self, message: str, lineno: int | None, kind: str):
        super().__init__(message)
        self.lineno, self.kind = lineno, kind


class Reads(NamedTuple):
    """What a template reads from its context."""

    names: frozenset[str]
    order: tuple[str, ...]  # the same names, in the order each first appears
    fields: frozenset[tuple[str, str]]  # (name, field) for every `{{ name.field }}` and `{{ name["field"] }}`


NOTHING = Reads(frozenset(), (), frozenset())


@lru_cache(maxsize=4096)
def reads(source: str) -> Reads:
    """What a template reads (its names, and the fields of a record output it reads by name); TemplateProblem
    when it cannot work at all.

    `include`, `import` and `extends` are refused: a pipeline's templates live in its own file.
    """
    if "{" not in source:  # plain text: every Jinja construct starts with a brace
        return NOTHING
    try:
        tree = ENV.parse(source)
        for kind, tag in FORBIDDEN.items():
            for found in tree.find_all(kind):
                raise TemplateProblem(
                    f"'{{% {tag} %}}' is not allowed: a template cannot load other files", found.lineno, "loads"
                )
        compile_template(source)
        names = frozenset(meta.find_undeclared_variables(tree))
    except TemplateSyntaxError as exc:
        raise TemplateProblem(exc.message or str(exc), exc.lineno, "syntax") from None
    except (RecursionError, MemoryError, SyntaxError, ValueError) as exc:  # too deep or too big for Python to compile
        raise TemplateProblem(
            f"cannot compile: {type(exc).__name__} (nested too deeply?)", getattr(exc, "lineno", None), "compile"
        ) from None
    order = tuple(dict.fromkeys(n.name for n in tree.find_all(nodes.Name) if n.ctx == "load" and n.name in names))
    fields = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        of = node.node if isinstance(node, (nodes.Getattr, nodes.Getitem)) else None
        if not isinstance(of, nodes.Name) or of.name not in names:
            continue
        if isinstance(node, nodes.Getattr):
            fields.add((of.name, node.attr))
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            fields.add((of.name, node.arg.value))
    return Reads(names, order, frozenset(fields))


def variables(source: str) -> frozenset[str]:
    """Names a template reads from its context; TemplateProblem when it cannot work at all."""
    return reads(source).names


@lru_cache(maxsize=4096)
def compile_template(source: str) -> BoundedTemplate:
    return ENV.from_string(source)  # type: ignore[return-value]  # the environment's template_class


def label(name: str) -> str:
    """`job_title` -> `Job title`: how an input is shown to a model by default."""
    return name.replace("_", " ").capitalize()


class Record:
    """A record output as templates read it: `{{ judge.verdict }}` is a field, `{{ judge }}` the JSON text.

    Not a dict: a field called `items` or `keys` would be shadowed by a dict's methods."""

    __slots__ = ("values", "text")

    def __init__(self, values: dict, text: str):
        self.values, self.text = values, text

    def __getattr__(self, name: str):
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str):
        return self.values[name]

    def __str__(self) -> str:
        return self.text


class Demos(tuple):
    """A demos param as templates read it: `{{ shots }}` is the examples as text ("Example 1:" then a
    `Label: value` line per field), `{% for ex in shots %}` gives each one as a Record, `{{ ex.question }}` a
    field."""

    @classmethod
    def of(cls, examples) -> Demos:
        """From examples, each a mapping of field names to text."""
        return cls(Record(dict(e), "\n".join(f"{label(key)}: {value}" for key, value in e.items())) for e in examples)

    def __str__(self) -> str:
        return "\n\n".join(f"Example {n}:\n{example}" for n, example in enumerate(self, start=1))


# A tool whose description the optimizer rewrites, as it is shown it (learning/descent.py `tool_shown`).
TOOL_SHAPE = {
    "name": "<tool>",
    "param": "<param>",
    "text": "<text>",
    "arguments": "<schema>",
    "right": ["<call>"],
    "wrong": ["<call>"],
    "max_chars": 400,
}

# What the built-in templates are given, in shape: lists of records, not text.
BUILTIN_SHAPES = {
    "hints": [{"name": "<hint>", "value": "<value>"}],
    "examples": [{"input": "<input>", "output": "<output>", "gradient": "<gradient>"}],
    "max_chars": 400,
    "max_sentences": 3,
    "tool": TOOL_SHAPE,
    "tools": [TOOL_SHAPE],
}


@lru_cache(maxsize=1024)
def trial_render(
    source: str,
    names: frozenset[str],
    builtin: bool = False,
    records: frozenset[tuple[str, tuple[str, ...]]] = frozenset(),
    demos: frozenset[tuple[str, tuple[str, ...]]] = frozenset(),
    until: float = math.inf,
) -> tuple[RenderError | None, bool]:
    """Render with placeholders for every variable, `<name>...` then `1` (a built-in's lists shaped as it gets
    them, a record output's fields each a placeholder, a demos param one example of placeholders): the first
    failure, and whether it is certain: a limit with the first, or both failed (the template's own error, such
    as `{{ 1/0 }}`, or a built-in override reading a field its records never have). Both renders end by
    `until` (time.monotonic()) at the latest: a check's renders share its time."""
    if "{" not in source:
        return None, False
    token = _UNTIL.set(until)
    try:
        return _first_failure(source, names, builtin, records, demos)
    finally:
        _UNTIL.reset(token)


def _first_failure(
    source: str,
    names: frozenset[str],
    builtin: bool,
    records: frozenset[tuple[str, tuple[str, ...]]],
    demos: frozenset[tuple[str, tuple[str, ...]]],
) -> tuple[RenderError | None, bool]:
    failures: list[RenderError] = []
    for placeholder in ("<{}>" + "." * 200, "1"):  # long text, so indexing a real input is not taken for an error
        values: dict[str, object] = {name: placeholder.format(name) for name in names}
        values["inputs"] = [(name, placeholder.format(name)) for name in sorted(names - {"inputs", "prompt"})]
        for name, fields in records:
            values[name] = Record({f: placeholder.format(f"{name}.{f}") for f in fields}, placeholder.format(name))
        for name, keys in demos:
            values[name] = Demos.of([{key: placeholder.format(f"{name}.{key}") for key in keys}])
        if builtin:
            values.update({name: shape for name, shape in BUILTIN_SHAPES.items() if name in names})
        try:
            compile_template(source).render(values)
        except RenderError as exc:
            if exc.limit and not failures:
                return exc, True
            failures.append(exc)
    certain = len(failures) == 2 and not failures[1].limit  # `range(q|int)` over a limit with `1` is data's doing
    return (failures[0], certain) if failures else (None, False)


__all__ = [
    "ENV",
    "DEFAULT_TEMPLATE",
    "BUILTIN",
    "RenderError",
    "TemplateProblem",
    "builtin_source",
    "variables",
    "reads",
    "Reads",
    "Record",
    "Demos",
    "label",
    "compile_template",
    "trial_render",
    "TemplateSyntaxError",
]
