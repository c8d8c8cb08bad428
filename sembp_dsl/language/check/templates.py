"""What each template reads: a node's template and system message read only what the node receives and the
params (which it then uses), every record field it names exists, and it renders at all (a timed trial)."""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Set
from typing import NamedTuple

from .. import ir
from ..kinds import kind_of
from ..nodes import maps
from ..nodes.outputs import output_kind
from ..nodes.templates import (
    BUILTIN,
    DEFAULT_TEMPLATE,
    MAX_OUTPUT_CHARS,
    MAX_SECONDS,
    RenderError,
    TemplateProblem,
    reads,
    trial_render,
    variables,
)
from .context import IDENTIFIER, Context, NodeParams, no_field


def template_source(pipeline: ir.Pipeline, node: ir.Node) -> str:
    """The Jinja2 source a node renders: a named template, an inline one, or the default (which shows the
    node's demos, when it has any, between its prompt and its inputs)."""
    setting = node.setting("template")
    if setting is None:
        demos = node.setting("demos")
        if demos is None or not isinstance(demos.value, str) or not IDENTIFIER.match(demos.value):
            return DEFAULT_TEMPLATE
        shots = demos.value
        shown = f"{{{{ prompt }}}}{{% if {shots} %}}\n\n{{{{ {shots} }}}}{{% endif %}}"
        return DEFAULT_TEMPLATE.replace("{{ prompt }}", shown, 1)
    named = {t.name: t.text for t in pipeline.templates}
    return named.get(str(setting.value), str(setting.value))


def system_source(pipeline: ir.Pipeline, node: ir.Node) -> str | None:
    """The Jinja2 source of a node's system message: `{{ NAME }}` for a param, a named template, an inline
    one; None without `system`."""
    setting = node.setting("system")
    if setting is None:
        return None
    value = str(setting.value)
    if pipeline.param(value) is not None:
        return "{{ " + value + " }}"
    return next((t.text for t in pipeline.templates if t.name == value), value)


def template_variables(
    cx: Context,
    text: str,
    literal: ir.Span,
    allowed: Set[str],
    misuse: tuple[str, Callable[[str], str]],
    what: str = "",
    builtin: bool = False,
    params: Set[str] = frozenset(),
    demos: frozenset[tuple[str, tuple[str, ...]]] = frozenset(),
) -> frozenset | None:
    """The variables a template reads, after reporting its syntax errors, every name outside `allowed` and
    `params` (`misuse`: the code and the message for such a name) and every field of a record output it
    misnames; then, when all it reads is there, whether it renders at all (`demos`: each demos param it may
    read, with the fields of its examples)."""
    try:
        used = variables(text)
    except TemplateProblem as exc:
        code = "E051" if exc.kind == "loads" else "E050"
        where = cx.locate(literal, None, exc.lineno)
        cx.report(code, where, f"template{' syntax' if exc.kind == 'syntax' else ''}{what}: {exc.message}")
        return None
    code, message = misuse
    unknown = [name for name in used - allowed if name not in params]
    for name in sorted(unknown):
        cx.report(code, cx.locate(literal, name), message(name))
    if not builtin and not check_fields_read(cx, text, literal, allowed):
        return used
    if not unknown and text != DEFAULT_TEMPLATE:
        records = frozenset() if builtin else frozenset((n, cx.records[n]) for n in used & allowed if n in cx.records)
        shown = frozenset((name, keys) for name, keys in demos if name in used)
        failure, certain = timed_trial(cx, literal, what, (text, used, builtin, records, shown))
        if failure is not None:  # an error when no data can help, else a warning
            cx.report(
                "E052" if certain else "W006",
                cx.locate(literal, None, failure.lineno),
                f"template{what} {'cannot' if certain else 'may not'} render: {failure.message}",
            )
    return used


def timed_trial(cx: Context, literal: ir.Span, what: str, given: tuple) -> tuple[RenderError | None, bool]:
    """trial_render within the seconds the check has left for renders (a template many nodes share is
    rendered once); once they are spent, the template is not tried, and that is said once."""
    if given in cx.rendered:
        return cx.rendered[given]
    if cx.render_seconds <= 0:
        untried(cx, literal, what)
        return None, False
    start = time.monotonic()
    found = cx.rendered[given] = trial_render(*given, until=start + cx.render_seconds)
    cx.render_seconds -= time.monotonic() - start
    return found


