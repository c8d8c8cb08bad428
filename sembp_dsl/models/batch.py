"""Model calls sent through a provider's batch API, at its batch price: OpenAI's files and batches endpoints
(upload a JSON Lines file of requests, create a batch with a 24 h window, wait, download its output file and
match each answer to its request by `custom_id`), through litellm's `create_file`, `create_batch`,
`retrieve_batch` and `file_content` (each in a thread).

`Batches` is a transport (transport.py): the LLM layer above it keeps its cache, shared calls in flight, ledger
and budgets, and its `send` returns when the batch holding the request is done. The calls a pipeline makes at
once (every sample's first nodes) are gathered until the event loop has been quiet for a while (`QUIET`
seconds and `TURNS` turns with no new request), then sent as one batch per model and endpoint: a round. The
answers let the nodes after them run, and their calls make the next round, so a pipeline of several steps takes
one batch per step (a tool loop, one per turn).

A batch's id is written to a journal (`batch.json` in the run's record folder) as soon as it is created, with
the `custom_id` of each request in it (a hash of the request as sent, with no key), so a run killed while it
waits finds its batches again (`resume`) instead of paying for them twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Option, SbpcError
from ..files import atomic_write
from ..language.messages import Capabilities, Message
from . import prices, wire
from .faults import BadReply, CallError, LLMError, first_line, is_call_error, redact
from .transport import (
    REWRITTEN,
    Litellm,
    Reply,
    Transport,
    _endpoint,
    _env_snapshot,
    import_litellm,
    serving,
)

JOURNAL = "batch.json"  # beside an evaluation's run.json: the batches it created (Journal)
PROVIDERS = ("openai",)  # whose batch API sbpc sends: litellm's create_batch takes a few more, none tested here
CHAT = "/v1/chat/completions"
WINDOW = "24h"
QUIET = 0.2  # seconds with no new request before a round is sent...
TURNS = 50  # ...and event-loop turns, so a loaded machine's slow loop never splits a round
POLL_SECONDS = 30.0  # between looks at a batch; SBPC_BATCH_POLL sets another
WAIT = 48 * 3600.0  # seconds a call waits for its batch: its window, and the time to finish and download
LOOK_AGAIN = 3  # failed looks at a batch in a row (a dropped connection in a day's wait) before giving up
DONE = ("completed", "failed", "expired", "cancelled")
UNRUN = {"expired": "batch expired", "cancelled": "batch cancelled"}  # a request a batch ended without running


class BatchFailed(SbpcError):
    """A batch the provider failed as a whole (its validation refused the file): none of its requests ran, so no
    sample of it has an answer, and the command stops with the provider's reasons."""


def refusal(role: str, name: str, settings: Mapping[str, Any]) -> str | None:
    """Why calls to the model `name` (of the role or named model `role`) cannot go through a batch API; None when
    they can."""
    said = f"the {role} model '{name}'"
    if settings.get("router"):
        return f"{said} is a router file's model group, whose deployments share no one batch API"
    if not issubclass(serving(name), Litellm):  # the embedded model (or another transport sent in process)
        return f"{said} runs in this process: it has no batch API"
    provider = name.split("/", 1)[0] if "/" in name else None
    if provider not in PROVIDERS:
        return f"{said} is served by {f'the provider {provider!r}' if provider else 'no provider named'}, whose batch API sbpc does not send"
    return None


def refuse(refusals: list[str]) -> LLMError:
    """The error for models that have no batch API sbpc sends, all named at once, with what works."""
    return LLMError(
        "; ".join(refusals),
        ".\n  ",
        Option("batch=True", "--batch"),
        " sends OpenAI's batch API (its /v1/files and /v1/batches endpoints): openai/... models, on OpenAI or an "
        "OpenAI-compatible server that serves those endpoints. Evaluate without it, or with such a model",
    )


def poll_seconds() -> float:
    """Seconds between looks at a batch: SBPC_BATCH_POLL, else POLL_SECONDS."""
    try:
        return max(0.0, float(os.environ.get("SBPC_BATCH_POLL", POLL_SECONDS)))
    except ValueError:
        return POLL_SECONDS


@dataclass(frozen=True)
class Batch:
    """How an evaluation's model calls go through the batch API: `progress` hears a line each time a batch's status
    or counts change, `poll` is the seconds between looks (default: SBPC_BATCH_POLL, else 30). A run a kill
    interrupted is resumed as any evaluation is (`resume=True`): its batches are found by the ids its record
    folder keeps (JOURNAL)."""

    progress: Callable[[str], None] | None = None
    poll: float = field(default_factory=poll_seconds)


