"""What a kind of node is: everything the compiler, the runtime and the optimizer ask of a node, answered by
its kind, so that none of them asks which kind a node is.

A kind sits below the checker, the graph and the runtime, which ask it; it sees each of them through a small
Protocol here (`Checking`, `Compiled`, `Model`), never by importing them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cached_property
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from .. import ir
from ..codes.code import Code
from ..diagnostics import Note
from ..messages import Ask, Capabilities, Turn
from ..nodes.node import NO_SETTINGS, GraphNode
from ..nodes.trace import NodeTrace, Shown

# The settings of a node that renders a prompt and sends it to a model: key -> accepted Python types, or the
# tuple of allowed words (as check/settings.py's check_settings reads them).
PROMPT_SETTINGS: Mapping[str, tuple] = {
    "prompt": (str,),
    "template": (str,),
    "parse": ("reply", "tag"),
    "model": (str,),
    "models": (tuple,),  # the models the optimizer may move it to (beside the optimize block's `models`)
    "system": (str,),
    "demos": (str,),
}


class Checking(Protocol):
    """What a kind's own checks read and report through: the checker's Context."""

    p: ir.Pipeline  # the file checked (its path says where the modules beside it are)

    @property
    def functions(self) -> Mapping[str, ir.Function]: ...  # the file's `function` declarations, by name

    def report(
        self, code: str, span: ir.Span | None, message: str, help: str = "", notes: Sequence[Note] = ()
    ) -> None: ...


class Compiled(Protocol):
    """What a kind reads of the graph it runs in: language/graph/graph.py's Graph."""

    @property
    def pipeline(self) -> ir.Pipeline: ...

    @property
    def prompts(self) -> Mapping[str, str]: ...  # every param's current text

    @property
    def functions(self) -> Mapping[str, Callable[..., Any]]: ...  # the callables bound at run time

    def type_of(self, name: str) -> ir.OutputType: ...


class Model(Protocol):
    """The model calls a kind makes, as the runtime offers them (runtime/forward.py, over models/llm.py).

    Every kind asks through one door, `ask`, with the typed messages of language/messages.py; a call that failed
    for good comes back as a lost NodeTrace, not as an exception, so no kind needs the models stage."""

    async def ask(self, node: str, ask: Ask, model: str) -> Turn | NodeTrace:
        """Ask `model` (a role or a named model) for one reply: a prompt held to a reply's shape, or a turn of a
        conversation with tools (offered natively, or each reply held to the text form's JSON Schema). A call that
        failed for good is a lost NodeTrace of the node, its prompt for the kind to fill in."""
        ...

    def capabilities(self, model: str) -> Capabilities:
        """What `model` is held to and offered: whether a reply's JSON Schema reaches it (else a record's fields
        are told in words), whether it calls tools natively (else a tool loop holds it to the text form)."""
        ...

    def count(self, event: str, n: int = 1) -> None:
        """Count an event on the run's ledger ("forward parse failures", "function failures", "tool steps")."""
        ...


class NodeKind(ABC):
    """A kind of node, one class in one module (language/kinds/), registered by one line in KINDS.

    A node is of the kind whose `marker` setting it has (`function = search`), else a model call. Each question
    below is one the compiler asks of every node; a new kind answers them and so needs no change elsewhere."""

    name: ClassVar[str]  # its key in KINDS and in a GraphNode's `kind`
    marker: ClassVar[str | None] = None  # the setting that makes a node of this kind; None: the default kind
    settings: ClassVar[Mapping[str, tuple]] = MappingProxyType({})  # its own settings, each with what it accepts
    help: ClassVar[Mapping[str, str]] = MappingProxyType({})  # each of its own settings, in words (editor hover)
    prompted: ClassVar[bool] = True  # it renders a prompt: takes PROMPT_SETTINGS, its templates are checked
    trace_keys: ClassVar[tuple[str, ...]] = ()  # the keys of its own data on a trace (NodeTrace.extra), if any
    codes: ClassVar[tuple[Code, ...]] = ()  # the codes only its checks report, with their `sbpc explain` pages

    @cached_property
    def accepts(self) -> Mapping[str, tuple]:
        """Every setting a node of this kind takes, and what each accepts (the checker's E030-E034)."""
        return {**PROMPT_SETTINGS, **self.settings} if self.prompted else self.settings

    def refuse(self, cx: Checking, node: ir.Node, setting: ir.Setting) -> None:
        """Report a setting another kind takes but this one does not, saying why."""
        cx.report("E030", setting.span, f"unknown setting '{setting.key}' in node '{node.name}'")

    def check(self, cx: Checking, node: ir.Node) -> None:  # noqa: B027 (optional: a kind may add no rules)
        """Its own rules, beyond its settings' types and the rules of a prompt (which the checker applies)."""

    def functions(self, node: ir.Node) -> tuple[str, ...]:
        """The declared functions a node of this kind calls: they count as used (W010), and only they are
        imported at run time (runtime/code.py)."""
        return ()

    def bound_params(
        self, node: ir.Node, functions: Mapping[str, ir.Function], params: Mapping[str, ir.Param]
    ) -> tuple[str, ...]:
        """Params a node of this kind uses beyond those its templates name (a tool's description): they are part
        of its instruction, and the optimizer gives them its feedback."""
        return ()

    def own(self, node: ir.Node) -> Mapping[str, ir.Value]:
        """Its own settings as its GraphNode keeps them (`settings`), for it to read when it runs."""
        own = {s.key: s.value for s in node.settings if s.key in self.settings}
        return own or NO_SETTINGS

    @abstractmethod
    def model_calls(self, node: GraphNode) -> int:
        """The most model calls one sample makes at this node: what the plan counts (0: it calls no model)."""

    @abstractmethod
    async def forward(self, node: GraphNode, graph: Compiled, model: Model, values: Mapping[str, str]) -> NodeTrace:
        """Run the node on one sample, given its predecessors' values; what fails is on the trace, never raised."""

    @abstractmethod
    def instruction(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> str:
        """What the backward model is shown as this node's instruction."""

    @abstractmethod
    def label(self, node: GraphNode) -> str:
        """Its line in a DOT or Mermaid chart: `name: type`, and what it calls when that is not the default."""

    @abstractmethod
    def sections(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> Iterator[str]:
        """Its forward part of `sbpc compile --emit prompts`, with `<name>` placeholders for `values`."""

    def shown(self, extra: Mapping[str, Any], full: bool) -> Sequence[Shown]:
        """Its own data on a trace (its `trace_keys` of NodeTrace.extra, as JSON: a run record's too, so read it
        as a stranger's) as people are shown it: by `run --trace` (`full`), `sbpc show` and the HTML report (a
        short form). The displays render what it returns, and ask nothing else of a kind's data."""
        return ()

    def trajectory(self, trace: NodeTrace) -> str | None:
        """How it came to its reply, in a few lines for the backward model (a tool loop's calls): shown after the
        reply to its backward question and to the loss. None: the reply says it all."""
        return None
