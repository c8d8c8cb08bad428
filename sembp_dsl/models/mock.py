"""A transport for tests: replies from Python, in process, no socket; every request it received, kept.

    mock = MockTransport(lambda request: "Yes" if "urgent" in request.prompt else "No")
    llm = LLM(models, transport=mock)
    llm.run(llm.complete("forward", "Is it urgent?"))  # the whole layer: cache, ledger, retries, shapes
    mock.requests[0].params  # what was sent: sampling settings, a grammar or a response_format

A reply is a str (tokens counted a word a token, free) or a whole `Reply`; a reply function may raise
faults.CallError to fail the attempt as a server would (`CallError("busy", 503)` is retried).
Tests that need real HTTP (timeouts, TLS, proxies) keep the loopback fake server (tests/fake_server.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..language.messages import Capabilities, Message
from .transport import Reply, Transport


@dataclass(frozen=True)
class Sent:
    """One request as the transport received it."""

    model: str
    messages: tuple[Message, ...]
    params: dict  # what was sent besides the messages: sampling settings, api_base, a grammar or a response_format
    timeout: float

    @property
    def prompt(self) -> str:
        """The last message's text."""
        return self.messages[-1].content or ""


class MockTransport(Transport):
    """Answers each request with `replies(request)`, or with the next of a list of replies. `grammar`, `schema`:
    whether its models take a reply's shape as a GBNF grammar or as a JSON Schema (the replies must keep to it,
    as such a model's would); `tools`: whether they call tools natively (a reply is then a `Reply` with
    `calls`)."""

    def __init__(
        self,
        replies: Callable[[Sent], str | Reply] | Sequence[str | Reply],
        *,
        grammar: bool = False,
        schema: bool = False,
        tools: bool = False,
    ) -> None:
        self.requests: list[Sent] = []
        constraint = "grammar" if grammar else "schema" if schema else "none"
        self._capabilities = Capabilities(constraint, tools)
        self._replies = replies

    async def send(self, model: str, messages: Sequence[Message], *, timeout: float, **params: Any) -> Reply:
        request = Sent(model, tuple(messages), params, timeout)
        self.requests.append(request)
        if callable(self._replies):
            answer = self._replies(request)
        elif len(self.requests) <= len(self._replies):
            answer = self._replies[len(self.requests) - 1]
        else:
            raise LookupError(f"MockTransport was given {len(self._replies)} replies and asked for another")
        if isinstance(answer, Reply):
            return answer
        prompt_tokens = sum(len((message.content or "").split()) for message in messages)
        return Reply(answer, prompt_tokens, len(answer.split()), 0.0, "stop")

    def capabilities(self, model: str) -> Capabilities:
        return self._capabilities

    def price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        return 0.0