def untried(cx: Context, literal: ir.Span, what: str) -> None:
    """The first template left untried once the check's time for renders was spent, said once."""
    if not cx.untried:
        cx.untried = True
        cx.report(
            "W006",
            cx.locate(literal, None, None),
            f"template{what} not tried: this check's {MAX_SECONDS:g} s for rendering templates were spent, "
            "so it and the templates after it may not render",
        )


def check_fields_read(cx: Context, text: str, literal: ir.Span, received: Set[str]) -> bool:
    """Whether every `{{ judge.verdict }}` names a field the record output `judge` has; each that does not
    is reported."""
    fine = True
    for name, field in sorted(reads(text).fields):
        if name not in received or name not in cx.nodes:
            continue
        if name in cx.records and field not in cx.records[name]:
            no_field(cx, cx.locate(literal, field), name, field)
            fine = False
        type_ = cx.nodes[name].type
        if output_kind(type_).scalar and not hasattr(str, field):  # a str method, such as upper, renders
            what = "node" if name in cx.node_names else "input"
            cx.report(
                "E077",
                cx.locate(literal, field),
                f"{what} '{name}' is {type_}, not a record: it has no field '{field}'",
                help=field_elsewhere(cx, field, received) or f"`{{{{ {name} }}}}` is its whole value",
            )
            fine = False
    return fine


def field_elsewhere(cx: Context, field: str, received: Set[str]) -> str:
    """`did you mean 'judge.reason'?` when a record this template receives has a field close to `field`."""
    read = [f"{node}.{name}" for node, names in cx.records.items() if node in received for name in names]
    close = difflib.get_close_matches(field, [r.split(".", 1)[1] for r in read], n=1, cutoff=0.6)
    return next((f"did you mean '{r}'?" for r in read if close and r.endswith("." + close[0])), "")


class TemplateSource(NamedTuple):
    """A template a node renders (its forward template or its system message), and how messages name it."""

    text: str
    literal: ir.Span
    label: str
    explicit: bool  # the file gives it (not the default template)


def check_templates(cx: Context) -> None:
    """Each node's map, then what its templates read (a mapped node's templates see the item too)."""
    for node in cx.p.nodes:
        received = cx.predecessors.get(node.name, ())
        maps.check_map(cx, node, received)
        if node.each is not None:
            received = (*received, node.each.item.name)
        if node.name not in cx.tainted and kind_of(node).prompted:  # a node that renders no prompt reads nothing
            check_template_variables(cx, node, received)


def check_template_variables(cx: Context, node: ir.Node, received: tuple[str, ...]) -> None:
    """What the node's template and system message read: its inputs, `prompt`, and params (which the node then
    uses); each param it uses must in turn read only the node's inputs."""
    setting = node.setting("template")
    key = (id(received), setting is None)
    if key not in cx.received_sets:  # nodes fed by one statement share `received`: one set for all
        cx.received_sets[key] = frozenset(received) | {"prompt"} | ({"inputs"} if setting is None else set())
    allowed = cx.received_sets[key]
    sources = template_sources(cx, node)
    own = cx.demos.get(node.name)
    shapes = frozenset({(own, (*received, node.name))} if own else ())
    found: list[frozenset[str]] = []
    shown = False
    for source in sources:

        def misuse(name: str, label: str = source.label) -> str:
            return (
                f"{label} uses '{name}', which node '{node.name}' does not receive"
                f" (it receives: {', '.join(received) or 'nothing'})"
            )

        used = template_variables(
            cx, source.text, source.literal, allowed, ("E053", misuse), params=cx.params.keys(), demos=shapes
        )
        if used is None:
            return
        shown = check_demos_shown(cx, node, source, used - allowed) or shown
        check_names_read(cx, node, source, used, allowed)
        found.append(frozenset(n for n in used - allowed if n in cx.params and not cx.params[n].is_demos))
    if own is not None and not shown:
        cx.report(
            "E091",
            setting.value_span if setting is not None else node.span,
            f"node '{node.name}' has the demos '{own}', but its template never shows them",
            help=f"put {{{{ {own} }}}} in the template where the examples belong",
        )
    uses = params_named(cx, node, sources, found)
    bound = kind_of(node).bound_params(node, cx.tools, cx.params)  # e.g. its tools' descriptions
    uses = uses._replace(instruction=tuple(dict.fromkeys(uses.instruction + bound)))
    cx.node_params[node.name] = uses
    for name in dict.fromkeys(uses.instruction + uses.system):
        check_param(cx, cx.params[name], node, allowed)


