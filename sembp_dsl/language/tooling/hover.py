"""What hover shows: a declared name in Markdown (what it is, and what uses it or feeds it), and the words of
the setting under the cursor."""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..blocks.method import SETTINGS as METHOD
from ..blocks.method import STRATEGIES
from ..check.context import IDENTIFIER, MODEL_ROLES, Analysis
from ..graph.graph import model_specs
from ..kinds import KINDS, kind_of
from ..nodes import maps
from ..nodes.demos import limit
from ..nodes.templates import BUILTIN, TemplateProblem, variables

SETTING_HELP = {  # every setting's words but a kind's own (its `help`, asked when hovered): a map's, a declaration's
    **maps.HELP,
    "description": "a function's description as a tool: a param (trained, written back) or, by default, its docstring",
    "prompt": "the param rendered as `{{ prompt }}` in the node's template",
    "template": "a declared template, or inline Jinja2; default: the prompt, then one `Label: value` line per input",
    "parse": "`reply` (default): the whole reply; `tag`: the text inside <output>...</output>",
    "model": "the model the node's calls go to: a role, or a `model NAME { }` block (default: forward)",
    "system": "a param or template sent as the system message, rendered with the node's inputs",
    "demos": "a demos param: examples of this node's inputs and output, shown where its template names it",
    "name": "the model: any litellm model string, such as `openai/gpt-4o-mini`, or `embedded/smollm2-135m`",
    "temperature": "sampling temperature, 0 to 2 (default 0)",
    "top_p": "nucleus sampling, 0 to 1",
    "max_tokens": "reply length limit",
    "seed": "sampling seed",
    "api_base": "base URL of an OpenAI-compatible server",
    "api_key_env": "the environment variable holding this model's key",
    "timeout": "seconds a call may take (a model's request, or a function node's call)",
    "stop": "one stop sequence",
    "router": "a litellm Router config file, relative to the pipeline; `name` is one of its model groups",
    "concurrency": "calls of this model in flight at most",
    "rpm": "requests per minute, kept before sending",
    "tpm": "tokens per minute, kept before sending",
    "input_price": "dollars per million prompt tokens: the price sbpc charges and plans with (before litellm's)",
    "output_price": "dollars per million completion tokens: the price sbpc charges and plans with",
    "models": "the named models the optimizer may move a node to, e.g. [fast, strong] (a node's own list, or "
    "the optimize block's for every node)",
    **{name: setting.help for name, setting in METHOD.items()},
}


def setting_help(key: str) -> str | None:
    """A setting's words; the strategies' are read from STRATEGIES and a kind's own from the kind in KINDS when
    asked, one line in either adding one."""
    if key == "strategies":
        listed = "; ".join(f"{name}: {does}" for name, does in STRATEGIES.items())
        return f"the strategies a step may use (default: all). {listed}"
    own = (kind.help[key] for kind in KINDS.values() if key in kind.help)
    return SETTING_HELP.get(key, next(own, None))


def setting_hover(pipeline: ir.Pipeline | None, offset: int) -> str | None:
    """The words of the setting under the cursor (None: no setting there, or one without words)."""
    key = setting_at(pipeline, offset)
    if key is None:
        return None
    words = setting_help(key)
    return f"**{key}**: {words}" if words is not None else None


def setting_at(pipeline: ir.Pipeline | None, offset: int) -> str | None:
    """The key of the setting at `offset`, of any node, block, function or metric."""
    if pipeline is None:
        return None
    p = pipeline
    holders: list[ir.Node | ir.Block | ir.Function | ir.MetricDef] = [*p.nodes, *p.blocks, *p.functions]
    settings = [s for holder in (*holders, *p.metric_defs) for s in holder.settings]
    return next((s.key for s in settings if s.span.start <= offset <= s.span.end), None)