class Journal:
    """The batches a run created, each with the `custom_id`s of its requests, kept in `path` (None: in memory) and
    written the moment one is created, so a killed run finds them again."""

    def __init__(self, path: Path | None):
        self.path = path
        self.batches: list[dict] = []
        if path is not None and path.exists():
            self.batches = list(json.loads(path.read_text(encoding="utf-8")).get("batches", []))

    def holding(self, custom_id: str) -> str | None:
        """The newest batch that holds this request, if any."""
        return next((b["id"] for b in reversed(self.batches) if custom_id in b["requests"]), None)

    def add(self, batch_id: str, model: str, endpoint: str | None, requests: list[str]) -> None:
        self.batches.append(
            {"id": batch_id, "model": model, "endpoint": endpoint, "created": time.time(), "requests": requests}
        )
        self.save()

    def ended(self, batch_id: str, status: str, counts: Mapping[str, int]) -> None:
        """A batch's last status and request counts, as the provider reported them."""
        for batch in self.batches:
            if batch["id"] == batch_id:
                batch.update(status=status, counts=dict(counts))
        self.save()

    def save(self) -> None:
        if self.path is not None:
            atomic_write(self.path, json.dumps({"batches": self.batches}, indent=1))

    def summary(self) -> dict:
        """What a run record says of its batches: ids, statuses and counts, and that their price is the batch one."""
        return {
            "price": "batch",
            "batches": [{k: b.get(k) for k in ("id", "model", "endpoint", "status", "counts")} for b in self.batches],
        }


@dataclass
class _Asked:
    """One request waiting for its round: its custom_id, the body sent, where, and the callers awaiting it."""

    custom_id: str
    body: dict
    where: tuple[str, str | None, str | None]  # model, api_base, api_key
    futures: list[asyncio.Future] = field(default_factory=list)


class Client:
    """OpenAI's files and batches endpoints through litellm, at one api_base with one key."""

    def __init__(self, api_base: str | None, api_key: str | None):
        self.where = {"custom_llm_provider": "openai", "api_base": api_base, "api_key": api_key}

    async def _call(self, what: str, function: str, **arguments: Any) -> Any:
        """litellm's `function`, in a thread, one call at a time; a failure as a CallError saying `what` was being
        done, named as litellm names it. Its sync functions, not their `a` twins: those run the sync ones in an
        executor anyway, and calls of them at once leave coroutines unawaited (`afile_content`'s)."""
        try:
            return await asyncio.to_thread(_alone, getattr(import_litellm(), function), **arguments, **self.where)
        except Exception as exc:
            if not is_call_error(exc):
                raise
            status = getattr(exc, "status_code", None)
            message = first_line(getattr(exc, "message", None) or str(exc))
            name = getattr(exc, "name", None) or type(exc).__name__
            raise CallError(f"{what}: {message}", status if isinstance(status, int) else None, name=name) from exc

    async def submit(self, lines: list[dict]) -> str:
        """Upload the requests and create their batch: its id."""
        data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
        uploaded = await self._call(
            "uploading the batch's requests", "create_file", file=("sbpc.jsonl", data), purpose="batch"
        )
        created = await self._call(
            "creating the batch",
            "create_batch",
            completion_window=WINDOW,
            endpoint=CHAT,
            input_file_id=uploaded.id,
            metadata={"made_by": "sbpc"},
        )
        return str(created.id)

    async def look(self, batch_id: str) -> Any:
        return await self._call(f"looking at batch {batch_id}", "retrieve_batch", batch_id=batch_id)

    async def download(self, file_id: str) -> bytes:
        content = await self._call(f"downloading file {file_id}", "file_content", file_id=file_id)
        return bytes(content.content)


SYNC = threading.Lock()  # litellm's sync file calls, one at a time


def _alone(function: Callable[..., Any], **arguments: Any) -> Any:
    with SYNC:
        return function(**arguments)


def _counts(batch: Any) -> dict[str, int]:
    counts = getattr(batch, "request_counts", None)
    return {k: int(getattr(counts, k, 0) or 0) for k in ("total", "completed", "failed")}