def template_sources(cx: Context, node: ir.Node) -> list[TemplateSource]:
    """The node's forward template, then its system message when that is a template (not a param)."""
    setting, system = node.setting("template"), node.setting("system")
    named = cx.templates.get(str(setting.value)) if setting else None
    sources = [
        TemplateSource(
            template_source(cx.p, node),
            named.literal if named else (setting.value_span if setting else node.span),
            f"template '{named.name}'" if named else ("the template" if setting else "its template"),
            setting is not None,
        )
    ]
    if system is not None and str(system.value) not in cx.params:
        of_system = cx.templates.get(str(system.value))
        label = f"template '{of_system.name}'" if of_system else "the system message"
        literal = of_system.literal if of_system else system.value_span
        sources.append(TemplateSource(system_source(cx.p, node) or "", literal, label, True))
    return sources


def check_demos_shown(cx: Context, node: ir.Node, source: TemplateSource, outside: Set[str]) -> bool:
    """Whether a template shows the node's own demos; demos of another node it shows are reported (E093)."""
    own = cx.demos.get(node.name)
    shown = False
    for name in sorted(n for n in outside if n in cx.params and cx.params[n].is_demos):
        if name == own:
            shown = True
            continue
        cx.report(
            "E093",
            cx.locate(source.literal, name),
            f"{source.label} shows the demos '{name}', but node '{node.name}' does not have them",
            help=f"add `demos = {name}` to node '{node.name}'",
        )
    return shown


def check_names_read(cx: Context, node: ir.Node, source: TemplateSource, used: Set[str], allowed: Set[str]) -> None:
    """A name a template reads that is both a param and an input (E078); `{{ prompt }}` without a prompt (E054)."""
    for name in sorted(n for n in used & allowed if n in cx.params and n not in ("prompt", "inputs")):
        where = cx.locate(source.literal, name)
        cx.report("E078", where, f"'{name}' is both a param and an input of node '{node.name}'", help="rename one")
    if source.explicit and "prompt" in used and node.setting("prompt") is None:
        cx.report("E054", node.span, f"node '{node.name}' has no prompt, but {source.label} uses '{{{{ prompt }}}}'")


def params_named(cx: Context, node: ir.Node, sources: list[TemplateSource], found: list[frozenset[str]]) -> NodeParams:
    """The params a node uses, in the order it names them: its prompt, those its template names, and those of its
    system message (a param itself, or those its template names)."""
    named = [  # params each source names, in the order it names them
        tuple(name for name in reads(source.text).order if name in params) if params else ()
        for source, params in zip(sources, found)
    ]
    prompt, system = node.setting("prompt"), node.setting("system")
    prompt_param = (str(prompt.value),) if prompt is not None and str(prompt.value) in cx.params else ()
    if system is not None and str(system.value) in cx.params:
        named.append((str(system.value),))
    return NodeParams(tuple(dict.fromkeys(prompt_param + named[0])), named[1] if len(named) > 1 else ())


def check_param(cx: Context, param: ir.Param, node: ir.Node, allowed: frozenset[str]) -> None:
    """A param a node uses: not longer than a prompt may be, and reading only the node's inputs."""
    if len(param.text) > MAX_OUTPUT_CHARS:
        cx.report(
            "E057",
            param.span,
            f"param '{param.name}' is {len(param.text):,} characters; a prompt may be at most {MAX_OUTPUT_CHARS:,}",
        )
        return
    if "{" not in param.text:  # plain text reads nothing
        return
    template_variables(
        cx,
        param.text,
        param.literal,
        allowed - {"prompt", "inputs"},
        ("E055", lambda name: f"param '{param.name}' uses '{name}', which node '{node.name}' does not receive"),
        what=f" in param '{param.name}'",
    )


def check_builtin_overrides(cx: Context) -> None:
    for template in cx.p.templates:
        if template.name in BUILTIN:
            allowed = BUILTIN[template.name]
            misuse = f"template '{template.name}' uses '{{}}'; it may use {', '.join(sorted(allowed))}"
            template_variables(cx, template.text, template.literal, allowed, ("E056", misuse.format), builtin=True)


def names_read(text: str) -> frozenset[str]:
    try:
        return variables(text)
    except TemplateProblem:
        return frozenset()