@dataclass(frozen=True)
class Hover:
    """What hover shows of the names a pipeline declares, with the edges the checker found (None: it failed)."""

    pipeline: ir.Pipeline
    analysis: Analysis | None

    def describe(self, namespace: str, name: str) -> str | None:
        """What hover shows for a name, in Markdown (None: nothing declared by that name)."""
        describers = {
            "param": self.describe_param,
            "template": self.describe_template,
            "function": self.describe_function,
            "node": self.describe_node,
            "model": self.describe_model,
            "mcp": self.describe_server,
        }
        describer = describers.get(namespace)
        return describer(name) if describer else None

    def users(self, key: str, name: str) -> str:
        """The nodes whose setting `key` names `name`, as hover lists them."""
        p = self.pipeline
        return ", ".join(n.name for n in p.nodes if (s := n.setting(key)) and s.value == name) or "no node"

    def describe_param(self, name: str) -> str | None:
        p = self.pipeline
        param = p.param(name)
        if param is None:
            return None
        if param.is_demos:
            return self.describe_demos(param)
        analysis = self.analysis
        users = [
            node
            for node, uses in (analysis.params.items() if analysis else ())
            if name in uses.instruction or name in uses.system
        ] or [n.name for n in p.nodes if (s := n.setting("prompt")) and s.value == name]
        head = f"{'frozen ' if param.frozen else ''}param **{name}**" + (
            " (never rewritten by the optimizer)" if param.frozen else " (the optimizer may rewrite it)"
        )
        return f"{head}\n\n```text\n{param.text}\n```\n\nused by: {', '.join(users) or 'no node'}"

    def describe_demos(self, param: ir.Param) -> str:
        head = f"{'frozen ' if param.frozen else ''}demos **{param.name}**" + (
            " (never changed by the optimizer)"
            if param.frozen
            else f" (the optimizer may pick up to {limit(param) or '?'} examples)"
        )
        return f"{head}: {len(param.demos or ())} examples\n\nused by: {self.users('demos', param.name)}"

    def describe_template(self, name: str) -> str | None:
        p = self.pipeline
        template = next((t for t in p.templates if t.name == name), None)
        if template is None:
            return None
        try:
            names = ", ".join(sorted(variables(template.text))) or "none"
        except TemplateProblem as exc:
            names = f"(does not compile: {exc.message})"
        users = [n.name for n in p.nodes for key in ("template", "system") if (s := n.setting(key)) and s.value == name]
        override = (
            f"\n\noverrides the built-in `{name}` template; it may use {', '.join(sorted(BUILTIN[name]))}"
            if name in BUILTIN
            else f"\n\nused by: {', '.join(users) or 'no node'}"
        )
        return f"template **{name}**\n\nvariables: {names}{override}"

    def describe_function(self, name: str) -> str | None:
        p = self.pipeline
        function = next((f for f in p.functions if f.name == name), None)
        if function is None:
            return None
        users = [n.name for n in p.nodes if name in kind_of(n).functions(n)]
        return (
            f"function **{name}**: `{function.target}`\n\nPython code, imported only when the pipeline runs (from "
            f"beside the pipeline, or a module allowed with --allow-module)\n\nused by: {', '.join(users) or 'no node'}"
        )

    def describe_server(self, name: str) -> str | None:
        p = self.pipeline
        block = next((b for b in p.blocks if b.kind == "mcp" and b.name == name), None)
        if block is None:
            return None
        where = next((f"`{s.value}`" for s in block.settings if s.key in ("command", "url")), "nowhere yet")
        users = [n.name for n in p.nodes if any(t.startswith(f"{name}.") for t in kind_of(n).functions(n))]
        return (
            f"MCP server **{name}**: {where}\n\nits tools are `{name}.TOOL`, their schemas from the lock "
            f"(`sbpc tools sync`)\n\nused by: {', '.join(users) or 'no node'}"
        )

    def describe_model(self, name: str) -> str:
        p = self.pipeline
        spec = model_specs(p)
        shown = [name] if name in spec else list(MODEL_ROLES)  # the unnamed block: every role
        lines = [f"- {r}: {spec[r].name or 'chosen at run time'}" for r in shown]
        if name not in MODEL_ROLES:
            lines.append(f"- used by: {self.users('model', name)}")
        return f"model **{name}**\n\n" + "\n".join(lines)

    def describe_node(self, name: str) -> str | None:
        """An input (its type, what it feeds) or a node (what it calls, its inputs, what it feeds)."""
        p = self.pipeline
        item = next((i for i in p.inputs if i.name == name), None)
        if item is not None:
            field_ = f", reads the field `{item.field}`" if item.field else ""
            return f"input **{name}**: {item.type}{field_}\n\nfeeds: {self.neighbours(name)[1] or 'no node'}"
        node = next((n for n in p.nodes if n.name == name), None)
        if node is None:
            return None
        inputs, feeds = self.neighbours(name)
        kind = kind_of(node)
        called = kind.functions(node)
        if not kind.prompted:
            facts = [
                f"calls the function {called[0] if called else '?'}, no model",
                f"inputs (its keyword arguments): {inputs or 'none'}",
            ]
        else:
            facts = self.model_node_facts(node, inputs) + (
                [f"may call the tools {', '.join(called)}"] if called else []
            )
        if feeds:
            facts.append(f"feeds: {feeds}")
        if kind.prompted and p.outputs and p.outputs[0].node.name == name:
            facts.append("the pipeline's output")
        return f"node **{name}**: {node.type}\n\n" + "\n".join(f"- {fact}" for fact in facts)

    def neighbours(self, name: str) -> tuple[str, str]:
        """The inputs and nodes a name reads from, and the nodes it feeds, as hover lists them ("": unknown)."""
        analysis = self.analysis
        if analysis is None:
            return "", ""
        return ", ".join(analysis.predecessors.get(name, ())), ", ".join(analysis.successors.get(name, ()))

    def model_node_facts(self, node: ir.Node, inputs: str) -> list[str]:
        """A model node's model, inputs, and the settings that shape its prompt and reply."""
        p = self.pipeline
        own = node.setting("model")
        role = str(own.value) if own is not None else "forward"
        spec = model_specs(p).get(role)
        model = (spec.name if spec else None) or "chosen at run time (--model, or the embedded model)"
        facts = [f"model: {model if role == 'forward' else f'{role} ({model})'}", f"inputs: {inputs or 'none'}"]
        for key in ("prompt", "template", "system", "parse"):
            setting = node.setting(key)
            if setting is not None:
                value = str(setting.value)
                facts.append(f"{key}: {value if IDENTIFIER.match(value) else 'inline'}")
        return facts