class Batches(Transport):
    """Chat completions sent through OpenAI's batch API (see the module's docstring), priced at the batch price of
    litellm's table (`prices.batch_cost`). `count` books named counters in the ledger."""

    def __init__(self, journal: Journal, batch: Batch, count: Callable[[str, int], None]):
        self.journal, self.batch, self.count = journal, batch, count
        self._waiting: list[_Asked] = []
        self._arrived = 0  # requests asked so far: a round is sent once this stops moving
        self._sender: asyncio.Task | None = None  # the task gathering the next round
        self._tasks: set[asyncio.Task] = set()  # the rounds being sent and waited for
        self._rounds = 0
        self._found: set[str] = set()  # the custom_ids this session took from a journal's batch: asked again, resent
        self._outputs: dict[str, asyncio.Future] = {}  # batch id -> its answers by custom_id, downloaded once

    def capabilities(self, model: str) -> Capabilities:
        """As litellm's table says of the model, and tools offered natively: OpenAI's chat completions take
        `tools=`, in a batch as at once."""
        found = super().capabilities(model)
        return Capabilities(found.constraint, tools=True, local=found.local)

    def price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        return prices.batch_cost(model, prompt_tokens, completion_tokens)

    def deadline(self, timeout: float) -> float:
        return WAIT

    async def send(self, model: str, messages: Sequence[Message], *, timeout: float, **params: Any) -> Reply:
        """The request's answer, once the batch of its round is done (`timeout` is the batch's window; headers,
        which no batch line carries, are not sent)."""
        api_base, api_key = params.pop("api_base", None), params.pop("api_key", None)
        params.pop("extra_headers", None)
        name = model.split("/", 1)[1] if model.startswith("openai/") else model
        if REWRITTEN.match(name) and "max_tokens" in params:  # as litellm rewrites it for these models
            params["max_completion_tokens"] = params.pop("max_tokens")
        sent = wire.encode(messages)
        body = {"model": name, "messages": sent, **{k: v for k, v in params.items() if v is not None}}
        endpoint = _endpoint(model, api_base, _env_snapshot())
        digest = hashlib.sha256(json.dumps([endpoint, body], sort_keys=True).encode()).hexdigest()
        asked = _Asked(f"sbpc-{digest[:40]}", body, (model, api_base, api_key))
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        asked.futures.append(future)
        self._waiting.append(asked)
        self._arrived += 1
        if self._sender is None:
            self._sender = asyncio.ensure_future(self._next_round())
            self._tasks.add(self._sender)
            self._sender.add_done_callback(self._tasks.discard)
        return await future

    async def _next_round(self) -> None:
        """Wait until no request has come for a while, then send those waiting as this round's batches."""
        while True:
            seen = self._arrived
            await asyncio.sleep(QUIET)
            for _ in range(TURNS):
                await asyncio.sleep(0)
            if self._arrived == seen:
                break
        taken, self._waiting, self._sender = self._waiting, [], None
        self._rounds += 1
        groups: dict[tuple, dict[str, _Asked]] = {}
        for asked in taken:  # the same request twice in a round is one line, answered to both
            same = groups.setdefault(asked.where, {}).setdefault(asked.custom_id, asked)
            if same is not asked:
                same.futures += asked.futures
        try:
            await asyncio.gather(*(self._group(where, list(asked.values())) for where, asked in groups.items()))
        except Exception as exc:  # sbpc's own fault: every caller hears it rather than waiting for ever
            _tell(taken, exc)
            raise

    async def aclose(self) -> None:
        """Stop waiting for batches (their ids stay in the journal: a resumed run finds them)."""
        pending = [t for t in [*self._tasks, *self._outputs.values()] if not t.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _group(self, where: tuple[str, str | None, str | None], asked: list[_Asked]) -> None:
        """One model's requests of a round: those a journal's batch holds are answered from it; the rest go in a new
        batch. Every caller hears its answer or why there is none."""
        model, api_base, api_key = where
        client = Client(api_base, api_key)
        by_batch: dict[str, list[_Asked]] = {}
        fresh: list[_Asked] = []
        for a in asked:
            held = None if a.custom_id in self._found else self.journal.holding(a.custom_id)
            (by_batch.setdefault(held, []) if held else fresh).append(a)
            if held:
                self._found.add(a.custom_id)
        try:
            if fresh:
                batch_id = await client.submit(
                    [{"custom_id": a.custom_id, "method": "POST", "url": CHAT, "body": a.body} for a in fresh]
                )
                self.journal.add(batch_id, model, redact(api_base), [a.custom_id for a in fresh])
                self.count("batches sent", 1)
                by_batch[batch_id] = fresh
        except Exception as exc:  # no batch was made: every request of it hears why
            _tell(fresh, exc)
        await asyncio.gather(*(self._answer(client, model, b, waiting) for b, waiting in by_batch.items()))

    async def _answer(self, client: Client, model: str, batch_id: str, asked: list[_Asked]) -> None:
        """The answers of one batch to its waiting requests: successes first, so a command's stop-early rule sees
        that calls work before it sees the batch's failures."""
        if batch_id not in self._outputs:
            self._outputs[batch_id] = asyncio.ensure_future(self._outcome(client, model, batch_id, len(asked)))
        try:
            answers = await self._outputs[batch_id]
        except BaseException as exc:
            _tell(asked, exc)
            return
        missing = answers.get(None)
        found = [(a, answers.get(a.custom_id, missing)) for a in asked]
        for a, answer in sorted(found, key=lambda pair: not isinstance(pair[1], Reply)):
            for future in a.futures:
                if future.done():
                    continue
                if isinstance(answer, Reply):
                    self.count("calls priced at batch rates", 1)
                    future.set_result(answer)
                else:
                    future.set_exception(answer)

    async def _outcome(self, client: Client, model: str, batch_id: str, size: int) -> dict:
        """Wait for the batch to end, then its answers by custom_id (under None: what a request it has no line for
        gets). BatchFailed when the provider failed it whole."""
        ended = await self._ended(client, batch_id, size)
        status = str(ended.status)
        self.journal.ended(batch_id, status, _counts(ended))
        if status == "failed":
            raise BatchFailed(_failed(batch_id, ended))
        lines, unread = [], []
        for file_id in (getattr(ended, "output_file_id", None), getattr(ended, "error_file_id", None)):
            if file_id:
                lines += (await client.download(str(file_id))).decode("utf-8", "replace").splitlines()
        answers: dict[str | None, Reply | Exception] = {}
        for number, line in enumerate(lines, start=1):
            if line.strip():
                read = _line(line, model, batch_id)
                if isinstance(read, str):
                    unread.append(f"line {number}: {read}")
                else:
                    answers[read[0]] = read[1]
        answers[None] = _missing(batch_id, status, unread)
        if unread:
            self.count("batch output lines that could not be read", len(unread))
        return answers

    async def _ended(self, client: Client, batch_id: str, size: int) -> Any:
        """The batch once it has ended, looked at every `poll` seconds; each change of its status or counts told."""
        said, failed = None, 0
        while True:
            try:
                batch = await client.look(batch_id)
                failed = 0
            except CallError:
                failed += 1
                if failed >= LOOK_AGAIN:
                    raise
                await asyncio.sleep(self.batch.poll)
                continue
            counts = _counts(batch)
            line = (
                f"batch {batch_id} (round {self._rounds}, {counts['total'] or size} requests): {batch.status}, "
                f"{counts['completed']} done, {counts['failed']} failed"
            )
            if line != said and self.batch.progress is not None:
                self.batch.progress(line)
            said = line
            if batch.status in DONE:
                return batch
            await asyncio.sleep(self.batch.poll)


def _tell(asked: list[_Asked], exc: BaseException) -> None:
    for a in asked:
        for future in a.futures:
            if not future.done():
                future.set_exception(exc)


def _failed(batch_id: str, batch: Any) -> str:
    """Why the provider failed a batch, in its words, line by line (the first five)."""
    errors = getattr(getattr(batch, "errors", None), "data", None) or []
    said = [
        f"line {getattr(e, 'line', None) or '?'}: {getattr(e, 'message', None) or getattr(e, 'code', None)}"
        for e in errors[:5]
    ]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return (
        f"batch {batch_id} failed: {'; '.join(said) or 'the provider gave no reason'}{more}; none of its requests ran"
    )


def _line(text: str, model: str, batch_id: str) -> tuple[str, Reply | Exception] | str:
    """An output (or error) file's line: its custom_id and the answer or why there is none; what is wrong with it
    when it cannot be read."""
    try:
        line = json.loads(text)
    except ValueError:
        return f"not JSON ({text[:60]!r})"
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        return "no custom_id"
    response, error = line.get("response"), line.get("error")
    custom_id = line["custom_id"]
    if isinstance(response, dict) and response.get("status_code") == 200:
        body = response.get("body")
        try:
            reply = wire.reply_of(body if isinstance(body, dict) else {}, model)
        except BadReply as exc:
            return custom_id, exc
        return custom_id, reply._replace(cost=prices.batch_cost(model, reply.prompt_tokens, reply.completion_tokens))
    if isinstance(response, dict):
        body = response.get("body")
        detail = body.get("error") if isinstance(body, dict) else None
        message = detail.get("message") if isinstance(detail, dict) else str(body)[:300]
        status = response.get("status_code")
        return custom_id, CallError(f"in batch {batch_id}: {message}", status if isinstance(status, int) else None)
    if isinstance(error, dict):
        code = str(error.get("code") or "batch request failed")
        return custom_id, CallError(f"in batch {batch_id}: {error.get('message') or code}", name=code.replace("_", " "))
    return "neither a response nor an error"


def _missing(batch_id: str, status: str, unread: list[str]) -> CallError:
    """What a request gets when its batch's files have no line for it."""
    if status in UNRUN:
        return CallError(f"batch {batch_id} ended {status} before this request ran", name=UNRUN[status])
    why = f"; {len(unread)} of its lines could not be read ({'; '.join(unread[:3])})" if unread else ""
    return CallError(
        f"batch {batch_id} ({status}) has no line for this request{why}", name="missing from the batch output"
    )
