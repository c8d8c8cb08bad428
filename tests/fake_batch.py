"""OpenAI's batch API on the loopback fake server: files and batches, each request line answered as
fake_server.py answers a chat completion (the same replies, tokens, faults and counters).

Endpoints (beside the fake server's own)
----------------------------------------
``POST /v1/files`` (multipart: ``purpose``, ``file``), ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``,
``POST /v1/batches``, ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``.

A batch is validated when it is created, as OpenAI's is (every line JSON with a unique ``custom_id``, ``POST``
to the batch's endpoint, one model): a bad file is a ``failed`` batch whose ``errors`` say which line and why.
It is ``in_progress`` at its first retrieval and runs at the next (while ``hold`` is false): every line is
answered by the chat server, the answers go to the output file, failed requests to the error file.

Outcomes a test may ask for: ``hold`` (batches wait in progress until it is false again; a number n: those
after the nth), ``expire`` (the batch
expires with only its first half of lines run; the rest are ``batch_expired`` in the error file), ``fail``
(validation fails with this message), ``malformed`` (that many output lines are not JSON), ``dropped`` (that many
lines are left out of the output file).

    with FakeBatchServer(reply=script) as server:
        ... sbpc eval --batch --api-base {server.url} ...
        assert server.batches_created == 1
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from typing import Any

from fake_server import FakeServer, _answer, _error_body, _response

CHAT = "/v1/chat/completions"


def _parts(body: bytes, content_type: str) -> dict[str, bytes]:
    """The fields of a multipart/form-data body, by name."""
    found = re.search(r'boundary="?([^";]+)"?', content_type)
    if not found:
        return {}
    fields = {}
    for part in body.split(b"--" + found.group(1).encode())[1:]:
        head, _, value = part.partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]+)"', head)
        if name:
            fields[name.group(1).decode()] = value.removesuffix(b"\r\n")
    return fields


def _answered(raw: bytes) -> tuple[int, Any]:
    """The status and JSON body of an HTTP answer the chat server made (None for a body that is not JSON)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


class _Never:
    """A connection's reader that never ends: a batch line has no client to hang up."""

    def at_eof(self) -> bool:
        return False


