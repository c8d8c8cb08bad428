"""A persistent response cache in SQLite, so a repeated run costs no new calls.

The key hashes the model, the endpoint, the messages and every sampling setting;
secrets are never part of it (the caller passes no API key and no credentials here). WAL mode and a busy timeout
make it safe for many processes at once; within a process all access happens on
the event loop's thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

from ..errors import Option, OptionError, worded

CACHE_ENV = "SBPC_CACHE_DIR"


def default_path() -> Path:
    """$SBPC_CACHE_DIR, else $XDG_CACHE_HOME/sbpc, else ~/.cache/sbpc; file responses.sqlite."""
    base = os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sbpc"
    return Path(base) / "responses.sqlite"


def cache_key(model: str, messages: list[dict], settings: dict) -> str:
    blob = json.dumps([model, messages, settings], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class CacheError(OptionError):
    """The cache cannot be used (a file where its folder should be, a damaged or foreign database); the way out
    is named as the caller gives it (`cache=False` in Python, `--no-cache` on the command line)."""


class ResponseCache:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_path()
        fix = worded(f"set {CACHE_ENV} to another folder, or pass ", Option("cache=False", "--no-cache"))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.parent.is_dir():
                raise NotADirectoryError
        except OSError as exc:
            reason = "is a file" if isinstance(exc, (FileExistsError, NotADirectoryError)) else exc.strerror or exc
            raise CacheError(f"the response cache folder {self.path.parent} cannot be used ({reason}): ", fix) from None
        try:
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            columns = {row[1] for row in self.db.execute("PRAGMA table_info(responses)")}
        except sqlite3.Error as exc:
            raise CacheError(
                f"the response cache {self.path} is not a usable SQLite database ({exc}): delete it, ", fix
            ) from None
        if not {"key", "value"} <= columns:
            self.db.close()
            raise CacheError(
                f"the response cache {self.path} holds a table 'responses' of another program "
                f"(columns {', '.join(sorted(columns))}): delete it, ",
                fix,
            )

    def get(self, key: str) -> dict | None:
        """The stored reply, or None; an entry that does not read back is a miss, not an error."""
        row = self.db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        try:
            value = json.loads(row[0]) if row else None
        except (TypeError, ValueError):
            return None
        return value if isinstance(value, dict) and isinstance(value.get("text"), str) else None

    def put(self, key: str, value: dict) -> None:
        self.db.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def close(self) -> None:
        self.db.close()
