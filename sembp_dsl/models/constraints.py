"""Which decoding constraint a model is held to, and the request parameters that carry it.

A reply's shape (language/nodes/shapes.py) reaches the model in the form its provider takes:

Which form a model takes is its transport's to say (transport.py: `Transport.capabilities`):

- `grammar`: the embedded model (llama.cpp) decodes within the reply's GBNF grammar; the reply is the text
  itself. max_tokens sizes it in characters (CHARS_PER_TOKEN a token), and the call may take a token per
  character, so a reply always ends closed. A field that reaches its bound is closed by the grammar, not
  by the model: such a reply is cut off (`cut_at_bound`), and says so as a reply cut by max_tokens does.
- `schema`: a model that litellm says takes a JSON Schema (`litellm.supports_response_schema`: its model
  table, and every model of the providers it names) gets the reply's JSON Schema in `response_format`;
  the JSON it answers is written back into the text the parsers read (`Shape.text`).
- `none`: every other model (one litellm does not know, such as your own server's; a Router's model group,
  whose deployments may differ), a shape without a JSON Schema (`json`), and any model whose block says
  `constrain = off`. `constrain = schema` sends the JSON Schema to a model litellm does not know (your own
  vLLM or llama-server, which take one).

The constraint is part of the request, so it is part of the cache key: a constrained reply is never
served for an unconstrained request, nor the other way round.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..language.graph.graph import Graph
from ..language.nodes.shapes import CHARS_PER_TOKEN, Shape, hints_shape, node_shape
from .transport import Transport, serving

GRAMMAR, SCHEMA, NONE = "grammar", "schema", "none"


def form(name: str, settings: Mapping, transport: Transport) -> str:
    """The constraint the model `name` gets, with these settings, from the transport that sends its calls:
    GRAMMAR, SCHEMA or NONE."""
    asked = settings.get("constrain", "auto")
    if asked == "off":
        return NONE
    takes = transport.capabilities(name).constraint
    if takes == GRAMMAR:
        return GRAMMAR
    if asked == "schema":  # the user knows their server takes one (vLLM, llama-server, Ollama's /v1)
        return SCHEMA
    if settings.get("router"):
        return NONE
    return takes


def request(shape: Shape | None, kind: str, max_tokens: int | None) -> dict:
    """The request parameters that carry a shape in the form `kind` ({}: no constraint)."""
    if shape is None or kind == NONE:
        return {}
    if kind == GRAMMAR:  # the reply is at most CHARS_PER_TOKEN x max_tokens characters, each one token at most
        return {
            "grammar": shape.grammar(max_tokens),
            **({"max_tokens": reply_tokens(kind, max_tokens)} if max_tokens else {}),
        }
    schema = shape.schema()
    if schema is None:
        return {}
    return {"response_format": response_format(schema)}


def schema_request(schema: dict, kind: str, max_tokens: int | None) -> dict:
    """The request parameters that hold a turn of a tool loop's text form to its JSON `schema` ({}: no
    constraint). The embedded transport makes a grammar of it, so the call's max_tokens is a grammar's."""
    if kind == NONE:
        return {}
    bound = reply_tokens(kind, max_tokens)
    return {"response_format": response_format(schema), **({"max_tokens": bound} if bound else {})}


def response_format(schema: dict) -> dict:
    """A reply's JSON Schema as `response_format` carries it."""
    return {"type": "json_schema", "json_schema": {"name": "reply", "strict": True, "schema": schema}}


def reply_tokens(kind: str, max_tokens: int | None) -> int | None:
    """The most tokens one call may take. Under a grammar, max_tokens sizes the reply in characters
    (CHARS_PER_TOKEN a token, as English runs) and the call may take a token per character, so a reply
    dense in tokens (digits are a token each) still closes in shape instead of being cut mid-part."""
    return max_tokens and CHARS_PER_TOKEN * max_tokens if kind == GRAMMAR else max_tokens


def read(shape: Shape | None, sent: dict, text: str) -> str:
    """A reply as the parsers read it: the JSON answered to a schema, written out in the shape's text form."""
    return shape.text(text) if shape is not None and "response_format" in sent else text


def cut_at_bound(shape: Shape | None, kind: str | None, max_tokens: int | None, text: str) -> bool:
    """Whether the grammar ended a reply because a field reached its share of max_tokens: closed by the
    grammar, not by the model, so cut off as surely as by the token limit."""
    return kind == GRAMMAR and shape is not None and shape.ran_out(text, max_tokens)


@dataclass(frozen=True)
class Reply:
    """One reply sbpc parses, the model that writes it (a role's, or a named one a node names), and its shape."""

    model: str
    what: str
    shape: Shape


def replies(graph: Graph) -> Iterator[Reply]:
    """Every shaped reply the graph's method reads: each typed node's, each backward question's (both
    gradient modes), each trainable param's optimizer reply."""
    for node in graph.model_nodes:
        shape = node_shape(node.type, node.parse)
        if shape is not None:
            yield Reply(node.model, f"node {node.name}", shape)
    for node in graph.nodes.values():
        if node.hints:
            yield Reply(
                "backward", f"{node.name}: backward (all {len(node.hints)} hints)", hints_shape(len(node.hints))
            )
            yield Reply("backward", f"{node.name}: backward, no sibling (each hint)", hints_shape(1))
    for param in graph.trainable:
        yield Reply("optimizer", f"{param}: optimizer", graph.candidate_shape(param))


def emit(graph: Graph, names: Mapping[str, str | None]) -> str:
    """What would be sent for every shaped reply (`sbpc compile --emit constraints`), given each model's name
    (a role's or a named one; None: no model)."""
    sections = []
    for reply in replies(graph):
        name, settings = names[reply.model], graph.models[reply.model].settings
        kind = NONE if name is None else form(name, settings, serving(name)())
        head = f"=== {reply.what}: {reply.shape.name}; {reply.model} model {name or '(none)'}: {kind} ==="
        sent = request(reply.shape, kind, max_tokens(settings))
        if "grammar" in sent:
            body = sent["grammar"].rstrip("\n")
        elif "response_format" in sent:
            body = "response_format = " + json.dumps(sent["response_format"], indent=2, ensure_ascii=False)
        else:
            body = f"(no constraint: {why_none(name, settings, kind)})"
        sections.append(f"{head}\n{body}")
    return "\n\n".join(sections) or "(no reply sbpc parses has a shape: every node is text and nothing is trained)"


def max_tokens(settings: Mapping) -> int | None:
    """A role's max_tokens setting (an integer: the checker holds it so)."""
    value = settings.get("max_tokens")
    return None if value is None else int(value)


def why_none(name: str | None, settings: Mapping, kind: str) -> str:
    """Why a shaped reply goes unconstrained to a model that gets the constraint `kind`."""
    if name is None:
        return "no model is configured for this role"
    if settings.get("constrain") == "off":
        return "constrain = off"
    if settings.get("router"):
        return "a Router's deployments may take different forms"
    if kind == SCHEMA:
        return "a JSON Schema cannot state this shape"
    return f"litellm does not list {name} as taking a JSON Schema"