class FakeBatchServer(FakeServer):
    """The fake chat server with OpenAI's files and batches endpoints. Counters: ``batches_created``,
    ``uploads``, ``retrievals``, ``downloads``; ``batches`` (id -> the batch as last served)."""

    def __init__(
        self,
        *,
        hold: bool | int = False,
        expire: bool = False,
        fail: str | None = None,
        malformed: int = 0,
        dropped: int = 0,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.hold, self.expire, self.fail, self.malformed, self.dropped = hold, expire, fail, malformed, dropped
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.batches_created = self.uploads = self.retrievals = self.downloads = 0
        self._ids = itertools.count(1)
        self._state.routes = self._route

    async def _route(self, method: str, path: str, body: bytes, headers: dict, keep_alive: bool) -> bytes | None:
        def answer(status: int, payload: Any, content_type: str = "application/json") -> bytes:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            return _response(status, data, keep_alive=keep_alive, content_type=content_type)

        parts = path.removeprefix("/v1").strip("/").split("/")
        if method == "POST" and parts == ["files"]:
            return answer(200, self._upload(body, headers.get("content-type", "")))
        if method == "GET" and len(parts) == 3 and parts[0] == "files" and parts[2] == "content":
            if parts[1] not in self.files:
                return answer(404, _error_body(404, f"No such File object: {parts[1]}"))
            self.downloads += 1
            return answer(200, self.files[parts[1]], "application/octet-stream")
        if method == "POST" and parts == ["batches"]:
            return answer(*self._create(json.loads(body or b"{}")))
        if len(parts) >= 2 and parts[0] == "batches" and parts[1] in self.batches:
            batch = self.batches[parts[1]]
            if method == "POST" and parts[2:] == ["cancel"]:
                if batch["status"] in ("validating", "in_progress"):
                    batch.update(status="cancelled", cancelled_at=int(time.time()))
                return answer(200, batch)
            if method == "GET" and len(parts) == 2:
                self.retrievals += 1
                await self._advance(batch)
                return answer(200, batch)
        if parts and parts[0] in ("files", "batches"):
            return answer(404, _error_body(404, f"no such route: {method} {path}"))
        return None

    def _upload(self, body: bytes, content_type: str) -> dict:
        fields = _parts(body, content_type)
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = fields.get("file", b"")
        self.uploads += 1
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(self.files[file_id]),
            "created_at": int(time.time()),
            "filename": "batch.jsonl",
            "purpose": fields.get("purpose", b"").decode(),
            "status": "processed",
        }

    def _create(self, asked: dict) -> tuple[int, dict]:
        if asked.get("input_file_id") not in self.files:
            return 400, json.loads(_error_body(400, f"No such File object: {asked.get('input_file_id')}"))
        if asked.get("endpoint") != CHAT or asked.get("completion_window") != "24h":
            return 400, json.loads(_error_body(400, "endpoint must be /v1/chat/completions, completion_window 24h"))
        self.batches_created += 1
        now = int(time.time())
        batch = {
            "id": f"batch_{next(self._ids)}",
            "object": "batch",
            "endpoint": CHAT,
            "input_file_id": asked["input_file_id"],
            "completion_window": "24h",
            "status": "validating",
            "created_at": now,
            "expires_at": now + 86400,
            "metadata": asked.get("metadata"),
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
        }
        errors = self._invalid(self.files[asked["input_file_id"]])
        if errors:
            batch.update(status="failed", failed_at=now, errors={"object": "list", "data": errors})
        self.batches[batch["id"]] = batch
        return 200, batch

    def _invalid(self, content: bytes) -> list[dict]:
        """What OpenAI's validation would say of an input file: one error per bad line (none: it is valid)."""
        if self.fail:
            return [{"code": "invalid_request", "message": self.fail, "line": 1}]
        errors, seen, models = [], set(), set()
        for number, line in enumerate(content.decode().splitlines(), start=1):
            try:
                request = json.loads(line)
                problem = None
            except ValueError:
                request, problem = {}, "the line is not valid JSON"
            if problem is None and (request.get("method") != "POST" or request.get("url") != CHAT):
                problem = f"each request must be POST {CHAT}"
            if problem is None and request.get("custom_id") in seen:
                problem = f"the custom_id {request.get('custom_id')!r} is not unique"
            seen.add(request.get("custom_id"))
            models.add((request.get("body") or {}).get("model"))
            if problem:
                errors.append({"code": "invalid_request", "message": problem, "line": number})
        if len(models) > 1:
            errors.append({"code": "mixed_models", "message": "a batch's requests must use one model", "line": 1})
        return errors

    async def _advance(self, batch: dict) -> None:
        """A batch's next state: validated at its first retrieval, run at the next (unless held)."""
        if batch["status"] == "validating":
            lines = self.files[batch["input_file_id"]].decode().splitlines()
            batch.update(status="in_progress", in_progress_at=int(time.time()))
            batch["request_counts"]["total"] = len(lines)
        elif batch["status"] == "in_progress" and not self._held(batch):
            await self._run_batch(batch)

    def _held(self, batch: dict) -> bool:
        if isinstance(self.hold, bool):
            return self.hold
        return list(self.batches).index(batch["id"]) >= self.hold

    async def _run_batch(self, batch: dict) -> None:
        requests = [json.loads(line) for line in self.files[batch["input_file_id"]].decode().splitlines()]
        ran = requests[: len(requests) // 2] if self.expire else requests
        answers = await asyncio.gather(*(self._line(request) for request in ran))
        output = [json.dumps(line) for line, ok in answers if ok]
        errors = [json.dumps(line) for line, ok in answers if not ok]
        errors += [
            json.dumps(
                {
                    "id": f"batch_req_{next(self._ids)}",
                    "custom_id": request["custom_id"],
                    "response": None,
                    "error": {
                        "code": "batch_expired",
                        "message": "This request could not be executed before the completion window expired.",
                    },
                }
            )
            for request in requests[len(ran) :]
        ]
        output = ["{not json: a malformed line" for _ in output[: self.malformed]] + output[self.malformed :]
        output = output[: len(output) - self.dropped]
        now = int(time.time())
        batch["request_counts"].update(completed=sum(ok for _, ok in answers), failed=len(requests) - len(output))
        batch.update(status="expired" if self.expire else "completed", completed_at=now)
        if output:
            batch["output_file_id"] = self._file(output)
        if errors:
            batch["error_file_id"] = self._file(errors)

    def _file(self, lines: list[str]) -> str:
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = ("\n".join(lines) + "\n").encode()
        return file_id

    async def _line(self, request: dict) -> tuple[dict, bool]:
        """One request line answered by the chat server: its output line, and whether it succeeded."""
        state = self._state
        n = state.requests
        state.requests += 1
        raw, _ = await _answer(state, n, json.dumps(request["body"]).encode(), {}, _Never(), True)  # type: ignore[arg-type]
        status, body = _answered(raw)
        line = {
            "id": f"batch_req_{next(self._ids)}",
            "custom_id": request["custom_id"],
            "response": {"status_code": status, "request_id": f"req_{n}", "body": body},
            "error": None,
        }
        return line, status == 200 and isinstance(body, dict) and "choices" in body
